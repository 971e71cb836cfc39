// SPDX-License-Identifier: GPL-2.0-only
/* Buffers, piece lists, hash maps and JSON getters the tokenizer stages share. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <xxhash.h>

#include <moem/error.h>
#include <moem/json.h>

#include "tok_int.h"

/* tokenizer.json nests a few levels; 64 bounds hostile input. */
#define TOK_JSON_DEPTH 64
/* The largest real tokenizer.json files are ~20 MB. */
#define TOK_JSON_MAX   (256u << 20)

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	size_t c = *cap ? *cap : 16;
	void *q;

	if (need <= *cap)
		return 0;
	while (c < need) {
		if (c > SIZE_MAX / 2 / elem)
			return -ENOMEM;
		c *= 2;
	}
	q = realloc(*p, c * elem);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

int moem_tok_buf_put(struct tok_buf *b, const void *s, size_t n)
{
	int ret;

	if (n > SIZE_MAX - b->n - 1)
		return -ENOMEM;
	ret = grow((void **)&b->p, &b->cap, b->n + n + 1, 1);
	if (ret)
		return ret;
	if (n)
		memcpy(b->p + b->n, s, n);
	b->n += n;
	return 0;
}

int moem_tok_buf_putc(struct tok_buf *b, char c)
{
	return moem_tok_buf_put(b, &c, 1);
}

int moem_tok_buf_cstr(struct tok_buf *b)
{
	int ret = grow((void **)&b->p, &b->cap, b->n + 1, 1);

	if (ret)
		return ret;
	b->p[b->n] = 0;
	return 0;
}

void moem_tok_buf_free(struct tok_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

int moem_tok_pieces_add(struct tok_pieces *p, const char *s, size_t n)
{
	size_t off = p->text.n;
	int ret = grow((void **)&p->v, &p->cap, p->n + 1, sizeof(*p->v));

	if (ret)
		return ret;
	ret = moem_tok_buf_put(&p->text, s, n);
	if (ret)
		return ret;
	p->v[p->n].off = off;
	p->v[p->n].len = n;
	p->n++;
	return 0;
}

void moem_tok_pieces_reset(struct tok_pieces *p)
{
	p->n = 0;
	p->text.n = 0;
}

void moem_tok_pieces_free(struct tok_pieces *p)
{
	moem_tok_buf_free(&p->text);
	free(p->v);
	memset(p, 0, sizeof(*p));
}

int moem_tok_ids_push(struct moem_tok_ids *ids, uint32_t id)
{
	int ret = grow((void **)&ids->ids, &ids->cap, ids->n + 1, sizeof(*ids->ids));

	if (ret)
		return ret;
	ids->ids[ids->n++] = id;
	return 0;
}

void moem_tok_ids_free(struct moem_tok_ids *ids)
{
	free(ids->ids);
	memset(ids, 0, sizeof(*ids));
}

/* ---- string -> u32 ---- */

static size_t table_cap(size_t expect)
{
	size_t c = 16;

	while (c < expect * 2 && c < ((size_t)1 << 40))
		c *= 2;
	return c;
}

int moem_tok_strmap_init(struct tok_strmap *m, size_t expect)
{
	m->cap = table_cap(expect);
	m->n = 0;
	m->slot = calloc(m->cap, sizeof(*m->slot));
	return m->slot ? 0 : -ENOMEM;
}

static int strmap_grow(struct tok_strmap *m)
{
	struct tok_strmap n = {0};
	int ret = moem_tok_strmap_init(&n, m->cap);

	if (ret)
		return ret;
	for (size_t i = 0; i < m->cap; i++)
		if (m->slot[i].key)
			moem_tok_strmap_put(&n, m->slot[i].key, m->slot[i].len, m->slot[i].val);
	free(m->slot);
	*m = n;
	return 0;
}

int moem_tok_strmap_put(struct tok_strmap *m, const char *key, size_t len, uint32_t val)
{
	size_t i;

	if (len > UINT32_MAX)
		return -EINVAL;
	if ((m->n + 1) * 2 > m->cap) {
		int ret = strmap_grow(m);

		if (ret)
			return ret;
	}
	i = XXH3_64bits(key, len) & (m->cap - 1);
	for (;; i = (i + 1) & (m->cap - 1)) {
		struct tok_strmap_slot *s = &m->slot[i];

		if (!s->key) {
			s->key = key;
			s->len = (uint32_t)len;
			s->val = val;
			m->n++;
			return 0;
		}
		if (s->len == len && !memcmp(s->key, key, len))
			return -EEXIST;
	}
}

bool moem_tok_strmap_get(const struct tok_strmap *m, const char *key, size_t len, uint32_t *val)
{
	size_t i;

	if (!m->cap)
		return false;
	i = XXH3_64bits(key, len) & (m->cap - 1);
	for (;; i = (i + 1) & (m->cap - 1)) {
		const struct tok_strmap_slot *s = &m->slot[i];

		if (!s->key)
			return false;
		if (s->len == len && !memcmp(s->key, key, len)) {
			*val = s->val;
			return true;
		}
	}
}

void moem_tok_strmap_free(struct tok_strmap *m)
{
	free(m->slot);
	memset(m, 0, sizeof(*m));
}

/* ---- (u32, u32) -> (rank, id) ---- */

static inline size_t pair_hash(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	return (size_t)k;
}

int moem_tok_pairmap_init(struct tok_pairmap *m, size_t expect)
{
	m->cap = table_cap(expect);
	m->n = 0;
	m->slot = calloc(m->cap, sizeof(*m->slot));
	return m->slot ? 0 : -ENOMEM;
}

int moem_tok_pairmap_put(struct tok_pairmap *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t id)
{
	uint64_t k = ((uint64_t)a << 32 | b) + 1;
	size_t i;

	if ((m->n + 1) * 2 > m->cap) {
		struct tok_pairmap n = {0};
		int ret = moem_tok_pairmap_init(&n, m->cap);

		if (ret)
			return ret;
		for (size_t j = 0; j < m->cap; j++) {
			const struct tok_pair_slot *s = &m->slot[j];

			if (s->key)
				moem_tok_pairmap_put(&n, (uint32_t)((s->key - 1) >> 32),
						     (uint32_t)(s->key - 1), s->rank, s->id);
		}
		free(m->slot);
		*m = n;
	}
	for (i = pair_hash(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		struct tok_pair_slot *s = &m->slot[i];

		if (!s->key) {
			s->key = k;
			s->rank = rank;
			s->id = id;
			m->n++;
			return 0;
		}
		if (s->key == k) {
			s->rank = rank;
			s->id = id;
			return 0;
		}
	}
}

bool moem_tok_pairmap_get(const struct tok_pairmap *m, uint32_t a, uint32_t b, uint32_t *rank,
			  uint32_t *id)
{
	uint64_t k = ((uint64_t)a << 32 | b) + 1;

	if (!m->cap)
		return false;
	for (size_t i = pair_hash(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		const struct tok_pair_slot *s = &m->slot[i];

		if (!s->key)
			return false;
		if (s->key == k) {
			*rank = s->rank;
			*id = s->id;
			return true;
		}
	}
}

void moem_tok_pairmap_free(struct tok_pairmap *m)
{
	free(m->slot);
	memset(m, 0, sizeof(*m));
}

/* ---- JSON ---- */

int moem_tok_json_parse(const char *buf, size_t len, const char *what, struct json_object **out)
{
	return moem_json_parse(buf, len, TOK_JSON_MAX, TOK_JSON_DEPTH, what, out);
}

int moem_tok_json_str(struct json_object *o, const char *key, bool required, const char *what,
		      const char **val, size_t *len)
{
	struct json_object *v;

	*val = NULL;
	if (len)
		*len = 0;
	if (!json_object_object_get_ex(o, key, &v) || !v) {
		if (required)
			return moem_errf(EINVAL, "%s: no \"%s\"", what, key);
		return 0;
	}
	if (!json_object_is_type(v, json_type_string))
		return moem_errf(EINVAL, "%s: \"%s\" is not a string", what, key);
	*val = json_object_get_string(v);
	if (len)
		*len = (size_t)json_object_get_string_len(v);
	return 0;
}

int moem_tok_json_bool(struct json_object *o, const char *key, bool dflt, const char *what,
		       bool *val)
{
	struct json_object *v;

	*val = dflt;
	if (!json_object_object_get_ex(o, key, &v) || !v)
		return 0;
	if (!json_object_is_type(v, json_type_boolean))
		return moem_errf(EINVAL, "%s: \"%s\" is not true or false", what, key);
	*val = json_object_get_boolean(v);
	return 0;
}

int moem_tok_json_u32(struct json_object *o, const char *key, const char *what, uint32_t *val)
{
	struct json_object *v;
	int64_t x;

	if (!json_object_object_get_ex(o, key, &v) || !v)
		return moem_errf(EINVAL, "%s: no \"%s\"", what, key);
	if (!json_object_is_type(v, json_type_int))
		return moem_errf(EINVAL, "%s: \"%s\" is not an integer", what, key);
	errno = 0;
	x = json_object_get_int64(v);
	if (errno || x < 0 || x > UINT32_MAX)
		return moem_errf(ERANGE, "%s: \"%s\" is out of range", what, key);
	*val = (uint32_t)x;
	return 0;
}

int moem_tok_json_type(struct json_object *o, const char *what, const char **type)
{
	if (!json_object_is_type(o, json_type_object))
		return moem_errf(EINVAL, "%s is not an object", what);
	return moem_tok_json_str(o, "type", true, what, type, NULL);
}
