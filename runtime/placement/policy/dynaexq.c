// SPDX-License-Identifier: GPL-2.0-only
/* DynaExq hotness-driven mixed precision (policy_prec.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/policy.h>

struct moem_dynaexq {
	struct moem_dynaexq_cfg c;
	struct moem_hot *hot;
	uint8_t *state;	    /* [L][N] enum moem_xstate */
	uint8_t *want;	    /* [L][N] target set H */
	uint32_t *inflight; /* [L] */
	uint32_t rr;	    /* next layer to serve */
};

void moem_dynaexq_default(struct moem_dynaexq_cfg *c, uint32_t n_layers, uint32_t n_experts)
{
	memset(c, 0, sizeof(*c));
	c->n_layers = n_layers;
	c->n_experts = n_experts;
	c->hi = MOEM_PREC_BF16;
	c->lo = MOEM_PREC_Q4;
	c->alpha = MOEM_HOT_DEFAULT_ALPHA;
	c->interval_ns = MOEM_HOT_DEFAULT_INTERVAL_NS;
	c->margin = 0.02;
	c->max_inflight = 4;
}

int moem_dynaexq_parse(const char *spec, struct moem_dynaexq_cfg *c, bool *n_hi_given)
{
	struct moem_spec sp;
	const char *s;
	double ms = (double)c->interval_ns / 1e6;
	uint32_t nhi = UINT32_MAX;
	int ret;

	ret = moem_spec_parse(spec, &sp);
	if (ret)
		return ret;
	if (strcmp(sp.name, "dynaexq"))
		return moem_errf(EINVAL, "precision policy '%s': unknown (dynaexq)", sp.name);
	if ((s = moem_spec_str(&sp, "hi")) && (ret = moem_prec_parse(s, &c->hi)))
		return ret;
	if ((s = moem_spec_str(&sp, "lo")) && (ret = moem_prec_parse(s, &c->lo)))
		return ret;
	if ((ret = moem_spec_f64(&sp, "alpha", 0, 0.999, &c->alpha)) ||
	    (ret = moem_spec_f64(&sp, "interval_ms", 0.001, 1e6, &ms)) ||
	    (ret = moem_spec_f64(&sp, "margin", 0, 1, &c->margin)) ||
	    (ret = moem_spec_u32(&sp, "inflight", 1, 1024, &c->max_inflight)) ||
	    (ret = moem_spec_u32(&sp, "n_hi", 0, 1024, &nhi)))
		return ret;
	c->interval_ns = (uint64_t)(ms * 1e6);
	if (c->hi >= c->lo)
		return moem_errf(EINVAL, "dynaexq: hi (%s) must be a higher precision than lo (%s)",
				 moem_prec_name(c->hi), moem_prec_name(c->lo));
	if (n_hi_given)
		*n_hi_given = nhi != UINT32_MAX;
	if (nhi != UINT32_MAX)
		c->n_hi = nhi;
	return moem_spec_done(&sp);
}

int moem_dynaexq_n_hi(uint64_t m_hbm, uint64_t m_fixed, uint32_t n_layers, uint32_t n_experts,
		      uint64_t s_hi, uint64_t s_lo, uint64_t headroom, uint32_t *n_hi)
{
	uint64_t lo_all, need = 0, avail, per;

	if (s_hi <= s_lo || !n_layers)
		return moem_errf(EINVAL, "dynaexq: s_hi %llu must exceed s_lo %llu",
				 (unsigned long long)s_hi, (unsigned long long)s_lo);
	if (moem_mul_overflow((uint64_t)n_layers * n_experts, s_lo, &lo_all) ||
	    moem_add_overflow(lo_all, m_fixed, &need) || moem_add_overflow(need, headroom, &need) ||
	    need > m_hbm)
		return moem_errf(ENOSPC,
				 "dynaexq: the budget (%llu bytes) does not hold every "
				 "expert in the low precision plus fixed and headroom: "
				 "the smallest budget that runs is %llu bytes",
				 (unsigned long long)m_hbm, (unsigned long long)need);
	avail = m_hbm - need;
	per = (uint64_t)n_layers * (s_hi - s_lo);
	*n_hi = avail / per > n_experts ? n_experts : (uint32_t)(avail / per);
	return 0;
}

int moem_dynaexq_create(const struct moem_dynaexq_cfg *c, struct moem_dynaexq **out)
{
	struct moem_dynaexq *dx;
	size_t n = (size_t)c->n_layers * c->n_experts;
	int ret;

	if (!c->max_inflight || c->n_hi > c->n_experts || !(c->margin >= 0))
		return moem_errf(EINVAL, "dynaexq: n_hi %u (of %u), inflight %u, margin %g",
				 c->n_hi, c->n_experts, c->max_inflight, c->margin);
	dx = calloc(1, sizeof(*dx));
	if (!dx)
		return -ENOMEM;
	ret = moem_hot_create(c->n_layers, c->n_experts, c->alpha, c->interval_ns, &dx->hot);
	if (ret) {
		free(dx);
		return ret;
	}
	dx->c = *c;
	dx->state = calloc(n, 1);
	dx->want = calloc(n, 1);
	dx->inflight = calloc(c->n_layers, sizeof(*dx->inflight));
	if (!dx->state || !dx->want || !dx->inflight) {
		moem_dynaexq_destroy(dx);
		return -ENOMEM;
	}
	*out = dx;
	return 0;
}

void moem_dynaexq_add_counts(struct moem_dynaexq *dx, uint32_t layer, const uint32_t *counts)
{
	if (layer >= dx->c.n_layers)
		return;
	for (uint32_t e = 0; e < dx->c.n_experts; e++)
		if (counts[e])
			moem_hot_add(dx->hot, layer, e, counts[e]);
}

void moem_dynaexq_destroy(struct moem_dynaexq *dx)
{
	if (!dx)
		return;
	moem_hot_destroy(dx->hot);
	free(dx->state);
	free(dx->want);
	free(dx->inflight);
	free(dx);
}

void moem_dynaexq_count(struct moem_dynaexq *dx, uint32_t layer, const int32_t *ids, uint32_t n)
{
	moem_hot_count(dx->hot, layer, ids, n);
}

/*
 * H[l] with hysteresis. Members are the experts currently high or on the
 * way there; they keep their place unless an outsider beats the weakest
 * by margin.
 */
static void retarget_layer(struct moem_dynaexq *dx, uint32_t l)
{
	const uint32_t N = dx->c.n_experts;
	const float *s = moem_hot_scores(dx->hot, l);
	uint8_t *want = dx->want + (size_t)l * N;
	const uint8_t *st = dx->state + (size_t)l * N;
	uint32_t count = 0;

	for (uint32_t e = 0; e < N; e++) {
		want[e] = st[e] == MOEM_X_HI || st[e] == MOEM_X_PROMOTING;
		count += want[e];
	}
	/* Shrink to n_hi: drop the weakest. */
	while (count > dx->c.n_hi) {
		uint32_t w = N;

		for (uint32_t e = 0; e < N; e++)
			if (want[e] && (w == N || s[e] < s[w]))
				w = e;
		want[w] = 0;
		count--;
	}
	/* Fill free places with the best outsiders, then swap past the margin. */
	for (;;) {
		uint32_t best = N, weak = N;

		for (uint32_t e = 0; e < N; e++) {
			if (!want[e] && (best == N || s[e] > s[best]))
				best = e;
			if (want[e] && (weak == N || s[e] < s[weak]))
				weak = e;
		}
		if (best == N)
			break;
		if (count < dx->c.n_hi) {
			want[best] = 1;
			count++;
			continue;
		}
		if (weak == N || !(s[best] > s[weak] + dx->c.margin))
			break;
		want[weak] = 0;
		want[best] = 1;
	}
}

void moem_dynaexq_retarget(struct moem_dynaexq *dx)
{
	for (uint32_t l = 0; l < dx->c.n_layers; l++)
		retarget_layer(dx, l);
}

int moem_dynaexq_tick(struct moem_dynaexq *dx, uint64_t now_ns)
{
	if (!moem_hot_tick(dx->hot, now_ns))
		return 0;
	moem_dynaexq_retarget(dx);
	return 1;
}

void moem_dynaexq_set_n_hi(struct moem_dynaexq *dx, uint32_t n_hi)
{
	dx->c.n_hi = n_hi > dx->c.n_experts ? dx->c.n_experts : n_hi;
	moem_dynaexq_retarget(dx);
}

static int pick(struct moem_dynaexq *dx, uint32_t l, bool promote, struct moem_dx_action *a)
{
	const uint32_t N = dx->c.n_experts;
	const float *s = moem_hot_scores(dx->hot, l);
	uint8_t *st = dx->state + (size_t)l * N;
	const uint8_t *want = dx->want + (size_t)l * N;
	uint32_t best = N;

	for (uint32_t e = 0; e < N; e++) {
		bool due = promote ? want[e] && st[e] == MOEM_X_LO : !want[e] && st[e] == MOEM_X_HI;

		/* promote the hottest first, demote the coldest first */
		if (due && (best == N || (promote ? s[e] > s[best] : s[e] < s[best])))
			best = e;
	}
	if (best == N)
		return 0;
	st[best] = promote ? MOEM_X_PROMOTING : MOEM_X_DEMOTING;
	dx->inflight[l]++;
	*a = (struct moem_dx_action){l, best, promote};
	return 1;
}

int moem_dynaexq_next(struct moem_dynaexq *dx, struct moem_dx_action *a)
{
	const uint32_t L = dx->c.n_layers;

	for (int promote = 0; promote < 2; promote++)
		for (uint32_t i = 0; i < L; i++) {
			uint32_t l = (dx->rr + i) % L;

			if (dx->inflight[l] >= dx->c.max_inflight)
				continue;
			if (pick(dx, l, promote, a)) {
				dx->rr = (l + 1) % L;
				return 1;
			}
		}
	return 0;
}

void moem_dynaexq_cancel(struct moem_dynaexq *dx, const struct moem_dx_action *a)
{
	uint8_t *st = dx->state + (size_t)a->layer * dx->c.n_experts + a->expert;

	if (*st != (a->promote ? MOEM_X_PROMOTING : MOEM_X_DEMOTING))
		return;
	*st = a->promote ? MOEM_X_LO : MOEM_X_HI;
	dx->inflight[a->layer]--;
}

int moem_dynaexq_complete(struct moem_dynaexq *dx, const struct moem_dx_action *a)
{
	uint8_t *st;

	if (a->layer >= dx->c.n_layers || a->expert >= dx->c.n_experts)
		return moem_errf(EINVAL, "dynaexq: no expert (%u, %u)", a->layer, a->expert);
	st = dx->state + (size_t)a->layer * dx->c.n_experts + a->expert;
	if (*st != (a->promote ? MOEM_X_PROMOTING : MOEM_X_DEMOTING))
		return moem_errf(EINVAL, "dynaexq: expert (%u, %u) has no %s in flight", a->layer,
				 a->expert, a->promote ? "promotion" : "demotion");
	*st = a->promote ? MOEM_X_HI : MOEM_X_LO;
	dx->inflight[a->layer]--;
	return 0;
}

enum moem_xstate moem_dynaexq_state(const struct moem_dynaexq *dx, uint32_t layer, uint32_t expert)
{
	return (enum moem_xstate)dx->state[(size_t)layer * dx->c.n_experts + expert];
}

bool moem_dynaexq_use_hi(const struct moem_dynaexq *dx, uint32_t layer, uint32_t expert)
{
	enum moem_xstate s = moem_dynaexq_state(dx, layer, expert);

	return s == MOEM_X_HI || s == MOEM_X_DEMOTING;
}

bool moem_dynaexq_target(const struct moem_dynaexq *dx, uint32_t layer, uint32_t expert)
{
	return dx->want[(size_t)layer * dx->c.n_experts + expert];
}

uint32_t moem_dynaexq_target_count(const struct moem_dynaexq *dx, uint32_t layer)
{
	uint32_t n = 0;

	for (uint32_t e = 0; e < dx->c.n_experts; e++)
		n += dx->want[(size_t)layer * dx->c.n_experts + e];
	return n;
}

uint32_t moem_dynaexq_inflight(const struct moem_dynaexq *dx, uint32_t layer)
{
	return dx->inflight[layer];
}

const float *moem_dynaexq_scores(const struct moem_dynaexq *dx, uint32_t layer)
{
	return moem_hot_scores(dx->hot, layer);
}
