/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The fuzz harnesses' greedy walk through a JSON recognizer (json_fsm.h):
 * from a state, the byte it writes next, closers and short values first so
 * that the walk ends, else the lowest byte that goes on. A state with no
 * such byte (before the document is whole) is a dead end, which the
 * recognizer promises never to reach.
 */
#ifndef MOEM_FUZZ_JSON_WALK_H
#define MOEM_FUZZ_JSON_WALK_H

#include <moem/json_fsm.h>

/* The next byte from f (not done), or -1 at a dead end. */
static inline int json_walk_next(const struct moem_json_fsm *f)
{
	static const char pref[] = "\"]},:0ntf";
	struct moem_json_fsm g;

	for (const char *p = pref; *p; p++) {
		moem_json_fsm_copy(&g, f);
		if (!moem_json_fsm_feed(&g, p, 1))
			return (unsigned char)*p;
	}
	for (int b = 1; b < 256; b++) {
		char c = (char)b;

		moem_json_fsm_copy(&g, f);
		if (!moem_json_fsm_feed(&g, &c, 1))
			return b;
	}
	return -1;
}

#endif /* MOEM_FUZZ_JSON_WALK_H */
