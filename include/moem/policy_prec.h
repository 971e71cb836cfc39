/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Precision policy (ALGORITHMS.md sec. 4, DynaExq): every expert lives in
 * HBM in a low precision, and the n_hi hottest experts of each layer in a
 * high one. A pure state machine the engine drives:
 *
 *   RESIDENT_LO --next()--> PROMOTING --complete()--> RESIDENT_HI
 *   RESIDENT_HI --next()--> DEMOTING  --complete()--> RESIDENT_LO
 *   PROMOTING/DEMOTING --cancel()--> back where they came from
 *
 * The forward pass reads the version use_hi() names: the old one until a
 * transition completes (the copy event fired and the new version was
 * published), so it never waits for a promotion. Storage of the old
 * version is reclaimed by the caller after the compute stream has passed
 * its last reader.
 *
 * Per interval (tick(), T_u = 200 ms) the hotness EMA (policy_hot.h,
 * alpha 0.8) is folded and the target set H[l] recomputed: top-n_hi by
 * score, with hysteresis (an outsider replaces the weakest member only if
 * its score exceeds it by margin 0.02; free places fill without margin).
 * next() hands out transitions, demotions first (they free memory), then
 * promotions hottest first, at most max_inflight (4) in flight per layer.
 * Budgets are the caller's: before starting a transition it reserves the
 * new version's bytes with its moem_tier_budget; if that fails it calls
 * cancel() and the transition is offered again later ("a promotion that
 * does not fit waits"). After complete() it releases the old version's.
 *
 * n_hi comes from the budget (moem_dynaexq_n_hi()):
 *   n_hi = floor((M_hbm - M_fixed - L*N*s_lo - headroom) / (L*(s_hi - s_lo)))
 */
#ifndef MOEM_POLICY_PREC_H
#define MOEM_POLICY_PREC_H

#include <stdbool.h>
#include <stdint.h>

#include "quant.h"

enum moem_xstate {
	MOEM_X_LO = 0, /* RESIDENT_LO */
	MOEM_X_PROMOTING = 1,
	MOEM_X_HI = 2, /* RESIDENT_HI */
	MOEM_X_DEMOTING = 3,
};

struct moem_dynaexq_cfg {
	uint32_t n_layers, n_experts;
	enum moem_prec hi, lo; /* moem default pairs (bf16, q4) and (q4, q2) */
	double alpha;	       /* 0.8 */
	uint64_t interval_ns;  /* 200 ms */
	double margin;	       /* 0.02 */
	uint32_t max_inflight; /* 4 per layer */
	uint32_t n_hi;	       /* per layer */
};

void moem_dynaexq_default(struct moem_dynaexq_cfg *c, uint32_t n_layers, uint32_t n_experts);
/* "dynaexq[:hi=bf16,lo=q4,alpha=..,interval_ms=..,margin=..,inflight=..,n_hi=..]". */
int moem_dynaexq_parse(const char *spec, struct moem_dynaexq_cfg *c, bool *n_hi_given);

/*
 * The budget formula. -ENOSPC with a message if the low versions alone
 * do not fit; n_hi is capped at N.
 */
int moem_dynaexq_n_hi(uint64_t m_hbm, uint64_t m_fixed, uint32_t n_layers, uint32_t n_experts,
		      uint64_t s_hi, uint64_t s_lo, uint64_t headroom, uint32_t *n_hi);

struct moem_dynaexq;

struct moem_dx_action {
	uint32_t layer, expert;
	bool promote; /* else demote */
};

int moem_dynaexq_create(const struct moem_dynaexq_cfg *c, struct moem_dynaexq **out);
void moem_dynaexq_destroy(struct moem_dynaexq *dx);
/* Router picks of one layer (ids < 0 ignored). */
void moem_dynaexq_count(struct moem_dynaexq *dx, uint32_t layer, const int32_t *ids, uint32_t n);
/* Per-expert hit counts [n_experts] of one layer (a device histogram read
 * once per interval), added to the current interval. */
void moem_dynaexq_add_counts(struct moem_dynaexq *dx, uint32_t layer, const uint32_t *counts);
/* Advance the clock; returns 1 if an interval closed and targets were recomputed. */
int moem_dynaexq_tick(struct moem_dynaexq *dx, uint64_t now_ns);
/* Recompute targets now (after a budget change or in tests). */
void moem_dynaexq_retarget(struct moem_dynaexq *dx);
/* A new n_hi (budget change); targets are recomputed. */
void moem_dynaexq_set_n_hi(struct moem_dynaexq *dx, uint32_t n_hi);
/*
 * The next transition to start: 1 and *a (its state is now PROMOTING or
 * DEMOTING), or 0 if none is due or allowed. Layers are served round
 * robin so one busy layer does not starve the others.
 */
int moem_dynaexq_next(struct moem_dynaexq *dx, struct moem_dx_action *a);
/* The caller could not start a (budget): back to its old state. */
void moem_dynaexq_cancel(struct moem_dynaexq *dx, const struct moem_dx_action *a);
/* The transition's copy completed and the new version is published. */
int moem_dynaexq_complete(struct moem_dynaexq *dx, const struct moem_dx_action *a);
enum moem_xstate moem_dynaexq_state(const struct moem_dynaexq *dx, uint32_t layer, uint32_t expert);
/* The version the forward pass reads right now. */
bool moem_dynaexq_use_hi(const struct moem_dynaexq *dx, uint32_t layer, uint32_t expert);
/* Target membership (H[l]) and its size, in-flight count of a layer. */
bool moem_dynaexq_target(const struct moem_dynaexq *dx, uint32_t layer, uint32_t expert);
uint32_t moem_dynaexq_target_count(const struct moem_dynaexq *dx, uint32_t layer);
uint32_t moem_dynaexq_inflight(const struct moem_dynaexq *dx, uint32_t layer);
const float *moem_dynaexq_scores(const struct moem_dynaexq *dx, uint32_t layer);

#endif /* MOEM_POLICY_PREC_H */
