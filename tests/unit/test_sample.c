// SPDX-License-Identifier: GPL-2.0-only
/*
 * moem_sample() (runtime/model/sample.c) against the plain algorithm it
 * must equal: rank the whole vocabulary (higher logit first, lower id on
 * ties), cut it by top_k, min_p and top_p in that order, draw from what
 * is left. moem_sample() ranks only the prefix the cut can reach, and
 * sums its log-sum-exp with an exp of its own (vectorised, within about
 * an ulp of libm's, which the reference calls); the token, its float
 * log-probability and the generator's state must be the reference's,
 * bit for bit, over vocabularies, logit shapes (flat, peaked, ties,
 * -inf, NaN) and every mix of the three cuts. (Its exp cut to a
 * polynomial of degree 7, 6e-9 off, fails it.)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/sample.h>

#include "kselftest_harness.h"

static int ref_cmp(const void *x, const void *y, void *arg)
{
	const float *l = arg;
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;

	if (l[a] != l[b])
		return l[a] > l[b] ? -1 : 1;
	return a < b ? -1 : a > b;
}

/* The whole-vocabulary algorithm, on logits already processed by moem_sample(). */
static void ref_sample(const struct moem_sampling *s, const float *l, uint32_t V,
		       struct moem_rng *rng, int32_t *token, float *logprob)
{
	uint32_t *ord = malloc(sizeof(*ord) * V), n = V, best = 0;
	double mx = -INFINITY, sum = 0, lse, keep = 0, u, acc = 0;

	for (uint32_t v = 0; v < V; v++) {
		ord[v] = v;
		mx = fmax(mx, l[v]);
	}
	for (uint32_t v = 0; v < V; v++)
		sum += exp((double)l[v] - mx);
	lse = mx + log(sum);
	qsort_r(ord, V, sizeof(*ord), ref_cmp, (void *)l);
	best = ord[0];
	if (s->temperature > 0) {
		if (s->top_k || s->top_p < 1 || s->min_p > 0) {
			double pmax = exp((double)l[ord[0]] - lse);

			if (s->top_k && s->top_k < n)
				n = s->top_k;
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
		} else {
			for (uint32_t v = 0; v < V; v++)
				ord[v] = v;
		}
		keep = 0;
		for (uint32_t i = 0; i < n; i++)
			keep += exp((double)l[ord[i]] - lse);
		u = moem_rng_f64(rng) * keep;
		best = ord[n - 1];
		for (uint32_t i = 0; i < n; i++) {
			acc += exp((double)l[ord[i]] - lse);
			if (u < acc) {
				best = ord[i];
				break;
			}
		}
	}
	*token = (int32_t)best;
	*logprob = (float)((double)l[best] - lse);
	free(ord);
}

/* Logits of shape k: 0 gaussian, 1 peaked (a few far above), 2 coarse (many ties), 3 with -inf and NaN. */
static void fill(float *l, uint32_t V, int k, double scale, struct moem_rng *r)
{
	for (uint32_t v = 0; v < V; v++) {
		double g = moem_rng_normal(r) * scale;

		switch (k) {
		case 1:
			l[v] = (float)(g + (moem_rng_below(r, 100) == 0 ? 12 * scale : 0));
			break;
		case 2:
			l[v] = (float)floor(g);
			break;
		case 3:
			l[v] = moem_rng_below(r, 10) == 0   ? -INFINITY
			       : moem_rng_below(r, 50) == 0 ? NAN
							    : (float)g;
			break;
		default:
			l[v] = (float)g;
		}
	}
}

TEST(truncated_sampling_equals_ranking_the_whole_vocabulary)
{
	static const uint32_t vocab[] = {1, 7, 300, 5000, 70000};
	static const uint32_t top_k[] = {0, 1, 3, 50, 1500, 100000};
	static const float top_p[] = {1.0f, 0.9f, 0.5f, 0.999f, 1e-6f};
	static const float min_p[] = {0.0f, 0.05f, 0.9f};
	static const float temp[] = {0.0f, 0.3f, 1.0f, 4.0f};
	struct moem_rng r;
	uint32_t cases = 0;

	moem_rng_seed(&r, 17, 0);
	for (unsigned int vi = 0; vi < sizeof(vocab) / sizeof(vocab[0]); vi++) {
		const uint32_t V = vocab[vi];
		float *l0 = malloc(sizeof(float) * V), *l = malloc(sizeof(float) * V);
		uint32_t *scratch = malloc(sizeof(uint32_t) * 2 * V);

		ASSERT_TRUE(l0 && l && scratch);
		for (int shape = 0; shape < 4; shape++)
			for (int c = 0; c < (V > 10000 ? 12 : 60); c++) {
				struct moem_sampling s;
				struct moem_rng g1, g2;
				int32_t tok, want;
				float lp, want_lp;

				moem_sampling_defaults(&s);
				s.temperature = temp[moem_rng_below(&r, 4)];
				s.top_k = top_k[moem_rng_below(&r, 6)];
				s.top_p = top_p[moem_rng_below(&r, 5)];
				s.min_p = min_p[moem_rng_below(&r, 3)];
				fill(l0, V, shape, 0.5 + moem_rng_below(&r, 8), &r);
				memcpy(l, l0, sizeof(float) * V);
				moem_rng_seed(&g1, 5, (uint64_t)c);
				moem_sample(&s, l, V, NULL, NULL, &g1, 0, scratch, &tok, &lp, NULL,
					    NULL);
				/* l now holds the processed logits (temperature, NaN as -inf) */
				moem_rng_seed(&g2, 5, (uint64_t)c);
				ref_sample(&s, l, V, &g2, &want, &want_lp);
				ASSERT_EQ(want, tok)
				TH_LOG("V %u shape %d case %d: T %g k %u p %g min_p %g", V, shape,
				       c, (double)s.temperature, s.top_k, (double)s.top_p,
				       (double)s.min_p);
				ASSERT_EQ(0, memcmp(&want_lp, &lp, sizeof(lp)));
				/* the generators drew the same number of values */
				ASSERT_EQ(moem_rng_u64(&g2), moem_rng_u64(&g1));
				cases++;
			}
		free(l0);
		free(l);
		free(scratch);
	}
	EXPECT_LE(500, cases);
}

TEST_HARNESS_MAIN
