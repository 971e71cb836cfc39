/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A byte-level JSON recognizer for constrained decoding (the API's
 * response_format json_object): it takes a document a byte at a time and
 * says at once when a byte cannot continue any valid one, so a sampler can
 * leave out every token whose bytes would. The document is one JSON object
 * (RFC 8259) in UTF-8, with these limits so that what it accepts every
 * JSON parser reads the same way: nesting at most MOEM_JSON_FSM_DEPTH, no
 * control characters or invalid UTF-8 in strings, no \u escape of a
 * surrogate (the character itself may be written), runs of whitespace of
 * at most MOEM_JSON_FSM_WS bytes (a model cannot loop on blanks). The
 * state is a small plain struct: copy it to try bytes without committing.
 */
#ifndef MOEM_JSON_FSM_H
#define MOEM_JSON_FSM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MOEM_JSON_FSM_DEPTH 32 /* objects and arrays open at once (json-c's default) */
#define MOEM_JSON_FSM_WS    64 /* whitespace bytes in a row */

struct moem_json_fsm {
	uint8_t state;	/* enum in json_fsm.c */
	uint8_t sub;	/* number, literal or escape progress */
	uint8_t lit;	/* which literal */
	uint8_t key;	/* the string being read is an object's key */
	uint8_t lo, hi; /* UTF-8: the range of the next continuation byte */
	uint8_t cont;	/* UTF-8: continuation bytes still due */
	uint8_t ws;	/* whitespace bytes in a row */
	uint16_t esc;	/* the \u escape's value so far */
	uint16_t depth;
	uint8_t stack[MOEM_JSON_FSM_DEPTH]; /* 0: object, 1: array */
};

/* Ready for a document whose top value is an object. */
void moem_json_fsm_init(struct moem_json_fsm *f);
/* Take bytes: 0, or -EINVAL at the first that no document can have there (f is then spoilt). */
int moem_json_fsm_feed(struct moem_json_fsm *f, const char *s, size_t n);
/* The object is complete (only whitespace may follow). */
bool moem_json_fsm_done(const struct moem_json_fsm *f);

#endif /* MOEM_JSON_FSM_H */
