// SPDX-License-Identifier: GPL-2.0-only
/*
 * Jinja values with Python's meaning (None, bool, int, float, str, list,
 * dict, callables), the arena they live in, and how they print: str(),
 * repr() and json.dumps() as transformers' tojson filter calls it
 * (ensure_ascii=False).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/util.h>

#include "jinja_int.h"

/* tojson(sort_keys=true) sorts dicts of at most this many keys. */
#define MOEM_JINJA_SORT_MAX 256

struct jblk {
	struct jblk *next;
	size_t used, cap;
	max_align_t data[];
};

void *moem_ja_alloc(struct jarena *a, size_t n)
{
	struct jblk *b = a->head;
	void *p;

	n = (n + 15) & ~(size_t)15;
	if (!n)
		n = 16;
	if (a->limit && (n > a->limit || a->total > a->limit - n))
		return NULL;
	if (!b || b->cap - b->used < n) {
		size_t cap = n > 65536 ? n : 65536;

		b = malloc(sizeof(*b) + cap);
		if (!b)
			return NULL;
		b->used = 0;
		b->cap = cap;
		b->next = a->head;
		a->head = b;
	}
	p = (char *)b->data + b->used;
	b->used += n;
	a->total += n;
	return p;
}

char *moem_ja_strndup(struct jarena *a, const char *s, size_t n)
{
	char *p = moem_ja_alloc(a, n + 1);

	if (p) {
		memcpy(p, s, n);
		p[n] = 0;
	}
	return p;
}

void moem_ja_free(struct jarena *a)
{
	while (a->head) {
		struct jblk *b = a->head;

		a->head = b->next;
		free(b);
	}
	a->total = 0;
}

bool moem_jv_truthy(const struct jv *v)
{
	switch (v->t) {
	case JT_UNDEF:
	case JT_NONE:
		return false;
	case JT_BOOL:
		return v->b;
	case JT_INT:
		return v->i != 0;
	case JT_FLOAT:
		return v->f != 0;
	case JT_STR:
		return v->s.n != 0;
	case JT_LIST:
		return v->gen || v->l->n != 0; /* a Python generator object is true */
	case JT_DICT:
		return v->d->n != 0;
	case JT_FN:
		return true;
	}
	return false;
}

static bool is_num(const struct jv *v)
{
	return v->t == JT_INT || v->t == JT_FLOAT || v->t == JT_BOOL;
}

static double num(const struct jv *v)
{
	return v->t == JT_FLOAT ? v->f : v->t == JT_INT ? (double)v->i : (double)v->b;
}

bool moem_jv_equal(const struct jv *a, const struct jv *b)
{
	if (is_num(a) && is_num(b)) {
		if (a->t != JT_FLOAT && b->t != JT_FLOAT)
			return (a->t == JT_INT ? a->i : a->b) == (b->t == JT_INT ? b->i : b->b);
		return num(a) == num(b);
	}
	if (a->t != b->t)
		return false;
	switch (a->t) {
	case JT_UNDEF:
	case JT_NONE:
		return true;
	case JT_STR:
		return a->s.n == b->s.n && !memcmp(a->s.p, b->s.p, a->s.n);
	case JT_LIST:
		if (a->l->n != b->l->n)
			return false;
		for (size_t i = 0; i < a->l->n; i++)
			if (!moem_jv_equal(&a->l->v[i], &b->l->v[i]))
				return false;
		return true;
	case JT_DICT:
		if (a->d->n != b->d->n)
			return false;
		for (size_t i = 0; i < a->d->n; i++) {
			const struct jv k = moem_jv_dict_key(a->d, i);
			const struct jv *o = moem_jv_dict_lookup(b->d, &k);

			if (!o || !moem_jv_equal(&a->d->v[i], o))
				return false;
		}
		return true;
	case JT_FN:
		return a->fn.id == b->fn.id && a->fn.self == b->fn.self &&
		       a->fn.macro == b->fn.macro;
	default:
		return false;
	}
}

const char *moem_jv_type_name(const struct jv *v)
{
	static const char *const names[] = {"undefined", "NoneType", "bool", "int",	"float",
					    "str",	 "list",     "dict", "function"};

	if (v->t == JT_LIST && v->gen)
		return "generator";
	return v->t == JT_LIST && v->tuple ? "tuple" : names[v->t];
}

static struct jv *dict_find(const struct jdict *d, const char *k, size_t n, bool integer)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->klen[i] == n && !d->ki[i] == !integer && !memcmp(d->k[i], k, n))
			return &d->v[i];
	return NULL;
}

struct jv *moem_jv_dict_get(const struct jdict *d, const char *k, size_t n)
{
	return dict_find(d, k, n, false);
}

struct jv *moem_jv_dict_lookup(const struct jdict *d, const struct jv *key)
{
	char num[24];

	if (key->t == JT_STR)
		return dict_find(d, key->s.p, key->s.n, false);
	if (key->t == JT_INT)
		return dict_find(d, num, (size_t)snprintf(num, sizeof(num), "%" PRId64, key->i),
				 true);
	return NULL;
}

struct jv moem_jv_dict_key(const struct jdict *d, size_t i)
{
	if (d->ki[i])
		return jv_int(strtoll(d->k[i], NULL, 10));
	return jv_str(d->k[i], d->klen[i]);
}

struct jdict *moem_jv_dict_new(struct jarena *a)
{
	struct jdict *d = moem_ja_alloc(a, sizeof(*d));

	if (d)
		memset(d, 0, sizeof(*d));
	return d;
}

static int dict_set(struct jarena *a, struct jdict *d, const char *k, size_t n, bool integer,
		    struct jv v)
{
	struct jv *o = dict_find(d, k, n, integer);

	if (o) {
		*o = v;
		return 0;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 8;
		const char **nk = moem_ja_alloc(a, cap * sizeof(*nk));
		size_t *nl = moem_ja_alloc(a, cap * sizeof(*nl));
		uint8_t *ni = moem_ja_alloc(a, cap);
		struct jv *nv = moem_ja_alloc(a, cap * sizeof(*nv));

		if (!nk || !nl || !ni || !nv)
			return -ENOMEM;
		if (d->n) {
			memcpy(nk, d->k, d->n * sizeof(*nk));
			memcpy(nl, d->klen, d->n * sizeof(*nl));
			memcpy(ni, d->ki, d->n);
			memcpy(nv, d->v, d->n * sizeof(*nv));
		}
		d->k = nk;
		d->klen = nl;
		d->ki = ni;
		d->v = nv;
		d->cap = cap;
	}
	d->k[d->n] = k;
	d->klen[d->n] = n;
	d->ki[d->n] = integer;
	d->v[d->n] = v;
	d->n++;
	return 0;
}

int moem_jv_dict_set(struct jarena *a, struct jdict *d, const char *k, size_t n, struct jv v)
{
	return dict_set(a, d, k, n, false, v);
}

int moem_jv_dict_put(struct jarena *a, struct jdict *d, const struct jv *key, struct jv v)
{
	char num[24], *k;
	int n;

	if (key->t == JT_STR)
		return dict_set(a, d, key->s.p, key->s.n, false, v);
	if (key->t != JT_INT)
		return -EINVAL;
	n = snprintf(num, sizeof(num), "%" PRId64, key->i);
	k = moem_ja_strndup(a, num, (size_t)n);
	return k ? dict_set(a, d, k, (size_t)n, true, v) : -ENOMEM;
}

struct jlist *moem_jv_list_new(struct jarena *a, size_t n)
{
	struct jlist *l = moem_ja_alloc(a, sizeof(*l));

	if (!l)
		return NULL;
	l->n = n;
	l->v = moem_ja_alloc(a, (n ? n : 1) * sizeof(*l->v));
	return l->v ? l : NULL;
}

int moem_jv_from_json(struct jarena *a, struct json_object *o, struct jv *out, int depth)
{
	int ret;

	if (depth > 64)
		return -ELOOP;
	switch (json_object_get_type(o)) {
	case json_type_null:
		*out = jv_none();
		return 0;
	case json_type_boolean:
		*out = jv_bool(json_object_get_boolean(o));
		return 0;
	case json_type_int:
		*out = jv_int(json_object_get_int64(o));
		return 0;
	case json_type_double:
		*out = (struct jv){.t = JT_FLOAT, .f = json_object_get_double(o)};
		return 0;
	case json_type_string:
		*out = jv_str(json_object_get_string(o), (size_t)json_object_get_string_len(o));
		return 0;
	case json_type_array: {
		size_t n = json_object_array_length(o);
		struct jlist *l = moem_jv_list_new(a, n);

		if (!l)
			return -ENOMEM;
		for (size_t i = 0; i < n; i++) {
			ret = moem_jv_from_json(a, json_object_array_get_idx(o, i), &l->v[i],
						depth + 1);
			if (ret)
				return ret;
		}
		*out = (struct jv){.t = JT_LIST, .l = l};
		return 0;
	}
	case json_type_object: {
		struct jdict *d = moem_jv_dict_new(a);

		if (!d)
			return -ENOMEM;
		json_object_object_foreach(o, k, v)
		{
			struct jv x;

			ret = moem_jv_from_json(a, v, &x, depth + 1);
			if (!ret)
				ret = moem_jv_dict_set(a, d, k, strlen(k), x);
			if (ret)
				return ret;
		}
		*out = (struct jv){.t = JT_DICT, .d = d};
		return 0;
	}
	}
	return -EINVAL;
}

int moem_jb_put(struct jbuf *b, const char *s, size_t n)
{
	if (b->limit && n > b->limit - b->n)
		return -E2BIG;
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (cap < b->n + n + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p)
			return -ENOMEM;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
	return 0;
}

int moem_jb_puts(struct jbuf *b, const char *s)
{
	return moem_jb_put(b, s, strlen(s));
}

/* Python's repr(float): the shortest string that reads back the same. */
/*
 * A float as Python's repr writes it: the fewest digits that read back
 * the same, fixed notation for exponents -4..15 (1000.0, 0.0001), else
 * scientific with a signed two-digit exponent (1e+16, 1.5e-05).
 */
static int put_float(struct jbuf *b, double f)
{
	char e[40], dig[24], s[48];
	int nd = 0, x, n = 0, prec;
	const char *p;

	if (isnan(f))
		return moem_jb_puts(b, "nan");
	if (isinf(f))
		return moem_jb_puts(b, f < 0 ? "-inf" : "inf");
	for (prec = 0; prec < 17; prec++) {
		snprintf(e, sizeof(e), "%.*e", prec, f);
		if (strtod(e, NULL) == f)
			break;
	}
	p = e;
	if (*p == '-')
		s[n++] = *p++;
	for (; *p && *p != 'e'; p++)
		if (*p != '.')
			dig[nd++] = *p;
	x = atoi(p + 1);
	if (x >= -4 && x < 16) {
		if (x < 0) {
			n += snprintf(s + n, sizeof(s) - n, "0.%.*s%.*s", -x - 1, "0000", nd, dig);
		} else {
			for (int i = 0; i <= x; i++)
				s[n++] = i < nd ? dig[i] : '0';
			s[n++] = '.';
			if (nd > x + 1)
				for (int i = x + 1; i < nd; i++)
					s[n++] = dig[i];
			else
				s[n++] = '0';
			s[n] = 0;
		}
	} else {
		s[n++] = dig[0];
		if (nd > 1) {
			s[n++] = '.';
			for (int i = 1; i < nd; i++)
				s[n++] = dig[i];
		}
		snprintf(s + n, sizeof(s) - n, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
	}
	return moem_jb_puts(b, s);
}

static int put_int(struct jbuf *b, int64_t i)
{
	char s[24];

	snprintf(s, sizeof(s), "%lld", (long long)i);
	return moem_jb_puts(b, s);
}

/* repr of a str: single quotes unless the string has ' and no ". */
static int repr_str(struct jbuf *b, const char *p, size_t n)
{
	char q = memchr(p, '\'', n) && !memchr(p, '"', n) ? '"' : '\'';
	int ret = moem_jb_put(b, &q, 1);

	for (size_t i = 0; !ret && i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		char e[8];

		if (c == '\\' || c == (unsigned char)q) {
			e[0] = '\\';
			e[1] = (char)c;
			ret = moem_jb_put(b, e, 2);
		} else if (c == '\n') {
			ret = moem_jb_puts(b, "\\n");
		} else if (c == '\t') {
			ret = moem_jb_puts(b, "\\t");
		} else if (c == '\r') {
			ret = moem_jb_puts(b, "\\r");
		} else if (c < 0x20 || c == 0x7f) {
			snprintf(e, sizeof(e), "\\x%02x", c);
			ret = moem_jb_puts(b, e);
		} else {
			ret = moem_jb_put(b, (const char *)&c, 1);
		}
	}
	return ret ? ret : moem_jb_put(b, &q, 1);
}

/*
 * A list can hold itself (x.append(x)): printing it would recurse
 * without end (the fuzzer's stack overflow). Past the depth tojson
 * allows, -ELOOP.
 */
static int repr_at(struct jbuf *b, const struct jv *v, int depth)
{
	int ret = 0;

	if (depth > 64)
		return moem_errf(ELOOP, "a value nested more than 64 deep (or holding itself) "
					"cannot be printed");
	switch (v->t) {
	case JT_STR:
		return repr_str(b, v->s.p, v->s.n);
	case JT_LIST:
		ret = moem_jb_puts(b, v->tuple ? "(" : "[");
		for (size_t i = 0; !ret && i < v->l->n; i++) {
			if (i)
				ret = moem_jb_puts(b, ", ");
			if (!ret)
				ret = repr_at(b, &v->l->v[i], depth + 1);
		}
		if (!ret && v->tuple && v->l->n == 1)
			ret = moem_jb_puts(b, ",");
		return ret ? ret : moem_jb_puts(b, v->tuple ? ")" : "]");
	case JT_DICT:
		ret = moem_jb_puts(b, "{");
		for (size_t i = 0; !ret && i < v->d->n; i++) {
			if (i)
				ret = moem_jb_puts(b, ", ");
			if (!ret)
				ret = v->d->ki[i] ? moem_jb_put(b, v->d->k[i], v->d->klen[i])
						  : repr_str(b, v->d->k[i], v->d->klen[i]);
			if (!ret)
				ret = moem_jb_puts(b, ": ");
			if (!ret)
				ret = repr_at(b, &v->d->v[i], depth + 1);
		}
		return ret ? ret : moem_jb_puts(b, "}");
	default:
		return moem_jv_print(b, v);
	}
}

int moem_jv_repr(struct jbuf *b, const struct jv *v)
{
	return repr_at(b, v, 0);
}

int moem_jv_print(struct jbuf *b, const struct jv *v)
{
	switch (v->t) {
	case JT_UNDEF:
		return 0;
	case JT_NONE:
		return moem_jb_puts(b, "None");
	case JT_BOOL:
		return moem_jb_puts(b, v->b ? "True" : "False");
	case JT_INT:
		return put_int(b, v->i);
	case JT_FLOAT:
		return put_float(b, v->f);
	case JT_STR:
		return moem_jb_put(b, v->s.p, v->s.n);
	case JT_FN:
		return moem_jb_puts(b, "<function>");
	default:
		return moem_jv_repr(b, v);
	}
}

static int json_str(struct jbuf *b, const char *p, size_t n)
{
	int ret = moem_jb_puts(b, "\"");

	for (size_t i = 0; !ret && i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		char e[8];

		switch (c) {
		case '"':
			ret = moem_jb_puts(b, "\\\"");
			break;
		case '\\':
			ret = moem_jb_puts(b, "\\\\");
			break;
		case '\n':
			ret = moem_jb_puts(b, "\\n");
			break;
		case '\r':
			ret = moem_jb_puts(b, "\\r");
			break;
		case '\t':
			ret = moem_jb_puts(b, "\\t");
			break;
		case '\b':
			ret = moem_jb_puts(b, "\\b");
			break;
		case '\f':
			ret = moem_jb_puts(b, "\\f");
			break;
		default:
			if (c < 0x20 || c == 0x7f) {
				snprintf(e, sizeof(e), "\\u%04x", c);
				ret = moem_jb_puts(b, e);
			} else {
				ret = moem_jb_put(b, (const char *)&c, 1);
			}
		}
	}
	return ret ? ret : moem_jb_puts(b, "\"");
}

static int indent_to(struct jbuf *b, int indent, int level)
{
	int ret = moem_jb_puts(b, "\n");

	for (int i = 0; !ret && i < indent * level; i++)
		ret = moem_jb_puts(b, " ");
	return ret;
}

int moem_jv_tojson(struct jbuf *b, const struct jv *v, int indent, int depth, bool sort_keys)
{
	const char *sep = indent >= 0 ? "," : ", ";
	int ret = 0;

	if (depth > 64)
		return -ELOOP;
	if (v->gen)
		return -EINVAL;
	switch (v->t) {
	case JT_UNDEF:
	case JT_NONE:
		return moem_jb_puts(b, "null");
	case JT_BOOL:
		return moem_jb_puts(b, v->b ? "true" : "false");
	case JT_INT:
		return put_int(b, v->i);
	case JT_FLOAT:
		if (isnan(v->f) || isinf(v->f))
			return moem_jb_puts(b, isnan(v->f) ? "NaN"
					       : v->f < 0  ? "-Infinity"
							   : "Infinity");
		return put_float(b, v->f);
	case JT_STR:
		return json_str(b, v->s.p, v->s.n);
	case JT_LIST:
		if (!v->l->n)
			return moem_jb_puts(b, "[]");
		ret = moem_jb_puts(b, "[");
		for (size_t i = 0; !ret && i < v->l->n; i++) {
			if (i)
				ret = moem_jb_puts(b, sep);
			if (!ret && indent >= 0)
				ret = indent_to(b, indent, depth + 1);
			if (!ret)
				ret = moem_jv_tojson(b, &v->l->v[i], indent, depth + 1, sort_keys);
		}
		if (!ret && indent >= 0)
			ret = indent_to(b, indent, depth);
		return ret ? ret : moem_jb_puts(b, "]");
	case JT_DICT: {
		size_t order[256], n = v->d->n;

		if (!n)
			return moem_jb_puts(b, "{}");
		if (n > MOEM_JINJA_SORT_MAX)
			sort_keys = false;
		for (size_t i = 0; i < n && i < 256; i++)
			order[i] = i;
		if (sort_keys) {
			/* Insertion sort by key bytes (code point order for UTF-8). */
			for (size_t i = 1; i < n; i++)
				for (size_t k = i; k > 0; k--) {
					size_t x = order[k - 1], y = order[k];
					size_t m = moem_min(v->d->klen[x], v->d->klen[y]);
					int c = memcmp(v->d->k[x], v->d->k[y], m);

					/* Python cannot order an int against a str */
					if (v->d->ki[x] != v->d->ki[y])
						return -EINVAL;
					if (v->d->ki[x]) {
						int64_t p = strtoll(v->d->k[x], NULL, 10),
							q = strtoll(v->d->k[y], NULL, 10);

						c = p < q ? -1 : p > q;
					}
					if (c < 0 || (c == 0 && v->d->klen[x] <= v->d->klen[y]))
						break;
					order[k - 1] = y;
					order[k] = x;
				}
		}
		ret = moem_jb_puts(b, "{");
		for (size_t j = 0; !ret && j < n; j++) {
			size_t i = sort_keys ? order[j] : j;

			if (j)
				ret = moem_jb_puts(b, sep);
			if (!ret && indent >= 0)
				ret = indent_to(b, indent, depth + 1);
			if (!ret)
				ret = json_str(b, v->d->k[i], v->d->klen[i]);
			if (!ret)
				ret = moem_jb_puts(b, ": ");
			if (!ret)
				ret = moem_jv_tojson(b, &v->d->v[i], indent, depth + 1, sort_keys);
		}
		if (!ret && indent >= 0)
			ret = indent_to(b, indent, depth);
		return ret ? ret : moem_jb_puts(b, "}");
	}
	case JT_FN:
		return -EINVAL;
	}
	return -EINVAL;
}
