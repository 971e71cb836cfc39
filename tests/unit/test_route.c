// SPDX-License-Identifier: GPL-2.0-only
/*
 * Routing invariants of ALGORITHMS.md on random and adversarial batches:
 * top-k against a brute-force reference; LYNX keeps each token's top-1,
 * chooses exactly k and never activates more experts than vanilla; OEA's
 * S_base nesting, union and T equal to pruned top-k0; padding, B = 1,
 * identical tokens and ties; group-limited routing (DeepSeek-V2) against
 * a reference written from its modeling code.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/route.h>
#include <moem/rng.h>

#include "kselftest_harness.h"

#define MAXB 64
#define MAXN 128
#define MAXK 8

struct routed {
	int32_t ids[MAXB * MAXK];
	float w[MAXB * MAXK];
	uint32_t cnt[MAXB];
	struct moem_route_out out;
};

static void routed_init(struct routed *r)
{
	r->out.ids = r->ids;
	r->out.w = r->w;
	r->out.cnt = r->cnt;
}

static void gen(struct moem_rng *r, float *z, uint32_t B, uint32_t N, int kind)
{
	for (uint32_t t = 0; t < B; t++)
		for (uint32_t e = 0; e < N; e++) {
			float v;

			switch (kind) {
			case 0: /* gaussian */
				v = (float)moem_rng_normal(r) * 2;
				break;
			case 1: /* coarse: many exact ties */
				v = (float)moem_rng_below(r, 4);
				break;
			default: /* skewed: a few popular experts */
				v = (float)moem_rng_normal(r) + (e < 6 ? 3.0f : 0.0f);
				break;
			}
			z[(size_t)t * N + e] = v;
		}
}

static int contains(const int32_t *ids, uint32_t n, int32_t e)
{
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] == e)
			return 1;
	return 0;
}

TEST(topk_matches_bruteforce_and_weights)
{
	struct moem_route_cfg c = {64, 8, true, 1.0f};
	static float z[MAXB * MAXN];
	struct moem_rng r;
	struct routed o;

	routed_init(&o);
	moem_rng_seed(&r, 1, 0);
	for (int it = 0; it < 50; it++) {
		gen(&r, z, 16, 64, it % 3);
		ASSERT_EQ(0, moem_route_topk(&c, 16, z, NULL, &o.out));
		for (uint32_t t = 0; t < 16; t++) {
			const float *zr = z + t * 64;
			double sum = 0;

			ASSERT_EQ(8u, o.cnt[t]);
			for (int j = 0; j < 8; j++) {
				int32_t e = o.ids[t * 8 + j];
				/* exactly j experts rank strictly before e */
				uint32_t better = 0;

				for (uint32_t f = 0; f < 64; f++)
					better +=
						zr[f] > zr[e] || (zr[f] == zr[e] && (int32_t)f < e);
				ASSERT_EQ((uint32_t)j, better);
				sum += o.w[t * 8 + j];
				if (j) {
					ASSERT_GE(o.w[t * 8 + j - 1], o.w[t * 8 + j]);
				}
			}
			ASSERT_LT(fabs(sum - 1.0), 1e-5);
		}
	}
	/* Unnormalised (OLMoE) and scaled (DeepSeek-V2) weights. */
	c.norm_topk_prob = false;
	c.routed_scaling = 2.5f;
	for (uint32_t e = 0; e < 64; e++)
		z[e] = 0;
	ASSERT_EQ(0, moem_route_topk(&c, 1, z, NULL, &o.out));
	EXPECT_LT(fabs(o.w[0] - 2.5 / 64), 1e-7);
	/* All ties: lowest ids win. */
	for (int j = 0; j < 8; j++) {
		EXPECT_EQ(j, o.ids[j]);
	}
}

/*
 * The weight rules, on one token whose top-2 of 4 experts hold 0.4 + 0.2
 * of the softmax mass: DeepSeek-V2 normalises OR scales, DeepSeek-V3's
 * rule normalises AND scales.
 */
TEST(weight_rules)
{
	const float z[4] = {logf(0.4f), logf(0.2f), logf(0.3f) - 10, logf(0.1f)};
	struct moem_model_config m = {.arch = MOEM_ARCH_DEEPSEEK_V2, .n_experts = 4, .top_k = 2};
	struct moem_route_cfg c;
	int32_t ids[2];
	float w[2];
	uint32_t cnt;
	struct moem_route_out o = {ids, w, &cnt};
	double p0, p1, s;

	/* the softmax the rules start from */
	s = 0.4 + 0.2 + 0.3 * exp(-10) + 0.1;
	p0 = 0.4 / s;
	p1 = 0.2 / s;
	m.routed_scaling = 16.0f;
	/* DeepSeek-V2, norm_topk_prob: normalised, not scaled */
	m.norm_topk_prob = true;
	c = moem_route_cfg_of(&m);
	EXPECT_EQ(MOEM_WRULE_NORM_OR_SCALE, c.rule);
	ASSERT_EQ(0, moem_route_topk(&c, 1, z, NULL, &o));
	ASSERT_EQ(0, ids[0]);
	ASSERT_EQ(1, ids[1]);
	EXPECT_LT(fabs(w[0] - p0 / (p0 + p1)), 1e-6);
	EXPECT_LT(fabs(w[1] - p1 / (p0 + p1)), 1e-6);
	/* DeepSeek-V2 without norm_topk_prob: scaled, not normalised */
	m.norm_topk_prob = false;
	c = moem_route_cfg_of(&m);
	ASSERT_EQ(0, moem_route_topk(&c, 1, z, NULL, &o));
	EXPECT_LT(fabs(w[0] - 16 * p0), 1e-5);
	EXPECT_LT(fabs(w[1] - 16 * p1), 1e-5);
	/* DeepSeek-V2 with k = 1 never normalises: scaled */
	m.norm_topk_prob = true;
	m.top_k = 1;
	c = moem_route_cfg_of(&m);
	ASSERT_EQ(0, moem_route_topk(&c, 1, z, NULL, &o));
	EXPECT_LT(fabs(w[0] - 16 * p0), 1e-5);
	/* normalise then scale (DeepSeek-V3's rule) */
	c = (struct moem_route_cfg){4, 2, true, 16.0f, MOEM_WRULE_NORM_THEN_SCALE};
	ASSERT_EQ(0, moem_route_topk(&c, 1, z, NULL, &o));
	EXPECT_LT(fabs(w[0] - 16 * p0 / (p0 + p1)), 1e-5);
	EXPECT_LT(fabs(w[1] - 16 * p1 / (p0 + p1)), 1e-5);
	/* other architectures take the same weights under either rule */
	m.arch = MOEM_ARCH_QWEN3_MOE;
	m.top_k = 2;
	m.routed_scaling = 1.0f;
	c = moem_route_cfg_of(&m);
	EXPECT_EQ(MOEM_WRULE_NORM_THEN_SCALE, c.rule);
	ASSERT_EQ(0, moem_route_topk(&c, 1, z, NULL, &o));
	EXPECT_LT(fabs(w[0] - p0 / (p0 + p1)), 1e-6);
}

/* Row zr's largest logit m and the softmax's denominator, as route.c took them. */
static void softmax_ref(const float *zr, uint32_t n, double *m, double *sum)
{
	*m = -INFINITY;
	*sum = 0;
	for (uint32_t e = 0; e < n; e++)
		*m = fmax(*m, zr[e]);
	for (uint32_t e = 0; e < n; e++)
		*sum += exp(zr[e] - *m);
}

/*
 * Normalised weights skip the softmax's denominator (it cancels): the
 * floats are those of dividing by it and then by the chosen sum, on 3000
 * rows of 128 logits in the three kinds above, top-8 (a float can only
 * differ where a double lies within 2^-29 of a float rounding boundary;
 * none does with this seed). Without norm the denominator stays (the
 * scale-only rule checked against its formula).
 */
TEST(normalised_weights_without_the_denominator)
{
	enum { N = 128, K = 8, ROWS = 1000 };
	const struct moem_route_cfg norm = {N, K, true, 1.0f, MOEM_WRULE_NORM_THEN_SCALE};
	const struct moem_route_cfg scaled = {N, K, true, 2.5f, MOEM_WRULE_NORM_OR_SCALE};
	static float z[ROWS * N];
	struct moem_rng r;
	uint32_t bad = 0, bad_scaled = 0;

	moem_rng_seed(&r, 91, 0);
	for (int kind = 0; kind < 3; kind++) {
		gen(&r, z, ROWS, N, kind);
		for (uint32_t t = 0; t < ROWS; t++) {
			const float *zr = z + (size_t)t * N;
			int32_t ids[K];
			float w[K], ws[K];
			double m, sum, p[K], chosen = 0;

			for (uint32_t j = 0; j < K; j++)
				ids[j] = (int32_t)((t * 7 + j * 13) % N);
			moem_route_weights(&norm, zr, ids, K, w);
			moem_route_weights(&scaled, zr, ids, K, ws);
			softmax_ref(zr, N, &m, &sum);
			for (uint32_t j = 0; j < K; j++) {
				p[j] = exp(zr[ids[j]] - m) / sum;
				chosen += p[j];
			}
			for (uint32_t j = 0; j < K; j++) {
				bad += w[j] != (float)(p[j] / chosen);
				/* K > 1 under NORM_OR_SCALE with norm set: normalised, not scaled */
				bad_scaled += ws[j] != (float)(p[j] / chosen);
			}
		}
	}
	EXPECT_EQ(0u, bad);
	EXPECT_EQ(0u, bad_scaled);
	{
		const struct moem_route_cfg plain = {N, K, false, 2.5f, MOEM_WRULE_NORM_OR_SCALE};
		const float *zr = z;
		int32_t ids[K] = {0, 1, 2, 3, 4, 5, 6, 7};
		float w[K];
		double m, sum;

		moem_route_weights(&plain, zr, ids, K, w);
		softmax_ref(zr, N, &m, &sum);
		for (uint32_t j = 0; j < K; j++)
			EXPECT_EQ((float)(exp(zr[j] - m) / sum * 2.5f), w[j]);
	}
}

static void check_lynx(struct __test_metadata *_metadata, const struct moem_route_cfg *c,
		       uint32_t B, const float *z, const uint8_t *pad, uint32_t *t_l, uint32_t *t_v)
{
	struct moem_lynx_params p = {2.0f, 4};
	static struct routed v, l;

	routed_init(&v);
	routed_init(&l);
	ASSERT_EQ(0, moem_route_topk(c, B, z, pad, &v.out));
	ASSERT_EQ(0, moem_route_lynx(c, &p, B, z, pad, &l.out));
	for (uint32_t t = 0; t < B; t++) {
		if (pad && pad[t]) {
			ASSERT_EQ(0u, l.cnt[t]);
			continue;
		}
		ASSERT_EQ(c->top_k, l.cnt[t]);			     /* |S_i| = k */
		ASSERT_EQ(v.ids[t * c->top_k], l.ids[t * c->top_k]); /* own top-1 kept */
		for (uint32_t j = 1; j < c->top_k; j++) {
			ASSERT_FALSE(contains(l.ids + t * c->top_k, j, l.ids[t * c->top_k + j]));
		}
	}
	*t_l = moem_route_active(c, B, &l.out, NULL);
	*t_v = moem_route_active(c, B, &v.out, NULL);
}

TEST(lynx_invariants_random)
{
	struct moem_route_cfg c = {128, 8, true, 1.0f};
	static float z[MAXB * MAXN];
	uint64_t sum_l = 0, sum_v = 0, worse = 0;
	uint8_t pad[MAXB];
	struct moem_rng r;

	moem_rng_seed(&r, 2, 0);
	for (int it = 0; it < 300; it++) {
		uint32_t B = 1 + moem_rng_below(&r, MAXB), tl, tv;

		gen(&r, z, B, 128, it % 3);
		for (uint32_t t = 0; t < B; t++)
			pad[t] = moem_rng_below(&r, 8) == 0;
		check_lynx(_metadata, &c, B, z, it & 1 ? pad : NULL, &tl, &tv);
		sum_l += tl;
		sum_v += tv;
		worse += tl > tv;
	}
	TH_LOG("LYNX mean T %.1f vs vanilla %.1f; batches where LYNX activated more: %llu",
	       (double)sum_l / 300, (double)sum_v / 300, (unsigned long long)worse);
	EXPECT_LT(sum_l, sum_v);
	EXPECT_EQ(0u, worse);
}

TEST(lynx_degenerate_batches)
{
	struct moem_route_cfg c = {32, 4, true, 1.0f};
	static float z[MAXB * MAXN];
	static struct routed v, l;
	struct moem_lynx_params p = {2.0f, 4};
	struct moem_rng r;
	uint32_t tl, tv;

	routed_init(&v);
	routed_init(&l);
	moem_rng_seed(&r, 3, 0);
	/* B = 1: every S[e] is 1, so LYNX is vanilla routing. */
	gen(&r, z, 1, 32, 0);
	ASSERT_EQ(0, moem_route_topk(&c, 1, z, NULL, &v.out));
	ASSERT_EQ(0, moem_route_lynx(&c, &p, 1, z, NULL, &l.out));
	EXPECT_EQ(0, memcmp(v.ids, l.ids, 4 * sizeof(int32_t)));
	/* All tokens identical: T = k, the vanilla set. */
	for (uint32_t t = 1; t < 16; t++)
		memcpy(z + t * 32, z, 32 * sizeof(float));
	check_lynx(_metadata, &c, 16, z, NULL, &tl, &tv);
	EXPECT_EQ(4u, tl);
	EXPECT_EQ(4u, tv);
	/* All padding: nothing active. */
	{
		uint8_t pad[16];

		memset(pad, 1, sizeof(pad));
		check_lynx(_metadata, &c, 16, z, pad, &tl, &tv);
		EXPECT_EQ(0u, tl);
	}
	/* Ties everywhere: deterministic and still valid. */
	for (uint32_t i = 0; i < 16 * 32; i++)
		z[i] = 1.0f;
	check_lynx(_metadata, &c, 16, z, NULL, &tl, &tv);
	EXPECT_EQ(4u, tl);
	/* Bad parameters are refused. */
	p.alpha = 0;
	EXPECT_EQ(-EINVAL, moem_route_lynx(&c, &p, 16, z, NULL, &l.out));
}

/*
 * With beta / alpha (the logit range that still matters) held at the
 * default 2, lowering alpha and beta widens the bins and T falls. (At a
 * fixed beta, T is not monotone in alpha: a large alpha shrinks the range
 * and pushes most experts into the catch-all bin, where popularity alone
 * decides; Documentation/policies.md.)
 */
TEST(lynx_t_falls_with_alpha_beta)
{
	struct moem_route_cfg c = {128, 8, true, 1.0f};
	static float z[32 * MAXN];
	static struct routed l;
	const float alphas[] = {4.0f, 2.0f, 1.0f};
	uint64_t T[3] = {0};
	struct moem_rng r;

	routed_init(&l);
	moem_rng_seed(&r, 4, 0);
	for (int it = 0; it < 50; it++) {
		gen(&r, z, 32, 128, 0);
		for (int a = 0; a < 3; a++) {
			struct moem_lynx_params p = {alphas[a], (uint32_t)(2 * alphas[a])};

			ASSERT_EQ(0, moem_route_lynx(&c, &p, 32, z, NULL, &l.out));
			T[a] += moem_route_active(&c, 32, &l.out, NULL);
		}
	}
	TH_LOG("T at (alpha, beta) (4, 8) / (2, 4) / (1, 2): %.1f %.1f %.1f", T[0] / 50.0,
	       T[1] / 50.0, T[2] / 50.0);
	EXPECT_GT(T[0], T[1]);
	EXPECT_GT(T[1], T[2]);
}

TEST(oea_invariants)
{
	struct moem_route_cfg c = {128, 8, true, 1.0f};
	static float z[MAXB * MAXN];
	static struct routed o, base, van;
	uint8_t pad[MAXB], sbase[MAXN];
	struct moem_rng r;

	routed_init(&o);
	routed_init(&base);
	routed_init(&van);
	moem_rng_seed(&r, 5, 0);
	for (int it = 0; it < 300; it++) {
		uint32_t B = 1 + moem_rng_below(&r, MAXB);
		uint32_t k0 = 1 + moem_rng_below(&r, 8);
		struct moem_route_cfg c0 = c;
		uint8_t uni[MAXN] = {0};

		gen(&r, z, B, 128, it % 3);
		for (uint32_t t = 0; t < B; t++)
			pad[t] = moem_rng_below(&r, 8) == 0;
		c0.top_k = k0;
		ASSERT_EQ(0, moem_route_topk(&c0, B, z, pad, &base.out));
		ASSERT_EQ(0, moem_route_oea(&c, k0, B, z, pad, NULL, &o.out));
		moem_route_active(&c0, B, &base.out, sbase);
		for (uint32_t t = 0; t < B; t++) {
			const int32_t *si = o.ids + t * 8;

			ASSERT_LE(o.cnt[t], 8u);
			if (pad[t]) {
				ASSERT_EQ(0u, o.cnt[t]);
				continue;
			}
			/* S_i^base subset S_i subset S_base */
			for (uint32_t j = 0; j < base.cnt[t]; j++) {
				ASSERT_TRUE(contains(si, o.cnt[t], base.ids[t * k0 + j]));
			}
			for (uint32_t j = 0; j < o.cnt[t]; j++) {
				ASSERT_TRUE(sbase[si[j]]);
				uni[si[j]] = 1;
			}
		}
		/* union S_i = S_base, so T(oea) = T(top-k0) */
		ASSERT_EQ(0, memcmp(uni, sbase, 128));
		ASSERT_EQ(moem_route_active(&c0, B, &base.out, NULL),
			  moem_route_active(&c, B, &o.out, NULL));
	}
	/* k0 = k is vanilla routing. */
	gen(&r, z, 16, 128, 0);
	ASSERT_EQ(0, moem_route_topk(&c, 16, z, NULL, &van.out));
	ASSERT_EQ(0, moem_route_oea(&c, 8, 16, z, NULL, NULL, &o.out));
	EXPECT_EQ(0, memcmp(van.ids, o.ids, 16 * 8 * sizeof(int32_t)));
	EXPECT_EQ(-EINVAL, moem_route_oea(&c, 0, 16, z, NULL, NULL, &o.out));
	EXPECT_EQ(-EINVAL, moem_route_oea(&c, 9, 16, z, NULL, NULL, &o.out));
}

TEST(oea_t_falls_with_k0_and_padding_is_inert)
{
	struct moem_route_cfg c = {128, 8, true, 1.0f};
	static float z[40 * MAXN];
	static struct routed o, o2;
	uint64_t T[9] = {0};
	uint8_t pad[40] = {0};
	struct moem_rng r;

	routed_init(&o);
	routed_init(&o2);
	moem_rng_seed(&r, 6, 0);
	for (int it = 0; it < 30; it++) {
		gen(&r, z, 32, 128, 0);
		for (uint32_t k0 = 1; k0 <= 8; k0++) {
			ASSERT_EQ(0, moem_route_oea(&c, k0, 32, z, NULL, NULL, &o.out));
			T[k0] += moem_route_active(&c, 32, &o.out, NULL);
		}
	}
	for (uint32_t k0 = 2; k0 <= 8; k0++) {
		EXPECT_GT(T[k0], T[k0 - 1]);
	}
	/* Appending padding tokens changes nothing for the real ones. */
	gen(&r, z, 40, 128, 2);
	for (int t = 32; t < 40; t++)
		pad[t] = 1;
	ASSERT_EQ(0, moem_route_oea(&c, 4, 32, z, NULL, NULL, &o.out));
	ASSERT_EQ(0, moem_route_oea(&c, 4, 40, z, pad, NULL, &o2.out));
	EXPECT_EQ(0, memcmp(o.ids, o2.ids, 32 * 8 * sizeof(int32_t)));
	EXPECT_EQ(0, memcmp(o.w, o2.w, 32 * 8 * sizeof(float)));
}

TEST(piggyback_uses_resident_experts)
{
	struct moem_route_cfg c = {64, 8, true, 1.0f};
	static float z[16 * 64];
	static struct routed o, p;
	uint8_t resident[64] = {0}, act_o[64], act_p[64];
	struct moem_rng r;
	uint32_t used_extra = 0;

	routed_init(&o);
	routed_init(&p);
	moem_rng_seed(&r, 7, 0);
	gen(&r, z, 16, 64, 0);
	for (int e = 40; e < 64; e++)
		resident[e] = 1;
	ASSERT_EQ(0, moem_route_oea(&c, 4, 16, z, NULL, NULL, &o.out));
	ASSERT_EQ(0, moem_route_oea(&c, 4, 16, z, NULL, resident, &p.out));
	moem_route_active(&c, 16, &o.out, act_o);
	moem_route_active(&c, 16, &p.out, act_p);
	for (int e = 0; e < 64; e++) {
		/* nothing outside S_base u resident */
		if (act_p[e]) {
			ASSERT_TRUE(act_o[e] || resident[e]);
		}
		used_extra += act_p[e] && !act_o[e];
	}
	for (uint32_t t = 0; t < 16; t++) {
		ASSERT_EQ(8u, p.cnt[t]); /* the wider base fills every slot */
	}
	EXPECT_GT(used_extra, 0u);
}

/*
 * Group-limited routing (DeepSeek-V2's "group_limited_greedy"), written
 * from its modeling code: a group's score is its best probability (so its
 * best logit), the topk_group best groups (ties to the lower group) are
 * kept, and the token's top-k is taken over the kept groups' experts.
 */
static uint64_t ref_groups(const float *zr, uint32_t N, uint32_t G, uint32_t TG)
{
	const uint32_t gs = N / G;
	float best[64];
	uint64_t m = 0;

	for (uint32_t g = 0; g < G; g++) {
		best[g] = -INFINITY;
		for (uint32_t e = g * gs; e < (g + 1) * gs; e++)
			best[g] = isnan(zr[e]) || zr[e] < best[g] ? best[g] : zr[e];
	}
	for (uint32_t g = 0; g < G; g++) {
		uint32_t above = 0;

		for (uint32_t h = 0; h < G; h++)
			above += best[h] > best[g] || (best[h] == best[g] && h < g);
		if (above < TG)
			m |= 1ULL << g;
	}
	return m;
}

TEST(group_limited_topk_matches_reference)
{
	/* {N, k, n_group, topk_group}: DeepSeek-V2's 160 / 6 / 8 / 3 among them */
	static const uint32_t cfgs[][4] = {
		{160, 6, 8, 3}, {64, 8, 64, 8}, {16, 3, 4, 1}, {128, 8, 8, 4}, {64, 6, 2, 1},
	};
	static float z[MAXB * 160];
	struct moem_rng r;
	int32_t ids[MAXB * MAXK];
	float w[MAXB * MAXK];
	uint32_t cnt[MAXB];
	struct moem_route_out o = {ids, w, cnt};
	int outside_topk = 0;

	moem_rng_seed(&r, 11, 0);
	for (uint32_t ci = 0; ci < sizeof(cfgs) / sizeof(cfgs[0]); ci++) {
		const uint32_t N = cfgs[ci][0], k = cfgs[ci][1], G = cfgs[ci][2], gs = N / G;
		struct moem_route_cfg c = {N, k,	  false, 16.0f, MOEM_WRULE_NORM_OR_SCALE,
					   G, cfgs[ci][3]};
		struct moem_route_cfg flat = c;

		flat.n_group = flat.topk_group = 0;
		ASSERT_EQ(0, moem_route_groups_check(&c)) TH_LOG("%s", moem_last_error());
		for (int it = 0; it < 30; it++) {
			gen(&r, z, 32, N, it % 3);
			if (it % 5 == 4)
				z[3] = NAN; /* ranks below everything */
			ASSERT_EQ(0, moem_route_topk(&c, 32, z, NULL, &o));
			for (uint32_t t = 0; t < 32; t++) {
				const float *zr = z + (size_t)t * N;
				const uint64_t gm = ref_groups(zr, N, G, cfgs[ci][3]);
				float wf[MAXK];
				int32_t idf[MAXK];

				ASSERT_EQ(gm, moem_route_groups(&c, zr));
				ASSERT_EQ(k, cnt[t]);
				for (uint32_t j = 0; j < k; j++) {
					const int32_t e = ids[t * k + j];
					uint32_t better = 0;

					ASSERT_TRUE(gm >> (e / gs) & 1);
					/* exactly j allowed experts rank strictly before e */
					for (uint32_t f = 0; f < N; f++) {
						const float a = isnan(zr[f]) ? -INFINITY : zr[f];
						const float b = isnan(zr[e]) ? -INFINITY : zr[e];

						better += (gm >> (f / gs) & 1) &&
							  (a > b || (a == b && (int32_t)f < e));
					}
					ASSERT_EQ(j, better);
				}
				/* the weights: the model's rule on the chosen set */
				moem_route_weights(&c, zr, ids + t * k, k, wf);
				ASSERT_EQ(0, memcmp(wf, w + t * k, k * sizeof(float)));
				/* plain top-k of the same row goes outside the groups at times */
				{
					int32_t fi[MAXK];
					float fw[MAXK];
					uint32_t fc;
					struct moem_route_out fo = {fi, fw, &fc};

					ASSERT_EQ(0, moem_route_topk(&flat, 1, zr, NULL, &fo));
					memcpy(idf, fi, sizeof(fi));
					for (uint32_t j = 0; j < k; j++)
						outside_topk += !(gm >> (idf[j] / gs) & 1);
				}
			}
		}
	}
	EXPECT_GT(outside_topk, 0); /* the limit changed some choices */
}

/* Every router keeps each token within its own groups. */
TEST(group_limited_lynx_and_oea_stay_in_groups)
{
	const uint32_t N = 64, k = 6, G = 8, gs = N / G;
	const struct moem_route_cfg c = {N, k, false, 16.0f, MOEM_WRULE_NORM_OR_SCALE, G, 3};
	const struct moem_lynx_params lp = {2.0f, 4};
	static float z[MAXB * 64];
	uint8_t resident[64];
	struct moem_rng r;
	struct routed o;

	routed_init(&o);
	moem_rng_seed(&r, 12, 0);
	for (int it = 0; it < 60; it++) {
		const uint32_t B = 1 + (uint32_t)moem_rng_below(&r, MAXB);

		gen(&r, z, B, N, it % 3);
		for (uint32_t e = 0; e < N; e++)
			resident[e] = moem_rng_below(&r, 3) == 0;
		for (int mode = 0; mode < 3; mode++) {
			int ret = mode == 0 ? moem_route_lynx(&c, &lp, B, z, NULL, &o.out)
					    : moem_route_oea(&c, 3, B, z, NULL,
							     mode == 2 ? resident : NULL, &o.out);

			ASSERT_EQ(0, ret);
			for (uint32_t t = 0; t < B; t++) {
				const uint64_t gm = ref_groups(z + (size_t)t * N, N, G, 3);

				ASSERT_GE(o.cnt[t], mode == 0 ? k : 3u);
				for (uint32_t j = 0; j < o.cnt[t]; j++) {
					ASSERT_TRUE(gm >> (o.ids[t * k + j] / gs) & 1)
					TH_LOG("mode %d token %u slot %u: expert %d", mode, t, j,
					       o.ids[t * k + j]);
				}
			}
		}
	}
}

TEST(group_configs_refused)
{
	static const uint32_t bad[][4] = {
		/* N, k, n_group, topk_group */
		{160, 6, 7, 3},	  /* 7 does not divide 160 */
		{160, 6, 8, 0},	  /* no group */
		{160, 6, 8, 9},	  /* more groups than there are */
		{16, 6, 8, 2},	  /* 2 groups of 2 hold fewer than 6 */
		{256, 6, 128, 8}, /* more than 64 groups */
		{64, 4, 0, 2},
	};
	static const char *const msg[] = {"must divide",      "topk_group 0", "topk_group 9",
					  "fewer than top_k", "must divide",  "must divide"};
	float z[256] = {0};
	int32_t ids[8];
	float w[8];
	uint32_t cnt;
	struct moem_route_out o = {ids, w, &cnt};

	for (uint32_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const struct moem_route_cfg c = {bad[i][0], bad[i][1], true,	 1.0f,
						 0,	    bad[i][2], bad[i][3]};

		EXPECT_EQ(-EINVAL, moem_route_groups_check(&c));
		EXPECT_NE(NULL, strstr(moem_last_error(), msg[i])) TH_LOG("%s", moem_last_error());
		EXPECT_EQ(-EINVAL, moem_route_topk(&c, 1, z, NULL, &o));
	}
}

TEST_HARNESS_MAIN
