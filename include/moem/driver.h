/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The policy driver: the one place where placement decisions are made
 * from events (DESIGN.md, "One policy driver"). The engine feeds it real
 * events from its decode loop and the tiers; the simulator (sim.h) feeds
 * it a routing trace and takes time from the cost model (cost.h). Both
 * run the same decisions: what to evict, what to prefetch and how far
 * ahead, what to cancel, which precision each expert is planned in
 * (DynaExq), what FluxMoE keeps resident and pages through its window.
 * They differ only in where time comes from and in how bytes move.
 *
 * Who owns what. The owner (engine or simulator) owns residency: which
 * versions are in HBM or DRAM, in flight, pinned; it moves bytes and
 * enforces budgets. It tells the driver what happened and offers it
 * candidates; the driver owns the policies (policy.h) and their metadata,
 * and acts on residency only through the owner's ops below. The driver
 * never reads a clock: times come in as arguments.
 *
 * Keys and versions: key = layer * N + expert (a MoE layer's expert);
 * version id vid = key * 2 + pi, pi 0 the high and 1 the low precision
 * (the tiers' numbering). Ticks: pos = step * L + layer (policy.h).
 *
 * The call sequence for MoE layer m at tick pos (the engine's layer.c and
 * the simulator's sim.c both follow it):
 *
 *   moem_driver_routed(pos, ids, keys) routing known: stale prefetches
 *                                      are cancelled, the predictor
 *                                      learns, the layer's experts are
 *                                      pinned against eviction
 *   moem_driver_pregate(pos + d, prob) optional: layer m+d's router on the
 *                                      current hidden state (pre-gate)
 *   for each active expert: the owner makes it resident (its own
 *   mechanism; room comes from moem_driver_pick()), then
 *   moem_driver_used(key, state)       hit / in flight / missed
 *   moem_driver_layer_time(ns)         the layer's compute time
 *   moem_driver_lookahead()            plan and issue prefetches
 *   moem_driver_layer_end(now)         precision transitions, paging
 *                                      migration
 * and per step moem_driver_step_end(); moem_driver_transfer() on every
 * completed copy; moem_driver_set_budget() when a budget moves.
 *
 * Events carry their tick, so an owner that learns a layer's routing one
 * step late (device-side routing) can feed them behind time; decisions
 * are made relative to the newest tick seen.
 *
 * Threads: moem_driver_pick(), moem_driver_inserted() and
 * moem_driver_removed() may be called from any thread while the owner
 * holds its own residency lock (the tiers call them from their transfer
 * thread); every other call comes from one thread. The driver holds its
 * own lock only inside its functions and never while it calls an op, so
 * the order is always owner's lock -> driver's lock.
 */
#ifndef MOEM_DRIVER_H
#define MOEM_DRIVER_H

#include <stdbool.h>
#include <stdint.h>

#include "cost.h"
#include "policy.h"
#include "xfer.h"

/* HBM state of the planned version of a key, as the owner sees it. */
enum moem_res {
	MOEM_RES_ABSENT = 0,
	MOEM_RES_FLIGHT = 1, /* a transfer is queued or running */
	MOEM_RES_RESIDENT = 2,
};

/* What the driver asks of the owner. arg is the ops' argument. */
struct moem_driver_ops {
	/* HBM state of key's planned version. */
	enum moem_res (*state)(void *arg, uint32_t key);
	/*
	 * Start moving key's planned version into HBM at prio (for a
	 * prefetch, predicted for tick tpos). Room comes from
	 * moem_driver_pick(). 1 started, 0 there or under way already,
	 * -EAGAIN nothing the policy may evict, other -errno errors.
	 */
	int (*fetch)(void *arg, uint32_t key, enum moem_prio prio, uint64_t tpos);
	/* Withdraw key's queued transfer if none of it has moved yet: true if it is gone. */
	bool (*cancel)(void *arg, uint32_t key);
	/*
	 * DynaExq: start a transition of key to pi (promote: to hi, pi 0),
	 * reserving the new version's bytes; the handle switches when the
	 * copy lands. 0 started, -EAGAIN no room now (it is offered again
	 * later), other -errno errors. May be NULL without DynaExq.
	 */
	int (*transition)(void *arg, uint32_t key, uint32_t pi);
	/* Precision index key resolves to now (published), or -1. */
	int (*published)(void *arg, uint32_t key);
	/*
	 * FluxMoE: key joins the resident set (keep: 0 if its planned version
	 * is in HBM now, which the driver then protects from eviction; -EAGAIN
	 * if it is not, and the driver tries again at a later step) or leaves
	 * it (!keep: 0; it stays cached until evicted). May be NULL without
	 * paging.
	 */
	int (*keep)(void *arg, uint32_t key, bool keep);
	/*
	 * A planned prefetch of key, which the tiers hold already but HBM
	 * may not (a UVM arena, paged by the CUDA driver): hint the move.
	 * 1 hinted, 0 not (counted as issued when 1). May be NULL.
	 */
	int (*advise)(void *arg, uint32_t key);
};

/* What runs: the components of a policy (sim presets and engine options alike). */
/*
 * How the DRAM tier chooses its victims (moem_driver_dram_pick):
 *  lru       least recently staged or copied to HBM (the default: DRAM
 *            serves HBM's misses, and this ranks by the last one);
 *  policy    the HBM policy (--evict) over DRAM, pred's scores included;
 *  hbm-first the versions that also hold an HBM slot first (DRAM keeps
 *            what HBM does not), then LRU. Such a version is read from
 *            NVMe again when HBM evicts it unless the cost model copies
 *            it back (cfg.copy_back, moem_driver_copy_back()).
 * Documentation/tiers.md has the rule and the measurements behind the
 * default.
 */
enum moem_dram_rule {
	MOEM_DRAM_LRU = 0,
	MOEM_DRAM_POLICY = 1,
	MOEM_DRAM_HBM_FIRST = 2,
};

/* "lru", "policy", "hbm-first" (NULL: lru); -EINVAL with a message. */
int moem_dram_rule_parse(const char *s, enum moem_dram_rule *out);
const char *moem_dram_rule_name(enum moem_dram_rule r);

struct moem_driver_cfg {
	uint32_t n_layers, n_experts, top_k;
	struct moem_evict_cfg evict; /* shape fields are the driver's */
	enum moem_dram_rule dram;    /* the DRAM tier's victims */
	bool predictor;		     /* keep a predictor (prefetch, or pred's scores) */
	bool prefetch;		     /* issue prefetches */
	struct moem_prefetch_cfg pf; /* shape and estimates are the driver's */
	uint32_t pf_queue;	     /* prefetches in flight at most (64) */
	bool dynaexq;
	struct moem_dynaexq_cfg dx; /* n_hi from the owner */
	bool dx_count_ids;	    /* count routed ids (else the owner feeds counts) */
	bool paging;
	struct moem_paging_cfg pg; /* capacity and initial from the owner */
	uint32_t pg_window;	   /* FluxMoE: experts of the next layer paged in at most */
	struct moem_cost cost;
	uint64_t expert_bytes; /* bytes of a planned (hi) version, for the horizon */
	uint64_t hbm_slots;    /* expert versions the HBM budget holds (0: no LRU duel) */
	/* Exclusive DRAM as the cost model decides (moem_driver_copy_back()):
	 * the owner can copy a version back device -> host and DRAM is below
	 * the model. Keeps a predictor (the decision reads its estimates). */
	bool copy_back;
	/*
	 * The predictor is there only for hybrid execution's keep value
	 * (moem_driver_keep_ns()), which asks about a layer's next run: a
	 * pre-gate, which predicts the layers still ahead in this step, cannot
	 * change it, so moem_driver_wants_pregate() says no and
	 * moem_driver_pregate() does nothing (the owner spares the router
	 * passes and, on a GPU, their round trips).
	 */
	bool keep_only;
};

/*
 * Whether nothing in c but hybrid execution's keep value would read a
 * predictor (no prefetch, pred eviction, copy-back, paging or DynaExq):
 * an owner that keeps one for the keep value sets cfg.keep_only from it,
 * the engine and `moem sim` by this one rule.
 */
bool moem_driver_cfg_keep_only(const struct moem_driver_cfg *c);

/* Counters since creation (an owner subtracts a snapshot to leave out a warm-up). */
struct moem_driver_stats {
	uint64_t pf_issued, pf_used, pf_wasted;
	uint64_t s_sum, s_n; /* prefetch horizon summed over lookaheads */
};

struct moem_driver;

int moem_driver_create(const struct moem_driver_cfg *c, const struct moem_driver_ops *ops,
		       void *arg, struct moem_driver **out);
void moem_driver_destroy(struct moem_driver *d);

/* ---- events ------------------------------------------------------------- */

/*
 * Pre-gate activation probabilities [N] for the layer at target_pos (after
 * moem_driver_routed() of the layer whose input gave them): the predictor
 * weighs them by their measured recall at that distance, and pred's
 * scores of that layer follow at once.
 */
void moem_driver_pregate(struct moem_driver *d, uint64_t target_pos, const float *prob);
/*
 * Whether moem_driver_pregate() has any effect: only the predictor reads
 * it, so without one (no prefetch, paging, pred eviction, hybrid keep
 * value or copy-back), or with one kept for the keep value alone
 * (cfg.keep_only), the owner can spare the D router passes a layer the
 * pre-gate costs.
 */
bool moem_driver_wants_pregate(const struct moem_driver *d);
/*
 * The routing of tick pos is known: ids[tokens][top_k] (-1 unused; kept
 * by the owner until moem_driver_layer_end()) and the T distinct active
 * keys, which are pinned against eviction until the next tick.
 */
int moem_driver_routed(struct moem_driver *d, uint64_t pos, uint32_t tokens, const int32_t *ids,
		       const uint32_t *keys, uint32_t T);
/*
 * An active expert of the current layer and its state when the layer
 * needed it (after the owner started a fetch for a miss): resident (early:
 * it landed more than a layer's compute before), in flight, or absent.
 */
void moem_driver_used(struct moem_driver *d, uint32_t key, enum moem_res state, bool early);
/* The owner is done with key for this layer (it ran): it may be evicted again. */
void moem_driver_unpin(struct moem_driver *d, uint32_t key);
/* The current layer's compute time (the prefetch horizon's T_l). */
void moem_driver_layer_time(struct moem_driver *d, uint64_t ns);
/* A completed transfer of bytes in ns (the horizon's C_s). */
void moem_driver_transfer(struct moem_driver *d, uint64_t bytes, uint64_t ns);
/* Plan prefetches for the ticks ahead of the current one and issue them. */
int moem_driver_lookahead(struct moem_driver *d);
/*
 * FluxMoE: page in the next layer's window (its most likely experts, from
 * the pre-gate and the predictor) as the current layer starts, at
 * prefetch priority and within the link time the cost model says is idle.
 */
int moem_driver_page_next(struct moem_driver *d);
/*
 * The layer is done: DynaExq counts, ticks (now_ns is the owner's clock,
 * for the hotness interval) and starts transitions; FluxMoE makes its one
 * migration.
 */
int moem_driver_layer_end(struct moem_driver *d, uint64_t now_ns);
/* A step is done: FluxMoE's rho controller (compute and streaming time). */
void moem_driver_step_end(struct moem_driver *d, double tau_comp_ns, double tau_load_ns);
/* DynaExq counts of one layer [N] (a device histogram; dx_count_ids off). */
void moem_driver_counts(struct moem_driver *d, uint32_t layer, const uint32_t *counts);

/* ---- the evictor ---------------------------------------------------------- */

/*
 * A victim for the version incoming (MOEM_NO_VERSION for a budget shrink)
 * fetched at prio, among the versions ok() accepts, never one of the
 * current layer's experts or of FluxMoE's resident set. A miss may evict
 * anything; a speculative fetch only what the policy values less than
 * what comes in. 0 and *vid, or -ENOENT.
 */
int moem_driver_pick(struct moem_driver *d, uint32_t incoming, enum moem_prio prio,
		     bool (*ok)(void *arg, uint32_t vid), void *arg, uint32_t *vid);
/* vid took an HBM slot (in flight or resident) / gave it up. */
void moem_driver_inserted(struct moem_driver *d, uint32_t vid);
void moem_driver_removed(struct moem_driver *d, uint32_t vid);

/*
 * The DRAM tier's evictor, under cfg.dram, over the versions staged in
 * DRAM; the engine and the simulator both use it. dram_inserted: vid's
 * load into DRAM started (a victim is only ever one ok() accepts, never
 * one still loading); dram_used: a copy out of DRAM started;
 * dram_removed: evicted. dram_pick: 0 and *vid among what ok() accepts
 * (never the current layer's experts nor a prefetch in flight), or
 * -ENOENT.
 */
void moem_driver_dram_inserted(struct moem_driver *d, uint32_t vid);
void moem_driver_dram_used(struct moem_driver *d, uint32_t vid);
void moem_driver_dram_removed(struct moem_driver *d, uint32_t vid);
int moem_driver_dram_pick(struct moem_driver *d, bool (*ok)(void *arg, uint32_t vid), void *arg,
			  uint32_t *vid);

/*
 * Exclusive or inclusive DRAM, per eviction (cfg.copy_back): vid is
 * leaving HBM and DRAM does not hold it. Copy it back into DRAM (device
 * -> host) rather than drop it and read it from NVMe at its next use?
 * room: DRAM has room for its bytes without evicting anything; else
 * *dram_victim is the DRAM rule's victim (among what ok() accepts, as
 * moem_driver_dram_pick()), which the owner evicts first. reuse_p, the
 * chance that vid is used before DRAM would evict it, is the predictor's
 * probability that its layer's next run uses it, or 0 when the DRAM
 * victim is expected to be used before vid (the copy would push out
 * something worth more) or the predictor does not know vid's layer yet;
 * then moem_cost_copy_back() decides. true: copy it back.
 */
bool moem_driver_copy_back(struct moem_driver *d, uint32_t vid, uint64_t bytes, bool room,
			   bool (*ok)(void *arg, uint32_t vid), void *arg, uint32_t *dram_victim);

/*
 * A miss found no victim: withdraw one prefetch not yet started, else let
 * go of those that have landed (true if either freed something).
 */
bool moem_driver_reclaim(struct moem_driver *d);

/* ---- queries and settings ------------------------------------------------ */

void moem_driver_get_stats(const struct moem_driver *d, struct moem_driver_stats *s);
/* The prefetch horizon S (0 without prefetch). */
uint32_t moem_driver_horizon(struct moem_driver *d);
/* Prefetch no farther than depth ticks ahead (the prefetch_depth knob; 0: none). */
void moem_driver_set_depth(struct moem_driver *d, uint32_t depth);
/* DynaExq: the version the forward pass reads for (layer, expert) (true: hi). */
bool moem_driver_use_hi(struct moem_driver *d, uint32_t layer, uint32_t expert);
/* FluxMoE: key is in the resident set. */
bool moem_driver_resident(const struct moem_driver *d, uint32_t key);
/* FluxMoE: the keys of layer's window (not resident), written to keys; the count. */
uint32_t moem_driver_window(const struct moem_driver *d, uint32_t layer, uint32_t *keys);
/* The HBM budget moved: the versions it holds (the LRU duel's shadow size). */
void moem_driver_set_slots(struct moem_driver *d, uint64_t slots);
/* New budget-derived sizes: DynaExq's n_hi per layer, FluxMoE's capacity. */
void moem_driver_set_n_hi(struct moem_driver *d, uint32_t n_hi);
void moem_driver_set_capacity(struct moem_driver *d, uint32_t capacity);
/* FluxMoE: experts of the next layer paged in at most (the batch moved). */
void moem_driver_set_window(struct moem_driver *d, uint32_t window);
/*
 * The tick at which key is next expected to be used, from the predictor
 * (pred's ranking: its layer's next run plus L (1 - q) / q); INFINITY
 * before the predictor has seen its layer or without a predictor.
 */
double moem_driver_expected_use(struct moem_driver *d, uint32_t key);
/*
 * Hybrid execution's keep_ns (cost.h, moem_cost_exec_next()): what bringing
 * key into HBM now is worth against computing it on the CPU: the chance
 * that its next use comes while HBM still holds it, times use_ns, what
 * that use would cost away from HBM. The chance, as copy-back weighs DRAM:
 * 1 - (1 - q)^runs, q the predictor's chance of a use at the layer's next
 * run, runs the layer's runs HBM keeps a version (slots over insertions
 * per tick as of the layer's routing, over L). One use, not all of them:
 * the version it evicts had uses ahead too (the eviction policy's lowest
 * ranked), and counting every use sent nothing to the CPU at batch 1 in
 * the simulator. 0 without a predictor or before it has seen the layer.
 */
uint64_t moem_driver_keep_ns(struct moem_driver *d, uint32_t key, uint64_t use_ns);
/*
 * Where key runs this step under hybrid execution: moem_cost_exec_next()
 * with xc (the cost model with the CPU's figures) and keep_ns as above, the
 * use's CPU cost from xc, once the layer has given the link a load
 * (q->link_ns); before that keep_ns is 0, as an expert computed on the CPU
 * then still reaches HBM behind the layer (moem_driver_exec_keep()). The
 * one call the engine (moem_eng_exec_of()) and the simulator make, so that
 * they decide alike.
 */
enum moem_exec moem_driver_exec_next(struct moem_driver *d, const struct moem_cost *xc,
				     struct moem_exec_queue *q, uint32_t key, uint64_t bytes,
				     uint32_t tokens, bool resident, bool in_dram, bool force);
/*
 * After a layer's split (q its queues), for the n keys the cost model sent
 * to the CPU: if the layer gave the link none of its loads, bring each into
 * HBM behind the layer at prefetch priority, for the layer's next run with
 * the predictor's chance of a use there: the link is idle while the CPU
 * computes, and a CPU-computed expert would otherwise never enter HBM (a
 * CPU many times faster than the link kept HBM as the warm-up left it).
 * The prefetch rules decide: the policy's victim must be worth less
 * (expected later), at most pf_queue in flight; counted as a prefetch.
 * Not under FluxMoE's paging, whose window decides what enters HBM.
 * Called by the engine before its lookahead and by the simulator at the
 * same point. 0, or -errno when a fetch failed.
 */
int moem_driver_exec_keep(struct moem_driver *d, const struct moem_exec_queue *q,
			  const uint32_t *keys, uint32_t n);
/* The cost model the driver decides with (the engine updates it from measurements). */
const struct moem_cost *moem_driver_cost(const struct moem_driver *d);

#endif /* MOEM_DRIVER_H */
