/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Routing on the CPU: softmax top-k with each model's weight rule, and the
 * batch-aware re-routing of ALGORITHMS.md (LYNX sec. 1, OEA sec. 2, the
 * resident-set piggyback of sec. 3). Pure functions of their inputs:
 * the CPU backend, the policies and the trace simulator all call these,
 * and the CUDA kernels are checked against them.
 *
 * Conventions for every function here:
 *  - z is [B][N] router logits (float), row-major;
 *  - pad (may be NULL) marks padding tokens (pad[t] != 0): they choose no
 *    expert (cnt[t] = 0) and take no part in batch statistics;
 *  - out: ids[B][k] (expert ids, strongest first; unused slots -1),
 *    w[B][k] (route weights; unused slots 0), cnt[B] (slots used);
 *  - ties in a score are broken towards the lower expert id, so results
 *    are deterministic;
 *  - with expert groups (cfg n_group > 1, DeepSeek-V2's
 *    "group_limited_greedy"), a token may choose only experts of its
 *    topk_group best groups, a group's score being its best logit (the
 *    max of its softmax probabilities in DeepSeek's code; ties to the
 *    lower group): every router below keeps each token to those groups;
 *  - weights follow the model's rule for whatever set S_t was chosen:
 *    p = softmax(z[t]) over all N; w = p[e] for e in S_t; then the
 *    weight rule (enum moem_weight_rule) renormalises and/or scales.
 *    (Qwen3, Mixtral: renormalised; OLMoE: not; DeepSeek-V2: one or the
 *    other, as its own modeling code does.)
 */
#ifndef MOEM_ROUTE_H
#define MOEM_ROUTE_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

/*
 * How top-k weights become route weights. DeepSeek-V2's modeling code
 * renormalises when norm_topk_prob (and k > 1) and otherwise multiplies
 * by routed_scaling_factor, never both; DeepSeek-V3's renormalises and
 * then scales. With routed_scaling 1 (every other architecture) the two
 * agree.
 */
enum moem_weight_rule {
	MOEM_WRULE_NORM_THEN_SCALE = 0, /* w /= sum if norm_topk_prob; w *= scaling */
	MOEM_WRULE_NORM_OR_SCALE =
		1, /* DeepSeek-V2: w /= sum if norm and k > 1, else w *= scaling */
};

struct moem_route_cfg {
	uint32_t n_experts; /* N */
	uint32_t top_k;	    /* k */
	bool norm_topk_prob;
	float routed_scaling; /* 1.0 unless the model says otherwise */
	enum moem_weight_rule rule;
	/*
	 * Group-limited routing: N / n_group experts a group, each token
	 * chooses within its topk_group best groups. n_group 0 or 1, or
	 * topk_group >= n_group: no limit.
	 */
	uint32_t n_group, topk_group;
};

#define MOEM_ROUTE_MAX_GROUPS 64

/* The routing configuration a model's own code uses. */
static inline struct moem_route_cfg moem_route_cfg_of(const struct moem_model_config *c)
{
	struct moem_route_cfg r = {c->n_experts,
				   c->top_k,
				   c->norm_topk_prob,
				   c->routed_scaling,
				   c->arch == MOEM_ARCH_DEEPSEEK_V2 ? MOEM_WRULE_NORM_OR_SCALE
								    : MOEM_WRULE_NORM_THEN_SCALE,
				   c->n_group,
				   c->topk_group};

	return r;
}

/*
 * The rule as (renormalise?, scale) for kernels that implement only
 * "normalise then scale": NORM_OR_SCALE with renormalisation scales by 1.
 */
static inline void moem_route_rule_flat(const struct moem_route_cfg *c, bool *norm, float *scale)
{
	*norm = c->norm_topk_prob && (c->rule != MOEM_WRULE_NORM_OR_SCALE || c->top_k > 1);
	*scale = c->rule == MOEM_WRULE_NORM_OR_SCALE && *norm ? 1.0f : c->routed_scaling;
}

struct moem_route_out {
	int32_t *ids;  /* [B][k] */
	float *w;      /* [B][k] */
	uint32_t *cnt; /* [B] */
};

/* LYNX parameters (ALGORITHMS.md sec. 1): moem default alpha 2, beta 4. */
struct moem_lynx_params {
	float alpha;
	uint32_t beta;
};

/*
 * The groups token row z may choose from: bit g set for each allowed group
 * (every bit when c has no group limit). c must have passed
 * moem_route_groups_check(), as every router here checks it.
 */
uint64_t moem_route_groups(const struct moem_route_cfg *c, const float *z_row);

/*
 * n_group must divide N and be at most 64, topk_group 1..n_group, and the
 * allowed groups must hold at least k experts. 0 or -EINVAL with a message.
 */
int moem_route_groups_check(const struct moem_route_cfg *c);

/* True when c limits tokens to groups. */
static inline bool moem_route_grouped(const struct moem_route_cfg *c)
{
	return c->n_group > 1 && c->topk_group < c->n_group;
}

/* Vanilla routing: top-k by logit per token. */
int moem_route_topk(const struct moem_route_cfg *c, uint32_t B, const float *z, const uint8_t *pad,
		    struct moem_route_out *out);

/*
 * LYNX: bin[t,e] = max(-beta, ceil(alpha * (z[t,e] - max_j z[t,j]))),
 * S[e] = sum_t B^bin[t,e], key[t,e] = bin[t,e] + S[e] / (B + 1); each token
 * takes its own top-1 and then the best keys up to k. Callers apply it only
 * to memory-bound (decode) batches.
 */
int moem_route_lynx(const struct moem_route_cfg *c, const struct moem_lynx_params *p, uint32_t B,
		    const float *z, const uint8_t *pad, struct moem_route_out *out);

/*
 * OEA (simplified, p = 1, k_max = k, maxP = N): S_base = union of each
 * token's top-k0; each token then takes its top-k of z masked to S_base.
 * With extra (may be NULL; [N] non-zero = expert is resident), S_base is
 * widened by those experts first: the lossy resident-set piggyback.
 */
int moem_route_oea(const struct moem_route_cfg *c, uint32_t k0, uint32_t B, const float *z,
		   const uint8_t *pad, const uint8_t *extra, struct moem_route_out *out);

/* moem default k0 = ceil(k / 2). */
static inline uint32_t moem_oea_default_k0(uint32_t k)
{
	return (k + 1) / 2;
}

/*
 * Distinct experts the batch activates (T); if active is non-NULL it gets
 * active[e] = 1 for each one ([N], cleared first).
 */
uint32_t moem_route_active(const struct moem_route_cfg *c, uint32_t B,
			   const struct moem_route_out *out, uint8_t *active);

/* Fill w for a chosen set by the model's rule (used by every router). */
void moem_route_weights(const struct moem_route_cfg *c, const float *z_row, const int32_t *ids,
			uint32_t cnt, float *w);

#endif /* MOEM_ROUTE_H */
