// SPDX-License-Identifier: GPL-2.0-only
/* Exact LRU over a dense id space: an intrusive doubly linked list. */
#include <errno.h>
#include <stdlib.h>

#include <moem/tiers.h>

#define NIL UINT32_MAX

struct lru {
	struct moem_evictor ev;
	uint32_t n, head, tail; /* head = least recently used */
	uint32_t *prev, *next;
	uint8_t *in;
};

static void unlink_id(struct lru *l, uint32_t id)
{
	uint32_t p = l->prev[id], n = l->next[id];

	if (p != NIL)
		l->next[p] = n;
	else
		l->head = n;
	if (n != NIL)
		l->prev[n] = p;
	else
		l->tail = p;
	l->in[id] = 0;
}

static void push_tail(struct lru *l, uint32_t id)
{
	l->prev[id] = l->tail;
	l->next[id] = NIL;
	if (l->tail != NIL)
		l->next[l->tail] = id;
	else
		l->head = id;
	l->tail = id;
	l->in[id] = 1;
}

static void lru_add(struct moem_evictor *ev, uint32_t id)
{
	struct lru *l = (struct lru *)ev;

	if (id >= l->n)
		return;
	if (l->in[id])
		unlink_id(l, id);
	push_tail(l, id);
}

static void lru_del(struct moem_evictor *ev, uint32_t id)
{
	struct lru *l = (struct lru *)ev;

	if (id < l->n && l->in[id])
		unlink_id(l, id);
}

static void lru_touch(struct moem_evictor *ev, uint32_t id)
{
	struct lru *l = (struct lru *)ev;

	if (id < l->n && l->in[id]) {
		unlink_id(l, id);
		push_tail(l, id);
	}
}

static int lru_pick(struct moem_evictor *ev, uint32_t incoming, enum moem_prio prio,
		    bool (*ok)(void *arg, uint32_t id), void *arg, uint32_t *out)
{
	struct lru *l = (struct lru *)ev;

	for (uint32_t id = l->head; id != NIL; id = l->next[id]) {
		if (ok(arg, id)) {
			*out = id;
			return 0;
		}
	}
	return -ENOENT;
}

static void lru_destroy(struct moem_evictor *ev)
{
	struct lru *l = (struct lru *)ev;

	free(l->prev);
	free(l->next);
	free(l->in);
	free(l);
}

int moem_evictor_lru_create(uint32_t n_ids, struct moem_evictor **out)
{
	struct lru *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->n = n_ids;
	l->head = l->tail = NIL;
	l->prev = malloc(sizeof(uint32_t) * n_ids);
	l->next = malloc(sizeof(uint32_t) * n_ids);
	l->in = calloc(n_ids, 1);
	if (!l->prev || !l->next || !l->in) {
		lru_destroy(&l->ev);
		return -ENOMEM;
	}
	l->ev.add = lru_add;
	l->ev.del = lru_del;
	l->ev.touch = lru_touch;
	l->ev.pick = lru_pick;
	l->ev.destroy = lru_destroy;
	*out = &l->ev;
	return 0;
}
