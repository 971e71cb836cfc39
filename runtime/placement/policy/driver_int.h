/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The policy driver's internals (driver.h), shared by driver.c (life
 * cycle, the evictor, routing and use events), driver_prefetch.c
 * (lookahead, prefetches in flight, cancels) and driver_modes.c (DynaExq
 * and FluxMoE).
 *
 * Locking: d->lock guards every field below; the driver drops it around
 * each op call (the owner's lock is taken inside ops, and the owner may
 * call moem_driver_pick() with it held), so after an op a function
 * re-checks what it relied on.
 */
#ifndef MOEM_DRIVER_INT_H
#define MOEM_DRIVER_INT_H

#include <pthread.h>

#include <moem/driver.h>

struct drv_flight {
	uint32_t key;
	uint32_t seq;
};

struct moem_driver {
	struct moem_driver_cfg c;
	const struct moem_driver_ops *ops;
	void *arg;
	pthread_mutex_t lock;
	uint32_t L, N, K;
	struct moem_evict *ev;	/* over version ids (n_experts = 2N) */
	struct moem_evict *dev; /* the DRAM tier's, same policy and ids */
	struct moem_prefetch *pf;
	struct moem_dynaexq *dx;
	struct moem_paging *pg;
	struct moem_hot *hot;
	uint64_t pos;	/* the newest tick routed */
	uint32_t depth; /* farthest tick ahead a prefetch may target */
	uint8_t *plan;	/* [L * N] precision index of the planned version */
	uint64_t *pin;	/* [L * N] pos + 1 while the layer at pos uses the key */
	/* Prefetches. */
	uint8_t *brought;      /* [L * N] brought by a prefetch, not used yet */
	uint32_t *fl_seq;      /* [L * N] in flight as a prefetch (issue number), 0: not */
	uint64_t *fl_tpos;     /* [L * N] the tick it was predicted for */
	uint8_t *fl_used;      /* [L * N] needed while in flight: no longer speculative */
	struct drv_flight *fl; /* issue order; an entry is live iff fl_seq[key] == seq */
	uint32_t n_fl, cap_fl, live_fl, next_seq;
	struct moem_prefetch_req *req;
	float *prob;	     /* [N] scratch */
	uint64_t score_base; /* pred's scores are ticks relative to this */
	double t_ema;	     /* distinct experts per layer-step (EMA) */
	double pred_w;	     /* the miss term's weight in pred's rank (pred_weight()) */
	/*
	 * The worth of what is in HBM, for every eviction policy: the tick at
	 * which each key is expected to be used next (pred's estimate,
	 * INFINITY while the predictor does not know its layer). A prefetch
	 * evicts only a victim expected later than the prefetched expert.
	 */
	double *next_use; /* [L * N] */
	float *reuse_q;	  /* [L * N] the probability behind next_use (copy-back) */
	/* DRAM's churn, for how long a version copied back would stay there:
	 * versions it holds, and insertions since creation */
	uint64_t dram_n, dram_ins;
	/* HBM insertions: how long HBM keeps a version (keep_ns); as of the
	 * layer's routing, so that a layer's decisions do not depend on the
	 * order its owner makes them and loads its misses in */
	uint64_t hbm_ins, hbm_ins_routed;
	uint32_t in_vid;       /* the version a prefetch is bringing (moem_driver_pick) */
	double in_next_use;    /* and its expected use */
	uint32_t layer_misses; /* the current layer's experts not resident when needed */
	/* DynaExq transitions in flight. */
	struct moem_dx_action *dx_fl;
	uint32_t n_dx_fl, cap_dx_fl;
	/* FluxMoE. */
	uint8_t *resident; /* [L * N] */
	/* The current layer's routing (routed() .. layer_end()). */
	const int32_t *ids;
	uint32_t tokens;
	/*
	 * The LRU duel: two shadow caches of the budget's size replay the
	 * demand accesses, one under the policy, one under LRU; while LRU's
	 * would have hit more often lately, victims come in LRU order, so no
	 * policy does worse than plain LRU for long.
	 */
	struct moem_evict *sh[2]; /* [0] the policy, [1] LRU */
	uint8_t *sh_in[2];	  /* [L * N * 2] membership */
	uint64_t sh_n[2], slots;
	double sh_hit[2]; /* hit rates, EMA over accesses */
	bool follow_lru;
	int sh_cur; /* the shadow duel_access() asks for a victim (0: the policy's) */
	/* The owner's ok() during a pick, and the pick's priority. */
	bool (*ok)(void *arg, uint32_t vid);
	void *ok_arg;
	enum moem_prio pick_prio;
	struct moem_driver_stats st;
};

static inline uint32_t moem_drv_vid(const struct moem_driver *d, uint32_t key)
{
	return key * 2 + d->plan[key];
}

/* The tick of layer l's next run after the present one (lock held). */
static inline uint64_t moem_drv_next_run(const struct moem_driver *d, uint32_t l)
{
	uint64_t t = d->pos - d->pos % d->L + l;

	return t <= d->pos ? t + d->L : t;
}

/* driver.c: a pred score, on the policy and its shadow (lock held) */
void moem_drv_set_score(struct moem_driver *d, uint32_t vid, float score);
/* driver.c: pred's scores (lock held) */
int moem_drv_score_layer(struct moem_driver *d, uint32_t l);
float moem_drv_score_incoming(struct moem_driver *d, uint64_t tpos, float q);
double moem_drv_expected_use(const struct moem_driver *d, uint64_t next, float q);

/* driver_prefetch.c */
void moem_drv_flight_free(struct moem_driver *d);
/* A prefetch of key (for tick tpos) was issued. */
int moem_drv_flight_add(struct moem_driver *d, uint32_t key, uint64_t tpos);
/* key is no longer a prefetch in flight (landed, cancelled or evicted). */
void moem_drv_flight_drop(struct moem_driver *d, uint32_t key);
/* Cancel the speculative prefetches whose tick has passed (lock not held). */
void moem_drv_cancel_stale(struct moem_driver *d);

/* driver_modes.c (lock not held) */
int moem_drv_modes_create(struct moem_driver *d);
void moem_drv_modes_destroy(struct moem_driver *d);
void moem_drv_dx_poll(struct moem_driver *d);
int moem_drv_modes_layer_end(struct moem_driver *d, uint64_t now_ns);

#endif /* MOEM_DRIVER_INT_H */
