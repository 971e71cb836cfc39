// SPDX-License-Identifier: GPL-2.0-only
/*
 * The modelled copy engine: one link, transfers in pieces, three FIFO
 * priority queues (miss > prefetch > low). Between pieces the head of the
 * highest non-empty queue goes next, so a miss waits behind at most one
 * piece of anything else. Pieces are committed lazily: only those that
 * start before the time the simulator has reached, since a transfer
 * issued later could still outrank them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sim_int.h"

int moem_sim_ce_init(struct sim *s, uint32_t cap)
{
	struct sim_ce *ce = &s->ce;

	memset(ce, 0, sizeof(*ce));
	ce->x = calloc(cap, sizeof(*ce->x));
	ce->heap = malloc(cap * sizeof(*ce->heap));
	if (!ce->x || !ce->heap)
		return -ENOMEM;
	ce->cap = cap;
	for (uint32_t i = 0; i < cap; i++)
		ce->x[i].next = i + 1 < cap ? i + 1 : SIM_NONE;
	ce->free_head = 0;
	for (int p = 0; p < PRIO_NR; p++)
		ce->head[p] = ce->tail[p] = SIM_NONE;
	ce->piece = s->c->piece_bytes;
	return 0;
}

void moem_sim_ce_free(struct sim *s)
{
	free(s->ce.x);
	free(s->ce.heap);
	memset(&s->ce, 0, sizeof(s->ce));
}

static void q_unlink(struct sim_ce *ce, uint32_t id)
{
	struct sim_xfer *x = &ce->x[id];

	if (x->prev != SIM_NONE)
		ce->x[x->prev].next = x->next;
	else
		ce->head[x->prio] = x->next;
	if (x->next != SIM_NONE)
		ce->x[x->next].prev = x->prev;
	else
		ce->tail[x->prio] = x->prev;
}

static void q_append(struct sim_ce *ce, uint32_t id)
{
	struct sim_xfer *x = &ce->x[id];

	x->next = SIM_NONE;
	x->prev = ce->tail[x->prio];
	if (x->prev != SIM_NONE)
		ce->x[x->prev].next = id;
	else
		ce->head[x->prio] = id;
	ce->tail[x->prio] = id;
}

static int grow(struct sim_ce *ce)
{
	uint32_t ncap = ce->cap * 2;
	struct sim_xfer *nx = realloc(ce->x, ncap * sizeof(*nx));
	uint32_t *nh;

	if (!nx)
		return -ENOMEM;
	ce->x = nx;
	nh = realloc(ce->heap, ncap * sizeof(*nh));
	if (!nh)
		return -ENOMEM;
	ce->heap = nh;
	memset(ce->x + ce->cap, 0, (ncap - ce->cap) * sizeof(*nx));
	for (uint32_t i = ce->cap; i < ncap; i++)
		ce->x[i].next = i + 1 < ncap ? i + 1 : ce->free_head;
	ce->free_head = ce->cap;
	ce->cap = ncap;
	return 0;
}

uint32_t moem_sim_ce_add(struct sim *s, uint32_t key, int kind, int prio, uint64_t bytes,
			 double bpn)
{
	struct sim_ce *ce = &s->ce;
	struct sim_xfer *x;
	uint32_t id;

	if (ce->free_head == SIM_NONE && grow(ce))
		return SIM_NONE;
	id = ce->free_head;
	x = &ce->x[id];
	ce->free_head = x->next;
	memset(x, 0, sizeof(*x));
	x->key = key;
	x->kind = (uint8_t)kind;
	x->prio = (uint8_t)prio;
	x->state = XS_QUEUED;
	x->bytes = x->left = bytes;
	x->issue_ns = s->now;
	x->bpn = bpn;
	x->counted = s->counted;
	q_append(ce, id);
	ce->queued++;
	return id;
}

void moem_sim_ce_boost(struct sim *s, uint32_t id)
{
	struct sim_ce *ce = &s->ce;
	struct sim_xfer *x = &ce->x[id];

	if ((x->state != XS_QUEUED && x->state != XS_ACTIVE) || x->prio == PRIO_MISS)
		return;
	q_unlink(ce, id);
	x->prio = PRIO_MISS;
	q_append(ce, id);
}

static void release(struct sim_ce *ce, uint32_t id)
{
	ce->x[id].state = XS_FREE;
	ce->x[id].next = ce->free_head;
	ce->free_head = id;
}

bool moem_sim_ce_cancel(struct sim *s, uint32_t id)
{
	struct sim_ce *ce = &s->ce;

	if (ce->x[id].state != XS_QUEUED)
		return false;
	q_unlink(ce, id);
	ce->queued--;
	release(ce, id);
	return true;
}

/* Completion heap, ordered by (done_ns, id). */
static bool h_less(const struct sim_ce *ce, uint32_t a, uint32_t b)
{
	if (ce->x[a].done_ns != ce->x[b].done_ns)
		return ce->x[a].done_ns < ce->x[b].done_ns;
	return a < b;
}

static void h_push(struct sim_ce *ce, uint32_t id)
{
	uint32_t i = ce->nheap++;

	while (i > 0 && h_less(ce, id, ce->heap[(i - 1) / 2])) {
		ce->heap[i] = ce->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	ce->heap[i] = id;
}

static uint32_t h_pop(struct sim_ce *ce)
{
	uint32_t top = ce->heap[0], last = ce->heap[--ce->nheap], i = 0;

	for (;;) {
		uint32_t l = 2 * i + 1, m = l;

		if (l >= ce->nheap)
			break;
		if (l + 1 < ce->nheap && h_less(ce, ce->heap[l + 1], ce->heap[l]))
			m = l + 1;
		if (!h_less(ce, ce->heap[m], last))
			break;
		ce->heap[i] = ce->heap[m];
		i = m;
	}
	if (ce->nheap)
		ce->heap[i] = last;
	return top;
}

void moem_sim_ce_run(struct sim *s, uint64_t t, uint32_t until)
{
	struct sim_ce *ce = &s->ce;

	for (;;) {
		uint32_t id = SIM_NONE;
		struct sim_xfer *x;
		uint64_t start, piece, dur;

		if (until != SIM_NONE && ce->x[until].state == XS_DONE)
			break;
		for (int p = 0; p < PRIO_NR && id == SIM_NONE; p++)
			id = ce->head[p];
		if (id == SIM_NONE)
			break;
		x = &ce->x[id];
		start = ce->free_at > x->issue_ns ? ce->free_at : x->issue_ns;
		if (until == SIM_NONE && start >= t)
			break;
		piece = x->left < ce->piece ? x->left : ce->piece;
		dur = (uint64_t)((double)piece / x->bpn + 0.5);
		if (!dur)
			dur = 1;
		if (x->state == XS_QUEUED) {
			x->state = XS_ACTIVE;
			x->start_ns = start;
		}
		ce->free_at = start + dur;
		x->left -= piece;
		if (!x->left) {
			x->state = XS_DONE;
			x->done_ns = ce->free_at;
			q_unlink(ce, id);
			h_push(ce, id);
		}
	}
}

uint32_t moem_sim_ce_deliver(struct sim *s, uint64_t t)
{
	struct sim_ce *ce = &s->ce;
	uint32_t n = 0;

	while (ce->nheap && ce->x[ce->heap[0]].done_ns <= t) {
		uint32_t id = h_pop(ce);

		moem_sim_on_done(s, &ce->x[id]);
		ce->queued--;
		release(ce, id);
		n++;
	}
	return n;
}

uint64_t moem_sim_ce_next_done(struct sim *s)
{
	return s->ce.nheap ? s->ce.x[s->ce.heap[0]].done_ns : SIM_INF;
}
