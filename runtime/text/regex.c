// SPDX-License-Identifier: GPL-2.0-only
/*
 * The patterns of tokenizer.json (Split, Replace) on libpcre2-8 with UTF
 * and UCP, so \p{L}, \s and (?i:...) mean what Oniguruma gives
 * huggingface/tokenizers. Compiled once with the JIT where the system
 * allows it; matched without re-checking UTF-8 (the input was checked).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>

#include "tok_int.h"

int moem_tok_regex_compile(struct tok_regex *re, const char *pattern, size_t len, const char *what)
{
	PCRE2_SIZE erroff;
	int err;

	re->src = strndup(pattern, len);
	if (!re->src)
		return -ENOMEM;
	re->code =
		pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | PCRE2_UCP, &err, &erroff, NULL);
	if (!re->code) {
		PCRE2_UCHAR msg[160];

		pcre2_get_error_message(err, msg, sizeof(msg));
		free(re->src);
		re->src = NULL;
		return moem_errf(EINVAL, "%s: regex does not compile at offset %zu: %s", what,
				 (size_t)erroff, (const char *)msg);
	}
	/* The JIT is an optimisation: without it (no executable memory) matching still works. */
	pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);
	return 0;
}

void moem_tok_regex_free(struct tok_regex *re)
{
	pcre2_code_free(re->code);
	free(re->src);
	memset(re, 0, sizeof(*re));
}

int moem_tok_regex_next(const struct tok_regex *re, pcre2_match_data *md, const char *s, size_t len,
			size_t start, size_t *ms, size_t *me)
{
	while (start < len) {
		PCRE2_SIZE *ov;
		int rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, start, PCRE2_NO_UTF_CHECK, md,
				     NULL);

		if (rc == PCRE2_ERROR_NOMATCH)
			return 0;
		if (rc < 0) {
			PCRE2_UCHAR msg[160];

			pcre2_get_error_message(rc, msg, sizeof(msg));
			return moem_errf(EINVAL, "regex %.60s: %s", re->src, (const char *)msg);
		}
		ov = pcre2_get_ovector_pointer(md);
		if (ov[1] > ov[0]) {
			*ms = ov[0];
			*me = ov[1];
			return 1;
		}
		/* An empty match: look again from the next character. */
		start = ov[0] + tok_utf8_len((unsigned char)s[ov[0] < len ? ov[0] : len - 1]);
	}
	return 0;
}

int moem_tok_pattern_load(struct tok_pattern *p, struct json_object *o, const char *what)
{
	struct json_object *v;

	memset(p, 0, sizeof(*p));
	if (!o || !json_object_is_type(o, json_type_object))
		return moem_errf(EINVAL, "%s: \"pattern\" is not an object", what);
	if (json_object_object_get_ex(o, "Regex", &v) && v) {
		if (!json_object_is_type(v, json_type_string))
			return moem_errf(EINVAL, "%s: \"Regex\" is not a string", what);
		p->is_regex = true;
		return moem_tok_regex_compile(&p->re, json_object_get_string(v),
					      (size_t)json_object_get_string_len(v), what);
	}
	if (json_object_object_get_ex(o, "String", &v) && v) {
		if (!json_object_is_type(v, json_type_string))
			return moem_errf(EINVAL, "%s: \"String\" is not a string", what);
		p->len = (size_t)json_object_get_string_len(v);
		p->str = malloc(p->len + 1);
		if (!p->str)
			return -ENOMEM;
		memcpy(p->str, json_object_get_string(v), p->len + 1);
		return 0;
	}
	return moem_errf(EINVAL, "%s: a pattern is {\"String\": ...} or {\"Regex\": ...}", what);
}

void moem_tok_pattern_free(struct tok_pattern *p)
{
	if (p->is_regex)
		moem_tok_regex_free(&p->re);
	free(p->str);
	memset(p, 0, sizeof(*p));
}

int moem_tok_pattern_next(const struct tok_pattern *p, pcre2_match_data *md, const char *s,
			  size_t len, size_t start, size_t *ms, size_t *me)
{
	const char *f;

	if (p->is_regex)
		return moem_tok_regex_next(&p->re, md, s, len, start, ms, me);
	if (!p->len || start >= len)
		return 0;
	f = memmem(s + start, len - start, p->str, p->len);
	if (!f)
		return 0;
	*ms = (size_t)(f - s);
	*me = *ms + p->len;
	return 1;
}
