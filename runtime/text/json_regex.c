// SPDX-License-Identifier: GPL-2.0-only
/*
 * The JSON Schema keyword pattern for the recognizer (json_fsm.c): a
 * regular expression compiled to a Thompson NFA over code points, walked
 * as a set of states one character at a time.
 *
 * The syntax is the part of ECMA-262's that Python's re (what Python's
 * jsonschema runs) reads the same way: literals, '.', classes with ranges
 * and negation, \d \w \s and their negations, escapes of the special
 * characters, \n \t \r \f \v \xHH \uHHHH, groups (and (?:...)),
 * alternation, * + ? {n} {n,} {n,m} (a trailing ? for laziness changes
 * nothing here), '^' first and '$' last. Where the two engines differ the
 * NFA takes only what both accept: \d \w \s and the negated classes that
 * use them match ASCII characters only (Python's match more), '.' no line
 * terminator of either. A pattern matches anywhere in the string unless
 * anchored (JSON Schema's rule), so an unanchored end takes any text.
 * Anything else (backreferences, lookaround, \b, \p{...}, named groups,
 * '^' or '$' elsewhere, more than RE_NEST groups in one another) is
 * refused with its offset.
 *
 * Why not PCRE2, which the tokenizer uses: constrained decoding asks,
 * before every token, which bytes can come next from the string so far;
 * an NFA's state set answers that in one step per character, where a
 * partial match would run over the whole string again each time.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>

#include "json_schema_int.h"
#include "tok_int.h"

#define CP_MAX	0x10ffff
#define REP_MAX 100  /* {n,m}: m at most */
#define RE_NEST 32   /* groups open at once */
#define RE_LEN	4096 /* bytes of a pattern */

/* ---- parse tree ---- */

enum { R_SET, R_CAT, R_ALT, R_REP };

struct rnode {
	int type;
	int a, b;	/* R_CAT, R_ALT: children; R_REP: child a */
	int min, max;	/* R_REP: max -1 for no bound */
	uint32_t r, nr; /* R_SET: ranges in the parser's list */
};

struct rparse {
	const char *p, *start;
	struct rnode *n;
	int nn, cap;
	uint32_t (*rg)[2];
	uint32_t nrg, caprg;
	int depth;    /* groups open */
	bool top_alt; /* a '|' outside every group */
	char err[160];
};

static int rerr(struct rparse *ps, const char *what)
{
	snprintf(ps->err, sizeof(ps->err), "%s at offset %d", what, (int)(ps->p - ps->start));
	return -EINVAL;
}

static int rnew(struct rparse *ps, int type)
{
	if (ps->nn == ps->cap) {
		int nc = ps->cap ? ps->cap * 2 : 32;
		struct rnode *n = realloc(ps->n, (size_t)nc * sizeof(*n));

		if (!n)
			return -ENOMEM;
		ps->n = n;
		ps->cap = nc;
	}
	memset(&ps->n[ps->nn], 0, sizeof(ps->n[0]));
	ps->n[ps->nn].type = type;
	return ps->nn++;
}

static int radd(struct rparse *ps, uint32_t lo, uint32_t hi)
{
	if (ps->nrg == ps->caprg) {
		uint32_t nc = ps->caprg ? ps->caprg * 2 : 64;
		uint32_t(*r)[2] = realloc(ps->rg, (size_t)nc * sizeof(*r));

		if (!r)
			return -ENOMEM;
		ps->rg = r;
		ps->caprg = nc;
	}
	ps->rg[ps->nrg][0] = lo;
	ps->rg[ps->nrg][1] = hi;
	ps->nrg++;
	return 0;
}

static int cmp_range(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

/*
 * Ranges from..nrg as a set: sorted, merged, without surrogates (no JSON
 * string holds one), complemented if neg (within ASCII if ascii).
 */
static int rset_finish(struct rparse *ps, uint32_t from, bool neg, bool ascii)
{
	uint32_t n = ps->nrg - from, w = from, next = 0, top = ascii ? 0x7f : CP_MAX;
	uint32_t(*r)[2] = ps->rg + from;
	int ret;

	qsort(r, n, sizeof(*r), cmp_range);
	for (uint32_t i = 0; i < n; i++) {
		if (w > from && ps->rg[w - 1][1] + 1 >= r[i][0]) {
			if (r[i][1] > ps->rg[w - 1][1])
				ps->rg[w - 1][1] = r[i][1];
		} else {
			ps->rg[w][0] = r[i][0];
			ps->rg[w][1] = r[i][1];
			w++;
		}
	}
	ps->nrg = w;
	if (neg) {
		uint32_t end = ps->nrg;

		for (uint32_t i = from; i < end && next <= top; i++) {
			if (ps->rg[i][0] > next) {
				ret = radd(ps, next,
					   ps->rg[i][0] - 1 < top ? ps->rg[i][0] - 1 : top);
				if (ret)
					return ret;
			}
			next = ps->rg[i][1] + 1;
		}
		if (next <= top) {
			ret = radd(ps, next, top);
			if (ret)
				return ret;
		}
		memmove(ps->rg + from, ps->rg + end, (ps->nrg - end) * sizeof(*ps->rg));
		ps->nrg -= end - from;
	}
	/* cut out the surrogates */
	for (uint32_t i = from; i < ps->nrg; i++) {
		uint32_t lo = ps->rg[i][0], hi = ps->rg[i][1];

		if (hi < 0xd800 || lo > 0xdfff)
			continue;
		if (lo < 0xd800 && hi > 0xdfff) {
			ps->rg[i][1] = 0xd7ff;
			ret = radd(ps, 0xe000, hi);
			if (ret)
				return ret;
		} else if (lo < 0xd800) {
			ps->rg[i][1] = 0xd7ff;
		} else if (hi > 0xdfff) {
			ps->rg[i][0] = 0xe000;
		} else {
			ps->rg[i][0] = 1;
			ps->rg[i][1] = 0; /* empty: dropped below */
		}
	}
	w = from;
	for (uint32_t i = from; i < ps->nrg; i++)
		if (ps->rg[i][0] <= ps->rg[i][1]) {
			ps->rg[w][0] = ps->rg[i][0];
			ps->rg[w][1] = ps->rg[i][1];
			w++;
		}
	ps->nrg = w;
	return w > from ? 0 : rerr(ps, "a class that matches no character");
}

/* One character of the pattern (valid UTF-8: checked before parsing). */
static uint32_t utf8_next(const char **p)
{
	size_t n;
	uint32_t c = moem_tok_utf8_get(*p, &n);

	*p += n;
	return c;
}

static int hexn(struct rparse *ps, int n, uint32_t *out)
{
	uint32_t v = 0;

	for (int i = 0; i < n; i++) {
		char c = ps->p[i];
		int d = c >= '0' && c <= '9'   ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;

		if (d < 0)
			return rerr(ps, "a \\x or \\u escape without its hex digits");
		v = v << 4 | (uint32_t)d;
	}
	ps->p += n;
	*out = v;
	return 0;
}

/*
 * After a backslash: a class escape adds its ranges and sets *cls (1:
 * \d \w \s, 2: \D \W \S), another one character into *c.
 */
static int escape(struct rparse *ps, uint32_t *c, int *cls)
{
	char e = *ps->p++;
	int ret = 0;

	*cls = 0;
	switch (e) {
	case 'd':
	case 'D':
		ret = radd(ps, '0', '9');
		*cls = e == 'd' ? 1 : 2;
		return ret;
	case 'w':
	case 'W':
		ret = radd(ps, '0', '9') ?: radd(ps, 'A', 'Z') ?: radd(ps, '_', '_') ?:
		      radd(ps, 'a', 'z');
		*cls = e == 'w' ? 1 : 2;
		return ret;
	case 's':
	case 'S':
		/* \S: ASCII but controls, the space and DEL (Python's \s takes \x1c-\x1f too) */
		ret = e == 's' ? radd(ps, '\t', '\r') ?: radd(ps, ' ', ' ')
			       : radd(ps, 0, ' ') ?: radd(ps, 0x7f, 0x7f);
		*cls = e == 's' ? 1 : 2;
		return ret;
	case 'n':
		*c = '\n';
		return 0;
	case 't':
		*c = '\t';
		return 0;
	case 'r':
		*c = '\r';
		return 0;
	case 'f':
		*c = '\f';
		return 0;
	case 'v':
		*c = '\v';
		return 0;
	case 'x':
		return hexn(ps, 2, c);
	case 'u':
		return hexn(ps, 4, c);
	default:
		/* punctuation and the space stand for themselves (ECMA's identity
		 * escapes, Python's escaped non-alphanumerics) */
		if (e >= ' ' && e < 0x7f && !isalnum((unsigned char)e)) {
			*c = (unsigned char)e;
			return 0;
		}
		ps->p--;
		return rerr(ps, "an escape moem does not follow (\\b, a backreference, \\p, ...)");
	}
}

/* A node of the ranges from..nrg (a set rset_finish() made). */
static int set_node(struct rparse *ps, uint32_t from, int *idx)
{
	int n = rnew(ps, R_SET);

	if (n < 0)
		return n;
	ps->n[n].r = from;
	ps->n[n].nr = ps->nrg - from;
	*idx = n;
	return 0;
}

/* [...] after the '[' */
static int parse_class(struct rparse *ps, int *idx)
{
	uint32_t from = ps->nrg;
	bool neg = *ps->p == '^', ascii = false;
	int ret;

	ps->p += neg;
	if (*ps->p == ']')
		return rerr(ps, "an empty class");
	while (*ps->p && *ps->p != ']') {
		uint32_t lo, hi;
		int cls = 0;

		if (*ps->p == '\\') {
			ps->p++;
			ret = escape(ps, &lo, &cls);
			if (ret)
				return ret;
			if (cls == 2)
				return rerr(ps, "\\D, \\W or \\S inside a class");
			if (cls) {
				ascii = true;
				continue;
			}
		} else if (*ps->p == '[') {
			return rerr(ps, "'[' inside a class (write \\[)");
		} else {
			lo = utf8_next(&ps->p);
		}
		hi = lo;
		if (ps->p[0] == '-' && ps->p[1] && ps->p[1] != ']') {
			ps->p++;
			if (*ps->p == '\\') {
				ps->p++;
				ret = escape(ps, &hi, &cls);
				if (ret)
					return ret;
				if (cls)
					return rerr(ps, "a class escape as the end of a range");
			} else {
				hi = utf8_next(&ps->p);
			}
			if (hi < lo)
				return rerr(ps, "a range out of order");
		}
		ret = radd(ps, lo, hi);
		if (ret)
			return ret;
	}
	if (*ps->p != ']')
		return rerr(ps, "a class without its ']'");
	ps->p++;
	/* a negated class with \d \w \s: ASCII only (Python's classes are Unicode's) */
	return rset_finish(ps, from, neg, neg && ascii) ?: set_node(ps, from, idx);
}

static int parse_alt(struct rparse *ps, int *idx);

static int parse_atom(struct rparse *ps, int *idx)
{
	uint32_t from = ps->nrg, c;
	int cls, ret;

	switch (*ps->p) {
	case '(':
		if (ps->depth == RE_NEST)
			return rerr(ps, "groups nested more than 32 deep");
		ps->p++;
		if (*ps->p == '?') {
			if (ps->p[1] != ':')
				return rerr(ps, "a group other than (?:...) (lookaround, names)");
			ps->p += 2;
		}
		ps->depth++;
		ret = parse_alt(ps, idx);
		ps->depth--;
		if (ret)
			return ret;
		if (*ps->p != ')')
			return rerr(ps, "a group without its ')'");
		ps->p++;
		return 0;
	case '[':
		ps->p++;
		return parse_class(ps, idx);
	case '.':
		/* no line terminator of ECMA's or Python's */
		ps->p++;
		ret = radd(ps, '\n', '\n') ?: radd(ps, '\r', '\r') ?: radd(ps, 0x2028, 0x2029);
		return ret ?: rset_finish(ps, from, true, false) ?: set_node(ps, from, idx);
	case '\\':
		ps->p++;
		ret = escape(ps, &c, &cls);
		if (ret)
			return ret;
		if (!cls)
			ret = radd(ps, c, c);
		return ret ?: rset_finish(ps, from, cls == 2, cls == 2) ?: set_node(ps, from, idx);
	case '^':
	case '$':
		return rerr(ps, "'^' or '$' other than first and last");
	case '*':
	case '+':
	case '?':
	case '{':
		return rerr(ps, "a quantifier with nothing before it");
	case ')':
	case ']':
	case '}':
		return rerr(ps, "an unmatched closing bracket");
	default:
		c = utf8_next(&ps->p);
		ret = radd(ps, c, c);
		return ret ?: rset_finish(ps, from, false, false) ?: set_node(ps, from, idx);
	}
}

static int parse_count(struct rparse *ps, int *v)
{
	if (*ps->p < '0' || *ps->p > '9')
		return rerr(ps, "a quantifier {n,m} without its numbers");
	*v = 0;
	while (*ps->p >= '0' && *ps->p <= '9') {
		*v = *v * 10 + (*ps->p++ - '0');
		if (*v > REP_MAX)
			return rerr(ps, "a repetition count above 100");
	}
	return 0;
}

static int parse_repeat(struct rparse *ps, int *idx)
{
	int ret = parse_atom(ps, idx), min, max, n;

	while (!ret && *ps->p && strchr("*+?{", *ps->p)) {
		char q = *ps->p++;

		min = q == '+' ? 1 : 0;
		max = q == '?' ? 1 : -1;
		if (q == '{') {
			ret = parse_count(ps, &min);
			if (ret)
				return ret;
			max = min;
			if (*ps->p == ',') {
				ps->p++;
				max = -1;
				if (*ps->p != '}') {
					ret = parse_count(ps, &max);
					if (ret)
						return ret;
				}
			}
			if (*ps->p != '}')
				return rerr(ps, "a quantifier {n,m} without its '}'");
			ps->p++;
			if (max >= 0 && max < min)
				return rerr(ps, "a quantifier {n,m} with m below n");
		}
		if (*ps->p == '?') /* lazy: the same strings */
			ps->p++;
		n = rnew(ps, R_REP);
		if (n < 0)
			return n;
		ps->n[n].a = *idx;
		ps->n[n].min = min;
		ps->n[n].max = max;
		*idx = n;
	}
	return ret;
}

/* *idx becomes a node of type (R_CAT, R_ALT) of *idx and x. */
static int pair(struct rparse *ps, int type, int *idx, int x)
{
	int n = rnew(ps, type);

	if (n < 0)
		return n;
	ps->n[n].a = *idx;
	ps->n[n].b = x;
	*idx = n;
	return 0;
}

/* A sequence up to '|', ')' or the end (-1: empty). */
static int parse_cat(struct rparse *ps, int *idx)
{
	int ret = 0, x;

	*idx = -1;
	while (!ret && *ps->p && *ps->p != '|' && *ps->p != ')') {
		if (*ps->p == '$' && !ps->p[1])
			break; /* the anchor at the end */
		ret = parse_repeat(ps, &x);
		if (ret)
			return ret;
		if (*idx < 0) {
			*idx = x;
			continue;
		}
		ret = pair(ps, R_CAT, idx, x);
	}
	return ret;
}

static int parse_alt(struct rparse *ps, int *idx)
{
	int ret = parse_cat(ps, idx), x;

	while (!ret && *ps->p == '|') {
		ps->p++;
		ps->top_alt |= !ps->depth;
		ret = parse_cat(ps, &x);
		if (ret)
			return ret;
		ret = pair(ps, R_ALT, idx, x);
	}
	return ret;
}

/* ---- the NFA ---- */

struct rbuild {
	struct rparse *ps;
	struct jre *re;
	uint16_t out2[JRE_STATES]; /* JRE_SPLIT: the second way */
	bool full;
};

static int state(struct rbuild *b, uint8_t kind, uint32_t out)
{
	struct jre_state *s;

	if (b->re->n == JRE_STATES) {
		b->full = true;
		return 0;
	}
	s = &b->re->st[b->re->n];
	memset(s, 0, sizeof(*s));
	s->kind = kind;
	s->out = (uint16_t)out;
	return b->re->n++;
}

/* The states of tree node i, entered at the result, going on to next. */
static int build(struct rbuild *b, int i, int next)
{
	const struct rnode *n = i < 0 ? NULL : &b->ps->n[i];
	int s, cur;

	if (!n || b->full)
		return next;
	switch (n->type) {
	case R_SET:
		s = state(b, JRE_CHAR, (uint32_t)next);
		b->re->st[s].r = n->r;
		b->re->st[s].nr = n->nr;
		return s;
	case R_CAT:
		return build(b, n->a, build(b, n->b, next));
	case R_ALT:
		s = state(b, JRE_SPLIT, (uint32_t)build(b, n->a, next));
		b->out2[s] = (uint16_t)build(b, n->b, next);
		return s;
	default: /* R_REP */
		cur = next;
		if (n->max < 0) {
			/* a loop: a split that takes the item back to itself, or leaves */
			s = state(b, JRE_SPLIT, 0);
			b->out2[s] = (uint16_t)next;
			b->re->st[s].out = (uint16_t)build(b, n->a, s);
			cur = s;
		} else {
			for (int k = n->min; k < n->max && !b->full; k++) {
				s = state(b, JRE_SPLIT, (uint32_t)build(b, n->a, cur));
				b->out2[s] = (uint16_t)next;
				cur = s;
			}
		}
		for (int k = 0; k < n->min && !b->full; k++)
			cur = build(b, n->a, cur);
		return cur;
	}
}

/* The character and match states reachable from s without a character. */
static void closure(const struct rbuild *b, uint32_t s, uint64_t *set, uint64_t *seen)
{
	const struct jre_state *x = &b->re->st[s];

	if (seen[s / 64] >> (s % 64) & 1)
		return;
	seen[s / 64] |= 1ull << (s % 64);
	if (x->kind == JRE_SPLIT) {
		closure(b, x->out, set, seen);
		closure(b, b->out2[s], set, seen);
	} else {
		set[s / 64] |= 1ull << (s % 64);
	}
}

void moem_jre_free(struct jre *re)
{
	if (!re)
		return;
	free(re->len);
	free(re->longer);
	free(re->st);
	free(re->rg);
	free(re->clo);
	free(re);
}

int moem_jre_compile(const char *pattern, struct jre **out, char *err, size_t errlen)
{
	struct rparse ps = {.p = pattern, .start = pattern};
	struct rbuild *b = NULL;
	bool head = *pattern == '^', tail = false;
	struct jre *re;
	int root, ret, any, s;

	*out = NULL;
	if (strlen(pattern) > RE_LEN) {
		snprintf(err, errlen, "longer than %d bytes", RE_LEN);
		return -EINVAL;
	}
	if (moem_tok_utf8_invalid_at(pattern, strlen(pattern)) != strlen(pattern)) {
		snprintf(err, errlen, "not valid UTF-8 at offset %zu",
			 moem_tok_utf8_invalid_at(pattern, strlen(pattern)));
		return -EINVAL;
	}
	ps.p += head;
	/* parse_cat() stops at a '$' that ends the pattern (an escaped one is an atom's) */
	ret = parse_alt(&ps, &root);
	if (!ret && *ps.p == ')')
		ret = rerr(&ps, "an unmatched ')'");
	if (!ret && *ps.p == '$') {
		tail = true;
		ps.p++;
	}
	if (!ret && *ps.p)
		ret = rerr(&ps, "'^' or '$' other than first and last");
	if (!ret && (head || tail) && ps.top_alt)
		ret = rerr(&ps, "an anchor beside a '|' outside any group (write ^(a|b)$)");
	/* any character, for the unanchored ends */
	any = -1;
	if (!ret && (!head || !tail)) {
		uint32_t from = ps.nrg;
		int set;

		ret = radd(&ps, 0, CP_MAX) ?: rset_finish(&ps, from, false, false)
						     ?: set_node(&ps, from, &set);
		if (!ret) {
			any = rnew(&ps, R_REP);
			ret = any < 0 ? any : 0;
		}
		if (!ret) {
			ps.n[any].a = set;
			ps.n[any].max = -1;
		}
	}
	re = calloc(1, sizeof(*re));
	b = calloc(1, sizeof(*b));
	if (!ret && (!re || !b))
		ret = -ENOMEM;
	if (!ret) {
		re->st = calloc(JRE_STATES, sizeof(*re->st));
		re->clo = calloc(JRE_STATES, sizeof(*re->clo));
		if (!re->st || !re->clo)
			ret = -ENOMEM;
	}
	if (!ret) {
		b->ps = &ps;
		b->re = re;
		re->match = (uint16_t)state(b, JRE_MATCH, 0);
		s = build(b, tail ? -1 : any, re->match);
		s = build(b, root, s);
		s = build(b, head ? -1 : any, s);
		if (b->full)
			snprintf(ps.err, sizeof(ps.err),
				 "more than %d states (repetitions too large)", JRE_STATES);
		ret = b->full ? -EINVAL : 0;
		for (uint32_t i = 0; !ret && i < re->n; i++) {
			uint64_t seen[JRE_WORDS] = {0};

			closure(b, i, re->clo[i], seen);
		}
		if (!ret)
			memcpy(re->start, re->clo[s], sizeof(re->start));
	}
	if (!ret) {
		re->rg = ps.rg;
		re->nrg = ps.nrg;
		ps.rg = NULL;
		*out = re;
		re = NULL;
	}
	if (ret == -EINVAL && err)
		snprintf(err, errlen, "%s", ps.err);
	moem_jre_free(re);
	free(b);
	free(ps.n);
	free(ps.rg);
	return ret;
}

static bool has(const struct jre *re, const struct jre_state *s, uint32_t lo, uint32_t hi)
{
	for (uint32_t i = 0; i < s->nr; i++)
		if (re->rg[s->r + i][0] <= hi && lo <= re->rg[s->r + i][1])
			return true;
	return false;
}

bool moem_jre_step(const struct jre *re, uint64_t *set, uint32_t c)
{
	uint64_t next[JRE_WORDS] = {0};
	bool any = false;

	for (uint32_t w = 0; w < JRE_WORDS; w++)
		for (uint64_t m = set[w]; m; m &= m - 1) {
			uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(m);
			const struct jre_state *s = &re->st[i];

			if (s->kind != JRE_CHAR || !has(re, s, c, c))
				continue;
			for (uint32_t k = 0; k < JRE_WORDS; k++)
				next[k] |= re->clo[s->out][k];
			any = true;
		}
	memcpy(set, next, sizeof(next));
	return any;
}

/*
 * By length, breadth first: the states a text of exactly k characters
 * takes to a match (k = 0: the match state; k: the character states
 * whose character leads to a state of k - 1). A path longer than JRE_LCAP
 * + JRE_STATES repeats a state, so one longer than JRE_LCAP exists if
 * one within that exists.
 */
int moem_jre_lengths(struct jre *re)
{
	uint64_t prev[JRE_WORDS] = {0}, cur[JRE_WORDS];

	re->len = calloc(re->n, sizeof(*re->len));
	re->longer = calloc(re->n, 1);
	if (!re->len || !re->longer)
		return -ENOMEM;
	prev[re->match / 64] = 1ull << (re->match % 64);
	re->len[re->match][0] = 1;
	for (uint32_t k = 1; k <= JRE_LCAP + JRE_STATES; k++) {
		memset(cur, 0, sizeof(cur));
		for (uint32_t i = 0; i < re->n; i++) {
			bool on = false;

			if (re->st[i].kind != JRE_CHAR)
				continue;
			for (uint32_t w = 0; w < JRE_WORDS && !on; w++)
				on = re->clo[re->st[i].out][w] & prev[w];
			if (!on)
				continue;
			cur[i / 64] |= 1ull << (i % 64);
			if (k <= JRE_LCAP)
				re->len[i][k / 64] |= 1ull << (k % 64);
			else
				re->longer[i] = 1;
		}
		memcpy(prev, cur, sizeof(prev));
	}
	return 0;
}

/* State i reaches a match in k characters, lo <= k <= hi. */
static bool state_fits(const struct jre *re, uint32_t i, uint32_t lo, uint32_t hi)
{
	if (!re->len)
		return true;
	if (hi > JRE_LCAP && re->longer[i])
		return true;
	for (uint32_t k = lo; k <= hi && k <= JRE_LCAP; k++) {
		uint64_t w = re->len[i][k / 64] >> (k % 64);

		if (w & 1)
			return true;
		if (!w) /* none left in this word */
			k |= 63;
	}
	return false;
}

bool moem_jre_fits(const struct jre *re, const uint64_t *set, uint32_t lo, uint32_t hi)
{
	for (uint32_t w = 0; w < JRE_WORDS; w++)
		for (uint64_t m = set[w]; m; m &= m - 1)
			if (state_fits(re, w * 64 + (uint32_t)__builtin_ctzll(m), lo, hi))
				return true;
	return false;
}

bool moem_jre_can(const struct jre *re, const uint64_t *set, uint32_t lo, uint32_t hi, uint32_t klo,
		  uint32_t khi)
{
	for (uint32_t w = 0; w < JRE_WORDS; w++)
		for (uint64_t m = set[w]; m; m &= m - 1) {
			const struct jre_state *s = &re->st[w * 64 + (uint32_t)__builtin_ctzll(m)];

			if (s->kind == JRE_CHAR && has(re, s, lo, hi) &&
			    moem_jre_fits(re, re->clo[s->out], klo, khi))
				return true;
		}
	return false;
}

bool moem_jre_done(const struct jre *re, const uint64_t *set)
{
	return set[re->match / 64] >> (re->match % 64) & 1;
}
