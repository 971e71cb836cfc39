// SPDX-License-Identifier: GPL-2.0-only
/*
 * The BPE model (huggingface/tokenizers src/models/bpe): vocabulary,
 * merges with their ranks, unknown-token handling (fuse_unk), byte
 * fallback to <0xXX> tokens, ignore_merges, continuing-subword prefix and
 * end-of-word suffix. A word is merged as tokenizers' Word::merge_all
 * does: a min-heap of (rank, position), stale entries skipped, so equal
 * ranks merge left to right.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>

#include "tok_int.h"

/* Bounds on what a tokenizer.json may ask for (real ones hold < 300k tokens). */
#define TOK_MAX_VOCAB  (4u << 20)
#define TOK_MAX_MERGES (8u << 20)

static const char *opt_str(struct json_object *o, const char *key, size_t *len)
{
	struct json_object *v;

	*len = 0;
	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	*len = (size_t)json_object_get_string_len(v);
	return json_object_get_string(v);
}

static int load_vocab(struct tok_bpe *m, struct json_object *vocab)
{
	size_t total = 0, n = 0;
	char *w;
	int ret;

	if (!vocab || !json_object_is_type(vocab, json_type_object))
		return moem_errf(EINVAL, "model: \"vocab\" is not an object");
	json_object_object_foreach(vocab, k0, v0)
	{
		int64_t id;

		if (!json_object_is_type(v0, json_type_int))
			return moem_errf(EINVAL, "model vocab: \"%.40s\" has no integer id", k0);
		id = json_object_get_int64(v0);
		if (id < 0 || id >= TOK_MAX_VOCAB)
			return moem_errf(ERANGE, "model vocab: \"%.40s\" has id %lld (0..%u)", k0,
					 (long long)id, TOK_MAX_VOCAB - 1);
		if ((uint32_t)id + 1 > m->n_ids)
			m->n_ids = (uint32_t)id + 1;
		total += strlen(k0) + 1;
		n++;
	}
	if (!n)
		return moem_errf(EINVAL, "model: the vocabulary is empty");
	m->n_vocab = (uint32_t)n;
	m->arena = malloc(total);
	m->tok = calloc(m->n_ids, sizeof(*m->tok));
	m->tok_len = calloc(m->n_ids, sizeof(*m->tok_len));
	if (!m->arena || !m->tok || !m->tok_len)
		return -ENOMEM;
	ret = moem_tok_strmap_init(&m->vocab, n);
	if (ret)
		return ret;
	w = m->arena;
	json_object_object_foreach(vocab, k, v)
	{
		uint32_t id = (uint32_t)json_object_get_int64(v);
		size_t len = strlen(k);

		/* json-c keys are C strings; a token with a NUL cannot be looked up. */
		if (m->tok[id])
			return moem_errf(EINVAL,
					 "model vocab: id %u is given to \"%.40s\" and \"%.40s\"",
					 id, m->tok[id], k);
		memcpy(w, k, len + 1);
		m->tok[id] = w;
		m->tok_len[id] = (uint32_t)len;
		ret = moem_tok_strmap_put(&m->vocab, w, len, id);
		if (ret)
			return ret == -EEXIST ? moem_errf(EINVAL, "model vocab: \"%.40s\" twice", k)
					      : ret;
		w += len + 1;
	}
	return 0;
}

static int lookup(const struct tok_bpe *m, const char *s, size_t n, size_t i, const char *what,
		  uint32_t *id)
{
	if (moem_tok_strmap_get(&m->vocab, s, n, id))
		return 0;
	return moem_errf(EINVAL,
			 "model merges: merge %zu references %s \"%.*s\", not in the vocabulary", i,
			 what, (int)moem_min(n, (size_t)60), s);
}

static int load_merge(struct tok_bpe *m, size_t i, const char *a, size_t na, const char *b,
		      size_t nb, struct tok_buf *tmp)
{
	uint32_t ia, ib, inew;
	int ret = lookup(m, a, na, i, "token", &ia);

	if (!ret)
		ret = lookup(m, b, nb, i, "token", &ib);
	if (ret)
		return ret;
	if (m->cont_prefix) {
		if (nb < m->cont_prefix_len || memcmp(b, m->cont_prefix, m->cont_prefix_len))
			return moem_errf(EINVAL,
					 "model merges: merge %zu: \"%.40s\" lacks the continuing "
					 "subword prefix",
					 i, b);
		b += m->cont_prefix_len;
		nb -= m->cont_prefix_len;
	}
	tmp->n = 0;
	ret = moem_tok_buf_put(tmp, a, na);
	if (!ret)
		ret = moem_tok_buf_put(tmp, b, nb);
	if (!ret)
		ret = lookup(m, tmp->p, tmp->n, i, "the merged token", &inew);
	if (!ret)
		ret = moem_tok_pairmap_put(&m->merges, ia, ib, (uint32_t)i, inew);
	return ret;
}

static int load_merges(struct tok_bpe *m, struct json_object *merges)
{
	struct tok_buf tmp = {0};
	size_t n;
	int ret;

	if (!merges || !json_object_is_type(merges, json_type_array))
		return moem_errf(EINVAL, "model: \"merges\" is not an array");
	n = json_object_array_length(merges);
	if (n > TOK_MAX_MERGES)
		return moem_errf(E2BIG, "model: %zu merges is more than moem reads", n);
	m->n_merges = (uint32_t)n;
	ret = moem_tok_pairmap_init(&m->merges, n);
	for (size_t i = 0; !ret && i < n; i++) {
		struct json_object *e = json_object_array_get_idx(merges, i);

		if (json_object_is_type(e, json_type_string)) {
			/* "a b": exactly one space (tokenizers splits on ' ' and wants two parts). */
			const char *s = json_object_get_string(e), *sp = strchr(s, ' ');
			size_t len = (size_t)json_object_get_string_len(e);

			if (!sp || strchr(sp + 1, ' '))
				ret = moem_errf(EINVAL,
						"model merges: merge %zu \"%.40s\" is not \"a b\"",
						i, s);
			else
				ret = load_merge(m, i, s, (size_t)(sp - s), sp + 1,
						 len - (size_t)(sp - s) - 1, &tmp);
		} else if (json_object_is_type(e, json_type_array) &&
			   json_object_array_length(e) == 2 &&
			   json_object_is_type(json_object_array_get_idx(e, 0), json_type_string) &&
			   json_object_is_type(json_object_array_get_idx(e, 1), json_type_string)) {
			struct json_object *a = json_object_array_get_idx(e, 0);
			struct json_object *b = json_object_array_get_idx(e, 1);

			ret = load_merge(m, i, json_object_get_string(a),
					 (size_t)json_object_get_string_len(a),
					 json_object_get_string(b),
					 (size_t)json_object_get_string_len(b), &tmp);
		} else {
			ret = moem_errf(EINVAL, "model merges: merge %zu is not \"a b\" or [a, b]",
					i);
		}
	}
	moem_tok_buf_free(&tmp);
	return ret;
}

static int dup_opt(struct json_object *o, const char *key, char **out, size_t *len)
{
	const char *s = opt_str(o, key, len);

	*out = NULL;
	if (!s || !*len)
		return 0;
	*out = strndup(s, *len);
	return *out ? 0 : -ENOMEM;
}

int moem_tok_bpe_load(struct tok_bpe *m, struct json_object *o)
{
	struct json_object *v, *vocab = NULL, *merges = NULL;
	const char *type, *unk;
	size_t unk_len;
	int ret;

	memset(m, 0, sizeof(*m));
	if (!o || !json_object_is_type(o, json_type_object))
		return moem_errf(EINVAL, "tokenizer.json: no \"model\" object");
	ret = moem_tok_json_str(o, "type", false, "model", &type, NULL);
	if (ret)
		return ret;
	if (!type)
		return moem_errf(EINVAL, "model: no \"type\"");
	if (strcmp(type, "BPE"))
		return moem_errf(
			ENOTSUP,
			"model type \"%s\" is not supported (moem reads BPE: byte-level as "
			"Qwen3/DeepSeek/OLMoE, SentencePiece-style as Mixtral/Llama)",
			type);
	if (json_object_object_get_ex(o, "dropout", &v) && v &&
	    !json_object_is_type(v, json_type_null))
		return moem_errf(ENOTSUP, "model: BPE dropout is not supported (encoding would not "
					  "be deterministic)");
	ret = moem_tok_json_bool(o, "fuse_unk", false, "model", &m->fuse_unk);
	if (!ret)
		ret = moem_tok_json_bool(o, "byte_fallback", false, "model", &m->byte_fallback);
	if (!ret)
		ret = moem_tok_json_bool(o, "ignore_merges", false, "model", &m->ignore_merges);
	if (!ret)
		ret = dup_opt(o, "continuing_subword_prefix", &m->cont_prefix, &m->cont_prefix_len);
	if (!ret)
		ret = dup_opt(o, "end_of_word_suffix", &m->eow_suffix, &m->eow_suffix_len);
	if (ret)
		return ret;
	json_object_object_get_ex(o, "vocab", &vocab);
	json_object_object_get_ex(o, "merges", &merges);
	ret = load_vocab(m, vocab);
	if (!ret)
		ret = load_merges(m, merges);
	if (ret)
		return ret;
	unk = opt_str(o, "unk_token", &unk_len);
	if (unk) {
		if (!moem_tok_strmap_get(&m->vocab, unk, unk_len, &m->unk_id))
			return moem_errf(
				EINVAL, "model: unk_token \"%.40s\" is not in the vocabulary", unk);
		m->has_unk = true;
	}
	m->all_bytes = true;
	for (unsigned b = 0; b < 256; b++) {
		char name[8];

		snprintf(name, sizeof(name), "<0x%02X>", b);
		if (!moem_tok_strmap_get(&m->vocab, name, 6, &m->byte_id[b])) {
			m->byte_id[b] = UINT32_MAX;
			m->all_bytes = false;
		}
	}
	return 0;
}

void moem_tok_bpe_free(struct tok_bpe *m)
{
	moem_tok_strmap_free(&m->vocab);
	moem_tok_pairmap_free(&m->merges);
	free(m->arena);
	free(m->tok);
	free(m->tok_len);
	free(m->cont_prefix);
	free(m->eow_suffix);
	memset(m, 0, sizeof(*m));
}

/* ---- encoding one word ---- */

static int sym_push(struct tok_ctx *c, size_t *n, uint32_t id)
{
	if (*n == c->sym_cap) {
		size_t cap = c->sym_cap ? c->sym_cap * 2 : 256;
		struct tok_sym *v = realloc(c->sym, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		c->sym = v;
		c->sym_cap = cap;
	}
	if (*n >= INT32_MAX)
		return -E2BIG;
	c->sym[*n].id = id;
	c->sym[*n].prev = (int32_t)*n - 1;
	c->sym[*n].next = (int32_t)*n + 1;
	c->sym[*n].gone = false;
	(*n)++;
	return 0;
}

static inline bool merge_less(const struct tok_merge *a, const struct tok_merge *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static int heap_push(struct tok_ctx *c, uint32_t rank, uint32_t pos, uint32_t id)
{
	size_t i;

	if (c->heap_n == c->heap_cap) {
		size_t cap = c->heap_cap ? c->heap_cap * 2 : 256;
		struct tok_merge *v = realloc(c->heap, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		c->heap = v;
		c->heap_cap = cap;
	}
	i = c->heap_n++;
	c->heap[i] = (struct tok_merge){.rank = rank, .pos = pos, .id = id};
	while (i) {
		size_t p = (i - 1) / 2;
		struct tok_merge t;

		if (!merge_less(&c->heap[i], &c->heap[p]))
			break;
		t = c->heap[i];
		c->heap[i] = c->heap[p];
		c->heap[p] = t;
		i = p;
	}
	return 0;
}

static struct tok_merge heap_pop(struct tok_ctx *c)
{
	struct tok_merge top = c->heap[0];
	size_t i = 0, n = --c->heap_n;

	c->heap[0] = c->heap[n];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		struct tok_merge t;

		if (l < n && merge_less(&c->heap[l], &c->heap[m]))
			m = l;
		if (r < n && merge_less(&c->heap[r], &c->heap[m]))
			m = r;
		if (m == i)
			break;
		t = c->heap[i];
		c->heap[i] = c->heap[m];
		c->heap[m] = t;
		i = m;
	}
	return top;
}

/* Word::merge_all: merge the lowest-ranked pair, leftmost first, until none is left. */
static int merge_all(const struct tok_bpe *m, struct tok_ctx *c, size_t n)
{
	struct tok_sym *s = c->sym;
	uint32_t rank, id;
	int ret;

	c->heap_n = 0;
	for (size_t i = 0; i + 1 < n; i++)
		if (moem_tok_pairmap_get(&m->merges, s[i].id, s[i + 1].id, &rank, &id) &&
		    (ret = heap_push(c, rank, (uint32_t)i, id)))
			return ret;
	while (c->heap_n) {
		struct tok_merge top = heap_pop(c);
		struct tok_sym *cur = &s[top.pos];
		int32_t nx;

		if (cur->gone || cur->next >= (int32_t)n)
			continue;
		nx = cur->next;
		/* Stale: the pair at this position changed since the entry was queued. */
		if (!moem_tok_pairmap_get(&m->merges, cur->id, s[nx].id, &rank, &id) ||
		    id != top.id)
			continue;
		cur->id = top.id;
		s[nx].gone = true;
		cur->next = s[nx].next;
		if (cur->next < (int32_t)n)
			s[cur->next].prev = (int32_t)top.pos;
		if (cur->prev >= 0 &&
		    moem_tok_pairmap_get(&m->merges, s[cur->prev].id, cur->id, &rank, &id) &&
		    (ret = heap_push(c, rank, (uint32_t)cur->prev, id)))
			return ret;
		if (cur->next < (int32_t)n &&
		    moem_tok_pairmap_get(&m->merges, cur->id, s[cur->next].id, &rank, &id) &&
		    (ret = heap_push(c, rank, top.pos, id)))
			return ret;
	}
	return 0;
}

int moem_tok_bpe_encode(const struct tok_bpe *m, struct tok_ctx *c, const char *w, size_t len,
			struct moem_tok_ids *ids)
{
	struct tok_buf *t = &c->tmp;
	bool unk_pending = false;
	size_t n = 0;
	uint32_t id;
	int ret;

	if (!len)
		return 0;
	if (m->ignore_merges && moem_tok_strmap_get(&m->vocab, w, len, &id))
		return moem_tok_ids_push(ids, id);
	for (size_t i = 0; i < len;) {
		size_t cl = tok_utf8_len((unsigned char)w[i]);
		const char *s = w + i;
		size_t sl = cl;
		bool first = i == 0, last = i + cl >= len;

		if ((!first && m->cont_prefix) || (last && m->eow_suffix)) {
			t->n = 0;
			ret = 0;
			if (!first && m->cont_prefix)
				ret = moem_tok_buf_put(t, m->cont_prefix, m->cont_prefix_len);
			if (!ret)
				ret = moem_tok_buf_put(t, s, cl);
			if (!ret && last && m->eow_suffix)
				ret = moem_tok_buf_put(t, m->eow_suffix, m->eow_suffix_len);
			if (ret)
				return ret;
			s = t->p;
			sl = t->n;
		}
		i += cl;
		if (moem_tok_strmap_get(&m->vocab, s, sl, &id)) {
			if (unk_pending && (ret = sym_push(c, &n, m->unk_id)))
				return ret;
			unk_pending = false;
			if ((ret = sym_push(c, &n, id)))
				return ret;
			continue;
		}
		if (m->byte_fallback) {
			bool all = true;

			for (size_t k = 0; k < sl; k++)
				all = all && m->byte_id[(unsigned char)s[k]] != UINT32_MAX;
			if (all) {
				for (size_t k = 0; k < sl; k++)
					if ((ret = sym_push(c, &n,
							    m->byte_id[(unsigned char)s[k]])))
						return ret;
				continue;
			}
		}
		if (m->has_unk) {
			if (unk_pending && !m->fuse_unk && (ret = sym_push(c, &n, m->unk_id)))
				return ret;
			unk_pending = true;
		}
	}
	if (unk_pending && (ret = sym_push(c, &n, m->unk_id)))
		return ret;
	if (n > 1 && (ret = merge_all(m, c, n)))
		return ret;
	for (size_t i = 0; i < n; i = (size_t)c->sym[i].next)
		if ((ret = moem_tok_ids_push(ids, c->sym[i].id)))
			return ret;
	return 0;
}
