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

void moem_sample(const struct moem_sampling *s, float *l, uint32_t V, const uint8_t *seen,
		 const uint32_t *gen_count, struct moem_rng *rng, uint32_t n_top, uint32_t *scratch,
		 int32_t *token, float *logprob, int32_t *top_ids, float *top_lp)
{
	double mx = -INFINITY, sum = 0, lse;
	int32_t best;

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
		mx = fmax(mx, l[v]);
	}
	for (uint32_t v = 0; v < V; v++)
		sum += exp((double)l[v] - mx);
	lse = mx + log(sum);
	strongest(l, V, 1, &best);
	if (s->temperature > 0) {
		uint32_t n = V, *ord = scratch;
		double keep = 0, u, acc = 0, pmax;

		for (uint32_t v = 0; v < V; v++)
			ord[v] = v;
		if (s->top_k || s->top_p < 1 || s->min_p > 0) {
			qsort_r(ord, V, sizeof(*ord), cmp_rank, l);
			if (s->top_k && s->top_k < n)
				n = s->top_k;
			pmax = exp((double)l[ord[0]] - lse);
			for (uint32_t i = 0; i < n; i++) {
				double p = exp((double)l[ord[i]] - lse);

				if (s->min_p > 0 && p < s->min_p * pmax) {
					n = i;
					break;
				}
				keep += p;
				if (s->top_p < 1 && keep >= s->top_p) {
					n = i + 1;
					break;
				}
			}
			if (!n)
				n = 1;
		}
		keep = 0;
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
	*token = best;
	*logprob = (float)((double)l[best] - lse);
	if (n_top) {
		uint32_t k = strongest(l, V, n_top, top_ids);

		for (uint32_t i = 0; i < k; i++)
			top_lp[i] = (float)((double)l[top_ids[i]] - lse);
	}
}
