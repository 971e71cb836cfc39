/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The transfer engine: host -> device copies on the tier device's one copy
 * engine, in priority order miss > prefetch > promotion, split into pieces
 * of at most piece_bytes (8 MiB) with at most max_inflight pieces queued on
 * the engine, so a miss waits behind at most that many pieces rather than
 * a whole prefetch. A thread of its own issues pieces and tracks their
 * completion; it keeps an EWMA of the achieved bandwidth (alpha 0.2) that
 * the prefetch policy reads.
 */
#ifndef MOEM_XFER_H
#define MOEM_XFER_H

#include <stddef.h>
#include <stdint.h>

#include "tierdev.h"

enum moem_prio { MOEM_PRIO_MISS = 0, MOEM_PRIO_PREFETCH = 1, MOEM_PRIO_PROMOTE = 2, MOEM_PRIO_NR };

struct moem_xfer_req;
typedef void (*moem_xfer_done_fn)(struct moem_xfer_req *r, int status);

struct moem_xfer_req {
	/* Set by the caller before submitting; stable until done runs. */
	moem_dptr dst;
	const void *src;
	uint64_t bytes;
	uint64_t wait_compute; /* compute seq the first piece waits for */
	enum moem_prio prio;
	moem_xfer_done_fn done; /* runs once, on the engine's thread, no lock held */
	void *arg;
	/* Owned by the engine. */
	uint64_t issued, completed;
	uint64_t t_submit, t_first_issue;
	struct moem_xfer_req *prev, *next;
	int queued;
};

struct moem_xfer_opts {
	uint64_t piece_bytes;  /* default 8 MiB */
	uint32_t max_inflight; /* pieces on the copy engine at once, default 2 */
	double ewma_alpha;     /* default 0.2 */
	double initial_bw;     /* bytes/s before the first measurement (default 16e9) */
};

struct moem_xfer_stats {
	uint64_t bytes[MOEM_PRIO_NR];
	uint64_t requests[MOEM_PRIO_NR];
	uint64_t pieces;
	uint64_t queue_ns[MOEM_PRIO_NR]; /* submit -> first piece issued, summed */
	uint64_t busy_ns;		 /* device time of all pieces */
};

struct moem_xfer;

int moem_xfer_create(struct moem_tierdev *dev, const struct moem_xfer_opts *o,
		     struct moem_xfer **out);
/* Waits for every submitted request to finish, then stops. */
void moem_xfer_destroy(struct moem_xfer *x);

/* Queue a request (thread-safe). -EINVAL for 0 bytes or a bad priority. */
int moem_xfer_submit(struct moem_xfer *x, struct moem_xfer_req *r);
/* Raise a queued request's priority (a prefetch that became a miss). */
void moem_xfer_raise(struct moem_xfer *x, struct moem_xfer_req *r, enum moem_prio prio);
/*
 * Withdraw a request none of whose pieces was issued yet: 0 and done is
 * never called; -EBUSY if it already started (it will complete).
 */
int moem_xfer_cancel(struct moem_xfer *x, struct moem_xfer_req *r);
/* Block until nothing is queued or in flight. */
void moem_xfer_drain(struct moem_xfer *x);

/*
 * The first failure (a piece that could not be issued or did not
 * complete), 0 if none; its message into why (n bytes, "" if none).
 * After one, every request still queued is finished with that error.
 */
int moem_xfer_failure(struct moem_xfer *x, char *why, size_t n);
/* Achieved host -> device bandwidth, bytes/s (EWMA over pieces). */
double moem_xfer_bandwidth(struct moem_xfer *x);
void moem_xfer_get_stats(struct moem_xfer *x, struct moem_xfer_stats *s);

#endif /* MOEM_XFER_H */
