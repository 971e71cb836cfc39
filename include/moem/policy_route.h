/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Routing policy (ALGORITHMS.md secs. 1-3): which experts a batch
 * activates and in which order they run. It wraps the routers of route.h
 * with a choice and its parameters:
 *
 *   none         vanilla top-k
 *   lynx         LYNX batch-level reduction (alpha 2, beta 4), applied only
 *                to memory-bound (decode) batches unless any=1
 *   oea          OEA (k0 = ceil(k/2))
 *   cache-aware  vanilla top-k, resident experts run first and misses are
 *                issued at top transfer priority (lossless)
 *   piggyback    OEA with S_base widened by the experts resident in HBM
 *                for the layer (lossy, opt-in), run in cache-aware order
 *   prune        top-k0 only (the lossy baseline OEA is measured against)
 *
 * The first five have the values of the sysfs "reroute" knob.
 */
#ifndef MOEM_POLICY_ROUTE_H
#define MOEM_POLICY_ROUTE_H

#include <stdbool.h>
#include <stdint.h>

#include "route.h"

enum moem_route_kind {
	MOEM_RP_NONE = 0,
	MOEM_RP_LYNX = 1,
	MOEM_RP_OEA = 2,
	MOEM_RP_CACHE_AWARE = 3,
	MOEM_RP_PIGGYBACK = 4,
	MOEM_RP_PRUNE = 5,
	MOEM_RP_NR
};

struct moem_route_policy {
	enum moem_route_kind kind;
	struct moem_lynx_params lynx;
	uint32_t k0;	/* oea, piggyback, prune */
	bool any_batch; /* lynx also on compute-bound batches */
};

const char *moem_route_kind_name(enum moem_route_kind k);
/* Defaults of ALGORITHMS.md for a model with top_k k. */
void moem_route_policy_default(enum moem_route_kind kind, uint32_t top_k,
			       struct moem_route_policy *rp);
/*
 * Parse "lynx:alpha=2,beta=4", "oea:k0=3", "piggyback:k0=4", "prune:k0=2",
 * "none", "cache-aware" (lynx also takes any=1). -EINVAL with a message.
 */
int moem_route_policy_parse(const char *spec, uint32_t top_k, struct moem_route_policy *rp);
/* Describe rp as a spec string ("lynx:alpha=2,beta=4"). */
void moem_route_policy_format(const struct moem_route_policy *rp, char *buf, unsigned len);
/* True if the policy needs router logits (it re-routes). */
bool moem_route_policy_needs_logits(const struct moem_route_policy *rp);
/* True if resident experts run first (cache-aware execution order). */
bool moem_route_policy_ordered(const struct moem_route_policy *rp);

/*
 * Route one layer's batch. z, pad, out as route.h; resident ([N], may be
 * NULL) marks experts of this layer complete in HBM (piggyback reads it);
 * memory_bound says the batch is a decode batch (LYNX's rule). Pure.
 */
int moem_route_policy_apply(const struct moem_route_policy *rp, const struct moem_route_cfg *c,
			    uint32_t B, const float *z, const uint8_t *pad, const uint8_t *resident,
			    bool memory_bound, struct moem_route_out *out);

/*
 * Cache-aware execution order of one layer: the active experts ([N]
 * flags) with resident ones first (ascending id), then the misses
 * (ascending id: the order their transfers are issued, all at miss
 * priority). Returns the number of active experts written to order;
 * *n_resident gets how many lead. resident may be NULL (all misses).
 */
uint32_t moem_route_exec_order(uint32_t n_experts, const uint8_t *active, const uint8_t *resident,
			       uint32_t *order, uint32_t *n_resident);

#endif /* MOEM_POLICY_ROUTE_H */
