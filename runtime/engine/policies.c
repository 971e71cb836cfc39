// SPDX-License-Identifier: GPL-2.0-only
/*
 * The engine's policy glue: the policies of runtime/placement/policy/ run unchanged
 * (the same code the simulator scores); this file feeds them events and
 * turns their decisions into tier operations.
 *
 *  - eviction: a moem_evict over version ids (the policy is configured
 *    with 2N "experts" per layer, so its key is the tiers' version id);
 *    a miss may evict anything evictable, a speculative fetch only what the
 *    policy ranks low (lru2's low level, pred's lower scores);
 *  - prefetch (ExpertFlow): observe each layer's routing, plan, issue at
 *    prefetch priority, report stalls, early landings, bandwidth and layer
 *    time;
 *  - precision (DynaExq): device histogram (or moem_hot, hotness "bpf")
 *    read once per interval into the hotness EMA; transitions become plan
 *    changes plus promotion fetches, announced by moem:promote/demote;
 *  - paging (FluxMoE): a protected resident set per layer sized by the rho
 *    controller, and the next layer streamed into the two-layer window.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/log.h>
#include <moem/usdt.h>
#include <moem/util.h>

#include "engine_int.h"

/* ---- eviction adapter --------------------------------------------------- */

static struct eng_evictor *to_ev(struct moem_evictor *ev)
{
	return (struct eng_evictor *)ev;
}

static void ev_add(struct moem_evictor *ev, uint32_t id)
{
	moem_evict_insert(to_ev(ev)->pol, id, to_ev(ev)->pos);
}

static void ev_del(struct moem_evictor *ev, uint32_t id)
{
	moem_evict_remove(to_ev(ev)->pol, id);
}

static void ev_touch(struct moem_evictor *ev, uint32_t id)
{
	moem_evict_access(to_ev(ev)->pol, id, to_ev(ev)->pos);
}

static bool ev_ok(void *arg, uint32_t id)
{
	struct eng_evictor *x = arg;

	return !x->protect[id] && x->ok(x->ok_arg, id);
}

static int ev_pick(struct moem_evictor *ev, uint32_t incoming, enum moem_prio prio,
		   bool (*ok)(void *arg, uint32_t id), void *arg, uint32_t *id)
{
	struct eng_evictor *x = to_ev(ev);

	x->ok = ok;
	x->ok_arg = arg;
	if (prio == MOEM_PRIO_MISS || incoming == MOEM_NO_VERSION)
		return moem_evict_victim(x->pol, x->pos, 0, ev_ok, x, id);
	if (x->kind == MOEM_EVICT_PRED)
		return moem_evict_victim_below(
			x->pol, x->pos, moem_evict_get_score(x->pol, incoming), ev_ok, x, id);
	return moem_evict_victim(x->pol, x->pos, MOEM_EVICT_LOW_ONLY, ev_ok, x, id);
}

static void ev_destroy(struct moem_evictor *ev)
{
	struct eng_evictor *x = to_ev(ev);

	moem_evict_destroy(x->pol);
	free(x->protect);
	x->pol = NULL;
	x->protect = NULL;
}

int moem_eng_evictor_init(struct moem_engine *e)
{
	struct moem_evict_cfg c;
	int ret;

	memset(&c, 0, sizeof(c));
	ret = moem_evict_parse(e->evict_spec, &c);
	if (ret)
		return moem_err_prefix(-ret, "--evict");
	c.n_layers = e->n_moe;
	c.n_experts = 2 * e->cfg->n_experts;
	ret = moem_evict_create(&c, &e->hev.pol);
	if (ret)
		return ret;
	e->hev.kind = c.kind;
	e->hev.protect = calloc((size_t)e->n_moe * e->cfg->n_experts * 2, 1);
	if (!e->hev.protect) {
		moem_evict_destroy(e->hev.pol);
		return -ENOMEM;
	}
	e->hev.ev.add = ev_add;
	e->hev.ev.del = ev_del;
	e->hev.ev.touch = ev_touch;
	e->hev.ev.pick = ev_pick;
	e->hev.ev.destroy = ev_destroy;
	return 0;
}

/* ---- opening ------------------------------------------------------------ */

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

static int open_precision(struct moem_engine *e)
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
	c.n_layers = e->n_moe;
	c.n_experts = e->cfg->n_experts;
	c.hi = e->prec[0];
	c.lo = e->prec[1];
	if (!n_hi_given) {
		ret = moem_eng_dynaexq_n_hi(e, e->o.hbm_budget, MOEM_BUDGET_PERMILLE_MAX, &c.n_hi);
		if (ret)
			return moem_err_prefix(-ret, "--precision dynaexq");
	}
	/* The forward pass never waits for a promotion: it reads lo meanwhile. */
	e->o.allow_fallback = true;
	ret = moem_dynaexq_create(&c, &e->dx);
	if (!ret)
		moem_info("precision: dynaexq %s/%s, %u hi experts per layer", moem_prec_name(c.hi),
			  moem_prec_name(c.lo), c.n_hi);
	return ret;
}

static uint32_t paging_capacity(struct moem_engine *e, uint64_t hbm)
{
	uint64_t s = moem_align_up(e->blob_bytes[0], 65536);
	uint64_t window = 2ULL * e->cfg->n_experts * s;

	if (hbm <= window)
		return 0;
	return (uint32_t)moem_min((hbm - window) / ((uint64_t)e->n_moe * s),
				  (uint64_t)e->cfg->n_experts);
}

static int open_paging(struct moem_engine *e)
{
	struct moem_paging_cfg c;
	bool initial_given = false;
	uint64_t window = 2ULL * e->cfg->n_experts * moem_align_up(e->blob_bytes[0], 65536);
	int ret;

	moem_paging_default(&c, e->n_moe, e->cfg->n_experts);
	ret = moem_paging_parse(e->paging_spec, &c, &initial_given);
	if (ret)
		return moem_err_prefix(-ret, "--paging");
	if (e->o.hbm_budget < window)
		return moem_errf(ENOSPC,
				 "--paging fluxmoe needs an HBM budget of at least two layers of "
				 "experts (%llu bytes), have %llu",
				 (unsigned long long)window, (unsigned long long)e->o.hbm_budget);
	c.n_layers = e->n_moe;
	c.n_experts = e->cfg->n_experts;
	c.capacity = paging_capacity(e, e->o.hbm_budget);
	if (!initial_given || c.initial > c.capacity)
		c.initial = c.capacity / 2;
	ret = moem_paging_create(&c, &e->pg);
	if (!ret)
		ret = moem_hot_create(e->n_moe, e->cfg->n_experts, 0.8, 200000000ULL, &e->hot);
	return ret;
}

int moem_eng_policies_open(struct moem_engine *e)
{
	struct moem_prefetch_cfg pc;
	int ret;

	ret = moem_route_policy_parse(e->route_spec, e->cfg->top_k, &e->rp);
	if (ret)
		return moem_err_prefix(-ret, "--route");
	moem_prefetch_default(&pc, e->n_moe, e->cfg->n_experts, e->cfg->top_k);
	ret = moem_prefetch_parse(e->prefetch_spec, &pc);
	if (ret && ret != -ENOENT)
		return moem_err_prefix(-ret, "--prefetch");
	if (ret == 0 && e->n_moe < 2) {
		moem_warn("prefetch needs two MoE layers or more: off");
	} else if (ret == 0) {
		pc.n_layers = e->n_moe;
		pc.n_experts = e->cfg->n_experts;
		pc.top_k = e->cfg->top_k;
		pc.bw_bytes_per_ns = e->o.link_gbps;
		pc.layer_ns = 1000000;
		pc.expert_bytes = e->blob_bytes[0];
		ret = moem_prefetch_create(&pc, &e->pf);
		if (ret)
			return ret;
	}
	if (!is_none(e->prec_spec)) {
		ret = open_precision(e);
		if (ret)
			return ret;
	}
	if (!is_none(e->paging_spec)) {
		if (e->pf)
			return moem_errf(EINVAL,
					 "--paging and --prefetch are alternatives: pick one");
		ret = open_paging(e);
		if (ret)
			return ret;
	}
	return 0;
}

/* After the tiers exist: DynaExq starts with every expert planned lo. */
int moem_eng_policies_attach(struct moem_engine *e)
{
	int ret = 0;

	for (uint32_t m = 0; e->dx && m < e->n_moe && !ret; m++)
		for (uint32_t x = 0; x < e->cfg->n_experts && !ret; x++)
			ret = moem_tiers_set_plan(e->tiers, m, x, MOEM_TIER_LO);
	return ret;
}

void moem_eng_policies_close(struct moem_engine *e)
{
	moem_prefetch_destroy(e->pf);
	moem_dynaexq_destroy(e->dx);
	moem_paging_destroy(e->pg);
	moem_hot_destroy(e->hot);
	e->pf = NULL;
	e->dx = NULL;
	e->pg = NULL;
	e->hot = NULL;
}

/* ---- per layer ---------------------------------------------------------- */

static uint32_t vid(const struct moem_engine *e, uint32_t m, uint32_t x, uint32_t pi)
{
	return moem_tiers_vid(e->cfg->n_experts, m, x, pi);
}

/*
 * ExpertFlow: after layer m's routing was observed at tick pos, plan and
 * issue prefetches for the ticks ahead (up to the prefetch_depth knob).
 */
void moem_eng_prefetch(struct moem_engine *e, uint32_t m)
{
	struct moem_prefetch_req req[256];
	uint32_t n, planned = 0, fetched = 0;
	struct moem_tiers_stats ts;
	uint64_t bytes;

	if (!e->pf || !e->prefetch_cap)
		return;
	moem_tiers_get_stats(e->tiers, &ts);
	bytes = ts.bytes_h2d[0] + ts.bytes_h2d[1] + ts.bytes_h2d[2];
	if (ts.link_busy_ns > e->pf_last_ns && bytes > e->pf_last_bytes)
		moem_prefetch_transfer(e->pf, bytes - e->pf_last_bytes,
				       ts.link_busy_ns - e->pf_last_ns);
	e->pf_last_bytes = bytes;
	e->pf_last_ns = ts.link_busy_ns;
	if (e->hev.kind == MOEM_EVICT_PRED) {
		float prob[MOEM_MAX_EXPERTS];

		if (moem_prefetch_reuse(e->pf, m, prob) == 0)
			for (uint32_t x = 0; x < e->cfg->n_experts; x++)
				moem_evict_score(e->hev.pol,
						 vid(e, m, x, moem_tiers_plan(e->tiers, m, x)),
						 prob[x]);
	}
	n = moem_prefetch_plan(e->pf, e->pos, req, MOEM_ARRAY_SIZE(req));
	for (uint32_t i = 0; i < n; i++) {
		uint32_t pi;
		int r;

		if (req[i].pos - e->pos > e->prefetch_cap)
			continue;
		pi = moem_tiers_plan(e->tiers, req[i].layer, req[i].expert);
		planned++;
		moem_evict_predict(e->hev.pol, vid(e, req[i].layer, req[i].expert, pi), req[i].pos);
		if (e->hev.kind == MOEM_EVICT_PRED)
			moem_evict_score(e->hev.pol, vid(e, req[i].layer, req[i].expert, pi),
					 req[i].prob);
		r = moem_tiers_prefetch(e->tiers, req[i].layer, req[i].expert, MOEM_PRIO_PREFETCH);
		if (r == 1)
			fetched++;
		else if (r == -EAGAIN)
			break; /* nothing the policy will give up: stop for this layer */
	}
	moem_prefetch_issued(e->pf, planned, fetched);
	moem_evict_set_horizon(e->hev.pol, moem_prefetch_horizon(e->pf));
}

/* DynaExq: counts once per interval, then transitions. */
static void precision_layer(struct moem_engine *e, uint64_t now)
{
	struct moem_dx_action a;
	uint32_t j = 0;

	if (now - e->interval_start_ns >= 200000000ULL || !e->interval_start_ns) {
		const uint32_t N = e->cfg->n_experts;

		if (e->interval_start_ns && moem_eng_hotness_interval(e)) {
			/* moem_hot served this interval (hotness "bpf") */
		} else if (e->interval_start_ns &&
			   moem_be_dtoh(e->be, e->counts_host, e->counts,
					(uint64_t)e->n_moe * N * 4, NULL) == 0 &&
			   moem_be_stream_sync(e->be, NULL) == 0) {
			for (uint32_t m = 0; m < e->n_moe; m++)
				moem_dynaexq_add_counts(e->dx, m, e->counts_host + (size_t)m * N);
			moem_be_memset(e->be, e->counts, 0, (uint64_t)e->n_moe * N * 4, NULL);
		}
		e->interval_start_ns = now;
	}
	moem_dynaexq_tick(e->dx, now);
	/* Complete what landed: the handle now resolves to the new version. */
	for (uint32_t i = 0; i < e->n_dx_inflight; i++) {
		struct moem_dx_action *x = &e->dx_inflight[i];
		int want = x->promote ? MOEM_TIER_HI : MOEM_TIER_LO;

		if (moem_tiers_published(e->tiers, x->layer, x->expert) == want)
			moem_dynaexq_complete(e->dx, x);
		else
			e->dx_inflight[j++] = *x;
	}
	e->n_dx_inflight = j;
	while (moem_dynaexq_next(e->dx, &a) == 1) {
		int r;

		if (e->n_dx_inflight == e->cap_dx_inflight) {
			uint32_t cap = e->cap_dx_inflight ? 2 * e->cap_dx_inflight : 64;
			struct moem_dx_action *p = realloc(e->dx_inflight, sizeof(*p) * cap);

			if (!p) {
				moem_dynaexq_cancel(e->dx, &a);
				break;
			}
			e->dx_inflight = p;
			e->cap_dx_inflight = cap;
		}
		moem_tiers_set_plan(e->tiers, a.layer, a.expert,
				    a.promote ? MOEM_TIER_HI : MOEM_TIER_LO);
		r = moem_tiers_prefetch(e->tiers, a.layer, a.expert, MOEM_PRIO_PROMOTE);
		if (r < 0) {
			/* A promotion that does not fit waits: offered again later. */
			moem_tiers_set_plan(e->tiers, a.layer, a.expert,
					    a.promote ? MOEM_TIER_LO : MOEM_TIER_HI);
			moem_dynaexq_cancel(e->dx, &a);
			break;
		}
		if (a.promote)
			MOEM_USDT_PROMOTE(a.layer, a.expert, (uint32_t)e->prec[1],
					  (uint32_t)e->prec[0]);
		else
			MOEM_USDT_DEMOTE(a.layer, a.expert, (uint32_t)e->prec[0],
					 (uint32_t)e->prec[1]);
		e->dx_inflight[e->n_dx_inflight++] = a;
	}
}

/* FluxMoE: one migration for layer m, then stream the next layer. */
static void paging_layer(struct moem_engine *e, uint32_t m, uint64_t step, uint64_t now)
{
	const uint32_t N = e->cfg->n_experts, next = (m + 1) % e->n_moe;
	uint8_t res[MOEM_MAX_EXPERTS];
	struct moem_paging_mig mig;

	moem_hot_tick(e->hot, now);
	for (uint32_t x = 0; x < N; x++)
		res[x] = e->hev.protect[vid(e, m, x, MOEM_TIER_HI)];
	if (moem_paging_migration(e->pg, step, m, res, moem_hot_scores(e->hot, m), &mig) == 1) {
		uint32_t id = vid(e, mig.layer, mig.expert, MOEM_TIER_HI);

		e->hev.protect[id] = mig.promote;
		if (mig.promote)
			moem_tiers_prefetch(e->tiers, mig.layer, mig.expert, MOEM_PRIO_PROMOTE);
	}
	for (uint32_t x = 0; x < N; x++)
		if (moem_tiers_prefetch(e->tiers, next, x, MOEM_PRIO_PREFETCH) == -EAGAIN)
			break;
}

void moem_eng_after_layer(struct moem_engine *e, uint32_t m, uint32_t B, uint64_t step,
			  uint64_t layer_ns)
{
	uint64_t now = moem_now_ns();

	if (e->pf)
		moem_prefetch_layer_time(e->pf, layer_ns);
	if (e->dx)
		precision_layer(e, now);
	if (e->pg) {
		moem_hot_count(e->hot, m, e->ids_host, (size_t)B * e->cfg->top_k);
		paging_layer(e, m, step, now);
	}
}

void moem_eng_after_step(struct moem_engine *e, uint64_t step, uint64_t compute_ns,
			 uint64_t bytes_streamed)
{
	struct moem_tiers_stats ts;

	if (!e->pg)
		return;
	moem_tiers_get_stats(e->tiers, &ts);
	if (step == UINT64_MAX) {
		moem_paging_set_capacity(e->pg, paging_capacity(e, ts.hbm_budget));
		return;
	}
	if (compute_ns && ts.link_bw > 0)
		moem_paging_control(e->pg, (double)compute_ns,
				    (double)bytes_streamed / ts.link_bw * 1e9);
}
