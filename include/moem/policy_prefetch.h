/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Prefetch (ALGORITHMS.md sec. 5, ExpertFlow): what to fetch ahead and how
 * far ahead. At each layer tick pos the caller reports the routing it
 * just ran (observe) and asks for a plan: experts predicted for ticks
 * pos+1 .. pos+S, nearest tick first, each with its activation
 * probability. The caller drops what is resident or in flight, issues the
 * rest at prefetch priority (below misses), and reports back what
 * happened; the horizon S adapts:
 *
 *   S = clamp(ceil(N_e * E_s * x / (C_s * T_l)) + delta, 1, L - 1)
 *
 * N_e = experts needed to reach cumulative predicted probability cum (0.9)
 * for the next layer, E_s expert bytes, C_s the transfer bandwidth (EWMA,
 * alpha 0.2, from transfer()), T_l the per-layer compute time (EWMA, from
 * layer_time()), x the fraction of planned experts that needed a transfer
 * (moem addition: resident experts cost nothing, so a warm cache needs a
 * shorter horizon; x = 1 is the paper's formula). delta is the feedback:
 * +1 after t_stall (4) stall() events (a prefetched expert was not ready
 * when needed), -1 after t_over (32) early() events (a prefetch landed
 * more than one T_l before its use); both counters reset on a change.
 * "fixed" keeps S constant (the baseline the adaptive horizon is measured
 * against).
 *
 * Predictor: a mixture of
 *   chain     per-(layer, expert) transition statistics to the next layer,
 *             learned online from the same tokens' consecutive layers
 *             (propagated up to `hops` layers ahead),
 *   temporal  per-(layer, expert) statistics from a token's experts at a
 *             layer to its experts at the same layer one step later,
 *   pre-gate  activation probabilities the caller computes for a future
 *             layer (pregate(); the engine applies layer l+S's router to
 *             layer l's hidden state), when it has them,
 *   frequency a decayed per-layer histogram (the prior),
 * weighted by each source's measured recall at distance 1 (the chain's
 * weight decays with distance as recall^d): the learned correction.
 * Traces without pre-gate data run on the other sources alone.
 *
 * Memory: two L x N x N float tables (6 MB for 48 x 128); above 2^24
 * entries the tables are off and only temporal-identity and frequency
 * predict. Per-token statistics use at most 256 tokens of a batch.
 */
#ifndef MOEM_POLICY_PREFETCH_H
#define MOEM_POLICY_PREFETCH_H

#include <stdbool.h>
#include <stdint.h>

struct moem_prefetch_cfg {
	uint32_t n_layers, n_experts, top_k;
	bool adaptive;		/* false: fixed S */
	uint32_t S;		/* fixed S; adaptive: initial S (0 = from the formula) */
	uint32_t t_stall;	/* 4 */
	uint32_t t_over;	/* 32 */
	double cum;		/* 0.9 */
	double bw_alpha;	/* 0.2 */
	double q_min;		/* 0.05: never prefetch a less likely expert */
	uint32_t hops;		/* 4 */
	uint32_t max_per_layer; /* 0 = N */
	/* Initial estimates, replaced by measurements as they arrive. */
	double bw_bytes_per_ns; /* C_s */
	uint64_t layer_ns;	/* T_l */
	uint64_t expert_bytes;	/* E_s */
};

/* Defaults above for a shape; estimates must still be filled in. */
void moem_prefetch_default(struct moem_prefetch_cfg *c, uint32_t n_layers, uint32_t n_experts,
			   uint32_t top_k);
/*
 * "adaptive[:S=..,cum=..,stall=..,over=..,qmin=..,hops=..,max=..]" or
 * "fixed:S=4[,...]"; "none" gives -ENOENT (the caller runs no prefetcher).
 */
int moem_prefetch_parse(const char *spec, struct moem_prefetch_cfg *c);
void moem_prefetch_format(const struct moem_prefetch_cfg *c, char *buf, unsigned len);

struct moem_prefetch;

struct moem_prefetch_req {
	uint64_t pos; /* tick the expert is predicted for */
	uint32_t layer, expert;
	float prob; /* predicted activation probability */
};

int moem_prefetch_create(const struct moem_prefetch_cfg *c, struct moem_prefetch **out);
void moem_prefetch_destroy(struct moem_prefetch *pf);

/*
 * The routing of the layer run at tick pos: ids[tokens][top_k] (-1 =
 * unused). Ticks must increase; a gap (a skipped layer) breaks the chain
 * statistics for that pair only.
 */
int moem_prefetch_observe(struct moem_prefetch *pf, uint64_t pos, uint32_t tokens,
			  const int32_t *ids);
/* Pre-gate activation probabilities [n_experts] for the layer at target_pos. */
void moem_prefetch_pregate(struct moem_prefetch *pf, uint64_t target_pos, const float *prob);
/* A completed transfer of bytes in ns (bandwidth EWMA). */
void moem_prefetch_transfer(struct moem_prefetch *pf, uint64_t bytes, uint64_t ns);
/* Compute time of one layer (T_l EWMA). */
void moem_prefetch_layer_time(struct moem_prefetch *pf, uint64_t ns);
/* Of `planned` experts in the last plan, `fetched` needed a transfer. */
void moem_prefetch_issued(struct moem_prefetch *pf, uint32_t planned, uint32_t fetched);
void moem_prefetch_stall(struct moem_prefetch *pf);
void moem_prefetch_early(struct moem_prefetch *pf);

/* Current horizon S (1..L-1). */
uint32_t moem_prefetch_horizon(const struct moem_prefetch *pf);
/*
 * Plan at tick pos (after observe(pos)): up to cap requests, nearest tick
 * first, then most likely first. Ticks beyond `hops` are planned once,
 * when they enter the horizon; nearer ones are re-planned as information
 * improves (the caller drops duplicates). Returns the count written.
 */
uint32_t moem_prefetch_plan(struct moem_prefetch *pf, uint64_t pos, struct moem_prefetch_req *req,
			    uint32_t cap);
/*
 * Activation probabilities [n_experts] the predictor gives the layer at
 * target_pos (> the last observed tick), for tests and reports.
 */
int moem_prefetch_predict(struct moem_prefetch *pf, uint64_t target_pos, float *prob);
/*
 * Probabilities [n_experts] that each expert of layer is used at the
 * layer's next run (after its last observation): the score moem's "pred"
 * eviction ranks by. -ENOENT (no message) while the layer has not been
 * observed.
 */
int moem_prefetch_reuse(struct moem_prefetch *pf, uint32_t layer, float *prob);
/* The measured transfer bandwidth C_s (bytes/ns) and layer time T_l (ns). */
void moem_prefetch_rates(const struct moem_prefetch *pf, double *bytes_per_ns, double *layer_ns);
/* Mean recall at distance 1 of each source (chain, temporal, pre-gate). */
void moem_prefetch_recall(const struct moem_prefetch *pf, double *chain, double *temporal,
			  double *pregate);

#endif /* MOEM_POLICY_PREFETCH_H */
