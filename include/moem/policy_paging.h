/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Paging policy (ALGORITHMS.md sec. 6, FluxMoE). HBM holds a resident set
 * (fraction alpha of the experts, the hottest of each layer) plus a
 * window of physical blocks for two MoE layers. Before layer i runs, its
 * non-resident experts are materialised in the window; layer i+1's load
 * starts when layer i starts, into the blocks layer i-1 used, after i-1's
 * compute event (WAR); layer i's kernels wait on its own load (RAW). The
 * window is the caller's mechanism; this module decides:
 *
 *  - placement: bandwidth-proportional split of streamed bytes over K
 *    backends, x_k = B_k / sum B (moem_paging_placement());
 *  - the residency level: the rho controller, once per step,
 *      rho = tau_comp / tau_load;  rho < theta (0.9) -> one more resident
 *      expert per layer; rho > 1 -> one fewer; [theta, 1] is the dead
 *      zone; never above the capacity the budget leaves (the hard
 *      constraint: expert residency never displaces the KV/fixed budget);
 *  - staggered migration: at most one migration per layer per step
 *    (migration()), promoting the hottest non-resident expert or
 *    releasing the coldest resident one, so I/O demand stays smooth; at
 *    the target count, a resident expert colder than the hottest outsider
 *    by margin (0.02, hotness units) is released, and the outsider takes
 *    its place at the next step (moem addition: the resident set follows
 *    drift).
 */
#ifndef MOEM_POLICY_PAGING_H
#define MOEM_POLICY_PAGING_H

#include <stdbool.h>
#include <stdint.h>

struct moem_paging_cfg {
	uint32_t n_layers, n_experts;
	double theta;	   /* 0.9: lower edge of the dead zone */
	double upper;	   /* 1.0: upper edge */
	uint32_t capacity; /* most resident experts per layer the budget allows */
	uint32_t initial;  /* resident experts per layer at start */
	double margin;	   /* 0.02: swap hysteresis */
};

void moem_paging_default(struct moem_paging_cfg *c, uint32_t n_layers, uint32_t n_experts);
/* "fluxmoe[:theta=0.9,upper=1.0,initial=N,margin=0.02]" (capacity is the caller's). */
int moem_paging_parse(const char *spec, struct moem_paging_cfg *c, bool *initial_given);

/*
 * x[k] = bw[k] / sum(bw) for k < n; -EINVAL if a bandwidth is not
 * positive and finite.
 */
int moem_paging_placement(const double *bw, uint32_t n, double *x);
/*
 * Per-layer load time of `bytes` split that way: max_k x_k * bytes / B_k
 * (equal for every k: the point of the split), in ns for bw in bytes/ns.
 */
double moem_paging_load_ns(const double *bw, uint32_t n, uint64_t bytes);

struct moem_paging;

struct moem_paging_mig {
	uint32_t layer, expert;
	bool promote; /* make resident; else release */
};

int moem_paging_create(const struct moem_paging_cfg *c, struct moem_paging **out);
void moem_paging_destroy(struct moem_paging *pg);
/*
 * Once per step: the controller. tau_comp_ns is the step's compute time
 * (profiled, no stalls), tau_load_ns the I/O demand of streaming what is
 * not resident. Returns -1, 0 or +1: the change made to the target.
 */
int moem_paging_control(struct moem_paging *pg, double tau_comp_ns, double tau_load_ns);
/* The budget moved: new capacity (the target is clamped to it). */
void moem_paging_set_capacity(struct moem_paging *pg, uint32_t capacity);
uint32_t moem_paging_target(const struct moem_paging *pg);
double moem_paging_rho(const struct moem_paging *pg);
/*
 * The one migration due for layer this step given its resident flags
 * ([N]) and hotness scores ([N]): 1 and *m, or 0. Idempotent within a
 * step for a layer; the caller applies it (a promotion keeps the expert
 * when the window materialises it; a release drops it).
 */
int moem_paging_migration(struct moem_paging *pg, uint64_t step, uint32_t layer,
			  const uint8_t *resident, const float *hot, struct moem_paging_mig *m);

#endif /* MOEM_POLICY_PAGING_H */
