// SPDX-License-Identifier: GPL-2.0-only
/*
 * libFuzzer harness: JSON schemas from untrusted requests
 * (response_format json_schema, tools' parameters) through the compiler
 * (runtime/text/json_schema.c) and the recognizer that walks them
 * (json_fsm.c). The input is a schema, a NUL, and bytes for the
 * recognizer. A schema is compiled or refused with a message, never
 * crashes or leaks; the bytes it takes as a whole document json-c reads
 * as one object; from every state the bytes reach, some byte goes on
 * until the object is whole (no dead end), checked by a greedy walk; and
 * the fast path of the vocabulary pass agrees with feeding.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/json_fsm.h>

#include "json_walk.h"

/* The bytes as a document: if whole, one object to json-c. */
static void whole(const struct moem_json_schema *s, const char *b, size_t n)
{
	struct json_tokener *tok;
	struct json_object *o;
	struct moem_json_fsm f;

	moem_json_fsm_init(&f, s);
	if (moem_json_fsm_feed(&f, b, n) || !moem_json_fsm_done(&f))
		return;
	tok = json_tokener_new_ex(MOEM_JSON_FSM_DEPTH + 2);
	if (!tok)
		return;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, b, (int)n);
	if (!json_object_is_type(o, json_type_object))
		abort();
	json_object_put(o);
	json_tokener_free(tok);
}

/* From f, closers first: some byte goes on until the object is whole. */
static void finish(const struct moem_json_fsm *from)
{
	struct moem_json_fsm f;

	moem_json_fsm_copy(&f, from);
	for (int steps = 0; !moem_json_fsm_done(&f) && steps < 2048; steps++) {
		int pick = json_walk_next(&f);
		char c = (char)pick;

		if (pick < 0 || moem_json_fsm_feed(&f, &c, 1))
			abort(); /* a dead end */
	}
}

/* Where the bytes' prefixes are inside a string: the shortcut agrees with feeding. */
static void fast_path(const struct moem_json_fsm *f, const char *b, size_t n)
{
	int64_t room = moem_json_fsm_text_room(f);
	struct moem_json_fsm g;

	for (size_t len = 1; room >= 0 && len <= n && len <= 8; len++) {
		int64_t c = moem_json_fsm_text_chars(b, len);

		if (c < 0)
			continue;
		moem_json_fsm_copy(&g, f);
		if (!moem_json_fsm_feed(&g, b, len) != (c <= room))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *)data, *nul = memchr(in, 0, size);
	size_t slen = nul ? (size_t)(nul - in) : size, blen = nul ? size - slen - 1 : 0;
	const char *b = nul ? nul + 1 : "";
	struct json_tokener *tok;
	struct json_object *schema;
	struct moem_json_schema *s = NULL;
	struct moem_json_fsm f;

	if (slen > 65536)
		return 0;
	tok = json_tokener_new_ex(64);
	if (!tok)
		return 0;
	schema = json_tokener_parse_ex(tok, in, (int)slen);
	json_tokener_free(tok);
	if (!schema)
		return 0;
	moem_clear_error();
	if (moem_json_schema_compile(schema, &s)) {
		if (!moem_last_error()[0])
			abort(); /* refused without a reason */
		json_object_put(schema);
		return 0;
	}
	whole(s, b, blen);
	moem_json_fsm_init(&f, s);
	finish(&f);
	for (size_t i = 0; i < blen; i++) {
		struct moem_json_fsm g;

		fast_path(&f, b + i, blen - i);
		/* a refused byte spoils the state it was fed to: the walk goes on from the last good one */
		moem_json_fsm_copy(&g, &f);
		if (moem_json_fsm_feed(&g, b + i, 1))
			break;
		moem_json_fsm_copy(&f, &g);
		if (i % 16 == 15)
			finish(&f);
	}
	finish(&f);
	moem_json_schema_free(s);
	json_object_put(schema);
	return 0;
}
