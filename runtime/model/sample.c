// SPDX-License-Identifier: GPL-2.0-only
/* Next-token sampling (sample.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/sample.h>

void moem_sampling_defaults(struct moem_sampling *s)
{
	memset(s, 0, sizeof(*s));
	s->top_p = 1.0f;
	s->repetition_penalty = 1.0f;
}

int moem_sampling_check(const struct moem_sampling *s)
{
	if (!(s->temperature >= 0 && s->temperature <= 100))
		return moem_errf(EINVAL, "temperature %g out of range 0..100",
				 (double)s->temperature);
	if (!(s->top_p > 0 && s->top_p <= 1))
		return moem_errf(EINVAL, "top_p %g out of range (0, 1]", (double)s->top_p);
	if (!(s->min_p >= 0 && s->min_p <= 1))
		return moem_errf(EINVAL, "min_p %g out of range [0, 1]", (double)s->min_p);
	if (!(s->repetition_penalty > 0 && s->repetition_penalty <= 100))
		return moem_errf(EINVAL, "repetition_penalty %g out of range (0, 100]",
				 (double)s->repetition_penalty);
	if (!(s->presence_penalty >= -2 && s->presence_penalty <= 2))
		return moem_errf(EINVAL, "presence_penalty %g out of range [-2, 2]",
				 (double)s->presence_penalty);
	if (!(s->frequency_penalty >= -2 && s->frequency_penalty <= 2))
		return moem_errf(EINVAL, "frequency_penalty %g out of range [-2, 2]",
				 (double)s->frequency_penalty);
	if (s->top_k > (1u << 24))
		return moem_errf(EINVAL, "top_k %u out of range", s->top_k);
	return 0;
}

/*
 * e[i] = e^(l[i] - c) for i < n, where l[i] - c <= 0 (c the largest
 * logit, or the log-sum-exp): Cody-Waite reduction by ln 2 and the Taylor
 * polynomial of degree 13 on |r| <= ln 2 / 2 (truncation below 1e-17),
 * within about 1 ulp of libm's exp(). Below -708 the result is 0 (e^-708
 * ~ 3e-308: nothing next to the largest term's 1; -inf, a banned id,
 * exactly 0 as libm gives it, so it is never drawn), computed from -708
 * so that no subnormal or -inf reaches the scaling. Plain double operations
 * with the clamp done on the bits, so that GCC vectorises the loop in
 * every clone and every build gives the same bits (this file is built
 * without FMA contraction): libm's exp, one call a value, was most of a
 * sampled token's time at a 151,936-token vocabulary.
 */
#define EXP_CHUNK 256

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
static void
exp_shifted(const float *l, uint32_t n, double c, double *e)
{
	for (uint32_t i = 0; i < n; i++) {
		double x = (double)l[i] - c, kd, r, p, sc;
		uint64_t u, k;
		bool tiny;

		memcpy(&u, &x, sizeof(u));
		/* x <= 0: a larger magnitude is a larger pattern; -708 is 0xc086200000000000 */
		tiny = u > 0xc086200000000000ull && u < 0xfff8000000000000ull;
		u = tiny ? 0xc086200000000000ull : u;
		memcpy(&x, &u, sizeof(x));
		kd = x * 0x1.71547652b82fep0 + 0x1.8p52; /* round(x / ln 2) in the low bits */
		memcpy(&k, &kd, sizeof(k));
		kd -= 0x1.8p52;
		r = (x - kd * 0x1.62e42fefa3800p-1) - kd * 0x1.ef35793c76730p-45;
		p = 1.0 / 6227020800.0;
		p = p * r + 1.0 / 479001600.0;
		p = p * r + 1.0 / 39916800.0;
		p = p * r + 1.0 / 3628800.0;
		p = p * r + 1.0 / 362880.0;
		p = p * r + 1.0 / 40320.0;
		p = p * r + 1.0 / 5040.0;
		p = p * r + 1.0 / 720.0;
		p = p * r + 1.0 / 120.0;
		p = p * r + 1.0 / 24.0;
		p = p * r + 1.0 / 6.0;
		p = p * r + 0.5;
		p = p * r + 1.0;
		p = p * r + 1.0;
		k = (k - 0x4338000000000000ull + 1023) << 52; /* 2^round */
		memcpy(&sc, &k, sizeof(sc));
		e[i] = tiny ? 0.0 : p * sc;
	}
}

/* The sum of e^(l[v] - c) over v < n, in v order. */
static double sum_exp(const float *l, uint32_t n, double c)
{
	double e[EXP_CHUNK], sum = 0;

	for (uint32_t v0 = 0; v0 < n; v0 += EXP_CHUNK) {
		const uint32_t m = n - v0 < EXP_CHUNK ? n - v0 : EXP_CHUNK;

		exp_shifted(l + v0, m, c, e);
		for (uint32_t i = 0; i < m; i++)
			sum += e[i];
	}
	return sum;
}

/* a ranks before b: higher logit, then lower id. */
static inline int before(const float *l, uint32_t a, uint32_t b)
{
	const float la = l[a], lb = l[b];

	return la > lb || (la == lb && a < b);
}

static int cmp_rank(const void *x, const void *y, void *arg)
{
	const float *l = arg;
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;

	return before(l, a, b) ? -1 : before(l, b, a) ? 1 : 0;
}

/* The n strongest ids into top[] (n small): insertion into a sorted list. */
static uint32_t strongest(const float *l, uint32_t V, uint32_t n, int32_t *top)
{
	uint32_t k = 0;

	for (uint32_t v = 0; v < V; v++) {
		uint32_t i;

		if (k == n && !before(l, v, (uint32_t)top[n - 1]))
			continue;
		i = k < n ? k++ : n - 1;
		while (i > 0 && before(l, v, (uint32_t)top[i - 1])) {
			top[i] = top[i - 1];
			i--;
		}
		top[i] = (int32_t)v;
	}
	return k;
}

/*
 * ord[0..m) = the ids with a logit >= t, ranked, and m returned; or 0
 * without ranking them when the set is sure not to be enough (below).
 */
static uint32_t ranked_above(const struct moem_sampling *s, const float *l, uint32_t V, float t,
			     double mx, double lse, uint32_t cap, uint32_t *ord)
{
	uint32_t m = 0;
	double mass = 0;

	for (uint32_t v = 0; v < V; v++)
		if (l[v] >= t) {
			ord[m++] = v;
			mass += exp((double)l[v] - lse);
		}
	/*
	 * Enough where the cut can fall inside: top_k's, min_p's (every id
	 * below the cut is inside), top_p's with a margin for the order the
	 * cut loop adds in. A wrong guess costs time only: an unranked set
	 * is widened, and a ranked one the loop does not stop in is too.
	 */
	if (t != -INFINITY && m < cap && !(s->min_p > 0 && (double)t <= mx + log(s->min_p)) &&
	    !(s->top_p < 1 && mass >= s->top_p * (1 - 1e-9)))
		return 0;
	qsort_r(ord, m, sizeof(*ord), cmp_rank, (void *)l);
	return m;
}

/*
 * How many of the ranked ids top_k, min_p and top_p keep (at least one),
 * with ord[0..n) those ids ranked: the first ids of the whole vocabulary
 * sorted by before(), cut where the loop below cuts it. Only a prefix of
 * that order is ever read, so only a prefix is ranked: the top_k
 * strongest when top_k is at most 64, else the ids within d of the largest
 * logit, a set that holds every id ranked before any of its own, so its
 * order is the whole order's prefix; d doubles until the loop stops
 * inside the set (the whole vocabulary at worst). Sorting all of a
 * 151,936-token vocabulary for every sampled token took 37 ms on the
 * 2-thread AMD EPYC; the bits of what is kept are the same.
 */
static uint32_t truncate(const struct moem_sampling *s, const float *l, uint32_t V, double mx,
			 double lse, uint32_t *ord)
{
	const uint32_t cap = s->top_k && s->top_k < V ? s->top_k : V;

	for (double d = 8;; d *= 2) {
		const bool all = d > 1024;
		uint32_t m, n = cap;
		double keep = 0, pmax;
		bool cut = false;

		if (cap <= 64) /* insertion: up to cap steps an id */
			m = strongest(l, V, cap, (int32_t *)ord);
		else
			m = ranked_above(s, l, V, all ? -INFINITY : (float)(mx - d), mx, lse, cap,
					 ord);
		if (!m)
			continue;
		pmax = exp((double)l[ord[0]] - lse);
		for (uint32_t i = 0; i < n && i < m; i++) {
			double p = exp((double)l[ord[i]] - lse);

			if (s->min_p > 0 && p < s->min_p * pmax) {
				n = i;
				cut = true;
				break;
			}
			keep += p;
			if (s->top_p < 1 && keep >= s->top_p) {
				n = i + 1;
				cut = true;
				break;
			}
		}
		if (cut || m >= n || all)
			return n ? n : 1;
	}
}

void moem_sample(const struct moem_sampling *s, float *l, uint32_t V, const uint8_t *seen,
		 const uint32_t *gen_count, struct moem_rng *rng, uint32_t n_top, uint32_t *scratch,
		 int32_t *token, float *logprob, int32_t *top_ids, float *top_lp)
{
	double mx = -INFINITY, lse;
	int32_t best = 0; /* the argmax, lowest id on ties (all -inf: 0) */

	*token = 0;
	*logprob = 0;
	if (!V)
		return;
	for (uint32_t v = 0; v < V; v++) {
		if (seen && seen[v] && s->repetition_penalty != 1.0f)
			l[v] = l[v] > 0 ? l[v] / s->repetition_penalty
					: l[v] * s->repetition_penalty;
		if (gen_count && gen_count[v])
			l[v] -= (float)gen_count[v] * s->frequency_penalty + s->presence_penalty;
		if (s->temperature > 0)
			l[v] /= s->temperature;
		if (isnan(l[v]))
			l[v] = -INFINITY;
		if (l[v] > mx) { /* fmax()'s (no NaN is left); the first of equals wins */
			mx = l[v];
			best = (int32_t)v;
		}
	}
	lse = mx + log(sum_exp(l, V, mx));
	if (s->temperature > 0) {
		double keep = 0, u, acc = 0;

		if (!s->top_k && s->top_p >= 1 && !s->min_p) {
			/* the whole vocabulary in id order */
			double e[EXP_CHUNK];

			keep = sum_exp(l, V, lse);
			u = moem_rng_f64(rng) * keep;
			best = (int32_t)V - 1;
			for (uint32_t v0 = 0, found = 0; v0 < V && !found; v0 += EXP_CHUNK) {
				const uint32_t m = V - v0 < EXP_CHUNK ? V - v0 : EXP_CHUNK;

				exp_shifted(l + v0, m, lse, e);
				for (uint32_t i = 0; i < m && !found; i++) {
					acc += e[i];
					found = u < acc;
					if (found)
						best = (int32_t)(v0 + i);
				}
			}
		} else {
			uint32_t *ord = scratch, n = truncate(s, l, V, mx, lse, ord);

			for (uint32_t i = 0; i < n; i++)
				keep += exp((double)l[ord[i]] - lse);
			u = moem_rng_f64(rng) * keep;
			best = (int32_t)ord[n - 1];
			for (uint32_t i = 0; i < n; i++) {
				acc += exp((double)l[ord[i]] - lse);
				if (u < acc) {
					best = (int32_t)ord[i];
					break;
				}
			}
		}
	}
	*token = best;
	*logprob = (float)((double)l[best] - lse);
	if (n_top) {
		uint32_t k = strongest(l, V, n_top, top_ids);

		for (uint32_t i = 0; i < k; i++)
			top_lp[i] = (float)((double)l[top_ids[i]] - lse);
	}
}
