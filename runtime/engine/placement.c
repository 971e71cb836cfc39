// SPDX-License-Identifier: GPL-2.0-only
/*
 * The engine's placement: the policy driver (driver.h) fed with the
 * decode loop's real events, its decisions carried out on the tiers. The
 * simulator runs the same driver on a trace; what differs is only where
 * time comes from and how bytes move.
 *
 *  - the driver is the tiers' HBM evictor (version ids: key * 2 + pi), so
 *    a miss, a prefetch, a promotion and a budget shrink all take their
 *    victims from the policy, never one of the current layer's experts;
 *  - its ops are the tiers' fetch, cancel, plan and state;
 *  - DynaExq's counts come from the device histogram once per interval
 *    (or moem_hot, hotness "bpf"); transitions are plan changes plus
 *    promotion fetches, announced by moem:promote/demote;
 *  - FluxMoE's resident set is protected by the driver; the next layer's
 *    window is streamed at prefetch priority.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/log.h>
#include <moem/route.h>
#include <moem/usdt.h>
#include <moem/util.h>

#include "engine_int.h"

static struct moem_engine *of_ev(struct moem_evictor *ev)
{
	return (struct moem_engine *)((char *)ev - offsetof(struct moem_engine, hev));
}

static uint32_t key_of(const struct moem_engine *e, uint32_t m, uint32_t x)
{
	return m * e->cfg->n_experts + x;
}

/* ---- the tiers' evictor: the driver ----------------------------------------- */

static void ev_add(struct moem_evictor *ev, uint32_t id)
{
	if (of_ev(ev)->drv)
		moem_driver_inserted(of_ev(ev)->drv, id);
}

static void ev_del(struct moem_evictor *ev, uint32_t id)
{
	if (of_ev(ev)->drv)
		moem_driver_removed(of_ev(ev)->drv, id);
}

static void ev_touch(struct moem_evictor *ev, uint32_t id)
{
	/* the driver hears of every use from the layer (moem_eng_used) */
}

static int ev_pick(struct moem_evictor *ev, uint32_t incoming, enum moem_prio prio,
		   bool (*ok)(void *arg, uint32_t id), void *arg, uint32_t *id)
{
	if (!of_ev(ev)->drv)
		return -ENOENT;
	return moem_driver_pick(of_ev(ev)->drv, incoming, prio, ok, arg, id);
}

static void ev_destroy(struct moem_evictor *ev)
{
}

static bool ev_copy_back(struct moem_evictor *ev, uint32_t id, uint64_t bytes, bool room,
			 bool (*ok)(void *arg, uint32_t id), void *arg, uint32_t *victim)
{
	if (!of_ev(ev)->drv)
		return false;
	return moem_driver_copy_back(of_ev(ev)->drv, id, bytes, room, ok, arg, victim);
}

/* ---- the DRAM tier's evictor: the driver too ----------------------------------- */

static struct moem_engine *of_dev(struct moem_evictor *ev)
{
	return (struct moem_engine *)((char *)ev - offsetof(struct moem_engine, dramev));
}

static void dev_add(struct moem_evictor *ev, uint32_t id)
{
	if (of_dev(ev)->drv)
		moem_driver_dram_inserted(of_dev(ev)->drv, id);
}

static void dev_del(struct moem_evictor *ev, uint32_t id)
{
	if (of_dev(ev)->drv)
		moem_driver_dram_removed(of_dev(ev)->drv, id);
}

static void dev_touch(struct moem_evictor *ev, uint32_t id)
{
	if (of_dev(ev)->drv)
		moem_driver_dram_used(of_dev(ev)->drv, id);
}

static int dev_pick(struct moem_evictor *ev, uint32_t incoming, enum moem_prio prio,
		    bool (*ok)(void *arg, uint32_t id), void *arg, uint32_t *id)
{
	if (!of_dev(ev)->drv)
		return -ENOENT;
	return moem_driver_dram_pick(of_dev(ev)->drv, ok, arg, id);
}

/* ---- the driver's ops on the tiers -------------------------------------------- */

static enum moem_res op_state(void *arg, uint32_t key)
{
	struct moem_engine *e = arg;
	int st = moem_tiers_state(e->tiers, key / e->cfg->n_experts, key % e->cfg->n_experts);

	return st == MOEM_TIER_RESIDENT	 ? MOEM_RES_RESIDENT
	       : st == MOEM_TIER_COPYING ? MOEM_RES_FLIGHT
					 : MOEM_RES_ABSENT;
}

static int op_fetch(void *arg, uint32_t key, enum moem_prio prio, uint64_t tpos)
{
	struct moem_engine *e = arg;

	/* placed on the CPU (--place, --cpu-moe-layers): never takes HBM */
	if (!moem_eng_hbm_allowed(e, key / e->cfg->n_experts, key % e->cfg->n_experts))
		return 0;
	return moem_tiers_prefetch(e->tiers, key / e->cfg->n_experts, key % e->cfg->n_experts,
				   prio);
}

/* UVM: the tiers hold every expert in managed memory; the CUDA driver moves it on a hint. */
static int op_advise(void *arg, uint32_t key)
{
	struct moem_engine *e = arg;
	moem_dptr addr;
	uint64_t len;

	if (!e->uvm || moem_tiers_published_range(e->tiers, key / e->cfg->n_experts,
						  key % e->cfg->n_experts, &addr, &len) < 0)
		return 0;
	return moem_tierdev_uvm_prefetch(e->dev, addr, len) == 0;
}

static bool op_cancel(void *arg, uint32_t key)
{
	struct moem_engine *e = arg;

	return moem_tiers_cancel(e->tiers, key / e->cfg->n_experts, key % e->cfg->n_experts) == 0;
}

static int op_transition(void *arg, uint32_t key, uint32_t pi)
{
	struct moem_engine *e = arg;
	uint32_t m = key / e->cfg->n_experts, x = key % e->cfg->n_experts;
	int r;

	moem_tiers_set_plan(e->tiers, m, x, pi);
	/* placed on the CPU: it computes the planned version from DRAM */
	r = moem_eng_hbm_allowed(e, m, x) ? moem_tiers_prefetch(e->tiers, m, x, MOEM_PRIO_PROMOTE)
					  : 0;
	if (r < 0) {
		/* a promotion that does not fit waits: offered again later */
		moem_tiers_set_plan(e->tiers, m, x, pi ^ 1);
		return -EAGAIN;
	}
	if (pi == MOEM_TIER_HI)
		MOEM_USDT_PROMOTE(m, x, (uint32_t)e->prec[1], (uint32_t)e->prec[0]);
	else
		MOEM_USDT_DEMOTE(m, x, (uint32_t)e->prec[0], (uint32_t)e->prec[1]);
	return 0;
}

static int op_published(void *arg, uint32_t key)
{
	struct moem_engine *e = arg;

	return moem_tiers_published(e->tiers, key / e->cfg->n_experts, key % e->cfg->n_experts);
}

static int op_keep(void *arg, uint32_t key, bool keep)
{
	/* joins the resident set only while it is in HBM; leaving, it stays cached */
	return !keep || op_state(arg, key) == MOEM_RES_RESIDENT ? 0 : -EAGAIN;
}

static const struct moem_driver_ops eng_ops = {
	.state = op_state,
	.fetch = op_fetch,
	.cancel = op_cancel,
	.advise = op_advise,
	.transition = op_transition,
	.published = op_published,
	.keep = op_keep,
};

/* ---- opening ------------------------------------------------------------------- */

static bool is_none(const char *s)
{
	return !strcmp(s, "none");
}

/*
 * DynaExq's hi experts per layer: the budget formula of ALGORITHMS.md for
 * an HBM budget (the arena's expert bytes), capped by the
 * hi_precision_permille knob (a share of each layer's experts).
 */
int moem_eng_dynaexq_n_hi(const struct moem_engine *e, uint64_t hbm, uint64_t permille,
			  uint32_t *n_hi)
{
	uint32_t cap = (uint32_t)(permille * e->cfg->n_experts / 1000);
	int ret = moem_dynaexq_n_hi(hbm, 0, e->n_moe, e->cfg->n_experts, e->blob_bytes[0],
				    e->blob_bytes[1], 2 * e->blob_bytes[0], n_hi);

	if (!ret && *n_hi > cap)
		*n_hi = cap;
	return ret;
}

static int open_precision(struct moem_engine *e, struct moem_driver_cfg *dc)
{
	struct moem_dynaexq_cfg c;
	bool n_hi_given = false;
	int ret;

	moem_dynaexq_default(&c, e->n_moe, e->cfg->n_experts);
	c.hi = e->prec[0];
	c.lo = e->prec[1];
	ret = moem_dynaexq_parse(e->prec_spec, &c, &n_hi_given);
	if (ret)
		return moem_err_prefix(-ret, "--precision");
	if (e->n_prec != 2)
		return moem_errf(EINVAL, "--precision %s needs two precisions (--precisions hi,lo)",
				 e->prec_spec);
	if (c.hi != e->prec[0] || c.lo != e->prec[1])
		return moem_errf(EINVAL, "--precision %s: the engine runs %s/%s", e->prec_spec,
				 moem_prec_name(e->prec[0]), moem_prec_name(e->prec[1]));
	if (!n_hi_given) {
		ret = moem_eng_dynaexq_n_hi(e, e->o.hbm_budget, MOEM_BUDGET_PERMILLE_MAX, &c.n_hi);
		if (ret)
			return moem_err_prefix(-ret, "--precision dynaexq");
	}
	/* The forward pass never waits for a promotion: it reads lo meanwhile. */
	e->o.allow_fallback = true;
	dc->dynaexq = true;
	dc->dx = c;
	moem_info("precision: dynaexq %s/%s, %u hi experts per layer", moem_prec_name(c.hi),
		  moem_prec_name(c.lo), c.n_hi);
	return 0;
}

/*
 * FluxMoE's window: what a layer needs that is not resident, at most the
 * experts a batch of B activates, N (1 - (1 - k/N)^B) under uniform
 * routing (an upper estimate), for this layer and the next.
 */
uint32_t moem_eng_paging_window(const struct moem_engine *e, uint32_t B)
{
	const double N = e->cfg->n_experts, k = e->cfg->top_k;

	return (uint32_t)ceil(N * (1 - pow(1 - k / N, B)));
}

/* The resident set per layer: half of what two windows leave (the rest is a cache). */
uint32_t moem_eng_paging_capacity(const struct moem_engine *e, uint64_t hbm, uint32_t B)
{
	uint64_t s = moem_align_up(e->blob_bytes[0], 65536);
	uint64_t window = 2ULL * moem_eng_paging_window(e, B) * s;

	if (hbm <= window)
		return 0;
	return (uint32_t)moem_min((hbm - window) / (2ULL * e->n_moe * s),
				  (uint64_t)e->cfg->n_experts);
}

static int open_paging(struct moem_engine *e, struct moem_driver_cfg *dc)
{
	struct moem_paging_cfg c;
	bool initial_given = false;
	int ret;

	moem_paging_default(&c, e->n_moe, e->cfg->n_experts);
	ret = moem_paging_parse(e->paging_spec, &c, &initial_given);
	if (ret)
		return moem_err_prefix(-ret, "--paging");
	if (e->n_moe < 2)
		return moem_errf(EINVAL, "--paging fluxmoe pages the next layer: the model has "
					 "one MoE layer");
	/* sized for a batch of 8 until a run says its batch (moem_eng_paging_batch) */
	c.capacity = moem_eng_paging_capacity(e, e->o.hbm_budget, 8);
	if (!initial_given || c.initial > c.capacity)
		c.initial = c.capacity;
	dc->paging = true;
	dc->pg = c;
	dc->pg_window = moem_eng_paging_window(e, 8);
	return 0;
}

void moem_eng_paging_batch(struct moem_engine *e, uint32_t B, uint64_t hbm)
{
	if (!e->dcfg.paging)
		return;
	moem_driver_set_window(e->drv, moem_eng_paging_window(e, B));
	moem_driver_set_capacity(e->drv, moem_eng_paging_capacity(e, hbm, B));
}

int moem_eng_placement_open(struct moem_engine *e)
{
	struct moem_driver_cfg *dc = &e->dcfg;
	int ret;

	ret = moem_route_policy_parse(e->route_spec, e->cfg->top_k, &e->rp);
	if (ret)
		return moem_err_prefix(-ret, "--route");
	memset(dc, 0, sizeof(*dc));
	dc->n_layers = e->n_moe;
	dc->n_experts = e->cfg->n_experts;
	dc->top_k = e->cfg->top_k;
	dc->expert_bytes = e->blob_bytes[0];
	dc->hbm_slots = e->o.hbm_budget / moem_align_up(e->blob_bytes[0], 65536);
	dc->pf_queue = 64;
	moem_cost_default(&dc->cost);
	dc->cost.link_gbps = e->o.link_gbps;
	dc->cost.layer_ns = 1000000; /* replaced by the measured layer time */
	/* lockstep: the link is never busy when a layer starts; the policies see it free */
	if (e->o.lockstep)
		dc->cost.link_gbps = ENG_LOCKSTEP_GBPS;
	ret = moem_evict_parse(e->evict_spec, &dc->evict);
	if (ret)
		return moem_err_prefix(-ret, "--evict");
	ret = moem_dram_rule_parse(e->o.dram_evict, &dc->dram);
	if (ret)
		return moem_err_prefix(-ret, "--dram-evict");
	moem_prefetch_default(&dc->pf, e->n_moe, e->cfg->n_experts, e->cfg->top_k);
	ret = moem_prefetch_parse(e->prefetch_spec, &dc->pf);
	if (ret && ret != -ENOENT)
		return moem_err_prefix(-ret, "--prefetch");
	if (ret == 0 && e->n_moe < 2)
		moem_warn("prefetch needs two MoE layers or more: off");
	else
		dc->prefetch = ret == 0;
	/* pred eviction ranks by the predictor even when nothing is prefetched */
	dc->predictor = dc->prefetch || dc->evict.kind == MOEM_EVICT_PRED;
	/* exclusive DRAM, per eviction as the cost model says, when DRAM is below the model */
	dc->copy_back = e->n_moe >= 2 && e->o.dram_budget < e->arena_bytes;
	if (dc->predictor && e->n_moe < 2) {
		moem_warn("--evict pred needs two MoE layers or more: lru");
		dc->evict.kind = MOEM_EVICT_LRU;
		dc->predictor = false;
	}
	/* hybrid execution weighs an expert's uses ahead (keep_ns) with it */
	if (e->o.exec_hybrid && e->n_moe >= 2)
		dc->predictor = true;
	if (!is_none(e->prec_spec)) {
		ret = open_precision(e, dc);
		if (ret)
			return ret;
	}
	if (!is_none(e->paging_spec)) {
		if (dc->prefetch)
			return moem_errf(EINVAL,
					 "--paging and --prefetch are alternatives: pick one");
		ret = open_paging(e, dc);
		if (ret)
			return ret;
	}
	/* nothing but the keep value reads the predictor: no pre-gate (driver.h) */
	dc->keep_only = e->o.exec_hybrid && e->n_moe >= 2 && moem_driver_cfg_keep_only(dc);
	e->hev.add = ev_add;
	e->hev.del = ev_del;
	e->hev.touch = ev_touch;
	e->hev.pick = ev_pick;
	e->hev.destroy = ev_destroy;
	e->hev.copy_back = dc->copy_back ? ev_copy_back : NULL;
	e->dramev.add = dev_add;
	e->dramev.del = dev_del;
	e->dramev.touch = dev_touch;
	e->dramev.pick = dev_pick;
	e->dramev.destroy = ev_destroy;
	return 0;
}

/* After the tiers exist: the driver; DynaExq starts with every expert planned lo. */
int moem_eng_placement_attach(struct moem_engine *e)
{
	int ret = moem_driver_create(&e->dcfg, &eng_ops, e, &e->drv);

	for (uint32_t m = 0; e->dcfg.dynaexq && m < e->n_moe && !ret; m++)
		for (uint32_t x = 0; x < e->cfg->n_experts && !ret; x++)
			ret = moem_tiers_set_plan(e->tiers, m, x, MOEM_TIER_LO);
	return ret;
}

void moem_eng_placement_close(struct moem_engine *e)
{
	moem_driver_destroy(e->drv);
	e->drv = NULL;
}

/* ---- per layer ------------------------------------------------------------------- */

int moem_eng_routed(struct moem_engine *e, uint32_t m, uint32_t B, const uint8_t *active)
{
	uint32_t keys[MOEM_MAX_EXPERTS], T = 0;

	for (uint32_t x = 0; x < e->cfg->n_experts; x++)
		if (active[x])
			keys[T++] = key_of(e, m, x);
	return moem_driver_routed(e->drv, e->pos, B, e->ids_host, keys, T);
}

void moem_eng_used(struct moem_engine *e, const struct moem_xref *ref, int ret)
{
	enum moem_res st = MOEM_RES_ABSENT;
	bool early = false;

	if (ret == MOEM_ACQ_HIT) {
		st = MOEM_RES_RESIDENT;
		/* landed more than one layer time before its use: too early */
		early = ref->landed_ns && moem_now_ns() - ref->landed_ns > e->last_layer_ns;
	} else if (ret == MOEM_ACQ_PENDING && ref->prefetched) {
		st = MOEM_RES_FLIGHT; /* the prefetch was issued too late */
	}
	moem_driver_used(e->drv, key_of(e, ref->layer, ref->expert), st, early);
}

int moem_eng_pregate(struct moem_engine *e, uint32_t m, uint32_t B,
		     const struct moem_trace_rec *replay)
{
	const struct moem_model_config *c = e->cfg;
	const uint32_t N = c->n_experts, K = c->top_k, D = e->pg_depth;
	/* the model's routing (its expert groups too); the weights go unused */
	const struct moem_route_cfg rc = moem_route_cfg_of(c);
	int ret = 0;

	/* a trace records the pre-gate picks; otherwise only the predictor reads them */
	if (!e->trace && !moem_driver_wants_pregate(e->drv))
		return 0;
	for (uint32_t d = 1; d <= D && !ret; d++) {
		int32_t *ids = e->pg_ids + (size_t)(d - 1) * B * K;
		uint32_t cnt[ENG_MAX_B];
		float w[ENG_MAX_B * MOEM_MAX_TOPK];
		struct moem_route_out out = {ids, w, cnt};
		struct moem_router_args ra = {
			B,	     c->hidden, N, e->xb, e->gate[m + d < e->n_moe ? m + d : 0],
			e->pg_logits};

		if (m + d >= e->n_moe) {
			/* past the step's last layer: the next token decides */
			for (size_t i = 0; i < (size_t)B * K; i++)
				ids[i] = -1;
			continue;
		}
		if (replay && replay->pregate && d <= e->replay_pg_depth) {
			memcpy(ids, replay->pregate + (size_t)(d - 1) * B * K,
			       sizeof(*ids) * B * K);
		} else {
			ret = moem_op_router(e->be, NULL, &ra);
			if (!ret)
				ret = moem_be_dtoh(e->be, e->pg_logits_host, e->pg_logits,
						   sizeof(float) * B * N, NULL);
			if (!ret)
				ret = moem_be_stream_sync(e->be, NULL);
			if (!ret)
				ret = moem_route_topk(&rc, B, e->pg_logits_host, NULL, &out);
			if (ret)
				return ret;
		}
		/* activation probability: 1 - exp(-tokens that pick the expert) */
		for (uint32_t x = 0; x < N; x++)
			e->pg_prob[x] = 0;
		for (size_t i = 0; i < (size_t)B * K; i++)
			if (ids[i] >= 0 && (uint32_t)ids[i] < N)
				e->pg_prob[ids[i]] += 1;
		for (uint32_t x = 0; x < N; x++)
			e->pg_prob[x] = e->pg_prob[x] > 0 ? 1.0f - expf(-e->pg_prob[x]) : 0.0f;
		moem_driver_pregate(e->drv, e->pos + d, e->pg_prob);
	}
	return ret;
}

int moem_eng_lookahead(struct moem_engine *e)
{
	struct moem_tiers_stats ts;
	uint64_t bytes;

	if (e->dcfg.paging)
		return moem_driver_page_next(e->drv);
	if (!e->dcfg.prefetch)
		return 0;
	if (e->o.lockstep)
		return moem_driver_lookahead(e->drv); /* at the link rate it was told */
	moem_tiers_get_stats(e->tiers, &ts);
	bytes = ts.bytes_h2d[0] + ts.bytes_h2d[1] + ts.bytes_h2d[2];
	if (ts.link_busy_ns > e->pf_last_ns && bytes > e->pf_last_bytes)
		moem_driver_transfer(e->drv, bytes - e->pf_last_bytes,
				     ts.link_busy_ns - e->pf_last_ns);
	e->pf_last_bytes = bytes;
	e->pf_last_ns = ts.link_busy_ns;
	return moem_driver_lookahead(e->drv);
}

/* DynaExq's counts, once per interval: the device histogram, or moem_hot. */
static void precision_counts(struct moem_engine *e, uint64_t now)
{
	const uint32_t N = e->cfg->n_experts;

	if (e->interval_start_ns && now - e->interval_start_ns < 200000000ULL)
		return;
	if (e->interval_start_ns && moem_eng_hotness_interval(e)) {
		/* moem_hot served this interval (hotness "bpf") */
	} else if (e->interval_start_ns &&
		   moem_be_dtoh(e->be, e->counts_host, e->counts, (uint64_t)e->n_moe * N * 4,
				NULL) == 0 &&
		   moem_be_stream_sync(e->be, NULL) == 0) {
		for (uint32_t m = 0; m < e->n_moe; m++)
			moem_driver_counts(e->drv, m, e->counts_host + (size_t)m * N);
		moem_be_memset(e->be, e->counts, 0, (uint64_t)e->n_moe * N * 4, NULL);
	}
	e->interval_start_ns = now;
}

int moem_eng_after_layer(struct moem_engine *e, uint32_t m, uint64_t layer_ns)
{
	uint64_t now = moem_now_ns();

	moem_driver_layer_time(e->drv, layer_ns);
	if (e->o.lockstep)
		moem_tiers_drain(e->tiers); /* what this layer issued has landed */
	if (e->dcfg.dynaexq)
		precision_counts(e, now);
	return moem_driver_layer_end(e->drv, now);
}

/*
 * FluxMoE's controller, once per step: tau_load is the time the step's
 * demand transfers take (the experts it needed that were not in HBM, as
 * the simulator counts them: its misses, late window loads included),
 * at the link's measured rate (lockstep: the rate the policies were
 * told). bytes_streamed, all the step's H2D bytes, is not that: window
 * loads that landed in time cost the step nothing.
 */
void moem_eng_after_step(struct moem_engine *e, uint64_t compute_ns, uint64_t bytes_streamed)
{
	struct moem_tiers_stats ts;
	double demand;

	(void)bytes_streamed;
	if (!e->dcfg.paging)
		return;
	moem_tiers_get_stats(e->tiers, &ts);
	demand = (double)(ts.misses - e->pg_last_misses) * (double)e->blob_bytes[0];
	e->pg_last_misses = ts.misses;
	if (!compute_ns)
		return;
	if (e->o.lockstep)
		moem_driver_step_end(e->drv, (double)compute_ns, demand / ENG_LOCKSTEP_GBPS);
	else if (ts.link_bw > 0)
		moem_driver_step_end(e->drv, (double)compute_ns, demand / ts.link_bw * 1e9);
}
