/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A compiled JSON schema (json_fsm.h): the graph json_schema.c builds and
 * json_fsm.c walks. Nodes refer to each other by index, so a recursive
 * schema ($ref to an enclosing one) is a cycle; a $ref leaves no node of
 * its own.
 */
#ifndef MOEM_JSON_SCHEMA_INT_H
#define MOEM_JSON_SCHEMA_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <moem/json_fsm.h>

enum jtype {
	J_OBJ,	 /* an object: listed properties, or any keys with values of child */
	J_ARR,	 /* an array of min..max items: n of prefixItems (first in alts), then child */
	J_STR,	 /* a string of min..max characters (n 1: a pattern, re[first]) */
	J_NUM,	 /* a number (n 1: bounded, first indexes b) */
	J_INT,	 /* an integer, written without fraction or exponent (n 1: bounded) */
	J_LITS,	 /* one of n texts (enum, const, boolean, null): JSON as written */
	J_ANYOF, /* one of n alternatives, told by the first byte */
	J_UNION, /* one of n objects, told by their first property's value (child: those values) */
};

#define J_NONE	   0xffff      /* no child node (an object with no other keys) */
#define J_DEPTH_NO 0xffffffffu /* no instance within any nesting */

struct jnode {
	uint8_t type;	/* enum jtype */
	uint8_t n;	/* properties, texts or alternatives */
	uint16_t child; /* J_ARR: the items; J_OBJ without properties: the values (or J_NONE) */
	uint32_t first; /* index of the first in props / lits / alts */
	uint32_t min, max;
	uint32_t depth;	    /* containers an instance needs at least (J_DEPTH_NO: none has one) */
	uint8_t starts[32]; /* the bytes an instance can start with */
	bool unique;	    /* J_ARR: uniqueItems (child is a J_LITS of no numbers) */
};

struct jprop {
	uint32_t off, len; /* the key as written between the quotes */
	uint16_t node;
	bool required;
};

struct jlit {
	uint32_t off, len;
};

/*
 * The bounds of a number (minimum, maximum, exclusive ones), as the
 * inclusive range of the values the recognizer may write, in units of
 * 10^-JNUM_DIGITS. A bounded number is written with at most JNUM_DIGITS
 * digits and no exponent, so that each value it can write is a multiple
 * of that unit below 10^(2 JNUM_DIGITS) in magnitude, and so that it has
 * at most 15 significant digits: two such values are distinct doubles,
 * and comparing one with a bound's double (as validators do) is comparing
 * it with the bound's shortest decimal form (json_schema.c).
 */
#define JNUM_DIGITS 15
typedef __int128 jnum_t;

struct jbound {
	jnum_t lo, hi;
};

static inline jnum_t jnum_p10(int e)
{
	jnum_t v = 1;

	while (e-- > 0)
		v *= 10;
	return v;
}

/*
 * A string's pattern (json_regex.c): a Thompson NFA over code points of
 * at most JRE_STATES states, walked as a set of its character and match
 * states (uint64_t[JRE_WORDS]; clo[s]: those reachable from s without a
 * character). Character states hold nr ranges from r in rg, inclusive,
 * sorted, without surrogates.
 */
#define JRE_WORDS  MOEM_JSON_FSM_RE_WORDS
#define JRE_STATES (64 * JRE_WORDS)

/* Most characters a pattern's string may be bounded to (minLength, maxLength). */
#define JRE_LCAP   1024
#define JRE_LWORDS (JRE_LCAP / 64 + 1)

enum { JRE_CHAR, JRE_SPLIT, JRE_MATCH };

struct jre_state {
	uint8_t kind;
	uint16_t out; /* CHAR: after the character; SPLIT: the first way */
	uint32_t r, nr;
};

struct jre {
	struct jre_state *st;
	uint32_t n;
	uint32_t (*rg)[2];
	uint32_t nrg;
	uint64_t (*clo)[JRE_WORDS];
	uint64_t start[JRE_WORDS];
	uint16_t match;
	/* with a string's minLength/maxLength (moem_jre_lengths()): per state,
	 * the lengths of the texts that take it to a match, up to JRE_LCAP, and
	 * whether longer ones do; NULL without */
	uint64_t (*len)[JRE_LWORDS];
	uint8_t *longer;
};

/* 0 and *out; -EINVAL with the reason in err; -ENOMEM. */
int moem_jre_compile(const char *pattern, struct jre **out, char *err, size_t errlen);
/* The length tables moem_jre_fits() and moem_jre_can() then use; 0 or -ENOMEM. */
int moem_jre_lengths(struct jre *re);
/*
 * Some state of set can reach a match in k more characters with
 * lo <= k <= hi (hi UINT32_MAX: no bound); without the tables, any k.
 */
bool moem_jre_fits(const struct jre *re, const uint64_t *set, uint32_t lo, uint32_t hi);
void moem_jre_free(struct jre *re);
/* set becomes the states after character c; false if there are none. */
bool moem_jre_step(const struct jre *re, uint64_t *set, uint32_t c);
/*
 * Some character in [lo, hi] can come next, after which a match is
 * within klo..khi more characters (moem_jre_fits()).
 */
bool moem_jre_can(const struct jre *re, const uint64_t *set, uint32_t lo, uint32_t hi, uint32_t klo,
		  uint32_t khi);
/* The text so far matches. */
bool moem_jre_done(const struct jre *re, const uint64_t *set);

/* Can a value of a number of bounds b (integer: no fraction) start with byte c? */
bool moem_jnum_can_start(const struct jbound *b, bool integer, unsigned char c);

struct moem_json_schema {
	struct jnode *n;
	uint32_t nn, cap_n;
	struct jprop *p;
	uint32_t np, cap_p;
	struct jlit *l;
	uint32_t nl, cap_l;
	uint16_t *a;
	uint32_t na, cap_a;
	struct jbound *b;
	uint32_t nb, cap_b;
	struct jre **re; /* J_STR with n 1: re[first] is its pattern */
	uint32_t nre, cap_re;
	char *text;
	uint32_t ntext, cap_text;
	uint16_t root;
	/* text the object is written between (moem_json_schema_wrap()) */
	uint32_t pre_off, pre_len, post_off, post_len;
};

static inline bool jstarts(const struct jnode *n, unsigned char c)
{
	return n->starts[c >> 3] >> (c & 7) & 1;
}

#endif /* MOEM_JSON_SCHEMA_INT_H */
