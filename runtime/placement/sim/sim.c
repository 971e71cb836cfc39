// SPDX-License-Identifier: GPL-2.0-only
/*
 * The trace simulator's driver (sim.h): reads the trace record by record
 * (one per layer tick), plays the engine's per-layer sequence with
 * modelled time, and hands the policy-specific part to sim_cache.c or
 * sim_modes.c:
 *
 *   t0           layer starts; completed transfers are delivered
 *   t_r = t0 + layer_ns   attention and router done: routing known,
 *                misses issued (miss priority), prefetch planned
 *   end          last expert of the layer computed; stall = end - t_r -
 *                the experts' compute
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/cost.h>
#include <moem/error.h>
#include <moem/route.h>

#include "sim_int.h"

void moem_sim_cost_default(struct moem_sim_cost *c)
{
	memset(c, 0, sizeof(*c));
	moem_cost_default(&c->cost);
	c->hidden = 2048;
	c->inter = 768;
	c->prec = MOEM_PREC_BF16;
	c->piece_bytes = 8 * MOEM_MiB;
}

int moem_sim_cost_finish(struct moem_sim_cost *c)
{
	int ret;

	for (int p = 0; p < MOEM_PREC_NR; p++) {
		struct moem_expert_layout l;

		ret = moem_expert_layout((enum moem_prec)p, c->hidden, c->inter, &l);
		if (ret)
			return moem_err_prefix(-ret, "sim: expert shape %ux%u", c->hidden,
					       c->inter);
		c->expert_bytes[p] = l.bytes;
	}
	ret = moem_cost_check(&c->cost);
	if (ret)
		return moem_err_prefix(-ret, "sim");
	if (c->piece_bytes < 4096 || c->piece_bytes > MOEM_GiB)
		return moem_errf(EINVAL, "sim: piece size must be 4 KiB..1 GiB");
	if (!(c->jitter >= 0 && c->jitter <= 1))
		return moem_errf(EINVAL, "sim: jitter %g not in [0, 1]", c->jitter);
	return 0;
}

/* A DRAM victim: staged, and not being copied to HBM (the engine pins it then). */
static bool dram_ok(void *arg, uint32_t vid)
{
	const struct sim *s = arg;

	return s->in_dram[vid / 2] && s->k[vid / 2].st != K_FLIGHT;
}

/*
 * Bandwidth of a transfer of key into HBM. With a DRAM budget below the
 * model, DRAM is a cache (in units of the served precision's expert
 * size) under the engine's rule (driver.h: the policy's victim, versions
 * that also hold an HBM slot first) and a DRAM miss is read from NVMe
 * through a pipelined bounce: min(PCIe, NVMe) bandwidth, then kept in
 * DRAM.
 */
double moem_sim_link_bpn(struct sim *s, uint32_t key, uint64_t bytes)
{
	double bpn = moem_cost_h2d_bpn(&s->c->cost, false);

	if (s->dram_cache && s->in_dram[key]) {
		moem_driver_dram_used(s->d, key * 2);
	} else if (s->dram_cache) {
		bool room = true;

		bpn = moem_cost_h2d_bpn(&s->c->cost, true);
		if (s->counted)
			s->r->bytes_nvme += bytes;
		while (!moem_tier_budget_try_reserve(&s->dram, s->size)) {
			uint32_t v;

			if (moem_driver_dram_pick(s->d, dram_ok, s, &v)) {
				room = false;
				break;
			}
			moem_driver_dram_removed(s->d, v);
			s->in_dram[v / 2] = 0;
			moem_tier_budget_release(&s->dram, s->size);
		}
		if (room) {
			s->in_dram[key] = 1;
			moem_driver_dram_inserted(s->d, key * 2);
		}
	}
	if (s->c->jitter > 0) {
		double f = 1 + s->c->jitter * moem_rng_normal(&s->rng);

		bpn *= f < 0.1 ? 0.1 : f;
	}
	return bpn;
}

void moem_sim_on_done(struct sim *s, struct sim_xfer *x)
{
	/* a copy back to DRAM: its DRAM copy was counted in when it was queued */
	if (x->kind == XK_WRITEBACK) {
		if (x->counted)
			s->r->bytes_d2h += x->bytes;
		return;
	}
	if (x->counted) {
		s->r->bytes_pcie += x->bytes;
		if (x->kind == XK_DEMAND)
			s->r->bytes_demand += x->bytes;
		else if (x->kind == XK_PREFETCH)
			s->r->bytes_prefetch += x->bytes;
		else
			s->r->bytes_other += x->bytes;
	}
	switch (s->p->mode) {
	case MOEM_SIM_DYNAEXQ:
		moem_sim_dynaexq_done(s, x);
		break;
	default:
		moem_sim_cache_done(s, x);
		break;
	}
}

void moem_sim_advance(struct sim *s, uint64_t t)
{
	moem_sim_ce_run(s, t, SIM_NONE);
	moem_sim_ce_deliver(s, t);
}

static void sim_free(struct sim *s)
{
	moem_driver_destroy(s->d);
	moem_sim_ce_free(s);
	free(s->k);
	free(s->in_dram);
	free(s->ids);
	free(s->w);
	free(s->cnt);
	free(s->act);
	free(s->res);
	free(s->tok);
	free(s->pend);
	free(s->cpu_keys);
	free(s->keys);
	free(s->pgprob);
	free(s->next_use);
	free(s->place);
	moem_access_log_free(&s->log);
}

static int sim_alloc(struct sim *s, uint32_t max_tokens)
{
	const size_t LN = (size_t)s->L * s->N, B = max_tokens ? max_tokens : MOEM_TRACE_MAX_TOKENS;

	s->k = calloc(LN, sizeof(*s->k));
	s->in_dram = calloc(LN, 1);
	s->ids = malloc(B * s->K * sizeof(*s->ids));
	s->w = malloc(B * s->K * sizeof(*s->w));
	s->cnt = malloc(B * sizeof(*s->cnt));
	s->act = malloc(s->N);
	s->res = malloc(s->N);
	s->tok = malloc(s->N * sizeof(*s->tok));
	s->pend = malloc(s->N * sizeof(*s->pend));
	s->cpu_keys = malloc(s->N * sizeof(*s->cpu_keys));
	s->keys = malloc(s->N * sizeof(*s->keys));
	s->pgprob = malloc(s->N * sizeof(*s->pgprob));
	if (!s->k || !s->in_dram || !s->ids || !s->w || !s->cnt || !s->act || !s->res || !s->tok ||
	    !s->pend || !s->cpu_keys || !s->keys || !s->pgprob)
		return -ENOMEM;
	moem_access_log_init(&s->log, (uint32_t)LN);
	return moem_sim_ce_init(s, 1024);
}

/* Route one record with the policy (or take the trace's routing). */
static int route(struct sim *s, const struct moem_trace_rec *rec, uint32_t m,
		 struct moem_route_out *out)
{
	if (moem_route_policy_needs_logits(&s->rp)) {
		for (uint32_t e = 0; e < s->N; e++) {
			const struct sim_key *k = &s->k[moem_key(m, e, s->N)];

			s->res[e] = k->st == K_RES;
		}
		return moem_route_policy_apply(&s->rp, &s->rc, rec->tokens, rec->logits, NULL,
					       s->res, true, out);
	}
	memcpy(out->ids, rec->ids, (size_t)rec->tokens * s->K * sizeof(*out->ids));
	memcpy(out->w, rec->w, (size_t)rec->tokens * s->K * sizeof(*out->w));
	memcpy(out->cnt, rec->cnt, rec->tokens * sizeof(*out->cnt));
	return 0;
}

/*
 * The trace's pre-gate picks of the layers ahead (what the engine's
 * routers of those layers chose from this layer's input): as activation
 * probabilities, 1 - exp(-tokens picking the expert).
 */
static void pregate(struct sim *s, const struct moem_trace_rec *rec)
{
	for (uint32_t d = 1; d <= s->pg_depth && rec->layer + d < s->L; d++) {
		const int32_t *ids = rec->pregate + (size_t)(d - 1) * rec->tokens * s->K;

		memset(s->tok, 0, s->N * sizeof(*s->tok));
		for (size_t i = 0; i < (size_t)rec->tokens * s->K; i++)
			if (ids[i] >= 0)
				s->tok[ids[i]]++;
		for (uint32_t e = 0; e < s->N; e++)
			s->pgprob[e] = s->tok[e] ? (float)(1.0 - exp(-(double)s->tok[e])) : 0.0f;
		moem_driver_pregate(s->d, s->pos + d, s->pgprob);
	}
	/* s->tok is the layer's own count again */
	memset(s->tok, 0, s->N * sizeof(*s->tok));
	for (uint32_t t = 0; t < rec->tokens; t++)
		for (uint32_t j = 0; j < s->cnt[t]; j++)
			s->tok[s->ids[(size_t)t * s->K + j]]++;
}

/* A new step begins with this record: counting, and FluxMoE's controller. */
static void new_step(struct sim *s, uint64_t step, uint64_t t0)
{
	if (s->any_step && s->counted)
		s->counted_steps++;
	if (s->p->mode == MOEM_SIM_FLUXMOE && s->any_step)
		moem_sim_fluxmoe_step(s);
	s->any_step = true;
	s->last_step = step;
	s->counted = step >= s->o->warmup_steps;
	if (s->counted && !s->r->steps++) {
		s->count_start_ns = t0;
		moem_driver_get_stats(s->d, &s->st0);
	}
	if (s->counted && s->count_from == SIM_INF)
		s->count_from = s->log.n_pos;
}

static int layer(struct sim *s, const struct moem_trace_rec *rec)
{
	struct moem_route_out out = {s->ids, s->w, s->cnt};
	const uint32_t m = rec->layer;
	uint64_t t0 = s->now, t_r, end = 0;
	uint32_t T = 0;
	int ret;

	s->pos = moem_pos(rec->step, m, s->L);
	if (!s->any_step || rec->step != s->last_step)
		new_step(s, rec->step, t0);
	moem_sim_advance(s, t0);
	t_r = t0 + s->c->cost.layer_ns;
	moem_sim_advance(s, t_r);
	s->now = t_r;
	ret = route(s, rec, m, &out);
	if (ret)
		return ret;
	s->tokens = rec->tokens;
	memset(s->tok, 0, s->N * sizeof(*s->tok));
	for (uint32_t t = 0; t < rec->tokens; t++)
		for (uint32_t j = 0; j < out.cnt[t]; j++)
			s->tok[out.ids[(size_t)t * s->K + j]]++;
	for (uint32_t e = 0; e < s->N; e++) {
		s->act[e] = s->tok[e] > 0;
		if (s->act[e])
			s->keys[T++] = moem_key(m, e, s->N);
	}
	ret = moem_access_log_add(&s->log, s->keys, T);
	if (ret)
		return ret;
	if (s->counted) {
		s->r->layer_steps++;
		s->r->tokens += rec->tokens;
		s->r->accesses += T;
		s->r->mean_T += T;
	}
	ret = moem_driver_routed(s->d, s->pos, rec->tokens, s->ids, s->keys, T);
	if (ret)
		return ret;
	if (rec->pregate)
		pregate(s, rec);
	switch (s->p->mode) {
	case MOEM_SIM_DYNAEXQ:
		ret = moem_sim_dynaexq_layer(s, t_r, T, &end);
		break;
	default:
		ret = moem_sim_cache_layer(s, t_r, T, &end);
		if (!ret)
			ret = moem_driver_layer_end(s->d, t0);
		break;
	}
	if (ret)
		return ret;
	s->now = end;
	return 0;
}

static void detail(struct sim *s)
{
	char a[48], b[48];
	struct moem_sim_result *r = s->r;

	switch (s->p->mode) {
	case MOEM_SIM_CACHE:
		moem_evict_format(&s->p->evict, a, sizeof(a));
		if (s->p->prefetch)
			moem_prefetch_format(&s->p->pf, b, sizeof(b));
		else
			strcpy(b, "none");
		snprintf(r->detail, sizeof(r->detail), "route=%s evict=%s prefetch=%s order=%s",
			 s->p->route, a, b, s->p->ordered ? "cache-aware" : "fifo");
		break;
	case MOEM_SIM_BELADY:
		snprintf(r->detail, sizeof(r->detail),
			 "route=%s evict=belady-min (oracle) "
			 "order=%s",
			 s->p->route, s->p->ordered ? "cache-aware" : "fifo");
		break;
	default:
		break; /* filled by the mode's setup */
	}
}

/* What the driver asks of the simulated residency (each mode uses its part). */
static const struct moem_driver_ops sim_ops = {
	.state = moem_sim_cache_state,
	.fetch = moem_sim_cache_fetch,
	.cancel = moem_sim_cache_cancel,
	.transition = moem_sim_dynaexq_transition,
	.published = moem_sim_dynaexq_published,
	.keep = moem_sim_fluxmoe_keep,
};

/* The driver for the policy: its components and the sizes the budget gives. */
static int open_driver(struct sim *s, const char *trace, uint32_t max_tokens)
{
	const struct moem_sim_policy *p = s->p;
	struct moem_driver_cfg dc;
	int ret = 0;

	memset(&dc, 0, sizeof(dc));
	dc.n_layers = s->L;
	dc.n_experts = s->N;
	dc.top_k = s->K;
	dc.evict = p->evict;
	dc.dram = (enum moem_dram_rule)p->dram;
	dc.cost = s->c->cost;
	dc.expert_bytes = s->size;
	dc.hbm_slots = s->c->hbm_bytes / s->size;
	/* as the engine: only a DRAM smaller than the model evicts, and copies back */
	s->copy_back = s->dram_cache && p->copy_back &&
		       s->c->dram_bytes < (uint64_t)s->L * s->N * s->size &&
		       (p->mode == MOEM_SIM_CACHE || p->mode == MOEM_SIM_FLUXMOE);
	dc.copy_back = s->copy_back;
	if (s->c->decide_nvme_gbps > 0)
		dc.cost.nvme_gbps = s->c->decide_nvme_gbps;
	if (p->mode == MOEM_SIM_BELADY && p->oracle_fb == MOEM_SIM_FB_PRED) {
		/* the restricted oracle's fallback is pred's online estimate */
		dc.pf = p->pf;
		dc.predictor = true;
	}
	if (p->mode == MOEM_SIM_CACHE || p->mode == MOEM_SIM_FLUXMOE) {
		dc.prefetch = p->prefetch;
		dc.pf = p->pf;
		dc.pf_queue = p->pf_queue;
		/* pred eviction ranks by the predictor even when nothing is prefetched */
		/* and hybrid execution weighs an expert's uses ahead (keep_ns) with it */
		dc.predictor = p->prefetch || p->evict.kind == MOEM_EVICT_PRED ||
			       (s->c->exec_hybrid && s->L >= 2);
		/* as the engine: a predictor for the keep value alone skips the pre-gate */
		dc.keep_only = p->mode == MOEM_SIM_CACHE && s->c->exec_hybrid && s->L >= 2 &&
			       moem_driver_cfg_keep_only(&dc);
	}
	switch (p->mode) {
	case MOEM_SIM_DYNAEXQ:
		ret = moem_sim_dynaexq_setup(s, &dc);
		break;
	case MOEM_SIM_FLUXMOE:
		ret = moem_sim_fluxmoe_setup(s, &dc, max_tokens);
		break;
	case MOEM_SIM_BELADY:
		ret = moem_sim_oracle_prepass(s, trace);
		break;
	default:
		break;
	}
	if (!ret)
		ret = moem_driver_create(&dc, &sim_ops, s, &s->d);
	if (!ret && p->mode == MOEM_SIM_DYNAEXQ)
		ret = moem_sim_dynaexq_stage(s);
	return ret;
}

/* The run's totals, from the counted steps. */
static int finish(struct sim *s)
{
	struct moem_sim_result *r = s->r;
	struct moem_driver_stats st;
	uint64_t bh = 0, ba = 0;
	int ret;

	if (s->any_step && s->counted)
		s->counted_steps++;
	/* drain: what is still in flight completes (its bytes moved) */
	moem_sim_ce_run(s, SIM_INF, SIM_NONE);
	moem_sim_ce_deliver(s, SIM_INF);
	if (s->count_from != SIM_INF) {
		ret = moem_belady(&s->log, r->slots, s->count_from, &bh, &ba);
		if (ret)
			return ret;
	}
	moem_driver_get_stats(s->d, &st);
	if (r->steps) {
		r->pf_issued = st.pf_issued - s->st0.pf_issued;
		r->pf_used = st.pf_used - s->st0.pf_used;
		r->pf_wasted = st.pf_wasted - s->st0.pf_wasted;
		st.s_sum -= s->st0.s_sum;
		st.s_n -= s->st0.s_n;
	} else {
		st.s_n = 0;
	}
	r->total_ns = s->count_from != SIM_INF ? s->now - s->count_start_ns : 0;
	r->steps = s->counted_steps;
	r->step_ns = r->steps ? (double)r->total_ns / r->steps : 0;
	r->hit_rate = r->accesses ? (double)r->hits / r->accesses : 0;
	r->cpu_share = r->accesses + r->cpu_experts
			       ? (double)r->cpu_experts / (double)(r->accesses + r->cpu_experts)
			       : 0;
	r->belady_hit_rate = ba ? (double)bh / ba : 0;
	r->frac_belady = r->belady_hit_rate > 0 ? r->hit_rate / r->belady_hit_rate : 0;
	r->min_bytes = (ba - bh) * s->size;
	r->stall_bound_ns = moem_cost_stall_bound_ns(&s->c->cost, r->min_bytes, r->compute_ns);
	r->stall_x_bound = r->stall_bound_ns ? (double)r->stall_ns / (double)r->stall_bound_ns : 0;
	r->mean_T = r->layer_steps ? r->mean_T / r->layer_steps : 0;
	r->hbm_peak = s->hbm.peak;
	r->mean_S = st.s_n ? (double)st.s_sum / st.s_n : 0;
	r->hi_frac = r->accesses && s->p->mode == MOEM_SIM_DYNAEXQ
			     ? (double)s->hi_uses / r->accesses
			     : 0;
	return 0;
}

int moem_sim_run(const char *trace, const struct moem_sim_cost *cost,
		 const struct moem_sim_policy *p, const struct moem_sim_opts *o,
		 struct moem_sim_result *r)
{
	struct moem_sim_cost c = *cost;
	const struct moem_trace_info *info;
	struct moem_trace_reader *tr = NULL;
	struct moem_trace_rec rec;
	struct sim s = {0};
	int ret;

	memset(r, 0, sizeof(*r));
	snprintf(r->policy, sizeof(r->policy), "%s", p->label);
	ret = moem_sim_cost_finish(&c);
	if (ret)
		return ret;
	ret = moem_trace_open(trace, &tr);
	if (ret)
		return ret;
	info = moem_trace_reader_info(tr);
	s.c = &c;
	s.p = p;
	s.o = o;
	s.r = r;
	s.L = info->n_layers;
	s.N = info->n_experts;
	s.K = info->top_k;
	s.size = c.expert_bytes[c.prec];
	s.pg_depth = p->pregate ? info->pregate_depth : 0;
	s.count_from = SIM_INF;
	/* the model's expert groups, so re-routing keeps to them as it did */
	s.rc = (struct moem_route_cfg){.n_experts = s.N,
				       .top_k = s.K,
				       .norm_topk_prob = true,
				       .routed_scaling = 1.0f,
				       .n_group = info->n_group,
				       .topk_group = info->topk_group};
	moem_rng_seed(&s.rng, o->seed, 7);
	r->hbm_bytes = c.hbm_bytes;
	r->slots =
		(uint32_t)(c.hbm_bytes / s.size > UINT32_MAX ? UINT32_MAX : c.hbm_bytes / s.size);
	ret = moem_route_policy_parse(p->route, s.K, &s.rp);
	if (ret)
		goto out;
	if (c.hbm_bytes < s.size && p->mode != MOEM_SIM_DYNAEXQ) {
		ret = moem_errf(ENOSPC,
				"policy %s: the HBM budget (%llu bytes) is below one expert: "
				"the smallest budget that runs is %llu bytes",
				p->label, (unsigned long long)c.hbm_bytes,
				(unsigned long long)s.size);
		goto out;
	}
	/* the engine's placement, by the engine's code */
	ret = moem_place_map(&c.place, c.cpu_moe_layers, s.L, s.N, NULL, &s.n_placed_cpu);
	if (ret) {
		ret = moem_err_prefix(-ret, "%s", trace);
		goto out;
	}
	if (c.place.n || c.cpu_moe_layers) {
		s.place = calloc((size_t)s.L * s.N, 1);
		ret = s.place ? moem_place_map(&c.place, c.cpu_moe_layers, s.L, s.N, s.place, NULL)
			      : -ENOMEM;
		if (ret)
			goto out;
	}
	if ((c.exec_hybrid || s.n_placed_cpu) && p->mode != MOEM_SIM_CACHE &&
	    p->mode != MOEM_SIM_BELADY) {
		ret = moem_errf(EINVAL,
				"policy %s: hybrid execution is simulated with the cache "
				"policies (lru .. moem, belady), not DynaExq or FluxMoE",
				p->label);
		goto out;
	}
	if (c.exec_hybrid && !(c.cost.cpu_gbps > 0)) {
		ret = moem_errf(EINVAL, "--exec hybrid needs the CPU's throughput (--cpu-gbps)");
		goto out;
	}
	if (s.n_placed_cpu && !(c.cost.cpu_gbps > 0)) {
		ret = moem_errf(EINVAL, "experts placed on the CPU (--cpu-moe-layers, --place) "
					"need the CPU's throughput (--cpu-gbps)");
		goto out;
	}
	s.xc = c.cost;
	if (c.exec_link_gbps > 0)
		s.xc.link_gbps = c.exec_link_gbps;
	if (moem_route_policy_needs_logits(&s.rp) && !(info->flags & MOEM_TRACE_F_LOGITS)) {
		ret = moem_errf(EINVAL,
				"policy %s: route %s re-routes from router logits, and "
				"%s has none (generate it with --logits)",
				p->label, p->route, trace);
		goto out;
	}
	ret = sim_alloc(&s, info->max_tokens);
	if (ret)
		goto out;
	moem_tier_budget_init(&s.hbm, c.hbm_bytes);
	if (c.dram_bytes && (c.dram_bytes < (uint64_t)s.L * s.N * s.size || c.dram_cold)) {
		moem_tier_budget_init(&s.dram, c.dram_bytes);
		s.dram_cache = true;
	}
	ret = open_driver(&s, trace, info->max_tokens);
	if (ret)
		goto out;
	detail(&s);
	while ((ret = moem_trace_next(tr, &rec)) > 0) {
		if (o->max_steps && rec.step >= o->max_steps)
			break;
		ret = layer(&s, &rec);
		if (ret)
			goto out;
	}
	if (ret < 0)
		goto out;
	if (s.any_step && !r->steps) {
		/* every step was warm-up: all-zero results would look like a measurement */
		ret = moem_errf(
			ERANGE, "--warmup %llu: %s has only %llu steps%s; nothing is left to count",
			(unsigned long long)o->warmup_steps, trace,
			(unsigned long long)s.last_step + 1, o->max_steps ? " within --steps" : "");
		goto out;
	}
	ret = finish(&s);
out:
	sim_free(&s);
	moem_trace_close(tr);
	return ret;
}
