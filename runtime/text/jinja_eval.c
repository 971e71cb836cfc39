// SPDX-License-Identifier: GPL-2.0-only
/*
 * Jinja evaluator: statements write to the output, expressions give
 * values with Python's rules (jinja2 runs on Python): + on str and list,
 * // and % as Python's floor division, comparisons, "in", truthiness,
 * scoping (a for loop has its own scope: set inside it does not leak,
 * which is why templates use namespace()).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>

#include "jinja_int.h"
#include "tok_int.h"

/* Bounds on work a template may ask for (loops times calls, nesting). */
#define JINJA_MAX_STEPS (1u << 22)
#define JINJA_MAX_DEPTH 128

/* Break and continue travel up as these codes. */
#define J_BREAK	   1
#define J_CONTINUE 2

int moem_jinja_err(const struct jctx *c, int err, const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return moem_errf(err, "template line %d: %s", c->line, msg);
}

struct jv *moem_jinja_lookup(struct jctx *c, const char *name, size_t n)
{
	for (struct jscope *s = c->scope; s; s = s->up) {
		struct jv *v = moem_jv_dict_get(s->vars, name, n);

		if (v)
			return v;
	}
	return NULL;
}

static int set_var(struct jctx *c, const char *name, size_t n, struct jv v)
{
	return moem_jv_dict_set(c->a, c->scope->vars, name, n, v);
}

static size_t cp_count(const char *s, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xc0) != 0x80;
	return k;
}

/* Byte offset of code point i of s. */
static size_t cp_off(const char *s, size_t n, size_t i)
{
	size_t b = 0;

	while (b < n && i) {
		b += tok_utf8_len((unsigned char)s[b]);
		i--;
	}
	return b;
}

static int concat(struct jctx *c, const struct jv *a, const struct jv *b, struct jv *out)
{
	struct jbuf x = {0};
	int ret = moem_jv_print(&x, a);
	char *p;

	if (!ret)
		ret = moem_jv_print(&x, b);
	p = ret ? NULL : moem_ja_strndup(c->a, x.p ? x.p : "", x.n);
	if (!ret && !p)
		ret = -ENOMEM;
	if (!ret)
		*out = jv_str(p, x.n);
	free(x.p);
	return ret;
}

static bool is_num(const struct jv *v)
{
	return v->t == JT_INT || v->t == JT_FLOAT || v->t == JT_BOOL;
}

static double fnum(const struct jv *v)
{
	return v->t == JT_FLOAT ? v->f : v->t == JT_INT ? (double)v->i : (double)v->b;
}

static int64_t inum(const struct jv *v)
{
	return v->t == JT_INT ? v->i : (int64_t)v->b;
}

static int compare(struct jctx *c, const char *op, const struct jv *a, const struct jv *b, bool *r)
{
	int cmp;

	if (!strcmp(op, "==")) {
		*r = moem_jv_equal(a, b);
		return 0;
	}
	if (!strcmp(op, "!=")) {
		*r = !moem_jv_equal(a, b);
		return 0;
	}
	if (is_num(a) && is_num(b)) {
		double x = fnum(a), y = fnum(b);

		cmp = x < y ? -1 : x > y ? 1 : 0;
	} else if (a->t == JT_STR && b->t == JT_STR) {
		size_t m = moem_min(a->s.n, b->s.n);

		cmp = memcmp(a->s.p, b->s.p, m);
		if (!cmp)
			cmp = a->s.n < b->s.n ? -1 : a->s.n > b->s.n;
	} else {
		return moem_jinja_err(c, EINVAL, "'%s' not supported between %s and %s", op,
				      moem_jv_type_name(a), moem_jv_type_name(b));
	}
	*r = !strcmp(op, "<")	 ? cmp < 0
	     : !strcmp(op, ">")	 ? cmp > 0
	     : !strcmp(op, "<=") ? cmp <= 0
				 : cmp >= 0;
	return 0;
}

static int contains(struct jctx *c, const struct jv *hay, const struct jv *x, bool *r)
{
	if (hay->t == JT_STR) {
		if (x->t != JT_STR)
			return moem_jinja_err(c, EINVAL, "'in <string>' needs a string, not %s",
					      moem_jv_type_name(x));
		*r = !x->s.n || memmem(hay->s.p, hay->s.n, x->s.p, x->s.n);
		return 0;
	}
	if (hay->t == JT_LIST) {
		*r = false;
		for (size_t i = 0; i < hay->l->n && !*r; i++)
			*r = moem_jv_equal(&hay->l->v[i], x);
		return 0;
	}
	if (hay->t == JT_DICT) {
		*r = moem_jv_dict_lookup(hay->d, x) != NULL;
		return 0;
	}
	if (hay->t == JT_UNDEF) { /* Jinja's Undefined iterates as empty */
		*r = false;
		return 0;
	}
	return moem_jinja_err(c, EINVAL, "'in' on %s", moem_jv_type_name(hay));
}

static int arith(struct jctx *c, const char *op, const struct jv *a, const struct jv *b,
		 struct jv *out)
{
	if (!strcmp(op, "~"))
		return concat(c, a, b, out);
	if (!strcmp(op, "+") && a->t == JT_STR && b->t == JT_STR && a->markup != b->markup) {
		/* Markup + str escapes the str (markupsafe); the sum is Markup. */
		struct jv x, y;
		int ret = moem_jinja_escape(c, a, &x);

		if (!ret)
			ret = moem_jinja_escape(c, b, &y);
		if (!ret)
			ret = arith(c, op, &x, &y, out);
		out->markup = true;
		return ret;
	}
	if (!strcmp(op, "+") && a->t == JT_STR && b->t == JT_STR) {
		char *p = moem_ja_alloc(c->a, a->s.n + b->s.n + 1);

		if (!p)
			return moem_jinja_err(c, E2BIG, "template output too large");
		memcpy(p, a->s.p, a->s.n);
		memcpy(p + a->s.n, b->s.p, b->s.n);
		p[a->s.n + b->s.n] = 0;
		*out = jv_str(p, a->s.n + b->s.n);
		out->markup = a->markup;
		return 0;
	}
	if (!strcmp(op, "+") && a->t == JT_LIST && b->t == JT_LIST) {
		struct jlist *l = moem_jv_list_new(c->a, a->l->n + b->l->n);

		if (!l)
			return -ENOMEM;
		memcpy(l->v, a->l->v, a->l->n * sizeof(*l->v));
		memcpy(l->v + a->l->n, b->l->v, b->l->n * sizeof(*l->v));
		*out = (struct jv){.t = JT_LIST, .l = l};
		return 0;
	}
	if (!strcmp(op, "*") && a->t == JT_STR && (b->t == JT_INT)) {
		int64_t k = b->i < 0 ? 0 : b->i;
		char *p;

		if (k && a->s.n > (1u << 24) / (uint64_t)k)
			return moem_jinja_err(c, E2BIG, "string repetition too large");
		p = moem_ja_alloc(c->a, a->s.n * (size_t)k + 1);
		if (!p)
			return -ENOMEM;
		for (int64_t i = 0; i < k; i++)
			memcpy(p + (size_t)i * a->s.n, a->s.p, a->s.n);
		p[a->s.n * (size_t)k] = 0;
		*out = jv_str(p, a->s.n * (size_t)k);
		return 0;
	}
	if (!is_num(a) || !is_num(b))
		return moem_jinja_err(c, EINVAL, "unsupported operand types for %s: %s and %s", op,
				      moem_jv_type_name(a), moem_jv_type_name(b));
	if (a->t != JT_FLOAT && b->t != JT_FLOAT && strcmp(op, "/") && strcmp(op, "**")) {
		int64_t x = inum(a), y = inum(b), r;

		bool ovf = false;

		if ((!strcmp(op, "//") || !strcmp(op, "%")) && !y)
			return moem_jinja_err(c, EDOM, "division by zero");
		/* Python's integers do not overflow; 64-bit ones must not wrap (or
		 * trap: INT64_MIN // -1 is SIGFPE), so a template that leaves
		 * their range fails with a message. */
		if (!strcmp(op, "+"))
			ovf = __builtin_add_overflow(x, y, &r);
		else if (!strcmp(op, "-"))
			ovf = __builtin_sub_overflow(x, y, &r);
		else if (!strcmp(op, "*"))
			ovf = __builtin_mul_overflow(x, y, &r);
		else if (y == -1)
			/* x // -1 is -x (overflows for INT64_MIN); x % -1 is 0 */
			ovf = !strcmp(op, "//") ? __builtin_sub_overflow((int64_t)0, x, &r)
						: (r = 0, false);
		else if (!strcmp(op, "//"))
			r = x / y - ((x % y != 0) && ((x < 0) != (y < 0)));
		else {
			r = x % y;
			if (r && ((r < 0) != (y < 0)))
				r += y;
		}
		if (ovf)
			return moem_jinja_err(c, ERANGE, "integer overflow in %lld %s %lld",
					      (long long)x, op, (long long)y);
		*out = jv_int(r);
		return 0;
	}
	{
		double x = fnum(a), y = fnum(b), r;

		if ((!strcmp(op, "/") || !strcmp(op, "//") || !strcmp(op, "%")) && y == 0)
			return moem_jinja_err(c, EDOM, "division by zero");
		if (!strcmp(op, "+"))
			r = x + y;
		else if (!strcmp(op, "-"))
			r = x - y;
		else if (!strcmp(op, "*"))
			r = x * y;
		else if (!strcmp(op, "/"))
			r = x / y;
		else if (!strcmp(op, "//"))
			r = floor(x / y);
		else if (!strcmp(op, "%"))
			r = x - y * floor(x / y);
		else
			r = pow(x, y);
		if (!strcmp(op, "**") && a->t == JT_INT && b->t == JT_INT && b->i >= 0 &&
		    fabs(r) < 9e15)
			*out = jv_int((int64_t)r);
		else
			*out = (struct jv){.t = JT_FLOAT, .f = r};
	}
	return 0;
}

/* Python slicing of a list or a string (by code point). */
static int slice(struct jctx *c, const struct jv *v, const struct jv *s0, const struct jv *s1,
		 const struct jv *s2, struct jv *out)
{
	int64_t len, start, stop, step = 1, n = 0;
	bool str = v->t == JT_STR;
	struct jlist *l = NULL;
	struct jbuf b = {0};

	if (v->t != JT_LIST && !str)
		return moem_jinja_err(c, EINVAL, "cannot slice %s", moem_jv_type_name(v));
	len = str ? (int64_t)cp_count(v->s.p, v->s.n) : (int64_t)v->l->n;
	if (s2->t == JT_INT)
		step = s2->i;
	if (!step)
		return moem_jinja_err(c, EINVAL, "slice step cannot be zero");
	if (s0->t == JT_INT) {
		start = s0->i < 0 ? s0->i + len : s0->i;
		start = step > 0 ? moem_clamp(start, 0, len) : moem_clamp(start, -1, len - 1);
	} else {
		start = step > 0 ? 0 : len - 1;
	}
	if (s1->t == JT_INT) {
		stop = s1->i < 0 ? s1->i + len : s1->i;
		stop = step > 0 ? moem_clamp(stop, 0, len) : moem_clamp(stop, -1, len - 1);
	} else {
		stop = step > 0 ? len : -1;
	}
	if (!str) {
		l = moem_jv_list_new(c->a, (size_t)len);
		if (!l)
			return -ENOMEM;
	}
	for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
		if (str) {
			size_t o = cp_off(v->s.p, v->s.n, (size_t)i);
			int ret =
				moem_jb_put(&b, v->s.p + o, tok_utf8_len((unsigned char)v->s.p[o]));

			if (ret) {
				free(b.p);
				return ret;
			}
		} else {
			l->v[n++] = v->l->v[i];
		}
		/* a step past int64's range ends the slice, as it ends the string */
		if (__builtin_add_overflow(i, step, &i))
			break;
	}
	if (!str) {
		l->n = (size_t)n;
		*out = (struct jv){.t = JT_LIST, .l = l};
		return 0;
	}
	{
		char *p = moem_ja_strndup(c->a, b.p ? b.p : "", b.n);

		free(b.p);
		if (!p)
			return -ENOMEM;
		*out = jv_str(p, b.n);
	}
	return 0;
}

static int item(struct jctx *c, const struct jv *v, const struct jv *k, struct jv *out)
{
	if (v->gen) { /* the sandbox's getitem on a generator: undefined */
		*out = jv_undef();
		return 0;
	}
	if (v->t == JT_DICT) {
		const struct jv *x = moem_jv_dict_lookup(v->d, k);

		*out = x ? *x : jv_undef();
		return 0;
	}
	if ((v->t == JT_LIST || v->t == JT_STR) && k->t == JT_INT) {
		int64_t len =
			v->t == JT_LIST ? (int64_t)v->l->n : (int64_t)cp_count(v->s.p, v->s.n);
		int64_t i = k->i < 0 ? k->i + len : k->i;

		if (i < 0 || i >= len) {
			*out = jv_undef();
			return 0;
		}
		if (v->t == JT_LIST) {
			*out = v->l->v[i];
		} else {
			size_t o = cp_off(v->s.p, v->s.n, (size_t)i);

			*out = jv_str(v->s.p + o, tok_utf8_len((unsigned char)v->s.p[o]));
		}
		return 0;
	}
	if (k->t == JT_STR)
		return moem_jinja_getattr(c, v, k->s.p, k->s.n, out);
	if (v->t == JT_UNDEF)
		return moem_jinja_err(c, EINVAL, "subscript of an undefined value");
	return moem_jinja_err(c, EINVAL, "%s cannot be indexed by %s", moem_jv_type_name(v),
			      moem_jv_type_name(k));
}

static int eval_args(struct jctx *c, const struct jnode *n, struct jv *args, size_t first)
{
	for (size_t i = 0; i < n->nargs; i++) {
		int ret = moem_jinja_eval(c, n->args[i], &args[first + i]);

		if (ret)
			return ret;
	}
	return 0;
}

static int eval_seq(struct jctx *c, const struct jnode *n, struct jv *out)
{
	if (n->k == JN_DICT) {
		struct jdict *d = moem_jv_dict_new(c->a);

		if (!d)
			return -ENOMEM;
		for (size_t i = 0; i + 1 < n->nargs; i += 2) {
			struct jv k = jv_undef(), v = jv_undef();
			int ret = moem_jinja_eval(c, n->args[i], &k);

			if (!ret)
				ret = moem_jinja_eval(c, n->args[i + 1], &v);
			if (!ret && k.t != JT_STR && k.t != JT_INT)
				ret = moem_jinja_err(c, ENOTSUP,
						     "dict keys other than strings and integers "
						     "are not supported");
			if (!ret)
				ret = moem_jv_dict_put(c->a, d, &k, v);
			if (ret)
				return ret;
		}
		*out = (struct jv){.t = JT_DICT, .d = d};
		return 0;
	}
	{
		struct jlist *l = moem_jv_list_new(c->a, n->nargs);
		int ret;

		if (!l)
			return -ENOMEM;
		ret = eval_args(c, n, l->v, 0);
		*out = (struct jv){.t = JT_LIST, .l = l, .tuple = n->k == JN_TUPLE};
		return ret;
	}
}

int moem_jinja_eval(struct jctx *c, const struct jnode *n, struct jv *out)
{
	struct jv a, b, x, args[16];
	bool r;
	int ret;

	c->line = n->line;
	if (++c->depth > JINJA_MAX_DEPTH) {
		c->depth--;
		return moem_jinja_err(c, ELOOP, "expression too deep");
	}
	ret = 0;
	switch (n->k) {
	case JN_LIT:
		*out = n->lit;
		break;
	case JN_NAME: {
		struct jv *v = moem_jinja_lookup(c, n->name, n->name_len);

		*out = v ? *v : jv_undef();
		break;
	}
	case JN_ATTR:
		ret = moem_jinja_eval(c, n->a, &a);
		if (!ret && a.t == JT_UNDEF)
			ret = moem_jinja_err(c, EINVAL, "attribute '%.*s' of an undefined value",
					     (int)n->name_len, n->name);
		if (!ret)
			ret = moem_jinja_getattr(c, &a, n->name, n->name_len, out);
		break;
	case JN_ITEM:
		ret = moem_jinja_eval(c, n->a, &a);
		if (!ret)
			ret = moem_jinja_eval(c, n->b, &b);
		if (!ret)
			ret = item(c, &a, &b, out);
		break;
	case JN_SLICE: {
		struct jv s0 = jv_none(), s1 = jv_none(), s2 = jv_none();

		ret = moem_jinja_eval(c, n->a, &a);
		if (!ret && n->b)
			ret = moem_jinja_eval(c, n->b, &s0);
		if (!ret && n->c)
			ret = moem_jinja_eval(c, n->c, &s1);
		if (!ret && n->args[0])
			ret = moem_jinja_eval(c, n->args[0], &s2);
		if (!ret)
			ret = slice(c, &a, &s0, &s1, &s2, out);
		break;
	}
	case JN_CALL:
		if (n->nargs > MOEM_ARRAY_SIZE(args)) {
			ret = moem_jinja_err(c, E2BIG, "too many arguments");
			break;
		}
		ret = moem_jinja_eval(c, n->a, &a);
		if (!ret)
			ret = eval_args(c, n, args, 0);
		if (!ret)
			ret = moem_jinja_call(c, &a, args, n->kw, n->nargs, out);
		break;
	case JN_FILTER:
	case JN_TEST:
		if (n->nargs + 1 > MOEM_ARRAY_SIZE(args)) {
			ret = moem_jinja_err(c, E2BIG, "too many arguments");
			break;
		}
		ret = moem_jinja_eval(c, n->a, &args[0]);
		if (!ret)
			ret = eval_args(c, n, args, 1);
		if (ret)
			break;
		c->line = n->line;
		if (n->k == JN_FILTER) {
			const char **kw = NULL;
			const char *kwbuf[17] = {0};

			if (n->kw) {
				memcpy(kwbuf + 1, n->kw, n->nargs * sizeof(*kw));
				kw = kwbuf;
			}
			ret = moem_jinja_filter(c, n->name, n->name_len, args, kw, n->nargs + 1,
						out);
		} else {
			ret = moem_jinja_test(c, n->name, n->name_len, args, n->nargs + 1, &r);
			if (!ret)
				*out = jv_bool(r != n->negate);
		}
		break;
	case JN_NOT:
		ret = moem_jinja_eval(c, n->a, &a);
		if (!ret)
			*out = jv_bool(!moem_jv_truthy(&a));
		break;
	case JN_NEG:
		ret = moem_jinja_eval(c, n->a, &a);
		if (!ret && a.t == JT_INT) {
			int64_t neg;

			/* -INT64_MIN does not fit: fail as arith()'s overflows do,
			 * rather than give INT64_MIN back */
			if (__builtin_sub_overflow((int64_t)0, a.i, &neg))
				ret = moem_jinja_err(c, ERANGE, "integer overflow in -(%lld)",
						     (long long)a.i);
			else
				*out = jv_int(neg);
		} else if (!ret && a.t == JT_FLOAT)
			*out = (struct jv){.t = JT_FLOAT, .f = -a.f};
		else if (!ret)
			ret = moem_jinja_err(c, EINVAL, "bad operand for unary -: %s",
					     moem_jv_type_name(&a));
		break;
	case JN_AND:
	case JN_OR:
		/* Python's and/or give an operand, not a bool. */
		ret = moem_jinja_eval(c, n->a, &a);
		if (!ret && (moem_jv_truthy(&a) == (n->k == JN_AND)))
			ret = moem_jinja_eval(c, n->b, &a);
		if (!ret)
			*out = a;
		break;
	case JN_COND:
		ret = moem_jinja_eval(c, n->b, &x);
		if (!ret && moem_jv_truthy(&x))
			ret = moem_jinja_eval(c, n->a, out);
		else if (!ret && n->c)
			ret = moem_jinja_eval(c, n->c, out);
		else if (!ret)
			*out = jv_undef();
		break;
	case JN_BIN:
		ret = moem_jinja_eval(c, n->a, &a);
		if (!ret)
			ret = moem_jinja_eval(c, n->b, &b);
		if (ret)
			break;
		c->line = n->line;
		if (!strcmp(n->name, "in")) {
			ret = contains(c, &b, &a, &r);
			if (!ret)
				*out = jv_bool(r != n->negate);
		} else if (strchr("=!<>", n->name[0])) {
			ret = compare(c, n->name, &a, &b, &r);
			if (!ret)
				*out = jv_bool(r);
		} else {
			ret = arith(c, n->name, &a, &b, out);
		}
		break;
	case JN_LIST:
	case JN_TUPLE:
	case JN_DICT:
		ret = eval_seq(c, n, out);
		break;
	default:
		ret = moem_jinja_err(c, EINVAL, "not an expression");
	}
	c->depth--;
	return ret;
}

/* Unpack v into the loop or set targets. */
static int assign(struct jctx *c, const char *const *names, size_t nn, const struct jv *v)
{
	if (nn == 1)
		return set_var(c, names[0], strlen(names[0]), *v);
	if (v->t != JT_LIST || v->l->n != nn)
		return moem_jinja_err(c, EINVAL, "cannot unpack %s into %zu names",
				      moem_jv_type_name(v), nn);
	for (size_t i = 0; i < nn; i++) {
		int ret = set_var(c, names[i], strlen(names[i]), v->l->v[i]);

		if (ret)
			return ret;
	}
	return 0;
}

static int iterable(struct jctx *c, const struct jv *v, struct jlist **out)
{
	if (v->t == JT_LIST) {
		*out = v->l;
		return 0;
	}
	if (v->t == JT_DICT) {
		struct jlist *l = moem_jv_list_new(c->a, v->d->n);

		if (!l)
			return -ENOMEM;
		for (size_t i = 0; i < v->d->n; i++)
			l->v[i] = moem_jv_dict_key(v->d, i);
		*out = l;
		return 0;
	}
	if (v->t == JT_STR) {
		size_t n = cp_count(v->s.p, v->s.n), o = 0;
		struct jlist *l = moem_jv_list_new(c->a, n);

		if (!l)
			return -ENOMEM;
		for (size_t i = 0; i < n; i++) {
			size_t k = tok_utf8_len((unsigned char)v->s.p[o]);

			l->v[i] = jv_str(v->s.p + o, k);
			o += k;
		}
		*out = l;
		return 0;
	}
	if (v->t == JT_UNDEF) {
		*out = moem_jv_list_new(c->a, 0);
		return *out ? 0 : -ENOMEM;
	}
	return moem_jinja_err(c, EINVAL, "%s is not iterable", moem_jv_type_name(v));
}

static int run_for(struct jctx *c, const struct jnode *n)
{
	struct jscope scope = {.up = c->scope};
	struct jlist *all = NULL, *l;
	struct jv it;
	size_t k = 0;
	int ret;

	ret = moem_jinja_eval(c, n->b, &it);
	if (!ret)
		ret = iterable(c, &it, &all);
	if (ret)
		return ret;
	scope.vars = moem_jv_dict_new(c->a);
	if (!scope.vars)
		return -ENOMEM;
	/* The loop's scope lives until the loop ends; it is unlinked below. */
	c->scope = &scope; /* cppcheck-suppress autoVariables */
	l = all;
	if (n->c) {
		/* The loop filter runs before loop.index and friends are counted. */
		l = moem_jv_list_new(c->a, all->n);
		ret = l ? 0 : -ENOMEM;
		for (size_t i = 0; !ret && i < all->n; i++) {
			struct jv keep;

			ret = assign(c, n->names, n->nnames, &all->v[i]);
			if (!ret)
				ret = moem_jinja_eval(c, n->c, &keep);
			if (!ret && moem_jv_truthy(&keep))
				l->v[k++] = all->v[i];
		}
		if (l)
			l->n = k;
	}
	for (size_t i = 0; !ret && i < l->n; i++) {
		struct jdict *loop = moem_jv_dict_new(c->a);
		int64_t len = (int64_t)l->n;

		if (++c->steps > JINJA_MAX_STEPS) {
			ret = moem_jinja_err(c, E2BIG, "template runs too long");
			break;
		}
		ret = loop ? 0 : -ENOMEM;
		if (!ret)
			ret = moem_jv_dict_set(c->a, loop, "index", 5, jv_int((int64_t)i + 1));
		if (!ret)
			ret = moem_jv_dict_set(c->a, loop, "index0", 6, jv_int((int64_t)i));
		if (!ret)
			ret = moem_jv_dict_set(c->a, loop, "revindex", 8, jv_int(len - (int64_t)i));
		if (!ret)
			ret = moem_jv_dict_set(c->a, loop, "revindex0", 9,
					       jv_int(len - (int64_t)i - 1));
		if (!ret)
			ret = moem_jv_dict_set(c->a, loop, "first", 5, jv_bool(i == 0));
		if (!ret)
			ret = moem_jv_dict_set(c->a, loop, "last", 4, jv_bool(i + 1 == l->n));
		if (!ret)
			ret = moem_jv_dict_set(c->a, loop, "length", 6, jv_int(len));
		if (!ret)
			ret = moem_jv_dict_set(c->a, loop, "previtem", 8,
					       i ? l->v[i - 1] : jv_undef());
		if (!ret)
			ret = moem_jv_dict_set(c->a, loop, "nextitem", 8,
					       i + 1 < l->n ? l->v[i + 1] : jv_undef());
		if (!ret)
			ret = set_var(c, "loop", 4, (struct jv){.t = JT_DICT, .d = loop});
		if (!ret)
			ret = assign(c, n->names, n->nnames, &l->v[i]);
		if (!ret)
			ret = moem_jinja_run(c, n->body, n->nbody);
		if (ret == J_CONTINUE)
			ret = 0;
	}
	if (ret == J_BREAK)
		ret = 0;
	if (!ret && !l->n)
		ret = moem_jinja_run(c, n->orelse, n->norelse);
	c->scope = scope.up;
	return ret;
}

static int out_full(struct jctx *c, int ret);

/* Render body into a string (a set block's value, a filter block's input). */
static int render_str(struct jctx *c, struct jnode *const *body, size_t nbody, struct jv *out)
{
	struct jbuf *saved = c->out, tmp = {.limit = saved->limit};
	char *p;
	int ret;

	c->out = &tmp;
	ret = moem_jinja_run(c, body, nbody);
	c->out = saved;
	/* ret > 0: break/continue inside, the enclosing loop's (the text goes) */
	p = ret ? NULL : moem_ja_strndup(c->a, tmp.p ? tmp.p : "", tmp.n);
	if (!ret && !p)
		ret = -ENOMEM;
	if (!ret)
		*out = jv_str(p, tmp.n);
	free(tmp.p);
	return ret;
}

/* {% filter %}: the body into a string, bound for the filters' expression. */
static int run_filter_block(struct jctx *c, const struct jnode *n)
{
	struct jscope scope = {.up = c->scope};
	struct jv v;
	int ret;

	/* a scope of its own, as a loop's: set inside does not leak */
	scope.vars = moem_jv_dict_new(c->a);
	if (!scope.vars)
		return -ENOMEM;
	c->scope = &scope; /* cppcheck-suppress autoVariables */
	ret = render_str(c, n->body, n->nbody, &v);
	c->scope = scope.up;
	if (!ret)
		ret = set_var(c, JINJA_FILTER_BODY, strlen(JINJA_FILTER_BODY), v);
	if (!ret)
		ret = moem_jinja_eval(c, n->a, &v);
	if (!ret && v.gen)
		ret = moem_jinja_err(c, EINVAL, "printing a generator (add |list)");
	if (!ret)
		ret = out_full(c, moem_jv_print(c->out, &v));
	return ret;
}

static int run_set(struct jctx *c, const struct jnode *n)
{
	struct jv v;
	int ret;

	if (n->k == JN_SET_BLOCK) {
		ret = render_str(c, n->body, n->nbody, &v);
		return ret ? ret : set_var(c, n->names[0], strlen(n->names[0]), v);
	}
	ret = moem_jinja_eval(c, n->a, &v);
	if (ret)
		return ret;
	if (n->name) {
		struct jv *ns = moem_jinja_lookup(c, n->names[0], strlen(n->names[0]));

		if (!ns || ns->t != JT_DICT)
			return moem_jinja_err(c, EINVAL,
					      "cannot set an attribute of '%s' (not a namespace)",
					      n->names[0]);
		return moem_jv_dict_set(c->a, ns->d, n->name, n->name_len, v);
	}
	return assign(c, n->names, n->nnames, &v);
}

/*
 * A write to the output that hit its limit comes back as a bare -E2BIG;
 * give it its message here, where the write is, not for every -E2BIG a
 * statement returns (that replaced range()'s "too long" and the like).
 */
static int out_full(struct jctx *c, int ret)
{
	return ret == -E2BIG ? moem_jinja_err(c, E2BIG, "template output too large") : ret;
}

int moem_jinja_run(struct jctx *c, struct jnode *const *body, size_t nbody)
{
	for (size_t i = 0; i < nbody; i++) {
		const struct jnode *n = body[i];
		struct jv v;
		int ret = 0;

		c->line = n->line;
		switch (n->k) {
		case JN_TEXT:
			ret = out_full(c, moem_jb_put(c->out, n->name, n->name_len));
			break;
		case JN_OUTPUT:
			ret = moem_jinja_eval(c, n->a, &v);
			if (!ret && v.gen)
				ret = moem_jinja_err(c, EINVAL, "printing a generator (add |list)");
			if (!ret)
				ret = out_full(c, moem_jv_print(c->out, &v));
			break;
		case JN_IF:
			ret = moem_jinja_eval(c, n->a, &v);
			if (!ret)
				ret = moem_jv_truthy(&v) ? moem_jinja_run(c, n->body, n->nbody)
							 : moem_jinja_run(c, n->orelse, n->norelse);
			break;
		case JN_FOR:
			ret = run_for(c, n);
			break;
		case JN_SET:
		case JN_SET_BLOCK:
			ret = run_set(c, n);
			break;
		case JN_MACRO:
			v = (struct jv){.t = JT_FN};
			v.fn.id = JF_MACRO;
			v.fn.macro = n;
			ret = set_var(c, n->name, n->name_len, v);
			break;
		case JN_FILTER_BLOCK:
			ret = run_filter_block(c, n);
			break;
		case JN_BLOCK:
			ret = moem_jinja_run(c, n->body, n->nbody);
			if (ret > 0) /* break/continue inside: the enclosing loop's */
				return ret;
			break;
		case JN_BREAK:
			return J_BREAK;
		case JN_CONTINUE:
			return J_CONTINUE;
		default:
			ret = moem_jinja_err(c, EINVAL, "not a statement");
		}
		if (ret)
			return ret;
	}
	return 0;
}
