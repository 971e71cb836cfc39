// SPDX-License-Identifier: GPL-2.0-only
/*
 * Encode and decode (huggingface/tokenizers TokenizerImpl::encode_single_
 * sequence and decode): added tokens out of the raw text, normalizer,
 * added tokens out of the normalized text, pre-tokenizer, BPE, and the
 * post-processor; ids back through the decoder chain.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>

#include "tok_int.h"

/* Matches hold the whole pattern and a few groups; more groups are not read. */
#define TOK_MATCH_PAIRS 32

int moem_tok_ctx_init(struct tok_ctx *c)
{
	memset(c, 0, sizeof(*c));
	c->md = pcre2_match_data_create(TOK_MATCH_PAIRS, NULL);
	return c->md ? 0 : -ENOMEM;
}

void moem_tok_ctx_free(struct tok_ctx *c)
{
	pcre2_match_data_free(c->md);
	moem_tok_pieces_free(&c->a);
	moem_tok_pieces_free(&c->b);
	moem_tok_buf_free(&c->norm);
	moem_tok_buf_free(&c->tmp);
	moem_tok_buf_free(&c->pre);
	free(c->seg);
	free(c->sym);
	free(c->heap);
	memset(c, 0, sizeof(*c));
}

/* Pre-tokenize and BPE one piece of normalized text. */
static int encode_text(const struct moem_tokenizer *t, struct tok_ctx *c, bool first, const char *s,
		       size_t len, struct moem_tok_ids *ids)
{
	struct tok_pieces *pieces;
	int ret = moem_tok_pretok_run(t->pre, c, first, s, len, &pieces);

	for (size_t i = 0; !ret && i < pieces->n; i++)
		ret = moem_tok_bpe_encode(&t->bpe, c, pieces->text.p + pieces->v[i].off,
					  pieces->v[i].len, ids);
	return ret;
}

static int encode(const struct moem_tokenizer *t, struct tok_ctx *c, const char *text, size_t len,
		  unsigned flags, struct moem_tok_ids *ids)
{
	bool skip = flags & MOEM_TOK_SPLIT_SPECIAL;
	struct tok_splits raw = {0}, norm = {0};
	struct tok_buf nbuf = {0};
	int ret;

	ret = moem_tok_added_split(&t->added, &t->added.raw, text, len, skip, &raw);
	for (size_t i = 0; !ret && i < raw.n; i++) {
		const struct tok_split *r = &raw.v[i];

		if (r->id >= 0) {
			ret = moem_tok_ids_push(ids, (uint32_t)r->id);
			continue;
		}
		ret = moem_tok_norm_apply(t->norm, c, text + r->off, r->len, &nbuf);
		if (!ret)
			ret = moem_tok_added_split(&t->added, &t->added.norm, nbuf.p, nbuf.n, skip,
						   &norm);
		for (size_t k = 0; !ret && k < norm.n; k++) {
			const struct tok_split *s = &norm.v[k];

			if (s->id >= 0)
				ret = moem_tok_ids_push(ids, (uint32_t)s->id);
			else
				ret = encode_text(t, c, r->off == 0 && s->off == 0, nbuf.p + s->off,
						  s->len, ids);
		}
	}
	free(raw.v);
	free(norm.v);
	moem_tok_buf_free(&nbuf);
	return ret;
}

int moem_tok_encode(const struct moem_tokenizer *t, const char *text, size_t len, unsigned flags,
		    struct moem_tok_ids *ids)
{
	size_t start = ids->n, bad;
	struct tok_ctx c;
	int ret;

	if (flags & ~(MOEM_TOK_ADD_SPECIAL | MOEM_TOK_SPLIT_SPECIAL))
		return moem_errf(EINVAL, "encode: unknown flags %#x", flags);
	bad = moem_tok_utf8_invalid_at(text, len);
	if (bad < len)
		return moem_errf(EILSEQ, "text is not valid UTF-8 (byte %zu: 0x%02x)", bad,
				 (unsigned char)text[bad]);
	ret = moem_tok_ctx_init(&c);
	if (ret)
		return ret;
	ret = encode(t, &c, text, len, flags, ids);
	if (!ret && (flags & MOEM_TOK_ADD_SPECIAL))
		ret = moem_tok_post_apply(t->post, ids, start);
	moem_tok_ctx_free(&c);
	if (ret)
		ids->n = start;
	return ret;
}

/* Decode into c->norm (NUL-terminated). */
static int decode(const struct moem_tokenizer *t, struct tok_ctx *c, const uint32_t *ids, size_t n,
		  unsigned flags)
{
	struct tok_pieces *in = &c->a;
	int ret = 0;

	moem_tok_pieces_reset(in);
	for (size_t i = 0; !ret && i < n; i++) {
		uint32_t id = ids[i];
		int32_t a = id < t->vocab_size ? t->added_of[id] : -1;

		if (a >= 0) {
			const struct tok_added *tk = &t->added.v[a];

			if (tk->special && (flags & MOEM_TOK_SKIP_SPECIAL))
				continue;
			ret = moem_tok_pieces_add(in, tk->content, tk->len);
			continue;
		}
		if (id >= t->bpe.n_ids || !t->bpe.tok[id])
			return moem_errf(ERANGE,
					 "decode: token id %u is not in the vocabulary (%u)", id,
					 t->vocab_size);
		ret = moem_tok_pieces_add(in, t->bpe.tok[id], t->bpe.tok_len[id]);
	}
	return ret ? ret : moem_tok_dec_apply(t->dec, c, in, &c->norm);
}

int moem_tok_decode(const struct moem_tokenizer *t, const uint32_t *ids, size_t n, unsigned flags,
		    char **text, size_t *len)
{
	struct tok_ctx c;
	int ret;

	*text = NULL;
	if (len)
		*len = 0;
	if (flags & ~(MOEM_TOK_SKIP_SPECIAL | MOEM_TOK_RAW_BYTES))
		return moem_errf(EINVAL, "decode: unknown flags %#x", flags);
	ret = moem_tok_ctx_init(&c);
	if (ret)
		return ret;
	c.raw = flags & MOEM_TOK_RAW_BYTES;
	ret = decode(t, &c, ids, n, flags);
	if (!ret) {
		/* Hand the buffer over instead of copying it. */
		*text = c.norm.p;
		if (len)
			*len = c.norm.n;
		c.norm.p = NULL;
		if (!*text)
			*text = strdup("");
		if (!*text)
			ret = -ENOMEM;
	}
	moem_tok_ctx_free(&c);
	return ret;
}

void moem_tok_info(const struct moem_tokenizer *t, struct moem_tok_info *info)
{
	memset(info, 0, sizeof(*info));
	info->kind = t->kind;
	info->vocab_size = t->vocab_size;
	info->n_model = t->bpe.n_vocab;
	info->n_merges = t->bpe.n_merges;
	info->n_added = (uint32_t)t->added.n;
	info->n_special = (uint32_t)t->n_special;
	info->bos_id = t->bos_id;
	info->eos_id = t->eos_id;
	info->pad_id = t->pad_id;
	info->unk_id = t->unk_id >= 0 ? t->unk_id : t->bpe.has_unk ? (int64_t)t->bpe.unk_id : -1;
	info->chat_template = t->chat_template;
	info->post_bos = t->post && t->post->kind == TOK_POST_TEMPLATE && t->post->n_single &&
			 t->post->single[0].special;
	info->add_bos = t->cfg_add_bos_set ? t->add_bos : info->post_bos;
}

const char *moem_tok_id_to_token(const struct moem_tokenizer *t, uint32_t id, size_t *len)
{
	int32_t a = id < t->vocab_size ? t->added_of[id] : -1;

	if (a >= 0) {
		if (len)
			*len = t->added.v[a].len;
		return t->added.v[a].content;
	}
	if (id >= t->bpe.n_ids || !t->bpe.tok[id])
		return NULL;
	if (len)
		*len = t->bpe.tok_len[id];
	return t->bpe.tok[id];
}

int64_t moem_tok_token_to_id(const struct moem_tokenizer *t, const char *tok, size_t len)
{
	uint32_t v;

	if (moem_tok_strmap_get(&t->added.by_content, tok, len, &v))
		return t->added.v[v].id;
	if (moem_tok_strmap_get(&t->bpe.vocab, tok, len, &v))
		return v;
	return -ENOENT;
}

const char *moem_tok_added(const struct moem_tokenizer *t, size_t i, uint32_t *id, bool *special)
{
	if (i >= t->added.n)
		return NULL;
	if (id)
		*id = t->added.v[i].id;
	if (special)
		*special = t->added.v[i].special;
	return t->added.v[i].content;
}

bool moem_tok_is_eos(const struct moem_tokenizer *t, uint32_t id)
{
	if (t->eos_id >= 0 && id == (uint64_t)t->eos_id)
		return true;
	for (size_t i = 0; i < t->n_stop_ids; i++)
		if (t->stop_ids[i] == id)
			return true;
	return false;
}

const char *moem_tok_special_str(const struct moem_tokenizer *t, const char *which)
{
	if (!strcmp(which, "bos_token"))
		return t->bos_str;
	if (!strcmp(which, "eos_token"))
		return t->eos_str;
	return NULL;
}

/* ---- streaming decode (tokenizers' DecodeStream / step_decode_stream) ---- */

struct moem_tok_stream {
	const struct moem_tokenizer *t;
	unsigned flags;
	struct tok_ctx c;
	struct moem_tok_ids ids; /* from prefix_index on */
	size_t prefix_index;
	struct tok_buf prefix; /* the decode of ids[0, prefix_index) */
	struct tok_buf out;
};

int moem_tok_stream_new(const struct moem_tokenizer *t, unsigned flags,
			struct moem_tok_stream **out)
{
	struct moem_tok_stream *s;
	int ret;

	*out = NULL;
	if (flags & ~MOEM_TOK_SKIP_SPECIAL)
		return moem_errf(EINVAL, "decode stream: unknown flags %#x", flags);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	ret = moem_tok_ctx_init(&s->c);
	if (ret) {
		free(s);
		return ret;
	}
	s->t = t;
	s->flags = flags;
	*out = s;
	return 0;
}

static bool ends_incomplete(const struct tok_buf *b)
{
	/* U+FFFD at the end: a character whose bytes have not all arrived. */
	return b->n >= 3 && !memcmp(b->p + b->n - 3, "\xef\xbf\xbd", 3);
}

int moem_tok_stream_push(struct moem_tok_stream *s, uint32_t id, const char **text, size_t *len)
{
	struct tok_buf *cur = &s->c.norm;
	size_t keep;
	int ret;

	*text = "";
	*len = 0;
	ret = moem_tok_ids_push(&s->ids, id);
	if (!ret)
		ret = decode(s->t, &s->c, s->ids.ids, s->ids.n, s->flags);
	if (ret) {
		s->ids.n--;
		return ret;
	}
	if (cur->n <= s->prefix.n || ends_incomplete(cur))
		return 0;
	if (memcmp(cur->p, s->prefix.p ? s->prefix.p : "", s->prefix.n)) {
		s->ids.n--;
		return moem_errf(EPROTO, "decode stream: the text before token %u changed", id);
	}
	s->out.n = 0;
	ret = moem_tok_buf_put(&s->out, cur->p + s->prefix.n, cur->n - s->prefix.n);
	if (!ret)
		ret = moem_tok_buf_cstr(&s->out);
	if (ret)
		return ret;
	/*
	 * Keep ids from the old prefix_index on (the context the next token is
	 * decoded with); the new prefix is their decode.
	 */
	keep = s->ids.n - s->prefix_index;
	memmove(s->ids.ids, s->ids.ids + s->prefix_index, keep * sizeof(*s->ids.ids));
	s->ids.n = keep;
	ret = decode(s->t, &s->c, s->ids.ids, s->ids.n, s->flags);
	if (!ret) {
		s->prefix.n = 0;
		ret = moem_tok_buf_put(&s->prefix, s->c.norm.p, s->c.norm.n);
	}
	if (ret)
		return ret;
	s->prefix_index = keep;
	*text = s->out.p;
	*len = s->out.n;
	return 0;
}

int moem_tok_stream_flush(struct moem_tok_stream *s, const char **text, size_t *len)
{
	struct tok_buf *cur = &s->c.norm;
	int ret;

	*text = "";
	*len = 0;
	ret = decode(s->t, &s->c, s->ids.ids, s->ids.n, s->flags);
	if (ret)
		return ret;
	s->out.n = 0;
	if (cur->n > s->prefix.n && !memcmp(cur->p, s->prefix.p ? s->prefix.p : "", s->prefix.n))
		ret = moem_tok_buf_put(&s->out, cur->p + s->prefix.n, cur->n - s->prefix.n);
	if (!ret)
		ret = moem_tok_buf_cstr(&s->out);
	if (ret)
		return ret;
	s->ids.n = 0;
	s->prefix_index = 0;
	s->prefix.n = 0;
	*text = s->out.p;
	*len = s->out.n;
	return 0;
}

void moem_tok_stream_free(struct moem_tok_stream *s)
{
	if (!s)
		return;
	moem_tok_ctx_free(&s->c);
	moem_tok_ids_free(&s->ids);
	moem_tok_buf_free(&s->prefix);
	moem_tok_buf_free(&s->out);
	free(s);
}
