// SPDX-License-Identifier: GPL-2.0-only
/*
 * DynaExq and FluxMoE in the simulator: the engine's side of each policy
 * (staging versions, applying transitions and migrations through the
 * budget tracker, timing the forward pass) around the unchanged policy
 * modules.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>

#include "sim_int.h"

/* ---- DynaExq: every expert resident in lo, the hottest n_hi per layer in hi ---- */

static int dx_fit(struct sim *s, enum moem_prec hi, enum moem_prec lo, uint32_t *n_hi)
{
	const uint64_t s_hi = s->c->expert_bytes[hi], s_lo = s->c->expert_bytes[lo];
	const struct moem_dynaexq_cfg *c = &s->p->dx;
	uint64_t need;

	if (!s->p->dx_n_hi_given)
		return moem_dynaexq_n_hi(s->c->hbm_bytes, 0, s->L, s->N, s_hi, s_lo,
					 c->max_inflight * s_hi, n_hi);
	*n_hi = c->n_hi > s->N ? s->N : c->n_hi;
	need = (uint64_t)s->L * s->N * s_lo + (uint64_t)s->L * *n_hi * (s_hi - s_lo);
	if (need > s->c->hbm_bytes)
		return moem_errf(ENOSPC, "dynaexq: n_hi %u needs %llu bytes, the budget is %llu",
				 *n_hi, (unsigned long long)need,
				 (unsigned long long)s->c->hbm_bytes);
	return 0;
}

int moem_sim_dynaexq_setup(struct sim *s)
{
	struct moem_dynaexq_cfg c = s->p->dx;
	uint64_t lo_all;
	uint32_t n_hi = 0;
	int ret;

	if (!s->p->dx_pair_given) {
		/* moem default pairs: (bf16, q4), else (q4, q2) if that is all that fits */
		c.hi = MOEM_PREC_BF16;
		c.lo = MOEM_PREC_Q4;
		ret = dx_fit(s, c.hi, c.lo, &n_hi);
		if (ret == -ENOSPC) {
			c.hi = MOEM_PREC_Q4;
			c.lo = MOEM_PREC_Q2;
			ret = dx_fit(s, c.hi, c.lo, &n_hi);
		}
	} else {
		ret = dx_fit(s, c.hi, c.lo, &n_hi);
	}
	if (ret)
		return ret;
	c.n_layers = s->L;
	c.n_experts = s->N;
	c.n_hi = n_hi;
	ret = moem_dynaexq_create(&c, &s->dx);
	if (ret)
		return ret;
	/* Stage every low version up front (not counted as traffic). */
	s->dx_hi = c.hi;
	s->dx_lo = c.lo;
	lo_all = (uint64_t)s->L * s->N * s->c->expert_bytes[c.lo];
	if (!moem_tier_budget_try_reserve(&s->hbm, lo_all))
		return moem_errf(ENOSPC, "dynaexq: low versions do not fit");
	for (uint32_t key = 0; key < s->L * s->N; key++) {
		s->k[key].st = K_RES;
		s->k[key].prec = (uint8_t)c.lo;
		s->k[key].bytes = s->c->expert_bytes[c.lo];
	}
	snprintf(s->r->detail, sizeof(s->r->detail),
		 "dynaexq hi=%s lo=%s n_hi=%u/%u per layer margin=%g interval=%gms",
		 moem_prec_name(c.hi), moem_prec_name(c.lo), n_hi, s->N, c.margin,
		 (double)c.interval_ns / 1e6);
	return 0;
}

int moem_sim_dynaexq_layer(struct sim *s, uint64_t t_r, uint32_t T, uint64_t *end)
{
	const uint32_t m = (uint32_t)(s->pos % s->L);
	struct moem_dx_action a;
	uint64_t sum = 0;

	moem_dynaexq_count(s->dx, m, s->ids, s->tokens * s->K);
	moem_dynaexq_tick(s->dx, t_r);
	for (uint32_t i = 0; i < T; i++) {
		uint32_t key = s->keys[i], e = key % s->N;

		/* the forward pass reads the published version: it never waits */
		sum += moem_sim_expert_ns(s, s->c->expert_bytes[s->k[key].prec], s->tok[e]);
		if (s->counted) {
			s->r->hits++;
			s->hi_uses += moem_dynaexq_use_hi(s->dx, m, e);
		}
	}
	if (s->counted)
		s->r->compute_ns += s->c->layer_ns + sum;
	*end = t_r + sum;
	/* start what the policy wants, at the lowest transfer priority, within the budget */
	while (moem_dynaexq_next(s->dx, &a) == 1) {
		uint32_t key = moem_key(a.layer, a.expert, s->N), id;
		uint64_t need = s->c->expert_bytes[a.promote ? s->dx_hi : s->dx_lo];

		if (!moem_tier_budget_try_reserve(&s->hbm, need)) {
			moem_dynaexq_cancel(s->dx, &a); /* it waits for room */
			break;
		}
		id = moem_sim_ce_add(s, key, a.promote ? XK_PROMOTE : XK_DEMOTE, PRIO_LOW, need,
				     moem_sim_link_bpn(s, key, need));
		if (id == SIM_NONE) {
			moem_tier_budget_release(&s->hbm, need);
			moem_dynaexq_cancel(s->dx, &a);
			return -ENOMEM;
		}
		s->ce.x[id].dx = a;
	}
	return 0;
}

void moem_sim_dynaexq_done(struct sim *s, struct sim_xfer *x)
{
	struct sim_key *k = &s->k[x->key];

	if (moem_dynaexq_complete(s->dx, &x->dx))
		return;
	/* publish the new version, reclaim the old one (the sim's compute is in order) */
	moem_tier_budget_release(&s->hbm, k->bytes);
	k->prec = (uint8_t)(x->dx.promote ? s->dx_hi : s->dx_lo);
	k->bytes = x->bytes;
}

/* ---- FluxMoE: resident set + two-layer window ---- */

int moem_sim_fluxmoe_setup(struct sim *s)
{
	struct moem_paging_cfg c = s->p->pg;
	uint64_t window;
	int ret;

	window = 2ull * s->N * s->size;
	if (!moem_tier_budget_try_reserve(&s->hbm, window))
		return moem_errf(ENOSPC,
				 "fluxmoe: the HBM budget (%llu bytes) is below the "
				 "two-layer window (%llu bytes)",
				 (unsigned long long)s->c->hbm_bytes, (unsigned long long)window);
	s->window_bytes = window;
	c.n_layers = s->L;
	c.n_experts = s->N;
	c.capacity = (uint32_t)((s->c->hbm_bytes - window) / ((uint64_t)s->L * s->size));
	if (c.capacity > s->N)
		c.capacity = s->N;
	if (!s->p->pg_initial_given)
		c.initial = c.capacity;
	ret = moem_paging_create(&c, &s->pg);
	if (!ret)
		ret = moem_hot_create(s->L, s->N, MOEM_HOT_DEFAULT_ALPHA,
				      MOEM_HOT_DEFAULT_INTERVAL_NS, &s->hot);
	if (ret)
		return ret;
	s->resident = calloc((size_t)s->L * s->N, 1);
	s->window_done = calloc(s->L, sizeof(*s->window_done));
	s->window_last = malloc(s->L * sizeof(*s->window_last));
	s->window_left = calloc(s->L, sizeof(*s->window_left));
	if (!s->resident || !s->window_done || !s->window_last || !s->window_left)
		return -ENOMEM;
	for (uint32_t l = 0; l < s->L; l++)
		s->window_last[l] = SIM_NONE;
	snprintf(s->r->detail, sizeof(s->r->detail),
		 "fluxmoe window=2x%u experts capacity=%u/layer start=%u theta=%g", s->N,
		 c.capacity, moem_paging_target(s->pg), c.theta);
	return 0;
}

/* Queue the window loads of layer l: every expert not in the resident set. */
static int load_layer(struct sim *s, uint32_t l)
{
	for (uint32_t e = 0; e < s->N; e++) {
		uint32_t key = moem_key(l, e, s->N), id;

		if (s->resident[key])
			continue;
		id = moem_sim_ce_add(s, key, XK_PAGE, PRIO_PREFETCH, s->size,
				     moem_sim_link_bpn(s, key, s->size));
		if (id == SIM_NONE)
			return -ENOMEM;
		s->window_last[l] = id;
		s->window_left[l]++;
	}
	return 0;
}

int moem_sim_fluxmoe_begin(struct sim *s, uint32_t layer)
{
	int ret = 0;

	/* cold start: the first layer loads itself */
	if (s->pos == 0 || (!s->window_left[layer] && s->window_last[layer] == SIM_NONE))
		ret = load_layer(s, layer);
	/* WAR: layer - 1's blocks are free (its compute ended at this layer's start) */
	if (!ret)
		ret = load_layer(s, (layer + 1) % s->L);
	return ret;
}

void moem_sim_fluxmoe_done(struct sim *s, struct sim_xfer *x)
{
	uint32_t l = x->key / s->N;

	if (x->done_ns > s->window_done[l])
		s->window_done[l] = x->done_ns;
	if (s->window_left[l])
		s->window_left[l]--;
}

void moem_sim_fluxmoe_step(struct sim *s)
{
	double load = 0;

	for (uint32_t key = 0; key < s->L * s->N; key++)
		if (!s->resident[key])
			load += (double)s->size / s->pcie_bpn;
	moem_paging_control(s->pg, s->tau_comp, load);
	s->tau_comp = 0;
}

int moem_sim_fluxmoe_layer(struct sim *s, uint64_t t0, uint64_t t_r, uint32_t T, uint64_t *end)
{
	const uint32_t m = (uint32_t)(s->pos % s->L);
	uint8_t *res = s->resident + (size_t)m * s->N;
	struct moem_paging_mig mig;
	uint64_t ready, sum = 0, start;

	moem_hot_count(s->hot, m, s->ids, s->tokens * s->K);
	moem_hot_tick(s->hot, t0);
	/* RAW: the layer's kernels wait for its window loads */
	if (s->window_left[m]) {
		moem_sim_ce_run(s, SIM_INF, s->window_last[m]);
		ready = s->ce.x[s->window_last[m]].done_ns;
	} else {
		ready = s->window_done[m];
	}
	start = ready > t_r ? ready : t_r;
	for (uint32_t i = 0; i < T; i++) {
		uint32_t e = s->keys[i] % s->N;

		sum += moem_sim_expert_ns(s, s->size, s->tok[e]);
		if (s->counted && res[e])
			s->r->hits++;
	}
	s->tau_comp += (double)(s->c->layer_ns + sum);
	if (s->counted) {
		s->r->stall_ns += start - t_r;
		s->r->compute_ns += s->c->layer_ns + sum;
	}
	*end = start + sum;
	/* one staggered migration for this layer this step */
	if (moem_paging_migration(s->pg, s->pos / s->L, m, res, moem_hot_scores(s->hot, m), &mig) ==
	    1) {
		uint32_t key = moem_key(m, mig.expert, s->N);

		if (mig.promote && moem_tier_budget_try_reserve(&s->hbm, s->size)) {
			res[mig.expert] = 1; /* kept from the window: no transfer */
			s->k[key].st = K_RES;
		} else if (!mig.promote) {
			res[mig.expert] = 0;
			s->k[key].st = K_ABSENT;
			moem_tier_budget_release(&s->hbm, s->size);
		}
	}
	return 0;
}
