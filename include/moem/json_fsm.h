/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Byte-level JSON recognizers for constrained decoding (the API's
 * response_format json_object and json_schema): one takes a document a
 * byte at a time and says at once when a byte cannot continue any valid
 * one, so a sampler can leave out every token whose bytes would.
 *
 * A document is one JSON object (RFC 8259) in UTF-8, with these limits so
 * that what it accepts every JSON parser reads the same way: nesting at
 * most MOEM_JSON_FSM_DEPTH, no control characters or invalid UTF-8 in
 * strings, no \u escape of a surrogate (the character itself may be
 * written), runs of whitespace of at most MOEM_JSON_FSM_WS bytes (a model
 * cannot loop on blanks).
 *
 * With a schema (moem_json_schema_compile(), Documentation/protocol.md
 * "JSON schemas") the document must also be an instance of it. The
 * recognizer accepts a subset of the schema's instances, chosen so that
 * it never walks into a dead end: properties come in the schema's order
 * and only those it lists; an alternative (anyOf, a list of types) is
 * told by the value's first byte, or, among objects, by the value of
 * their first property (a const, different in each: a discriminated
 * union, as tool calls' "name"); a number with bounds has at most 15
 * digits, no exponent and no -0; an optional property or alternative
 * that could not be finished within the nesting limit is not begun. Every
 * state it reaches can be completed.
 *
 * The state is a plain struct: copy it (moem_json_fsm_copy() copies only
 * the part in use) to try bytes without committing. It points at its
 * schema, which must outlive it.
 */
#ifndef MOEM_JSON_FSM_H
#define MOEM_JSON_FSM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_object;

#define MOEM_JSON_FSM_DEPTH 32 /* objects and arrays open at once (json-c's default) */
#define MOEM_JSON_FSM_WS    64 /* whitespace bytes in a row */

/* Bounds of a compiled schema (a request's schema is refused beyond them). */
#define MOEM_JSON_SCHEMA_NODES 4096	  /* distinct subschemas */
#define MOEM_JSON_SCHEMA_PROPS 64	  /* properties of one object */
#define MOEM_JSON_SCHEMA_ENUM  64	  /* values of one enum */
#define MOEM_JSON_SCHEMA_TEXT  (1u << 20) /* bytes of keys and enum values */

/* A schema compiled for the recognizer; immutable, shareable between threads. */
struct moem_json_schema;

/*
 * Compile a JSON Schema (a subset of draft 2020-12: type, properties,
 * required, additionalProperties, items, prefixItems, uniqueItems (of
 * enums), minItems, maxItems, minLength, maxLength, pattern, minimum,
 * maximum, exclusiveMinimum, exclusiveMaximum, enum, const, anyOf, oneOf,
 * a one-element allOf, $ref to "#" or to $defs / definitions; annotations
 * such as title, description, default and format are accepted and not
 * enforced). The top schema must be an object's. 0 and *out; -EINVAL
 * with moem_errf()'s message naming the place in the schema (a JSON
 * pointer) and what is not supported; -ENOMEM.
 */
int moem_json_schema_compile(struct json_object *schema, struct moem_json_schema **out);
void moem_json_schema_free(struct moem_json_schema *s);

/*
 * The schema of one tool call: {"name": <a tool's name>, "arguments":
 * <that tool's parameters>}, over the API's tools array ([{"type":
 * "function", "function": {"name", "parameters"}}], checked by the
 * caller; no parameters: any object), or only the tool named only. The
 * name comes first and decides the arguments (a union by "name"); a $ref
 * in a tool's parameters is to that schema's own $defs. 0 and *out;
 * -ENOENT if no tool is named only; -EINVAL with the tool's place named;
 * -ENOMEM.
 */
int moem_json_schema_compile_calls(struct json_object *tools, const char *only,
				   struct moem_json_schema **out);
/*
 * The document becomes prefix, the object, suffix (each written exactly
 * as given; a tool call's "<tool_call>\n" and "\n</tool_call>"). 0,
 * -EINVAL (too long, or already wrapped), -ENOMEM.
 */
int moem_json_schema_wrap(struct moem_json_schema *s, const char *prefix, const char *suffix);

/* A string's pattern in progress: a set of up to 64 x this many NFA states. */
#define MOEM_JSON_FSM_RE_WORDS 4

struct moem_json_frame {
	uint16_t node; /* the container's node */
	uint8_t next;  /* object: the first property not yet written */
	uint8_t pad;
	uint32_t count; /* array: items so far */
	uint64_t used;	/* array with uniqueItems: the values written */
};

struct moem_json_fsm {
	const struct moem_json_schema *s;
	uint8_t state;	 /* enum in json_fsm.c */
	uint8_t sub;	 /* number or escape progress */
	uint8_t key;	 /* the string being read is an object's key */
	uint8_t lo, hi;	 /* UTF-8: the range of the next continuation byte */
	uint8_t cont;	 /* UTF-8: continuation bytes still due */
	uint8_t ws;	 /* whitespace bytes in a row */
	uint8_t integer; /* the number being read may have no fraction or exponent */
	uint8_t neg;	 /* a bounded number: it has a minus sign */
	uint8_t nd, nf;	 /* a bounded number: its digits, and those after the point */
	uint16_t esc;	 /* the \u escape's value so far */
	uint16_t node;	 /* the value expected or being read */
	uint16_t off;	 /* a key or literal matched so far: its bytes */
	uint16_t depth;
	uint32_t len;  /* a string's characters so far */
	uint64_t mask; /* the keys or literals still possible */
	uint64_t num;  /* a bounded number: its digits as one integer */
	uint32_t cp;   /* a string with a pattern: the UTF-8 sequence's bits so far */
	uint64_t re[MOEM_JSON_FSM_RE_WORDS]; /* ... and the pattern's states */
	struct moem_json_frame stack[MOEM_JSON_FSM_DEPTH];
};

/* Ready for a document: an instance of s, or any JSON object if s is NULL. */
void moem_json_fsm_init(struct moem_json_fsm *f, const struct moem_json_schema *s);
/* dst = src, copying only the open containers. */
void moem_json_fsm_copy(struct moem_json_fsm *dst, const struct moem_json_fsm *src);
/* Take bytes: 0, or -EINVAL at the first that no document can have there (f is then spoilt). */
int moem_json_fsm_feed(struct moem_json_fsm *f, const char *s, size_t n);
/* The object is complete (only whitespace may follow). */
bool moem_json_fsm_done(const struct moem_json_fsm *f);

/*
 * A fast path for the vocabulary pass. moem_json_fsm_text_chars(): the
 * characters b[0..n) add to a string they are written inside of, if they
 * leave it open with no escape or UTF-8 sequence half done (-1 if not:
 * a quote, a control character, invalid or cut UTF-8, a cut escape).
 * moem_json_fsm_text_room(): if f is inside a string's text (not a key
 * matched against a schema's, not in an escape or a UTF-8 sequence), how
 * many more characters it may take (UINT32_MAX: no bound), else -1. Then
 * bytes whose text_chars() is c >= 0 are taken exactly when c <= room,
 * without feeding them.
 */
int64_t moem_json_fsm_text_chars(const char *b, size_t n);
int64_t moem_json_fsm_text_room(const struct moem_json_fsm *f);

#endif /* MOEM_JSON_FSM_H */
