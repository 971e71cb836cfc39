/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Scheduling policies (ALGORITHMS.md secs. 1-6): pure, deterministic C
 * modules with an event interface. A policy never reads a clock, calls
 * CUDA or does I/O: time (ns) and events come in as arguments, decisions
 * come out. The same code runs inside the engine and inside the trace
 * simulator (sim.h), which is how it is tested.
 *
 * Who owns what:
 *  - The caller (engine or simulator) owns residency: which (layer,
 *    expert, precision) versions are in HBM / DRAM, in use by a kernel, or
 *    in flight on the copy engine. It enforces budgets with a
 *    moem_tier_budget (below): a byte is reserved before a copy starts
 *    and released after the old storage is reclaimed, so a budget is
 *    never exceeded.
 *  - Policies own only their metadata (LRU order, counts, scores,
 *    horizon, transition statistics) and choose among candidates the
 *    caller offers (eviction never picks an in-use or in-flight slot,
 *    because the caller's evictable() callback says no).
 *
 * The parts: policy_route.h (which experts a batch activates and in which
 * order they run), policy_evict.h (LRU, two-level LRU, LFU; Belady MIN
 * offline), policy_prefetch.h (ExpertFlow adaptive horizon and
 * predictor), policy_prec.h (DynaExq hotness-driven mixed precision),
 * policy_paging.h (FluxMoE window, placement and rho controller),
 * policy_hot.h (hotness EMA shared by the last two).
 *
 * Two clocks: expert keys and the layer clock.
 *   key = layer * n_experts + expert        (layer = MoE-layer index)
 *   pos = step * n_layers + layer           (one tick per MoE layer run)
 * Every policy that speaks of "the next S layers" counts in pos.
 */
#ifndef MOEM_POLICY_H
#define MOEM_POLICY_H

#include <stdbool.h>
#include <stdint.h>

static inline uint32_t moem_key(uint32_t layer, uint32_t expert, uint32_t n_experts)
{
	return layer * n_experts + expert;
}

static inline uint64_t moem_pos(uint64_t step, uint32_t layer, uint32_t n_layers)
{
	return step * n_layers + layer;
}

/*
 * Policy specs, as users write them: "name" or "name:key=value,key=value"
 * (--policy lru2:W=2, --route lynx:alpha=2,beta=4). Values are read with
 * the typed getters, which check ranges and mark a key used; spec_done()
 * then rejects any key nobody read, so a typo is an error, not a silent
 * default.
 */
#define MOEM_SPEC_MAX_PARAMS 24
#define MOEM_SPEC_NAME_MAX   32
#define MOEM_SPEC_KEY_MAX    24
#define MOEM_SPEC_VAL_MAX    48

struct moem_spec {
	char name[MOEM_SPEC_NAME_MAX];
	uint32_t n;
	struct {
		char key[MOEM_SPEC_KEY_MAX];
		char val[MOEM_SPEC_VAL_MAX];
		bool used;
	} p[MOEM_SPEC_MAX_PARAMS];
};

/* Parse s; -EINVAL with a message on syntax errors, long fields, repeats. */
int moem_spec_parse(const char *s, struct moem_spec *sp);
/* Getters: 0 (absent: *v untouched; present: parsed and range-checked). */
int moem_spec_u32(struct moem_spec *sp, const char *key, uint32_t lo, uint32_t hi, uint32_t *v);
int moem_spec_f64(struct moem_spec *sp, const char *key, double lo, double hi, double *v);
int moem_spec_bool(struct moem_spec *sp, const char *key, bool *v);
/* String value (borrowed from sp) or NULL if absent. */
const char *moem_spec_str(struct moem_spec *sp, const char *key);
/* -EINVAL naming the first key no getter asked for. */
int moem_spec_done(const struct moem_spec *sp);

/*
 * Budget tracker for one tier (HBM or DRAM bytes). Not thread-safe: the
 * caller serialises (the engine's scheduler thread owns it).
 *  - try_reserve() grants bytes only if used + bytes <= limit, so a
 *    granted reservation never exceeds the budget;
 *  - set_limit() may drop the limit below what is in use (a budget
 *    change); excess() then says how much the caller must free, and no
 *    reservation is granted until it has.
 */
struct moem_tier_budget {
	uint64_t limit;
	uint64_t used;
	uint64_t peak;	  /* highest used ever */
	uint64_t refused; /* try_reserve() calls that failed */
};

void moem_tier_budget_init(struct moem_tier_budget *b, uint64_t limit);
bool moem_tier_budget_try_reserve(struct moem_tier_budget *b, uint64_t bytes);
/* -EINVAL (nothing changed) if bytes > used: a caller bug, reported. */
int moem_tier_budget_release(struct moem_tier_budget *b, uint64_t bytes);
void moem_tier_budget_set_limit(struct moem_tier_budget *b, uint64_t limit);
uint64_t moem_tier_budget_excess(const struct moem_tier_budget *b);
uint64_t moem_tier_budget_avail(const struct moem_tier_budget *b);

#include "policy_hot.h"
#include "policy_route.h"
#include "policy_evict.h"
#include "policy_prefetch.h"
#include "policy_prec.h"
#include "policy_paging.h"

#endif /* MOEM_POLICY_H */
