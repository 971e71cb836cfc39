// SPDX-License-Identifier: GPL-2.0-only
/* Strict JSON parsing and typed field access for the store (store_int.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>

#include "store_int.h"

int moem_store_json_parse(const char *buf, size_t len, int depth, const char *what,
			  struct json_object **out)
{
	struct json_tokener *tok;
	struct json_object *obj;
	enum json_tokener_error jerr;
	size_t end;
	char *copy;

	*out = NULL;
	if (len > STORE_JSON_PARSE_MAX)
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

static int get_field(struct json_object *o, const char *key, bool required, const char *what,
		     struct json_object **v)
{
	if (!json_object_object_get_ex(o, key, v) || !*v) {
		if (required)
			return moem_errf(EINVAL, "%s: missing \"%s\"", what, key);
		return -ENOENT;
	}
	return 0;
}

int moem_store_json_as_u64(struct json_object *v, uint64_t *out)
{
	if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0)
		return -EINVAL;
	*out = json_object_get_uint64(v);
	/* json-c saturates integers past 2^64 - 1: treat that value as too big. */
	if (*out == UINT64_MAX)
		return -ERANGE;
	return 0;
}

int moem_store_json_u64(struct json_object *o, const char *key, bool required, const char *what,
			uint64_t *out)
{
	struct json_object *v;
	int ret = get_field(o, key, required, what, &v);

	if (ret)
		return ret;
	if (moem_store_json_as_u64(v, out))
		return moem_errf(EINVAL, "%s: \"%s\" must be a non-negative integer, not %s", what,
				 key, json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
	return 0;
}

int moem_store_json_u32(struct json_object *o, const char *key, bool required, const char *what,
			uint32_t *out)
{
	uint64_t v;
	int ret = moem_store_json_u64(o, key, required, what, &v);

	if (ret)
		return ret;
	if (v > UINT32_MAX)
		return moem_errf(EINVAL, "%s: \"%s\" = %llu is too large", what, key,
				 (unsigned long long)v);
	*out = (uint32_t)v;
	return 0;
}

int moem_store_json_f64(struct json_object *o, const char *key, bool required, const char *what,
			double *out)
{
	struct json_object *v;
	int ret = get_field(o, key, required, what, &v);

	if (ret)
		return ret;
	if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
		return moem_errf(EINVAL, "%s: \"%s\" must be a number", what, key);
	*out = json_object_get_double(v);
	if (!isfinite(*out))
		return moem_errf(EINVAL, "%s: \"%s\" is not finite", what, key);
	return 0;
}

int moem_store_json_bool(struct json_object *o, const char *key, bool required, const char *what,
			 bool *out)
{
	struct json_object *v;
	int ret = get_field(o, key, required, what, &v);

	if (ret)
		return ret;
	if (!json_object_is_type(v, json_type_boolean))
		return moem_errf(EINVAL, "%s: \"%s\" must be true or false", what, key);
	*out = json_object_get_boolean(v);
	return 0;
}

int moem_store_json_str(struct json_object *o, const char *key, bool required, const char *what,
			const char **out)
{
	struct json_object *v;
	int ret = get_field(o, key, required, what, &v);

	if (ret)
		return ret;
	if (!json_object_is_type(v, json_type_string))
		return moem_errf(EINVAL, "%s: \"%s\" must be a string", what, key);
	*out = json_object_get_string(v);
	return 0;
}
