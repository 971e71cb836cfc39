// SPDX-License-Identifier: GPL-2.0-only
/*
 * CPU backend ops against double-precision references: rmsnorm, router
 * GEMM, route (all modes, = route.c), grouped FFN in every precision
 * (= moem_ffn_ref), the quantized-FFN error order, combine (bitwise, by
 * its documented order), quantize (= moem_quantize, status word) and the
 * hit histogram.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/backend.h>
#include <moem/error.h>
#include <moem/route.h>

#include "kselftest_harness.h"
#include "test_backend_util.h"

FIXTURE(cpu)
{
	struct moem_backend *be;
};

FIXTURE_SETUP(cpu)
{
	/* the scalar kernels: these tests hold them to the double-precision oracle */
	struct moem_backend_opts o = {.threads = 3, .isa = MOEM_CPU_ISA_SCALAR};

	ASSERT_EQ(0, moem_backend_open("cpu", &o, &self->be));
}

FIXTURE_TEARDOWN(cpu)
{
	moem_backend_close(self->be);
}

TEST_F(cpu, rmsnorm_matches_double_reference)
{
	const uint32_t B = 5, H = 320;
	float *x = tb_rand_f32(1, (size_t)B * H, 3.0);
	uint16_t *w = tb_rand_bf16(2, H, 1.0), y[5 * 320];
	struct moem_rmsnorm_args a = {.B = B, .H = H, .eps = 1e-6f};
	int off_by_one = 0;

	a.x = tb_put(self->be, x, sizeof(float) * B * H);
	a.weight = tb_put(self->be, w, 2 * H);
	a.y = tb_zeros(self->be, 2 * B * H);
	ASSERT_EQ(0, moem_op_rmsnorm(self->be, NULL, &a));
	ASSERT_EQ(0, tb_get(self->be, y, a.y, sizeof(y)));
	for (uint32_t t = 0; t < B; t++) {
		double ss = 0, r;

		for (uint32_t i = 0; i < H; i++)
			ss += (double)x[t * H + i] * x[t * H + i];
		r = 1.0 / sqrt(ss / H + 1e-6);
		for (uint32_t i = 0; i < H; i++) {
			double ref = x[t * H + i] * r * moem_bf16_to_f32(w[i]);
			uint16_t rb = moem_f32_to_bf16((float)ref);
			int u = tb_bf16_ulps(y[t * H + i], rb);

			/* one float rounding of r and of the product: at most one bf16 ulp */
			ASSERT_LE(u, 1)
			TH_LOG("t %u i %u: %g vs %g", t, i, moem_bf16_to_f32(y[t * H + i]), ref);
			off_by_one += u;
		}
	}
	EXPECT_LT(off_by_one, (int)(B * H / 20));
	free(x);
	free(w);
	moem_be_free(self->be, a.x);
	moem_be_free(self->be, a.weight);
	moem_be_free(self->be, a.y);
}

/*
 * The router's logits are dot_f32()'s, bit for bit: lane j of two 8-wide
 * fp32 accumulators takes elements 16 i + j and 16 i + 8 + j, the two are
 * added and reduced pairwise. The engine's routing (top-k ties, LYNX
 * bins) is only as reproducible as these bits.
 */
static float dot_f32_order(const uint16_t *w, const uint16_t *x, uint32_t n)
{
	float a0[8] = {0}, a1[8] = {0}, v[8];

	for (uint32_t i = 0; i + 16 <= n; i += 16)
		for (int j = 0; j < 8; j++) {
			float p0 = moem_bf16_to_f32(w[i + j]) * moem_bf16_to_f32(x[i + j]);
			float p1 = moem_bf16_to_f32(w[i + 8 + j]) * moem_bf16_to_f32(x[i + 8 + j]);

			a0[j] += p0;
			a1[j] += p1;
		}
	for (int j = 0; j < 8; j++)
		v[j] = a0[j] + a1[j];
	return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

/* A backend on ISA isa with 3 threads: 0, 1 when the CPU lacks it, or -errno. */
static int open_isa(int isa, struct moem_backend **be)
{
	struct moem_backend_opts o = {.threads = 3, .isa = (enum moem_cpu_isa)isa};

	if (moem_cpu_isa_check(o.isa))
		return 1;
	return moem_backend_open("cpu", &o, be);
}

/*
 * Every ISA's router form (router.c: 8 wide with intrinsics on AVX2, 16
 * wide on AVX-512, plain vector code on scalar) against dot_f32()'s order.
 */
TEST_F(cpu, router_logits_are_dot_f32_bit_for_bit)
{
	static const uint32_t shapes[][3] = {{1, 2048, 128}, {1, 64, 5},    {3, 96, 13},
					     {5, 32, 1},     {2, 4096, 60}, {9, 160, 67}};
	int paths = 0;

	for (int isa = MOEM_CPU_ISA_SCALAR; isa < MOEM_CPU_ISA_NR; isa++) {
		struct moem_backend *be;
		int r = open_isa(isa, &be);

		if (r > 0)
			continue;
		ASSERT_EQ(0, r) TH_LOG("%s", moem_last_error());
		paths++;
		for (unsigned int c = 0; c < sizeof(shapes) / sizeof(shapes[0]); c++) {
			const uint32_t B = shapes[c][0], H = shapes[c][1], N = shapes[c][2];
			uint16_t *x = tb_rand_bf16(30 + c, (size_t)B * H, 1.0),
				 *g = tb_rand_bf16(40 + c, (size_t)N * H, 0.05);
			float *z = malloc(sizeof(float) * B * N);
			struct moem_router_args a = {.B = B, .H = H, .N = N};

			ASSERT_NE(NULL, z);
			a.x = tb_put(be, x, 2ull * B * H);
			a.gate = tb_put(be, g, 2ull * N * H);
			a.logits = tb_zeros(be, sizeof(float) * B * N);
			ASSERT_EQ(0, moem_op_router(be, NULL, &a));
			ASSERT_EQ(0, tb_get(be, z, a.logits, sizeof(float) * B * N));
			for (uint32_t t = 0; t < B; t++)
				for (uint32_t e = 0; e < N; e++) {
					float ref = dot_f32_order(g + (size_t)e * H,
								  x + (size_t)t * H, H);

					ASSERT_EQ(0, memcmp(&ref, &z[t * N + e], 4))
					TH_LOG("%s: B %u H %u N %u: t %u e %u: %a vs %a",
					       moem_cpu_isa_name((enum moem_cpu_isa)isa), B, H, N,
					       t, e, z[t * N + e], ref);
				}
			free(x);
			free(g);
			free(z);
			moem_be_free(be, a.x);
			moem_be_free(be, a.gate);
			moem_be_free(be, a.logits);
		}
		moem_backend_close(be);
	}
	EXPECT_LE(1, paths);
}

TEST_F(cpu, router_matches_double_reference)
{
	const uint32_t B = 7, H = 512, N = 24;
	uint16_t *x = tb_rand_bf16(3, (size_t)B * H, 1.0),
		 *g = tb_rand_bf16(4, (size_t)N * H, 0.05);
	float z[7 * 24];
	struct moem_router_args a = {.B = B, .H = H, .N = N};

	a.x = tb_put(self->be, x, 2 * B * H);
	a.gate = tb_put(self->be, g, 2 * N * H);
	a.logits = tb_zeros(self->be, sizeof(z));
	ASSERT_EQ(0, moem_op_router(self->be, NULL, &a));
	ASSERT_EQ(0, tb_get(self->be, z, a.logits, sizeof(z)));
	for (uint32_t t = 0; t < B; t++)
		for (uint32_t e = 0; e < N; e++) {
			double ref = 0, mag = 0;

			for (uint32_t i = 0; i < H; i++) {
				double p = (double)moem_bf16_to_f32(x[t * H + i]) *
					   moem_bf16_to_f32(g[e * H + i]);

				ref += p;
				mag += fabs(p);
			}
			/* fp32 accumulation over H terms */
			ASSERT_LE(fabs(z[t * N + e] - ref), 1e-5 * mag + 1e-30)
			TH_LOG("t %u e %u: %g vs %g", t, e, z[t * N + e], ref);
		}
	free(x);
	free(g);
	moem_be_free(self->be, a.x);
	moem_be_free(self->be, a.gate);
	moem_be_free(self->be, a.logits);
}

/* Position of e in token t's ranking by logit (0 = its top-1; ties: lower id). */
static uint32_t rank_of(const float *zr, uint32_t N, uint32_t e)
{
	uint32_t r = 0;

	for (uint32_t f = 0; f < N; f++)
		r += zr[f] > zr[e] || (zr[f] == zr[e] && f < e);
	return r;
}

/*
 * LYNX: T(lynx) <= T(top-k). OEA (k0 = ceil(k/2)): each token keeps its
 * own top-k0, chooses only from S_base = union of the top-k0 (plus the
 * resident set for piggyback), and the union of the choices is S_base.
 * Top-k: weights against a double softmax renormalised over the choice.
 */
static void check_invariants(struct __test_metadata *_metadata, enum moem_route_mode mode,
			     uint32_t B, uint32_t N, uint32_t k, const float *z, const uint8_t *pad,
			     const uint8_t *res, const int32_t *ids, const float *w,
			     const uint32_t *cnt)
{
	const uint32_t k0 = moem_oea_default_k0(k);
	uint8_t base[1024] = {0}, used[1024] = {0}, vanilla[1024] = {0};
	uint32_t t_route = 0, t_vanilla = 0;

	for (uint32_t t = 0; t < B; t++) {
		if (pad && pad[t])
			continue;
		for (uint32_t e = 0; e < N; e++) {
			uint32_t r = rank_of(z + (size_t)t * N, N, e);

			vanilla[e] |= r < k;
			base[e] |= r < k0;
		}
	}
	for (uint32_t e = 0; mode == MOEM_ROUTE_PIGGYBACK && e < N; e++)
		base[e] |= res[e] != 0;
	for (uint32_t t = 0; t < B; t++)
		for (uint32_t j = 0; j < cnt[t]; j++)
			used[ids[t * k + j]] = 1;
	for (uint32_t e = 0; e < N; e++) {
		t_route += used[e];
		t_vanilla += vanilla[e];
	}
	if (mode == MOEM_ROUTE_LYNX) {
		ASSERT_LE(t_route, t_vanilla);
	}
	if (mode == MOEM_ROUTE_OEA || mode == MOEM_ROUTE_PIGGYBACK) {
		for (uint32_t t = 0; t < B; t++) {
			if (pad && pad[t])
				continue;
			for (uint32_t e = 0; e < N; e++) {
				int chosen = 0;

				for (uint32_t j = 0; j < cnt[t]; j++)
					chosen |= ids[t * k + j] == (int32_t)e;
				if (rank_of(z + (size_t)t * N, N, e) < k0) {
					ASSERT_TRUE(chosen)
					TH_LOG("token %u lost its top-k0 %u", t, e);
				}
				if (chosen) {
					ASSERT_TRUE(base[e])
					TH_LOG("token %u chose %u outside S_base", t, e);
				}
			}
		}
		if (mode == MOEM_ROUTE_OEA) {
			for (uint32_t e = 0; e < N; e++) {
				ASSERT_EQ(base[e], used[e])
				TH_LOG("union of choices != S_base at %u", e);
			}
		}
	}
	if (mode == MOEM_ROUTE_TOPK) {
		for (uint32_t t = 0; t < B; t++) {
			const float *zr = z + (size_t)t * N;
			double m = -INFINITY, sum = 0, chosen = 0;

			if (pad && pad[t])
				continue;
			for (uint32_t e = 0; e < N; e++)
				m = fmax(m, zr[e]);
			for (uint32_t e = 0; e < N; e++)
				sum += exp(zr[e] - m);
			for (uint32_t j = 0; j < cnt[t]; j++)
				chosen += exp(zr[ids[t * k + j]] - m) / sum;
			for (uint32_t j = 0; j < cnt[t]; j++) {
				double ref = exp(zr[ids[t * k + j]] - m) / sum / chosen;

				ASSERT_LT(fabs(w[t * k + j] - ref), 1e-6 * ref + 1e-12);
				ASSERT_EQ(j, rank_of(zr, N, ids[t * k + j]));
			}
		}
	}
}

/* One route call through the backend and the same through route.c. */
static void check_route(struct __test_metadata *_metadata, struct moem_backend *be,
			enum moem_route_mode mode, uint32_t B, uint32_t N, uint32_t k,
			const float *z, const uint8_t *pad, const uint8_t *res)
{
	struct moem_route_cfg cfg = {N, k, true, 1.0f};
	struct moem_lynx_params lp = {2.0f, 4};
	struct moem_route_args a = {.mode = mode, .cfg = cfg, .B = B};
	int32_t *ids = malloc(4 * B * k), *rids = malloc(4 * B * k);
	float *w = malloc(4 * B * k), *rw = malloc(4 * B * k);
	uint32_t *cnt = malloc(4 * B), *rcnt = malloc(4 * B);
	struct moem_route_out ro = {rids, rw, rcnt};

	a.logits = tb_put(be, z, 4 * B * N);
	a.pad = pad ? tb_put(be, pad, B) : 0;
	a.resident = res ? tb_put(be, res, N) : 0;
	a.ids = tb_zeros(be, 4 * B * k);
	a.w = tb_zeros(be, 4 * B * k);
	a.cnt = tb_zeros(be, 4 * B);
	ASSERT_EQ(0, moem_op_route(be, NULL, &a)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, tb_get(be, ids, a.ids, 4 * B * k));
	ASSERT_EQ(0, tb_get(be, w, a.w, 4 * B * k));
	ASSERT_EQ(0, tb_get(be, cnt, a.cnt, 4 * B));
	switch (mode) {
	case MOEM_ROUTE_TOPK:
		ASSERT_EQ(0, moem_route_topk(&cfg, B, z, pad, &ro));
		break;
	case MOEM_ROUTE_LYNX:
		ASSERT_EQ(0, moem_route_lynx(&cfg, &lp, B, z, pad, &ro));
		break;
	default:
		ASSERT_EQ(0, moem_route_oea(&cfg, moem_oea_default_k0(k), B, z, pad,
					    mode == MOEM_ROUTE_PIGGYBACK ? res : NULL, &ro));
		break;
	}
	EXPECT_EQ(0, memcmp(ids, rids, 4 * B * k));
	EXPECT_EQ(0, memcmp(w, rw, 4 * B * k));
	EXPECT_EQ(0, memcmp(cnt, rcnt, 4 * B));
	/* Invariants seen through the op (ALGORITHMS.md sec. 1, 2). */
	check_invariants(_metadata, mode, B, N, k, z, pad, res, ids, w, cnt);
	for (uint32_t t = 0; t < B; t++) {
		if (pad && pad[t]) {
			EXPECT_EQ(0u, cnt[t]);
			continue;
		}
		if (mode == MOEM_ROUTE_LYNX) {
			uint32_t best = 0;

			for (uint32_t e = 1; e < N; e++)
				if (z[t * N + e] > z[t * N + best])
					best = e;
			EXPECT_EQ((int32_t)best, ids[t * k]);
			EXPECT_EQ(k, cnt[t]);
		}
		EXPECT_LE(cnt[t], k);
	}
	free(ids);
	free(rids);
	free(w);
	free(rw);
	free(cnt);
	free(rcnt);
	moem_be_free(be, a.logits);
	moem_be_free(be, a.pad);
	moem_be_free(be, a.resident);
	moem_be_free(be, a.ids);
	moem_be_free(be, a.w);
	moem_be_free(be, a.cnt);
}

TEST_F(cpu, route_all_modes_equal_route_c)
{
	const uint32_t N = 64, k = 8;
	static float z[32 * 64];
	uint8_t pad[32] = {0}, res[64] = {0};
	struct moem_rng r;

	moem_rng_seed(&r, 5, 0);
	for (int it = 0; it < 12; it++) {
		uint32_t B = it % 4 == 0 ? 1 : 1 + moem_rng_below(&r, 32);

		for (uint32_t i = 0; i < B * N; i++)
			z[i] = it % 3 == 1 ? (float)moem_rng_below(&r, 3) /* many ties */
					   : (float)moem_rng_normal(&r) * 2;
		if (it % 5 == 4) /* all tokens identical */
			for (uint32_t t = 1; t < B; t++)
				memcpy(z + t * N, z, 4 * N);
		for (uint32_t t = 0; t < B; t++)
			pad[t] = it % 2 && moem_rng_below(&r, 4) == 0;
		for (uint32_t e = 0; e < N; e++)
			res[e] = moem_rng_below(&r, 5) == 0;
		for (int m = 0; m < MOEM_ROUTE_NR; m++)
			check_route(_metadata, self->be, (enum moem_route_mode)m, B, N, k, z,
				    it % 2 ? pad : NULL, res);
	}
}

/*
 * Run one grouped FFN over experts ex[0..ne) where expert j takes tokens
 * tok[j][0..n[j]) into slot slot_of(j), and compare each row with
 * moem_ffn_ref of the same blob.
 */
static void check_ffn(struct __test_metadata *_metadata, struct moem_backend *be, uint32_t B,
		      uint32_t H, uint32_t I, struct tb_expert *ex, uint32_t ne, double tol)
{
	uint16_t *x = tb_rand_bf16(77, (size_t)B * H, 1.0);
	struct moem_ffn_expert fe[8];
	struct moem_ffn_assign as[8 * 64];
	struct moem_ffn_args a = {.B = B, .H = H, .I = I, .n_slots = ne};
	float *out = calloc((size_t)B * ne * H, 4), *xf = malloc(4 * (size_t)H);
	double *ref = malloc(8 * (size_t)H);
	uint32_t na = 0;

	for (uint32_t j = 0; j < ne; j++) {
		fe[j].blob = tb_put(be, ex[j].blob, ex[j].l.bytes);
		fe[j].prec = ex[j].l.prec;
		fe[j].first = na;
		fe[j].n = 0;
		for (uint32_t t = j % 2; t < B; t += 1 + j % 3) {
			as[na].token = (uint16_t)t;
			as[na++].slot = (uint16_t)j;
			fe[j].n++;
		}
	}
	a.x = tb_put(be, x, 2 * (size_t)B * H);
	a.out = tb_zeros(be, 4 * (size_t)B * ne * H);
	a.n_experts = ne;
	a.experts = fe;
	a.n_assign = na;
	a.assign = as;
	ASSERT_EQ(0, moem_op_ffn(be, NULL, &a)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, tb_get(be, out, a.out, 4 * (size_t)B * ne * H));
	for (uint32_t j = 0; j < ne; j++)
		for (uint32_t i = 0; i < fe[j].n; i++) {
			uint32_t t = as[fe[j].first + i].token;
			double err;

			for (uint32_t h = 0; h < H; h++)
				xf[h] = moem_bf16_to_f32(x[t * H + h]);
			ASSERT_EQ(0, moem_ffn_ref(&ex[j].l, ex[j].blob, xf, ref));
			err = tb_rel_err(out + ((size_t)t * ne + j) * H, ref, H);
			ASSERT_LE(err, tol)
			TH_LOG("expert %u (%s) token %u: rel err %g", j,
			       moem_prec_name(ex[j].l.prec), t, err);
		}
	for (uint32_t j = 0; j < ne; j++)
		moem_be_free(be, fe[j].blob);
	moem_be_free(be, a.x);
	moem_be_free(be, a.out);
	free(x);
	free(out);
	free(xf);
	free(ref);
}

TEST_F(cpu, ffn_every_precision_matches_reference)
{
	struct tb_expert ex[4];

	for (int p = 0; p < MOEM_PREC_NR; p++)
		ASSERT_EQ(0, tb_expert_make(&ex[p], (enum moem_prec)p, 256, 128, 10 + p));
	/* Same dequantized weights as the oracle: only fp32 summation error. */
	check_ffn(_metadata, self->be, 9, 256, 128, ex, 4, 2e-6);
	for (int p = 0; p < MOEM_PREC_NR; p++)
		tb_expert_free(&ex[p]);
}

TEST_F(cpu, ffn_qwen3_shape)
{
	struct tb_expert ex[2];

	ASSERT_EQ(0, tb_expert_make(&ex[0], MOEM_PREC_BF16, 2048, 768, 20));
	ASSERT_EQ(0, tb_expert_make(&ex[1], MOEM_PREC_Q4, 2048, 768, 21));
	check_ffn(_metadata, self->be, 3, 2048, 768, ex, 2, 5e-6);
	tb_expert_free(&ex[0]);
	tb_expert_free(&ex[1]);
}

/* Error of a quantized expert's FFN against its bf16 original. */
TEST_F(cpu, quantized_ffn_error_order)
{
	const uint32_t H = 512, I = 256, B = 4;
	struct tb_expert bf;
	struct moem_expert_layout ql;
	moem_dptr src, dst[MOEM_PREC_NR], st, x, out;
	uint16_t *xs = tb_rand_bf16(31, (size_t)B * H, 1.0);
	float *y = malloc(4 * (size_t)B * H), xf[512];
	double *ref = malloc(8 * (size_t)B * H), err[MOEM_PREC_NR];
	struct moem_ffn_assign as[4] = {{0, 0}, {1, 0}, {2, 0}, {3, 0}};
	uint64_t status;

	ASSERT_EQ(0, tb_expert_make(&bf, MOEM_PREC_BF16, H, I, 30));
	for (uint32_t t = 0; t < B; t++) {
		for (uint32_t h = 0; h < H; h++)
			xf[h] = moem_bf16_to_f32(xs[t * H + h]);
		ASSERT_EQ(0, moem_ffn_ref(&bf.l, bf.blob, xf, ref + (size_t)t * H));
	}
	src = tb_put(self->be, bf.blob, bf.l.bytes);
	st = tb_zeros(self->be, 8);
	x = tb_put(self->be, xs, 2 * (size_t)B * H);
	out = tb_zeros(self->be, 4 * (size_t)B * H);
	for (int p = 0; p < MOEM_PREC_NR; p++) {
		struct moem_ffn_expert fe = {0, (enum moem_prec)p, 0, B};
		struct moem_ffn_args a = {B, H, I, 1, x, out, 1, &fe, B, as};

		ASSERT_EQ(0, moem_expert_layout((enum moem_prec)p, H, I, &ql));
		ASSERT_EQ(0, moem_be_alloc(self->be, ql.bytes, &dst[p]));
		ASSERT_EQ(0, moem_op_quantize_expert(self->be, NULL, (enum moem_prec)p, H, I, src,
						     dst[p], ql.bytes, st));
		ASSERT_EQ(0, tb_get(self->be, &status, st, 8));
		ASSERT_EQ(MOEM_QSTATUS_OK, status);
		fe.blob = dst[p];
		ASSERT_EQ(0, moem_op_ffn(self->be, NULL, &a));
		ASSERT_EQ(0, tb_get(self->be, y, out, 4 * (size_t)B * H));
		err[p] = tb_rel_err(y, ref, (size_t)B * H);
		moem_be_free(self->be, dst[p]);
	}
	TH_LOG("relative FFN error vs bf16: bf16 %.2e q8 %.2e q4 %.2e q2 %.2e", err[0], err[1],
	       err[2], err[3]);
	EXPECT_LT(err[MOEM_PREC_BF16], 1e-5);
	EXPECT_LT(err[MOEM_PREC_BF16], err[MOEM_PREC_Q8]);
	EXPECT_LT(err[MOEM_PREC_Q8], err[MOEM_PREC_Q4]);
	EXPECT_LT(err[MOEM_PREC_Q4], err[MOEM_PREC_Q2]);
	EXPECT_LT(err[MOEM_PREC_Q2], 1.0);
	tb_expert_free(&bf);
	free(xs);
	free(y);
	free(ref);
	moem_be_free(self->be, src);
	moem_be_free(self->be, st);
	moem_be_free(self->be, x);
	moem_be_free(self->be, out);
}

TEST_F(cpu, combine_is_the_documented_sum)
{
	const uint32_t B = 6, H = 100, k = 4, S = 2;
	float *h = tb_rand_f32(40, B * H, 1.0), *r = tb_rand_f32(41, B * k * H, 1.0);
	float *sh = tb_rand_f32(42, B * S * H, 1.0), *w = tb_rand_f32(43, B * k, 0.3);
	float got[6 * 100];
	uint32_t cnt[6] = {4, 3, 0, 1, 4, 9 /* clamped to k */};
	struct moem_combine_args a = {.B = B, .H = H, .k = k, .n_shared = S};

	a.h = tb_put(self->be, h, 4 * B * H);
	a.routed = tb_put(self->be, r, 4 * B * k * H);
	a.w = tb_put(self->be, w, 4 * B * k);
	a.cnt = tb_put(self->be, cnt, 4 * B);
	a.shared = tb_put(self->be, sh, 4 * B * S * H);
	ASSERT_EQ(0, moem_op_combine(self->be, NULL, &a));
	ASSERT_EQ(0, tb_get(self->be, got, a.h, sizeof(got)));
	for (uint32_t t = 0; t < B; t++)
		for (uint32_t i = 0; i < H; i++) {
			volatile float acc = 0.0f, p; /* volatile: one rounding per step */
			double d = 0;

			for (uint32_t j = 0; j < moem_min(cnt[t], k); j++) {
				p = w[t * k + j] * r[(t * k + j) * H + i];
				acc = acc + p;
				d += (double)w[t * k + j] * r[(t * k + j) * H + i];
			}
			for (uint32_t s = 0; s < S; s++) {
				acc = acc + sh[(t * S + s) * H + i];
				d += sh[(t * S + s) * H + i];
			}
			p = h[t * H + i] + acc;
			ASSERT_EQ(0, memcmp((const void *)&p, &got[t * H + i], 4))
			TH_LOG("t %u i %u: %.9g vs %.9g", t, i, (double)p, got[t * H + i]);
			ASSERT_LT(fabs(got[t * H + i] - (h[t * H + i] + d)), 1e-5);
		}
	/* k = 0: a dense layer's single MLP output. */
	a.k = 0;
	a.routed = a.w = a.cnt = 0;
	a.n_shared = 1;
	ASSERT_EQ(0, moem_op_combine(self->be, NULL, &a));
	free(h);
	free(r);
	free(sh);
	free(w);
	moem_be_free(self->be, a.h);
	moem_be_free(self->be, a.shared);
}

TEST_F(cpu, quantize_op_is_moem_quantize_and_reports_failures)
{
	const uint32_t rows = 6, cols = 256;
	uint16_t *w = tb_rand_bf16(50, rows * cols, 0.1);
	struct moem_qmat_layout l;
	uint8_t *ref, *got;
	moem_dptr src, dst, st;
	uint64_t status;

	src = tb_put(self->be, w, 2 * rows * cols);
	st = tb_zeros(self->be, 8);
	for (int p = 0; p < MOEM_PREC_NR; p++) {
		struct moem_quantize_args a = {(enum moem_prec)p, rows, cols, src, 0, 0, st, 0};

		ASSERT_EQ(0, moem_qmat_layout((enum moem_prec)p, rows, cols, &l));
		ref = malloc(l.bytes);
		got = malloc(l.bytes);
		ASSERT_EQ(0, moem_quantize((enum moem_prec)p, w, rows, cols, ref, l.bytes));
		dst = tb_zeros(self->be, l.bytes);
		memset(got, 0xa5, l.bytes);
		ASSERT_EQ(0, moem_be_memset(self->be, dst, 0xa5, l.bytes, NULL));
		a.dst = dst;
		a.dst_len = l.bytes;
		ASSERT_EQ(0, moem_op_quantize(self->be, NULL, &a));
		ASSERT_EQ(0, tb_get(self->be, got, dst, l.bytes));
		ASSERT_EQ(0, tb_get(self->be, &status, st, 8));
		EXPECT_EQ(MOEM_QSTATUS_OK, status);
		EXPECT_EQ(0, memcmp(ref, got, l.bytes)) TH_LOG("%s", moem_prec_name(p));
		EXPECT_EQ(0, moem_quantize_status_error(status));
		if (p != MOEM_PREC_BF16) {
			uint16_t saved = w[3 * cols + 128], nan = 0x7fc0, big = 0x7f00;

			/* NaN as the first element of row 3, group 1 (cols 128.., q2: 2) */
			w[3 * cols + 128] = nan;
			ASSERT_EQ(0, moem_be_htod(self->be, src, w, 2 * rows * cols, NULL));
			ASSERT_EQ(0, moem_op_quantize(self->be, NULL, &a));
			ASSERT_EQ(0, tb_get(self->be, &status, st, 8));
			EXPECT_EQ((3ull << 32) | ((p == MOEM_PREC_Q2 ? 2u : 1u) << 4) |
					  MOEM_QSTATUS_NONFINITE,
				  status);
			EXPECT_EQ(-ERANGE, moem_quantize_status_error(status));
			EXPECT_NE(NULL, strstr(moem_last_error(), "row 3"));
			/* ~1.7e38: the scale overflows fp16 (row 5, first group). */
			w[3 * cols + 128] = saved;
			w[5 * cols + 7] = big;
			ASSERT_EQ(0, moem_be_htod(self->be, src, w, 2 * rows * cols, NULL));
			ASSERT_EQ(0, moem_op_quantize(self->be, NULL, &a));
			ASSERT_EQ(0, tb_get(self->be, &status, st, 8));
			EXPECT_EQ((5ull << 32) | MOEM_QSTATUS_RANGE, status);
			w[5 * cols + 7] = w[5 * cols + 6];
			ASSERT_EQ(0, moem_be_htod(self->be, src, w, 2 * rows * cols, NULL));
		}
		free(ref);
		free(got);
		moem_be_free(self->be, dst);
	}
	free(w);
	moem_be_free(self->be, src);
	moem_be_free(self->be, st);
}

TEST_F(cpu, quantize_expert_counts_rows_over_matrices)
{
	const uint32_t H = 256, I = 128;
	struct tb_expert bf;
	struct moem_expert_layout ql;
	moem_dptr src, dst, st;
	uint64_t status;
	uint16_t inf = 0x7f80;

	ASSERT_EQ(0, tb_expert_make(&bf, MOEM_PREC_BF16, H, I, 60));
	/* down row 5 (row 2I + 5 of the three), element 0: +inf */
	memcpy(bf.blob + bf.l.mat_off[MOEM_MAT_DOWN] + 5 * bf.l.mat[MOEM_MAT_DOWN].row_bytes, &inf,
	       2);
	ASSERT_EQ(0, moem_expert_layout(MOEM_PREC_Q4, H, I, &ql));
	src = tb_put(self->be, bf.blob, bf.l.bytes);
	dst = tb_zeros(self->be, ql.bytes);
	st = tb_zeros(self->be, 8);
	ASSERT_EQ(0, moem_op_quantize_expert(self->be, NULL, MOEM_PREC_Q4, H, I, src, dst, ql.bytes,
					     st));
	ASSERT_EQ(0, tb_get(self->be, &status, st, 8));
	EXPECT_EQ(((uint64_t)(2 * I + 5) << 32) | MOEM_QSTATUS_NONFINITE, status);
	EXPECT_EQ(-ENOSPC, moem_op_quantize_expert(self->be, NULL, MOEM_PREC_Q4, H, I, src, dst,
						   ql.bytes - 1, st));
	tb_expert_free(&bf);
	moem_be_free(self->be, src);
	moem_be_free(self->be, dst);
	moem_be_free(self->be, st);
}

/*
 * MLA's per-head projection on every ISA the CPU has (decode_ops.c: AVX2
 * takes 8 rows or 32 columns at a time), bit for bit the one chain per
 * output in input order that the CUDA kernel computes too; shapes with
 * outputs and inputs that are no multiple of 8 and strides wider than a
 * row.
 */
TEST_F(cpu, head_matmul_is_one_chain_per_output)
{
	static const uint32_t shapes[][4] = {
		/* T, heads, in, out */
		{1, 16, 512, 128}, {3, 4, 160, 20}, {2, 2, 13, 7}, {1, 3, 128, 512}, {2, 1, 40, 37},
	};
	int paths = 0;

	for (int isa = MOEM_CPU_ISA_SCALAR; isa < MOEM_CPU_ISA_NR; isa++) {
		struct moem_backend *be;
		int r = open_isa(isa, &be);

		if (r > 0)
			continue;
		ASSERT_EQ(0, r) TH_LOG("%s", moem_last_error());
		paths++;
		for (unsigned int c = 0; c < sizeof(shapes) / sizeof(shapes[0]); c++)
			for (int tr = 0; tr < 2; tr++) {
				const uint32_t T = shapes[c][0], nh = shapes[c][1],
					       in = shapes[c][2], out = shapes[c][3];
				const uint32_t ld = (tr ? out : in) + 3, rows = tr ? in : out;
				const uint64_t hs = (uint64_t)rows * ld + 5;
				const size_t nx = (size_t)T * nh * in, ny = (size_t)T * nh * out;
				float *x = tb_rand_f32(60 + c, nx, 1.0), *y = malloc(4 * ny);
				uint16_t *w = tb_rand_bf16(70 + c, nh * hs, 0.1);
				struct moem_head_matmul_args a = {
					.T = T,
					.n_heads = nh,
					.in_dim = in,
					.out_dim = out,
					.transpose = tr,
					.x_tok_stride = nh * in,
					.x_head_stride = in,
					.w_head_stride = hs,
					.w_row_stride = ld,
					.y_tok_stride = nh * out,
					.y_head_stride = out,
				};

				ASSERT_NE(NULL, y);
				a.x = tb_put(be, x, 4 * nx);
				a.w = tb_put(be, w, 2 * nh * hs);
				a.y = tb_zeros(be, 4 * ny);
				ASSERT_EQ(0, moem_op_head_matmul(be, NULL, &a));
				ASSERT_EQ(0, tb_get(be, y, a.y, 4 * ny));
				for (uint32_t t = 0; t < T; t++)
					for (uint32_t h = 0; h < nh; h++)
						for (uint32_t k = 0; k < out; k++) {
							const float *xr =
								x + ((size_t)t * nh + h) * in;
							const uint16_t *wh = w + h * hs;
							float acc = 0.0f;

							for (uint32_t i = 0; i < in; i++)
								acc += xr[i] *
								       moem_bf16_to_f32(
									       tr ? wh[(size_t)i *
											       ld +
										       k]
										  : wh[(size_t)k *
											       ld +
										       i]);
							ASSERT_EQ(moem_f32_bits(acc),
								  moem_f32_bits(y[((size_t)t * nh +
										   h) * out +
										  k]))
							TH_LOG("%s shape %u transpose %d: t %u h "
							       "%u o %u",
							       moem_cpu_isa_name(
								       (enum moem_cpu_isa)isa),
							       c, tr, t, h, k);
						}
				free(x);
				free(y);
				free(w);
				moem_be_free(be, a.x);
				moem_be_free(be, a.w);
				moem_be_free(be, a.y);
			}
		moem_backend_close(be);
	}
	EXPECT_LE(1, paths);
}

TEST_F(cpu, histogram_counts_hits)
{
	const uint32_t B = 5, k = 3, N = 10, L = 4;
	int32_t ids[15] = {1, 2, 3, 1, 9, -1, 0, 0, 0, 7, 7, 7, 2, 2, 12};
	uint32_t cnt[5] = {3, 2, 0, 3, 2}, counts[40], want[40] = {0};
	struct moem_hist_args a = {.B = B, .k = k, .N = N, .layer = 2, .n_layers = L};

	a.ids = tb_put(self->be, ids, sizeof(ids));
	a.cnt = tb_put(self->be, cnt, sizeof(cnt));
	a.counts = tb_zeros(self->be, sizeof(counts));
	ASSERT_EQ(0, moem_op_histogram(self->be, NULL, &a));
	ASSERT_EQ(0, moem_op_histogram(self->be, NULL, &a));
	ASSERT_EQ(0, tb_get(self->be, counts, a.counts, sizeof(counts)));
	for (uint32_t t = 0; t < B; t++)
		for (uint32_t j = 0; j < cnt[t]; j++)
			if (ids[t * k + j] >= 0 && ids[t * k + j] < (int)N)
				want[2 * N + ids[t * k + j]] += 2;
	EXPECT_EQ(0, memcmp(want, counts, sizeof(want)));
	EXPECT_EQ(6u, counts[2 * N + 7]);
	moem_be_free(self->be, a.ids);
	moem_be_free(self->be, a.cnt);
	moem_be_free(self->be, a.counts);
}

TEST_HARNESS_MAIN
