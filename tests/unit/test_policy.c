// SPDX-License-Identifier: GPL-2.0-only
/*
 * Policy plumbing and the small policies: spec parsing, the budget
 * tracker (never exceeded), hotness EMA, the routing policy (LYNX only on
 * memory-bound batches, OEA T = pruned top-k0 T, cache-aware order), E[T]
 * on uniform routing, FluxMoE placement, rho controller and staggered
 * migration, and hybrid execution's keep_ns.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/driver.h>
#include <moem/error.h>
#include <moem/policy.h>
#include <moem/rng.h>
#include <moem/synth.h>

#include "kselftest_harness.h"

TEST(spec_parse)
{
	struct moem_spec sp;
	uint32_t u = 7;
	double d = 1;
	bool b = false;

	ASSERT_EQ(0, moem_spec_parse("lru2:W=3,x=0.5,on=yes,name=q4", &sp));
	EXPECT_STREQ("lru2", sp.name);
	EXPECT_EQ(4u, sp.n);
	ASSERT_EQ(0, moem_spec_u32(&sp, "W", 0, 10, &u));
	EXPECT_EQ(3u, u);
	ASSERT_EQ(0, moem_spec_f64(&sp, "x", 0, 1, &d));
	EXPECT_EQ(0.5, d);
	ASSERT_EQ(0, moem_spec_bool(&sp, "on", &b));
	EXPECT_TRUE(b);
	/* absent keys leave the value alone */
	ASSERT_EQ(0, moem_spec_u32(&sp, "missing", 0, 10, &u));
	EXPECT_EQ(3u, u);
	/* an unread key is an error that names it */
	EXPECT_EQ(-EINVAL, moem_spec_done(&sp));
	EXPECT_NE(NULL, strstr(moem_last_error(), "'name'"));
	EXPECT_STREQ("q4", moem_spec_str(&sp, "name"));
	EXPECT_EQ(0, moem_spec_done(&sp));
	/* range and syntax errors */
	ASSERT_EQ(0, moem_spec_parse("a:W=11", &sp));
	EXPECT_EQ(-EINVAL, moem_spec_u32(&sp, "W", 0, 10, &u));
	ASSERT_EQ(0, moem_spec_parse("a:W=-1", &sp));
	EXPECT_EQ(-EINVAL, moem_spec_u32(&sp, "W", 0, 10, &u));
	EXPECT_EQ(-EINVAL, moem_spec_parse("a:W", &sp));
	EXPECT_EQ(-EINVAL, moem_spec_parse("a:W=1,", &sp));
	EXPECT_EQ(-EINVAL, moem_spec_parse("a:W=1,W=2", &sp));
	EXPECT_EQ(-EINVAL, moem_spec_parse(":W=1", &sp));
	EXPECT_EQ(-EINVAL, moem_spec_parse("a:=1", &sp));
}

TEST(budget_never_exceeded)
{
	struct moem_tier_budget b;
	uint64_t held[64] = {0}, n = 0;
	struct moem_rng r;

	moem_tier_budget_init(&b, 1000);
	moem_rng_seed(&r, 1, 0);
	for (int it = 0; it < 100000; it++) {
		uint32_t op = moem_rng_below(&r, 3);

		if (op < 2 && n < 64) {
			uint64_t want = moem_rng_below(&r, 300);

			if (moem_tier_budget_try_reserve(&b, want))
				held[n++] = want;
		} else if (n) {
			uint32_t i = moem_rng_below(&r, (uint32_t)n);

			ASSERT_EQ(0, moem_tier_budget_release(&b, held[i]));
			held[i] = held[--n];
		}
		if (it % 1000 == 0)
			moem_tier_budget_set_limit(&b, 500 + moem_rng_below(&r, 1000));
		/* A shrink may leave used above limit, but nothing new is granted then. */
		if (b.used > b.limit) {
			ASSERT_FALSE(moem_tier_budget_try_reserve(&b, 0));
			ASSERT_EQ(b.used - b.limit, moem_tier_budget_excess(&b));
		}
		ASSERT_LE(b.peak, 1500u);
	}
	EXPECT_GT(b.refused, 0u);
	/* Overflow and over-release are refused. */
	moem_tier_budget_init(&b, UINT64_MAX);
	ASSERT_TRUE(moem_tier_budget_try_reserve(&b, UINT64_MAX - 1));
	EXPECT_FALSE(moem_tier_budget_try_reserve(&b, 2));
	EXPECT_EQ(-EINVAL, moem_tier_budget_release(&b, UINT64_MAX));
	EXPECT_EQ(UINT64_MAX - 1, b.used);
}

TEST(hotness_ema)
{
	struct moem_hot *h;
	int32_t ids[4] = {0, 1, 1, -1};
	const float *s;

	ASSERT_EQ(0, moem_hot_create(2, 4, 0.8, 100, &h));
	EXPECT_EQ(0, moem_hot_tick(h, 1000)); /* starts the first interval */
	moem_hot_count(h, 0, ids, 4);
	EXPECT_EQ(0, moem_hot_tick(h, 1099));
	EXPECT_EQ(1, moem_hot_tick(h, 1100));
	s = moem_hot_scores(h, 0);
	EXPECT_LT(fabs(s[0] - 0.2 * 1 / 3), 1e-6);
	EXPECT_LT(fabs(s[1] - 0.2 * 2 / 3), 1e-6);
	EXPECT_EQ(0, s[2]);
	/* layer 1 saw nothing: unchanged */
	EXPECT_EQ(0, moem_hot_scores(h, 1)[0]);
	/* idle intervals fold once and change nothing */
	EXPECT_EQ(1, moem_hot_tick(h, 5000));
	EXPECT_LT(fabs(s[1] - 0.2 * 2 / 3), 1e-6);
	/* the EMA converges to the frequencies and stays normalised */
	for (int i = 0; i < 100; i++) {
		moem_hot_add(h, 0, 3, 3);
		moem_hot_add(h, 0, 2, 1);
		moem_hot_fold(h);
	}
	EXPECT_LT(fabs(s[3] - 0.75), 1e-4);
	EXPECT_LT(fabs(s[0] + s[1] + s[2] + s[3] - 1.0), 1e-4);
	moem_hot_destroy(h);
	EXPECT_EQ(-EINVAL, moem_hot_create(2, 4, 1.0, 100, &h));
}

#define B_MAX 64
#define N_MAX 128

struct out_buf {
	int32_t ids[B_MAX * 8];
	float w[B_MAX * 8];
	uint32_t cnt[B_MAX];
	struct moem_route_out o;
};

static void ob_init(struct out_buf *b)
{
	b->o = (struct moem_route_out){b->ids, b->w, b->cnt};
}

TEST(route_policy_parse_and_rules)
{
	struct moem_route_cfg c = {64, 8, true, 1.0f};
	struct moem_route_policy rp;
	static struct out_buf a, v;
	static float z[16 * 64];
	char buf[64];
	struct moem_rng r;

	ASSERT_EQ(0, moem_route_policy_parse("lynx:alpha=1,beta=2", 8, &rp));
	EXPECT_EQ(MOEM_RP_LYNX, rp.kind);
	EXPECT_EQ(1.0f, rp.lynx.alpha);
	EXPECT_EQ(2u, rp.lynx.beta);
	moem_route_policy_format(&rp, buf, sizeof(buf));
	EXPECT_STREQ("lynx:alpha=1,beta=2", buf);
	ASSERT_EQ(0, moem_route_policy_parse("oea", 8, &rp));
	EXPECT_EQ(4u, rp.k0); /* ceil(k / 2) */
	EXPECT_TRUE(moem_route_policy_needs_logits(&rp));
	ASSERT_EQ(0, moem_route_policy_parse("cache-aware", 8, &rp));
	EXPECT_FALSE(moem_route_policy_needs_logits(&rp));
	EXPECT_TRUE(moem_route_policy_ordered(&rp));
	EXPECT_EQ(-EINVAL, moem_route_policy_parse("oea:k0=9", 8, &rp));
	EXPECT_EQ(-EINVAL, moem_route_policy_parse("lynx:k0=2", 8, &rp));
	EXPECT_EQ(-EINVAL, moem_route_policy_parse("fastest", 8, &rp));
	/* LYNX re-routes only memory-bound batches (unless any=1). */
	ob_init(&a);
	ob_init(&v);
	moem_rng_seed(&r, 5, 0);
	for (int i = 0; i < 16 * 64; i++)
		z[i] = (float)moem_rng_normal(&r) * 2;
	ASSERT_EQ(0, moem_route_policy_parse("lynx", 8, &rp));
	ASSERT_EQ(0, moem_route_topk(&c, 16, z, NULL, &v.o));
	ASSERT_EQ(0, moem_route_policy_apply(&rp, &c, 16, z, NULL, NULL, false, &a.o));
	EXPECT_EQ(0, memcmp(a.ids, v.ids, sizeof(a.ids)));
	ASSERT_EQ(0, moem_route_policy_apply(&rp, &c, 16, z, NULL, NULL, true, &a.o));
	EXPECT_LT(moem_route_active(&c, 16, &a.o, NULL), moem_route_active(&c, 16, &v.o, NULL));
	rp.any_batch = true;
	ASSERT_EQ(0, moem_route_policy_apply(&rp, &c, 16, z, NULL, NULL, false, &a.o));
	EXPECT_LT(moem_route_active(&c, 16, &a.o, NULL), moem_route_active(&c, 16, &v.o, NULL));
}

/* OEA: T equals the pruned top-k0 T, and falls as k0 falls; prune is top-k0 exactly. */
TEST(oea_t_equals_pruned_t)
{
	struct moem_route_cfg c = {128, 8, true, 1.0f};
	struct moem_route_policy oea, pr;
	static struct out_buf a, p, v;
	static float z[32 * 128];
	uint64_t sumT[9] = {0};
	struct moem_rng r;

	ob_init(&a);
	ob_init(&p);
	ob_init(&v);
	moem_rng_seed(&r, 6, 0);
	for (int it = 0; it < 40; it++) {
		uint32_t B = 1 + moem_rng_below(&r, 32);

		for (uint32_t i = 0; i < B * 128; i++)
			z[i] = (float)moem_rng_normal(&r) * 2 + (i % 128 < 8 ? 2.0f : 0.0f);
		ASSERT_EQ(0, moem_route_topk(&c, B, z, NULL, &v.o));
		for (uint32_t k0 = 1; k0 <= 8; k0++) {
			uint32_t ta, tp;

			moem_route_policy_default(MOEM_RP_OEA, 8, &oea);
			moem_route_policy_default(MOEM_RP_PRUNE, 8, &pr);
			oea.k0 = pr.k0 = k0;
			ASSERT_EQ(0,
				  moem_route_policy_apply(&oea, &c, B, z, NULL, NULL, true, &a.o));
			ASSERT_EQ(0,
				  moem_route_policy_apply(&pr, &c, B, z, NULL, NULL, true, &p.o));
			ta = moem_route_active(&c, B, &a.o, NULL);
			tp = moem_route_active(&c, B, &p.o, NULL);
			ASSERT_EQ(tp, ta) TH_LOG("k0 %u B %u", k0, B);
			sumT[k0] += ta;
			for (uint32_t t = 0; t < B; t++) {
				/* prune keeps exactly the token's top-k0, in order */
				ASSERT_EQ(k0, p.cnt[t]);
				ASSERT_EQ(0, memcmp(p.ids + t * 8, v.ids + t * 8, k0 * 4));
				ASSERT_EQ(-1, k0 < 8 ? p.ids[t * 8 + k0] : -1);
			}
		}
	}
	for (uint32_t k0 = 2; k0 <= 8; k0++) {
		EXPECT_LE(sumT[k0 - 1], sumT[k0]);
	}
	EXPECT_LT(sumT[1], sumT[8]);
}

TEST(piggyback_and_exec_order)
{
	struct moem_route_cfg c = {32, 4, true, 1.0f};
	struct moem_route_policy pb;
	static struct out_buf a;
	static float z[8 * 32];
	uint8_t res[32] = {0}, act[32];
	uint32_t order[32], nres, n;
	struct moem_rng r;

	ob_init(&a);
	moem_rng_seed(&r, 7, 0);
	for (int i = 0; i < 8 * 32; i++)
		z[i] = (float)moem_rng_normal(&r);
	for (int e = 0; e < 32; e += 3)
		res[e] = 1;
	ASSERT_EQ(0, moem_route_policy_parse("piggyback:k0=2", 4, &pb));
	ASSERT_EQ(0, moem_route_policy_apply(&pb, &c, 8, z, NULL, res, true, &a.o));
	/* every chosen expert is in the widened S_base: resident or some token's top-2 */
	for (uint32_t t = 0; t < 8; t++)
		for (uint32_t j = 0; j < a.cnt[t]; j++) {
			int32_t e = a.ids[t * 4 + j];
			bool top2 = false;

			for (uint32_t u = 0; u < 8 && !top2; u++) {
				uint32_t better = 0;

				for (uint32_t f = 0; f < 32; f++)
					better += z[u * 32 + f] > z[u * 32 + e];
				top2 = better < 2;
			}
			ASSERT_TRUE(res[e] || top2);
		}
	n = moem_route_active(&c, 8, &a.o, act);
	ASSERT_EQ(n, moem_route_exec_order(32, act, res, order, &nres));
	for (uint32_t i = 0; i < n; i++) {
		ASSERT_TRUE(act[order[i]]);
		ASSERT_EQ(i < nres, res[order[i]] != 0);
		for (uint32_t j = 0; j < i; j++) {
			ASSERT_NE(order[i], order[j]);
		}
	}
	EXPECT_EQ(n, moem_route_exec_order(32, act, NULL, order, &nres));
	EXPECT_EQ(0u, nres);
}

/* ALGORITHMS.md: E[T] = N(1 - (1 - k/N)^B) on uniform routing (synthetic). */
TEST(expected_t_uniform)
{
	const uint32_t Bs[] = {1, 2, 4, 8, 16, 32, 64};
	struct moem_route_cfg c = {128, 8, true, 1.0f};
	static struct out_buf a;
	static float z[64 * 128];

	ob_init(&a);
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(Bs); i++) {
		struct moem_synth_params p;
		struct moem_synth *g;
		double sum = 0, want = 128 * (1 - pow(1 - 8.0 / 128, Bs[i]));
		uint32_t n = 0;

		moem_synth_defaults(&p, 4, 128, 8, 100 + i);
		p.zipf_s = 0;
		p.layer_corr = 0;
		p.persist = 0;
		p.drift = 0;
		ASSERT_EQ(0, moem_synth_create(&p, NULL, Bs[i], &g));
		for (int s = 0; s < 300; s++) {
			moem_synth_step(g);
			for (uint32_t m = 0; m < 4; m++) {
				for (uint32_t b = 0; b < Bs[i]; b++)
					moem_synth_logits(g, b, m, z + b * 128);
				ASSERT_EQ(0, moem_route_topk(&c, Bs[i], z, NULL, &a.o));
				sum += moem_route_active(&c, Bs[i], &a.o, NULL);
				n++;
			}
		}
		moem_synth_destroy(g);
		TH_LOG("B=%u: E[T] %.2f measured %.2f", Bs[i], want, sum / n);
		EXPECT_LT(fabs(sum / n - want) / want, 0.02);
	}
}

TEST(paging_placement_and_controller)
{
	const double bw[3] = {25, 7, 100};
	struct moem_paging_cfg c;
	struct moem_paging *pg;
	struct moem_paging_mig m;
	double x[3];
	uint8_t res[8] = {1, 1, 0, 0, 0, 0, 0, 0};
	float hot[8] = {.3f, .1f, .25f, .05f, .2f, .05f, .03f, .02f};

	ASSERT_EQ(0, moem_paging_placement(bw, 3, x));
	EXPECT_LT(fabs(x[0] + x[1] + x[2] - 1), 1e-12);
	EXPECT_LT(fabs(x[0] / x[1] - 25.0 / 7), 1e-9);
	/* every backend finishes together: the load time is bytes / sum B */
	EXPECT_LT(fabs(moem_paging_load_ns(bw, 3, 1320) - 10.0), 1e-9);
	EXPECT_EQ(-EINVAL, moem_paging_placement((double[]){1, 0}, 2, x));

	moem_paging_default(&c, 4, 8);
	c.capacity = 4;
	c.initial = 2;
	ASSERT_EQ(0, moem_paging_create(&c, &pg));
	EXPECT_EQ(2u, moem_paging_target(pg));
	EXPECT_EQ(0, moem_paging_control(pg, 95, 100)); /* rho 0.95: dead zone */
	EXPECT_EQ(0, moem_paging_control(pg, 100, 100));
	EXPECT_EQ(1, moem_paging_control(pg, 80, 100)); /* I/O bound: more resident */
	EXPECT_EQ(3u, moem_paging_target(pg));
	EXPECT_EQ(1, moem_paging_control(pg, 10, 100));
	EXPECT_EQ(0, moem_paging_control(pg, 10, 100)); /* capacity: the hard limit */
	EXPECT_EQ(4u, moem_paging_target(pg));
	EXPECT_EQ(-1, moem_paging_control(pg, 150, 100)); /* compute bound: fewer */
	moem_paging_set_capacity(pg, 2);
	EXPECT_EQ(2u, moem_paging_target(pg));
	/* staggered: one migration per layer per step, hottest first */
	moem_paging_control(pg, 10, 100); /* clamp: stays 2 */
	res[1] = 0;
	ASSERT_EQ(1, moem_paging_migration(pg, 5, 0, res, hot, &m));
	EXPECT_TRUE(m.promote);
	EXPECT_EQ(2u, m.expert);
	EXPECT_EQ(0, moem_paging_migration(pg, 5, 0, res, hot, &m));
	res[2] = 1;
	/* at the target: a resident colder than an outsider by margin is released */
	EXPECT_EQ(0, moem_paging_migration(pg, 6, 0, res, hot, &m));
	hot[4] = 0.4f;
	ASSERT_EQ(1, moem_paging_migration(pg, 7, 0, res, hot, &m));
	EXPECT_FALSE(m.promote);
	EXPECT_EQ(2u, m.expert);
	hot[4] = 0.26f; /* within margin of the coldest resident: no churn */
	hot[2] = 0.25f;
	EXPECT_EQ(0, moem_paging_migration(pg, 8, 0, res, hot, &m));
	moem_paging_destroy(pg);
}

static enum moem_res keep_state(void *arg, uint32_t key)
{
	(void)arg;
	(void)key;
	return MOEM_RES_ABSENT;
}

static int keep_fetch(void *arg, uint32_t key, enum moem_prio prio, uint64_t tpos)
{
	(void)arg;
	(void)key;
	(void)prio;
	(void)tpos;
	return 0;
}

static bool keep_cancel(void *arg, uint32_t key)
{
	(void)arg;
	(void)key;
	return false;
}

/*
 * Hybrid execution's keep_ns: an expert its layer uses every step is worth
 * about one use, its next one, nearly sure to come while HBM keeps it
 * (here every tick inserts one version into 8 slots: a version stays 8
 * ticks, 4 runs of each of the 2 layers, each a use with the predictor's
 * q, 1 - exp(-expected tokens): about 0.5-0.63 for one token that always
 * picks it, so 1 - (1 - q)^4 = 0.94-0.98); one never used is worth
 * nothing; without a predictor nothing is known.
 */
TEST(keep_ns_weighs_uses_ahead)
{
	const struct moem_driver_ops ops = {
		.state = keep_state, .fetch = keep_fetch, .cancel = keep_cancel};
	struct moem_driver_cfg c = {0};
	struct moem_driver *d;
	int32_t ids[2];
	uint32_t keys[2];

	c.n_layers = 2;
	c.n_experts = 8;
	c.top_k = 2;
	c.evict.kind = MOEM_EVICT_LRU;
	c.predictor = true;
	moem_prefetch_default(&c.pf, 2, 8, 2);
	moem_cost_default(&c.cost);
	c.expert_bytes = 1 << 20;
	c.hbm_slots = 8;
	ASSERT_EQ(0, moem_driver_create(&c, &ops, NULL, &d)) TH_LOG("%s", moem_last_error());
	EXPECT_TRUE(moem_driver_wants_pregate(d));	/* the predictor reads it */
	EXPECT_EQ(0u, moem_driver_keep_ns(d, 0, 1000)); /* the layer not seen yet */
	for (uint64_t pos = 0; pos < 200; pos++) {
		uint32_t l = (uint32_t)(pos % 2);

		/* layer 0 always picks experts 0 and 1, layer 1 experts 2 and 3 */
		ids[0] = (int32_t)(2 * l);
		ids[1] = (int32_t)(2 * l + 1);
		keys[0] = l * 8 + (uint32_t)ids[0];
		keys[1] = l * 8 + (uint32_t)ids[1];
		ASSERT_EQ(0, moem_driver_routed(d, pos, 1, ids, keys, 2));
		moem_driver_inserted(d, 2 * keys[pos / 2 % 2]); /* one insertion a tick */
		moem_driver_removed(d, 2 * keys[pos / 2 % 2]);
	}
	TH_LOG("keep: used %llu, unused %llu (use 1000 ns)",
	       (unsigned long long)moem_driver_keep_ns(d, 0, 1000),
	       (unsigned long long)moem_driver_keep_ns(d, 5, 1000));
	EXPECT_GE(moem_driver_keep_ns(d, 0, 1000), 900u);
	EXPECT_LE(moem_driver_keep_ns(d, 0, 1000), 1000u);
	EXPECT_LE(moem_driver_keep_ns(d, 5, 1000), 100u);
	EXPECT_EQ(0u, moem_driver_keep_ns(d, 16, 1000)); /* no such key */
	moem_driver_destroy(d);
	/* no predictor: 0, and the engine need not run the pre-gate */
	c.predictor = false;
	ASSERT_EQ(0, moem_driver_create(&c, &ops, NULL, &d));
	EXPECT_FALSE(moem_driver_wants_pregate(d));
	ASSERT_EQ(0, moem_driver_routed(d, 0, 1, ids, keys, 2));
	EXPECT_EQ(0u, moem_driver_keep_ns(d, 0, 1000));
	moem_driver_destroy(d);
}

TEST_HARNESS_MAIN
