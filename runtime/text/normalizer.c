// SPDX-License-Identifier: GPL-2.0-only
/*
 * Normalizers (huggingface/tokenizers src/normalizers): NFC, NFD, NFKC,
 * NFKD, Lowercase, StripAccents, Strip, Prepend, Replace, Sequence.
 * Unicode normalization is libutf8proc's (Debian's libutf8proc, the
 * library Julia and PostgreSQL use): small, no data files, the same
 * composition tables as Rust's unicode-normalization.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <utf8proc.h>

#include <moem/error.h>

#include "tok_int.h"

static bool is_ascii(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] >= 0x80)
			return false;
	return true;
}

static int unicode_form(enum tok_norm_kind k, const char *s, size_t len, struct tok_buf *out)
{
	utf8proc_option_t opt = UTF8PROC_STABLE;
	utf8proc_uint8_t *dst = NULL;
	utf8proc_ssize_t n;
	int ret;

	/* ASCII is invariant under every form. */
	if (is_ascii(s, len))
		return moem_tok_buf_put(out, s, len);
	if (len > (size_t)SSIZE_MAX / 8)
		return -ENOMEM;
	switch (k) {
	case TOK_NORM_NFC:
		opt |= UTF8PROC_COMPOSE;
		break;
	case TOK_NORM_NFD:
		opt |= UTF8PROC_DECOMPOSE;
		break;
	case TOK_NORM_NFKC:
		opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
		break;
	default:
		opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
		break;
	}
	n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst, opt);
	if (n < 0)
		return n == UTF8PROC_ERROR_NOMEM
			       ? -ENOMEM
			       : moem_errf(EILSEQ, "normalizer: %s", utf8proc_errmsg(n));
	ret = moem_tok_buf_put(out, dst, (size_t)n);
	free(dst);
	return ret;
}

/* Lowercase as Rust's str::to_lowercase for all but the final-sigma rule. */
static int lowercase(const char *s, size_t len, struct tok_buf *out)
{
	for (size_t i = 0; i < len;) {
		size_t n;
		uint32_t cp = moem_tok_utf8_get(s + i, &n);
		char u[4];
		int ret;

		if (cp == 0x130) { /* İ -> i + combining dot above */
			ret = moem_tok_buf_put(out, "i\xcc\x87", 3);
		} else {
			cp = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
			ret = moem_tok_buf_put(out, u, moem_tok_utf8_put(cp, u));
		}
		if (ret)
			return ret;
		i += n;
	}
	return 0;
}

/* NFD, then drop nonspacing marks (what StripAccents does after an NFD normalizer). */
static int strip_accents(const char *s, size_t len, struct tok_buf *out)
{
	for (size_t i = 0; i < len;) {
		size_t n;
		uint32_t cp = moem_tok_utf8_get(s + i, &n);
		int ret = 0;

		if (utf8proc_category((utf8proc_int32_t)cp) != UTF8PROC_CATEGORY_MN)
			ret = moem_tok_buf_put(out, s + i, n);
		if (ret)
			return ret;
		i += n;
	}
	return 0;
}

static int strip(const struct tok_norm *nm, const char *s, size_t len, struct tok_buf *out)
{
	size_t a = 0, b = len;

	while (nm->left && a < b) {
		size_t n;

		if (!moem_tok_is_space(moem_tok_utf8_get(s + a, &n)))
			break;
		a += n;
	}
	while (nm->right && b > a) {
		size_t p = b - 1, n;

		while (p > a && ((unsigned char)s[p] & 0xc0) == 0x80)
			p--;
		if (!moem_tok_is_space(moem_tok_utf8_get(s + p, &n)))
			break;
		b = p;
	}
	return moem_tok_buf_put(out, s + a, b - a);
}

static int replace(const struct tok_norm *nm, struct tok_ctx *c, const char *s, size_t len,
		   struct tok_buf *out)
{
	size_t pos = 0, ms, me;
	int ret;

	for (;;) {
		ret = moem_tok_pattern_next(&nm->pat, c->md, s, len, pos, &ms, &me);
		if (ret < 0)
			return ret;
		if (!ret)
			break;
		ret = moem_tok_buf_put(out, s + pos, ms - pos);
		if (!ret)
			ret = moem_tok_buf_put(out, nm->content, nm->content_len);
		if (ret)
			return ret;
		pos = me;
	}
	return moem_tok_buf_put(out, s + pos, len - pos);
}

static int apply_one(const struct tok_norm *nm, struct tok_ctx *c, const char *s, size_t len,
		     struct tok_buf *out)
{
	switch (nm->kind) {
	case TOK_NORM_NFC:
	case TOK_NORM_NFD:
	case TOK_NORM_NFKC:
	case TOK_NORM_NFKD:
		return unicode_form(nm->kind, s, len, out);
	case TOK_NORM_LOWERCASE:
		return lowercase(s, len, out);
	case TOK_NORM_STRIP_ACCENTS:
		return strip_accents(s, len, out);
	case TOK_NORM_STRIP:
		return strip(nm, s, len, out);
	case TOK_NORM_PREPEND: {
		/* tokenizers prepends only to a non-empty string. */
		int ret = len ? moem_tok_buf_put(out, nm->content, nm->content_len) : 0;

		return ret ? ret : moem_tok_buf_put(out, s, len);
	}
	case TOK_NORM_REPLACE:
		return replace(nm, c, s, len, out);
	case TOK_NORM_SEQUENCE:
		break;
	}
	return -EINVAL;
}

int moem_tok_norm_apply(const struct tok_norm *nm, struct tok_ctx *c, const char *s, size_t len,
			struct tok_buf *out)
{
	struct tok_buf a = {0}, b = {0};
	int ret = 0;

	out->n = 0;
	if (!nm)
		return moem_tok_buf_put(out, s, len);
	if (nm->kind != TOK_NORM_SEQUENCE)
		return apply_one(nm, c, s, len, out);
	/* A sequence: each step reads the previous step's output. */
	ret = moem_tok_buf_put(&a, s, len);
	for (size_t i = 0; !ret && i < nm->n_items; i++) {
		struct tok_buf t;

		b.n = 0;
		ret = moem_tok_norm_apply(nm->items[i], c, a.p, a.n, &b);
		t = a;
		a = b;
		b = t;
	}
	if (!ret)
		ret = moem_tok_buf_put(out, a.p, a.n);
	moem_tok_buf_free(&a);
	moem_tok_buf_free(&b);
	return ret;
}

static int load_content(struct tok_norm *nm, struct json_object *o, const char *key,
			const char *what)
{
	const char *s;
	size_t n;
	int ret = moem_tok_json_str(o, key, true, what, &s, &n);

	if (ret)
		return ret;
	nm->content = strndup(s, n);
	nm->content_len = n;
	return nm->content ? 0 : -ENOMEM;
}

int moem_tok_norm_load(struct tok_norm **out, struct json_object *o)
{
	static const struct {
		const char *name;
		enum tok_norm_kind kind;
	} kinds[] = {
		{"Sequence", TOK_NORM_SEQUENCE}, {"NFC", TOK_NORM_NFC},
		{"NFD", TOK_NORM_NFD},		 {"NFKC", TOK_NORM_NFKC},
		{"NFKD", TOK_NORM_NFKD},	 {"Lowercase", TOK_NORM_LOWERCASE},
		{"Prepend", TOK_NORM_PREPEND},	 {"Replace", TOK_NORM_REPLACE},
		{"Strip", TOK_NORM_STRIP},	 {"StripAccents", TOK_NORM_STRIP_ACCENTS},
	};
	struct tok_norm *nm;
	const char *type;
	struct json_object *v;
	size_t i;
	int ret;

	*out = NULL;
	if (!o || json_object_is_type(o, json_type_null))
		return 0;
	ret = moem_tok_json_type(o, "normalizer", &type);
	if (ret)
		return ret;
	for (i = 0; i < MOEM_ARRAY_SIZE(kinds); i++)
		if (!strcmp(kinds[i].name, type))
			break;
	if (i == MOEM_ARRAY_SIZE(kinds))
		return moem_errf(
			ENOTSUP,
			"normalizer \"%s\" is not supported (moem reads NFC, NFD, NFKC, "
			"NFKD, Lowercase, StripAccents, Strip, Prepend, Replace, Sequence)",
			type);
	nm = calloc(1, sizeof(*nm));
	if (!nm)
		return -ENOMEM;
	nm->kind = kinds[i].kind;
	switch (nm->kind) {
	case TOK_NORM_SEQUENCE:
		if (!json_object_object_get_ex(o, "normalizers", &v) ||
		    !json_object_is_type(v, json_type_array)) {
			ret = moem_errf(EINVAL, "normalizer Sequence: no \"normalizers\" array");
			break;
		}
		nm->items = calloc(json_object_array_length(v) + 1, sizeof(*nm->items));
		if (!nm->items) {
			ret = -ENOMEM;
			break;
		}
		for (i = 0; !ret && i < json_object_array_length(v); i++) {
			ret = moem_tok_norm_load(&nm->items[i], json_object_array_get_idx(v, i));
			if (!ret && !nm->items[i])
				ret = moem_errf(EINVAL, "normalizer Sequence: item %zu is null", i);
			if (!ret)
				nm->n_items++;
		}
		break;
	case TOK_NORM_PREPEND:
		ret = load_content(nm, o, "prepend", "normalizer Prepend");
		break;
	case TOK_NORM_REPLACE:
		ret = load_content(nm, o, "content", "normalizer Replace");
		if (!ret) {
			json_object_object_get_ex(o, "pattern", &v);
			ret = moem_tok_pattern_load(&nm->pat, v, "normalizer Replace");
		}
		break;
	case TOK_NORM_STRIP:
		ret = moem_tok_json_bool(o, "strip_left", false, "normalizer Strip", &nm->left);
		if (!ret)
			ret = moem_tok_json_bool(o, "strip_right", false, "normalizer Strip",
						 &nm->right);
		break;
	default:
		break;
	}
	if (ret) {
		moem_tok_norm_free(nm);
		return ret;
	}
	*out = nm;
	return 0;
}

void moem_tok_norm_free(struct tok_norm *nm)
{
	if (!nm)
		return;
	for (size_t i = 0; i < nm->n_items; i++)
		moem_tok_norm_free(nm->items[i]);
	free(nm->items);
	free(nm->content);
	moem_tok_pattern_free(&nm->pat);
	free(nm);
}
