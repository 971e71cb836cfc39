// SPDX-License-Identifier: GPL-2.0-only
/*
 * DynaExq invariants: the n_hi budget formula; top-n_hi per layer with
 * margin hysteresis; at most max_inflight transitions per layer;
 * demotions before promotions; the version the forward pass reads is
 * always a complete one; driven through the budget tracker with random
 * completion order, HBM use never exceeds the budget.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/policy.h>
#include <moem/rng.h>

#include "kselftest_harness.h"

static struct moem_dynaexq *mk(struct __test_metadata *_metadata, uint32_t L, uint32_t N,
			       uint32_t n_hi)
{
	struct moem_dynaexq_cfg c;
	struct moem_dynaexq *dx = NULL;

	moem_dynaexq_default(&c, L, N);
	c.n_hi = n_hi;
	c.interval_ns = 1000;
	EXPECT_EQ(0, moem_dynaexq_create(&c, &dx));
	return dx;
}

TEST(n_hi_formula)
{
	uint32_t n;

	/* (1000 - 100 - 2*4*10 - 20) / (2 * (50 - 10)) = 800 / 80 = 10, capped at N = 4 */
	ASSERT_EQ(0, moem_dynaexq_n_hi(1000, 100, 2, 4, 50, 10, 20, &n));
	EXPECT_EQ(4u, n);
	ASSERT_EQ(0, moem_dynaexq_n_hi(1000, 100, 2, 40, 50, 10, 20, &n));
	EXPECT_EQ(1u, n); /* (1000 - 100 - 800 - 20) / 80 */
	ASSERT_EQ(0, moem_dynaexq_n_hi(1100, 100, 2, 40, 50, 10, 20, &n));
	EXPECT_EQ(2u, n); /* 180 / 80 */
	ASSERT_EQ(0, moem_dynaexq_n_hi(979, 100, 2, 40, 50, 10, 20, &n));
	EXPECT_EQ(0u, n);
	EXPECT_EQ(-ENOSPC, moem_dynaexq_n_hi(900, 100, 2, 40, 50, 10, 20, &n));
	EXPECT_NE(NULL, strstr(moem_last_error(), "low precision"));
	EXPECT_EQ(-EINVAL, moem_dynaexq_n_hi(1000, 0, 2, 4, 10, 10, 0, &n));
	EXPECT_EQ(-ENOSPC,
		  moem_dynaexq_n_hi(UINT64_MAX, 0, 256, 1024, UINT64_MAX, UINT64_MAX / 2, 0, &n));
}

TEST(parse)
{
	struct moem_dynaexq_cfg c;
	bool given = true;

	moem_dynaexq_default(&c, 4, 8);
	ASSERT_EQ(0, moem_dynaexq_parse("dynaexq:hi=q4,lo=q2,margin=0.05", &c, &given));
	EXPECT_EQ(MOEM_PREC_Q4, c.hi);
	EXPECT_EQ(MOEM_PREC_Q2, c.lo);
	EXPECT_FALSE(given);
	ASSERT_EQ(0, moem_dynaexq_parse("dynaexq:n_hi=3", &c, &given));
	EXPECT_TRUE(given);
	EXPECT_EQ(3u, c.n_hi);
	EXPECT_EQ(-EINVAL, moem_dynaexq_parse("dynaexq:hi=q2,lo=q4", &c, NULL));
	EXPECT_EQ(-EINVAL, moem_dynaexq_parse("dynaexq:hi=q3", &c, NULL));
}

static void count(struct moem_dynaexq *dx, uint32_t layer, const uint32_t *per_expert, uint32_t N)
{
	for (uint32_t e = 0; e < N; e++)
		for (uint32_t i = 0; i < per_expert[e]; i++) {
			int32_t id = (int32_t)e;

			moem_dynaexq_count(dx, layer, &id, 1);
		}
}

static void drain(struct __test_metadata *_metadata, struct moem_dynaexq *dx)
{
	struct moem_dx_action a;

	while (moem_dynaexq_next(dx, &a) == 1)
		ASSERT_EQ(0, moem_dynaexq_complete(dx, &a));
}

TEST(top_n_with_hysteresis)
{
	struct moem_dynaexq *dx = mk(_metadata, 1, 6, 2);
	uint32_t c1[6] = {50, 40, 5, 3, 1, 1}, c2[6] = {21, 21, 58, 0, 0, 0};
	uint32_t c3[6] = {10, 10, 70, 10, 0, 0};

	ASSERT_NE(NULL, dx);
	moem_dynaexq_tick(dx, 0);
	count(dx, 0, c1, 6);
	ASSERT_EQ(1, moem_dynaexq_tick(dx, 1000));
	EXPECT_TRUE(moem_dynaexq_target(dx, 0, 0));
	EXPECT_TRUE(moem_dynaexq_target(dx, 0, 1));
	EXPECT_EQ(2u, moem_dynaexq_target_count(dx, 0));
	drain(_metadata, dx);
	EXPECT_EQ(MOEM_X_HI, moem_dynaexq_state(dx, 0, 0));
	EXPECT_EQ(MOEM_X_HI, moem_dynaexq_state(dx, 0, 1));
	/* expert 2 edges past expert 0 by less than the margin: no swap */
	count(dx, 0, c2, 6);
	ASSERT_EQ(1, moem_dynaexq_tick(dx, 2000));
	{
		const float *s = moem_dynaexq_scores(dx, 0);

		TH_LOG("scores %.3f %.3f %.3f", s[0], s[1], s[2]);
		ASSERT_GT(s[2], s[1]);
		ASSERT_LT(s[2] - s[1], 0.02);
	}
	EXPECT_FALSE(moem_dynaexq_target(dx, 0, 2));
	/* a clear winner swaps in, replacing the weakest */
	count(dx, 0, c3, 6);
	ASSERT_EQ(1, moem_dynaexq_tick(dx, 3000));
	EXPECT_TRUE(moem_dynaexq_target(dx, 0, 2));
	EXPECT_EQ(2u, moem_dynaexq_target_count(dx, 0));
	{
		struct moem_dx_action a;

		/* demotion first (it frees memory), then the promotion */
		ASSERT_EQ(1, moem_dynaexq_next(dx, &a));
		EXPECT_FALSE(a.promote);
		ASSERT_EQ(1, moem_dynaexq_next(dx, &a));
		EXPECT_TRUE(a.promote);
		EXPECT_EQ(2u, a.expert);
		/* the forward pass still reads lo for a promoting expert */
		EXPECT_EQ(MOEM_X_PROMOTING, moem_dynaexq_state(dx, 0, 2));
		EXPECT_FALSE(moem_dynaexq_use_hi(dx, 0, 2));
		ASSERT_EQ(0, moem_dynaexq_complete(dx, &a));
		EXPECT_TRUE(moem_dynaexq_use_hi(dx, 0, 2));
		/* completing twice is a caller bug, reported */
		EXPECT_EQ(-EINVAL, moem_dynaexq_complete(dx, &a));
	}
	/* budget shrinks: targets follow */
	moem_dynaexq_set_n_hi(dx, 1);
	EXPECT_EQ(1u, moem_dynaexq_target_count(dx, 0));
	moem_dynaexq_destroy(dx);
}

/* Random hotness, random completion order, a byte budget: every invariant at every step. */
TEST(driver_invariants)
{
	const uint32_t L = 4, N = 16, s_hi = 100, s_lo = 30;
	const uint64_t budget = L * N * s_lo + 6 * (s_hi - s_lo) * L + 2 * s_hi;
	struct moem_dynaexq *dx;
	struct moem_tier_budget b;
	struct moem_dx_action fl[64];
	uint32_t nfl = 0, n_hi;
	struct moem_rng r;
	uint64_t promos = 0, refused = 0;

	ASSERT_EQ(0, moem_dynaexq_n_hi(budget, 0, L, N, s_hi, s_lo, 2 * s_hi, &n_hi));
	EXPECT_EQ(6u, n_hi);
	dx = mk(_metadata, L, N, n_hi);
	ASSERT_NE(NULL, dx);
	moem_tier_budget_init(&b, budget);
	ASSERT_TRUE(moem_tier_budget_try_reserve(&b, (uint64_t)L * N * s_lo));
	moem_rng_seed(&r, 21, 0);
	moem_dynaexq_tick(dx, 0);
	for (uint64_t t = 1; t < 20000; t++) {
		struct moem_dx_action a;
		uint32_t l = moem_rng_below(&r, L);
		int32_t id =
			(int32_t)(moem_rng_below(&r, 1 + moem_rng_below(&r, N)) + (t / 5000) * 3) %
			(int32_t)N; /* drifting skew */

		moem_dynaexq_count(dx, l, &id, 1);
		moem_dynaexq_tick(dx, t * 10);
		/* start what is due while the budget allows */
		while (nfl < 64 && moem_dynaexq_next(dx, &a) == 1) {
			uint64_t need = a.promote ? s_hi : s_lo;

			if (!moem_tier_budget_try_reserve(&b, need)) {
				moem_dynaexq_cancel(dx, &a);
				refused++;
				break;
			}
			fl[nfl++] = a;
		}
		/* complete one in-flight transition at random */
		if (nfl && moem_rng_below(&r, 2)) {
			uint32_t i = moem_rng_below(&r, nfl);

			a = fl[i];
			fl[i] = fl[--nfl];
			ASSERT_EQ(0, moem_dynaexq_complete(dx, &a));
			ASSERT_EQ(0, moem_tier_budget_release(&b, a.promote ? s_lo : s_hi));
			promos += a.promote;
		}
		ASSERT_LE(b.used, b.limit);
		for (uint32_t m = 0; m < L; m++) {
			uint32_t hi = 0, infl = 0;

			ASSERT_LE(moem_dynaexq_inflight(dx, m), 4u);
			ASSERT_LE(moem_dynaexq_target_count(dx, m), n_hi);
			for (uint32_t e = 0; e < N; e++) {
				enum moem_xstate s = moem_dynaexq_state(dx, m, e);

				hi += s == MOEM_X_HI || s == MOEM_X_DEMOTING;
				infl += s == MOEM_X_PROMOTING || s == MOEM_X_DEMOTING;
				/* the forward pass reads a complete version */
				ASSERT_EQ(s == MOEM_X_HI || s == MOEM_X_DEMOTING,
					  moem_dynaexq_use_hi(dx, m, e));
			}
			ASSERT_EQ(infl, moem_dynaexq_inflight(dx, m));
			/* resident hi versions plus promotions never outgrow the budget's n_hi
			 * by more than what is in flight */
			ASSERT_LE(hi, n_hi + 4);
		}
	}
	TH_LOG("%llu promotions, %llu refused by the budget", (unsigned long long)promos,
	       (unsigned long long)refused);
	EXPECT_GT(promos, 20u);
	EXPECT_LE(b.peak, budget);
	moem_dynaexq_destroy(dx);
}

TEST_HARNESS_MAIN
