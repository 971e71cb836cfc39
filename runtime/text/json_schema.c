// SPDX-License-Identifier: GPL-2.0-only
/*
 * Compiling a JSON Schema into the graph json_fsm.c walks (json_fsm.h,
 * json_schema_int.h). Each schema object becomes at most one node (a memo
 * by object), so a $ref back to an enclosing schema closes a cycle
 * instead of recursing; a keyword the recognizer would not follow is
 * refused by name, never ignored, except the annotations that JSON Schema
 * itself does not validate.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/json_fsm.h>

#include "json_schema_int.h"

#define COMPILE_NEST 128 /* schemas inside schemas being compiled at once */

struct memo {
	struct json_object *o;
	int idx; /* its node */
};

struct cctx {
	struct moem_json_schema *s;
	struct json_object *root;
	struct memo *memo;
	uint32_t nmemo, cap_memo;
	bool *done; /* per node: its starts are known */
	int any;    /* the node of "any value", made on first use (-1) */
	int nest;
	char path[512]; /* the JSON pointer of the schema being compiled */
};

static const char *const annotations[] = {
	"title",	 "description", "default",    "examples",	 "$schema",
	"$id",		 "$comment",	"deprecated", "readOnly",	 "writeOnly",
	"$defs",	 "definitions", "format",     "contentEncoding", "contentMediaType",
	"discriminator", NULL,
};

#define SUPPORTED                                                                         \
	"(moem follows type, properties, required, additionalProperties, items, "         \
	"prefixItems, uniqueItems (of enums), minItems, maxItems, minLength, maxLength, " \
	"pattern, minimum, maximum, exclusiveMinimum, exclusiveMaximum, enum, const, "    \
	"anyOf, oneOf, allOf of one, $ref)"

static const char *const obj_kw[] = {"properties", "required", "additionalProperties",
				     "unevaluatedProperties", NULL};
static const char *const arr_kw[] = {"items",	 "prefixItems", "minItems",
				     "maxItems", "uniqueItems", NULL};
static const char *const str_kw[] = {"minLength", "maxLength", "pattern", NULL};
static const char *const num_kw[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
				     NULL};

static bool in_list(const char *const *l, const char *k)
{
	for (; l && *l; l++)
		if (!strcmp(*l, k))
			return true;
	return false;
}

static int bad(struct cctx *c, const char *fmt, ...) MOEM_PRINTF(2, 3);

static int bad(struct cctx *c, const char *fmt, ...)
{
	char m[320];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	return moem_errf(EINVAL, "schema %s: %s", c->path[0] ? c->path : "(top)", m);
}

/* Enter path segment seg (JSON pointer escaped); returns the length to restore. */
static size_t push(struct cctx *c, const char *seg)
{
	size_t n = strlen(c->path), at = n;

	if (at + 1 < sizeof(c->path))
		c->path[at++] = '/';
	for (; *seg && at + 2 < sizeof(c->path); seg++) {
		if (*seg == '~' || *seg == '/') {
			c->path[at++] = '~';
			c->path[at++] = *seg == '~' ? '0' : '1';
		} else {
			c->path[at++] = *seg;
		}
	}
	c->path[at] = 0;
	return n;
}

static size_t push_idx(struct cctx *c, const char *seg, size_t i)
{
	char b[32];
	size_t n = push(c, seg);

	snprintf(b, sizeof(b), "%zu", i);
	push(c, b);
	return n;
}

#define GROW(c, arr, n, cap, lim)                                                \
	({                                                                       \
		int _r = 0;                                                      \
		if ((n) >= (lim)) {                                              \
			_r = -E2BIG;                                             \
		} else if ((n) == (cap)) {                                       \
			uint32_t _nc = (cap) ? (cap)*2 : 16;                     \
			void *_p = realloc((arr), (size_t)_nc * sizeof(*(arr))); \
			if (_p) {                                                \
				(arr) = _p;                                      \
				(cap) = _nc;                                     \
			} else {                                                 \
				_r = -ENOMEM;                                    \
			}                                                        \
		}                                                                \
		_r;                                                              \
	})

static int new_node(struct cctx *c, uint8_t type, int *idx)
{
	struct moem_json_schema *s = c->s;
	struct jnode *n;
	int ret = GROW(c, s->n, s->nn, s->cap_n, MOEM_JSON_SCHEMA_NODES);

	if (ret == -E2BIG)
		return moem_errf(EINVAL, "schema: more than %d distinct subschemas",
				 MOEM_JSON_SCHEMA_NODES);
	if (ret)
		return ret;
	if (s->nn % 16 == 0) {
		bool *d = realloc(c->done, (s->nn + 16) * sizeof(*d));

		if (!d)
			return -ENOMEM;
		c->done = d;
	}
	n = &s->n[s->nn];
	memset(n, 0, sizeof(*n));
	n->type = type;
	n->child = J_NONE;
	n->max = UINT32_MAX;
	c->done[s->nn] = type != J_ANYOF;
	switch (type) {
	case J_OBJ:
	case J_UNION:
		n->starts['{' >> 3] |= 1 << ('{' & 7);
		break;
	case J_ARR:
		n->starts['[' >> 3] |= 1 << ('[' & 7);
		break;
	case J_STR:
		n->starts['"' >> 3] |= 1 << ('"' & 7);
		break;
	case J_NUM:
	case J_INT:
		for (const char *d = "-0123456789"; *d; d++)
			n->starts[*d >> 3] |= (uint8_t)(1 << (*d & 7));
		break;
	default:
		break;
	}
	*idx = (int)s->nn++;
	return 0;
}

static int add_text(struct cctx *c, const char *t, size_t len, uint32_t *off)
{
	struct moem_json_schema *s = c->s;

	if (len > 0xffff || s->ntext + len > MOEM_JSON_SCHEMA_TEXT)
		return bad(c, "%s",
			   "keys and enum values too long (a value at most 65535 bytes, "
			   "all at most 1 MiB)");
	if (s->ntext + len > s->cap_text) {
		uint32_t nc = s->cap_text ? s->cap_text : 256;
		char *p;

		while (nc < s->ntext + len)
			nc *= 2;
		p = realloc(s->text, nc);
		if (!p)
			return -ENOMEM;
		s->text = p;
		s->cap_text = nc;
	}
	memcpy(s->text + s->ntext, t, len);
	*off = s->ntext;
	s->ntext += (uint32_t)len;
	return 0;
}

static int add_lit(struct cctx *c, const char *t, size_t len)
{
	struct moem_json_schema *s = c->s;
	uint32_t off;
	int ret = add_text(c, t, len, &off);

	if (ret)
		return ret;
	ret = GROW(c, s->l, s->nl, s->cap_l, UINT32_MAX);
	if (ret)
		return ret;
	s->l[s->nl].off = off;
	s->l[s->nl++].len = (uint32_t)len;
	return 0;
}

/* A literal's first byte joins its node's starts. */
static void lit_starts(struct moem_json_schema *s, int idx)
{
	struct jnode *n = &s->n[idx];

	for (uint32_t i = 0; i < n->n; i++) {
		unsigned char b = (unsigned char)s->text[s->l[n->first + i].off];

		n->starts[b >> 3] |= (uint8_t)(1 << (b & 7));
	}
}

/* A value as JSON writes it (no blanks; '/' not escaped). */
static const char *as_json(struct json_object *v, size_t *len)
{
	const char *t = json_object_to_json_string_length(
		v, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, len);

	return t;
}

static int lits_node(struct cctx *c, const char *const *texts, int n, int *idx)
{
	int ret = new_node(c, J_LITS, idx);

	if (ret)
		return ret;
	c->s->n[*idx].first = c->s->nl;
	for (int i = 0; i < n; i++) {
		ret = add_lit(c, texts[i], strlen(texts[i]));
		if (ret)
			return ret;
	}
	c->s->n[*idx].n = (uint8_t)n;
	lit_starts(c->s, *idx);
	return 0;
}

/* "Any value": an object or array of any values, a string, a number, true, false, null. */
static int any_node(struct cctx *c, int *idx)
{
	static const char *const tfn[] = {"true", "false", "null"};
	int alt[5], ret;
	struct jnode *n;

	if (c->any >= 0) {
		*idx = c->any;
		return 0;
	}
	ret = new_node(c, J_ANYOF, &c->any);
	if (!ret)
		ret = new_node(c, J_OBJ, &alt[0]);
	if (!ret)
		ret = new_node(c, J_ARR, &alt[1]);
	if (!ret)
		ret = new_node(c, J_STR, &alt[2]);
	if (!ret)
		ret = new_node(c, J_NUM, &alt[3]);
	if (!ret)
		ret = lits_node(c, tfn, 3, &alt[4]);
	if (ret)
		return ret;
	c->s->n[alt[0]].child = (uint16_t)c->any;
	c->s->n[alt[1]].child = (uint16_t)c->any;
	n = &c->s->n[c->any];
	n->first = c->s->na;
	for (int i = 0; i < 5; i++) {
		ret = GROW(c, c->s->a, c->s->na, c->s->cap_a, UINT32_MAX);
		if (ret)
			return ret;
		c->s->a[c->s->na++] = (uint16_t)alt[i];
	}
	n = &c->s->n[c->any];
	n->n = 5;
	for (int i = 0; i < 5; i++)
		for (int b = 0; b < 32; b++)
			n->starts[b] |= c->s->n[alt[i]].starts[b];
	c->done[c->any] = true;
	*idx = c->any;
	return 0;
}

static int memo_find(struct cctx *c, struct json_object *o)
{
	for (uint32_t i = 0; i < c->nmemo; i++)
		if (c->memo[i].o == o)
			return (int)i;
	return -1;
}

static int memo_set(struct cctx *c, struct json_object *o, int idx)
{
	int m = memo_find(c, o);
	int ret;

	if (m >= 0) {
		c->memo[m].idx = idx;
		return 0;
	}
	ret = GROW(c, c->memo, c->nmemo, c->cap_memo, UINT32_MAX);
	if (ret)
		return ret;
	c->memo[c->nmemo].o = o;
	c->memo[c->nmemo++].idx = idx;
	return 0;
}

/* Every keyword of o is an annotation or in one of the lists. */
static int only(struct cctx *c, struct json_object *o, const char *const *a, const char *what)
{
	json_object_object_foreach(o, k, v)
	{
		char m[300];

		(void)v;
		if (in_list(annotations, k) || in_list(a, k))
			continue;
		snprintf(m, sizeof(m), "'%s' is not supported %s", k, what);
		return bad(c, "%s", m);
	}
	return 0;
}

static int get_count(struct cctx *c, struct json_object *o, const char *k, uint32_t *out)
{
	struct json_object *v;
	int64_t x;

	if (!json_object_object_get_ex(o, k, &v))
		return 0;
	if (!json_object_is_type(v, json_type_int) || (x = json_object_get_int64(v)) < 0)
		return bad(c, "'%s' must be a non-negative integer", k);
	*out = x >= UINT32_MAX ? UINT32_MAX - 1 : (uint32_t)x;
	return 0;
}

static int compile(struct cctx *c, struct json_object *o, int *idx);

static int compile_at(struct cctx *c, struct json_object *o, const char *seg, int *idx)
{
	size_t at = push(c, seg);
	int ret = compile(c, o, idx);

	if (!ret)
		c->path[at] = 0;
	return ret;
}

static int compile_object(struct cctx *c, struct json_object *o, int idx)
{
	struct json_object *props = NULL, *req = NULL, *add = NULL, *uneval = NULL;
	uint16_t child[MOEM_JSON_SCHEMA_PROPS];
	bool required[MOEM_JSON_SCHEMA_PROPS] = {0};
	const char *names[MOEM_JSON_SCHEMA_PROPS];
	int n = 0, ret, ci;
	size_t at;

	json_object_object_get_ex(o, "properties", &props);
	json_object_object_get_ex(o, "required", &req);
	json_object_object_get_ex(o, "additionalProperties", &add);
	json_object_object_get_ex(o, "unevaluatedProperties", &uneval);
	if (props && !json_object_is_type(props, json_type_object))
		return bad(c, "%s", "'properties' must be an object");
	if (uneval && !json_object_is_type(uneval, json_type_boolean))
		return bad(c, "%s",
			   "'unevaluatedProperties' other than true or false is not "
			   "supported");
	if (props && json_object_object_length(props) > MOEM_JSON_SCHEMA_PROPS)
		return bad(c, "'properties' lists more than %s", "64 properties");
	if (props) {
		at = push(c, "properties");
		json_object_object_foreach(props, k, v)
		{
			int ch;

			if (json_object_is_type(v, json_type_boolean) &&
			    !json_object_get_boolean(v))
				continue; /* may not appear: never written */
			ret = compile_at(c, v, k, &ch);
			if (ret)
				return ret;
			names[n] = k;
			child[n++] = (uint16_t)ch;
		}
		c->path[at] = 0;
	}
	if (req) {
		size_t nr;

		if (!json_object_is_type(req, json_type_array))
			return bad(c, "%s", "'required' must be an array of property names");
		nr = json_object_array_length(req);
		for (size_t i = 0; i < nr; i++) {
			struct json_object *r = json_object_array_get_idx(req, i);
			const char *name;
			int j;

			if (!json_object_is_type(r, json_type_string))
				return bad(c, "%s",
					   "'required' must be an array of property names");
			name = json_object_get_string(r);
			for (j = 0; j < n && strcmp(names[j], name); j++)
				;
			if (j == n)
				return bad(c,
					   "required property '%s' is not in 'properties' (or is "
					   "false there)",
					   name);
			required[j] = true;
		}
	}
	if (!n && (!add || json_object_get_type(add) != json_type_boolean ||
		   json_object_get_boolean(add))) {
		/* any keys: values of additionalProperties' schema, or anything */
		if (uneval && !json_object_get_boolean(uneval)) {
			ci = J_NONE;
		} else if (add && !json_object_is_type(add, json_type_boolean)) {
			ret = compile_at(c, add, "additionalProperties", &ci);
			if (ret)
				return ret;
		} else {
			ret = any_node(c, &ci);
			if (ret)
				return ret;
		}
		c->s->n[idx].child = (uint16_t)ci;
	} else if (add && !json_object_is_type(add, json_type_boolean)) {
		/* checked, though only the listed properties are written */
		ret = compile_at(c, add, "additionalProperties", &ci);
		if (ret)
			return ret;
	}
	c->s->n[idx].first = c->s->np;
	for (int i = 0; i < n; i++) {
		struct json_object *k = json_object_new_string(names[i]);
		const char *t;
		size_t len;
		uint32_t off;

		if (!k)
			return -ENOMEM;
		t = as_json(k, &len);
		ret = t ? add_text(c, t + 1, len - 2, &off) : -ENOMEM;
		json_object_put(k);
		if (ret)
			return ret;
		ret = GROW(c, c->s->p, c->s->np, c->s->cap_p, UINT32_MAX);
		if (ret)
			return ret;
		c->s->p[c->s->np++] = (struct jprop){off, (uint32_t)len - 2, child[i], required[i]};
	}
	c->s->n[idx].n = (uint8_t)n;
	return 0;
}

/*
 * uniqueItems true, followed for an array of enum values (Pydantic's
 * set[SomeEnum]): each value at most once (a mask per open array), so at
 * most as many items as values. Values that JSON compares by more than
 * their text (numbers: 1 and 1.0; containers) are refused, as are other
 * items, which the recognizer would have to remember whole.
 */
static int unique_items(struct cctx *c, uint32_t np, int ci, uint32_t mn, uint32_t *mx)
{
	const struct moem_json_schema *s = c->s;
	const struct jnode *l = ci == J_NONE ? NULL : &s->n[ci];

	if (np || !l || l->type != J_LITS)
		return bad(c, "%s",
			   "'uniqueItems' true is supported for arrays of enum values only");
	for (uint32_t i = 0; i < l->n; i++)
		if (!strchr("\"tfn", s->text[s->l[l->first + i].off]))
			return bad(c, "%s",
				   "'uniqueItems' true is supported for enums of strings, "
				   "booleans and null only");
	if (mn > l->n)
		return bad(c, "'minItems' above the %u values 'uniqueItems' allows", l->n);
	if (*mx > l->n)
		*mx = l->n;
	return 0;
}

/*
 * An array: prefixItems (a tuple: Pydantic's tuple[int, str]) go to the
 * node's n alternatives from first, one per position; items to child,
 * for every position after them.
 */
static int compile_array(struct cctx *c, struct json_object *o, int idx)
{
	struct json_object *items = NULL, *pre, *u;
	uint16_t pi[MOEM_JSON_SCHEMA_PROPS];
	uint32_t mn = 0, mx = UINT32_MAX, np = 0;
	int ci, ret;

	if (json_object_object_get_ex(o, "uniqueItems", &u) &&
	    !json_object_is_type(u, json_type_boolean))
		return bad(c, "%s", "'uniqueItems' must be a boolean");
	ret = get_count(c, o, "minItems", &mn);
	if (!ret)
		ret = get_count(c, o, "maxItems", &mx);
	if (ret)
		return ret;
	if (json_object_object_get_ex(o, "prefixItems", &pre)) {
		if (!json_object_is_type(pre, json_type_array) || !json_object_array_length(pre) ||
		    json_object_array_length(pre) > MOEM_JSON_SCHEMA_PROPS)
			return bad(c, "'prefixItems' must be an array of 1 to %d schemas",
				   MOEM_JSON_SCHEMA_PROPS);
		np = (uint32_t)json_object_array_length(pre);
		for (uint32_t i = 0; i < np; i++) {
			size_t at = push_idx(c, "prefixItems", i);
			int a;

			ret = compile(c, json_object_array_get_idx(pre, i), &a);
			if (ret)
				return ret;
			c->path[at] = 0;
			pi[i] = (uint16_t)a;
		}
	}
	if (json_object_object_get_ex(o, "items", &items) &&
	    json_object_is_type(items, json_type_boolean) && !json_object_get_boolean(items)) {
		if (mn > np)
			return bad(c,
				   "'minItems' above the %u items of 'prefixItems' ('items' false)",
				   np);
		mx = mx < np ? mx : np;
		ci = J_NONE;
	} else if (items && !json_object_is_type(items, json_type_boolean)) {
		ret = compile_at(c, items, "items", &ci);
	} else {
		ret = any_node(c, &ci);
	}
	if (ret)
		return ret;
	if (mn > mx)
		return bad(c, "%s", "'minItems' above 'maxItems': no array is valid");
	if (u && json_object_get_boolean(u)) {
		ret = unique_items(c, np, ci, mn, &mx);
		if (ret)
			return ret;
		c->s->n[idx].unique = true;
	}
	c->s->n[idx].first = c->s->na;
	for (uint32_t i = 0; i < np; i++) {
		ret = GROW(c, c->s->a, c->s->na, c->s->cap_a, UINT32_MAX);
		if (ret)
			return ret;
		c->s->a[c->s->na++] = pi[i];
	}
	c->s->n[idx].n = (uint8_t)np;
	c->s->n[idx].child = (uint16_t)ci;
	c->s->n[idx].min = mn;
	c->s->n[idx].max = mx;
	return 0;
}

static int type_of(const char *t)
{
	static const char *const names[] = {"object",  "array",	  "string", "number",
					    "integer", "boolean", "null"};

	for (int i = 0; i < 7; i++)
		if (!strcmp(t, names[i]))
			return i;
	return -1;
}

/* Beyond every value a bounded number can be written with (below 10^(2 JNUM_DIGITS)). */
#define JNUM_BEYOND (jnum_p10(2 * JNUM_DIGITS + 1))

/*
 * A number written as t (digits, a point, an exponent: printf's %e or an
 * integer) in units of 10^-JNUM_DIGITS, rounded down (*fl) and up (*ce);
 * beyond +-JNUM_BEYOND it is that.
 */
static void to_units(const char *t, jnum_t *fl, jnum_t *ce)
{
	bool neg = *t == '-', point = false;
	int e = JNUM_DIGITS, sig = 0;
	jnum_t m = 0, q, r;

	for (t += neg; (*t >= '0' && *t <= '9') || *t == '.'; t++) {
		if (*t == '.') {
			point = true;
			continue;
		}
		sig += m || *t != '0';
		m = m * 10 + (*t - '0');
		e -= point;
	}
	if (*t == 'e' || *t == 'E')
		e += atoi(t + 1);
	if (!m) {
		q = r = 0;
	} else if (e >= 0) {
		q = sig + e > 2 * JNUM_DIGITS + 1 ? JNUM_BEYOND : m * jnum_p10(e);
		r = 0;
	} else if (-e > 36) {
		q = 0;
		r = 1;
	} else {
		q = m / jnum_p10(-e);
		r = m % jnum_p10(-e);
	}
	*fl = neg ? -q - (r != 0) : q;
	*ce = neg ? -q : q + (r != 0);
}

/*
 * Bound k of o into [*lo, *hi] (the values a number may take, in units of
 * 10^-JNUM_DIGITS); *any: there was one. A double is taken as its
 * shortest decimal form, the fewest digits that read back as it: a value
 * the recognizer writes (at most 15 significant digits) compares with
 * that decimal exactly as validators compare its double with the bound's.
 */
static int get_bound(struct cctx *c, struct json_object *o, const char *k, jnum_t *lo, jnum_t *hi,
		     bool *any)
{
	bool upper = strstr(k, "aximum"), excl = !strncmp(k, "exclusive", 9);
	struct json_object *v;
	jnum_t fl, ce, lim;
	char t[48];

	if (!json_object_object_get_ex(o, k, &v))
		return 0;
	if (json_object_is_type(v, json_type_int)) {
		snprintf(t, sizeof(t), "%" PRId64, json_object_get_int64(v));
	} else if (json_object_is_type(v, json_type_double) &&
		   isfinite(json_object_get_double(v))) {
		double d = json_object_get_double(v);

		for (int p = 1; p <= 17; p++) {
			snprintf(t, sizeof(t), "%.*e", p - 1, d);
			if (strtod(t, NULL) == d)
				break;
		}
	} else {
		return bad(c, "'%s' must be a number%s", k,
			   json_object_is_type(v, json_type_boolean)
				   ? " (the boolean form is draft 4's: the bound itself goes there)"
				   : "");
	}
	to_units(t, &fl, &ce);
	if (upper) {
		lim = excl ? ce - 1 : fl;
		*hi = lim < *hi ? lim : *hi;
	} else {
		lim = excl ? fl + 1 : ce;
		*lo = lim > *lo ? lim : *lo;
	}
	*any = true;
	return 0;
}

/* minimum, maximum and the exclusive ones of number node idx (integer: t 4). */
static int number_bounds(struct cctx *c, struct json_object *o, int idx, bool integer)
{
	struct jbound b = {-JNUM_BEYOND, JNUM_BEYOND};
	struct moem_json_schema *s = c->s;
	struct jnode *n;
	bool any = false;
	int ret = 0;

	for (int i = 0; !ret && num_kw[i]; i++)
		ret = get_bound(c, o, num_kw[i], &b.lo, &b.hi, &any);
	if (ret || !any)
		return ret;
	ret = GROW(c, s->b, s->nb, s->cap_b, MOEM_JSON_SCHEMA_NODES);
	if (ret)
		return ret;
	n = &s->n[idx];
	n->n = 1;
	n->first = s->nb;
	s->b[s->nb++] = b;
	memset(n->starts, 0, sizeof(n->starts));
	for (const char *d = "-0123456789"; *d; d++)
		if (moem_jnum_can_start(&b, integer, (unsigned char)*d))
			n->starts[*d >> 3] |= (uint8_t)(1 << (*d & 7));
	for (int i = 0; i < 32; i++)
		if (n->starts[i])
			return 0;
	return bad(c, "no %s within the bounds that moem writes (at most %d digits, no exponent)",
		   integer ? "integer" : "number", JNUM_DIGITS);
}

/* minLength and maxLength of o (0 and UINT32_MAX when absent). */
static int string_lengths(struct cctx *c, struct json_object *o, uint32_t *mn, uint32_t *mx)
{
	int ret = get_count(c, o, "minLength", mn);

	if (!ret)
		ret = get_count(c, o, "maxLength", mx);
	if (!ret && *mn > *mx)
		ret = bad(c, "%s", "'minLength' above 'maxLength': no string is valid");
	return ret;
}

/* A string of node idx that matches o's pattern (json_regex.c). */
static int string_pattern(struct cctx *c, struct json_object *o, int idx)
{
	struct moem_json_schema *s = c->s;
	uint32_t mn = 0, mx = UINT32_MAX;
	struct json_object *v;
	struct jre *re;
	char err[200];
	int ret;

	json_object_object_get_ex(o, "pattern", &v);
	if (!json_object_is_type(v, json_type_string) ||
	    strlen(json_object_get_string(v)) != (size_t)json_object_get_string_len(v))
		return bad(c, "%s", "'pattern' must be a string (without NUL)");
	ret = string_lengths(c, o, &mn, &mx);
	if (ret)
		return ret;
	if (mn > JRE_LCAP || (mx != UINT32_MAX && mx > JRE_LCAP))
		return bad(c,
			   "'minLength' or 'maxLength' above %d beside 'pattern' is not supported",
			   JRE_LCAP);
	ret = moem_jre_compile(json_object_get_string(v), &re, err, sizeof(err));
	if (ret == -EINVAL)
		return bad(c, "'pattern': %s", err);
	if (ret)
		return ret;
	if (mn || mx != UINT32_MAX) {
		ret = moem_jre_lengths(re);
		if (!ret && !moem_jre_fits(re, re->start, mn, mx))
			ret = bad(c, "%s",
				  "no string within 'minLength' and 'maxLength' matches 'pattern'");
		if (ret) {
			moem_jre_free(re);
			return ret;
		}
	}
	ret = GROW(c, s->re, s->nre, s->cap_re, MOEM_JSON_SCHEMA_NODES);
	if (ret) {
		moem_jre_free(re);
		return ret;
	}
	s->n[idx].n = 1;
	s->n[idx].first = s->nre;
	s->n[idx].min = mn;
	s->n[idx].max = mx;
	s->re[s->nre++] = re;
	return 0;
}

/* A node of one type (type_of()) with o's keywords for it; memo: the node is o's. */
static int compile_typed(struct cctx *c, struct json_object *o, int t, bool memo, int *idx)
{
	static const char *const tf[] = {"true", "false"}, *const nul[] = {"null"};
	static const uint8_t jt[] = {J_OBJ, J_ARR, J_STR, J_NUM, J_INT};
	uint32_t mn = 0, mx = UINT32_MAX;
	int ret;

	if (t == 5)
		return lits_node(c, tf, 2, idx);
	if (t == 6)
		return lits_node(c, nul, 1, idx);
	ret = new_node(c, jt[t], idx);
	/* a container's node is known before its children: a $ref back to it closes a cycle */
	if (!ret && memo)
		ret = memo_set(c, o, *idx);
	if (ret)
		return ret;
	if (t == 0)
		return compile_object(c, o, *idx);
	if (t == 1)
		return compile_array(c, o, *idx);
	if (t == 3 || t == 4)
		return number_bounds(c, o, *idx, t == 4);
	if (t == 2 && json_object_object_get_ex(o, "pattern", NULL))
		return string_pattern(c, o, *idx);
	if (t == 2) {
		ret = string_lengths(c, o, &mn, &mx);
		if (ret)
			return ret;
		c->s->n[*idx].min = mn;
		c->s->n[*idx].max = mx;
	}
	return 0;
}

/* enum / const: the values as JSON writes them, each checked against a type if given. */
static int compile_lits(struct cctx *c, struct json_object *o, int *idx)
{
	struct json_object *e = NULL, *k = NULL, *ty = NULL;
	size_t n;
	int ret;

	json_object_object_get_ex(o, "enum", &e);
	json_object_object_get_ex(o, "const", &k);
	json_object_object_get_ex(o, "type", &ty);
	if (e && k)
		return bad(c, "%s", "both 'enum' and 'const'");
	if (e && !json_object_is_type(e, json_type_array))
		return bad(c, "%s", "'enum' must be an array");
	n = e ? json_object_array_length(e) : 1;
	if (!n || n > MOEM_JSON_SCHEMA_ENUM)
		return bad(c, "'enum' must hold 1 to %s values", "64");
	ret = only(c, o, (const char *const[]){"enum", "const", "type", NULL},
		   "beside 'enum' or 'const'");
	if (ret)
		return ret;
	ret = new_node(c, J_LITS, idx);
	if (ret)
		return ret;
	c->s->n[*idx].first = c->s->nl;
	for (size_t i = 0; i < n; i++) {
		struct json_object *v = e ? json_object_array_get_idx(e, i) : k;
		const char *t;
		size_t len;

		if (ty && json_object_is_type(ty, json_type_string)) {
			static const enum json_type want[] = {json_type_object, json_type_array,
							      json_type_string, json_type_double,
							      json_type_int,	json_type_boolean,
							      json_type_null};
			int w = type_of(json_object_get_string(ty));
			enum json_type got = json_object_get_type(v);

			if (w < 0)
				return bad(c, "unknown type '%s'", json_object_get_string(ty));
			if (got != want[w] && !(w == 3 && got == json_type_int))
				return bad(c, "%s", "an 'enum' or 'const' value is not of 'type'");
		} else if (ty) {
			return bad(c, "%s", "'type' must be a string beside 'enum' or 'const'");
		}
		t = as_json(v, &len);
		if (!t)
			return -ENOMEM;
		for (size_t j = 0; j < i; j++) {
			const struct jlit *l = &c->s->l[c->s->n[*idx].first + j];

			if (l->len == len && !memcmp(c->s->text + l->off, t, len))
				return bad(c, "%s", "'enum' lists a value twice");
		}
		ret = add_lit(c, t, len);
		if (ret)
			return ret;
	}
	c->s->n[*idx].n = (uint8_t)n;
	lit_starts(c->s, *idx);
	return 0;
}

/* The first property of object node i (the tag of a union), or NULL. */
static const struct jprop *tag_of(const struct moem_json_schema *s, uint16_t i)
{
	const struct jnode *o = &s->n[i];
	const struct jprop *p;

	if (o->type != J_OBJ || !o->n)
		return NULL;
	p = &s->p[o->first];
	return p->required && s->n[p->node].type == J_LITS && s->n[p->node].n == 1 ? p : NULL;
}

/*
 * Objects among the alternatives flat[0..n) whose first property is the
 * same key, required, with a const value different in each: one union
 * node (json_fsm.c reads the value, then goes on as that object). Left as
 * they are if they are not all of that kind (the overlap is then refused).
 */
static int merge_objects(struct cctx *c, uint16_t *flat, int n)
{
	struct moem_json_schema *s = c->s;
	const struct jprop *t0 = NULL;
	int cnt = 0, u, lits, ret, at = -1;

	for (int i = 0; i < n; i++) {
		const struct jprop *t;

		if (flat[i] == J_NONE || s->n[flat[i]].type != J_OBJ)
			continue;
		t = tag_of(s, flat[i]);
		if (!t || (t0 && (t->len != t0->len ||
				  memcmp(s->text + t->off, s->text + t0->off, t->len))))
			return 0;
		for (int j = 0; t0 && j < i; j++) {
			const struct jlit *a, *b;

			if (flat[j] == J_NONE || s->n[flat[j]].type != J_OBJ)
				continue;
			a = &s->l[s->n[tag_of(s, flat[j])->node].first];
			b = &s->l[s->n[t->node].first];
			if (a->len == b->len && !memcmp(s->text + a->off, s->text + b->off, a->len))
				return 0;
		}
		t0 = t0 ? t0 : t;
		at = at < 0 ? i : at;
		cnt++;
	}
	if (cnt < 2)
		return 0;
	ret = new_node(c, J_UNION, &u);
	if (!ret)
		ret = new_node(c, J_LITS, &lits);
	if (ret)
		return ret;
	s->n[u].first = s->na;
	s->n[lits].first = s->nl;
	for (int i = 0; i < n; i++) {
		if (flat[i] == J_NONE || s->n[flat[i]].type != J_OBJ)
			continue;
		ret = GROW(c, s->a, s->na, s->cap_a, UINT32_MAX);
		if (!ret)
			ret = GROW(c, s->l, s->nl, s->cap_l, UINT32_MAX);
		if (ret)
			return ret;
		/* the union's i-th value is its i-th object's */
		s->l[s->nl++] = s->l[s->n[tag_of(s, flat[i])->node].first];
		s->a[s->na++] = flat[i];
		s->n[u].n++;
		s->n[lits].n++;
		flat[i] = J_NONE;
	}
	lit_starts(s, lits);
	s->n[u].child = (uint16_t)lits;
	flat[at] = (uint16_t)u;
	return 0;
}

/*
 * Fill anyof node idx with alternatives alt[0..n): nested anyOfs flattened,
 * enum-like ones merged into one, then each first byte must belong to one.
 */
static int fill_anyof(struct cctx *c, int idx, const uint16_t *alt, int n)
{
	struct moem_json_schema *s = c->s;
	uint16_t flat[MOEM_JSON_SCHEMA_ENUM];
	int nf = 0, lits = -1, lpos = 0, ret;
	struct jnode *a;

	for (int i = 0; i < n; i++) {
		const struct jnode *x = &s->n[alt[i]];
		uint32_t k = x->type == J_ANYOF ? x->n : 1;

		if (!c->done[alt[i]])
			return bad(c, "%s",
				   "an alternative refers back to its anyOf before any "
				   "object or array (no value would ever start)");
		if (nf + k > MOEM_JSON_SCHEMA_ENUM)
			return bad(c, "more than %d alternatives", MOEM_JSON_SCHEMA_ENUM);
		for (uint32_t j = 0; j < k; j++)
			flat[nf++] = x->type == J_ANYOF ? s->a[x->first + j] : alt[i];
	}
	/* the texts of every literal alternative, as one */
	for (int i = 0; i < nf; i++) {
		const struct jnode *x = &s->n[flat[i]];
		uint32_t cnt = 0;

		if (x->type != J_LITS)
			continue;
		if (lits < 0) {
			lpos = i;
			for (int j = i; j < nf; j++)
				if (s->n[flat[j]].type == J_LITS)
					cnt += s->n[flat[j]].n;
			if (cnt > MOEM_JSON_SCHEMA_ENUM)
				return bad(c, "the alternatives' values number more than %s", "64");
			ret = new_node(c, J_LITS, &lits);
			if (ret)
				return ret;
			s->n[lits].first = s->nl;
		}
		x = &s->n[flat[i]];
		for (uint32_t j = 0; j < x->n; j++) {
			struct jlit l = s->l[x->first + j];
			bool dup = false;

			for (uint32_t k = 0; k < s->n[lits].n; k++) {
				const struct jlit *m = &s->l[s->n[lits].first + k];

				dup |= m->len == l.len &&
				       !memcmp(s->text + m->off, s->text + l.off, l.len);
			}
			if (dup)
				continue;
			ret = GROW(c, s->l, s->nl, s->cap_l, UINT32_MAX);
			if (ret)
				return ret;
			s->l[s->nl++] = l;
			s->n[lits].n++;
		}
		flat[i] = J_NONE;
	}
	if (lits >= 0) {
		lit_starts(s, lits);
		flat[lpos] = (uint16_t)lits;
	}
	ret = merge_objects(c, flat, nf);
	if (ret)
		return ret;
	a = &s->n[idx];
	a->first = s->na;
	a->n = 0;
	for (int i = 0; i < nf; i++) {
		if (flat[i] == J_NONE)
			continue;
		for (uint32_t j = s->n[idx].first; j < s->na; j++) {
			for (int b = 0; b < 256; b++) {
				char m[200];

				if (!jstarts(&s->n[s->a[j]], (unsigned char)b) ||
				    !jstarts(&s->n[flat[i]], (unsigned char)b))
					continue;
				snprintf(m, sizeof(m),
					 "two alternatives can start with '%c': moem tells "
					 "alternatives apart by their first byte%s",
					 b,
					 b == '{' ? ", and objects by their first property, "
						    "required, a const different in each"
						  : "");
				return bad(c, "%s", m);
			}
		}
		ret = GROW(c, s->a, s->na, s->cap_a, UINT32_MAX);
		if (ret)
			return ret;
		s->a[s->na++] = flat[i];
		s->n[idx].n++;
		for (int b = 0; b < 32; b++)
			s->n[idx].starts[b] |= s->n[flat[i]].starts[b];
	}
	c->done[idx] = true;
	return 0;
}

static int compile_anyof(struct cctx *c, struct json_object *o, const char *kw, int *idx)
{
	struct json_object *l;
	uint16_t alt[MOEM_JSON_SCHEMA_ENUM];
	size_t n, at;
	int ret;

	json_object_object_get_ex(o, kw, &l);
	if (!json_object_is_type(l, json_type_array) || !json_object_array_length(l))
		return bad(c, "'%s' must be a non-empty array of schemas", kw);
	n = json_object_array_length(l);
	if (n > MOEM_JSON_SCHEMA_ENUM)
		return bad(c, "'%s' lists more than 64 schemas", kw);
	ret = only(c, o, (const char *const[]){kw, NULL}, "beside 'anyOf' or 'oneOf'");
	if (ret)
		return ret;
	ret = new_node(c, J_ANYOF, idx);
	if (!ret)
		ret = memo_set(c, o, *idx);
	if (ret)
		return ret;
	for (size_t i = 0; i < n; i++) {
		int a;

		at = push_idx(c, kw, i);
		ret = compile(c, json_object_array_get_idx(l, i), &a);
		if (ret)
			return ret;
		c->path[at] = 0;
		alt[i] = (uint16_t)a;
	}
	return fill_anyof(c, *idx, alt, (int)n);
}

/* "#", "#/$defs/NAME" or "#/definitions/NAME" */
static int resolve(struct cctx *c, const char *ref, struct json_object **out)
{
	static const char *const dirs[] = {"$defs", "definitions"};
	char name[256];
	size_t j = 0;

	if (!strcmp(ref, "#")) {
		*out = c->root;
		return 0;
	}
	for (int d = 0; d < 2; d++) {
		struct json_object *defs;
		size_t pl = strlen(dirs[d]) + 3;
		const char *p = ref + pl;

		if (strncmp(ref, "#/", 2) || strncmp(ref + 2, dirs[d], pl - 3) ||
		    ref[pl - 1] != '/')
			continue;
		for (; *p && j + 1 < sizeof(name); p++) {
			if (*p == '/')
				return bad(c, "$ref '%s': only '#/$defs/NAME' is supported", ref);
			if (*p == '~' && (p[1] == '0' || p[1] == '1'))
				name[j++] = *++p == '0' ? '~' : '/';
			else
				name[j++] = *p;
		}
		name[j] = 0;
		if (json_object_object_get_ex(c->root, dirs[d], &defs) &&
		    json_object_is_type(defs, json_type_object) &&
		    json_object_object_get_ex(defs, name, out))
			return 0;
		return bad(c, "$ref '%s' names no schema", ref);
	}
	return bad(c,
		   "$ref '%s': only '#', '#/$defs/NAME' and '#/definitions/NAME' are "
		   "supported",
		   ref);
}

/*
 * $ref, or a one-element allOf: the node of the schema it names. The
 * chain of such aliases is followed first, so that an alias met again
 * while its target is being compiled (recursion through it) finds the
 * target's node; a chain that comes back to itself names no schema.
 */
static int compile_alias(struct cctx *c, struct json_object *o, int *idx)
{
	struct json_object *chain[32], *t = o, *r;
	int n = 0, ret;

	while (json_object_is_type(t, json_type_object) &&
	       (json_object_object_get_ex(t, "$ref", &r) ||
		json_object_object_get_ex(t, "allOf", &r))) {
		bool ref = json_object_object_get_ex(t, "$ref", NULL);

		for (int i = 0; i < n; i++)
			if (chain[i] == t)
				return bad(c, "%s",
					   "a $ref cycle that never reaches a schema of its own");
		if (n == (int)MOEM_ARRAY_SIZE(chain))
			return bad(c, "more than %zu $refs in a row", MOEM_ARRAY_SIZE(chain));
		chain[n++] = t;
		ret = only(c, t, (const char *const[]){ref ? "$ref" : "allOf", NULL},
			   ref ? "beside '$ref'" : "beside 'allOf'");
		if (ret)
			return ret;
		if (ref) {
			if (!json_object_is_type(r, json_type_string))
				return bad(c, "%s", "'$ref' must be a string");
			ret = resolve(c, json_object_get_string(r), &t);
			if (ret)
				return ret;
		} else {
			if (!json_object_is_type(r, json_type_array) ||
			    json_object_array_length(r) != 1)
				return bad(c, "%s",
					   "'allOf' of more than one schema is not supported");
			t = json_object_array_get_idx(r, 0);
		}
	}
	ret = compile(c, t, idx);
	for (int i = 0; !ret && i < n; i++)
		ret = memo_set(c, chain[i], *idx);
	return ret;
}

static int compile_types(struct cctx *c, struct json_object *o, struct json_object *ty, int *idx)
{
	uint16_t alt[8];
	int t[8], n = 0, m = 0, ret;
	bool number = false, ob = false, ar = false, st = false, nu = false;

	if (json_object_is_type(ty, json_type_string)) {
		t[n++] = type_of(json_object_get_string(ty));
	} else if (json_object_is_type(ty, json_type_array) && json_object_array_length(ty) &&
		   json_object_array_length(ty) <= 7) {
		for (size_t i = 0; i < json_object_array_length(ty); i++) {
			struct json_object *x = json_object_array_get_idx(ty, i);

			t[n++] = json_object_is_type(x, json_type_string)
					 ? type_of(json_object_get_string(x))
					 : -1;
		}
	} else {
		return bad(c, "%s", "'type' must be a type name or an array of them");
	}
	for (int i = 0; i < n; i++) {
		if (t[i] < 0)
			return bad(c, "%s",
				   "'type' names an unknown type (object, array, string, "
				   "number, integer, boolean, null)");
		number |= t[i] == 3;
		ob |= t[i] == 0;
		ar |= t[i] == 1;
		st |= t[i] == 2;
		nu |= t[i] == 3 || t[i] == 4;
	}
	/* keywords: those of the types listed */
	json_object_object_foreach(o, k, v)
	{
		(void)v;
		if (in_list(annotations, k) || !strcmp(k, "type") || (ob && in_list(obj_kw, k)) ||
		    (ar && in_list(arr_kw, k)) || (st && in_list(str_kw, k)) ||
		    (nu && in_list(num_kw, k)))
			continue;
		if (in_list(obj_kw, k) || in_list(arr_kw, k) || in_list(str_kw, k) ||
		    in_list(num_kw, k))
			return bad(c, "'%s' does not apply to the schema's 'type'", k);
		return bad(c, "'%s' is not supported " SUPPORTED, k);
	}
	if (n == 1)
		return compile_typed(c, o, t[0], true, idx);
	ret = new_node(c, J_ANYOF, idx);
	if (!ret)
		ret = memo_set(c, o, *idx);
	for (int i = 0; !ret && i < n; i++) {
		int a;

		if (t[i] == 4 && number)
			continue; /* every integer is a number */
		ret = compile_typed(c, o, t[i], false, &a);
		alt[m++] = (uint16_t)a;
	}
	return ret ? ret : fill_anyof(c, *idx, alt, m);
}

static int compile(struct cctx *c, struct json_object *o, int *idx)
{
	struct json_object *ty = NULL;
	int m = memo_find(c, o), ret;

	if (m >= 0) {
		*idx = c->memo[m].idx;
		return 0;
	}
	if (json_object_is_type(o, json_type_boolean)) {
		if (!json_object_get_boolean(o))
			return bad(c, "%s", "the schema false: no value is valid");
		return any_node(c, idx);
	}
	if (!json_object_is_type(o, json_type_object))
		return bad(c, "%s", "a schema must be an object or a boolean");
	if (++c->nest > COMPILE_NEST) {
		c->nest--;
		return bad(c, "schemas nested more than %s deep", "128");
	}
	json_object_object_get_ex(o, "type", &ty);
	if (json_object_object_get_ex(o, "$ref", NULL) ||
	    json_object_object_get_ex(o, "allOf", NULL)) {
		ret = compile_alias(c, o, idx);
	} else if (json_object_object_get_ex(o, "enum", NULL) ||
		   json_object_object_get_ex(o, "const", NULL)) {
		ret = compile_lits(c, o, idx);
	} else if (json_object_object_get_ex(o, "anyOf", NULL)) {
		ret = compile_anyof(c, o, "anyOf", idx);
	} else if (json_object_object_get_ex(o, "oneOf", NULL)) {
		/* alternatives told by their first byte cannot both hold */
		ret = compile_anyof(c, o, "oneOf", idx);
	} else if (ty) {
		ret = compile_types(c, o, ty, idx);
	} else {
		bool ob = false, ar = false, st = false, nu = false;

		json_object_object_foreach(o, k, v)
		{
			(void)v;
			ob |= in_list(obj_kw, k);
			ar |= in_list(arr_kw, k);
			st |= in_list(str_kw, k);
			nu |= in_list(num_kw, k);
		}
		if (ob + ar + st + nu > 1)
			ret = bad(c, "%s", "keywords of several types without 'type'");
		else if (ob || ar || st || nu)
			ret = only(c, o,
				   ob	? obj_kw
				   : ar ? arr_kw
				   : st ? str_kw
					: num_kw,
				   SUPPORTED)
				      ?: compile_typed(c, o,
						       ob   ? 0
						       : ar ? 1
						       : st ? 2
							    : 3,
						       true, idx);
		else
			ret = only(c, o, NULL, SUPPORTED) ?: any_node(c, idx);
	}
	c->nest--;
	if (!ret && memo_find(c, o) < 0)
		ret = memo_set(c, o, *idx);
	return ret;
}

/* Containers an instance needs, by fixed point over the graph (recursion included). */
static void min_depths(struct moem_json_schema *s)
{
	bool changed = true;

	for (uint32_t i = 0; i < s->nn; i++)
		s->n[i].depth = J_DEPTH_NO;
	while (changed) {
		changed = false;
		for (uint32_t i = 0; i < s->nn; i++) {
			struct jnode *n = &s->n[i];
			uint64_t d = 0;

			switch (n->type) {
			case J_OBJ:
				d = 1;
				for (uint32_t j = 0; j < n->n; j++)
					if (s->p[n->first + j].required) {
						uint64_t x = s->n[s->p[n->first + j].node].depth;

						d = x == J_DEPTH_NO ? J_DEPTH_NO
								    : (x + 1 > d ? x + 1 : d);
						if (d == J_DEPTH_NO)
							break;
					}
				break;
			case J_ARR:
				/* the items it must have: those of prefixItems, then child */
				d = 1;
				for (uint32_t j = 0; j < n->min && d != J_DEPTH_NO; j++) {
					uint64_t x = s->n[j < n->n ? s->a[n->first + j] : n->child]
							     .depth;

					d = x == J_DEPTH_NO ? J_DEPTH_NO : (x + 1 > d ? x + 1 : d);
					if (j >= n->n)
						break; /* child's, for every one after */
				}
				break;
			case J_ANYOF:
			case J_UNION:
				d = J_DEPTH_NO;
				for (uint32_t j = 0; j < n->n; j++)
					if (s->n[s->a[n->first + j]].depth < d)
						d = s->n[s->a[n->first + j]].depth;
				break;
			default:
				d = 0;
				break;
			}
			if (d < n->depth) {
				n->depth = (uint32_t)d;
				changed = true;
			}
		}
	}
}

/* The top node root (ret: compiling it failed): checked, depths known, handed out. */
static int finish(struct cctx *c, int ret, int root, struct moem_json_schema **out)
{
	if (!ret && c->s->n[root].type == J_ANYOF && c->s->n[root].n == 1)
		root = c->s->a[c->s->n[root].first]; /* a union of objects alone */
	if (!ret && c->s->n[root].type != J_OBJ && c->s->n[root].type != J_UNION) {
		c->path[0] = 0;
		ret = bad(c, "%s", "the top schema must be an object's ('type': 'object')");
	}
	if (!ret) {
		min_depths(c->s);
		if (c->s->n[root].depth > MOEM_JSON_FSM_DEPTH) {
			c->path[0] = 0;
			ret = bad(c,
				  "no instance nests at most %s deep (required properties "
				  "or minItems recurse without end)",
				  "32");
		}
	}
	free(c->memo);
	free(c->done);
	if (ret) {
		moem_json_schema_free(c->s);
		return ret;
	}
	c->s->root = (uint16_t)root;
	*out = c->s;
	return 0;
}

int moem_json_schema_compile(struct json_object *schema, struct moem_json_schema **out)
{
	struct cctx c = {.root = schema, .any = -1};
	int root = 0, ret;

	*out = NULL;
	c.s = calloc(1, sizeof(*c.s));
	if (!c.s)
		return -ENOMEM;
	ret = compile(&c, schema, &root);
	return finish(&c, ret, root, out);
}

/* {"name": <const name>, "arguments": <the node of its parameters>} (nm: the name's string) */
static int call_node(struct cctx *c, struct json_object *nm, int args, int *idx)
{
	size_t len;
	const char *lit = as_json(nm, &len); /* the name as JSON writes it */
	int tag, ret;

	if (!lit)
		return -ENOMEM;
	ret = new_node(c, J_LITS, &tag);
	if (!ret) {
		c->s->n[tag].first = c->s->nl;
		c->s->n[tag].n = 1;
		ret = add_lit(c, lit, len);
	}
	if (!ret) {
		lit_starts(c->s, tag);
		ret = new_node(c, J_OBJ, idx);
	}
	if (ret)
		return ret;
	c->s->n[*idx].first = c->s->np;
	for (int i = 0; i < 2; i++) {
		uint32_t off;

		ret = add_text(c, i ? "arguments" : "name", i ? 9 : 4, &off);
		if (!ret)
			ret = GROW(c, c->s->p, c->s->np, c->s->cap_p, UINT32_MAX);
		if (ret)
			return ret;
		c->s->p[c->s->np++] =
			(struct jprop){off, i ? 9u : 4u, (uint16_t)(i ? args : tag), true};
	}
	c->s->n[*idx].n = 2;
	return 0;
}

int moem_json_schema_compile_calls(struct json_object *tools, const char *only,
				   struct moem_json_schema **out)
{
	struct cctx c = {.any = -1};
	uint16_t alt[MOEM_JSON_SCHEMA_ENUM];
	int n = 0, root = 0, ret = 0;
	size_t nt = json_object_array_length(tools);

	*out = NULL;
	c.s = calloc(1, sizeof(*c.s));
	if (!c.s)
		return -ENOMEM;
	for (size_t i = 0; !ret && i < nt; i++) {
		struct json_object *fn = NULL, *nm = NULL, *params = NULL;
		const char *name;
		int args = 0, call = 0;

		json_object_object_get_ex(json_object_array_get_idx(tools, i), "function", &fn);
		json_object_object_get_ex(fn, "name", &nm);
		if (!json_object_is_type(nm, json_type_string)) {
			ret = moem_errf(EINVAL, "tools[%zu]: the function has no name", i);
			break;
		}
		name = json_object_get_string(nm);
		if (only && strcmp(name, only))
			continue;
		if (n == MOEM_JSON_SCHEMA_ENUM) {
			ret = moem_errf(EINVAL, "more than %d tools", MOEM_JSON_SCHEMA_ENUM);
			break;
		}
		/* a $ref in a tool's parameters is to its own $defs */
		snprintf(c.path, sizeof(c.path), "/tools/%zu/function/parameters", i);
		if (json_object_object_get_ex(fn, "parameters", &params) &&
		    !json_object_is_type(params, json_type_null)) {
			c.root = params;
			ret = compile(&c, params, &args);
			if (!ret && c.s->n[args].type != J_OBJ && c.s->n[args].type != J_UNION)
				ret = bad(&c, "%s", "the parameters must be an object's schema");
		} else {
			/* no parameters: any object of arguments */
			ret = any_node(&c, &args);
			args = ret ? 0 : c.s->a[c.s->n[args].first];
		}
		if (!ret)
			ret = call_node(&c, nm, args, &call);
		if (!ret)
			alt[n++] = (uint16_t)call;
	}
	c.path[0] = 0;
	if (!ret && !n)
		ret = moem_errf(ENOENT, "no tool named '%s'", only ? only : "");
	if (!ret && n == 1) {
		root = alt[0];
	} else if (!ret) {
		ret = new_node(&c, J_ANYOF, &root);
		if (!ret)
			ret = fill_anyof(&c, root, alt, n);
	}
	return finish(&c, ret, root, out);
}

void moem_json_schema_free(struct moem_json_schema *s)
{
	if (!s)
		return;
	free(s->n);
	free(s->p);
	free(s->l);
	free(s->a);
	free(s->b);
	for (uint32_t i = 0; i < s->nre; i++)
		moem_jre_free(s->re[i]);
	free(s->re);
	free(s->text);
	free(s);
}

int moem_json_schema_wrap(struct moem_json_schema *s, const char *prefix, const char *suffix)
{
	struct cctx c = {.s = s};
	size_t pl = strlen(prefix), sl = strlen(suffix);
	int ret;

	if (s->pre_len || s->post_len || pl > 0xffff || sl > 0xffff)
		return -EINVAL;
	ret = add_text(&c, prefix, pl, &s->pre_off);
	if (!ret)
		ret = add_text(&c, suffix, sl, &s->post_off);
	if (ret)
		return ret;
	s->pre_len = (uint32_t)pl;
	s->post_len = (uint32_t)sl;
	return 0;
}
