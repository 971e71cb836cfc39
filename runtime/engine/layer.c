// SPDX-License-Identifier: GPL-2.0-only
/*
 * One model layer of the decode loop (engine.h): rmsnorm, router, routing
 * policy, residency (hit / miss / fallback) in cache-aware order, the
 * grouped expert FFN through pinned versions as they land, shared experts,
 * combine. The FFN writes each (token, slot) row once and combine reduces
 * slots in order, so the order in which experts become resident never
 * changes the result. In a step planned on the device (dstep.c) a MoE
 * layer instead routes and plans its FFN there, with no host round trip.
 */
#include <errno.h>
#include <string.h>

#include <moem/error.h>
#include <moem/log.h>
#include <moem/usdt.h>
#include <moem/util.h>

#include "engine_int.h"

struct group {
	uint32_t expert;
	uint32_t first, n; /* into assign[] */
	int pending;
	bool by_cost; /* on the CPU because the cost model chose it (not placed there) */
	struct moem_xref ref;
	struct moem_cref cref; /* on the CPU (hybrid.c): its DRAM copy */
};

struct layer_ctx {
	struct moem_engine *e;
	uint32_t m, B;
	/* n_groups on the device, then n_cpu on the CPU (hybrid execution) */
	struct group g[MOEM_MAX_EXPERTS];
	uint32_t n_groups, n_cpu;
	bool cpu_done;
	struct moem_exec_queue xq; /* the split's queues (moem_driver_exec_keep()) */
	struct group tmp[MOEM_MAX_EXPERTS];
	struct moem_ffn_assign assign[ENG_MAX_B * MOEM_MAX_TOPK];
	uint32_t n_assign;
	struct moem_step_stats *st;
	uint64_t lap; /* moem_now_ns() at the end of the last phase */
};

/* The time since the last phase ended goes to phase p of the step. */
static void lap(struct layer_ctx *c, enum moem_phase p)
{
	uint64_t t = moem_now_ns();

	c->st->phase_ns[p] += t - c->lap;
	c->lap = t;
}

static const char *const phase_names[MOEM_PHASE_NR] = {
	[MOEM_PHASE_ROUTE] = "route",
	[MOEM_PHASE_POLICY] = "policy",
	[MOEM_PHASE_SPLIT] = "split",
	[MOEM_PHASE_ACQUIRE] = "acquire",
	[MOEM_PHASE_LOOKAHEAD] = "lookahead",
	[MOEM_PHASE_LAUNCH] = "launch",
	[MOEM_PHASE_CPU] = "cpu",
	[MOEM_PHASE_WAIT] = "wait",
	[MOEM_PHASE_COMBINE] = "combine",
	[MOEM_PHASE_AFTER] = "after",
};

const char *moem_phase_name(enum moem_phase p)
{
	return (unsigned int)p < MOEM_PHASE_NR ? phase_names[p] : NULL;
}

static uint32_t key_of(const struct layer_ctx *c, const struct group *g)
{
	return c->m * c->e->cfg->n_experts + g->expert;
}

/* Run the FFN of the given groups (all resident and pinned), then unpin. */
static int run_groups(struct layer_ctx *c, struct group **gs, uint32_t n)
{
	struct moem_engine *e = c->e;
	struct moem_ffn_expert ex[MOEM_MAX_EXPERTS];
	struct moem_xref refs[MOEM_MAX_EXPERTS];
	struct moem_ffn_args a = {
		.B = c->B,
		.H = e->cfg->hidden,
		.I = e->cfg->moe_inter,
		.n_slots = e->cfg->top_k,
		.x = e->xb,
		.out = e->out,
		.n_experts = n,
		.experts = ex,
		.n_assign = c->n_assign,
		.assign = c->assign,
	};
	uint64_t seq;
	int ret;

	if (!n)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		ex[i].blob = gs[i]->ref.addr;
		ex[i].prec = e->prec[gs[i]->ref.pi];
		ex[i].first = gs[i]->first;
		ex[i].n = gs[i]->n;
		refs[i] = gs[i]->ref;
	}
	ret = moem_op_ffn(e->be, NULL, &a);
	/* Unpin even on failure; the compute mark covers the kernels issued. */
	seq = e->dev->ops->compute_mark(e->dev);
	moem_tiers_release(e->tiers, refs, n, seq);
	return ret;
}

/*
 * Route MoE layer m's B tokens on the device into e->ids/w/cnt; with
 * host_copy, also bring them (and the logits a trace wants) back into the
 * host mirrors and wait for them.
 */
static int route(struct moem_engine *e, uint32_t m, uint32_t B, const struct moem_trace_rec *rp,
		 bool host_copy)
{
	const struct moem_model_config *c = e->cfg;
	const uint32_t K = c->top_k, N = c->n_experts;
	int ret;

	e->cpu_x_queued = false;
	if (rp) {
		if (rp->tokens != B || rp->layer != m)
			return moem_errf(EINVAL,
					 "replayed trace record (step %llu layer %u, %u tokens) "
					 "does not match the run (layer %u, %u tokens)",
					 (unsigned long long)rp->step, rp->layer, rp->tokens, m, B);
		memcpy(e->ids_host, rp->ids, sizeof(int32_t) * B * K);
		memcpy(e->w_host, rp->w, sizeof(float) * B * K);
		memcpy(e->cnt_host, rp->cnt, sizeof(uint32_t) * B);
		ret = moem_be_htod(e->be, e->ids, e->ids_host, sizeof(int32_t) * B * K, NULL);
		if (!ret)
			ret = moem_be_htod(e->be, e->w, e->w_host, sizeof(float) * B * K, NULL);
		if (!ret)
			ret = moem_be_htod(e->be, e->cnt, e->cnt_host, sizeof(uint32_t) * B, NULL);
		/* the next layer rewrites the (pinned) mirrors: the copies read them first */
		if (!ret)
			ret = moem_be_stream_sync(e->be, NULL);
		return ret;
	} else {
		struct moem_router_args ra = {B, c->hidden, N, e->xb, e->gate[m], e->logits};
		struct moem_route_args a = {
			.cfg = moem_route_cfg_of(c),
			.lynx = e->rp.lynx,
			.k0 = e->rp.k0,
			.B = B,
			.logits = e->logits,
			.ids = e->ids,
			.w = e->w,
			.cnt = e->cnt,
		};

		switch (e->rp.kind) {
		case MOEM_RP_LYNX:
			a.mode = MOEM_ROUTE_LYNX; /* decode batches are memory bound */
			break;
		case MOEM_RP_OEA:
			a.mode = MOEM_ROUTE_OEA;
			break;
		case MOEM_RP_PIGGYBACK:
			a.mode = MOEM_ROUTE_PIGGYBACK;
			a.resident = e->resident;
			moem_tiers_resident_mask(e->tiers, m, e->res_host);
			ret = moem_be_htod(e->be, e->resident, e->res_host, N, NULL);
			if (!ret) /* as above: res_host is rewritten next layer */
				ret = moem_be_stream_sync(e->be, NULL);
			if (ret)
				return ret;
			break;
		case MOEM_RP_PRUNE:
			return moem_errf(EINVAL, "route policy prune is a simulator baseline only");
		default:
			a.mode = MOEM_ROUTE_TOPK;
			break;
		}
		ret = moem_op_router(e->be, NULL, &ra);
		if (!ret)
			ret = moem_op_route(e->be, NULL, &a);
		if (ret || !host_copy)
			return ret;
		if (!ret)
			ret = moem_be_dtoh(e->be, e->ids_host, e->ids, sizeof(int32_t) * B * K,
					   NULL);
		if (!ret)
			ret = moem_be_dtoh(e->be, e->w_host, e->w, sizeof(float) * B * K, NULL);
		if (!ret)
			ret = moem_be_dtoh(e->be, e->cnt_host, e->cnt, sizeof(uint32_t) * B, NULL);
		if (!ret && e->o.trace_logits)
			ret = moem_be_dtoh(e->be, e->logits_host, e->logits, sizeof(float) * B * N,
					   NULL);
		if (!ret)
			ret = moem_eng_cpu_inputs_queue(e, B);
		if (!ret)
			ret = moem_be_stream_sync(e->be, NULL);
		return ret;
	}
}

/*
 * An FFN every token uses with weight 1 (a dense layer's MLP, a layer's
 * shared experts): one bf16 blob resident for the engine's lifetime, its
 * output in slot 0 of e->shout for combine.
 */
static int fixed_ffn(struct moem_engine *e, moem_dptr blob, uint32_t inter, uint32_t B)
{
	struct moem_ffn_expert ex = {blob, MOEM_PREC_BF16, 0, B};
	struct moem_ffn_assign as[ENG_MAX_B];
	struct moem_ffn_args a = {.B = B,
				  .H = e->cfg->hidden,
				  .I = inter,
				  .n_slots = 1,
				  .x = e->xb,
				  .out = e->shout,
				  .n_experts = 1,
				  .experts = &ex,
				  .n_assign = B,
				  .assign = as};

	for (uint32_t t = 0; t < B; t++)
		as[t] = (struct moem_ffn_assign){(uint16_t)t, 0};
	return moem_op_ffn(e->be, NULL, &a);
}

static int dense_layer(struct moem_engine *e, uint32_t l, uint32_t B)
{
	struct moem_combine_args c = {
		.B = B, .H = e->cfg->hidden, .h = e->h, .k = 0, .n_shared = 1, .shared = e->shout};
	int ret = fixed_ffn(e, e->dense[l], e->dense_l.inter, B);

	if (!ret)
		ret = moem_op_combine(e->be, NULL, &c);
	return ret;
}

/* Group the (token, slot) pairs by expert, in execution order. */
static void build_groups(struct layer_ctx *c, const uint32_t *order, uint32_t n)
{
	const struct moem_engine *e = c->e;
	const uint32_t K = e->cfg->top_k;

	c->n_groups = 0;
	c->n_assign = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct group *g = &c->g[c->n_groups++];

		memset(g, 0, sizeof(*g));
		g->expert = order[i];
		g->first = c->n_assign;
		for (uint32_t t = 0; t < c->B; t++)
			for (uint32_t j = 0; j < e->cnt_host[t]; j++)
				if (e->ids_host[t * K + j] == (int32_t)order[i])
					c->assign[c->n_assign++] =
						(struct moem_ffn_assign){(uint16_t)t, (uint16_t)j};
		g->n = c->n_assign - g->first;
	}
}

/* Wait for a pending group to land, run it and unpin it. */
static int finish_pending(struct layer_ctx *c, struct group *g, struct moem_step_stats *st)
{
	struct moem_engine *e = c->e;
	uint64_t t0 = moem_now_ns();
	int ret;

	ret = moem_tiers_wait(e->tiers, &g->ref);
	st->stall_ns += moem_now_ns() - t0;
	MOEM_USDT_STALL(c->m, g->expert, moem_now_ns() - t0);
	g->pending = 0;
	if (ret)
		return ret;
	ret = run_groups(c, &g, 1);
	moem_driver_unpin(e->drv, key_of(c, g));
	return ret;
}

/* Give back the CPU groups' DRAM pins not released yet. */
static void cpu_unpin(struct layer_ctx *c)
{
	struct moem_cref refs[MOEM_MAX_EXPERTS];

	if (c->cpu_done || !c->n_cpu)
		return;
	for (uint32_t i = 0; i < c->n_cpu; i++)
		refs[i] = c->g[c->n_groups + i].cref;
	moem_tiers_cpu_release(c->e->tiers, refs, c->n_cpu);
	c->cpu_done = true;
}

/*
 * Hybrid execution: the experts the cost model (or a --place rule,
 * --cpu-moe-layers) sends to the CPU get their DRAM copy pinned (a load from NVMe started
 * for those not staged) and move, in order, behind the device's groups.
 * One that DRAM has no room for now runs on the device instead, unless
 * it is placed on the CPU.
 */
static int split_cpu(struct layer_ctx *c)
{
	struct moem_engine *e = c->e;
	struct moem_exec_queue *q = &c->xq;
	uint32_t n_gpu = 0, n_cpu = 0;
	int ret = 0;

	c->n_cpu = 0;
	c->cpu_done = false;
	*q = (struct moem_exec_queue){0};
	for (uint32_t i = 0; i < c->n_groups; i++) {
		struct group *g = &c->g[i];
		bool forced;

		if (moem_eng_exec_of(e, q, c->m, g->expert, g->n, &forced) == MOEM_EXEC_CPU) {
			ret = moem_tiers_cpu_acquire(e->tiers, c->m, g->expert, &g->cref);
			if (ret == -EAGAIN && forced) {
				moem_tiers_drain(e->tiers); /* copies reading DRAM finish */
				ret = moem_tiers_cpu_acquire(e->tiers, c->m, g->expert, &g->cref);
			}
			if (ret == -EAGAIN && forced)
				ret = moem_errf(ENOSPC,
						"layer %u expert %u: no room in the DRAM budget "
						"for an expert placed on the CPU",
						e->moe_layer[c->m], g->expert);
			if (ret >= 0) {
				g->pending = ret == MOEM_ACQ_PENDING;
				g->by_cost = !forced;
				c->tmp[n_cpu++] = *g;
				ret = 0;
				continue;
			}
			if (ret != -EAGAIN)
				break;
			ret = 0;      /* DRAM is full of pinned versions: the device's */
			q->link_ns++; /* and the link carries its load: nothing behind it */
		}
		c->g[n_gpu++] = *g;
	}
	/* The CPU's groups after the device's: c->g[n_gpu..] */
	memcpy(&c->g[n_gpu], c->tmp, n_cpu * sizeof(c->tmp[0]));
	c->n_groups = n_gpu;
	c->n_cpu = n_cpu;
	if (ret) {
		cpu_unpin(c);
		return ret;
	}
	if (n_cpu && e->cpu_be != e->be)
		/* the CPU pool's workers wake while the device's work is issued */
		moem_be_wake(e->cpu_be);
	if (n_cpu)
		ret = moem_eng_cpu_inputs(e, c->B);
	if (ret)
		cpu_unpin(c);
	return ret;
}

/* Wait for the CPU groups' DRAM copies, run them on the CPU and unpin them. */
static int cpu_groups(struct layer_ctx *c, struct moem_step_stats *st)
{
	struct moem_engine *e = c->e;
	struct moem_ffn_expert ex[MOEM_MAX_EXPERTS];
	uint64_t t0 = moem_now_ns();
	int ret = 0;

	if (!c->n_cpu || c->cpu_done)
		return 0;
	for (uint32_t i = 0; i < c->n_cpu; i++) {
		struct group *g = &c->g[c->n_groups + i];

		/* every load is waited for, so that each pin is settled */
		if (g->pending) {
			int r = moem_tiers_cpu_wait(e->tiers, &g->cref);

			ret = ret ? ret : r;
			g->pending = 0;
		}
		ex[i] = (struct moem_ffn_expert){(moem_dptr)(uintptr_t)g->cref.host,
						 e->prec[g->cref.pi], g->first, g->n};
	}
	if (!ret)
		ret = moem_eng_cpu_ffn(e, c->B, ex, c->n_cpu, c->assign, c->n_assign);
	cpu_unpin(c);
	st->cpu_experts += c->n_cpu;
	st->cpu_ns += moem_now_ns() - t0;
	return ret;
}

static int residency_and_ffn(struct layer_ctx *c, struct moem_step_stats *st)
{
	struct moem_engine *e = c->e;
	struct group *ready[MOEM_MAX_EXPERTS], *pend[MOEM_MAX_EXPERTS];
	uint32_t n_ready = 0, n_pend = 0, done_pend = 0;
	bool unpinned = false, drained = false;
	int ret = 0;

	for (uint32_t i = 0; i < c->n_groups;) {
		struct group *g = &c->g[i];

		ret = moem_tiers_acquire(e->tiers, c->m, g->expert, &g->ref);
		if (ret == -EAGAIN) {
			/*
			 * Every HBM slot is pinned by this layer or in flight for it:
			 * run what is resident and let it go, else finish the oldest
			 * miss, else cancel prefetches for later layers, else run the
			 * CPU's experts (their DRAM pins), else let the policy take
			 * this layer's experts not acquired yet (a budget of a few
			 * experts), else wait for what is moving to land; then try
			 * again.
			 */
			lap(c, MOEM_PHASE_ACQUIRE);
			if (n_ready) {
				ret = run_groups(c, ready, n_ready);
				for (uint32_t j = 0; j < n_ready; j++)
					moem_driver_unpin(e->drv, key_of(c, ready[j]));
				n_ready = 0;
				lap(c, MOEM_PHASE_LAUNCH);
			} else if (done_pend < n_pend) {
				ret = finish_pending(c, pend[done_pend++], st);
				lap(c, MOEM_PHASE_WAIT);
			} else if (moem_driver_reclaim(e->drv)) {
				ret = 0; /* prefetches for later layers gave their slots back */
			} else if (c->n_cpu && !c->cpu_done) {
				/* a DRAM budget of a few experts: the CPU's pins hold the
				 * staging room this miss needs; run them and let it go */
				ret = cpu_groups(c, st);
				for (uint32_t j = 0; j < c->n_cpu; j++)
					moem_driver_unpin(e->drv,
							  key_of(c, &c->g[c->n_groups + j]));
				lap(c, MOEM_PHASE_CPU);
			} else if (!unpinned) {
				for (uint32_t j = i; j < c->n_groups; j++)
					moem_driver_unpin(e->drv, key_of(c, &c->g[j]));
				unpinned = true;
				ret = 0;
			} else if (!drained) {
				/* copies and loads still moving (a prefetch, FluxMoE's page,
				 * the CPU's load on a slow link or a loaded machine) hold
				 * the room: let them land, then the driver gives it back */
				moem_tiers_drain(e->tiers);
				drained = true;
				ret = 0;
			} else {
				return moem_errf(ENOSPC,
						 "layer %u expert %u: no HBM slot can be freed",
						 e->moe_layer[c->m], g->expert);
			}
			if (ret)
				return ret;
			continue;
		}
		if (ret < 0)
			return moem_err_prefix(-ret, "layer %u expert %u", e->moe_layer[c->m],
					       g->expert);
		unpinned = drained = false;
		moem_eng_used(e, &g->ref, ret);
		i++;
		if (ret == MOEM_ACQ_PENDING) {
			g->pending = 1;
			pend[n_pend++] = g;
			continue;
		}
		ready[n_ready++] = g;
	}
	lap(c, MOEM_PHASE_ACQUIRE);
	/* The CPU's experts into HBM behind the layer (the driver decides whether). */
	if (c->n_cpu) {
		uint32_t keys[MOEM_MAX_EXPERTS], n = 0;

		for (uint32_t i = 0; i < c->n_cpu; i++)
			if (c->g[c->n_groups + i].by_cost)
				keys[n++] = key_of(c, &c->g[c->n_groups + i]);
		ret = moem_driver_exec_keep(e->drv, &c->xq, keys, n);
		if (ret)
			return ret;
	}
	/* Look ahead now (prefetch, FluxMoE's window): this layer's hits are
	 * pinned, its misses have their slots and are queued first. */
	ret = moem_eng_lookahead(e);
	if (ret)
		return ret;
	lap(c, MOEM_PHASE_LOOKAHEAD);
	ret = run_groups(c, ready, n_ready);
	lap(c, MOEM_PHASE_LAUNCH);
	/* The CPU's experts while the device computes and its misses land. */
	if (!ret)
		ret = cpu_groups(c, st);
	if (c->n_cpu)
		lap(c, MOEM_PHASE_CPU);
	while (!ret && done_pend < n_pend)
		ret = finish_pending(c, pend[done_pend++], st);
	lap(c, MOEM_PHASE_WAIT);
	return ret;
}

/* A MoE layer's shared experts, then h += routed (weighted) + shared. */
static int shared_and_combine(struct moem_engine *e, uint32_t l, uint32_t B)
{
	struct moem_combine_args a = {.B = B,
				      .H = e->cfg->hidden,
				      .h = e->h,
				      .k = e->cfg->top_k,
				      .routed = e->out,
				      .w = e->w,
				      .cnt = e->cnt,
				      .n_shared = e->shared[l] ? 1 : 0,
				      .shared = e->shout};
	int ret = 0;

	if (e->shared[l])
		ret = fixed_ffn(e, e->shared[l], e->shared_l.inter, B);
	if (!ret)
		ret = moem_op_combine(e->be, NULL, &a);
	return ret;
}

/*
 * MoE layer m in a step planned on the device (dstep.c): route, count and
 * plan the FFN there from the step's residency table. Nothing here waits
 * for the device; the host reads the routing after the step.
 */
static int moe_layer_dev(struct moem_engine *e, uint32_t l, uint32_t m, uint32_t B)
{
	const struct moem_model_config *cfg = e->cfg;
	struct moem_hist_args h = {B,	     cfg->top_k, cfg->n_experts, m,
				   e->n_moe, e->ids,	 e->cnt,	 e->counts};
	int ret = route(e, m, B, NULL, false);

	if (!ret)
		ret = moem_op_histogram(e->be, NULL, &h);
	if (!ret)
		ret = moem_eng_dstep_ffn(e, m, B);
	if (!ret)
		ret = shared_and_combine(e, l, B);
	return ret;
}

int moem_eng_route_seen(struct moem_engine *e, uint32_t m, uint32_t B, uint64_t step,
			uint8_t *active, struct moem_step_stats *st)
{
	const uint32_t N = e->cfg->n_experts, K = e->cfg->top_k;
	uint32_t T = 0;

	for (uint32_t t = 0; t < B; t++)
		for (uint32_t j = 0; j < e->cnt_host[t] && j < K; j++) {
			int32_t x = e->ids_host[t * K + j];

			if (x >= 0 && (uint32_t)x < N && !active[x]) {
				active[x] = 1;
				T++;
			}
		}
	st->active += T;
	moem_eng_count_routes(e, m, B);
	MOEM_USDT_ROUTE(m, step, B, K, e->ids_host, e->w_host, e->n_moe, N,
			e->trace_synthetic ? MOEM_TRACE_F_SYNTHETIC : 0);
	return moem_eng_routed(e, m, B, active);
}

int moem_eng_layer(struct moem_engine *e, uint32_t l, uint32_t B, uint64_t step,
		   const struct moem_trace_rec *replay, struct moem_step_stats *st)
{
	const struct moem_model_config *cfg = e->cfg;
	const uint32_t N = cfg->n_experts, K = cfg->top_k;
	struct moem_rmsnorm_args ra = {B, cfg->hidden, cfg->rms_eps, e->h, e->norm[l], e->xb};
	static __thread struct layer_ctx c;
	uint8_t active[MOEM_MAX_EXPERTS] = {0};
	uint32_t order[MOEM_MAX_EXPERTS], n_order, n_res, m;
	uint64_t t0 = moem_now_ns();
	int ret;

	ret = moem_op_rmsnorm(e->be, NULL, &ra);
	if (ret)
		return ret;
	if (e->moe_idx[l] < 0)
		return dense_layer(e, l, B);
	m = (uint32_t)e->moe_idx[l];
	/*
	 * The policies' clock (LRU ages, the predictor's history, prefetch and
	 * paging targets) counts the engine's steps, not this run's: step
	 * starts at 0 in every moem_engine_run(), and a clock going back made
	 * the predictor refuse every later target (FluxMoE's paging and
	 * ExpertFlow's prefetch did nothing after a daemon's first run).
	 * e->total.step is this step's number among all (decode passes
	 * step = e->total.step already).
	 */
	e->pos = e->total.step * e->n_moe + m;
	if (moem_eng_dstep_on(e))
		return moe_layer_dev(e, l, m, B);
	c.st = st;
	c.lap = t0;
	ret = route(e, m, B, replay, true);
	if (ret)
		return ret;
	{
		struct moem_hist_args h = {B, K, N, m, e->n_moe, e->ids, e->cnt, e->counts};

		ret = moem_op_histogram(e->be, NULL, &h);
		if (ret)
			return ret;
	}
	lap(&c, MOEM_PHASE_ROUTE);
	ret = moem_eng_route_seen(e, m, B, step, active, st);
	if (!ret)
		ret = moem_eng_pregate(e, m, B, replay);
	if (ret)
		return ret;
	if (e->trace) {
		struct moem_trace_rec r = {step,      m,
					   B,	      e->ids_host,
					   e->w_host, e->o.trace_logits ? e->logits_host : NULL,
					   NULL,      e->pg_depth ? e->pg_ids : NULL};

		ret = moem_trace_write(e->trace, &r);
		if (ret)
			return ret;
	}
	lap(&c, MOEM_PHASE_POLICY);
	if (moem_route_policy_ordered(&e->rp)) {
		moem_tiers_resident_mask(e->tiers, m, e->res_host);
		n_order = moem_route_exec_order(N, active, e->res_host, order, &n_res);
	} else {
		n_order = moem_route_exec_order(N, active, NULL, order, &n_res);
	}
	c.e = e;
	c.m = m;
	c.B = B;
	build_groups(&c, order, n_order);
	c.n_cpu = 0;
	if (moem_eng_hybrid_on(e)) {
		ret = split_cpu(&c);
		if (ret)
			return ret;
	}
	lap(&c, MOEM_PHASE_SPLIT);
	ret = residency_and_ffn(&c, st);
	if (!ret)
		ret = cpu_groups(&c, st); /* none on the device: not run yet */
	cpu_unpin(&c);
	if (ret)
		return ret;
	if (c.n_cpu)
		lap(&c, MOEM_PHASE_CPU);
	ret = shared_and_combine(e, l, B);
	if (ret)
		return ret;
	lap(&c, MOEM_PHASE_COMBINE);
	e->last_layer_ns = c.lap - t0;
	ret = moem_eng_after_layer(e, m, e->last_layer_ns);
	lap(&c, MOEM_PHASE_AFTER);
	return ret;
}
