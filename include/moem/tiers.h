/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Tiered expert residency: every expert version (layer, expert,
 * precision) lives on NVMe (the pack, always), may be staged in DRAM (the
 * pinned pool) and may be resident in HBM (an arena on the tier device).
 *
 * Handles. Each (layer, expert) has a handle, stable for the model's
 * lifetime, that resolves at every instant either to nothing or to one
 * complete resident version (hi or lo precision):
 *  - a version is published only after its copy completed;
 *  - an unpublished slot is freed at once, but whatever is copied into the
 *    recycled space first waits (on the copy engine) for the compute
 *    timeline to pass the slot's last reader, and the arena never unmaps
 *    memory a reader may still touch;
 *  - a version with readers (pinned by acquire) or waiters is never
 *    evicted.
 *
 * Precision plan: each (layer, expert) has a planned precision (hi by
 * default; the precision policy moves it). A miss fetches the planned
 * version; with allow_fallback an acquire takes the other resident version
 * instead of waiting (counted as a fallback).
 *
 * Budgets: HBM and DRAM budgets can change at any moment from any thread.
 * Allocations never take a tier above its budget; a shrink evicts at once
 * what it can and the rest (pinned, in flight) as soon as it is released,
 * and only then unmaps arena memory.
 *
 * Threads: the engine thread calls acquire/wait/release; the transfer
 * engine and the stager complete work from their own threads; any thread
 * may call set_budget, set_plan, prefetch and the queries. One lock.
 */
#ifndef MOEM_TIERS_H
#define MOEM_TIERS_H

#include <stdbool.h>
#include <stdint.h>

#include "pool.h"
#include "quant.h"
#include "tierdev.h"
#include "xfer.h"

#define MOEM_TIER_HI 0u
#define MOEM_TIER_LO 1u

#define MOEM_TIERS_MAX_NODES MOEM_POOL_MAX_NODES

struct moem_tiers_cfg {
	uint32_t n_layers;	    /* MoE layers */
	uint32_t n_experts;	    /* routed experts per MoE layer */
	uint32_t n_prec;	    /* 1 (hi only) or 2 (hi and lo) */
	uint64_t bytes[2];	    /* blob bytes of the hi and lo versions */
	enum moem_prec prec[2];	    /* their precisions (for probes and reports) */
	uint64_t hbm_budget;	    /* bytes */
	uint64_t hbm_capacity;	    /* VA reserved = the largest HBM budget ever
				 * accepted (0: every version of every expert) */
	uint64_t dram_budget;	    /* bytes of the pool used for staging */
	bool allow_fallback;	    /* take the other version instead of waiting */
	uint32_t hbm_granule_shift; /* slot granule, default 16 (64 KiB) */
	struct moem_xfer_opts xfer;
	/*
	 * The pool's NUMA nodes (moem_pool_info.nodes, moved into the tiers'
	 * offsets): node k holds [node_off[k], node_off[k + 1]), the last up
	 * to pool_bytes; node_off[0] is 0. 0 or 1 node: one range, placement
	 * as before. Over several, the version of expert e of layer l goes to
	 * node (l + e) % n_nodes, or the next with room when that one is full
	 * (counted in dram_node_fallback), and the DRAM budget is shared
	 * among the nodes in proportion to their ranges.
	 */
	uint32_t n_nodes;
	int32_t node_id[MOEM_TIERS_MAX_NODES];
	uint64_t node_off[MOEM_TIERS_MAX_NODES];
};

/*
 * NVMe -> DRAM: start reading version (layer, expert, pi) into dst and call
 * done(arg, status) once, from any thread (never from inside read()). The
 * tiers do not know where the bytes come from: the engine hands them a
 * stager over its pack and loader (runtime/engine/stager.c).
 */
struct moem_stager {
	int (*read)(struct moem_stager *s, uint32_t layer, uint32_t expert, uint32_t pi, void *dst,
		    uint64_t bytes, void (*done)(void *arg, int status), void *arg);
};

/*
 * Victim choice for one tier, called with the tiers lock held, from any
 * thread. Ids are version ids: (layer * n_experts + expert) * 2 + pi.
 * add/del track the population holding space (HBM: from the moment a
 * fetch takes its slot, in flight included; DRAM: ready versions), touch records a use; pick returns the best victim
 * among ids for which ok() is true, or -ENOENT. incoming is the version
 * that needs the space (MOEM_NO_VERSION for a budget shrink) and prio why
 * it is fetched: a policy may refuse to evict for a speculative fetch
 * what it values more than what comes in.
 */
#define MOEM_NO_VERSION UINT32_MAX

struct moem_evictor {
	void (*add)(struct moem_evictor *ev, uint32_t id);
	void (*del)(struct moem_evictor *ev, uint32_t id);
	void (*touch)(struct moem_evictor *ev, uint32_t id);
	int (*pick)(struct moem_evictor *ev, uint32_t incoming, enum moem_prio prio,
		    bool (*ok)(void *arg, uint32_t id), void *arg, uint32_t *id);
	void (*destroy)(struct moem_evictor *ev);
	/*
	 * Optional, on the HBM evictor: id (bytes) is leaving HBM and DRAM
	 * lacks it; copy it back into DRAM? room: DRAM has room for it; else
	 * *victim (among what ok() accepts in DRAM) is evicted first. NULL:
	 * never (inclusive DRAM). The engine's is moem_driver_copy_back().
	 */
	bool (*copy_back)(struct moem_evictor *ev, uint32_t id, uint64_t bytes, bool room,
			  bool (*ok)(void *arg, uint32_t id), void *arg, uint32_t *victim);
};

/* Plain LRU over n_ids ids. */
int moem_evictor_lru_create(uint32_t n_ids, struct moem_evictor **out);

static inline uint32_t moem_tiers_vid(uint32_t n_experts, uint32_t layer, uint32_t expert,
				      uint32_t pi)
{
	return (layer * n_experts + expert) * 2 + pi;
}

/* A pinned resident version, as acquire/wait return it. */
struct moem_xref {
	moem_dptr addr;
	uint32_t layer, expert, pi;
	/* For the prefetch policy's feedback: the version was fetched by a
	 * prefetch (first use since), and when it landed (0: still in flight
	 * at acquire, i.e. the prefetch came too late). */
	bool prefetched;
	uint64_t landed_ns;
};

enum moem_acquire {
	MOEM_ACQ_HIT = 0,      /* the planned version, pinned in *ref */
	MOEM_ACQ_FALLBACK = 1, /* the other version, pinned in *ref */
	MOEM_ACQ_PENDING = 2,  /* a fetch is on its way: call moem_tiers_wait() */
};

struct moem_tiers_stats {
	uint64_t hits, misses, fallbacks; /* HBM: acquires */
	/* DRAM, for the HBM misses: the bytes were staged already (hit) or
	 * still had to come from NVMe (miss). */
	uint64_t dram_hits, dram_misses;
	/* CPU executor: versions it had to load from NVMe first */
	uint64_t cpu_dram_misses;
	uint64_t stall_ns;		  /* time spent in moem_tiers_wait */
	uint64_t bytes_nvme;		  /* NVMe -> DRAM */
	uint64_t bytes_d2h;		  /* HBM -> DRAM: versions copied back on eviction */
	uint64_t bytes_h2d[MOEM_PRIO_NR]; /* DRAM -> HBM by priority */
	uint64_t evict_hbm, evict_dram;
	uint64_t hbm_used, hbm_budget, hbm_mapped;
	uint64_t dram_used, dram_budget;
	uint64_t hbm_resident[2]; /* resident versions by precision */
	uint64_t dram_ready;
	double link_bw;	       /* bytes/s, transfer engine EWMA */
	uint64_t link_busy_ns; /* device time of all copies */
	/* DRAM per NUMA node (one entry, node as configured, without NUMA). */
	uint32_t n_nodes;
	struct moem_dram_node dram_node[MOEM_TIERS_MAX_NODES];
	uint64_t dram_node_fallback; /* versions placed off their node: it was full */
	/* NVMe -> DRAM loads that failed (a read error, a checksum), and the last */
	uint64_t load_errors;
	int last_load_err; /* -errno */
	uint32_t last_load_layer, last_load_expert, last_load_pi;
};

struct moem_tiers;

/*
 * pool/pool_bytes: the staging pool (registered with the device here).
 * The tiers own neither the device, the pool, the stager nor the evictors.
 */
int moem_tiers_create(const struct moem_tiers_cfg *cfg, struct moem_tierdev *dev, void *pool,
		      uint64_t pool_bytes, struct moem_stager *stager, struct moem_evictor *hbm_ev,
		      struct moem_evictor *dram_ev, struct moem_tiers **out);
/* Drains all loads and copies, unmaps and releases the arena. */
void moem_tiers_destroy(struct moem_tiers *t);

/*
 * Engine side. acquire() returns HIT/FALLBACK with the version pinned in
 * *ref, or PENDING after making sure a fetch of the planned version is on
 * its way at miss priority; -EAGAIN if no HBM space can be freed now (every
 * slot is pinned or in flight: release what you hold and try again);
 * -ENOSPC if one version is larger than the HBM budget.
 * wait() blocks until that version is resident, pins it and adds the time
 * spent to the stall counter; -EIO (with a message) if its load failed.
 * release() unpins refs after the kernels reading them were issued and
 * marked as compute_seq on the device's compute timeline.
 */
int moem_tiers_acquire(struct moem_tiers *t, uint32_t layer, uint32_t expert,
		       struct moem_xref *ref);
int moem_tiers_wait(struct moem_tiers *t, struct moem_xref *ref);
void moem_tiers_release(struct moem_tiers *t, const struct moem_xref *refs, uint32_t n,
			uint64_t compute_seq);

/*
 * The CPU executor's side (hybrid execution): compute an expert on the
 * CPU straight from its DRAM copy, without it entering HBM. cpu_acquire()
 * pins the planned version in DRAM for the CPU: 0 with ref->host its
 * bytes (READY), or MOEM_ACQ_PENDING after making sure it is loading from
 * NVMe (evicting from DRAM as the DRAM evictor says): call cpu_wait(),
 * which blocks until it is READY (0, ref->host set) or its load failed
 * (-errno with a message; the pin is gone). -EAGAIN if DRAM has no room
 * now (every staged version is pinned): run it on the GPU instead. A
 * pinned version is never evicted from DRAM. cpu_release() unpins what
 * wait/acquire returned 0 for (refs with host set). HBM is untouched.
 */
struct moem_cref {
	const void *host;
	uint32_t layer, expert, pi;
};

int moem_tiers_cpu_acquire(struct moem_tiers *t, uint32_t layer, uint32_t expert,
			   struct moem_cref *ref);
int moem_tiers_cpu_wait(struct moem_tiers *t, struct moem_cref *ref);
void moem_tiers_cpu_release(struct moem_tiers *t, const struct moem_cref *refs, uint32_t n);

/*
 * Policy side. prefetch() starts fetching the planned version of
 * (layer, expert) at prio unless it is resident or on its way: 1 if it
 * started a fetch, 0 if the version is already there or on its way,
 * -EAGAIN if it would have to evict something the evictor will not give
 * up, -ENOSPC if it can never fit.
 */
int moem_tiers_prefetch(struct moem_tiers *t, uint32_t layer, uint32_t expert, enum moem_prio prio);
/*
 * NVMe -> DRAM only (warm-up): 0, or -EAGAIN if the DRAM budget is full.
 * It never evicts: warm-up after a warm restart must not push out what
 * the restart adopted (and so lose it if the process dies again).
 */
int moem_tiers_stage(struct moem_tiers *t, uint32_t layer, uint32_t expert, uint32_t pi);
/*
 * Withdraw the fetch of (layer, expert)'s planned version if none of its
 * copy was issued yet (a prefetch that became useless): 0 and the slot is
 * free again (a DRAM load already running completes into DRAM), -EBUSY if
 * it cannot be withdrawn (started, waited for, or not in flight).
 */
int moem_tiers_cancel(struct moem_tiers *t, uint32_t layer, uint32_t expert);
/* HBM state of (layer, expert)'s planned version, or -EINVAL. */
enum moem_tier_state {
	MOEM_TIER_ABSENT = 0,
	MOEM_TIER_COPYING = 1,
	MOEM_TIER_RESIDENT = 2,
};
int moem_tiers_state(struct moem_tiers *t, uint32_t layer, uint32_t expert);
/* Set the planned precision; publishes it at once if it is resident. */
int moem_tiers_set_plan(struct moem_tiers *t, uint32_t layer, uint32_t expert, uint32_t pi);
uint32_t moem_tiers_plan(struct moem_tiers *t, uint32_t layer, uint32_t expert);
/* True if version (layer, expert, pi) is staged in DRAM (READY). */
bool moem_tiers_staged(struct moem_tiers *t, uint32_t layer, uint32_t expert, uint32_t pi);
/* Precision index of the version (layer, expert) resolves to, or -1. */
int moem_tiers_published(struct moem_tiers *t, uint32_t layer, uint32_t expert);
/*
 * The same, with where the published version is and its size: for hints
 * to the driver (UVM prefetch); the address is valid only while the
 * version stays published, and nothing is pinned.
 */
int moem_tiers_published_range(struct moem_tiers *t, uint32_t layer, uint32_t expert,
			       moem_dptr *addr, uint64_t *bytes);
/*
 * Pin, for one step planned on the device, every expert of layer whose
 * planned version is published in HBM: refs[e] for each, ok[e] = 1 (0:
 * not pinned). Unlike acquire() it counts no hit and touches no evictor:
 * the step's real uses are accounted afterwards. Returns how many it
 * pinned; give them back with release().
 */
uint32_t moem_tiers_pin_planned(struct moem_tiers *t, uint32_t layer, struct moem_xref *refs,
				uint8_t *ok);
/* mask[e] = 1 if some version of (layer, e) is published in HBM. */
void moem_tiers_resident_mask(struct moem_tiers *t, uint32_t layer, uint8_t *mask);
/* Any time, any thread: -EINVAL/-ERANGE (nothing changed) for a budget
 * above the reservation or the pool, or below one version. */
int moem_tiers_set_budget(struct moem_tiers *t, uint64_t hbm, uint64_t dram);

/*
 * Warm restart support. The note callback hears, under the tiers lock and
 * in order, every DRAM state change of a version: ready = 1 when its load
 * completed at doff, 0 when a load starts there or the version leaves
 * DRAM. adopt() declares a version already READY at doff in the pool (a
 * persistent region left by a previous process); only before any load.
 */
typedef void (*moem_tiers_note_fn)(void *arg, uint32_t vid, int ready, uint64_t doff);
void moem_tiers_set_note(struct moem_tiers *t, moem_tiers_note_fn fn, void *arg);
int moem_tiers_adopt(struct moem_tiers *t, uint32_t vid, uint64_t doff);

/* Wait until no load or copy is in flight. */
void moem_tiers_drain(struct moem_tiers *t);
void moem_tiers_get_stats(struct moem_tiers *t, struct moem_tiers_stats *s);
/* Where the DRAM copy of a version is: *node (cfg.node_id; -1 when the
 * pool's node is not known) and *off in the pool; -ENOENT if it is not
 * loaded into DRAM, -EINVAL for a bad version. */
int moem_tiers_dram_node(struct moem_tiers *t, uint32_t layer, uint32_t expert, uint32_t pi,
			 int32_t *node, uint64_t *off);
/* Cheap: bytes used (with in-flight allocations) and budgets of both tiers. */
void moem_tiers_usage(struct moem_tiers *t, uint64_t *hbm_used, uint64_t *hbm_budget,
		      uint64_t *dram_used, uint64_t *dram_budget, uint64_t *bytes_nvme);
/* Check every invariant above; -EFAULT with a message naming the first
 * violation. For tests and debug builds. */
int moem_tiers_check(struct moem_tiers *t);
/* Host address of a resident ref's bytes (emulated device), or NULL. */
const void *moem_tiers_host_view(struct moem_tiers *t, const struct moem_xref *ref);

#endif /* MOEM_TIERS_H */
