// SPDX-License-Identifier: GPL-2.0-only
/*
 * ExpertFlow prefetch: the horizon formula, the stall/early feedback and
 * its clamps, the predictor learning transitions (chain and temporal)
 * and using pre-gate data, and the shape of a plan (nearest tick first,
 * nothing past S, far ticks planned once). Same inputs, same plan.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/policy.h>
#include <moem/rng.h>

#include "kselftest_harness.h"

#define L 8
#define N 32
#define K 2

static struct moem_prefetch *mk(struct __test_metadata *_metadata, bool adaptive, uint32_t S)
{
	struct moem_prefetch_cfg c;
	struct moem_prefetch *pf = NULL;

	moem_prefetch_default(&c, L, N, K);
	c.adaptive = adaptive;
	c.S = S;
	c.bw_bytes_per_ns = 10; /* 10 GB/s */
	c.layer_ns = 1000;
	c.expert_bytes = 20000; /* one expert = 2 layers of compute */
	EXPECT_EQ(0, moem_prefetch_create(&c, &pf));
	return pf;
}

/* Deterministic routing: at layer m every token picks m, m+1 shifted by its slot. */
static void det_ids(uint64_t pos, uint32_t tokens, int32_t *ids)
{
	uint32_t m = (uint32_t)(pos % L);

	for (uint32_t t = 0; t < tokens; t++) {
		ids[t * K] = (int32_t)((3 * m + t) % N);
		ids[t * K + 1] = (int32_t)((3 * m + t + 7) % N);
	}
}

TEST(parse_and_format)
{
	struct moem_prefetch_cfg c;
	char buf[32];

	moem_prefetch_default(&c, L, N, K);
	ASSERT_EQ(0, moem_prefetch_parse("fixed:S=3", &c));
	EXPECT_FALSE(c.adaptive);
	EXPECT_EQ(3u, c.S);
	moem_prefetch_format(&c, buf, sizeof(buf));
	EXPECT_STREQ("fixed:S=3", buf);
	ASSERT_EQ(0, moem_prefetch_parse("adaptive:cum=0.8,stall=2", &c));
	EXPECT_TRUE(c.adaptive);
	EXPECT_EQ(0u, c.S);
	EXPECT_EQ(2u, c.t_stall);
	EXPECT_EQ(-ENOENT, moem_prefetch_parse("none", &c));
	EXPECT_EQ(-EINVAL, moem_prefetch_parse("fixed:S=0", &c));
	EXPECT_EQ(-EINVAL, moem_prefetch_parse("adaptive:bogus=1", &c));
}

TEST(horizon_formula_and_feedback)
{
	struct moem_prefetch *pf = mk(_metadata, true, 0);
	struct moem_prefetch_req req[256];
	int32_t ids[4 * K];
	uint32_t S0;

	ASSERT_NE(NULL, pf);
	/* learn the deterministic routing for a few steps */
	for (uint64_t pos = 0; pos < 20 * L; pos++) {
		det_ids(pos, 4, ids);
		ASSERT_EQ(0, moem_prefetch_observe(pf, pos, 4, ids));
		moem_prefetch_plan(pf, pos, req, 256);
	}
	/* N_e = 8 experts (4 tokens x 2, distinct) x 20000 B / (10 B/ns x 1000 ns) = 16 */
	S0 = moem_prefetch_horizon(pf);
	EXPECT_EQ(L - 1, S0); /* clamped to L - 1 */
	/* a warm cache: only a quarter of planned experts need a transfer */
	for (int i = 0; i < 200; i++)
		moem_prefetch_issued(pf, 8, 2);
	moem_prefetch_plan(pf, 20 * L - 1, req, 256);
	EXPECT_EQ(4u, moem_prefetch_horizon(pf)); /* ceil(8 * 20000 * .25 / 1e4) */
	/* feedback: 4 stalls -> +1, 32 early -> -1 */
	for (int i = 0; i < 3; i++)
		moem_prefetch_stall(pf);
	EXPECT_EQ(4u, moem_prefetch_horizon(pf));
	moem_prefetch_stall(pf);
	EXPECT_EQ(5u, moem_prefetch_horizon(pf));
	for (int i = 0; i < 31; i++)
		moem_prefetch_early(pf);
	EXPECT_EQ(5u, moem_prefetch_horizon(pf));
	moem_prefetch_early(pf);
	EXPECT_EQ(4u, moem_prefetch_horizon(pf));
	/* clamps: never above L-1 or below 1, and no wind-up past them */
	for (int i = 0; i < 400; i++)
		moem_prefetch_stall(pf);
	EXPECT_EQ(L - 1, moem_prefetch_horizon(pf));
	for (int i = 0; i < 32 * 6; i++)
		moem_prefetch_early(pf);
	EXPECT_EQ(1u, moem_prefetch_horizon(pf));
	for (int i = 0; i < 32 * 20; i++)
		moem_prefetch_early(pf);
	for (int i = 0; i < 4; i++)
		moem_prefetch_stall(pf);
	EXPECT_EQ(2u, moem_prefetch_horizon(pf));
	/* bandwidth doubles: the formula halves its part */
	moem_prefetch_destroy(pf);

	/* fixed S ignores feedback */
	pf = mk(_metadata, false, 3);
	for (int i = 0; i < 100; i++)
		moem_prefetch_stall(pf);
	EXPECT_EQ(3u, moem_prefetch_horizon(pf));
	moem_prefetch_destroy(pf);
}

TEST(predictor_learns_transitions)
{
	struct moem_prefetch *pf = mk(_metadata, false, 3);
	int32_t ids[4 * K], next[4 * K];
	float prob[N];
	double rc, rt, rp;

	ASSERT_NE(NULL, pf);
	for (uint64_t pos = 0; pos < 30 * L; pos++) {
		det_ids(pos, 4, ids);
		ASSERT_EQ(0, moem_prefetch_observe(pf, pos, 4, ids));
	}
	moem_prefetch_recall(pf, &rc, &rt, &rp);
	TH_LOG("recall at distance 1: chain %.3f temporal %.3f", rc, rt);
	EXPECT_GT(rc, 0.9);
	EXPECT_GT(rt, 0.9);
	/* the next layer's experts are the most likely ones, by far */
	ASSERT_EQ(0, moem_prefetch_predict(pf, 30 * L, prob));
	det_ids(30 * L, 4, next);
	for (uint32_t e = 0; e < N; e++) {
		bool want = false;

		for (int i = 0; i < 4 * K; i++)
			want |= next[i] == (int32_t)e;
		if (want) {
			EXPECT_GT(prob[e], 0.5) TH_LOG("expert %u", e);
		} else {
			EXPECT_LT(prob[e], 0.2) TH_LOG("expert %u", e);
		}
	}
	EXPECT_EQ(-EINVAL, moem_prefetch_predict(pf, 30 * L - 1, prob));
	EXPECT_EQ(-EINVAL, moem_prefetch_predict(pf, 30 * L - 1 + L, prob));
	/* ticks must increase */
	EXPECT_EQ(-EINVAL, moem_prefetch_observe(pf, 5, 4, ids));
	moem_prefetch_destroy(pf);
}

/* Random routing has nothing to learn; exact pre-gate data then carries the prediction. */
TEST(pregate_is_used)
{
	struct moem_prefetch *pf = mk(_metadata, false, 2);
	int32_t ids[4 * K];
	float pg[N], prob[N];
	struct moem_rng r;
	double rc, rt, rp;
	uint64_t pos;

	moem_rng_seed(&r, 3, 0);
	for (pos = 0; pos < 40 * L; pos++) {
		for (int i = 0; i < 4 * K; i += 2) {
			ids[i] = (int32_t)moem_rng_below(&r, N);
			ids[i + 1] = (ids[i] + 1 + (int32_t)moem_rng_below(&r, N - 1)) % N;
		}
		/* the caller's pre-gate for this tick, computed earlier, is exact */
		memset(pg, 0, sizeof(pg));
		for (int i = 0; i < 4 * K; i++)
			pg[ids[i]] = 0.95f;
		moem_prefetch_pregate(pf, pos, pg);
		ASSERT_EQ(0, moem_prefetch_observe(pf, pos, 4, ids));
	}
	moem_prefetch_recall(pf, &rc, &rt, &rp);
	TH_LOG("recall: chain %.3f temporal %.3f pre-gate %.3f", rc, rt, rp);
	EXPECT_GT(rp, 0.9);
	EXPECT_LT(rc, 0.6);
	memset(pg, 0, sizeof(pg));
	pg[5] = pg[9] = 0.95f;
	moem_prefetch_pregate(pf, pos, pg);
	ASSERT_EQ(0, moem_prefetch_predict(pf, pos, prob));
	for (uint32_t e = 0; e < N; e++) {
		if (e == 5 || e == 9) {
			EXPECT_GT(prob[e], 0.5);
		} else {
			EXPECT_LT(prob[e], prob[5]);
		}
	}
	moem_prefetch_destroy(pf);
}

TEST(plan_shape_and_determinism)
{
	struct moem_prefetch *a = mk(_metadata, false, 6), *b = mk(_metadata, false, 6);
	static struct moem_prefetch_req ra[512], rb[512];
	int32_t ids[4 * K];
	struct moem_rng r;
	uint8_t planned[64 * L] = {0};

	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, b);
	moem_rng_seed(&r, 4, 0);
	for (uint64_t pos = 0; pos < 40; pos++) {
		uint32_t na, nb;

		for (int i = 0; i < 4 * K; i += 2) {
			ids[i] = (int32_t)moem_rng_below(&r, 6);
			ids[i + 1] = 6 + (int32_t)moem_rng_below(&r, N - 6);
		}
		ASSERT_EQ(0, moem_prefetch_observe(a, pos, 4, ids));
		ASSERT_EQ(0, moem_prefetch_observe(b, pos, 4, ids));
		na = moem_prefetch_plan(a, pos, ra, 512);
		nb = moem_prefetch_plan(b, pos, rb, 512);
		ASSERT_EQ(na, nb);
		ASSERT_EQ(0, memcmp(ra, rb, na * sizeof(ra[0])));
		for (uint32_t i = 0; i < na; i++) {
			ASSERT_GT(ra[i].pos, pos);
			ASSERT_LE(ra[i].pos, pos + 6);
			ASSERT_EQ(ra[i].pos % L, ra[i].layer);
			ASSERT_LT(ra[i].expert, N);
			ASSERT_GE(ra[i].prob, 0.05f);
			if (i) {
				/* nearest tick first, then most likely first */
				ASSERT_TRUE(ra[i - 1].pos < ra[i].pos ||
					    (ra[i - 1].pos == ra[i].pos &&
					     ra[i - 1].prob >= ra[i].prob));
				ASSERT_FALSE(ra[i - 1].pos == ra[i].pos &&
					     ra[i - 1].expert == ra[i].expert);
			}
			/* ticks beyond `hops` (4) are planned once */
			if (ra[i].pos - pos > 4) {
				ASSERT_TRUE(!planned[ra[i].pos] || planned[ra[i].pos] == pos + 1)
				TH_LOG("tick %llu planned twice", (unsigned long long)ra[i].pos);
				planned[ra[i].pos] = (uint8_t)(pos + 1);
			}
		}
	}
	moem_prefetch_destroy(a);
	moem_prefetch_destroy(b);
}

TEST_HARNESS_MAIN
