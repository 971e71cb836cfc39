// SPDX-License-Identifier: GPL-2.0-only
/*
 * Decoders (huggingface/tokenizers src/decoders): each step maps the list
 * of token strings to a new list, as decode_chain() does; the result is
 * joined. ByteLevel (GPT-2 byte map back to bytes, invalid UTF-8 replaced
 * as from_utf8_lossy does), Metaspace, ByteFallback (<0xXX> runs to
 * bytes), Fuse, Strip, Replace, Sequence.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>

#include "tok_int.h"

static const char fffd[] = "\xef\xbf\xbd";

#define PIECE(in, i) ((in)->text.p + (in)->v[i].off)

/* ByteLevel: every token's characters back to bytes, then one lossy string. */
static int dec_byte_level(struct tok_ctx *c, struct tok_pieces *in, struct tok_pieces *out)
{
	struct tok_buf *b = &c->tmp, *s = &c->pre;
	int ret = 0;

	b->n = 0;
	for (size_t i = 0; !ret && i < in->n; i++) {
		const char *t = PIECE(in, i);
		size_t len = in->v[i].len, start = b->n;

		for (size_t k = 0; !ret && k < len;) {
			size_t n;
			int byte = tok_cp_to_byte(moem_tok_utf8_get(t + k, &n));

			if (byte < 0) {
				/* Not a byte-level token (an added token): its own bytes. */
				b->n = start;
				ret = moem_tok_buf_put(b, t, len);
				break;
			}
			ret = moem_tok_buf_putc(b, (char)byte);
			k += n;
		}
	}
	if (!ret && c->raw)
		return moem_tok_pieces_add(out, b->p, b->n);
	s->n = 0;
	if (!ret)
		ret = moem_tok_utf8_lossy(s, (const unsigned char *)b->p, b->n);
	return ret ? ret : moem_tok_pieces_add(out, s->p, s->n);
}

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* "<0xAB>" -> 0xAB, as u8::from_str_radix(&t[3..5], 16) reads it; else -1. */
static int byte_token(const char *t, size_t len)
{
	int h, l;

	if (len != 6 || memcmp(t, "<0x", 3) || t[5] != '>')
		return -1;
	if (t[3] == '+')
		return hexval(t[4]);
	h = hexval(t[3]);
	l = hexval(t[4]);
	return h < 0 || l < 0 ? -1 : h * 16 + l;
}

static int flush_bytes(const struct tok_ctx *c, struct tok_buf *bytes, struct tok_pieces *out)
{
	int ret = 0;

	if (!bytes->n)
		return 0;
	if (c->raw || moem_tok_utf8_invalid_at(bytes->p, bytes->n) == bytes->n) {
		ret = moem_tok_pieces_add(out, bytes->p, bytes->n);
	} else {
		/* Not UTF-8: one U+FFFD per byte. */
		for (size_t i = 0; !ret && i < bytes->n; i++)
			ret = moem_tok_pieces_add(out, fffd, 3);
	}
	bytes->n = 0;
	return ret;
}

static int dec_byte_fallback(struct tok_ctx *c, struct tok_pieces *in, struct tok_pieces *out)
{
	struct tok_buf *bytes = &c->tmp;
	int ret = 0;

	bytes->n = 0;
	for (size_t i = 0; !ret && i < in->n; i++) {
		int b = byte_token(PIECE(in, i), in->v[i].len);

		if (b >= 0) {
			ret = moem_tok_buf_putc(bytes, (char)b);
			continue;
		}
		ret = flush_bytes(c, bytes, out);
		if (!ret)
			ret = moem_tok_pieces_add(out, PIECE(in, i), in->v[i].len);
	}
	return ret ? ret : flush_bytes(c, bytes, out);
}

static int dec_metaspace(const struct tok_dec *d, struct tok_ctx *c, struct tok_pieces *in,
			 struct tok_pieces *out)
{
	struct tok_buf *b = &c->tmp;
	int ret = 0;

	for (size_t i = 0; !ret && i < in->n; i++) {
		const char *t = PIECE(in, i);
		size_t len = in->v[i].len;

		b->n = 0;
		for (size_t k = 0; !ret && k < len;) {
			if (k + d->repl_len <= len && !memcmp(t + k, d->replacement, d->repl_len)) {
				/* The first token loses its replacement characters. */
				if (!(i == 0 && d->prepend_first))
					ret = moem_tok_buf_putc(b, ' ');
				k += d->repl_len;
				continue;
			}
			ret = moem_tok_buf_putc(b, t[k++]);
		}
		if (!ret)
			ret = moem_tok_pieces_add(out, b->p, b->n);
	}
	return ret;
}

static int dec_strip(const struct tok_dec *d, struct tok_pieces *in, struct tok_pieces *out)
{
	int ret = 0;

	for (size_t i = 0; !ret && i < in->n; i++) {
		const char *t = PIECE(in, i);
		size_t a = 0, z = in->v[i].len;

		for (uint32_t k = 0; k < d->start && z - a >= d->content_len &&
				     !memcmp(t + a, d->content, d->content_len);
		     k++)
			a += d->content_len;
		for (uint32_t k = 0; k < d->stop && z - a >= d->content_len &&
				     !memcmp(t + z - d->content_len, d->content, d->content_len);
		     k++)
			z -= d->content_len;
		ret = moem_tok_pieces_add(out, t + a, z - a);
	}
	return ret;
}

static int dec_replace(const struct tok_dec *d, struct tok_ctx *c, struct tok_pieces *in,
		       struct tok_pieces *out)
{
	struct tok_buf *b = &c->tmp;
	int ret = 0;

	for (size_t i = 0; !ret && i < in->n; i++) {
		const char *t = PIECE(in, i);
		size_t len = in->v[i].len, pos = 0, ms, me;

		b->n = 0;
		for (;;) {
			ret = moem_tok_pattern_next(&d->pat, c->md, t, len, pos, &ms, &me);
			if (ret <= 0)
				break;
			ret = moem_tok_buf_put(b, t + pos, ms - pos);
			if (!ret)
				ret = moem_tok_buf_put(b, d->content, d->content_len);
			if (ret)
				break;
			pos = me;
		}
		if (!ret)
			ret = moem_tok_buf_put(b, t + pos, len - pos);
		if (!ret)
			ret = moem_tok_pieces_add(out, b->p, b->n);
	}
	return ret;
}

static int dec_fuse(struct tok_pieces *in, struct tok_pieces *out)
{
	size_t off = out->text.n;
	int ret = moem_tok_pieces_add(out, "", 0);

	for (size_t i = 0; !ret && i < in->n; i++)
		ret = moem_tok_buf_put(&out->text, PIECE(in, i), in->v[i].len);
	if (!ret)
		out->v[out->n - 1].len = out->text.n - off;
	return ret;
}

static int dec_step(const struct tok_dec *d, struct tok_ctx *c, struct tok_pieces *in,
		    struct tok_pieces *out)
{
	moem_tok_pieces_reset(out);
	switch (d->kind) {
	case TOK_DEC_BYTELEVEL:
		return dec_byte_level(c, in, out);
	case TOK_DEC_BYTEFALLBACK:
		return dec_byte_fallback(c, in, out);
	case TOK_DEC_METASPACE:
		return dec_metaspace(d, c, in, out);
	case TOK_DEC_FUSE:
		return dec_fuse(in, out);
	case TOK_DEC_STRIP:
		return dec_strip(d, in, out);
	case TOK_DEC_REPLACE:
		return dec_replace(d, c, in, out);
	case TOK_DEC_SEQUENCE:
		break;
	}
	return -EINVAL;
}

int moem_tok_dec_apply(const struct tok_dec *d, struct tok_ctx *c, struct tok_pieces *in,
		       struct tok_buf *out)
{
	struct tok_pieces other = {0}, *a = in, *b = &other;
	int ret = 0;

	out->n = 0;
	if (d) {
		const struct tok_dec *const *items =
			d->kind == TOK_DEC_SEQUENCE ? (const struct tok_dec *const *)d->items : &d;
		size_t n = d->kind == TOK_DEC_SEQUENCE ? d->n_items : 1;

		for (size_t i = 0; !ret && i < n; i++) {
			struct tok_pieces *t;

			ret = dec_step(items[i], c, a, b);
			t = a;
			a = b;
			b = t;
		}
	}
	/* Joined: with "" after a decoder, with " " without one (as tokenizers). */
	for (size_t i = 0; !ret && i < a->n; i++) {
		if (!d && i)
			ret = moem_tok_buf_putc(out, ' ');
		if (!ret)
			ret = moem_tok_buf_put(out, PIECE(a, i), a->v[i].len);
	}
	if (!ret)
		ret = moem_tok_buf_cstr(out);
	/* Whichever of in and other is not in's storage is ours to free. */
	if (a != in)
		moem_tok_pieces_free(a);
	else
		moem_tok_pieces_free(b);
	return ret;
}

static int load_char(const char *s, size_t n, const char *what, char *dst, size_t *len)
{
	if (!n || n > 4 || tok_utf8_len((unsigned char)s[0]) != n)
		return moem_errf(EINVAL, "%s: must be one character", what);
	memcpy(dst, s, n);
	*len = n;
	return 0;
}

int moem_tok_dec_load(struct tok_dec **out, struct json_object *o)
{
	struct tok_dec *d;
	struct json_object *v;
	const char *type, *s;
	size_t n;
	int ret;

	*out = NULL;
	if (!o || json_object_is_type(o, json_type_null))
		return 0;
	ret = moem_tok_json_type(o, "decoder", &type);
	if (ret)
		return ret;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	if (!strcmp(type, "Sequence")) {
		d->kind = TOK_DEC_SEQUENCE;
		if (!json_object_object_get_ex(o, "decoders", &v) ||
		    !json_object_is_type(v, json_type_array)) {
			ret = moem_errf(EINVAL, "decoder Sequence: no \"decoders\" array");
			goto err_free;
		}
		d->items = calloc(json_object_array_length(v) + 1, sizeof(*d->items));
		if (!d->items) {
			ret = -ENOMEM;
			goto err_free;
		}
		for (size_t i = 0; i < json_object_array_length(v); i++) {
			ret = moem_tok_dec_load(&d->items[i], json_object_array_get_idx(v, i));
			if (!ret && !d->items[i])
				ret = moem_errf(EINVAL, "decoder Sequence: item %zu is null", i);
			if (ret)
				goto err_free;
			d->n_items++;
			if (d->items[i]->kind == TOK_DEC_SEQUENCE) {
				ret = moem_errf(ENOTSUP, "decoder: nested Sequence");
				goto err_free;
			}
		}
	} else if (!strcmp(type, "ByteLevel")) {
		d->kind = TOK_DEC_BYTELEVEL;
	} else if (!strcmp(type, "ByteFallback")) {
		d->kind = TOK_DEC_BYTEFALLBACK;
	} else if (!strcmp(type, "Fuse")) {
		d->kind = TOK_DEC_FUSE;
	} else if (!strcmp(type, "Metaspace")) {
		const char *scheme;
		bool legacy;

		d->kind = TOK_DEC_METASPACE;
		ret = moem_tok_json_str(o, "replacement", true, "decoder Metaspace", &s, &n);
		if (!ret)
			ret = load_char(s, n, "decoder Metaspace replacement", d->replacement,
					&d->repl_len);
		if (!ret)
			ret = moem_tok_json_str(o, "prepend_scheme", false, "decoder Metaspace",
						&scheme, NULL);
		if (!ret && scheme) {
			d->prepend_first = strcmp(scheme, "never") != 0;
		} else if (!ret) {
			ret = moem_tok_json_bool(o, "add_prefix_space", true, "decoder Metaspace",
						 &legacy);
			d->prepend_first = legacy;
		}
	} else if (!strcmp(type, "Strip")) {
		d->kind = TOK_DEC_STRIP;
		ret = moem_tok_json_str(o, "content", true, "decoder Strip", &s, &n);
		if (!ret) {
			char ch[8];

			ret = load_char(s, n, "decoder Strip content", ch, &d->content_len);
			d->content = ret ? NULL : strndup(ch, d->content_len);
			if (!ret && !d->content)
				ret = -ENOMEM;
		}
		if (!ret)
			ret = moem_tok_json_u32(o, "start", "decoder Strip", &d->start);
		if (!ret)
			ret = moem_tok_json_u32(o, "stop", "decoder Strip", &d->stop);
	} else if (!strcmp(type, "Replace")) {
		d->kind = TOK_DEC_REPLACE;
		ret = moem_tok_json_str(o, "content", true, "decoder Replace", &s, &n);
		if (!ret) {
			d->content = strndup(s, n);
			d->content_len = n;
			if (!d->content)
				ret = -ENOMEM;
		}
		if (!ret) {
			json_object_object_get_ex(o, "pattern", &v);
			ret = moem_tok_pattern_load(&d->pat, v, "decoder Replace");
		}
	} else {
		ret = moem_errf(ENOTSUP,
				"decoder \"%s\" is not supported (moem reads ByteLevel, Metaspace, "
				"ByteFallback, Fuse, Strip, Replace, Sequence)",
				type);
	}
	if (ret)
		goto err_free;
	*out = d;
	return 0;

err_free:
	moem_tok_dec_free(d);
	return ret;
}

void moem_tok_dec_free(struct tok_dec *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->n_items; i++)
		moem_tok_dec_free(d->items[i]);
	free(d->items);
	free(d->content);
	moem_tok_pattern_free(&d->pat);
	free(d);
}
