/* SPDX-License-Identifier: GPL-2.0-only */
/* Simulator internals shared by the files of runtime/placement/sim (sim.h is the interface). */
#ifndef MOEM_SIM_INT_H
#define MOEM_SIM_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <moem/policy.h>
#include <moem/rng.h>
#include <moem/sim.h>
#include <moem/trace.h>

#define SIM_NONE UINT32_MAX
#define SIM_INF	 UINT64_MAX

enum { PRIO_MISS = 0, PRIO_PREFETCH = 1, PRIO_LOW = 2, PRIO_NR };
enum { XK_DEMAND, XK_PREFETCH, XK_PROMOTE, XK_DEMOTE, XK_PAGE };
enum { XS_FREE, XS_QUEUED, XS_ACTIVE, XS_DONE };
enum { K_ABSENT = 0, K_FLIGHT = 1, K_RES = 2 };

struct sim_xfer {
	uint32_t key;
	uint8_t prio, kind, state;
	uint64_t bytes, left;
	uint64_t issue_ns, start_ns, done_ns;
	double bpn;		  /* bytes per ns for this transfer */
	uint32_t prev, next;	  /* queue links (or free list) */
	struct moem_dx_action dx; /* promotions and demotions */
	uint64_t tpos;		  /* prefetch: the tick it was predicted for */
	bool counted;		  /* issued in a counted step */
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
	uint8_t pf; /* brought by a prefetch, not used yet */
	uint32_t xfer;
	uint64_t ready_ns;
	uint64_t bytes;	   /* HBM bytes reserved for it */
	uint64_t next_use; /* Belady oracle */
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
	struct moem_evict *ev, *dram_lru;
	struct moem_prefetch *pf;
	struct moem_dynaexq *dx;
	struct moem_paging *pg;
	struct moem_hot *hot;
	struct moem_tier_budget hbm, dram;
	struct sim_key *k; /* [L * N] */
	uint8_t *in_dram;  /* [L * N] */
	uint64_t *pin;	   /* [L * N]: tick + 1 while in use */
	struct sim_ce ce;
	struct moem_rng rng;
	double pcie_bpn, nvme_bpn, hbm_bpn;
	uint64_t now, pos;
	uint32_t tokens; /* of the current record */
	bool counted;
	uint64_t count_start_ns, counted_steps, last_step;
	bool any_step;
	/* per layer scratch */
	int32_t *ids;
	float *w;
	uint32_t *cnt;
	uint8_t *act, *res;
	uint32_t *tok, *order;
	float *prob; /* [N] scratch */
	uint32_t *pend, npend;
	uint32_t *keys;
	struct moem_prefetch_req *req;
	/* accesses, for the Belady bound (and the oracle's next uses) */
	struct moem_access_log log;
	uint64_t count_from; /* first counted tick index in log */
	uint64_t *next_use;  /* oracle: per access, next tick index */
	uint64_t nu_i;
	/* dynaexq */
	enum moem_prec dx_hi, dx_lo;
	/* fluxmoe */
	uint8_t *resident;     /* [L * N] member of the resident set */
	uint64_t *window_done; /* [L]: when the layer's window loads land */
	uint32_t *window_last; /* [L]: last transfer of the layer's loads */
	uint32_t *window_left; /* [L]: loads not yet delivered */
	uint64_t window_bytes;
	double tau_comp; /* this step's compute */
	/* counters */
	uint64_t s_sum, s_n;
	uint64_t hi_uses;
	uint32_t pf_outstanding;
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
uint64_t moem_sim_expert_ns(const struct sim *s, uint64_t bytes, uint32_t tokens);

/* sim_cache.c: eviction policies (+ prefetch) and the oracle */
int moem_sim_cache_setup(struct sim *s);
int moem_sim_cache_layer(struct sim *s, uint64_t t_r, uint32_t T, uint64_t *end);
void moem_sim_cache_done(struct sim *s, struct sim_xfer *x);
int moem_sim_oracle_prepass(struct sim *s, const char *trace);

/* sim_modes.c: DynaExq and FluxMoE */
int moem_sim_dynaexq_setup(struct sim *s);
int moem_sim_dynaexq_layer(struct sim *s, uint64_t t_r, uint32_t T, uint64_t *end);
void moem_sim_dynaexq_done(struct sim *s, struct sim_xfer *x);
int moem_sim_fluxmoe_setup(struct sim *s);
void moem_sim_fluxmoe_step(struct sim *s);
int moem_sim_fluxmoe_begin(struct sim *s, uint32_t layer);
void moem_sim_fluxmoe_done(struct sim *s, struct sim_xfer *x);
int moem_sim_fluxmoe_layer(struct sim *s, uint64_t t0, uint64_t t_r, uint32_t T, uint64_t *end);

#endif /* MOEM_SIM_INT_H */
