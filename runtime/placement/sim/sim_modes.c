// SPDX-License-Identifier: GPL-2.0-only
/*
 * DynaExq and FluxMoE in the simulator: the engine's side of each policy
 * (staging versions, applying the driver's transitions and migrations
 * through the budget tracker, timing the forward pass).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/cost.h>
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

int moem_sim_dynaexq_setup(struct sim *s, struct moem_driver_cfg *dc)
{
	struct moem_dynaexq_cfg c = s->p->dx;
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
	c.n_hi = n_hi;
	dc->dynaexq = true;
	dc->dx = c;
	dc->dx_count_ids = true;
	s->dx_hi = c.hi;
	s->dx_lo = c.lo;
	snprintf(s->r->detail, sizeof(s->r->detail),
		 "dynaexq hi=%s lo=%s n_hi=%u/%u per layer margin=%g interval=%gms",
		 moem_prec_name(c.hi), moem_prec_name(c.lo), n_hi, s->N, c.margin,
		 (double)c.interval_ns / 1e6);
	return 0;
}

/* Stage every low version up front (not counted as traffic). */
int moem_sim_dynaexq_stage(struct sim *s)
{
	uint64_t lo_all = (uint64_t)s->L * s->N * s->c->expert_bytes[s->dx_lo];

	if (!moem_tier_budget_try_reserve(&s->hbm, lo_all))
		return moem_errf(ENOSPC, "dynaexq: low versions do not fit");
	for (uint32_t key = 0; key < s->L * s->N; key++) {
		s->k[key].st = K_RES;
		s->k[key].prec = (uint8_t)s->dx_lo;
		s->k[key].bytes = s->c->expert_bytes[s->dx_lo];
	}
	return 0;
}

int moem_sim_dynaexq_layer(struct sim *s, uint64_t t_r, uint32_t T, uint64_t *end)
{
	const uint32_t m = (uint32_t)(s->pos % s->L);
	uint64_t sum = 0;

	for (uint32_t i = 0; i < T; i++) {
		uint32_t key = s->keys[i], e = key % s->N;

		/* the forward pass reads the published version: it never waits */
		sum += moem_cost_gpu_ns(&s->c->cost, s->c->expert_bytes[s->k[key].prec], s->tok[e]);
		if (s->counted) {
			s->r->hits++;
			s->hi_uses += moem_driver_use_hi(s->d, m, e);
		}
	}
	if (s->counted)
		s->r->compute_ns += s->c->cost.layer_ns + sum;
	*end = t_r + sum;
	/* the driver starts what the policy wants, at the lowest transfer priority */
	return moem_driver_layer_end(s->d, t_r);
}

int moem_sim_dynaexq_transition(void *arg, uint32_t key, uint32_t pi)
{
	struct sim *s = arg;
	uint64_t need = s->c->expert_bytes[pi ? s->dx_lo : s->dx_hi];
	uint32_t id;

	if (!moem_tier_budget_try_reserve(&s->hbm, need))
		return -EAGAIN; /* it waits for room */
	id = moem_sim_ce_add(s, key, pi ? XK_DEMOTE : XK_PROMOTE, PRIO_LOW, need,
			     moem_sim_link_bpn(s, key, need));
	if (id == SIM_NONE) {
		moem_tier_budget_release(&s->hbm, need);
		return -ENOMEM;
	}
	s->ce.x[id].pi = (uint8_t)pi;
	return 0;
}

int moem_sim_dynaexq_published(void *arg, uint32_t key)
{
	const struct sim *s = arg;

	return s->k[key].prec == s->dx_hi ? 0 : 1;
}

void moem_sim_dynaexq_done(struct sim *s, struct sim_xfer *x)
{
	struct sim_key *k = &s->k[x->key];

	/* publish the new version, reclaim the old one (the sim's compute is in order) */
	moem_tier_budget_release(&s->hbm, k->bytes);
	k->prec = (uint8_t)(x->pi ? s->dx_lo : s->dx_hi);
	k->bytes = x->bytes;
}

/*
 * ---- FluxMoE: a resident set sized by the rho controller, the next
 * layer's window paged in as a layer starts, the rest an expert cache ----
 *
 * The window is what a layer needs that is not resident: at most the
 * experts a batch activates, N (1 - (1 - k/N)^B) under uniform routing
 * (an upper estimate for real, skewed routing), twice (this layer's and
 * the next's). What the window and the resident set leave is a cache under
 * the preset's eviction policy, so paging never does worse than caching.
 */
int moem_sim_fluxmoe_setup(struct sim *s, struct moem_driver_cfg *dc, uint32_t max_tokens)
{
	struct moem_paging_cfg c = s->p->pg;
	double B = max_tokens ? max_tokens : 1;
	uint32_t W = (uint32_t)ceil(s->N * (1 - pow(1 - (double)s->K / s->N, B)));
	uint64_t window = 2ull * W * s->size;

	c.capacity = s->c->hbm_bytes > window
			     ? (uint32_t)((s->c->hbm_bytes - window) / (2ull * s->L * s->size))
			     : 0;
	if (c.capacity > s->N)
		c.capacity = s->N;
	if (!s->p->pg_initial_given)
		c.initial = c.capacity;
	dc->paging = true;
	dc->pg = c;
	dc->pg_window = W;
	snprintf(s->r->detail, sizeof(s->r->detail),
		 "fluxmoe window=2x%u experts capacity=%u/layer start=%u theta=%g evict=%s", W,
		 c.capacity, c.initial < c.capacity ? c.initial : c.capacity, c.theta,
		 moem_evict_kind_name(s->p->evict.kind));
	return 0;
}

/* Once per step: the rho controller on the step's compute and streaming time. */
void moem_sim_fluxmoe_step(struct sim *s)
{
	moem_driver_step_end(s->d, s->tau_comp, (double)s->step_bytes / s->c->cost.link_gbps);
	s->tau_comp = 0;
	s->step_bytes = 0;
}

int moem_sim_fluxmoe_keep(void *arg, uint32_t key, bool keep)
{
	const struct sim *s = arg;

	return !keep || s->k[key].st == K_RES ? 0 : -EAGAIN;
}
