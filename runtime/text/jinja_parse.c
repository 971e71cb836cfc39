// SPDX-License-Identifier: GPL-2.0-only
/*
 * Jinja parser: statements (if/elif/else, for with else and a filter,
 * set, set blocks, macro, break, continue) and expressions with jinja2's
 * precedence: conditional, or, and, not, comparisons and in, + -, ~,
 * * / // %, **, unary minus, then filters (|) and tests (is), then
 * attribute, item, slice and call postfixes. Unknown statements, filters
 * and tests are refused here, by name.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>

#include "jinja_int.h"

#define JINJA_MAX_NEST 64

/*
 * Filters and tests the renderer does not have: Jinja2 refuses one when
 * it compiles the template, unless it sits in an if statement (test and
 * branches) or a conditional expression, where the error waits for it to
 * run (a template may name a filter it never reaches). soft says where
 * the parser is; each unknown name is kept with it, and one outside them
 * all refuses the template when the parse ends.
 */
#define JINJA_MAX_UNKNOWN 64

struct parser {
	struct jarena *a;
	const struct jtok *t;
	size_t n, i;
	int nest;
	bool soft;
	uint32_t n_unknown;
	struct {
		size_t tok; /* index in t */
		bool test, soft;
	} unknown[JINJA_MAX_UNKNOWN];
};

static const struct jtok *peek(const struct parser *P)
{
	return &P->t[P->i < P->n ? P->i : P->n - 1];
}

/* fmt holds one "%.*s" for arg (callers pass only literals). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static int perr(const struct parser *P, const char *fmt, const char *arg, size_t n)
{
	char what[128];

	snprintf(what, sizeof(what), fmt, (int)moem_min(n, (size_t)40), arg ? arg : "");
	return moem_errf(EINVAL, "template line %d: %s", peek(P)->line, what);
}
#pragma GCC diagnostic pop

static bool is_op(const struct jtok *t, const char *op)
{
	return t->k == JK_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n);
}

static bool is_name(const struct jtok *t, const char *nm)
{
	return t->k == JK_NAME && t->n == strlen(nm) && !memcmp(t->p, nm, t->n);
}

static bool accept_op(struct parser *P, const char *op)
{
	if (!is_op(peek(P), op))
		return false;
	P->i++;
	return true;
}

static bool accept_name(struct parser *P, const char *nm)
{
	if (!is_name(peek(P), nm))
		return false;
	P->i++;
	return true;
}

static int expect_op(struct parser *P, const char *op)
{
	if (accept_op(P, op))
		return 0;
	return perr(P, "expected '%.*s'", op, strlen(op));
}

static struct jnode *node(struct parser *P, enum jnode_kind k)
{
	struct jnode *n = moem_ja_alloc(P->a, sizeof(*n));

	if (n) {
		memset(n, 0, sizeof(*n));
		n->k = k;
		n->line = peek(P)->line;
	}
	return n;
}

/* A growable array of node pointers in the arena (copied on growth). */
static int add_node(struct parser *P, struct jnode ***v, size_t *n, struct jnode *x)
{
	if (!(*n & (*n - 1)) || !*n) {
		size_t cap = *n ? *n * 2 : 4;
		struct jnode **nv = moem_ja_alloc(P->a, cap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		if (*n)
			memcpy(nv, *v, *n * sizeof(*nv));
		*v = nv;
	}
	(*v)[(*n)++] = x;
	return 0;
}

static int add_name(struct parser *P, const char ***v, size_t *n, const char *s, size_t len)
{
	const char **nv = moem_ja_alloc(P->a, (*n + 1) * sizeof(*nv));
	char *c = moem_ja_strndup(P->a, s, len);

	if (!nv || !c)
		return -ENOMEM;
	if (*n)
		memcpy(nv, *v, *n * sizeof(*nv));
	nv[(*n)++] = c;
	*v = nv;
	return 0;
}

static int expr(struct parser *P, struct jnode **out);
static int cond_expr(struct parser *P, struct jnode **out, bool with_cond);

/* Call arguments after "(": positional and keyword, to ")". */
static int call_args(struct parser *P, struct jnode *n)
{
	int ret;

	while (!accept_op(P, ")")) {
		struct jnode *x;
		const char *kw = NULL;
		const char **nkw;

		if (n->nargs && (ret = expect_op(P, ",")))
			return ret;
		if (accept_op(P, ")"))
			break;
		if (peek(P)->k == JK_NAME && is_op(&P->t[P->i + 1], "=")) {
			kw = moem_ja_strndup(P->a, peek(P)->p, peek(P)->n);
			if (!kw)
				return -ENOMEM;
			P->i += 2;
		}
		ret = expr(P, &x);
		if (ret)
			return ret;
		nkw = moem_ja_alloc(P->a, (n->nargs + 1) * sizeof(*nkw));
		if (!nkw)
			return -ENOMEM;
		if (n->nargs)
			memcpy(nkw, n->kw, n->nargs * sizeof(*nkw));
		nkw[n->nargs] = kw;
		n->kw = nkw;
		{
			size_t na = n->nargs;

			ret = add_node(P, &n->args, &na, x);
			n->nargs = na;
		}
		if (ret)
			return ret;
		if (peek(P)->k == JK_END)
			return perr(P, "unclosed '('%.*s", NULL, 0);
	}
	return 0;
}

static int primary(struct parser *P, struct jnode **out)
{
	const struct jtok *t = peek(P);
	struct jnode *n;
	int ret;

	if (t->k == JK_STRING || t->k == JK_INT || t->k == JK_FLOAT) {
		n = node(P, JN_LIT);
		if (!n)
			return -ENOMEM;
		if (t->k == JK_STRING) {
			n->lit = jv_str(t->p, t->n);
			P->i++;
			/* Adjacent string literals concatenate, as in Python. */
			while (peek(P)->k == JK_STRING) {
				const struct jtok *u = peek(P);
				char *s = moem_ja_alloc(P->a, n->lit.s.n + u->n + 1);

				if (!s)
					return -ENOMEM;
				memcpy(s, n->lit.s.p, n->lit.s.n);
				memcpy(s + n->lit.s.n, u->p, u->n);
				n->lit.s.p = s;
				n->lit.s.n += u->n;
				P->i++;
			}
		} else if (t->k == JK_INT) {
			n->lit = jv_int(t->i);
			P->i++;
		} else {
			n->lit = (struct jv){.t = JT_FLOAT, .f = t->f};
			P->i++;
		}
		*out = n;
		return 0;
	}
	if (t->k == JK_NAME) {
		n = node(P, JN_LIT);
		if (!n)
			return -ENOMEM;
		P->i++;
		if (is_name(t, "true") || is_name(t, "True")) {
			n->lit = jv_bool(true);
		} else if (is_name(t, "false") || is_name(t, "False")) {
			n->lit = jv_bool(false);
		} else if (is_name(t, "none") || is_name(t, "None")) {
			n->lit = jv_none();
		} else {
			n->k = JN_NAME;
			n->name = t->p;
			n->name_len = t->n;
		}
		*out = n;
		return 0;
	}
	if (accept_op(P, "(")) {
		struct jnode *x;

		if (accept_op(P, ")")) {
			n = node(P, JN_TUPLE);
			*out = n;
			return n ? 0 : -ENOMEM;
		}
		ret = expr(P, &x);
		if (ret)
			return ret;
		if (accept_op(P, ")")) {
			*out = x;
			return 0;
		}
		n = node(P, JN_TUPLE);
		if (!n)
			return -ENOMEM;
		ret = add_node(P, &n->args, &n->nargs, x);
		while (!ret && accept_op(P, ",")) {
			if (is_op(peek(P), ")"))
				break;
			ret = expr(P, &x);
			if (!ret)
				ret = add_node(P, &n->args, &n->nargs, x);
		}
		if (!ret)
			ret = expect_op(P, ")");
		*out = n;
		return ret;
	}
	if (accept_op(P, "[") || accept_op(P, "{")) {
		bool dict = is_op(&P->t[P->i - 1], "{");

		n = node(P, dict ? JN_DICT : JN_LIST);
		if (!n)
			return -ENOMEM;
		while (!accept_op(P, dict ? "}" : "]")) {
			struct jnode *x;

			if (n->nargs && (ret = expect_op(P, ",")))
				return ret;
			if (accept_op(P, dict ? "}" : "]"))
				break;
			ret = expr(P, &x);
			if (!ret)
				ret = add_node(P, &n->args, &n->nargs, x);
			if (!ret && dict) {
				ret = expect_op(P, ":");
				if (!ret)
					ret = expr(P, &x);
				if (!ret)
					ret = add_node(P, &n->args, &n->nargs, x);
			}
			if (ret)
				return ret;
			if (peek(P)->k == JK_END)
				return perr(P, "unclosed literal%.*s", NULL, 0);
		}
		*out = n;
		return 0;
	}
	if (t->k == JK_OP)
		return perr(P, "unexpected '%.*s'", t->p, t->n);
	return perr(P, "expected an expression%.*s", NULL, 0);
}

static int postfix(struct parser *P, struct jnode **io)
{
	int ret;

	for (;;) {
		struct jnode *n;

		if (accept_op(P, ".")) {
			const struct jtok *t = peek(P);

			if (t->k != JK_NAME && t->k != JK_INT)
				return perr(P, "expected a name after '.'%.*s", NULL, 0);
			n = node(P, JN_ATTR);
			if (!n)
				return -ENOMEM;
			n->a = *io;
			if (t->k == JK_INT) {
				/* x.0 is x[0] in jinja2. */
				n->k = JN_ITEM;
				n->b = node(P, JN_LIT);
				if (!n->b)
					return -ENOMEM;
				n->b->lit = jv_int(t->i);
			} else {
				n->name = t->p;
				n->name_len = t->n;
			}
			P->i++;
			*io = n;
		} else if (accept_op(P, "[")) {
			struct jnode *parts[3] = {NULL, NULL, NULL};
			int np = 0;
			bool slice = false;

			for (;;) {
				if (is_op(peek(P), ":")) {
					P->i++;
					slice = true;
					if (++np > 2)
						return perr(P, "too many ':' in a slice%.*s", NULL,
							    0);
					continue;
				}
				if (accept_op(P, "]"))
					break;
				if (parts[np])
					return perr(P, "expected ']'%.*s", NULL, 0);
				ret = expr(P, &parts[np]);
				if (ret)
					return ret;
			}
			n = node(P, slice ? JN_SLICE : JN_ITEM);
			if (!n)
				return -ENOMEM;
			if (!slice && !parts[0])
				return perr(P, "empty subscript%.*s", NULL, 0);
			n->a = *io;
			if (slice) {
				n->b = parts[0];
				n->c = parts[1];
				n->args = moem_ja_alloc(P->a, sizeof(*n->args));
				if (!n->args)
					return -ENOMEM;
				n->args[0] = parts[2];
			} else {
				n->b = parts[0];
			}
			*io = n;
		} else if (accept_op(P, "(")) {
			n = node(P, JN_CALL);
			if (!n)
				return -ENOMEM;
			n->a = *io;
			ret = call_args(P, n);
			if (ret)
				return ret;
			*io = n;
		} else {
			return 0;
		}
	}
}

/*
 * Filters and tests over *out; with bare, the first is a filter named
 * without its '|' ({% filter upper | trim %}) and no test may follow.
 */
static int filters_after(struct parser *P, struct jnode **out, bool bare)
{
	int ret = 0;

	for (bool first = true; !ret; first = false) {
		struct jnode *n;
		const struct jtok *t;
		bool test = false;

		if ((bare && first) || accept_op(P, "|")) {
			test = false;
		} else if (!bare && accept_name(P, "is")) {
			test = true;
		} else {
			break;
		}
		n = node(P, test ? JN_TEST : JN_FILTER);
		if (!n)
			return -ENOMEM;
		if (test && accept_name(P, "not"))
			n->negate = true;
		t = peek(P);
		if (t->k != JK_NAME)
			return perr(
				P, test ? "expected a test name%.*s" : "expected a filter name%.*s",
				NULL, 0);
		n->name = t->p;
		n->name_len = t->n;
		if (test && (is_name(t, "none") || is_name(t, "true") || is_name(t, "false"))) {
			/* "is none", "is true": the test of that name. */
		}
		if (test ? !moem_jinja_test_known(t->p, t->n)
			 : !moem_jinja_filter_known(t->p, t->n)) {
			if (P->n_unknown == JINJA_MAX_UNKNOWN)
				return perr(P,
					    test ? "test '%.*s' is not supported"
						 : "filter '%.*s' is not supported",
					    t->p, t->n);
			P->unknown[P->n_unknown].tok = P->i;
			P->unknown[P->n_unknown].test = test;
			P->unknown[P->n_unknown++].soft = P->soft;
		}
		P->i++;
		n->a = *out;
		if (accept_op(P, "(")) {
			ret = call_args(P, n);
		} else if (test &&
			   (peek(P)->k == JK_STRING || peek(P)->k == JK_INT ||
			    peek(P)->k == JK_NAME) &&
			   !is_name(peek(P), "and") && !is_name(peek(P), "or") &&
			   !is_name(peek(P), "else") && !is_name(peek(P), "if") &&
			   !is_name(peek(P), "is") && !is_name(peek(P), "in") &&
			   !is_name(peek(P), "not")) {
			/* "is sameas x", "is divisibleby 3": one bare argument. */
			struct jnode *x;

			ret = primary(P, &x);
			if (!ret)
				ret = add_node(P, &n->args, &n->nargs, x);
		}
		*out = n;
	}
	return ret;
}

/* Filters and tests after a postfix expression. */
static int filtered(struct parser *P, struct jnode **out)
{
	int ret = primary(P, out);

	if (!ret)
		ret = postfix(P, out);
	return ret ? ret : filters_after(P, out, false);
}

static int unary(struct parser *P, struct jnode **out)
{
	if (accept_op(P, "-")) {
		struct jnode *n = node(P, JN_NEG);
		int ret;

		if (!n)
			return -ENOMEM;
		ret = unary(P, &n->a);
		*out = n;
		return ret;
	}
	accept_op(P, "+");
	return filtered(P, out);
}

static int binary(struct parser *P, struct jnode **out, int level);

/* Levels from the loosest: 0 comparison, 1 + -, 2 ~, 3 * / // %, 4 **. */
static const char *const level_ops[5][5] = {
	{"==", "!=", "<", ">", "<="}, {"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"},
};

static const char *match_level(struct parser *P, int level)
{
	for (int k = 0; k < 5 && level_ops[level][k]; k++)
		if (is_op(peek(P), level_ops[level][k]))
			return level_ops[level][k];
	if (level == 0 && is_op(peek(P), ">="))
		return ">=";
	return NULL;
}

static int binary(struct parser *P, struct jnode **out, int level)
{
	int ret = level == 4 ? unary(P, out) : binary(P, out, level + 1);

	while (!ret) {
		const char *op = match_level(P, level);
		bool not_in = false;
		struct jnode *n;

		if (!op && level == 0) {
			if (is_name(peek(P), "in"))
				op = "in";
			else if (is_name(peek(P), "not") && is_name(&P->t[P->i + 1], "in"))
				op = "in", not_in = true;
		}
		if (!op)
			break;
		P->i += not_in ? 2 : 1;
		n = node(P, JN_BIN);
		if (!n)
			return -ENOMEM;
		n->name = op;
		n->name_len = strlen(op);
		n->negate = not_in;
		n->a = *out;
		ret = level == 4 ? unary(P, &n->b) : binary(P, &n->b, level + 1);
		*out = n;
	}
	return ret;
}

static int not_expr(struct parser *P, struct jnode **out)
{
	if (accept_name(P, "not")) {
		struct jnode *n = node(P, JN_NOT);
		int ret;

		if (!n)
			return -ENOMEM;
		ret = not_expr(P, &n->a);
		*out = n;
		return ret;
	}
	return binary(P, out, 0);
}

static int and_or(struct parser *P, struct jnode **out, bool is_or)
{
	int ret = is_or ? and_or(P, out, false) : not_expr(P, out);

	while (!ret && accept_name(P, is_or ? "or" : "and")) {
		struct jnode *n = node(P, is_or ? JN_OR : JN_AND);

		if (!n)
			return -ENOMEM;
		n->a = *out;
		ret = is_or ? and_or(P, &n->b, false) : not_expr(P, &n->b);
		*out = n;
	}
	return ret;
}

static int cond_expr(struct parser *P, struct jnode **out, bool with_cond)
{
	int ret;

	uint32_t u0 = P->n_unknown;
	bool soft = P->soft;

	if (++P->nest > JINJA_MAX_NEST)
		return perr(P, "expression nested too deeply%.*s", NULL, 0);
	ret = and_or(P, out, true);
	while (!ret && with_cond && accept_name(P, "if")) {
		struct jnode *n = node(P, JN_COND);

		if (!n)
			return -ENOMEM;
		/* a conditional expression: all of it, its first part too */
		for (uint32_t k = u0; k < P->n_unknown; k++)
			P->unknown[k].soft = true;
		P->soft = true;
		n->a = *out;
		ret = and_or(P, &n->b, true);
		if (!ret && accept_name(P, "else"))
			ret = cond_expr(P, &n->c, true);
		*out = n;
	}
	P->soft = soft;
	P->nest--;
	return ret;
}

static int expr(struct parser *P, struct jnode **out)
{
	return cond_expr(P, out, true);
}

static int expect_close(struct parser *P)
{
	if (peek(P)->k == JK_CLOSE_STMT) {
		P->i++;
		return 0;
	}
	return perr(P, "expected '%%}'%.*s", NULL, 0);
}

static int body(struct parser *P, struct jnode ***v, size_t *n, const char *const *ends);

static int stmt_if_soft(struct parser *P, struct jnode **out);

static int stmt_if(struct parser *P, struct jnode **out)
{
	static const char *const ends[] = {"elif", "else", "endif", NULL};
	struct jnode *n = node(P, JN_IF);
	int ret;

	if (!n)
		return -ENOMEM;
	*out = n;
	ret = expr(P, &n->a);
	if (!ret)
		ret = expect_close(P);
	if (!ret)
		ret = body(P, &n->body, &n->nbody, ends);
	if (ret)
		return ret;
	/* body() stopped at "{% name": elif, else or endif. */
	if (accept_name(P, "elif")) {
		struct jnode *e;

		ret = stmt_if_soft(P, &e);
		if (!ret)
			ret = add_node(P, &n->orelse, &n->norelse, e);
		return ret;
	}
	if (accept_name(P, "else")) {
		static const char *const endif[] = {"endif", NULL};

		ret = expect_close(P);
		if (!ret)
			ret = body(P, &n->orelse, &n->norelse, endif);
		if (ret)
			return ret;
	}
	if (!accept_name(P, "endif"))
		return perr(P, "expected endif%.*s", NULL, 0);
	return expect_close(P);
}

/* An if statement, its test and branches (soft: the comment at struct parser). */
static int stmt_if_soft(struct parser *P, struct jnode **out)
{
	bool soft = P->soft;
	int ret;

	P->soft = true;
	ret = stmt_if(P, out);
	P->soft = soft;
	return ret;
}

/* A body of its own frame in Jinja2 (a loop's, a macro's, a set block's): not soft. */
static int hard_body(struct parser *P, struct jnode ***v, size_t *n, const char *const *ends)
{
	bool soft = P->soft;
	int ret;

	P->soft = false;
	ret = body(P, v, n, ends);
	P->soft = soft;
	return ret;
}

static int stmt_for(struct parser *P, struct jnode **out)
{
	static const char *const ends[] = {"else", "endfor", NULL};
	struct jnode *n = node(P, JN_FOR);
	int ret;

	if (!n)
		return -ENOMEM;
	*out = n;
	do {
		if (peek(P)->k != JK_NAME)
			return perr(P, "expected a loop variable%.*s", NULL, 0);
		ret = add_name(P, &n->names, &n->nnames, peek(P)->p, peek(P)->n);
		if (ret)
			return ret;
		P->i++;
	} while (accept_op(P, ","));
	if (!accept_name(P, "in"))
		return perr(P, "expected 'in'%.*s", NULL, 0);
	ret = cond_expr(P, &n->b, false);
	if (!ret && accept_name(P, "if")) {
		bool soft = P->soft;

		P->soft = false; /* evaluated in the loop's frame */
		ret = cond_expr(P, &n->c, false);
		P->soft = soft;
	}
	if (!ret && accept_name(P, "recursive"))
		return perr(P, "recursive loops are not supported%.*s", NULL, 0);
	if (!ret)
		ret = expect_close(P);
	if (!ret)
		ret = hard_body(P, &n->body, &n->nbody, ends);
	if (ret)
		return ret;
	if (accept_name(P, "else")) {
		static const char *const endfor[] = {"endfor", NULL};

		ret = expect_close(P);
		if (!ret)
			ret = hard_body(P, &n->orelse, &n->norelse, endfor);
		if (ret)
			return ret;
	}
	if (!accept_name(P, "endfor"))
		return perr(P, "expected endfor%.*s", NULL, 0);
	return expect_close(P);
}

static int stmt_set(struct parser *P, struct jnode **out)
{
	struct jnode *n = node(P, JN_SET);
	int ret;

	if (!n)
		return -ENOMEM;
	*out = n;
	if (peek(P)->k != JK_NAME)
		return perr(P, "expected a name after set%.*s", NULL, 0);
	ret = add_name(P, &n->names, &n->nnames, peek(P)->p, peek(P)->n);
	P->i++;
	if (!ret && accept_op(P, ".")) {
		/* set ns.attr = value */
		if (peek(P)->k != JK_NAME)
			return perr(P, "expected an attribute name%.*s", NULL, 0);
		n->name = moem_ja_strndup(P->a, peek(P)->p, peek(P)->n);
		n->name_len = peek(P)->n;
		if (!n->name)
			return -ENOMEM;
		P->i++;
	}
	while (!ret && !n->name && accept_op(P, ",")) {
		if (peek(P)->k != JK_NAME)
			return perr(P, "expected a name%.*s", NULL, 0);
		ret = add_name(P, &n->names, &n->nnames, peek(P)->p, peek(P)->n);
		P->i++;
	}
	if (ret)
		return ret;
	if (peek(P)->k == JK_CLOSE_STMT && !n->name && n->nnames == 1) {
		static const char *const ends[] = {"endset", NULL};

		/* {% set x %}...{% endset %} */
		n->k = JN_SET_BLOCK;
		P->i++;
		ret = hard_body(P, &n->body, &n->nbody, ends);
		if (!ret && !accept_name(P, "endset"))
			return perr(P, "expected endset%.*s", NULL, 0);
		return ret ? ret : expect_close(P);
	}
	ret = expect_op(P, "=");
	if (!ret)
		ret = expr(P, &n->a);
	if (!ret && n->nnames > 1 && accept_op(P, ",")) {
		/* set a, b = x, y */
		struct jnode *t = node(P, JN_TUPLE), *x;

		if (!t)
			return -ENOMEM;
		ret = add_node(P, &t->args, &t->nargs, n->a);
		do {
			if (!ret)
				ret = expr(P, &x);
			if (!ret)
				ret = add_node(P, &t->args, &t->nargs, x);
		} while (!ret && accept_op(P, ","));
		n->a = t;
	}
	return ret ? ret : expect_close(P);
}

static int stmt_macro(struct parser *P, struct jnode **out)
{
	static const char *const ends[] = {"endmacro", NULL};
	struct jnode *n = node(P, JN_MACRO);
	int ret = 0;

	if (!n)
		return -ENOMEM;
	*out = n;
	if (peek(P)->k != JK_NAME)
		return perr(P, "expected a macro name%.*s", NULL, 0);
	n->name = peek(P)->p;
	n->name_len = peek(P)->n;
	P->i++;
	ret = expect_op(P, "(");
	while (!ret && !accept_op(P, ")")) {
		if (n->nnames && (ret = expect_op(P, ",")))
			break;
		if (peek(P)->k != JK_NAME)
			return perr(P, "expected a parameter name%.*s", NULL, 0);
		ret = add_name(P, &n->names, &n->nnames, peek(P)->p, peek(P)->n);
		P->i++;
		{
			struct jnode *d = NULL;

			if (!ret && accept_op(P, "="))
				ret = expr(P, &d);
			if (!ret)
				ret = add_node(P, &n->args, &n->nargs, d);
		}
	}
	if (!ret)
		ret = expect_close(P);
	if (!ret)
		ret = hard_body(P, &n->body, &n->nbody, ends);
	if (!ret && !accept_name(P, "endmacro"))
		return perr(P, "expected endmacro%.*s", NULL, 0);
	return ret ? ret : expect_close(P);
}

/*
 * {% filter f(args) | g %}...{% endfilter %}: the body rendered, then the
 * filters over it (an expression on JINJA_FILTER_BODY, bound when it runs).
 * Body and filters are in a frame of their own in Jinja2: not soft.
 */
static int stmt_filter(struct parser *P, struct jnode **out)
{
	static const char *const ends[] = {"endfilter", NULL};
	struct jnode *n = node(P, JN_FILTER_BLOCK), *b = node(P, JN_NAME);
	bool soft = P->soft;
	int ret;

	if (!n || !b)
		return -ENOMEM;
	*out = n;
	b->name = JINJA_FILTER_BODY;
	b->name_len = strlen(JINJA_FILTER_BODY);
	n->a = b;
	if (peek(P)->k != JK_NAME)
		return perr(P, "expected a filter name%.*s", NULL, 0);
	P->soft = false;
	ret = filters_after(P, &n->a, true);
	P->soft = soft;
	if (!ret)
		ret = expect_close(P);
	if (!ret)
		ret = hard_body(P, &n->body, &n->nbody, ends);
	if (!ret && !accept_name(P, "endfilter"))
		return perr(P, "expected endfilter%.*s", NULL, 0);
	return ret ? ret : expect_close(P);
}

/*
 * {% generation %}...{% endgeneration %}: transformers' AssistantTracker
 * marks the assistant's part with it; rendering keeps the body as is.
 */
static int stmt_generation(struct parser *P, struct jnode **out)
{
	static const char *const ends[] = {"endgeneration", NULL};
	struct jnode *n = node(P, JN_BLOCK);
	int ret;

	if (!n)
		return -ENOMEM;
	*out = n;
	ret = expect_close(P);
	if (!ret)
		ret = body(P, &n->body, &n->nbody, ends);
	if (!ret && !accept_name(P, "endgeneration"))
		return perr(P, "expected endgeneration%.*s", NULL, 0);
	return ret ? ret : expect_close(P);
}

static int statement(struct parser *P, struct jnode **out)
{
	const struct jtok *t = peek(P);

	if (t->k != JK_NAME)
		return perr(P, "expected a statement name%.*s", NULL, 0);
	P->i++;
	if (is_name(t, "if"))
		return stmt_if_soft(P, out);
	if (is_name(t, "for"))
		return stmt_for(P, out);
	if (is_name(t, "set"))
		return stmt_set(P, out);
	if (is_name(t, "macro"))
		return stmt_macro(P, out);
	if (is_name(t, "generation"))
		return stmt_generation(P, out);
	if (is_name(t, "filter"))
		return stmt_filter(P, out);
	if (is_name(t, "break") || is_name(t, "continue")) {
		*out = node(P, is_name(t, "break") ? JN_BREAK : JN_CONTINUE);
		return *out ? expect_close(P) : -ENOMEM;
	}
	return perr(P, "statement '%.*s' is not supported", t->p, t->n);
}

/*
 * Parse nodes until "{% end" where end is in ends (left unconsumed after the
 * "{%"), or to the end of input when ends is NULL.
 */
static int body(struct parser *P, struct jnode ***v, size_t *n, const char *const *ends)
{
	int ret = 0;

	if (++P->nest > JINJA_MAX_NEST)
		return perr(P, "blocks nested too deeply%.*s", NULL, 0);
	while (!ret) {
		const struct jtok *t = peek(P);
		struct jnode *x = NULL;

		if (t->k == JK_END) {
			if (ends)
				return perr(P, "unexpected end of template, expected '%.*s'",
					    ends[0], strlen(ends[0]));
			break;
		}
		if (t->k == JK_TEXT) {
			P->i++;
			if (!t->n)
				continue;
			x = node(P, JN_TEXT);
			if (!x)
				return -ENOMEM;
			x->name = t->p;
			x->name_len = t->n;
		} else if (t->k == JK_OPEN_EXPR) {
			P->i++;
			x = node(P, JN_OUTPUT);
			if (!x)
				return -ENOMEM;
			ret = expr(P, &x->a);
			if (!ret && peek(P)->k != JK_CLOSE_EXPR)
				ret = perr(P, "expected '}}'%.*s", NULL, 0);
			P->i++;
		} else if (t->k == JK_OPEN_STMT) {
			const struct jtok *nm = &P->t[P->i + 1];
			bool end = false;

			for (size_t k = 0; ends && ends[k]; k++)
				end = end || is_name(nm, ends[k]);
			if (end) {
				P->i++;
				break;
			}
			if (nm->k == JK_NAME && nm->n >= 3 &&
			    (!memcmp(nm->p, "end", 3) || is_name(nm, "elif") ||
			     is_name(nm, "else")))
				return perr(P, "unexpected '%.*s'", nm->p, nm->n);
			P->i++;
			ret = statement(P, &x);
		} else {
			return perr(P, "unexpected token%.*s", NULL, 0);
		}
		if (!ret && x)
			ret = add_node(P, v, n, x);
	}
	P->nest--;
	return ret;
}

int moem_jinja_parse(struct jarena *a, const struct jlexed *lx, struct jnode ***v, size_t *n)
{
	struct parser P = {.a = a, .t = lx->v, .n = lx->n};
	int ret;

	*v = NULL;
	*n = 0;
	ret = body(&P, v, n, NULL);
	for (uint32_t k = 0; !ret && k < P.n_unknown; k++)
		if (!P.unknown[k].soft) {
			const struct jtok *t = &P.t[P.unknown[k].tok];

			P.i = P.unknown[k].tok;
			ret = perr(&P,
				   P.unknown[k].test ? "test '%.*s' is not supported"
						     : "filter '%.*s' is not supported",
				   t->p, t->n);
		}
	return ret;
}
