// SPDX-License-Identifier: GPL-2.0-only
/*
 * Added tokens (huggingface/tokenizers src/tokenizer/added_vocabulary.rs):
 * the special and added tokens of tokenizer.json, found in the text before
 * the model sees it. Tokens with normalized=false are matched in the raw
 * text, the others in the normalized pieces; matching is leftmost-longest
 * (as the Aho-Corasick automaton tokenizers builds), with the single_word,
 * lstrip and rstrip rules of find_matches().
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <utf8proc.h>

#include <moem/error.h>

#include "tok_int.h"

#define TOK_MAX_ADDED (1u << 20)

static int trie_node(struct tok_trie *t, uint32_t *idx)
{
	if (t->n == t->cap) {
		uint32_t cap = t->cap ? t->cap * 2 : 256;
		struct tok_trie_node *v;

		if (cap > (1u << 28))
			return -E2BIG;
		v = realloc(t->node, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		t->node = v;
		t->cap = cap;
	}
	t->node[t->n] = (struct tok_trie_node){.added = -1};
	*idx = t->n++;
	return 0;
}

static uint32_t trie_child(const struct tok_trie *t, uint32_t at, unsigned char b)
{
	for (uint32_t c = t->node[at].child; c; c = t->node[c].sibling)
		if (t->node[c].byte == b)
			return c;
	return 0;
}

/* Insert s for added token i; the first token with a given string keeps it. */
static int trie_add(struct tok_trie *t, const char *s, size_t len, int32_t i)
{
	uint32_t at = 0;
	int ret;

	if (!t->n && (ret = trie_node(t, &at)))
		return ret;
	if (!len)
		return 0;
	t->first[(unsigned char)s[0] / 8] |= (uint8_t)(1u << ((unsigned char)s[0] % 8));
	for (size_t k = 0; k < len; k++) {
		uint32_t c = trie_child(t, at, (unsigned char)s[k]);

		if (!c) {
			ret = trie_node(t, &c);
			if (ret)
				return ret;
			t->node[c].byte = (unsigned char)s[k];
			t->node[c].sibling = t->node[at].child;
			t->node[at].child = c;
		}
		at = c;
	}
	if (t->node[at].added < 0)
		t->node[at].added = i;
	return 0;
}

/* The longest token starting at s[0]: its index and length, or -1. */
static int32_t trie_longest(const struct tok_trie *t, const char *s, size_t len, size_t *mlen)
{
	int32_t best = -1;
	uint32_t at = 0;

	if (!t->n || !(t->first[(unsigned char)s[0] / 8] & (1u << ((unsigned char)s[0] % 8))))
		return -1;
	for (size_t k = 0; k < len; k++) {
		at = trie_child(t, at, (unsigned char)s[k]);
		if (!at)
			break;
		if (t->node[at].added >= 0) {
			best = t->node[at].added;
			*mlen = k + 1;
		}
	}
	return best;
}

int moem_tok_added_load(struct tok_added_vocab *a, struct json_object *arr)
{
	size_t n;
	int ret;

	memset(a, 0, sizeof(*a));
	if (!arr || json_object_is_type(arr, json_type_null))
		return moem_tok_strmap_init(&a->by_content, 1);
	if (!json_object_is_type(arr, json_type_array))
		return moem_errf(EINVAL, "tokenizer.json: \"added_tokens\" is not an array");
	n = json_object_array_length(arr);
	if (n > TOK_MAX_ADDED)
		return moem_errf(E2BIG, "tokenizer.json: %zu added tokens is more than moem reads",
				 n);
	a->v = calloc(n + 1, sizeof(*a->v));
	if (!a->v)
		return -ENOMEM;
	ret = moem_tok_strmap_init(&a->by_content, n);
	for (size_t i = 0; !ret && i < n; i++) {
		struct json_object *o = json_object_array_get_idx(arr, i);
		struct tok_added *t = &a->v[i];
		const char *s;
		size_t len;

		if (!json_object_is_type(o, json_type_object)) {
			ret = moem_errf(EINVAL, "added token %zu is not an object", i);
			break;
		}
		ret = moem_tok_json_str(o, "content", true, "added token", &s, &len);
		if (!ret)
			ret = moem_tok_json_u32(o, "id", "added token", &t->id);
		if (!ret && !len)
			ret = moem_errf(EINVAL, "added token %zu has empty content", i);
		if (!ret && t->id >= TOK_MAX_ADDED * 4)
			ret = moem_errf(ERANGE, "added token \"%.40s\": id %u is too large", s,
					t->id);
		if (!ret)
			ret = moem_tok_json_bool(o, "special", false, "added token", &t->special);
		if (!ret)
			ret = moem_tok_json_bool(o, "normalized", !t->special, "added token",
						 &t->normalized);
		if (!ret)
			ret = moem_tok_json_bool(o, "lstrip", false, "added token", &t->lstrip);
		if (!ret)
			ret = moem_tok_json_bool(o, "rstrip", false, "added token", &t->rstrip);
		if (!ret)
			ret = moem_tok_json_bool(o, "single_word", false, "added token",
						 &t->single_word);
		if (ret)
			break;
		t->content = strndup(s, len);
		if (!t->content) {
			ret = -ENOMEM;
			break;
		}
		t->len = len;
		a->n++;
		ret = moem_tok_strmap_put(&a->by_content, t->content, len, (uint32_t)i);
		if (ret == -EEXIST)
			ret = moem_errf(EINVAL, "added token \"%.40s\" appears twice", s);
	}
	return ret;
}

int moem_tok_added_build(struct tok_added_vocab *a, const struct tok_norm *nm, struct tok_ctx *c)
{
	int ret = 0;

	/* tokenizers lists special tokens first, then the others: the same order here. */
	for (int pass = 0; pass < 2 && !ret; pass++) {
		for (size_t i = 0; i < a->n && !ret; i++) {
			struct tok_added *t = &a->v[i];

			if (t->special != (pass == 0))
				continue;
			if (!t->normalized) {
				ret = trie_add(&a->raw, t->content, t->len, (int32_t)i);
				continue;
			}
			ret = moem_tok_norm_apply(nm, c, t->content, t->len, &c->norm);
			if (ret)
				break;
			t->norm_content = malloc(c->norm.n + 1);
			if (!t->norm_content)
				return -ENOMEM;
			memcpy(t->norm_content, c->norm.p, c->norm.n);
			t->norm_content[c->norm.n] = 0;
			t->norm_len = c->norm.n;
			ret = trie_add(&a->norm, t->norm_content, t->norm_len, (int32_t)i);
		}
	}
	return ret;
}

void moem_tok_added_free(struct tok_added_vocab *a)
{
	for (size_t i = 0; i < a->n; i++) {
		free(a->v[i].content);
		free(a->v[i].norm_content);
	}
	free(a->v);
	free(a->raw.node);
	free(a->norm.node);
	moem_tok_strmap_free(&a->by_content);
	memset(a, 0, sizeof(*a));
}

const struct tok_added *moem_tok_added_by_id(const struct tok_added_vocab *a, uint32_t id)
{
	for (size_t i = 0; i < a->n; i++)
		if (a->v[i].id == id)
			return &a->v[i];
	return NULL;
}

/* The regex crate's Unicode \w: letters, marks, decimal and letter numbers, connectors. */
static bool is_word_char(uint32_t cp)
{
	utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);

	return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_ME) ||
	       c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_PC;
}

static uint32_t last_cp(const char *s, size_t end)
{
	size_t p = end - 1, n;

	while (p > 0 && ((unsigned char)s[p] & 0xc0) == 0x80)
		p--;
	return moem_tok_utf8_get(s + p, &n);
}

static int split_add(struct tok_splits *o, size_t off, size_t len, int64_t id)
{
	if (o->n == o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 16;
		struct tok_split *v = realloc(o->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		o->v = v;
		o->cap = cap;
	}
	o->v[o->n++] = (struct tok_split){.off = off, .len = len, .id = id};
	return 0;
}

int moem_tok_added_split(const struct tok_added_vocab *a, const struct tok_trie *t, const char *s,
			 size_t len, bool skip_special, struct tok_splits *out)
{
	size_t start_off = 0, i = 0;
	int ret;

	out->n = 0;
	while (i < len) {
		size_t mlen = 0, start, stop;
		int32_t k = trie_longest(t, s + i, len - i, &mlen);
		const struct tok_added *tk;

		if (k < 0) {
			i++;
			continue;
		}
		tk = &a->v[k];
		start = i;
		stop = i + mlen;
		i = stop;
		if (skip_special && tk->special)
			continue;
		if (tk->single_word) {
			size_t n;

			if ((start > 0 && is_word_char(last_cp(s, start))) ||
			    (stop < len && is_word_char(moem_tok_utf8_get(s + stop, &n))))
				continue;
		}
		if (tk->lstrip) {
			size_t ns = start;

			while (ns > 0 && moem_tok_is_space(last_cp(s, ns))) {
				ns--;
				while (ns > 0 && ((unsigned char)s[ns] & 0xc0) == 0x80)
					ns--;
			}
			start = ns > start_off ? ns : start_off;
		}
		if (tk->rstrip) {
			while (stop < len) {
				size_t n;

				if (!moem_tok_is_space(moem_tok_utf8_get(s + stop, &n)))
					break;
				stop += n;
			}
			i = stop;
		}
		if (start_off < start && (ret = split_add(out, start_off, start - start_off, -1)))
			return ret;
		if ((ret = split_add(out, start, stop - start, tk->id)))
			return ret;
		start_off = stop;
	}
	if (start_off < len)
		return split_add(out, start_off, len - start_off, -1);
	return 0;
}
