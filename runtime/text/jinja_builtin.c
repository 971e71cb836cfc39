// SPDX-License-Identifier: GPL-2.0-only
/*
 * Jinja built-ins the chat templates of the supported families use:
 * globals (raise_exception, range, namespace, strftime_now), string methods (strip,
 * split, startswith, ...), dict methods (items, keys, values, get), the
 * filters and the tests. A name outside these lists is refused when the
 * template is parsed (filters, tests) or run (methods).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include <moem/error.h>

#include "jinja_int.h"
#include "tok_int.h"

static const char *const str_methods[] = {
	"strip",  "lstrip", "rstrip",	  "startswith", "endswith", "split", "upper",
	"lower",  "title",  "capitalize", "replace",	"find",	    "join",  "count",
	"format", "items",  "keys",	  "values",	"get",
};

/*
 * Methods Python's str, dict and list have that moem does not: calling one
 * is refused by name (ENOTSUP), where transformers would run it.
 */
static const char *const str_unsup[] = {
	"casefold", "center",	  "encode",	  "expandtabs",	  "format_map", "index",
	"isalnum",  "isalpha",	  "isascii",	  "isdecimal",	  "isdigit",	"isidentifier",
	"islower",  "isnumeric",  "isprintable",  "isspace",	  "istitle",	"isupper",
	"ljust",    "partition",  "removeprefix", "removesuffix", "rfind",	"rindex",
	"rjust",    "rpartition", "rsplit",	  "splitlines",	  "swapcase",	"translate",
	"zfill",
};

static const char *const dict_unsup[] = {"copy", "fromkeys"};
static const char *const list_unsup[] = {"index", "count", "copy"};

/* Methods that change a list or dict: transformers' immutable sandbox refuses them. */
static const char *const list_mut[] = {"append", "extend",  "insert", "pop",
				       "remove", "reverse", "sort",   "clear"};
static const char *const dict_mut[] = {"pop", "popitem", "setdefault", "update", "clear"};

enum {
	M_STRIP,
	M_LSTRIP,
	M_RSTRIP,
	M_STARTS,
	M_ENDS,
	M_SPLIT,
	M_UPPER,
	M_LOWER,
	M_TITLE,
	M_CAPITALIZE,
	M_REPLACE,
	M_FIND,
	M_JOIN,
	M_COUNT,
	M_FORMAT,
	M_ITEMS,
	M_KEYS,
	M_VALUES,
	M_GET
};

static const char *const filters[] = {
	"trim",	      "length",	 "count",      "tojson",     "upper",	"lower",  "title",
	"capitalize", "default", "d",	       "first",	     "last",	"join",	  "list",
	"string",     "int",	 "float",      "abs",	     "replace", "items",  "reverse",
	"safe",	      "indent",	 "selectattr", "rejectattr", "map",	"unique", "sort",
	"e",	      "escape",	 "dictsort",   "min",	     "max",	"select", "reject",
};

enum {
	F_SORT = 27,
	F_E,
	F_ESCAPE,
	F_DICTSORT,
	F_MIN,
	F_MAX,
	F_SELECT,
	F_REJECT,
};

static const char *const tests[] = {
	"defined", "undefined", "none",	    "string",	"number",  "integer",
	"float",   "mapping",	"iterable", "sequence", "boolean", "true",
	"false",   "eq",	"equalto",  "ne",	"odd",	   "even",
	"in",	   "lower",	"upper",    "callable", "sameas",  "divisibleby",
};

static int find_name(const char *const *v, size_t nv, const char *s, size_t n)
{
	for (size_t i = 0; i < nv; i++)
		if (strlen(v[i]) == n && !memcmp(v[i], s, n))
			return (int)i;
	return -1;
}

bool moem_jinja_filter_known(const char *name, size_t n)
{
	return find_name(filters, MOEM_ARRAY_SIZE(filters), name, n) >= 0;
}

bool moem_jinja_test_known(const char *name, size_t n)
{
	return find_name(tests, MOEM_ARRAY_SIZE(tests), name, n) >= 0;
}

static int str_out(struct jctx *c, const char *p, size_t n, struct jv *out)
{
	char *s = moem_ja_strndup(c->a, p, n);

	if (!s)
		return moem_jinja_err(c, E2BIG, "template output too large");
	*out = jv_str(s, n);
	return 0;
}

static int to_str(struct jctx *c, const struct jv *v, struct jv *out)
{
	struct jbuf b = {0};
	int ret;

	if (v->t == JT_STR) {
		*out = *v;
		return 0;
	}
	ret = moem_jv_print(&b, v);
	if (!ret)
		ret = str_out(c, b.p ? b.p : "", b.n, out);
	free(b.p);
	return ret;
}

int moem_jinja_getattr(struct jctx *c, const struct jv *v, const char *name, size_t n,
		       struct jv *out)
{
	int m;

	*out = jv_undef();
	if (v->t == JT_DICT) {
		const struct jv *x = moem_jv_dict_get(v->d, name, n);

		if (x) {
			*out = *x;
			return 0;
		}
	}
	m = find_name(str_methods, MOEM_ARRAY_SIZE(str_methods), name, n);
	if ((v->t == JT_LIST && find_name(list_mut, MOEM_ARRAY_SIZE(list_mut), name, n) >= 0) ||
	    (v->t == JT_DICT && find_name(dict_mut, MOEM_ARRAY_SIZE(dict_mut), name, n) >= 0))
		return moem_jinja_err(c, EINVAL,
				      "access to attribute '%.*s' of '%s' object is unsafe", (int)n,
				      name, moem_jv_type_name(v));
	if ((v->t == JT_STR && find_name(str_unsup, MOEM_ARRAY_SIZE(str_unsup), name, n) >= 0) ||
	    (v->t == JT_DICT && find_name(dict_unsup, MOEM_ARRAY_SIZE(dict_unsup), name, n) >= 0) ||
	    (v->t == JT_LIST && find_name(list_unsup, MOEM_ARRAY_SIZE(list_unsup), name, n) >= 0)) {
		struct jv *self = moem_ja_alloc(c->a, sizeof(*self));
		char *nm = moem_ja_strndup(c->a, name, n);

		if (!self || !nm)
			return -ENOMEM;
		*self = jv_str(nm, n);
		out->t = JT_FN;
		out->fn.id = JF_UNSUPPORTED;
		out->fn.self = self;
		return 0;
	}
	if (m >= 0 && ((v->t == JT_STR && m < M_ITEMS) || (v->t == JT_DICT && m >= M_ITEMS))) {
		struct jv *self = moem_ja_alloc(c->a, sizeof(*self));

		if (!self)
			return -ENOMEM;
		*self = *v;
		out->t = JT_FN;
		out->fn.id = JF_STR_METHOD + m;
		out->fn.self = self;
	}
	return 0;
}

/* Python's str.isspace() for one code point. */
static bool py_space(uint32_t cp)
{
	return moem_tok_is_space(cp) || (cp >= 0x1c && cp <= 0x1f);
}

static bool in_set(uint32_t cp, const struct jv *chars)
{
	for (size_t i = 0; i < chars->s.n;) {
		size_t k;

		if (moem_tok_utf8_get(chars->s.p + i, &k) == cp)
			return true;
		i += k;
	}
	return false;
}

static int strip(struct jctx *c, const struct jv *s, const struct jv *chars, bool l, bool r,
		 struct jv *out)
{
	size_t a = 0, z = s->s.n;
	bool set = chars && chars->t == JT_STR;

	while (l && a < z) {
		size_t k;
		uint32_t cp = moem_tok_utf8_get(s->s.p + a, &k);

		if (set ? !in_set(cp, chars) : !py_space(cp))
			break;
		a += k;
	}
	while (r && z > a) {
		size_t p = z - 1, k;
		uint32_t cp;

		while (p > a && ((unsigned char)s->s.p[p] & 0xc0) == 0x80)
			p--;
		cp = moem_tok_utf8_get(s->s.p + p, &k);
		if (set ? !in_set(cp, chars) : !py_space(cp))
			break;
		z = p;
	}
	*out = jv_str(s->s.p + a, z - a);
	return 0;
}

static int split(struct jctx *c, const struct jv *s, const struct jv *sep, int64_t maxsplit,
		 struct jv *out)
{
	struct jlist *l = moem_jv_list_new(c->a, s->s.n + 1);
	size_t n = 0, at = 0;

	if (!l)
		return -ENOMEM;
	if (sep && sep->t == JT_STR) {
		if (!sep->s.n)
			return moem_jinja_err(c, EINVAL, "split: empty separator");
		for (;;) {
			const char *f =
				maxsplit != 0 ? memmem(s->s.p + at, s->s.n - at, sep->s.p, sep->s.n)
					      : NULL;

			if (!f) {
				l->v[n++] = jv_str(s->s.p + at, s->s.n - at);
				break;
			}
			l->v[n++] = jv_str(s->s.p + at, (size_t)(f - s->s.p) - at);
			at = (size_t)(f - s->s.p) + sep->s.n;
			if (maxsplit > 0)
				maxsplit--;
		}
	} else {
		/* Runs of whitespace, no empty strings. */
		while (at < s->s.n) {
			size_t k, st;

			while (at < s->s.n && py_space(moem_tok_utf8_get(s->s.p + at, &k)))
				at += k;
			if (at >= s->s.n)
				break;
			st = at;
			while (at < s->s.n && !py_space(moem_tok_utf8_get(s->s.p + at, &k)))
				at += k;
			l->v[n++] = jv_str(s->s.p + st, at - st);
		}
	}
	l->n = n;
	*out = (struct jv){.t = JT_LIST, .l = l};
	return 0;
}

/* upper, lower, title, capitalize with utf8proc's simple case mappings. */
static int recase(struct jctx *c, const struct jv *s, int how, struct jv *out)
{
	struct jbuf b = {0};
	bool prev_cased = false;
	int ret = 0;

	for (size_t i = 0; !ret && i < s->s.n;) {
		size_t k;
		utf8proc_int32_t cp = (utf8proc_int32_t)moem_tok_utf8_get(s->s.p + i, &k);
		utf8proc_category_t cat = utf8proc_category(cp);
		bool cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
			     cat == UTF8PROC_CATEGORY_LT;
		char u[4];

		if (how == M_UPPER || (how == M_TITLE && !prev_cased) ||
		    (how == M_CAPITALIZE && i == 0))
			cp = utf8proc_toupper(cp);
		else
			cp = utf8proc_tolower(cp);
		prev_cased = cased;
		ret = moem_jb_put(&b, u, moem_tok_utf8_put((uint32_t)cp, u));
		i += k;
	}
	if (!ret)
		ret = str_out(c, b.p ? b.p : "", b.n, out);
	free(b.p);
	return ret;
}

static int replace(struct jctx *c, const struct jv *s, const struct jv *a, const struct jv *b,
		   int64_t count, struct jv *out)
{
	struct jbuf r = {0};
	size_t at = 0;
	int ret = 0;

	if (a->t != JT_STR || b->t != JT_STR)
		return moem_jinja_err(c, EINVAL, "replace: arguments must be strings");
	while (!ret && at <= s->s.n && count != 0) {
		const char *f = a->s.n ? memmem(s->s.p + at, s->s.n - at, a->s.p, a->s.n) : NULL;

		if (!f)
			break;
		ret = moem_jb_put(&r, s->s.p + at, (size_t)(f - s->s.p) - at);
		if (!ret)
			ret = moem_jb_put(&r, b->s.p, b->s.n);
		at = (size_t)(f - s->s.p) + a->s.n;
		if (count > 0)
			count--;
	}
	if (!ret)
		ret = moem_jb_put(&r, s->s.p + at, s->s.n - at);
	if (!ret)
		ret = str_out(c, r.p ? r.p : "", r.n, out);
	free(r.p);
	return ret;
}

static int join(struct jctx *c, const struct jv *list, const struct jv *sep, struct jv *out)
{
	struct jbuf b = {0};
	int ret = 0;

	if (list->t != JT_LIST)
		return moem_jinja_err(c, EINVAL, "join: not a list");
	for (size_t i = 0; !ret && i < list->l->n; i++) {
		if (i && sep)
			ret = moem_jv_print(&b, sep);
		if (!ret)
			ret = moem_jv_print(&b, &list->l->v[i]);
	}
	if (!ret)
		ret = str_out(c, b.p ? b.p : "", b.n, out);
	free(b.p);
	return ret;
}

static int dict_view(struct jctx *c, const struct jv *d, int which, struct jv *out)
{
	struct jlist *l = moem_jv_list_new(c->a, d->d->n);

	if (!l)
		return -ENOMEM;
	for (size_t i = 0; i < d->d->n; i++) {
		struct jv k = moem_jv_dict_key(d->d, i);

		if (which == M_KEYS) {
			l->v[i] = k;
		} else if (which == M_VALUES) {
			l->v[i] = d->d->v[i];
		} else {
			struct jlist *p = moem_jv_list_new(c->a, 2);

			if (!p)
				return -ENOMEM;
			p->v[0] = k;
			p->v[1] = d->d->v[i];
			l->v[i] = (struct jv){.t = JT_LIST, .l = p, .tuple = true};
		}
	}
	*out = (struct jv){.t = JT_LIST, .l = l};
	return 0;
}

/* str.format with positional fields only: {} and {N}, {{ and }}; no format specs. */
static int format(struct jctx *c, const struct jv *s, const struct jv *args, size_t n,
		  struct jv *out)
{
	struct jbuf b = {0};
	size_t auto_i = 0;
	bool manual = false, autom = false;
	int ret = 0;

	for (size_t i = 0; !ret && i < s->s.n; i++) {
		char ch = s->s.p[i];
		size_t j, k;

		if ((ch == '{' || ch == '}') && i + 1 < s->s.n && s->s.p[i + 1] == ch) {
			ret = moem_jb_put(&b, &ch, 1);
			i++;
			continue;
		}
		if (ch == '}') {
			ret = moem_jinja_err(c, EINVAL, "str.format: single '}'");
			break;
		}
		if (ch != '{') {
			ret = moem_jb_put(&b, &ch, 1);
			continue;
		}
		for (j = i + 1; j < s->s.n && s->s.p[j] >= '0' && s->s.p[j] <= '9'; j++)
			;
		if (j >= s->s.n || s->s.p[j] != '}') {
			ret = moem_jinja_err(c, ENOTSUP,
					     "str.format: only {} and {N} fields are supported");
			break;
		}
		if (j == i + 1) {
			k = auto_i++;
			autom = true;
		} else {
			k = (size_t)strtoul(s->s.p + i + 1, NULL, 10);
			manual = true;
		}
		if (autom && manual) {
			ret = moem_jinja_err(c, EINVAL, "str.format: cannot mix {} and {N}");
			break;
		}
		if (k >= n) {
			ret = moem_jinja_err(c, EINVAL, "str.format: field %zu has no argument", k);
			break;
		}
		ret = moem_jv_print(&b, &args[k]);
		i = j;
	}
	if (!ret)
		ret = str_out(c, b.p ? b.p : "", b.n, out);
	free(b.p);
	return ret;
}

static int method(struct jctx *c, int m, const struct jv *s, const struct jv *args, size_t n,
		  struct jv *out)
{
	const struct jv *a0 = n > 0 ? &args[0] : NULL, *a1 = n > 1 ? &args[1] : NULL;

	if (m < M_ITEMS && m != M_JOIN && m != M_FORMAT)
		for (size_t i = 0; i < n && i < 1; i++)
			if (args[i].t != JT_STR && args[i].t != JT_NONE && m != M_SPLIT)
				return moem_jinja_err(c, EINVAL,
						      "str.%s: argument must be a string",
						      str_methods[m]);
	switch (m) {
	case M_STRIP:
	case M_LSTRIP:
	case M_RSTRIP:
		return strip(c, s, a0, m != M_RSTRIP, m != M_LSTRIP, out);
	case M_STARTS:
	case M_ENDS:
		if (!a0 || a0->t != JT_STR)
			return moem_jinja_err(c, EINVAL, "str.%s needs a string", str_methods[m]);
		*out = jv_bool(a0->s.n <= s->s.n &&
			       !memcmp(m == M_STARTS ? s->s.p : s->s.p + s->s.n - a0->s.n, a0->s.p,
				       a0->s.n));
		return 0;
	case M_SPLIT:
		return split(c, s, a0 && a0->t == JT_STR ? a0 : NULL,
			     a1 && a1->t == JT_INT ? a1->i : -1, out);
	case M_UPPER:
	case M_LOWER:
	case M_TITLE:
	case M_CAPITALIZE:
		return recase(c, s, m, out);
	case M_REPLACE:
		if (n < 2)
			return moem_jinja_err(c, EINVAL, "str.replace needs two arguments");
		return replace(c, s, a0, a1, n > 2 && args[2].t == JT_INT ? args[2].i : -1, out);
	case M_FIND: {
		const char *f;

		if (!a0 || a0->t != JT_STR)
			return moem_jinja_err(c, EINVAL, "str.find needs a string");
		f = memmem(s->s.p, s->s.n, a0->s.p, a0->s.n);
		if (!f) {
			*out = jv_int(-1);
			return 0;
		}
		*out = jv_int(0);
		for (const char *p = s->s.p; p < f; p++)
			out->i += ((unsigned char)*p & 0xc0) != 0x80;
		return 0;
	}
	case M_JOIN:
		if (!a0)
			return moem_jinja_err(c, EINVAL, "str.join needs a list");
		return join(c, a0, s, out);
	case M_FORMAT:
		return format(c, s, args, n, out);
	case M_COUNT: {
		int64_t k = 0;

		if (!a0 || a0->t != JT_STR || !a0->s.n)
			return moem_jinja_err(c, EINVAL, "str.count needs a non-empty string");
		for (const char *p = s->s.p;
		     (p = memmem(p, s->s.n - (size_t)(p - s->s.p), a0->s.p, a0->s.n)); p += a0->s.n)
			k++;
		*out = jv_int(k);
		return 0;
	}
	case M_ITEMS:
	case M_KEYS:
	case M_VALUES:
		return dict_view(c, s, m, out);
	case M_GET: {
		const struct jv *x;

		if (!a0)
			return moem_jinja_err(c, EINVAL, "dict.get needs a key");
		x = moem_jv_dict_lookup(s->d, a0);
		*out = x ? *x : a1 ? *a1 : jv_none();
		return 0;
	}
	}
	return moem_jinja_err(c, EINVAL, "unknown method");
}

static int call_macro(struct jctx *c, const struct jnode *m, const struct jv *args,
		      const char *const *kw, size_t n, struct jv *out)
{
	struct jscope scope = {.up = c->scope};
	struct jbuf *saved = c->out, b = {.limit = saved->limit};
	int ret = 0;

	scope.vars = moem_jv_dict_new(c->a);
	if (!scope.vars)
		return -ENOMEM;
	for (size_t i = 0; !ret && i < m->nnames; i++) {
		struct jv v = jv_undef();

		if (i < n && (!kw || !kw[i]))
			v = args[i];
		for (size_t k = 0; kw && k < n; k++)
			if (kw[k] && !strcmp(kw[k], m->names[i]))
				v = args[k];
		if (v.t == JT_UNDEF && m->args[i]) {
			c->scope = &scope;
			ret = moem_jinja_eval(c, m->args[i], &v);
			c->scope = scope.up;
		}
		if (!ret)
			ret = moem_jv_dict_set(c->a, scope.vars, m->names[i], strlen(m->names[i]),
					       v);
	}
	if (ret)
		return ret;
	if (c->depth > 64)
		return moem_jinja_err(c, ELOOP, "macro calls nested too deeply");
	c->depth += 8;
	c->scope = &scope;
	c->out = &b;
	ret = moem_jinja_run(c, m->body, m->nbody);
	c->out = saved;
	c->scope = scope.up;
	c->depth -= 8;
	if (ret > 0)
		ret = moem_jinja_err(c, EINVAL, "break outside a loop");
	if (!ret)
		ret = str_out(c, b.p ? b.p : "", b.n, out);
	free(b.p);
	return ret;
}

int moem_jinja_call(struct jctx *c, const struct jv *fn, const struct jv *args,
		    const char *const *kw, size_t n, struct jv *out)
{
	if (fn->t != JT_FN)
		return moem_jinja_err(c, EINVAL, "%s is not callable", moem_jv_type_name(fn));
	if (++c->steps > (1u << 22))
		return moem_jinja_err(c, E2BIG, "template runs too long");
	switch (fn->fn.id) {
	case JF_RAISE: {
		struct jv m = jv_str("", 0);

		if (n)
			to_str(c, &args[0], &m);
		return moem_errf(EINVAL, "template line %d raised: %.*s", c->line, (int)m.s.n,
				 m.s.p);
	}
	case JF_RANGE: {
		int64_t a = 0, b, s = 1, k = 0;
		struct jlist *l;

		for (size_t i = 0; i < n; i++)
			if (args[i].t != JT_INT)
				return moem_jinja_err(c, EINVAL, "range() takes integers");
		if (n == 1) {
			b = args[0].i;
		} else if (n == 2 || n == 3) {
			a = args[0].i;
			b = args[1].i;
			s = n == 3 ? args[2].i : 1;
		} else {
			return moem_jinja_err(c, EINVAL, "range() takes 1 to 3 arguments");
		}
		if (!s)
			return moem_jinja_err(c, EINVAL, "range() step is zero");
		{
			/* the length in unsigned arithmetic: b - a and -s may not fit
			 * int64 (range(INT64_MIN, INT64_MAX), step INT64_MIN) */
			uint64_t span = s > 0 ? (b > a ? (uint64_t)b - (uint64_t)a : 0)
					      : (a > b ? (uint64_t)a - (uint64_t)b : 0);
			uint64_t st = s > 0 ? (uint64_t)s : -(uint64_t)s;
			uint64_t len = span ? (span - 1) / st + 1 : 0;

			if (len > 100000)
				return moem_jinja_err(c, E2BIG, "range() too long");
			l = moem_jv_list_new(c->a, (size_t)len + 1);
			if (!l)
				return -ENOMEM;
			for (uint64_t j = 0; j < len; j++)
				l->v[k++] = jv_int((int64_t)((uint64_t)a + j * (uint64_t)s));
		}
		l->n = (size_t)k;
		*out = (struct jv){.t = JT_LIST, .l = l};
		return 0;
	}
	case JF_NAMESPACE: {
		struct jdict *d = moem_jv_dict_new(c->a);

		if (!d)
			return -ENOMEM;
		for (size_t i = 0; i < n; i++) {
			int ret;

			if (!kw || !kw[i]) {
				if (args[i].t != JT_DICT)
					return moem_jinja_err(c, EINVAL,
							      "namespace() takes keywords");
				for (size_t k = 0; k < args[i].d->n; k++) {
					const struct jv key = moem_jv_dict_key(args[i].d, k);

					if ((ret = moem_jv_dict_put(c->a, d, &key,
								    args[i].d->v[k])))
						return ret;
				}
				continue;
			}
			ret = moem_jv_dict_set(c->a, d, kw[i], strlen(kw[i]), args[i]);
			if (ret)
				return ret;
		}
		*out = (struct jv){.t = JT_DICT, .d = d};
		return 0;
	}
	case JF_STRFTIME: { /* transformers' strftime_now(fmt): local time */
		char buf[512], *fmt;
		time_t now = (time_t)c->now;
		struct tm tm;
		size_t k;

		if (n != 1 || args[0].t != JT_STR)
			return moem_jinja_err(c, EINVAL, "strftime_now() takes one format string");
		fmt = moem_ja_strndup(c->a, args[0].s.p, args[0].s.n);
		if (!fmt)
			return -ENOMEM;
		if (!localtime_r(&now, &tm))
			return moem_jinja_err(c, EINVAL, "strftime_now: time out of range");
			/* The template's format, as Python's strftime takes it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
		k = strftime(buf, sizeof(buf), fmt, &tm);
#pragma GCC diagnostic pop
		if (!k && *fmt)
			return moem_jinja_err(c, E2BIG, "strftime_now: result too long");
		return str_out(c, buf, k, out);
	}
	case JF_UNSUPPORTED:
		return moem_jinja_err(c, ENOTSUP, "method '%.*s' is not supported",
				      (int)fn->fn.self->s.n, fn->fn.self->s.p);
	case JF_MACRO:
		return call_macro(c, fn->fn.macro, args, kw, n, out);
	default:
		if (fn->fn.id - JF_STR_METHOD == M_FORMAT)
			for (size_t i = 0; kw && i < n; i++)
				if (kw[i])
					return moem_jinja_err(
						c, ENOTSUP,
						"str.format with keywords is not supported");
		return method(c, fn->fn.id - JF_STR_METHOD, fn->fn.self, args, n, out);
	}
}

static const struct jv *kwarg(const struct jv *args, const char *const *kw, size_t n,
			      const char *name, size_t pos)
{
	for (size_t i = 1; kw && i < n; i++)
		if (kw[i] && !strcmp(kw[i], name))
			return &args[i];
	return pos < n && (!kw || !kw[pos]) ? &args[pos] : NULL;
}

static int length(struct jctx *c, const struct jv *v, struct jv *out)
{
	if (v->t == JT_STR) {
		int64_t k = 0;

		for (size_t i = 0; i < v->s.n; i++)
			k += ((unsigned char)v->s.p[i] & 0xc0) != 0x80;
		*out = jv_int(k);
	} else if (v->t == JT_LIST) {
		*out = jv_int((int64_t)v->l->n);
	} else if (v->t == JT_DICT) {
		*out = jv_int((int64_t)v->d->n);
	} else if (v->t == JT_UNDEF) {
		*out = jv_int(0);
	} else {
		return moem_jinja_err(c, EINVAL, "length of %s", moem_jv_type_name(v));
	}
	return 0;
}

/* selectattr / rejectattr / map(attribute=...) */
static int select_attr(struct jctx *c, const struct jv *seq, const struct jv *args,
		       const char *const *kw, size_t n, bool reject, bool map, struct jv *out)
{
	const struct jv *attr =
		map ? kwarg(args, kw, n, "attribute", 99) : kwarg(args, kw, n, "", 1);
	struct jlist *l;
	size_t k = 0;

	if (!attr || attr->t != JT_STR)
		return moem_jinja_err(c, EINVAL, "%s needs an attribute name",
				      map      ? "map"
				      : reject ? "rejectattr"
					       : "selectattr");
	if (seq->t == JT_NONE || seq->t == JT_UNDEF) { /* Jinja's "if seq:" guard */
		l = moem_jv_list_new(c->a, 0);
		if (!l)
			return -ENOMEM;
		*out = (struct jv){.t = JT_LIST, .l = l, .gen = true};
		return 0;
	}
	if (seq->t != JT_LIST)
		return moem_jinja_err(c, EINVAL, "not a list");
	l = moem_jv_list_new(c->a, seq->l->n);
	if (!l)
		return -ENOMEM;
	for (size_t i = 0; i < seq->l->n; i++) {
		struct jv v;
		bool keep;
		int ret = moem_jinja_getattr(c, &seq->l->v[i], attr->s.p, attr->s.n, &v);

		if (ret)
			return ret;
		if (map) {
			l->v[k++] = v;
			continue;
		}
		if (n > 2) {
			struct jv targs[3] = {v, n > 3 ? args[3] : jv_undef()};

			ret = moem_jinja_test(c, args[2].s.p, args[2].s.n, targs, n > 3 ? 2 : 1,
					      &keep);
			if (ret)
				return ret;
		} else {
			keep = moem_jv_truthy(&v);
		}
		if (keep != reject)
			l->v[k++] = seq->l->v[i];
	}
	l->n = k;
	*out = (struct jv){.t = JT_LIST, .l = l, .gen = true};
	return 0;
}

/*
 * Python's ordering for sort, dictsort, min and max: numbers with
 * numbers, strings by code point (UTF-8 byte order is the same), lists
 * and tuples element by element. Other pairs cannot be ordered: an error,
 * as Python's TypeError.
 */
static int py_cmp(struct jctx *c, const struct jv *a, const struct jv *b, int *r)
{
	bool an = a->t == JT_INT || a->t == JT_FLOAT || a->t == JT_BOOL;
	bool bn = b->t == JT_INT || b->t == JT_FLOAT || b->t == JT_BOOL;

	if (an && bn) {
		double x = a->t == JT_FLOAT ? a->f : (double)(a->t == JT_INT ? a->i : a->b);
		double y = b->t == JT_FLOAT ? b->f : (double)(b->t == JT_INT ? b->i : b->b);

		if (a->t != JT_FLOAT && b->t != JT_FLOAT) {
			int64_t i = a->t == JT_INT ? a->i : a->b, j = b->t == JT_INT ? b->i : b->b;

			*r = (i > j) - (i < j);
		} else {
			*r = (x > y) - (x < y);
		}
		return 0;
	}
	if (a->t == JT_STR && b->t == JT_STR) {
		int m = memcmp(a->s.p, b->s.p, moem_min(a->s.n, b->s.n));

		*r = m ? (m > 0) - (m < 0) : (a->s.n > b->s.n) - (a->s.n < b->s.n);
		return 0;
	}
	if (a->t == JT_LIST && b->t == JT_LIST) {
		for (size_t i = 0; i < a->l->n && i < b->l->n; i++) {
			int ret = py_cmp(c, &a->l->v[i], &b->l->v[i], r);

			if (ret || *r)
				return ret;
		}
		*r = (a->l->n > b->l->n) - (a->l->n < b->l->n);
		return 0;
	}
	return moem_jinja_err(c, EINVAL, "'<' not supported between %s and %s",
			      moem_jv_type_name(a), moem_jv_type_name(b));
}

/* The key sort/min/max compare an item by: attribute= (dotted), lowercased unless case_sensitive. */
static int sort_key(struct jctx *c, const struct jv *x, const struct jv *attr, bool cs,
		    struct jv *key)
{
	int ret = 0;

	*key = *x;
	if (attr && attr->t == JT_STR) {
		const char *p = attr->s.p, *end = p + attr->s.n;

		while (!ret && p <= end) {
			const char *dot = memchr(p, '.', (size_t)(end - p));
			size_t k = dot ? (size_t)(dot - p) : (size_t)(end - p);
			struct jv v = *key;

			ret = moem_jinja_getattr(c, &v, p, k, key);
			p += k + 1;
		}
	} else if (attr && attr->t == JT_INT && x->t == JT_LIST) {
		int64_t i = attr->i < 0 ? attr->i + (int64_t)x->l->n : attr->i;

		*key = i >= 0 && i < (int64_t)x->l->n ? x->l->v[i] : jv_undef();
	}
	if (!ret && !cs && key->t == JT_STR) {
		struct jv s = *key;

		ret = recase(c, &s, M_LOWER, key);
	}
	return ret;
}

struct sort_item {
	struct jv key, val;
	size_t at;
};

struct sort_ctx {
	struct jctx *c;
	bool reverse;
	int err;
};

static int sort_cmp(const void *pa, const void *pb, void *arg)
{
	const struct sort_item *a = pa, *b = pb;
	struct sort_ctx *s = arg;
	int r = 0;

	if (!s->err)
		s->err = py_cmp(s->c, &a->key, &b->key, &r);
	if (s->reverse)
		r = -r;
	/* Python's sort is stable, also with reverse=True. */
	return r ? r : (a->at > b->at) - (a->at < b->at);
}

/* Stable sort of the items of v (a list, or a dict's keys) into a list. */
static int sort_list(struct jctx *c, const struct jv *v, const struct jv *attr, bool cs,
		     bool reverse, struct jv *out)
{
	struct sort_ctx s = {.c = c, .reverse = reverse};
	struct sort_item *it;
	struct jlist *l;
	struct jv seq = *v;
	int ret = 0;

	if (v->t == JT_DICT && (ret = dict_view(c, v, M_KEYS, &seq)))
		return ret;
	if (seq.t != JT_LIST)
		return moem_jinja_err(c, EINVAL, "cannot sort %s", moem_jv_type_name(v));
	it = moem_ja_alloc(c->a, (seq.l->n + 1) * sizeof(*it));
	l = moem_jv_list_new(c->a, seq.l->n);
	if (!it || !l)
		return -ENOMEM;
	for (size_t i = 0; !ret && i < seq.l->n; i++) {
		it[i].val = seq.l->v[i];
		it[i].at = i;
		ret = sort_key(c, &seq.l->v[i], attr, cs, &it[i].key);
	}
	if (ret)
		return ret;
	qsort_r(it, seq.l->n, sizeof(*it), sort_cmp, &s);
	if (s.err)
		return s.err;
	for (size_t i = 0; i < seq.l->n; i++)
		l->v[i] = it[i].val;
	*out = (struct jv){.t = JT_LIST, .l = l};
	return 0;
}

/* select / reject (test name and arguments, or truth): a generator. */
static int select_test(struct jctx *c, const struct jv *args, size_t n, bool reject, struct jv *out)
{
	const struct jv *seq = &args[0];
	struct jlist *l;
	size_t k = 0;

	if (n > 1 && args[1].t != JT_STR)
		return moem_jinja_err(c, EINVAL, "%s: the test name must be a string",
				      reject ? "reject" : "select");
	if (n > 1 && !moem_jinja_test_known(args[1].s.p, args[1].s.n))
		return moem_jinja_err(c, ENOTSUP, "test '%.*s' is not supported", (int)args[1].s.n,
				      args[1].s.p);
	if (n > 8)
		return moem_jinja_err(c, E2BIG, "too many arguments");
	if (seq->t == JT_NONE || seq->t == JT_UNDEF) {
		l = moem_jv_list_new(c->a, 0);
	} else if (seq->t != JT_LIST) {
		return moem_jinja_err(c, EINVAL, "not a list");
	} else {
		l = moem_jv_list_new(c->a, seq->l->n);
	}
	if (!l)
		return -ENOMEM;
	for (size_t i = 0; seq->t == JT_LIST && i < seq->l->n; i++) {
		struct jv targs[8];
		bool keep;

		targs[0] = seq->l->v[i];
		for (size_t j = 2; j < n; j++)
			targs[j - 1] = args[j];
		if (n > 1) {
			int ret = moem_jinja_test(c, args[1].s.p, args[1].s.n, targs, n - 1, &keep);

			if (ret)
				return ret;
		} else {
			keep = moem_jv_truthy(&targs[0]);
		}
		if (keep != reject)
			l->v[k++] = seq->l->v[i];
	}
	l->n = k;
	*out = (struct jv){.t = JT_LIST, .l = l, .gen = true};
	return 0;
}

/* markupsafe's escape: & < > " ' */
static int html_escape(struct jctx *c, const struct jv *v, struct jv *out)
{
	struct jbuf b = {0};
	struct jv s;
	int ret = to_str(c, v, &s);

	for (size_t i = 0; !ret && i < s.s.n; i++) {
		char ch = s.s.p[i];

		ret = ch == '&'	   ? moem_jb_puts(&b, "&amp;")
		      : ch == '<'  ? moem_jb_puts(&b, "&lt;")
		      : ch == '>'  ? moem_jb_puts(&b, "&gt;")
		      : ch == '"'  ? moem_jb_puts(&b, "&#34;")
		      : ch == '\'' ? moem_jb_puts(&b, "&#39;")
				   : moem_jb_put(&b, &ch, 1);
	}
	if (!ret)
		ret = str_out(c, b.p ? b.p : "", b.n, out);
	free(b.p);
	return ret;
}

int moem_jinja_escape(struct jctx *c, const struct jv *v, struct jv *out)
{
	int ret;

	if (v->markup) {
		*out = *v;
		return 0;
	}
	ret = html_escape(c, v, out);
	out->markup = true;
	return ret;
}

int moem_jinja_filter(struct jctx *c, const char *name, size_t nn, const struct jv *args,
		      const char *const *kw, size_t n, struct jv *out)
{
	const struct jv *v = &args[0], *a1 = n > 1 ? &args[1] : NULL;
	int f = find_name(filters, MOEM_ARRAY_SIZE(filters), name, nn);
	static const struct jv empty = {.t = JT_STR, .s = {"", 0}};
	struct jbuf b = {0};
	int ret;

	/* Jinja's string filters read an undefined value as "". */
	if (v->t == JT_UNDEF &&
	    (f == 0 || (f >= 4 && f <= 7) || f == 18 || f == F_E || f == F_ESCAPE))
		v = &empty;
	if (v->gen && (f == 1 || f == 2 || f == 3 || f == 11))
		return moem_jinja_err(c, EINVAL, "%s of a generator (add |list)", filters[f]);
	switch (f) {
	case 0: /* trim */
		if (v->t != JT_STR)
			return moem_jinja_err(c, EINVAL, "trim of %s", moem_jv_type_name(v));
		ret = strip(c, v, a1, true, true, out);
		out->markup = v->markup;
		return ret;
	case 1:
	case 2:
		return length(c, v, out);
	case 3: { /* tojson */
		const struct jv *ind = kwarg(args, kw, n, "indent", 1);
		const struct jv *sk = kwarg(args, kw, n, "sort_keys", 99);

		ret = moem_jv_tojson(&b, v,
				     ind && ind->t == JT_INT ? (int)moem_clamp(ind->i, 0, 16) : -1,
				     0, sk && moem_jv_truthy(sk));
		if (ret == -EINVAL)
			ret = moem_jinja_err(c, EINVAL, "tojson: %s is not JSON",
					     moem_jv_type_name(v));
		if (!ret)
			ret = str_out(c, b.p ? b.p : "", b.n, out);
		free(b.p);
		return ret;
	}
	case 4:
	case 5:
	case 6:
	case 7:
		if (v->t != JT_STR)
			return moem_jinja_err(c, EINVAL, "%s of %s", filters[f],
					      moem_jv_type_name(v));
		return recase(c, v,
			      f == 4   ? M_UPPER
			      : f == 5 ? M_LOWER
			      : f == 6 ? M_TITLE
				       : M_CAPITALIZE,
			      out);
	case 8:
	case 9: { /* default(value, boolean=false) */
		const struct jv *bo = kwarg(args, kw, n, "boolean", 2);
		bool use = v->t == JT_UNDEF || (bo && moem_jv_truthy(bo) && !moem_jv_truthy(v));

		*out = use ? (a1 ? *a1 : jv_str("", 0)) : *v;
		return 0;
	}
	case 10:
	case 11: /* first, last */
		if (v->t == JT_LIST) {
			*out = v->l->n ? v->l->v[f == 10 ? 0 : v->l->n - 1] : jv_undef();
			return 0;
		}
		if (v->t == JT_STR && v->s.n) {
			size_t o = 0;

			if (f == 11) {
				o = v->s.n - 1;
				while (o && ((unsigned char)v->s.p[o] & 0xc0) == 0x80)
					o--;
			}
			*out = jv_str(v->s.p + o, tok_utf8_len((unsigned char)v->s.p[o]));
			return 0;
		}
		*out = jv_undef();
		return 0;
	case 12: { /* join(sep, attribute=) */
		struct jv sep = a1 && (!kw || !kw[1]) ? *a1 : jv_str("", 0);
		const struct jv *attr = kwarg(args, kw, n, "attribute", 99);

		if (attr) {
			struct jv m;
			struct jv margs[2] = {*v, *attr};
			const char *mkw[2] = {NULL, "attribute"};

			ret = select_attr(c, v, margs, mkw, 2, false, true, &m);
			return ret ? ret : join(c, &m, &sep, out);
		}
		return join(c, v, &sep, out);
	}
	case 13: { /* list */
		if (v->t == JT_LIST) {
			*out = *v;
			out->tuple = false;
			out->gen = false;
			return 0;
		}
		if (v->t == JT_DICT)
			return dict_view(c, v, M_KEYS, out);
		return moem_jinja_err(c, EINVAL, "list of %s", moem_jv_type_name(v));
	}
	case 14: /* string */
		return to_str(c, v, out);
	case 15: /* int */
		if (v->t == JT_INT || v->t == JT_BOOL)
			*out = jv_int(v->t == JT_INT ? v->i : v->b);
		else if (v->t == JT_FLOAT && !(fabs(v->f) < 9223372036854775808.0))
			/* out of int64 (or NaN): converting would be undefined */
			return moem_jinja_err(c, ERANGE, "int of %g: out of range", v->f);
		else if (v->t == JT_FLOAT)
			*out = jv_int((int64_t)v->f);
		else if (v->t == JT_STR) {
			const char *d = moem_ja_strndup(c->a, v->s.p, v->s.n);
			long long x;

			if (!d)
				return -ENOMEM;
			/* strtoll saturates: Python's int() would not, so a number past
			 * int64 fails like float|int's instead of becoming INT64_MAX */
			errno = 0;
			x = strtoll(d, NULL, 10);
			if (errno == ERANGE)
				return moem_jinja_err(c, ERANGE, "int of '%.40s': out of range", d);
			*out = jv_int(x);
		} else
			*out = jv_int(0);
		return 0;
	case 16: /* float */
		*out = (struct jv){.t = JT_FLOAT,
				   .f = v->t == JT_FLOAT ? v->f
					: v->t == JT_INT ? (double)v->i
							 : 0.0};
		return 0;
	case 17: /* abs */
		if (v->t == JT_INT && v->i == INT64_MIN)
			return moem_jinja_err(c, ERANGE, "abs of %lld: out of range",
					      (long long)v->i);
		else if (v->t == JT_INT)
			*out = jv_int(v->i < 0 ? -v->i : v->i);
		else if (v->t == JT_FLOAT)
			*out = (struct jv){.t = JT_FLOAT, .f = v->f < 0 ? -v->f : v->f};
		else
			return moem_jinja_err(c, EINVAL, "abs of %s", moem_jv_type_name(v));
		return 0;
	case 18: /* replace */
		if (v->t != JT_STR || n < 3)
			return moem_jinja_err(c, EINVAL,
					      "replace needs a string and two arguments");
		return replace(c, v, &args[1], &args[2],
			       n > 3 && args[3].t == JT_INT ? args[3].i : -1, out);
	case 19: /* items: a generator of (key, value); nothing from undefined */
		if (v->t == JT_UNDEF) {
			struct jlist *l = moem_jv_list_new(c->a, 0);

			if (!l)
				return -ENOMEM;
			*out = (struct jv){.t = JT_LIST, .l = l, .gen = true};
			return 0;
		}
		if (v->t != JT_DICT)
			return moem_jinja_err(c, EINVAL, "items of %s", moem_jv_type_name(v));
		ret = dict_view(c, v, M_ITEMS, out);
		out->gen = true;
		return ret;
	case 20: { /* reverse */
		struct jlist *l;

		if (v->t == JT_STR) {
			/* By code point, back to front. */
			for (size_t e = v->s.n; e > 0;) {
				size_t st = e - 1;

				while (st && ((unsigned char)v->s.p[st] & 0xc0) == 0x80)
					st--;
				ret = moem_jb_put(&b, v->s.p + st, e - st);
				if (ret)
					break;
				e = st;
			}
			ret = ret ? ret : str_out(c, b.p ? b.p : "", b.n, out);
			free(b.p);
			return ret;
		}
		if (v->t != JT_LIST)
			return moem_jinja_err(c, EINVAL, "reverse of %s", moem_jv_type_name(v));
		l = moem_jv_list_new(c->a, v->l->n);
		if (!l)
			return -ENOMEM;
		for (size_t i = 0; i < v->l->n; i++)
			l->v[i] = v->l->v[v->l->n - 1 - i];
		/* reversed(list) is an iterator; a generator is listed first. */
		*out = (struct jv){.t = JT_LIST, .l = l, .gen = !v->gen};
		return 0;
	}
	case 21: /* safe: markupsafe's Markup(str(value)) */
		ret = to_str(c, v, out);
		out->markup = true;
		return ret;
	case 22: { /* indent(width=4, first=false, blank=false) */
		const struct jv *w = kwarg(args, kw, n, "width", 1);
		const struct jv *first = kwarg(args, kw, n, "first", 2);
		int64_t width = w && w->t == JT_INT ? moem_clamp(w->i, 0, 64) : 4;
		struct jv s;

		ret = to_str(c, v, &s);
		for (size_t i = 0; !ret && i < s.s.n; i++) {
			if (i == 0 && first && moem_jv_truthy(first))
				for (int64_t k = 0; !ret && k < width; k++)
					ret = moem_jb_put(&b, " ", 1);
			if (!ret)
				ret = moem_jb_put(&b, s.s.p + i, 1);
			if (!ret && s.s.p[i] == '\n' && i + 1 < s.s.n && s.s.p[i + 1] != '\n')
				for (int64_t k = 0; !ret && k < width; k++)
					ret = moem_jb_put(&b, " ", 1);
		}
		if (!ret)
			ret = str_out(c, b.p ? b.p : "", b.n, out);
		free(b.p);
		return ret;
	}
	case 23:
	case 24:
		return select_attr(c, v, args, kw, n, f == 24, false, out);
	case 25:
		return select_attr(c, v, args, kw, n, false, true, out);
	case 26: { /* unique */
		struct jlist *l;
		size_t k = 0;

		if (v->t != JT_LIST)
			return moem_jinja_err(c, EINVAL, "unique of %s", moem_jv_type_name(v));
		l = moem_jv_list_new(c->a, v->l->n);
		if (!l)
			return -ENOMEM;
		for (size_t i = 0; i < v->l->n; i++) {
			bool seen = false;

			for (size_t j = 0; j < k && !seen; j++)
				seen = moem_jv_equal(&l->v[j], &v->l->v[i]);
			if (!seen)
				l->v[k++] = v->l->v[i];
		}
		l->n = k;
		*out = (struct jv){.t = JT_LIST, .l = l, .gen = true};
		return 0;
	}
	case F_SORT: {
		const struct jv *rev = kwarg(args, kw, n, "reverse", 1);
		const struct jv *cs = kwarg(args, kw, n, "case_sensitive", 2);
		const struct jv *attr = kwarg(args, kw, n, "attribute", 3);

		return sort_list(c, v, attr, cs && moem_jv_truthy(cs), rev && moem_jv_truthy(rev),
				 out);
	}
	case F_E:
	case F_ESCAPE:
		return moem_jinja_escape(c, v, out);
	case F_DICTSORT: { /* dictsort(case_sensitive=false, by='key', reverse=false) */
		const struct jv *cs = kwarg(args, kw, n, "case_sensitive", 1);
		const struct jv *by = kwarg(args, kw, n, "by", 2);
		const struct jv *rev = kwarg(args, kw, n, "reverse", 3);
		struct jv items, idx = jv_int(0);

		if (v->t != JT_DICT)
			return moem_jinja_err(c, EINVAL, "dictsort of %s", moem_jv_type_name(v));
		if (by && (by->t != JT_STR ||
			   (!moem_jv_equal(by, &(struct jv){.t = JT_STR, .s = {"key", 3}}) &&
			    !moem_jv_equal(by, &(struct jv){.t = JT_STR, .s = {"value", 5}}))))
			return moem_jinja_err(c, EINVAL, "dictsort: by must be 'key' or 'value'");
		if (by && by->s.n == 5)
			idx = jv_int(1);
		ret = dict_view(c, v, M_ITEMS, &items);
		return ret ? ret
			   : sort_list(c, &items, &idx, cs && moem_jv_truthy(cs),
				       rev && moem_jv_truthy(rev), out);
	}
	case F_MIN:
	case F_MAX: { /* min/max(case_sensitive=false, attribute=none) */
		const struct jv *cs = kwarg(args, kw, n, "case_sensitive", 1);
		const struct jv *attr = kwarg(args, kw, n, "attribute", 2);
		struct jv s;

		ret = sort_list(c, v, attr, cs && moem_jv_truthy(cs), false, &s);
		if (ret)
			return ret;
		/* The first minimum and the first maximum, as Python's min()/max(). */
		if (!s.l->n) {
			*out = jv_undef();
		} else if (f == F_MIN) {
			*out = s.l->v[0];
		} else {
			struct jv ks, kl;
			size_t i = s.l->n - 1;
			int r = 0;

			while (i > 0) {
				ret = sort_key(c, &s.l->v[i - 1], attr, cs && moem_jv_truthy(cs),
					       &ks);
				if (!ret)
					ret = sort_key(c, &s.l->v[s.l->n - 1], attr,
						       cs && moem_jv_truthy(cs), &kl);
				if (!ret)
					ret = py_cmp(c, &ks, &kl, &r);
				if (ret)
					return ret;
				if (r)
					break;
				i--;
			}
			*out = s.l->v[i];
		}
		return 0;
	}
	case F_SELECT:
	case F_REJECT:
		return select_test(c, args, n, f == F_REJECT, out);
	default:
		return moem_jinja_err(c, ENOTSUP, "filter '%.*s' is not supported", (int)nn, name);
	}
}

int moem_jinja_test(struct jctx *c, const char *name, size_t nn, const struct jv *args, size_t n,
		    bool *r)
{
	const struct jv *v = &args[0], *a1 = n > 1 ? &args[1] : NULL;
	int t = find_name(tests, MOEM_ARRAY_SIZE(tests), name, nn);

	switch (t) {
	case 0:
		*r = v->t != JT_UNDEF;
		return 0;
	case 1:
		*r = v->t == JT_UNDEF;
		return 0;
	case 2:
		*r = v->t == JT_NONE;
		return 0;
	case 3:
		*r = v->t == JT_STR;
		return 0;
	case 4:
		*r = v->t == JT_INT || v->t == JT_FLOAT;
		return 0;
	case 5:
		*r = v->t == JT_INT;
		return 0;
	case 6:
		*r = v->t == JT_FLOAT;
		return 0;
	case 7:
		*r = v->t == JT_DICT;
		return 0;
	case 8:
		*r = v->t == JT_LIST || v->t == JT_DICT || v->t == JT_STR;
		return 0;
	case 9:
		*r = v->t == JT_LIST || v->t == JT_DICT || v->t == JT_STR;
		return 0;
	case 10:
		*r = v->t == JT_BOOL;
		return 0;
	case 11:
	case 12:
		*r = v->t == JT_BOOL && v->b == (t == 11);
		return 0;
	case 13:
	case 14:
	case 15:
		if (!a1)
			return moem_jinja_err(c, EINVAL, "test '%s' needs an argument", tests[t]);
		*r = moem_jv_equal(v, a1) == (t != 15);
		return 0;
	case 16:
	case 17:
		if (v->t != JT_INT)
			return moem_jinja_err(c, EINVAL, "test '%s' of %s", tests[t],
					      moem_jv_type_name(v));
		*r = (v->i % 2 != 0) == (t == 16);
		return 0;
	case 18: {
		bool in = false;

		if (!a1)
			return moem_jinja_err(c, EINVAL, "test 'in' needs an argument");
		if (a1->t == JT_LIST)
			for (size_t i = 0; i < a1->l->n && !in; i++)
				in = moem_jv_equal(&a1->l->v[i], v);
		else if (a1->t == JT_STR && v->t == JT_STR)
			in = !v->s.n || memmem(a1->s.p, a1->s.n, v->s.p, v->s.n);
		else if (a1->t == JT_DICT)
			in = moem_jv_dict_lookup(a1->d, v) != NULL;
		*r = in;
		return 0;
	}
	case 19:
	case 20: {
		struct jv x;
		int ret;

		if (v->t != JT_STR) {
			*r = false;
			return 0;
		}
		ret = recase(c, v, t == 19 ? M_LOWER : M_UPPER, &x);
		*r = !ret && moem_jv_equal(&x, v);
		return ret;
	}
	case 21:
		*r = v->t == JT_FN;
		return 0;
	case 22:
		*r = a1 && moem_jv_equal(v, a1) && v->t == a1->t;
		return 0;
	case 23:
		if (!a1 || v->t != JT_INT || a1->t != JT_INT || !a1->i)
			return moem_jinja_err(c, EINVAL, "divisibleby needs integers");
		/* INT64_MIN % -1 traps (SIGFPE); everything is divisible by -1 */
		*r = a1->i == -1 || v->i % a1->i == 0;
		return 0;
	}
	return moem_jinja_err(c, ENOTSUP, "test '%.*s' is not supported", (int)nn, name);
}
