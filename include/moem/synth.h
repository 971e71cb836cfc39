/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The structured synthetic workload behind synthetic models (moem mkmodel),
 * synthetic traces (moem trace gen) and the engine's generated hidden
 * states. No real MoE weights or prompts are reachable here, so routing
 * must still look like real routing to the scheduling policies:
 *
 *  - W workloads (text, math, code, ...). Workload w ranks the N experts
 *    of MoE layer m by a permutation pi[w][m]; a token's "intent" experts
 *    are drawn by a Zipf(s) law over ranks, so a few experts are hot.
 *    The rankings differ across workloads (each starts from a shared
 *    global ranking shuffled by (1 - overlap) * N random transpositions).
 *  - Consecutive layers are correlated the way a residual stream makes
 *    them: a fixed map M[m] sends experts of layer m to layer m + 1, the
 *    rankings satisfy pi[w][m+1] ~ M[m] o pi[w][m] (plus reshuffle * N
 *    transpositions), and a token's intent j at layer m + 1 follows
 *    M[m](intent j at layer m) with probability layer_corr.
 *  - Decode has temporal locality: each intent persists to the sequence's
 *    next token with probability persist.
 *  - Drift: each step, with probability drift per (workload, layer), the
 *    expert at a Zipf-drawn rank trades places with one at a uniform rank.
 *  - Batch composition: B slots, each running a sequence of one workload
 *    (drawn from the mix) and geometric length (mean mean_seq_len); a
 *    finished sequence is replaced by a new one.
 *
 * A token's routing target at MoE layer m is the logit vector
 *   a[e] = boost * (1 - 0.5 * j / K)  if e is its j-th intent (j < K)
 *   a[e] = 0                          otherwise,
 * observed with Gaussian noise of standard deviation noise.
 *
 * Synthetic models realise this through real router weights: the router
 * rows of MoE layer m are g[m][e] = gain * u[m][e], with u unit vectors
 * from moem_synth_basis() (orthonormal across all layers when
 * n_moe_layers * N <= hidden), and a token enters the MoE stack as
 *   h0 = sum_m sum_e a[m][e] * u[m][e] + noise * eps,  eps ~ N(0, I).
 * Since rmsnorm(h0) . g[m][e] = gain * sqrt(H) / |h0| * (a[m][e] + noise *
 * N(0,1)) and |h0| ~ sqrt(sum a^2 + noise^2 * H), mkmodel picks
 * gain = sqrt(E|h0|^2 / H) so router logits equal the target up to a few
 * percent. The residual stream then carries every layer's signal forward.
 * Synthetic traces sample the same targets directly (no weights needed).
 */
#ifndef MOEM_SYNTH_H
#define MOEM_SYNTH_H

#include <stdint.h>

#include "rng.h"

#define MOEM_SYNTH_MAX_WORKLOADS 8
#define MOEM_SYNTH_NAME_MAX	 16

struct json_object;

struct moem_synth_params {
	uint32_t n_layers;    /* MoE layers (dense layers are not counted) */
	uint32_t n_experts;   /* N */
	uint32_t top_k;	      /* K: intents per token per layer */
	uint32_t n_workloads; /* W, 1..MOEM_SYNTH_MAX_WORKLOADS */
	char workload[MOEM_SYNTH_MAX_WORKLOADS][MOEM_SYNTH_NAME_MAX];
	double zipf_s;	     /* Zipf exponent over ranks (default 1.7) */
	double overlap;	     /* ranking overlap across workloads, 0..1 (0.8) */
	double reshuffle;    /* ranking noise between layers, 0..1 (0.1) */
	double layer_corr;   /* follow M[m] from the previous layer (0.6) */
	double persist;	     /* intent kept to the next token (0.5) */
	double drift;	     /* swaps per (workload, layer) per step (0.02) */
	double mean_seq_len; /* mean decode length of a sequence (256) */
	double boost;	     /* logit of the first intent (4.5) */
	double noise;	     /* std of logit noise (0.5) */
	uint64_t seed;
};

/*
 * Fill the defaults above for the given shape (workloads text, math,
 * code): they reproduce published routing statistics (the sources are
 * listed next to moem_synth_defaults() in runtime/model/synth/synth.c).
 */
void moem_synth_defaults(struct moem_synth_params *p, uint32_t n_layers, uint32_t n_experts,
			 uint32_t top_k, uint64_t seed);
/* Range checks with a message naming the field. */
int moem_synth_validate(const struct moem_synth_params *p);

/*
 * JSON form, written by mkmodel as moem_synth.json next to config.json:
 * {"version":1, "n_layers":..,"n_experts":..,"top_k":..,"workloads":["text",..],
 *  "zipf_s":..,"overlap":..,"reshuffle":..,"layer_corr":..,"persist":..,
 *  "drift":..,"mean_seq_len":..,"boost":..,"noise":..,"seed":..}
 */
int moem_synth_to_json(const struct moem_synth_params *p, struct json_object **out);
int moem_synth_from_json(struct json_object *obj, struct moem_synth_params *p);

/*
 * Parse a workload mix "text:0.5,math:0.3,code:0.2" (names from p, weights
 * >= 0, at least one > 0; missing workloads get 0) into mix[n_workloads],
 * normalised to sum 1. NULL or "" means uniform.
 */
int moem_synth_parse_mix(const struct moem_synth_params *p, const char *s, double *mix);

struct moem_synth;

/* A generator for a batch of B slots; mix may be NULL (uniform). */
int moem_synth_create(const struct moem_synth_params *p, const double *mix, uint32_t batch,
		      struct moem_synth **out);
void moem_synth_destroy(struct moem_synth *g);

/* Advance to the next decode step (the first call produces step 0). */
void moem_synth_step(struct moem_synth *g);

uint64_t moem_synth_cur_step(const struct moem_synth *g);
uint32_t moem_synth_batch(const struct moem_synth *g);
const struct moem_synth_params *moem_synth_params(const struct moem_synth *g);
/* Workload of slot b at the current step, and its sequence id. */
uint32_t moem_synth_workload(const struct moem_synth *g, uint32_t b);
uint64_t moem_synth_seq_id(const struct moem_synth *g, uint32_t b);
/* The K intent experts of slot b at MoE layer m, strongest first. */
const uint16_t *moem_synth_intents(const struct moem_synth *g, uint32_t b, uint32_t m);
/*
 * The generator's hidden structure, for bounds on online policies (what a
 * predictor that knew the generator could do; bench/sim/online_bound.c):
 * the probability that one Zipf draw of workload w at layer m picks
 * expert e (before draws of the same token's other intents are excluded),
 * and M[m], the map a redrawn intent follows from layer m to m + 1
 * (NULL for the last layer).
 */
double moem_synth_zipf_p(const struct moem_synth *g, uint32_t w, uint32_t m, uint32_t e);
const uint16_t *moem_synth_layer_map(const struct moem_synth *g, uint32_t m);
/* Target logit of the j-th intent. */
double moem_synth_intent_logit(const struct moem_synth_params *p, uint32_t j);

/*
 * Noisy router logits z[N] = a + noise * N(0,1) for slot b at layer m,
 * from the generator's own noise stream (traces use this).
 */
void moem_synth_logits(struct moem_synth *g, uint32_t b, uint32_t m, float *z);

/*
 * Pre-gate logits z[N] for slot b: layer (m + d)'s router applied to layer
 * m's input hidden state, d >= 1 (d = 0 is the layer's own logits, as
 * moem_synth_logits()). A real residual stream carries the later layers'
 * routing only in part, the less the farther: each of the token's intents
 * at layer m + d is seen with probability
 *   p(d) = MOEM_SYNTH_PG_FAR + (MOEM_SYNTH_PG_NEAR - MOEM_SYNTH_PG_FAR)
 *          * exp(-(d - 1) / MOEM_SYNTH_PG_DECAY)
 * and otherwise replaced by a popular expert of the workload (what a gate
 * applied to an unrelated state still favours), observed with the usual
 * logit noise. Sources, next to the definitions in synth.c: ExpertFlow
 * Table 2 (pre-gate accuracy decays with distance towards 26-33%). From a
 * stream of its own: pre-gates never change the routing a seed gives.
 */
#define MOEM_SYNTH_PG_NEAR  0.85
#define MOEM_SYNTH_PG_FAR   0.10
#define MOEM_SYNTH_PG_DECAY 2.0
void moem_synth_pregate(struct moem_synth *g, uint32_t b, uint32_t m, uint32_t d, float *z);

/*
 * Router basis: u[m][e][0..hidden) unit vectors for all MoE layers,
 * deterministic from p->seed; orthonormal when n_layers * N <= hidden.
 * out holds n_layers * n_experts * hidden floats.
 */
int moem_synth_basis(const struct moem_synth_params *p, uint32_t hidden, float *out);
/* Router gain for that basis: sqrt(E|h0|^2 / hidden). */
double moem_synth_gain(const struct moem_synth_params *p, uint32_t hidden);

/*
 * Entry hidden state h0[hidden] of slot b at the current step, given unit
 * basis rows laid out as moem_synth_basis() writes them (an engine
 * normalises the model's router rows once and passes those).
 */
void moem_synth_hidden(struct moem_synth *g, uint32_t b, const float *basis, uint32_t hidden,
		       float *h0);

#endif /* MOEM_SYNTH_H */
