// SPDX-License-Identifier: GPL-2.0-only
/*
 * The JSON recognizers of json_fsm.h: a pushdown automaton over bytes
 * walking a compiled schema (json_schema_int.h); "any object" is a schema
 * too (any_schema below). Containers are on the stack with their node;
 * the state says what may come next, and a number, key, literal, escape or
 * UTF-8 sequence in progress keeps its place in sub/off/mask/cont. A
 * number (or a literal that another could still extend) has no end byte
 * of its own: the byte after it ends it and is then read in the
 * container's state.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include <moem/json_fsm.h>

#include "json_schema_int.h"

enum {
	S_PRE,	     /* in the text before the object: off */
	S_POST,	     /* in the text after it: off */
	S_START,     /* before the top object */
	S_VALUE,     /* a value of node */
	S_OBJ_FIRST, /* after '{': a key or '}' */
	S_OBJ_KEY,   /* after ',' in an object: a key */
	S_KEY,	     /* in a listed property's key: mask, off */
	S_COLON,     /* after a key: node is the value's */
	S_AFTER,     /* after a value in a container: ',' or its closer */
	S_ARR_FIRST, /* after '[': a value or ']' */
	S_STR,	     /* in a string */
	S_STR_ESC,   /* after a backslash */
	S_STR_HEX,   /* \u: sub hex digits read */
	S_NUM,	     /* in a number: sub is where */
	S_LIT,	     /* in one of node's literals: mask, off */
	S_DONE,	     /* the top object is closed */
};

/* Where a number is: the accepting ones may end there. */
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

/* ---- bounded numbers: can the digits so far still end within the bounds? ---- */

/* Is one of a, a + st, ... <= b within [lo, hi]? */
static bool grid_meets(jnum_t a, jnum_t st, jnum_t b, jnum_t lo, jnum_t hi)
{
	jnum_t from = a > lo ? a : lo, to = b < hi ? b : hi;

	return from <= to && a + (from - a + st - 1) / st * st <= to;
}

/*
 * The values a number can still take, as magnitudes in units of
 * 10^-JNUM_DIGITS: its nd digits so far are num (nf of them after the
 * point), rem = JNUM_DIGITS - nd more may come. Each way on is a grid:
 * after "0", 0 or 0.d...; after digits m, m 10^k + j (k more integer
 * digits) with up to rem - k fraction digits, for each k; after the point,
 * the digits to come. Whether one of them lies in [lo, hi] (the bounds,
 * negated for a negative number) is then exact arithmetic.
 */
static bool num_open(const struct jbound *bd, bool integer, uint8_t sub, bool neg, uint64_t num,
		     int nd, int nf)
{
	/* a minus sign only before a value below zero: never -0, which would let
	 * "-" start both a number >= 0 and a negative one (one byte tells anyOf's) */
	const jnum_t lo = neg ? (-bd->hi > 1 ? -bd->hi : 1) : bd->lo, hi = neg ? -bd->lo : bd->hi;
	const jnum_t one = jnum_p10(JNUM_DIGITS);
	const int rem = JNUM_DIGITS - nd;
	jnum_t a, st;

	switch (sub) {
	case N_MINUS:
		for (uint64_t d = 0; d < 10; d++)
			if (num_open(bd, integer, d ? N_INT : N_ZERO, neg, d, 1, 0))
				return true;
		return false;
	case N_ZERO:
		if (integer || !rem)
			return lo <= 0 && 0 <= hi;
		st = jnum_p10(JNUM_DIGITS - rem);
		return grid_meets(0, st, one - st, lo, hi);
	case N_INT:
		for (int k = 0; k <= rem; k++) {
			a = (jnum_t)num * jnum_p10(k) * one;
			st = jnum_p10(integer ? JNUM_DIGITS : JNUM_DIGITS - (rem - k));
			if (grid_meets(a, st, a + jnum_p10(k) * one - st, lo, hi))
				return true;
		}
		return false;
	case N_DOT: /* a digit must come */
		if (!rem)
			return false;
		a = (jnum_t)num * one;
		st = jnum_p10(JNUM_DIGITS - rem);
		return grid_meets(a, st, a + one - st, lo, hi);
	case N_FRAC:
		a = (jnum_t)num * jnum_p10(JNUM_DIGITS - nf);
		st = jnum_p10(JNUM_DIGITS - nf - rem);
		return grid_meets(a, st, a + jnum_p10(JNUM_DIGITS - nf) - st, lo, hi);
	default:
		return false;
	}
}

bool moem_jnum_can_start(const struct jbound *b, bool integer, unsigned char c)
{
	if (c == '-')
		return num_open(b, integer, N_MINUS, true, 0, 0, 0);
	if (c < '0' || c > '9')
		return false;
	return num_open(b, integer, c == '0' ? N_ZERO : N_INT, false, c - '0', 1, 0);
}

/* ---- "any object": {"type": "object"} built in, so that it cannot fail ---- */

static struct jnode any_n[6];
static uint16_t any_a[5] = {0, 2, 3, 4, 5};
static struct jlit any_l[3] = {{0, 4}, {4, 5}, {9, 4}};
static char any_text[] = "truefalsenull";
static struct moem_json_schema any_s;
static pthread_once_t any_once = PTHREAD_ONCE_INIT;

static void set_starts(struct jnode *n, const char *bytes)
{
	for (; *bytes; bytes++)
		n->starts[(unsigned char)*bytes >> 3] |= (uint8_t)(1 << (*bytes & 7));
}

static void any_build(void)
{
	/* 0 the object (of any values), 1 any value, 2 an array of them, 3-5 scalars */
	static const uint8_t types[] = {J_OBJ, J_ANYOF, J_ARR, J_STR, J_NUM, J_LITS};
	static const char *const starts[] = {"{", "", "[", "\"", "-0123456789", "tfn"};

	for (int i = 0; i < 6; i++) {
		any_n[i].type = types[i];
		any_n[i].child = J_NONE;
		any_n[i].max = UINT32_MAX;
		any_n[i].depth = types[i] == J_OBJ || types[i] == J_ARR;
		set_starts(&any_n[i], starts[i]);
		set_starts(&any_n[1], starts[i]);
	}
	any_n[0].child = 1;
	any_n[2].child = 1;
	any_n[1].n = 5;
	any_n[5].n = 3;
	any_s.n = any_n;
	any_s.nn = 6;
	any_s.a = any_a;
	any_s.na = 5;
	any_s.l = any_l;
	any_s.nl = 3;
	any_s.text = any_text;
	any_s.ntext = sizeof(any_text) - 1;
	any_s.root = 0;
}

/* ---- the walk ---- */

static bool is_ws(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

void moem_json_fsm_init(struct moem_json_fsm *f, const struct moem_json_schema *s)
{
	if (!s) {
		pthread_once(&any_once, any_build);
		s = &any_s;
	}
	memset(f, 0, offsetof(struct moem_json_fsm, stack));
	f->s = s;
	f->state = s->pre_len ? S_PRE : S_START;
	f->node = s->root;
}

void moem_json_fsm_copy(struct moem_json_fsm *dst, const struct moem_json_fsm *src)
{
	memcpy(dst, src, offsetof(struct moem_json_fsm, stack) + src->depth * sizeof(*src->stack));
}

bool moem_json_fsm_done(const struct moem_json_fsm *f)
{
	return f->state == S_DONE;
}

static const struct jnode *node(const struct moem_json_fsm *f, uint32_t i)
{
	return &f->s->n[i];
}

/* Can a value of node i still be finished inside the containers open now? */
static bool fits(const struct moem_json_fsm *f, uint32_t i)
{
	return i != J_NONE && (uint64_t)f->depth + node(f, i)->depth <= MOEM_JSON_FSM_DEPTH;
}

static const struct moem_json_frame *top(const struct moem_json_fsm *f)
{
	return &f->stack[f->depth - 1];
}

/* The object whose properties the open one writes (a union's: its first object's tag). */
static const struct jnode *obj(const struct moem_json_fsm *f)
{
	const struct jnode *o = node(f, top(f)->node);

	return o->type == J_UNION ? node(f, f->s->a[o->first]) : o;
}

/*
 * The keys the open object may write next: from the first property not
 * yet written up to the first required one (properties in the schema's
 * order), each only if its value can be finished.
 */
static uint64_t key_cands(const struct moem_json_fsm *f)
{
	const struct jnode *o = obj(f);
	uint64_t m = 0;

	for (uint32_t i = top(f)->next; i < o->n; i++) {
		const struct jprop *p = &f->s->p[o->first + i];

		if (fits(f, p->node))
			m |= 1ull << i;
		if (p->required)
			break;
	}
	return m;
}

/* The schema of item i of array node n: prefixItems' for the first, then child's. */
static uint32_t item(const struct moem_json_fsm *f, const struct jnode *n, uint32_t i)
{
	return i < n->n ? f->s->a[n->first + i] : n->child;
}

static bool obj_can_close(const struct moem_json_fsm *f)
{
	const struct jnode *o = obj(f);

	for (uint32_t i = top(f)->next; i < o->n; i++)
		if (f->s->p[o->first + i].required)
			return false;
	return true;
}

/* A key may come after '{' or ','. */
static bool obj_has_key(const struct moem_json_fsm *f)
{
	const struct jnode *o = obj(f);

	return o->n ? key_cands(f) != 0 : fits(f, o->child);
}

/* Of the literals of f->node still possible, the one that ended (f->off bytes). */
static uint32_t lit_ended(const struct moem_json_fsm *f)
{
	const struct jnode *l = node(f, f->node);
	uint32_t i = 0;

	while (i + 1 < l->n && !(f->mask >> i & 1 && f->s->l[l->first + i].len == f->off))
		i++;
	return i;
}

/* A value ended: its container says what comes next. */
static void value_done(struct moem_json_fsm *f)
{
	const struct jnode *t;

	if (!f->depth) {
		f->state = f->s->post_len ? S_POST : S_DONE;
		f->off = 0;
		return;
	}
	t = node(f, top(f)->node);
	if (t->type == J_ARR)
		f->stack[f->depth - 1].count++;
	/* the value just read is used */
	if (t->type == J_ARR && t->unique)
		f->stack[f->depth - 1].used |= 1ull << lit_ended(f);
	if (t->type == J_UNION) {
		/* the tag just read: the object it names goes on */
		f->stack[f->depth - 1].node = f->s->a[t->first + lit_ended(f)];
		f->stack[f->depth - 1].next = 1;
	}
	f->state = S_AFTER;
}

static int open_container(struct moem_json_fsm *f, uint32_t i)
{
	if (f->depth == MOEM_JSON_FSM_DEPTH)
		return -EINVAL;
	f->stack[f->depth++] = (struct moem_json_frame){.node = (uint16_t)i};
	f->state = node(f, i)->type == J_ARR ? S_ARR_FIRST : S_OBJ_FIRST;
	return 0;
}

static int close_container(struct moem_json_fsm *f)
{
	f->depth--;
	value_done(f);
	return 0;
}

/* All the literals still possible end here: the value is whole. */
static bool lits_end(const struct moem_json_fsm *f, bool any)
{
	const struct jnode *n = node(f, f->node);

	for (uint32_t i = 0; i < n->n; i++)
		if (f->mask >> i & 1 && (f->s->l[n->first + i].len == f->off) == any)
			return any;
	return !any;
}

/* The values of literal node i an array with uniqueItems has written already (else 0). */
static uint64_t used_values(const struct moem_json_fsm *f, uint32_t i)
{
	const struct jnode *t;

	if (!f->depth)
		return 0;
	t = node(f, top(f)->node);
	return t->type == J_ARR && t->unique && t->child == i ? top(f)->used : 0;
}

/* The first byte of a value of node i (which fits). */
static int value_start(struct moem_json_fsm *f, uint32_t i, unsigned char c)
{
	const struct jnode *n = node(f, i);

	switch (n->type) {
	case J_ANYOF:
		for (uint32_t j = 0; j < n->n; j++) {
			uint32_t a = f->s->a[n->first + j];

			if (jstarts(node(f, a), c) && fits(f, a))
				return value_start(f, a, c);
		}
		return -EINVAL;
	case J_OBJ:
	case J_UNION:
		return c == '{' ? open_container(f, i) : -EINVAL;
	case J_ARR:
		return c == '[' ? open_container(f, i) : -EINVAL;
	case J_STR:
		if (c != '"')
			return -EINVAL;
		f->state = S_STR;
		f->key = 0;
		f->node = (uint16_t)i;
		f->len = 0;
		if (n->n)
			memcpy(f->re, f->s->re[n->first]->start, sizeof(f->re));
		return 0;
	case J_NUM:
	case J_INT:
		if (n->n && !moem_jnum_can_start(&f->s->b[n->first], n->type == J_INT, c))
			return -EINVAL;
		f->integer = n->type == J_INT;
		f->node = (uint16_t)i;
		f->neg = c == '-';
		f->nd = f->nf = 0;
		f->num = 0;
		if (c == '-') {
			f->state = S_NUM;
			f->sub = N_MINUS;
			return 0;
		}
		if (c >= '0' && c <= '9') {
			f->state = S_NUM;
			f->sub = c == '0' ? N_ZERO : N_INT;
			f->nd = 1;
			f->num = c - '0';
			return 0;
		}
		return -EINVAL;
	case J_LITS:
		f->mask = 0;
		for (uint32_t j = 0; j < n->n; j++)
			if ((unsigned char)f->s->text[f->s->l[n->first + j].off] == c)
				f->mask |= 1ull << j;
		f->mask &= ~used_values(f, i);
		if (!f->mask)
			return -EINVAL;
		f->state = S_LIT;
		f->node = (uint16_t)i;
		f->off = 1;
		if (lits_end(f, false))
			value_done(f);
		return 0;
	default:
		return -EINVAL;
	}
}

static int step(struct moem_json_fsm *f, unsigned char c);

static int lit_byte(struct moem_json_fsm *f, unsigned char c)
{
	const struct jnode *n = node(f, f->node);
	uint64_t m = 0;

	for (uint32_t i = 0; i < n->n; i++) {
		const struct jlit *l = &f->s->l[n->first + i];

		if (f->mask >> i & 1 && l->len > f->off &&
		    (unsigned char)f->s->text[l->off + f->off] == c)
			m |= 1ull << i;
	}
	if (m) {
		f->mask = m;
		f->off++;
		if (lits_end(f, false))
			value_done(f);
		return 0;
	}
	/* a literal that ended with the last byte (another went on): the byte is the container's */
	if (!lits_end(f, true))
		return -EINVAL;
	value_done(f);
	return step(f, c);
}

static int key_byte(struct moem_json_fsm *f, unsigned char c)
{
	const struct jnode *u = node(f, top(f)->node), *o = obj(f);
	uint64_t m = 0;

	for (uint32_t i = 0; i < o->n; i++) {
		const struct jprop *p = &f->s->p[o->first + i];

		if (!(f->mask >> i & 1))
			continue;
		if (c == '"' && p->len == f->off) {
			f->stack[f->depth - 1].next = (uint8_t)(i + 1);
			/* a union's tag: any of its objects' values */
			f->node = u->type == J_UNION ? u->child : p->node;
			f->state = S_COLON;
			return 0;
		}
		if (p->len > f->off && (unsigned char)f->s->text[p->off + f->off] == c)
			m |= 1ull << i;
	}
	if (!m)
		return -EINVAL;
	f->mask = m;
	f->off++;
	return 0;
}

/* The pattern of the string being read (NULL: none, or a key). */
static const struct jre *pattern(const struct moem_json_fsm *f)
{
	const struct jnode *n;

	if (f->key || f->node == J_NONE)
		return NULL;
	n = node(f, f->node);
	return n->type == J_STR && n->n ? f->s->re[n->first] : NULL;
}

/*
 * The characters a string may still take after the one being read
 * (counted in len already), from its minLength and maxLength.
 */
static void more_chars(const struct moem_json_fsm *f, uint32_t *lo, uint32_t *hi)
{
	const struct jnode *n = node(f, f->node);

	*lo = n->min > f->len ? n->min - f->len : 0;
	*hi = n->max == UINT32_MAX ? UINT32_MAX : n->max - f->len;
}

/*
 * A character of a string with a pattern is complete: the pattern takes
 * it, and can still match within the string's length bounds.
 */
static int pattern_char(struct moem_json_fsm *f, const struct jre *re, uint32_t c)
{
	uint32_t lo, hi;

	more_chars(f, &lo, &hi);
	return moem_jre_step(re, f->re, c) && moem_jre_fits(re, f->re, lo, hi) ? 0 : -EINVAL;
}

/*
 * A character begun (UTF-8 lead or continuation bytes, a \u escape's
 * first digits) can still be one the pattern takes: one in [lo, hi],
 * after which the pattern can still match within the length bounds.
 */
static int pattern_can(const struct moem_json_fsm *f, const struct jre *re, uint32_t lo,
		       uint32_t hi)
{
	uint32_t klo, khi;

	more_chars(f, &klo, &khi);
	return moem_jre_can(re, f->re, lo, hi, klo, khi) ? 0 : -EINVAL;
}

/* The code points a UTF-8 sequence can still be: cp its bits, cont bytes to come. */
static int utf8_can(const struct moem_json_fsm *f, const struct jre *re)
{
	const uint32_t low = 6 * (f->cont - 1u);

	return pattern_can(f, re, (f->cp << 6 | (f->lo & 0x3fu)) << low,
			   (f->cp << 6 | (f->hi & 0x3fu)) << low | ((1u << low) - 1));
}

/* After a backslash: an escape's character (all below U+10000: \uXXXX). */
static int escape_can(const struct moem_json_fsm *f, const struct jre *re)
{
	return pattern_can(f, re, 0, 0xffff);
}

/* One more character of the string (not a key's): within its maxLength? */
static int str_char(struct moem_json_fsm *f)
{
	if (!f->key && f->node != J_NONE && f->len >= node(f, f->node)->max)
		return -EINVAL;
	f->len++;
	return 0;
}

/* A byte inside a string (not after a backslash). */
static int string_byte(struct moem_json_fsm *f, unsigned char c)
{
	const struct jre *re = pattern(f);
	int ret;

	if (f->cont) {
		if (c < f->lo || c > f->hi)
			return -EINVAL;
		f->cont--;
		f->lo = 0x80;
		f->hi = 0xbf;
		if (!re)
			return 0;
		f->cp = f->cp << 6 | (c & 0x3fu);
		return f->cont ? utf8_can(f, re) : pattern_char(f, re, f->cp);
	}
	if (c == '"') {
		if (f->key) {
			f->state = S_COLON;
			f->node = node(f, top(f)->node)->child;
			return 0;
		}
		if (f->node != J_NONE && f->len < node(f, f->node)->min)
			return -EINVAL;
		if (re && !moem_jre_done(re, f->re))
			return -EINVAL;
		value_done(f);
		return 0;
	}
	if (c == '\\') {
		f->state = S_STR_ESC;
		ret = str_char(f);
		return ret || !re ? ret : escape_can(f, re);
	}
	if (c < 0x20)
		return -EINVAL;
	if (c < 0x80) {
		ret = str_char(f);
		return ret || !re ? ret : pattern_char(f, re, c);
	}
	/* UTF-8 lead bytes, and the range their next byte must be in
	 * (no overlongs, surrogates or code points past U+10FFFF) */
	f->lo = 0x80;
	f->hi = 0xbf;
	if (c >= 0xc2 && c <= 0xdf) {
		f->cont = 1;
	} else if (c >= 0xe0 && c <= 0xef) {
		f->cont = 2;
		if (c == 0xe0)
			f->lo = 0xa0;
		else if (c == 0xed)
			f->hi = 0x9f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		f->cont = 3;
		if (c == 0xf0)
			f->lo = 0x90;
		else if (c == 0xf4)
			f->hi = 0x8f;
	} else {
		return -EINVAL;
	}
	ret = str_char(f);
	if (ret || !re)
		return ret;
	f->cp = c & (0x3fu >> f->cont);
	return utf8_can(f, re);
}

/* The bounds of the number being read (NULL: none). */
static const struct jbound *num_bounds(const struct moem_json_fsm *f)
{
	const struct jnode *n = node(f, f->node);

	return n->n ? &f->s->b[n->first] : NULL;
}

/*
 * A byte of a bounded number: at most JNUM_DIGITS digits and no exponent;
 * each digit or point only if the number can still end within the bounds,
 * and the end only if its value is within them.
 */
static int bounded_byte(struct moem_json_fsm *f, const struct jbound *b, unsigned char c)
{
	bool digit = c >= '0' && c <= '9';
	jnum_t v;

	if (digit && f->sub != N_ZERO) {
		if (f->nd == JNUM_DIGITS)
			return -EINVAL;
		f->num = f->num * 10 + (uint64_t)(c - '0');
		f->nd++;
		if (f->sub == N_MINUS) {
			f->sub = c == '0' ? N_ZERO : N_INT;
		} else if (f->sub != N_INT) {
			f->nf++;
			f->sub = N_FRAC;
		}
	} else if (c == '.' && (f->sub == N_ZERO || f->sub == N_INT) && !f->integer) {
		f->sub = N_DOT;
	} else {
		if (f->sub == N_MINUS || f->sub == N_DOT || digit || c == 'e' || c == 'E')
			return -EINVAL;
		v = (jnum_t)f->num * jnum_p10(JNUM_DIGITS - f->nf);
		if (f->neg)
			v = -v;
		if (v < b->lo || v > b->hi || (f->neg && !v))
			return -EINVAL;
		value_done(f);
		return 1;
	}
	return num_open(b, f->integer, f->sub, f->neg, f->num, f->nd, f->nf) ? 0 : -EINVAL;
}

static int number_byte(struct moem_json_fsm *f, unsigned char c)
{
	const struct jbound *b = num_bounds(f);
	bool digit = c >= '0' && c <= '9';

	if (b)
		return bounded_byte(f, b, c);
	switch (f->sub) {
	case N_MINUS:
		if (!digit)
			return -EINVAL;
		f->sub = c == '0' ? N_ZERO : N_INT;
		return 0;
	case N_ZERO:
	case N_INT:
		if (digit && f->sub == N_INT)
			return 0;
		if (c == '.' && !f->integer) {
			f->sub = N_DOT;
			return 0;
		}
		if ((c == 'e' || c == 'E') && !f->integer) {
			f->sub = N_E;
			return 0;
		}
		break;
	case N_DOT:
		if (!digit)
			return -EINVAL;
		f->sub = N_FRAC;
		return 0;
	case N_FRAC:
		if (digit)
			return 0;
		if (c == 'e' || c == 'E') {
			f->sub = N_E;
			return 0;
		}
		break;
	case N_E:
		if (c == '+' || c == '-') {
			f->sub = N_ESIGN;
			return 0;
		}
		if (!digit)
			return -EINVAL;
		f->sub = N_EXP;
		return 0;
	case N_ESIGN:
		if (!digit)
			return -EINVAL;
		f->sub = N_EXP;
		return 0;
	case N_EXP:
		if (digit)
			return 0;
		break;
	}
	/* Not part of the number: it ends here (a digit after a leading
	 * 0 is no JSON), and the byte is the container's. */
	if (digit)
		return -EINVAL;
	value_done(f);
	return 1;
}

/* '"' opening a key of the open object (one may come: obj_has_key()). */
static int key_start(struct moem_json_fsm *f)
{
	const struct jnode *o = obj(f);

	if (o->n) {
		f->mask = key_cands(f);
		f->off = 0;
		f->state = S_KEY;
	} else {
		f->state = S_STR;
		f->key = 1;
		f->node = J_NONE;
		f->len = 0;
	}
	return 0;
}

static int after_value(struct moem_json_fsm *f, unsigned char c)
{
	const struct moem_json_frame *t = top(f);
	const struct jnode *n = node(f, t->node);

	if (n->type == J_OBJ) {
		if (c == ',' && obj_has_key(f)) {
			f->state = S_OBJ_KEY;
			return 0;
		}
		if (c == '}' && obj_can_close(f))
			return close_container(f);
		return -EINVAL;
	}
	/* (with uniqueItems, max is at most the values: a ',' leaves one unused) */
	if (c == ',' && t->count < n->max && fits(f, item(f, n, t->count))) {
		f->state = S_VALUE;
		f->node = (uint16_t)item(f, n, t->count);
		return 0;
	}
	if (c == ']' && t->count >= n->min)
		return close_container(f);
	return -EINVAL;
}

/* A byte of the fixed text at off (len bytes) around the object; then the state next. */
static int fixed_byte(struct moem_json_fsm *f, unsigned char c, uint32_t off, uint32_t len,
		      uint8_t next)
{
	if (c != (unsigned char)f->s->text[off + f->off])
		return -EINVAL;
	if (++f->off == len)
		f->state = next;
	return 0;
}

/* One byte: 0, or -EINVAL. */
static int step(struct moem_json_fsm *f, unsigned char c)
{
	const struct jnode *n;
	const struct jre *re;
	int ret;

	if (f->state != S_STR && f->state != S_STR_ESC && f->state != S_STR_HEX &&
	    f->state != S_NUM && f->state != S_LIT && f->state != S_KEY && f->state != S_PRE &&
	    f->state != S_POST) {
		if (is_ws(c)) {
			if (f->ws == MOEM_JSON_FSM_WS)
				return -EINVAL;
			f->ws++;
			return 0;
		}
		f->ws = 0;
	}
	switch (f->state) {
	case S_PRE:
		return fixed_byte(f, c, f->s->pre_off, f->s->pre_len, S_START);
	case S_POST:
		return fixed_byte(f, c, f->s->post_off, f->s->post_len, S_DONE);
	case S_START:
	case S_VALUE:
		return value_start(f, f->node, c);
	case S_OBJ_FIRST:
		if (c == '}' && obj_can_close(f))
			return close_container(f);
		if (c == '"' && obj_has_key(f))
			return key_start(f);
		return -EINVAL;
	case S_OBJ_KEY:
		return c == '"' ? key_start(f) : -EINVAL;
	case S_KEY:
		return key_byte(f, c);
	case S_COLON:
		if (c != ':')
			return -EINVAL;
		f->state = S_VALUE;
		return 0;
	case S_AFTER:
		return after_value(f, c);
	case S_ARR_FIRST:
		n = node(f, top(f)->node);
		if (c == ']' && !n->min)
			return close_container(f);
		if (!n->max || !fits(f, item(f, n, 0)))
			return -EINVAL;
		return value_start(f, item(f, n, 0), c);
	case S_STR:
		return string_byte(f, c);
	case S_STR_ESC:
		if (c == 'u') {
			/* (the backslash was taken only if some \uXXXX could follow) */
			f->state = S_STR_HEX;
			f->sub = 0;
			f->esc = 0;
			return 0;
		}
		if (!strchr("\"\\/bfnrt", c) || !c)
			return -EINVAL;
		f->state = S_STR;
		re = pattern(f);
		if (re) {
			static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";

			return pattern_char(f, re, (unsigned char)to[strchr(from, c) - from]);
		}
		return 0;
	case S_STR_HEX:
		if (hexval(c) < 0)
			return -EINVAL;
		f->esc = (uint16_t)(f->esc << 4 | hexval(c));
		/* no surrogate: D800..DFFF is told by the first two digits */
		if (++f->sub == 2 && f->esc >= 0xd8 && f->esc <= 0xdf)
			return -EINVAL;
		if (f->sub == 4)
			f->state = S_STR;
		re = pattern(f);
		if (!re)
			return 0;
		if (f->sub == 4)
			return pattern_char(f, re, f->esc);
		return pattern_can(f, re, (uint32_t)f->esc << (4 * (4 - f->sub)),
				   (((uint32_t)f->esc + 1) << (4 * (4 - f->sub))) - 1);
	case S_NUM:
		ret = number_byte(f, c);
		return ret == 1 ? step(f, c) : ret;
	case S_LIT:
		return lit_byte(f, c);
	case S_DONE:
	default:
		return -EINVAL;
	}
}

int moem_json_fsm_feed(struct moem_json_fsm *f, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (step(f, (unsigned char)s[i]))
			return -EINVAL;
	return 0;
}

int64_t moem_json_fsm_text_chars(const char *b, size_t n)
{
	struct moem_json_fsm f;

	/* inside the text of a string without bounds (a key of "any object"),
	 * which no byte may close: a quote could open another string */
	moem_json_fsm_init(&f, NULL);
	if (moem_json_fsm_feed(&f, "{\"", 2))
		return -1;
	for (size_t i = 0; i < n; i++)
		if (step(&f, (unsigned char)b[i]) ||
		    (f.state != S_STR && f.state != S_STR_ESC && f.state != S_STR_HEX))
			return -1;
	return f.state == S_STR && !f.cont ? (int64_t)f.len : -1;
}

int64_t moem_json_fsm_text_room(const struct moem_json_fsm *f)
{
	if (f->state != S_STR || f->cont)
		return -1;
	if (pattern(f))
		return -1; /* every character through the pattern */
	if (f->key || f->node == J_NONE || node(f, f->node)->max == UINT32_MAX)
		return UINT32_MAX;
	return (int64_t)node(f, f->node)->max - f->len;
}
