/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A progress bar for long packs, loads and runs: drawn on stderr only when
 * it is a terminal, at most 10 times a second, erased when finished.
 * Thread-safe updates (one writer draws at a time).
 */
#ifndef MOEM_PROGRESS_H
#define MOEM_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

struct moem_progress {
	const char *label;
	uint64_t total, done;
	uint64_t start_ns, last_draw_ns;
	bool bytes; /* show done/total as sizes and a rate */
	bool enabled;
	int lock;
};

void moem_progress_start(struct moem_progress *p, const char *label, uint64_t total, bool bytes);
/* Set the amount done (absolute) and redraw if due. */
void moem_progress_set(struct moem_progress *p, uint64_t done);
/* Add to the amount done (atomic) and redraw if due. */
void moem_progress_add(struct moem_progress *p, uint64_t delta);
void moem_progress_finish(struct moem_progress *p);

#endif /* MOEM_PROGRESS_H */
