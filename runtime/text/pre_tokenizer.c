// SPDX-License-Identifier: GPL-2.0-only
/*
 * Pre-tokenizers (huggingface/tokenizers src/pre_tokenizers): Split (the
 * file's regex and split behaviour), ByteLevel (GPT-2's byte map, its
 * regex optional), Metaspace, Digits, Punctuation, Whitespace,
 * WhitespaceSplit, Sequence. A stage turns a list of pieces into a finer
 * list; empty pieces are dropped as tokenizers drops them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <utf8proc.h>

#include <moem/error.h>

#include "tok_int.h"

/* GPT-2's pattern, what ByteLevel splits with when use_regex is set. */
static const char gpt2_re[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int seg_add(struct tok_ctx *c, size_t s, size_t e, bool m)
{
	if (c->seg_n == c->seg_cap) {
		size_t cap = c->seg_cap ? c->seg_cap * 2 : 64;
		struct tok_seg *v = realloc(c->seg, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		c->seg = v;
		c->seg_cap = cap;
	}
	c->seg[c->seg_n].s = s;
	c->seg[c->seg_n].e = e;
	c->seg[c->seg_n].m = m;
	c->seg_n++;
	return 0;
}

/* Segments of s: the regex's matches and the gaps between them. */
static int find_regex(const struct tok_pattern *pat, struct tok_ctx *c, const char *s, size_t len)
{
	size_t prev = 0, ms, me;
	int ret;

	for (;;) {
		ret = moem_tok_pattern_next(pat, c->md, s, len, prev, &ms, &me);
		if (ret < 0)
			return ret;
		if (!ret)
			break;
		if (ms > prev && (ret = seg_add(c, prev, ms, false)))
			return ret;
		if ((ret = seg_add(c, ms, me, true)))
			return ret;
		prev = me;
	}
	return prev < len ? seg_add(c, prev, len, false) : 0;
}

enum char_class { CC_DIGIT, CC_PUNCT, CC_SPACE };

static bool char_in(enum char_class cc, uint32_t cp)
{
	utf8proc_category_t cat;

	if (cc == CC_SPACE)
		return moem_tok_is_space(cp);
	cat = utf8proc_category((utf8proc_int32_t)cp);
	if (cc == CC_DIGIT) /* Rust's char::is_numeric */
		return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL ||
		       cat == UTF8PROC_CATEGORY_NO;
	/* char::is_ascii_punctuation || is_punctuation */
	if (cp < 0x80)
		return (cp >= 0x21 && cp <= 0x2f) || (cp >= 0x3a && cp <= 0x40) ||
		       (cp >= 0x5b && cp <= 0x60) || (cp >= 0x7b && cp <= 0x7e);
	return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

/* Each character of the class is a match of its own. */
static int find_chars(enum char_class cc, struct tok_ctx *c, const char *s, size_t len)
{
	size_t prev = 0;
	int ret;

	for (size_t i = 0; i < len;) {
		size_t n;
		uint32_t cp = moem_tok_utf8_get(s + i, &n);

		if (char_in(cc, cp)) {
			if (i > prev && (ret = seg_add(c, prev, i, false)))
				return ret;
			if ((ret = seg_add(c, i, i + n, true)))
				return ret;
			prev = i + n;
		}
		i += n;
	}
	return prev < len ? seg_add(c, prev, len, false) : 0;
}

/* Turn c->seg into pieces of out as tokenizers' SplitDelimiterBehavior does. */
static int emit(struct tok_ctx *c, enum tok_split_behavior b, bool invert, const char *s,
		struct tok_pieces *out)
{
	struct tok_seg *v = c->seg;
	size_t n = c->seg_n, k = 0;
	bool prev = false;

	if (invert)
		for (size_t i = 0; i < n; i++)
			v[i].m = !v[i].m;
	switch (b) {
	case TOK_SPLIT_ISOLATED:
		k = n;
		break;
	case TOK_SPLIT_REMOVED:
		for (size_t i = 0; i < n; i++)
			if (!v[i].m)
				v[k++] = v[i];
		break;
	case TOK_SPLIT_MERGED_PREV:
		for (size_t i = 0; i < n; i++) {
			if (v[i].m && !prev && k)
				v[k - 1].e = v[i].e;
			else
				v[k++] = v[i];
			prev = v[i].m;
		}
		break;
	case TOK_SPLIT_CONTIGUOUS:
		for (size_t i = 0; i < n; i++) {
			if (v[i].m == prev && k)
				v[k - 1].e = v[i].e;
			else
				v[k++] = v[i];
			prev = v[i].m;
		}
		break;
	case TOK_SPLIT_MERGED_NEXT:
		/* Walk backwards, then the kept segments are v[n - k .. n). */
		for (size_t i = n; i-- > 0;) {
			bool m = v[i].m;

			if (m && !prev && k)
				v[n - k].s = v[i].s;
			else
				v[n - ++k] = v[i];
			prev = m;
		}
		memmove(v, v + n - k, k * sizeof(*v));
		break;
	}
	for (size_t i = 0; i < k; i++) {
		int ret;

		if (v[i].e == v[i].s)
			continue;
		ret = moem_tok_pieces_add(out, s + v[i].s, v[i].e - v[i].s);
		if (ret)
			return ret;
	}
	return 0;
}

static int byte_level(struct tok_ctx *c, const char *s, size_t len, bool prefix,
		      struct tok_pieces *out)
{
	struct tok_buf *t = &c->tmp;

	t->n = 0;
	if (prefix) {
		char u[4];
		int ret = moem_tok_buf_put(t, u, moem_tok_utf8_put(tok_byte_to_cp(' '), u));

		if (ret)
			return ret;
	}
	for (size_t i = 0; i < len; i++) {
		char u[4];
		int ret = moem_tok_buf_put(
			t, u, moem_tok_utf8_put(tok_byte_to_cp((unsigned char)s[i]), u));

		if (ret)
			return ret;
	}
	return t->n ? moem_tok_pieces_add(out, t->p, t->n) : 0;
}

/* Replace every ' ' with the replacement, prepend one as the scheme says. */
static int metaspace(const struct tok_pretok *p, struct tok_ctx *c, const char *s, size_t len,
		     bool first, struct tok_pieces *out)
{
	struct tok_buf *t = &c->tmp;
	int ret = 0;

	t->n = 0;
	if (p->prepend == TOK_PREPEND_ALWAYS || (p->prepend == TOK_PREPEND_FIRST && first))
		if (!(len >= 1 && s[0] == ' ') &&
		    !(len >= p->repl_len && !memcmp(s, p->replacement, p->repl_len)))
			ret = moem_tok_buf_put(t, p->replacement, p->repl_len);
	for (size_t i = 0; !ret && i < len; i++)
		ret = s[i] == ' ' ? moem_tok_buf_put(t, p->replacement, p->repl_len)
				  : moem_tok_buf_putc(t, s[i]);
	if (ret)
		return ret;
	if (!p->split)
		return t->n ? moem_tok_pieces_add(out, t->p, t->n) : 0;
	/* Split before each replacement character (MergedWithNext). */
	{
		size_t start = 0;

		for (size_t i = 1; i + p->repl_len <= t->n; i++) {
			if (memcmp(t->p + i, p->replacement, p->repl_len))
				continue;
			ret = moem_tok_pieces_add(out, t->p + start, i - start);
			if (ret)
				return ret;
			start = i;
		}
		return t->n > start ? moem_tok_pieces_add(out, t->p + start, t->n - start) : 0;
	}
}

static int apply_piece(const struct tok_pretok *p, struct tok_ctx *c, bool first, const char *s,
		       size_t len, struct tok_pieces *out)
{
	int ret;

	c->seg_n = 0;
	switch (p->kind) {
	case TOK_PRE_SPLIT:
		ret = find_regex(&p->pat, c, s, len);
		return ret ? ret : emit(c, p->behavior, p->invert, s, out);
	case TOK_PRE_DIGITS:
		ret = find_chars(CC_DIGIT, c, s, len);
		return ret ? ret
			   : emit(c,
				  p->individual_digits ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS,
				  false, s, out);
	case TOK_PRE_PUNCTUATION:
		ret = find_chars(CC_PUNCT, c, s, len);
		return ret ? ret : emit(c, p->behavior, false, s, out);
	case TOK_PRE_WHITESPACE_SPLIT:
		ret = find_chars(CC_SPACE, c, s, len);
		return ret ? ret : emit(c, TOK_SPLIT_REMOVED, false, s, out);
	case TOK_PRE_METASPACE:
		return metaspace(p, c, s, len, first, out);
	case TOK_PRE_BYTELEVEL:
	case TOK_PRE_SEQUENCE:
		break;
	}
	return -EINVAL;
}

/* ByteLevel: optional prefix space and GPT-2 split, then the byte map, per piece. */
static int apply_byte_level(const struct tok_pretok *p, struct tok_ctx *c, struct tok_pieces *in,
			    struct tok_pieces *out)
{
	for (size_t i = 0; i < in->n; i++) {
		const char *s = in->text.p + in->v[i].off;
		size_t len = in->v[i].len;
		bool prefix = p->add_prefix_space && !(len && s[0] == ' ');
		size_t k = 0;
		int ret;

		if (!p->use_regex) {
			ret = byte_level(c, s, len, prefix, out);
			if (ret)
				return ret;
			continue;
		}
		if (prefix) {
			/* The regex must see the space: split " " + s. */
			struct tok_buf *t = &c->pre;

			t->n = 0;
			ret = moem_tok_buf_putc(t, ' ');
			if (!ret)
				ret = moem_tok_buf_put(t, s, len);
			if (ret)
				return ret;
			s = t->p;
			len = t->n;
		}
		c->seg_n = 0;
		ret = find_regex(&p->pat, c, s, len);
		if (ret)
			return ret;
		/* Isolated: every segment is a piece. */
		for (k = 0; k < c->seg_n; k++) {
			ret = byte_level(c, s + c->seg[k].s, c->seg[k].e - c->seg[k].s, false, out);
			if (ret)
				return ret;
		}
	}
	return 0;
}

int moem_tok_pretok_apply(const struct tok_pretok *p, struct tok_ctx *c, bool first,
			  struct tok_pieces *in, struct tok_pieces *out)
{
	moem_tok_pieces_reset(out);
	if (p->kind == TOK_PRE_BYTELEVEL)
		return apply_byte_level(p, c, in, out);
	for (size_t i = 0; i < in->n; i++) {
		int ret = apply_piece(p, c, first && i == 0, in->text.p + in->v[i].off,
				      in->v[i].len, out);

		if (ret)
			return ret;
	}
	return 0;
}

int moem_tok_pretok_run(const struct tok_pretok *p, struct tok_ctx *c, bool first, const char *s,
			size_t len, struct tok_pieces **result)
{
	struct tok_pieces *in = &c->a, *out = &c->b;
	int ret;

	moem_tok_pieces_reset(in);
	ret = moem_tok_pieces_add(in, s, len);
	if (ret)
		return ret;
	if (p) {
		const struct tok_pretok *const *items =
			p->kind == TOK_PRE_SEQUENCE ? (const struct tok_pretok *const *)p->items
						    : &p;
		size_t n = p->kind == TOK_PRE_SEQUENCE ? p->n_items : 1;

		for (size_t i = 0; i < n; i++) {
			struct tok_pieces *t;

			ret = moem_tok_pretok_apply(items[i], c, first, in, out);
			if (ret)
				return ret;
			t = in;
			in = out;
			out = t;
		}
	}
	*result = in;
	return 0;
}

static int load_behavior(struct json_object *o, const char *what, enum tok_split_behavior *b)
{
	static const char *const names[] = {
		[TOK_SPLIT_REMOVED] = "Removed",
		[TOK_SPLIT_ISOLATED] = "Isolated",
		[TOK_SPLIT_MERGED_PREV] = "MergedWithPrevious",
		[TOK_SPLIT_MERGED_NEXT] = "MergedWithNext",
		[TOK_SPLIT_CONTIGUOUS] = "Contiguous",
	};
	const char *s;
	int ret = moem_tok_json_str(o, "behavior", true, what, &s, NULL);

	if (ret)
		return ret;
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(names); i++)
		if (!strcmp(names[i], s)) {
			*b = (enum tok_split_behavior)i;
			return 0;
		}
	return moem_errf(EINVAL, "%s: unknown behavior \"%s\"", what, s);
}

static int load_metaspace(struct tok_pretok *p, struct json_object *o)
{
	const char *s, *scheme;
	size_t n;
	bool legacy_prefix;
	int ret = moem_tok_json_str(o, "replacement", true, "pre-tokenizer Metaspace", &s, &n);

	if (ret)
		return ret;
	if (!n || n > 4 || tok_utf8_len((unsigned char)s[0]) != n)
		return moem_errf(EINVAL,
				 "pre-tokenizer Metaspace: replacement must be one character");
	memcpy(p->replacement, s, n);
	p->repl_len = n;
	ret = moem_tok_json_bool(o, "split", true, "pre-tokenizer Metaspace", &p->split);
	if (!ret)
		ret = moem_tok_json_str(o, "prepend_scheme", false, "pre-tokenizer Metaspace",
					&scheme, NULL);
	if (ret)
		return ret;
	if (!scheme) {
		/* Files before tokenizers 0.19 say add_prefix_space instead. */
		ret = moem_tok_json_bool(o, "add_prefix_space", true, "pre-tokenizer Metaspace",
					 &legacy_prefix);
		p->prepend = legacy_prefix ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
		return ret;
	}
	if (!strcmp(scheme, "always"))
		p->prepend = TOK_PREPEND_ALWAYS;
	else if (!strcmp(scheme, "never"))
		p->prepend = TOK_PREPEND_NEVER;
	else if (!strcmp(scheme, "first"))
		p->prepend = TOK_PREPEND_FIRST;
	else
		return moem_errf(EINVAL, "pre-tokenizer Metaspace: unknown prepend_scheme \"%s\"",
				 scheme);
	return 0;
}

int moem_tok_pretok_load(struct tok_pretok **out, struct json_object *o)
{
	struct tok_pretok *p;
	struct json_object *v;
	const char *type;
	int ret;

	*out = NULL;
	if (!o || json_object_is_type(o, json_type_null))
		return 0;
	ret = moem_tok_json_type(o, "pre_tokenizer", &type);
	if (ret)
		return ret;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	if (!strcmp(type, "Sequence")) {
		p->kind = TOK_PRE_SEQUENCE;
		if (!json_object_object_get_ex(o, "pretokenizers", &v) ||
		    !json_object_is_type(v, json_type_array)) {
			ret = moem_errf(EINVAL,
					"pre-tokenizer Sequence: no \"pretokenizers\" array");
			goto err_free;
		}
		p->items = calloc(json_object_array_length(v) + 1, sizeof(*p->items));
		if (!p->items) {
			ret = -ENOMEM;
			goto err_free;
		}
		for (size_t i = 0; i < json_object_array_length(v); i++) {
			ret = moem_tok_pretok_load(&p->items[i], json_object_array_get_idx(v, i));
			if (!ret && !p->items[i])
				ret = moem_errf(EINVAL, "pre-tokenizer Sequence: item %zu is null",
						i);
			if (ret)
				goto err_free;
			if (p->items[i]->kind == TOK_PRE_SEQUENCE) {
				ret = moem_errf(ENOTSUP, "pre-tokenizer: nested Sequence");
				p->n_items++;
				goto err_free;
			}
			p->n_items++;
		}
	} else if (!strcmp(type, "ByteLevel")) {
		p->kind = TOK_PRE_BYTELEVEL;
		ret = moem_tok_json_bool(o, "add_prefix_space", true, "pre-tokenizer ByteLevel",
					 &p->add_prefix_space);
		if (!ret)
			ret = moem_tok_json_bool(o, "use_regex", true, "pre-tokenizer ByteLevel",
						 &p->use_regex);
		if (!ret && p->use_regex)
			ret = moem_tok_regex_compile(&p->pat.re, gpt2_re, sizeof(gpt2_re) - 1,
						     "pre-tokenizer ByteLevel");
		p->pat.is_regex = p->use_regex && !ret;
	} else if (!strcmp(type, "Split")) {
		p->kind = TOK_PRE_SPLIT;
		json_object_object_get_ex(o, "pattern", &v);
		ret = moem_tok_pattern_load(&p->pat, v, "pre-tokenizer Split");
		if (!ret)
			ret = load_behavior(o, "pre-tokenizer Split", &p->behavior);
		if (!ret)
			ret = moem_tok_json_bool(o, "invert", false, "pre-tokenizer Split",
						 &p->invert);
	} else if (!strcmp(type, "Metaspace")) {
		p->kind = TOK_PRE_METASPACE;
		ret = load_metaspace(p, o);
	} else if (!strcmp(type, "Digits")) {
		p->kind = TOK_PRE_DIGITS;
		ret = moem_tok_json_bool(o, "individual_digits", false, "pre-tokenizer Digits",
					 &p->individual_digits);
	} else if (!strcmp(type, "Punctuation")) {
		p->kind = TOK_PRE_PUNCTUATION;
		p->behavior = TOK_SPLIT_ISOLATED;
		if (json_object_object_get_ex(o, "behavior", &v))
			ret = load_behavior(o, "pre-tokenizer Punctuation", &p->behavior);
	} else if (!strcmp(type, "WhitespaceSplit")) {
		p->kind = TOK_PRE_WHITESPACE_SPLIT;
	} else if (!strcmp(type, "Whitespace")) {
		static const char ws_re[] = "\\w+|[^\\w\\s]+";

		/* tokenizers: split on the inverse of this pattern, removing it. */
		p->kind = TOK_PRE_SPLIT;
		p->behavior = TOK_SPLIT_REMOVED;
		p->invert = true;
		p->pat.is_regex = true;
		ret = moem_tok_regex_compile(&p->pat.re, ws_re, sizeof(ws_re) - 1,
					     "pre-tokenizer Whitespace");
		if (ret)
			p->pat.is_regex = false;
	} else {
		ret = moem_errf(ENOTSUP,
				"pre-tokenizer \"%s\" is not supported (moem reads ByteLevel, "
				"Split, Metaspace, Digits, Punctuation, Whitespace, "
				"WhitespaceSplit, Sequence)",
				type);
	}
	if (ret)
		goto err_free;
	*out = p;
	return 0;

err_free:
	moem_tok_pretok_free(p);
	return ret;
}

void moem_tok_pretok_free(struct tok_pretok *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n_items; i++)
		moem_tok_pretok_free(p->items[i]);
	free(p->items);
	moem_tok_pattern_free(&p->pat);
	free(p);
}
