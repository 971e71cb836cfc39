// SPDX-License-Identifier: GPL-2.0-only
/* Strict JSON parsing (json.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/json.h>

int moem_json_parse(const char *buf, size_t len, uint64_t max, int depth, const char *what,
		    struct json_object **out)
{
	struct json_tokener *tok;
	struct json_object *obj;
	enum json_tokener_error jerr;
	size_t end;
	char *copy;

	*out = NULL;
	if (len > max || len > INT32_MAX - 1)
		return moem_errf(EFBIG, "%s: %zu bytes of JSON is more than moem reads", what, len);
	if (memchr(buf, 0, len))
		return moem_errf(EINVAL, "%s: NUL byte at offset %zu", what,
				 (size_t)((const char *)memchr(buf, 0, len) - buf));
	/* json-c needs the terminating NUL inside len to finish a bare number. */
	copy = malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, buf, len);
	copy[len] = 0;
	tok = json_tokener_new_ex(depth);
	if (!tok) {
		free(copy);
		return -ENOMEM;
	}
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	obj = json_tokener_parse_ex(tok, copy, (int)len + 1);
	jerr = json_tokener_get_error(tok);
	end = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	free(copy);
	if (!obj || jerr != json_tokener_success) {
		json_object_put(obj);
		if (jerr == json_tokener_continue || jerr == json_tokener_success)
			return moem_errf(EINVAL, "%s: JSON ends early (%zu bytes)", what, len);
		return moem_errf(EINVAL, "%s: bad JSON at byte %zu: %s", what,
				 end > len ? len : end, json_tokener_error_desc(jerr));
	}
	*out = obj;
	return 0;
}
