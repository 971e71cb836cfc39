/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Eviction (ALGORITHMS.md sec. 5 and "Hit-rate bound"). The caller owns
 * the slots; a policy keeps an order over the keys the caller says hold
 * a slot and, asked for a victim, walks that order and returns the first
 * key the caller's evictable() accepts (never an in-use or in-flight
 * slot: the caller says no to those).
 *
 *   lru    least recently used.
 *   lru2   ExpertFlow's two-level LRU. High = used in the last W layer
 *          ticks, predicted for a position not yet reached (predict()),
 *          or belonging to one of the next S layers in cyclic layer order
 *          (so at the end of a step the next token's first S layers stay
 *          high, as the paper asks); low = the rest. Victims come from low
 *          (LRU order) first, then from high (LRU order). Defaults W = 2,
 *          S = 1 (the prefetcher updates S with set_horizon()).
 *   lfu    least frequently used; a key's count survives its eviction
 *          ("perfect" LFU), ties go to the least recently used, and with
 *          half=H all counts halve every H layer ticks (drift).
 *   pred   lowest score first, ties to the least recently used. The caller
 *          sets scores (score()): moem feeds the predictor's probability
 *          that the expert is used at its layer's next run
 *          (moem_prefetch_reuse()), which approximates Belady's "farthest
 *          next use" online (moem addition, Documentation/policies.md).
 *
 * Belady MIN (moem_belady()) is offline: it needs the whole future, so
 * only the simulator runs it, as the hit-rate bound at a budget.
 */
#ifndef MOEM_POLICY_EVICT_H
#define MOEM_POLICY_EVICT_H

#include <stdbool.h>
#include <stdint.h>

enum moem_evict_kind {
	MOEM_EVICT_LRU = 0,
	MOEM_EVICT_LRU2 = 1,
	MOEM_EVICT_LFU = 2,
	MOEM_EVICT_PRED = 3,
	MOEM_EVICT_NR
};

struct moem_evict_cfg {
	enum moem_evict_kind kind;
	uint32_t n_layers, n_experts;
	uint32_t window;  /* lru2: W (default 2) */
	uint32_t horizon; /* lru2: S (default 1) */
	uint32_t half;	  /* lfu: halve counts every `half` ticks (0: never) */
};

const char *moem_evict_kind_name(enum moem_evict_kind k);
/* "lru", "lru2:W=2,S=4", "lfu:half=4800", "pred"; shape fields are left alone. */
int moem_evict_parse(const char *spec, struct moem_evict_cfg *c);
void moem_evict_format(const struct moem_evict_cfg *c, char *buf, unsigned len);

struct moem_evict;

int moem_evict_create(const struct moem_evict_cfg *c, struct moem_evict **out);
void moem_evict_destroy(struct moem_evict *ev);

/* key took a slot at tick pos (resident or in flight): it joins the order. */
void moem_evict_insert(struct moem_evict *ev, uint32_t key, uint64_t pos);
/* key was used by the layer run at tick pos (a hit, or the use after a miss). */
void moem_evict_access(struct moem_evict *ev, uint32_t key, uint64_t pos);
/* key gave up its slot (evicted or dropped by the caller). */
void moem_evict_remove(struct moem_evict *ev, uint32_t key);
/* lru2: key is predicted for tick until_pos; it stays high until then. */
void moem_evict_predict(struct moem_evict *ev, uint32_t key, uint64_t until_pos);
/* lru2: the prefetch horizon S changed. */
void moem_evict_set_horizon(struct moem_evict *ev, uint32_t S);
/* pred: key's score (kept across evictions; 0 until set). */
void moem_evict_score(struct moem_evict *ev, uint32_t key, float score);
float moem_evict_get_score(const struct moem_evict *ev, uint32_t key);
/* pred: add delta to every score (the caller moves its origin; order is kept). */
void moem_evict_rebase(struct moem_evict *ev, float delta);

typedef bool (*moem_evictable_fn)(void *arg, uint32_t key);

/* Only take a victim from the low level (lru2); for lru and lfu a no-op. */
#define MOEM_EVICT_LOW_ONLY (1u << 0)
/* Whatever the kind: the least recently used key ok() accepts. */
#define MOEM_EVICT_RECENCY  (1u << 1)

/*
 * Choose a victim at tick pos among the keys holding a slot that ok()
 * accepts. 0 and *key, or -ENOENT if there is none. The victim stays in
 * the order until the caller remove()s it.
 */
int moem_evict_victim(struct moem_evict *ev, uint64_t pos, unsigned flags, moem_evictable_fn ok,
		      void *arg, uint32_t *key);
/*
 * A victim for a prefetch worth `below`: pred takes its lowest-scored key
 * only if that score is below `below` (never evict something worth more
 * than what comes in); the other kinds act as victim(LOW_ONLY).
 */
int moem_evict_victim_below(struct moem_evict *ev, uint64_t pos, float below, moem_evictable_fn ok,
			    void *arg, uint32_t *key);
uint32_t moem_evict_members(const struct moem_evict *ev);
bool moem_evict_has(const struct moem_evict *ev, uint32_t key);
/* lru2's classification at tick pos (false for the other kinds). */
bool moem_evict_is_high(const struct moem_evict *ev, uint32_t key, uint64_t pos);

/*
 * An access sequence for Belady: per layer tick, the distinct keys used.
 * Grows as needed; free with moem_access_log_free().
 */
struct moem_access_log {
	uint64_t n_pos, pos_cap;
	uint64_t *off; /* [n_pos + 1] into keys */
	uint32_t *keys;
	uint64_t n_keys, keys_cap;
	uint32_t key_space; /* keys are < key_space */
};

void moem_access_log_init(struct moem_access_log *log, uint32_t key_space);
int moem_access_log_add(struct moem_access_log *log, const uint32_t *keys, uint32_t n);
void moem_access_log_free(struct moem_access_log *log);

/*
 * Belady MIN over the log with `slots` uniform slots, demand paging (a
 * missed key is inserted, evicting the resident key used farthest in the
 * future; keys of the same tick never evict each other). Hits and
 * accesses are counted from tick index count_from on (warm-up excluded).
 */
int moem_belady(const struct moem_access_log *log, uint64_t slots, uint64_t count_from,
		uint64_t *hits, uint64_t *accesses);

#endif /* MOEM_POLICY_EVICT_H */
