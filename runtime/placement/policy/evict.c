// SPDX-License-Identifier: GPL-2.0-only
/*
 * LRU, two-level LRU and LFU victim selection (policy_evict.h). All kinds
 * keep per-key arrays over the whole key space (L * N keys: small), an
 * intrusive doubly linked recency list (MRU at head), one per layer
 * beside it (lru2 looks for its victim layer by layer) and, for LFU, an
 * indexed min-heap on (count, last use, key).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/policy.h>

#define NONE UINT32_MAX

struct moem_evict {
	struct moem_evict_cfg c;
	uint32_t nkeys;
	uint32_t *prev, *next; /* recency list */
	uint32_t head, tail;
	uint32_t *lprev, *lnext; /* each layer's recency list */
	uint32_t *lhead, *ltail; /* [n_layers] */
	uint8_t *member;
	uint64_t *last;	       /* tick of last use (or insert) */
	uint64_t *pred;	       /* lru2: predicted-until tick + 1 (0: none) */
	float *count;	       /* lfu: use count; pred: the caller's score */
	uint32_t *heap, *hidx; /* lfu, pred: heap of members, index of each key */
	uint32_t members;
	uint64_t next_half; /* lfu: tick of the next halving */
	uint32_t *stash;    /* lfu: keys popped while searching */
};

static const char *const names[MOEM_EVICT_NR] = {"lru", "lru2", "lfu", "pred"};

const char *moem_evict_kind_name(enum moem_evict_kind k)
{
	return (unsigned)k < MOEM_EVICT_NR ? names[k] : "invalid";
}

int moem_evict_parse(const char *spec, struct moem_evict_cfg *c)
{
	struct moem_spec sp;
	int kind = -1, ret;

	ret = moem_spec_parse(spec, &sp);
	if (ret)
		return ret;
	for (int k = 0; k < MOEM_EVICT_NR; k++)
		if (!strcmp(sp.name, names[k]))
			kind = k;
	if (kind < 0)
		return moem_errf(EINVAL, "eviction policy '%s': unknown (lru, lru2, lfu, pred)",
				 sp.name);
	c->kind = (enum moem_evict_kind)kind;
	c->window = 2;
	c->horizon = 1;
	c->half = 0;
	if (c->kind == MOEM_EVICT_LRU2 &&
	    ((ret = moem_spec_u32(&sp, "W", 0, 1u << 20, &c->window)) ||
	     (ret = moem_spec_u32(&sp, "S", 0, 1u << 20, &c->horizon))))
		return ret;
	if (c->kind == MOEM_EVICT_LFU && (ret = moem_spec_u32(&sp, "half", 0, 1u << 30, &c->half)))
		return ret;
	return moem_spec_done(&sp);
}

void moem_evict_format(const struct moem_evict_cfg *c, char *buf, unsigned len)
{
	if (c->kind == MOEM_EVICT_LRU2)
		snprintf(buf, len, "lru2:W=%u", c->window);
	else if (c->kind == MOEM_EVICT_LFU && c->half)
		snprintf(buf, len, "lfu:half=%u", c->half);
	else
		snprintf(buf, len, "%s", moem_evict_kind_name(c->kind));
}

int moem_evict_create(const struct moem_evict_cfg *c, struct moem_evict **out)
{
	struct moem_evict *ev;
	uint64_t n = (uint64_t)c->n_layers * c->n_experts;

	if ((unsigned)c->kind >= MOEM_EVICT_NR)
		return moem_errf(EINVAL, "evict: bad kind %d", c->kind);
	if (!c->n_layers || c->n_layers > 256 || !c->n_experts || c->n_experts > 2048)
		return moem_errf(EINVAL, "evict: shape %u x %u out of range", c->n_layers,
				 c->n_experts);
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return -ENOMEM;
	ev->c = *c;
	ev->nkeys = (uint32_t)n;
	ev->prev = malloc(n * sizeof(*ev->prev));
	ev->next = malloc(n * sizeof(*ev->next));
	ev->member = calloc(n, 1);
	ev->last = calloc(n, sizeof(*ev->last));
	ev->pred = calloc(n, sizeof(*ev->pred));
	ev->count = calloc(n, sizeof(*ev->count));
	ev->heap = malloc(n * sizeof(*ev->heap));
	ev->hidx = malloc(n * sizeof(*ev->hidx));
	ev->stash = malloc(n * sizeof(*ev->stash));
	ev->lprev = malloc(n * sizeof(*ev->lprev));
	ev->lnext = malloc(n * sizeof(*ev->lnext));
	ev->lhead = malloc(c->n_layers * sizeof(*ev->lhead));
	ev->ltail = malloc(c->n_layers * sizeof(*ev->ltail));
	if (!ev->prev || !ev->next || !ev->member || !ev->last || !ev->pred || !ev->count ||
	    !ev->heap || !ev->hidx || !ev->stash || !ev->lprev || !ev->lnext || !ev->lhead ||
	    !ev->ltail) {
		moem_evict_destroy(ev);
		return -ENOMEM;
	}
	ev->head = ev->tail = NONE;
	for (uint32_t l = 0; l < c->n_layers; l++)
		ev->lhead[l] = ev->ltail[l] = NONE;
	ev->next_half = c->half;
	*out = ev;
	return 0;
}

void moem_evict_destroy(struct moem_evict *ev)
{
	if (!ev)
		return;
	free(ev->prev);
	free(ev->next);
	free(ev->member);
	free(ev->last);
	free(ev->pred);
	free(ev->count);
	free(ev->heap);
	free(ev->hidx);
	free(ev->stash);
	free(ev->lprev);
	free(ev->lnext);
	free(ev->lhead);
	free(ev->ltail);
	free(ev);
}

static bool heap_kind(const struct moem_evict *ev)
{
	return ev->c.kind == MOEM_EVICT_LFU || ev->c.kind == MOEM_EVICT_PRED;
}

static void list_unlink(struct moem_evict *ev, uint32_t k)
{
	uint32_t l = k / ev->c.n_experts;

	if (ev->prev[k] != NONE)
		ev->next[ev->prev[k]] = ev->next[k];
	else
		ev->head = ev->next[k];
	if (ev->next[k] != NONE)
		ev->prev[ev->next[k]] = ev->prev[k];
	else
		ev->tail = ev->prev[k];
	if (ev->lprev[k] != NONE)
		ev->lnext[ev->lprev[k]] = ev->lnext[k];
	else
		ev->lhead[l] = ev->lnext[k];
	if (ev->lnext[k] != NONE)
		ev->lprev[ev->lnext[k]] = ev->lprev[k];
	else
		ev->ltail[l] = ev->lprev[k];
}

static void list_push_head(struct moem_evict *ev, uint32_t k)
{
	uint32_t l = k / ev->c.n_experts;

	ev->prev[k] = NONE;
	ev->next[k] = ev->head;
	if (ev->head != NONE)
		ev->prev[ev->head] = k;
	ev->head = k;
	if (ev->tail == NONE)
		ev->tail = k;
	ev->lprev[k] = NONE;
	ev->lnext[k] = ev->lhead[l];
	if (ev->lhead[l] != NONE)
		ev->lprev[ev->lhead[l]] = k;
	ev->lhead[l] = k;
	if (ev->ltail[l] == NONE)
		ev->ltail[l] = k;
}

/* LFU heap order: lower count, then older use, then lower key. */
static bool heap_less(const struct moem_evict *ev, uint32_t a, uint32_t b)
{
	if (ev->count[a] != ev->count[b])
		return ev->count[a] < ev->count[b];
	if (ev->last[a] != ev->last[b])
		return ev->last[a] < ev->last[b];
	return a < b;
}

static void heap_set(struct moem_evict *ev, uint32_t i, uint32_t k)
{
	ev->heap[i] = k;
	ev->hidx[k] = i;
}

static void heap_up(struct moem_evict *ev, uint32_t i)
{
	uint32_t k = ev->heap[i];

	while (i > 0) {
		uint32_t p = (i - 1) / 2;

		if (!heap_less(ev, k, ev->heap[p]))
			break;
		heap_set(ev, i, ev->heap[p]);
		i = p;
	}
	heap_set(ev, i, k);
}

static void heap_down(struct moem_evict *ev, uint32_t i)
{
	uint32_t k = ev->heap[i], n = ev->members;

	for (;;) {
		uint32_t l = 2 * i + 1, m = i, best = k;

		if (l < n && heap_less(ev, ev->heap[l], best)) {
			m = l;
			best = ev->heap[l];
		}
		if (l + 1 < n && heap_less(ev, ev->heap[l + 1], best))
			m = l + 1;
		if (m == i)
			break;
		heap_set(ev, i, ev->heap[m]);
		i = m;
	}
	heap_set(ev, i, k);
}

static void heap_remove(struct moem_evict *ev, uint32_t k)
{
	uint32_t i = ev->hidx[k], last = ev->heap[ev->members - 1];

	ev->members--;
	if (i == ev->members)
		return;
	heap_set(ev, i, last);
	heap_up(ev, i);
	heap_down(ev, ev->hidx[last]);
}

static void lfu_age(struct moem_evict *ev, uint64_t pos)
{
	if (!ev->c.half || pos < ev->next_half)
		return;
	/* Halving every count keeps the heap order. */
	for (uint32_t k = 0; k < ev->nkeys; k++)
		ev->count[k] *= 0.5f;
	ev->next_half = pos + ev->c.half;
}

void moem_evict_insert(struct moem_evict *ev, uint32_t key, uint64_t pos)
{
	if (key >= ev->nkeys || ev->member[key])
		return;
	ev->member[key] = 1;
	ev->last[key] = pos;
	list_push_head(ev, key);
	if (heap_kind(ev)) {
		lfu_age(ev, pos);
		ev->members++;
		heap_set(ev, ev->members - 1, key);
		heap_up(ev, ev->members - 1);
	} else {
		ev->members++;
	}
}

void moem_evict_access(struct moem_evict *ev, uint32_t key, uint64_t pos)
{
	if (key >= ev->nkeys)
		return;
	if (ev->c.kind == MOEM_EVICT_LFU) {
		lfu_age(ev, pos);
		ev->count[key] += 1.0f;
	}
	if (!ev->member[key])
		return;
	ev->last[key] = pos;
	list_unlink(ev, key);
	list_push_head(ev, key);
	if (heap_kind(ev))
		heap_down(ev, ev->hidx[key]);
}

void moem_evict_score(struct moem_evict *ev, uint32_t key, float score)
{
	float old;

	if (ev->c.kind != MOEM_EVICT_PRED || key >= ev->nkeys)
		return;
	old = ev->count[key];
	ev->count[key] = score;
	if (!ev->member[key])
		return;
	if (score < old)
		heap_up(ev, ev->hidx[key]);
	else
		heap_down(ev, ev->hidx[key]);
}

void moem_evict_rebase(struct moem_evict *ev, float delta)
{
	for (uint32_t k = 0; k < ev->nkeys; k++)
		ev->count[k] += delta;
	/* rounding may have merged scores: restore the heap order */
	for (uint32_t i = ev->members / 2; heap_kind(ev) && i-- > 0;)
		heap_down(ev, i);
}

float moem_evict_get_score(const struct moem_evict *ev, uint32_t key)
{
	return key < ev->nkeys ? ev->count[key] : 0.0f;
}

void moem_evict_remove(struct moem_evict *ev, uint32_t key)
{
	if (key >= ev->nkeys || !ev->member[key])
		return;
	list_unlink(ev, key);
	if (heap_kind(ev))
		heap_remove(ev, key);
	else
		ev->members--;
	ev->member[key] = 0;
	ev->pred[key] = 0;
}

void moem_evict_predict(struct moem_evict *ev, uint32_t key, uint64_t until_pos)
{
	if (key < ev->nkeys && until_pos + 1 > ev->pred[key])
		ev->pred[key] = until_pos + 1;
}

void moem_evict_set_horizon(struct moem_evict *ev, uint32_t S)
{
	ev->c.horizon = S;
}

static bool high_not_recent(const struct moem_evict *ev, uint32_t key, uint64_t pos)
{
	const uint32_t L = ev->c.n_layers;
	uint32_t layer = key / ev->c.n_experts, cur = (uint32_t)(pos % L);
	uint32_t d = (layer + L - cur) % L;

	if (ev->pred[key] > pos)
		return true;
	return d >= 1 && d <= ev->c.horizon;
}

bool moem_evict_is_high(const struct moem_evict *ev, uint32_t key, uint64_t pos)
{
	if (ev->c.kind != MOEM_EVICT_LRU2 || key >= ev->nkeys || !ev->member[key])
		return false;
	return ev->last[key] + ev->c.window > pos || high_not_recent(ev, key, pos);
}

static int heap_victim(struct moem_evict *ev, float below, moem_evictable_fn ok, void *arg,
		       uint32_t *key)
{
	uint32_t n = 0;
	int ret = -ENOENT;

	while (ev->members) {
		uint32_t k = ev->heap[0];

		if (!(ev->count[k] < below))
			break;
		if (ok(arg, k)) {
			*key = k;
			ret = 0;
			break;
		}
		heap_remove(ev, k);
		ev->stash[n++] = k;
	}
	while (n) {
		uint32_t k = ev->stash[--n];

		ev->members++;
		heap_set(ev, ev->members - 1, k);
		heap_up(ev, ev->members - 1);
	}
	return ret;
}

int moem_evict_victim(struct moem_evict *ev, uint64_t pos, unsigned flags, moem_evictable_fn ok,
		      void *arg, uint32_t *key)
{
	if (heap_kind(ev) && !(flags & MOEM_EVICT_RECENCY))
		return heap_victim(ev, INFINITY, ok, arg, key);
	if (ev->c.kind == MOEM_EVICT_LRU2 && !(flags & MOEM_EVICT_RECENCY)) {
		/*
		 * Low first: the low key whose layer runs again last (least
		 * recently used among those). Layers run in a cycle, so in plain
		 * LRU order the victim is always of the next layer to run: the
		 * one about to be needed (moem deviation, policies.md).
		 *
		 * The distance to a key's next run is its layer's, so the layers
		 * are taken in that order (the one running now first, then the
		 * one before it, ...) and the first low key from a layer's LRU
		 * end is the victim: the key a scan of the whole recency list
		 * would keep, at the cost of the layers passed over instead of
		 * every member (the scan was most of lru2's time at 48 x 128).
		 * Keys are in recency order, last use descending from the head,
		 * so a layer's scan stops at its first key still in the window.
		 */
		const uint32_t L = ev->c.n_layers, cur = (uint32_t)(pos % L);

		for (uint32_t i = 0; i < L; i++) {
			uint32_t l = (cur + L - i) % L;

			for (uint32_t k = ev->ltail[l]; k != NONE; k = ev->lprev[k]) {
				if (ev->last[k] + ev->c.window > pos)
					break;
				if (high_not_recent(ev, k, pos) || !ok(arg, k))
					continue;
				*key = k;
				return 0;
			}
		}
		if (flags & MOEM_EVICT_LOW_ONLY)
			return -ENOENT;
	}
	for (uint32_t k = ev->tail; k != NONE; k = ev->prev[k])
		if (ok(arg, k)) {
			*key = k;
			return 0;
		}
	return -ENOENT;
}

int moem_evict_victim_below(struct moem_evict *ev, uint64_t pos, float below, moem_evictable_fn ok,
			    void *arg, uint32_t *key)
{
	if (ev->c.kind == MOEM_EVICT_PRED)
		return heap_victim(ev, below, ok, arg, key);
	return moem_evict_victim(ev, pos, MOEM_EVICT_LOW_ONLY, ok, arg, key);
}

uint32_t moem_evict_members(const struct moem_evict *ev)
{
	return ev->members;
}

bool moem_evict_has(const struct moem_evict *ev, uint32_t key)
{
	return key < ev->nkeys && ev->member[key];
}
