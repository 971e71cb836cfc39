/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The tiers' internals (tiers.h), shared by the files of
 * runtime/placement/tiers/ only:
 *   tiers.c    life cycle, handles (publication), the engine's side
 *              (acquire, wait, release) and queries;
 *   move.c     fetches: NVMe -> DRAM loads and DRAM -> HBM copies;
 *   arena.c    the HBM arena: slots, the graveyard of freed space and
 *              its last reader, eviction;
 *   staging.c  the DRAM staging area: extents, eviction, warm-restart
 *              adoption;
 *   budget.c   budgets: bringing both tiers within them, mapping and
 *              unmapping arena memory;
 *   check.c    the invariants, for tests.
 * Every function here expects the tiers lock held unless it says not.
 *
 * Per version:  HBM  ABSENT -> COPYING -> RESIDENT -> ABSENT
 *               DRAM ABSENT -> LOADING -> READY    -> ABSENT
 * A fetch takes an HBM slot first (so a miss cannot be starved of space by
 * its own load), then loads into DRAM if needed, then copies; a DRAM copy
 * is pinned while an H2D copy reads it (dpins) or the CPU computes with
 * it (cpins: hybrid execution, moem_tiers_cpu_acquire).
 */
#ifndef MOEM_TIERS_INT_H
#define MOEM_TIERS_INT_H

#include <pthread.h>

#include <moem/extent.h>
#include <moem/tiers.h>
#include <moem/util.h>

enum { H_ABSENT, H_COPYING, H_RESIDENT };
enum { D_ABSENT, D_LOADING, D_READY };

#define PUB_VALID  (1ULL << 63)
#define PUB_LO	   (1ULL << 62)
#define PUB_OFF(h) ((h) & (PUB_LO - 1))

struct ver {
	struct moem_xfer_req req; /* first: the xfer callback casts back */
	struct moem_tiers *t;
	uint32_t id;
	uint8_t hs, ds;
	uint8_t want_hbm;   /* an HBM slot waits for this DRAM load */
	uint8_t copying;    /* req is with the transfer engine */
	uint8_t prefetched; /* fetched at prefetch priority, not used since */
	uint64_t landed_ns, load_ns;
	uint16_t hpins, dpins, waiters;
	uint16_t cpins; /* CPU readers (and their waiters): the CPU executor */
	int err;
	uint64_t hoff, doff, wait_seq, last_use;
	struct ver *next_load;
};

struct grave {
	uint64_t off, len, seq;
};

struct moem_tiers {
	struct moem_tiers_cfg c;
	struct moem_tierdev *dev;
	struct moem_xfer *xfer;
	struct moem_stager *stager;
	struct moem_evictor *hev, *dev_ev;
	uint8_t *pool;
	uint64_t pool_bytes;
	moem_dptr base;
	uint64_t capacity, mapped, gran, slot_gran;
	uint64_t hbm_budget, dram_budget;
	struct moem_extent hx, dx;
	struct ver *v; /* [L * N * 2] */
	uint64_t *pub; /* [L * N] */
	uint8_t *plan; /* [L * N] */
	struct grave *grave;
	uint32_t n_grave, cap_grave;
	struct ver *loads; /* loads to start once the lock is dropped */
	uint32_t inflight; /* loads + copies */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct moem_tiers_stats st;
	moem_tiers_note_fn note;
	void *note_arg;
	uint64_t n_resident[2], n_ready; /* versions RESIDENT by pi, READY */
	/* DRAM over NUMA nodes (staging.c; n_nodes 1: one range, as before):
	 * node k's range [nlo[k], nhi[k]), the part of it the budget allows
	 * [nlo[k], nlim[k]), its next-fit hint; win_budget: the budget for
	 * which no version lies outside the allowed parts. */
	uint32_t n_nodes;
	uint64_t nlo[MOEM_TIERS_MAX_NODES], nhi[MOEM_TIERS_MAX_NODES];
	uint64_t nlim[MOEM_TIERS_MAX_NODES], nhint[MOEM_TIERS_MAX_NODES];
	uint64_t win_budget;
};

/* staging.c: v is leaving HBM; copy it back to DRAM if the HBM evictor says so (lock held). */
void moem_tr_copy_back(struct moem_tiers *t, struct ver *v);

static inline void moem_tr_note(struct moem_tiers *t, const struct ver *v, int ready)
{
	if (t->note)
		t->note(t->note_arg, v->id, ready, v->doff);
}

static inline uint32_t moem_tr_le(const struct moem_tiers *t, const struct ver *v)
{
	return v->id / 2;
}

static inline uint32_t moem_tr_pi(const struct ver *v)
{
	return v->id & 1;
}

static inline uint64_t moem_tr_vbytes(const struct moem_tiers *t, const struct ver *v)
{
	return t->c.bytes[moem_tr_pi(v)];
}

static inline uint64_t moem_tr_hbm_need(const struct moem_tiers *t, uint64_t bytes)
{
	return moem_align_up(bytes, t->slot_gran);
}

/* tiers.c: point the handle of le (layer * N + expert) at its best resident version. */
void moem_tr_publish(struct moem_tiers *t, uint32_t le);
/* tiers.c: argument checks with a message (no lock needed). */
int moem_tr_check_le(const struct moem_tiers *t, uint32_t layer, uint32_t expert);
int moem_tr_check_version(const struct moem_tiers *t, uint32_t layer, uint32_t expert, uint32_t pi);

/* arena.c: drop graveyard entries the compute timeline has passed. */
void moem_tr_grave_prune(struct moem_tiers *t);
/* arena.c: the compute sequence a copy into [off, off + len) must wait for. */
uint64_t moem_tr_grave_seq(struct moem_tiers *t, uint64_t off, uint64_t len);
/* arena.c: resident, unpinned and not waited for (the evictor's ok()). */
bool moem_tr_hbm_ok(void *arg, uint32_t id);
void moem_tr_hbm_evict(struct moem_tiers *t, struct ver *v);
/* arena.c: a slot for version in, evicting at prio's say; -EAGAIN, -ENOSPC. */
int moem_tr_hbm_alloc(struct moem_tiers *t, const struct ver *in, enum moem_prio prio,
		      uint64_t *off, uint64_t *wait_seq);

/* staging.c: the node index (0..n_nodes-1) whose range holds pool offset off. */
uint32_t moem_tr_node_of(const struct moem_tiers *t, uint64_t off);
/* staging.c: v's DRAM copy lies beyond what the DRAM budget allows. */
bool moem_tr_dram_above(const struct moem_tiers *t, const struct ver *v);
/* staging.c: move the nodes' allowed parts to the DRAM budget. */
void moem_tr_dram_windows(struct moem_tiers *t);
/* staging.c: ready, not read by a copy or the CPU (the DRAM evictor's ok()). */
bool moem_tr_dram_ok(void *arg, uint32_t id);
void moem_tr_dram_evict(struct moem_tiers *t, struct ver *v);
/* staging.c: an extent for version in, evicting only if evict; -EAGAIN, -ENOSPC. */
int moem_tr_dram_alloc(struct moem_tiers *t, const struct ver *in, bool evict, uint64_t *off);
/* staging.c: queue a load of v into DRAM (started by flush_loads). */
int moem_tr_start_load(struct moem_tiers *t, struct ver *v, bool evict);
/* staging.c: start the queued loads; called WITHOUT the lock. */
void moem_tr_flush_loads(struct moem_tiers *t);

/* move.c: copy a DRAM-ready version into its HBM slot at prio. */
int moem_tr_start_copy(struct moem_tiers *t, struct ver *v, enum moem_prio prio);
/* move.c: a version holding a slot that never landed gives it back. */
void moem_tr_unslot(struct moem_tiers *t, struct ver *v);
/* move.c: v resident or on its way at prio: 1 started, 0 there or under way, -errno. */
int moem_tr_fetch(struct moem_tiers *t, struct ver *v, enum moem_prio prio);

/* budget.c: evict and unmap towards the budgets (on every release and completion). */
void moem_tr_apply_budgets(struct moem_tiers *t);

#endif /* MOEM_TIERS_INT_H */
