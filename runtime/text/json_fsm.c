// SPDX-License-Identifier: GPL-2.0-only
/*
 * The JSON recognizer of json_fsm.h: a pushdown automaton over bytes.
 * Containers are on the stack; the state says what may come next, and a
 * number, literal, escape or UTF-8 sequence in progress keeps its place
 * in sub/lit/cont. A number has no end byte of its own: the byte after it
 * ends it and is then read in the container's state.
 */
#include <errno.h>
#include <string.h>

#include <moem/json_fsm.h>

enum {
	S_START,     /* before the top object */
	S_VALUE,     /* a value */
	S_OBJ_FIRST, /* after '{': a key or '}' */
	S_OBJ_KEY,   /* after ',' in an object: a key */
	S_COLON,     /* after a key */
	S_AFTER,     /* after a value in a container: ',' or its closer */
	S_ARR_FIRST, /* after '[': a value or ']' */
	S_STR,	     /* in a string */
	S_STR_ESC,   /* after a backslash */
	S_STR_HEX,   /* \u: sub hex digits read */
	S_NUM,	     /* in a number: sub is where */
	S_LIT,	     /* in true/false/null: lit which, sub how far */
	S_DONE,	     /* the top object is closed */
};

/* Where a number is: the accepting ones may end there. */
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

static const char *const lits[] = {"true", "false", "null"};

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

void moem_json_fsm_init(struct moem_json_fsm *f)
{
	memset(f, 0, sizeof(*f));
	f->state = S_START;
}

bool moem_json_fsm_done(const struct moem_json_fsm *f)
{
	return f->state == S_DONE;
}

/* A value ended: its container says what comes next. */
static void value_done(struct moem_json_fsm *f)
{
	f->state = f->depth ? S_AFTER : S_DONE;
}

static int open_container(struct moem_json_fsm *f, uint8_t kind)
{
	if (f->depth == MOEM_JSON_FSM_DEPTH)
		return -EINVAL;
	f->stack[f->depth++] = kind;
	f->state = kind ? S_ARR_FIRST : S_OBJ_FIRST;
	return 0;
}

static int close_container(struct moem_json_fsm *f, uint8_t kind)
{
	if (!f->depth || f->stack[f->depth - 1] != kind)
		return -EINVAL;
	f->depth--;
	value_done(f);
	return 0;
}

/* The first byte of a value. */
static int value_start(struct moem_json_fsm *f, unsigned char c)
{
	switch (c) {
	case '{':
		return open_container(f, 0);
	case '[':
		return open_container(f, 1);
	case '"':
		f->state = S_STR;
		f->key = 0;
		return 0;
	case '-':
		f->state = S_NUM;
		f->sub = N_MINUS;
		return 0;
	case 't':
	case 'f':
	case 'n':
		f->state = S_LIT;
		f->lit = c == 't' ? 0 : c == 'f' ? 1 : 2;
		f->sub = 1;
		return 0;
	default:
		if (c >= '0' && c <= '9') {
			f->state = S_NUM;
			f->sub = c == '0' ? N_ZERO : N_INT;
			return 0;
		}
		return -EINVAL;
	}
}

/* A byte inside a string (not after a backslash). */
static int string_byte(struct moem_json_fsm *f, unsigned char c)
{
	if (f->cont) {
		if (c < f->lo || c > f->hi)
			return -EINVAL;
		f->cont--;
		f->lo = 0x80;
		f->hi = 0xbf;
		return 0;
	}
	if (c == '"') {
		if (f->key)
			f->state = S_COLON;
		else
			value_done(f);
		return 0;
	}
	if (c == '\\') {
		f->state = S_STR_ESC;
		return 0;
	}
	if (c < 0x20)
		return -EINVAL;
	if (c < 0x80)
		return 0;
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
	return 0;
}

static int number_byte(struct moem_json_fsm *f, unsigned char c)
{
	bool digit = c >= '0' && c <= '9';

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
		if (c == '.') {
			f->sub = N_DOT;
			return 0;
		}
		if (c == 'e' || c == 'E') {
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

/* One byte: 0, or -EINVAL. */
static int step(struct moem_json_fsm *f, unsigned char c)
{
	int ret;

	if (f->state != S_STR && f->state != S_STR_ESC && f->state != S_STR_HEX &&
	    f->state != S_NUM && f->state != S_LIT) {
		if (is_ws(c)) {
			if (f->ws == MOEM_JSON_FSM_WS)
				return -EINVAL;
			f->ws++;
			return 0;
		}
		f->ws = 0;
	}
	switch (f->state) {
	case S_START:
		return c == '{' ? open_container(f, 0) : -EINVAL;
	case S_VALUE:
		return value_start(f, c);
	case S_OBJ_FIRST:
		if (c == '}')
			return close_container(f, 0);
		/* fall through */
	case S_OBJ_KEY:
		if (c != '"')
			return -EINVAL;
		f->state = S_STR;
		f->key = 1;
		return 0;
	case S_COLON:
		if (c != ':')
			return -EINVAL;
		f->state = S_VALUE;
		return 0;
	case S_AFTER:
		if (c == ',') {
			f->state = f->stack[f->depth - 1] ? S_VALUE : S_OBJ_KEY;
			return 0;
		}
		if (c == '}')
			return close_container(f, 0);
		if (c == ']')
			return close_container(f, 1);
		return -EINVAL;
	case S_ARR_FIRST:
		if (c == ']')
			return close_container(f, 1);
		return value_start(f, c);
	case S_STR:
		return string_byte(f, c);
	case S_STR_ESC:
		if (c == 'u') {
			f->state = S_STR_HEX;
			f->sub = 0;
			f->esc = 0;
			return 0;
		}
		if (!strchr("\"\\/bfnrt", c) || !c)
			return -EINVAL;
		f->state = S_STR;
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
		return 0;
	case S_NUM:
		ret = number_byte(f, c);
		return ret == 1 ? step(f, c) : ret;
	case S_LIT:
		if (c != (unsigned char)lits[f->lit][f->sub])
			return -EINVAL;
		if (!lits[f->lit][++f->sub])
			value_done(f);
		return 0;
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
