/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Simulator internals shared by the files of runtime/placement/sim (sim.h
 * is the interface): sim.c reads the trace and plays the per-layer
 * sequence of driver.h; ce.c is the modelled copy engine; sim_cache.c the
 * HBM expert cache (and the Belady oracle); sim_modes.c DynaExq's
 * versions and FluxMoE's window. What to do is the driver's; this is how
 * bytes move and how long it takes.
 */
#ifndef MOEM_SIM_INT_H
#define MOEM_SIM_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <moem/driver.h>
#include <moem/policy.h>
#include <moem/rng.h>
#include <moem/sim.h>
#include <moem/trace.h>

#define SIM_NONE UINT32_MAX
#define SIM_INF	 UINT64_MAX

enum { PRIO_MISS = 0, PRIO_PREFETCH = 1, PRIO_LOW = 2, PRIO_NR };
enum { XK_DEMAND, XK_PREFETCH, XK_PROMOTE, XK_DEMOTE, XK_PAGE, XK_WRITEBACK };
enum { XS_FREE, XS_QUEUED, XS_ACTIVE, XS_DONE };
enum { K_ABSENT = 0, K_FLIGHT = 1, K_RES = 2 };

struct sim_xfer {
	uint32_t key;
	uint8_t prio, kind, state;
	uint8_t pi; /* promotions and demotions: the version it brings */
	uint64_t bytes, left;
	uint64_t issue_ns, start_ns, done_ns;
	double bpn;	     /* bytes per ns for this transfer */
	uint32_t prev, next; /* queue links (or free list) */
	uint64_t tpos;	     /* prefetch: the tick it was predicted for */
	bool counted;	     /* issued in a counted step */
};

/* One copy engine: three FIFO queues by priority, pieces, a completion heap. */
struct sim_ce {
	struct sim_xfer *x;
	uint32_t cap, free_head;
	uint32_t head[PRIO_NR], tail[PRIO_NR];
	uint64_t free_at;
	uint64_t piece;
	uint32_t *heap, nheap;
	uint32_t queued; /* transfers not yet done */
};

struct sim_key {
	uint8_t st;
	uint8_t prec;
	uint32_t xfer;
	uint64_t ready_ns;
	uint64_t bytes;	   /* HBM bytes reserved for it */
	uint64_t next_use; /* Belady oracle */
	uint64_t last_use; /* restricted oracle's fallback: tick index of the last use */
	uint64_t uses;	   /* and the uses so far */
};

struct sim {
	const struct moem_sim_cost *c;
	const struct moem_sim_policy *p;
	const struct moem_sim_opts *o;
	struct moem_sim_result *r;
	uint32_t L, N, K;
	uint64_t size; /* expert bytes in the served precision */
	struct moem_route_policy rp;
	struct moem_route_cfg rc;
	struct moem_driver *d;
	bool dram_cache; /* DRAM below the model: a cache under the driver's DRAM rule */
	bool copy_back;	 /* and HBM's victims may be copied back to it (driver.h) */
	struct moem_tier_budget hbm, dram;
	struct sim_key *k; /* [L * N] */
	uint8_t *in_dram;  /* [L * N] */
	struct sim_ce ce;
	struct moem_rng rng;
	uint64_t now, pos;
	uint32_t tokens; /* of the current record */
	bool counted;
	uint64_t count_start_ns, counted_steps, last_step;
	bool any_step;
	struct moem_driver_stats st0; /* the driver's counters when counting began */
	/* per layer scratch */
	int32_t *ids;
	float *w;
	uint32_t *cnt;
	uint8_t *act, *res;
	uint32_t *tok;
	uint32_t *pend, npend;
	uint32_t *cpu_keys, n_cpu_keys; /* the layer's experts computed on the CPU by choice */
	uint32_t layer_T, unpin_stage;	/* a budget below a layer's needs (make_room) */
	uint32_t *keys;
	float *pgprob;	   /* [N] a pre-gate's activation probabilities */
	uint32_t pg_depth; /* pre-gate layers the policy reads from the trace */
	/* accesses, for the Belady bound (and the oracle's next uses) */
	struct moem_access_log log;
	uint64_t count_from; /* first counted tick index in log */
	uint64_t *next_use;  /* oracle: per access, next tick index */
	uint64_t nu_i;
	/* dynaexq */
	enum moem_prec dx_hi, dx_lo;
	uint64_t hi_uses;
	/* hybrid execution: the cost model the decision reads, and where each
	 * expert is placed ([L * N] enum moem_place; NULL: no rules) */
	struct moem_cost xc;
	uint8_t *place;
	uint64_t n_placed_cpu;
	/* fluxmoe */
	uint64_t step_bytes; /* this step's misses' bytes (streamed on demand) */
	double tau_comp;     /* this step's compute */
};

/* ce.c */
int moem_sim_ce_init(struct sim *s, uint32_t cap);
void moem_sim_ce_free(struct sim *s);
/* Queue a transfer issued at s->now; returns its id or SIM_NONE (-ENOMEM). */
uint32_t moem_sim_ce_add(struct sim *s, uint32_t key, int kind, int prio, uint64_t bytes,
			 double bpn);
/* A waiting transfer is needed now: move it to the miss queue. */
void moem_sim_ce_boost(struct sim *s, uint32_t id);
/* Drop a transfer that has not started; false if it has. */
bool moem_sim_ce_cancel(struct sim *s, uint32_t id);
/* Commit pieces that start before t (or, with until != SIM_NONE, until it is done). */
void moem_sim_ce_run(struct sim *s, uint64_t t, uint32_t until);
/* Deliver completions up to t (moem_sim_on_done); returns how many. */
uint32_t moem_sim_ce_deliver(struct sim *s, uint64_t t);
/* Time of the next completion not yet delivered (SIM_INF if none). */
uint64_t moem_sim_ce_next_done(struct sim *s);

/* sim.c */
void moem_sim_on_done(struct sim *s, struct sim_xfer *x);
void moem_sim_advance(struct sim *s, uint64_t t);
double moem_sim_link_bpn(struct sim *s, uint32_t key, uint64_t bytes);

/* sim_cache.c: the HBM expert cache (+ prefetch) and the Belady oracle */
/* The driver's ops (driver.h) on the simulated cache. */
enum moem_res moem_sim_cache_state(void *arg, uint32_t key);
int moem_sim_cache_fetch(void *arg, uint32_t key, enum moem_prio prio, uint64_t tpos);
bool moem_sim_cache_cancel(void *arg, uint32_t key);
int moem_sim_cache_layer(struct sim *s, uint64_t t_r, uint32_t T, uint64_t *end);
void moem_sim_cache_done(struct sim *s, struct sim_xfer *x);
int moem_sim_oracle_prepass(struct sim *s, const char *trace);

/* sim_modes.c: DynaExq and FluxMoE */
/* The driver's ops for DynaExq's versions and FluxMoE's resident set. */
int moem_sim_dynaexq_transition(void *arg, uint32_t key, uint32_t pi);
int moem_sim_dynaexq_published(void *arg, uint32_t key);
int moem_sim_fluxmoe_keep(void *arg, uint32_t key, bool keep);
int moem_sim_dynaexq_setup(struct sim *s, struct moem_driver_cfg *dc);
int moem_sim_dynaexq_stage(struct sim *s);
int moem_sim_dynaexq_layer(struct sim *s, uint64_t t_r, uint32_t T, uint64_t *end);
void moem_sim_dynaexq_done(struct sim *s, struct sim_xfer *x);
int moem_sim_fluxmoe_setup(struct sim *s, struct moem_driver_cfg *dc, uint32_t max_tokens);
void moem_sim_fluxmoe_step(struct sim *s);

#endif /* MOEM_SIM_INT_H */
