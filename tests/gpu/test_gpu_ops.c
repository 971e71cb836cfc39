// SPDX-License-Identifier: GPL-2.0-only
/*
 * Every op of the CUDA backend against the CPU backend on the same inputs,
 * with the tolerances of Documentation/backends.md:
 *   rmsnorm     <= 1 bf16 ulp per element (sum of squares in double)
 *   router      |dz| <= 5e-5 * sum_i |x_i w_i|      (fp32 vs tensor-core or FMA fp32)
 *   route       ids and counts identical; |dw| <= 1e-6 * |w| + 1e-9
 *   ffn         per row max |dy| <= 1e-3 * max |y_cpu|; unassigned rows
 *               untouched; bitwise repeatable and independent of expert order
 *   combine     bitwise identical
 *   quantize    bytes and status word identical
 *   histogram   identical
 * Skips (exit 4) without a CUDA device. MOEM_GPU_TEST_BACKEND=cpu runs the
 * same comparisons CPU against CPU, to check the test itself anywhere.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/backend.h>
#include <moem/error.h>
#include <moem/route.h>

#include "kselftest_harness.h"
#include "../unit/test_backend_util.h"
#include "gpu_main.h"

static const char *gpu_name(void)
{
	const char *n = getenv("MOEM_GPU_TEST_BACKEND");

	return n ? n : "cuda";
}

FIXTURE(pair)
{
	struct moem_backend *g, *c;
};

FIXTURE_SETUP(pair)
{
	ASSERT_EQ(0, moem_backend_open(gpu_name(), NULL, &self->g)) TH_LOG("%s", moem_last_error());
	/* the reference: the CPU backend's scalar kernels */
	ASSERT_EQ(0,
		  moem_backend_open("cpu", &(struct moem_backend_opts){.isa = MOEM_CPU_ISA_SCALAR},
				    &self->c));
}

FIXTURE_TEARDOWN(pair)
{
	moem_backend_close(self->g);
	moem_backend_close(self->c);
}

/* The same host data on both backends. */
struct dbuf {
	moem_dptr g, c;
	uint64_t bytes;
};

static struct dbuf dput(FIXTURE_DATA(pair) * self, const void *host, uint64_t bytes)
{
	struct dbuf d = {tb_put(self->g, host, bytes), tb_put(self->c, host, bytes), bytes};

	return d;
}

static struct dbuf dfill(FIXTURE_DATA(pair) * self, int v, uint64_t bytes)
{
	struct dbuf d = {0, 0, bytes};

	if (!moem_be_alloc(self->g, bytes, &d.g))
		moem_be_memset(self->g, d.g, v, bytes, NULL);
	if (!moem_be_alloc(self->c, bytes, &d.c))
		moem_be_memset(self->c, d.c, v, bytes, NULL);
	return d;
}

static int dget(FIXTURE_DATA(pair) * self, const struct dbuf *d, void *g, void *c)
{
	int ret = tb_get(self->g, g, d->g, d->bytes);

	return ret ? ret : tb_get(self->c, c, d->c, d->bytes);
}

static void dfree(FIXTURE_DATA(pair) * self, struct dbuf *d)
{
	moem_be_free(self->g, d->g);
	moem_be_free(self->c, d->c);
}

TEST_F(pair, rmsnorm)
{
	static const uint32_t shapes[][2] = {{7, 2048}, {3, 320}, {64, 4096}};

	for (int s = 0; s < 3; s++) {
		const uint32_t B = shapes[s][0], H = shapes[s][1];
		float *x = tb_rand_f32(1 + s, (size_t)B * H, 2.0);
		uint16_t *w = tb_rand_bf16(2 + s, H, 1.0);
		uint16_t *yg = malloc(2 * (size_t)B * H), *yc = malloc(2 * (size_t)B * H);
		struct dbuf dx = dput(self, x, 4 * (size_t)B * H), dw = dput(self, w, 2 * H);
		struct dbuf dy = dfill(self, 0, 2 * (size_t)B * H);
		struct moem_rmsnorm_args a = {B, H, 1e-6f, dx.g, dw.g, dy.g};
		size_t exact = 0;

		/* device memory on a GPU has no host address to fill in place */
		EXPECT_EQ(NULL, moem_be_host_ptr(self->g, dx.g));
		EXPECT_NE(NULL, moem_be_host_ptr(self->c, dx.c));
		ASSERT_EQ(0, moem_op_rmsnorm(self->g, NULL, &a)) TH_LOG("%s", moem_last_error());
		a.x = dx.c;
		a.weight = dw.c;
		a.y = dy.c;
		ASSERT_EQ(0, moem_op_rmsnorm(self->c, NULL, &a));
		ASSERT_EQ(0, dget(self, &dy, yg, yc));
		for (size_t i = 0; i < (size_t)B * H; i++) {
			ASSERT_LE(tb_bf16_ulps(yg[i], yc[i]), 1) TH_LOG("element %zu", i);
			exact += yg[i] == yc[i];
		}
		TH_LOG("rmsnorm B %u H %u: %zu of %zu bitwise equal", B, H, exact, (size_t)B * H);
		EXPECT_GE(exact * 100, (size_t)B * H * 99);
		free(x);
		free(w);
		free(yg);
		free(yc);
		dfree(self, &dx);
		dfree(self, &dw);
		dfree(self, &dy);
	}
}

TEST_F_TIMEOUT(pair, router, 600)
{
	static const uint32_t shapes[][3] = {
		{1, 128, 2048}, {16, 128, 2048}, {64, 60, 2048}, {100, 8, 4096}, {5, 1024, 512},
	};

	/* Which kernel computes it depends on the SM count: router_tile.sh */
	for (int s = 0; s < 5; s++) {
		const uint32_t B = shapes[s][0], N = shapes[s][1], H = shapes[s][2];
		uint16_t *x = tb_rand_bf16(10 + s, (size_t)B * H, 1.0);
		uint16_t *w = tb_rand_bf16(20 + s, (size_t)N * H, 0.03);
		float *zg = malloc(4 * (size_t)B * N), *zc = malloc(4 * (size_t)B * N);
		struct dbuf dx = dput(self, x, 2 * (size_t)B * H),
			    dw = dput(self, w, 2 * (size_t)N * H);
		struct dbuf dz = dfill(self, 0xff, 4 * (size_t)B * N);
		struct moem_router_args a = {B, H, N, dx.g, dw.g, dz.g};
		double worst = 0;

		ASSERT_EQ(0, moem_op_router(self->g, NULL, &a)) TH_LOG("%s", moem_last_error());
		a.x = dx.c;
		a.gate = dw.c;
		a.logits = dz.c;
		ASSERT_EQ(0, moem_op_router(self->c, NULL, &a));
		ASSERT_EQ(0, dget(self, &dz, zg, zc));
		for (uint32_t t = 0; t < B; t++)
			for (uint32_t e = 0; e < N; e++) {
				double mag = 0, d = fabs((double)zg[t * N + e] - zc[t * N + e]);

				for (uint32_t i = 0; i < H; i++)
					mag += fabs((double)moem_bf16_to_f32(x[t * H + i]) *
						    moem_bf16_to_f32(w[e * H + i]));
				ASSERT_LE(d, 5e-5 * mag + 1e-30)
				TH_LOG("B %u N %u H %u: t %u e %u: %g vs %g", B, N, H, t, e,
				       zg[t * N + e], zc[t * N + e]);
				worst = fmax(worst, d / (mag + 1e-30));
			}
		TH_LOG("router B %u N %u H %u: worst |dz| / sum|xw| = %.2e", B, N, H, worst);
		free(x);
		free(w);
		free(zg);
		free(zc);
		dfree(self, &dx);
		dfree(self, &dw);
		dfree(self, &dz);
	}
}

static void gen_logits(struct moem_rng *r, float *z, uint32_t B, uint32_t N, int kind)
{
	for (uint32_t i = 0; i < B * N; i++) {
		switch (kind) {
		case 0:
			z[i] = (float)(moem_rng_normal(r) * 2);
			break;
		case 1: /* coarse: exact ties everywhere */
			z[i] = (float)moem_rng_below(r, 4);
			break;
		case 2: /* skewed, with a few NaN and -inf logits */
			z[i] = (float)moem_rng_normal(r) + (i % N < 5 ? 3.0f : 0.0f);
			if (moem_rng_below(r, 97) == 0)
				z[i] = NAN;
			else if (moem_rng_below(r, 89) == 0)
				z[i] = -INFINITY;
			break;
		default: /* every token the same */
			z[i] = i < N ? (float)moem_rng_normal(r) : z[i % N];
			break;
		}
	}
}

/*
 * {B, N, k, k0, n_group, topk_group}: k0 0 is OEA's default ceil(k / 2).
 * Top-k above 32 (up to the model limit, 64) and k0 above 32 mark every
 * chosen expert. The last rows limit tokens to expert groups (DeepSeek-V2's
 * 160 experts in 8 groups, 3 kept; 64 groups of one; one group kept).
 */
TEST_F_TIMEOUT(pair, route_all_modes_same_choices, 1200)
{
	static const uint32_t cfgs[][6] = {
		{1, 128, 8, 0},	       {16, 128, 8, 0},
		{64, 128, 8, 0},       {300, 64, 6, 0},
		{7, 8, 2, 0},	       {33, 1024, 64, 0},
		{5, 16, 1, 0},	       {24, 256, 48, 40},
		{40, 128, 64, 64},     {12, 64, 40, 0},
		{16, 160, 6, 0, 8, 3}, {33, 64, 8, 0, 64, 8},
		{9, 16, 3, 2, 4, 1},   {64, 1024, 16, 0, 32, 5},
	};
	const int n_cfg = sizeof(cfgs) / sizeof(cfgs[0]);
	struct moem_rng r;
	int checked = 0;

	moem_rng_seed(&r, 3, 0);
	for (int ci = 0; ci < n_cfg; ci++)
		for (int kind = 0; kind < 4; kind++)
			for (int mode = 0; mode < MOEM_ROUTE_NR; mode++) {
				const uint32_t B = cfgs[ci][0], N = cfgs[ci][1], k = cfgs[ci][2];
				float *z = malloc(4 * (size_t)B * N);
				uint8_t *pad = calloc(B, 1), *res = calloc(N, 1);
				int32_t *ig = malloc(4 * B * k), *ic = malloc(4 * B * k);
				float *wg = malloc(4 * B * k), *wc = malloc(4 * B * k);
				uint32_t *cg = malloc(4 * B), *cc = malloc(4 * B);
				struct dbuf dz, dp, dr, di, dw, dc;
				struct moem_route_args a = {
					.mode = (enum moem_route_mode)mode,
					.cfg = {N, k, kind != 2, kind == 1 ? 2.5f : 1.0f,
						MOEM_WRULE_NORM_THEN_SCALE, cfgs[ci][4],
						cfgs[ci][5]},
					.k0 = cfgs[ci][3],
					.B = B,
				};

				gen_logits(&r, z, B, N, kind);
				for (uint32_t t = 0; t < B; t++)
					pad[t] = B > 1 && moem_rng_below(&r, 5) == 0;
				for (uint32_t e = 0; e < N; e++)
					res[e] = moem_rng_below(&r, 6) == 0;
				dz = dput(self, z, 4 * (size_t)B * N);
				dp = dput(self, pad, B);
				dr = dput(self, res, N);
				di = dfill(self, 0x7f, 4 * B * k);
				dw = dfill(self, 0x7f, 4 * B * k);
				dc = dfill(self, 0x7f, 4 * B);
				a.logits = dz.g;
				a.pad = kind == 3 ? 0 : dp.g;
				a.resident = dr.g;
				a.ids = di.g;
				a.w = dw.g;
				a.cnt = dc.g;
				ASSERT_EQ(0, moem_op_route(self->g, NULL, &a))
				TH_LOG("%s", moem_last_error());
				a.logits = dz.c;
				a.pad = kind == 3 ? 0 : dp.c;
				a.resident = dr.c;
				a.ids = di.c;
				a.w = dw.c;
				a.cnt = dc.c;
				ASSERT_EQ(0, moem_op_route(self->c, NULL, &a));
				ASSERT_EQ(0, dget(self, &di, ig, ic));
				ASSERT_EQ(0, dget(self, &dw, wg, wc));
				ASSERT_EQ(0, dget(self, &dc, cg, cc));
				ASSERT_EQ(0, memcmp(cg, cc, 4 * B))
				TH_LOG("cfg %d kind %d mode %d: counts differ", ci, kind, mode);
				ASSERT_EQ(0, memcmp(ig, ic, 4 * B * k))
				TH_LOG("cfg %d kind %d mode %d: ids differ", ci, kind, mode);
				for (uint32_t i = 0; i < B * k; i++) {
					ASSERT_LE(fabsf(wg[i] - wc[i]),
						  1e-6f * fabsf(wc[i]) + 1e-9f)
					TH_LOG("cfg %d kind %d mode %d: w[%u] %.9g vs %.9g", ci,
					       kind, mode, i, wg[i], wc[i]);
				}
				checked++;
				free(z);
				free(pad);
				free(res);
				free(ig);
				free(ic);
				free(wg);
				free(wc);
				free(cg);
				free(cc);
				dfree(self, &dz);
				dfree(self, &dp);
				dfree(self, &dr);
				dfree(self, &di);
				dfree(self, &dw);
				dfree(self, &dc);
			}
	TH_LOG("%d routing cases identical", checked);
}

/*
 * A grouped FFN call with experts of every precision (or all of precision
 * only, if >= 0) and token counts covering every n-tile class; GPU vs CPU,
 * repeatability, expert order.
 */
static void ffn_case_prec(struct __test_metadata *_metadata, FIXTURE_DATA(pair) * self, uint32_t H,
			  uint32_t I, uint32_t B, uint64_t seed, int only)
{
	static const uint32_t counts[] = {1, 5, 8, 9, 16, 17, 33, 64, 3, 2};
	const uint32_t NE = 10, NSLOT = NE;
	struct tb_expert ex[10];
	struct moem_ffn_expert fg[10], fc[10], frev[10];
	struct moem_ffn_assign *as = malloc(sizeof(*as) * NE * B);
	uint16_t *x = tb_rand_bf16(seed, (size_t)B * H, 1.0);
	size_t outn = (size_t)B * NSLOT * H;
	float *yg = malloc(4 * outn), *yc = malloc(4 * outn), *y2 = malloc(4 * outn);
	struct dbuf dx = dput(self, x, 2 * (size_t)B * H), dout;
	struct dbuf blob[10];
	uint32_t na = 0;
	double worst = 0;

	for (uint32_t e = 0; e < NE; e++) {
		uint32_t n = moem_min(counts[e], B);

		ASSERT_EQ(0,
			  tb_expert_make(&ex[e], (enum moem_prec)(only >= 0 ? only : (int)(e % 4)),
					 H, I, seed + 10 + e));
		blob[e] = dput(self, ex[e].blob, ex[e].l.bytes);
		fg[e] = (struct moem_ffn_expert){blob[e].g, ex[e].l.prec, na, n};
		fc[e] = (struct moem_ffn_expert){blob[e].c, ex[e].l.prec, na, n};
		for (uint32_t j = 0; j < n; j++) { /* spread tokens: t = (e + 3j) mod B */
			as[na].token = (uint16_t)((e + 3 * j) % B);
			as[na++].slot = (uint16_t)e;
		}
	}
	/* Tokens (e + 3j) mod B for j < n <= B are distinct only if gcd(3, B) = 1. */
	ASSERT_NE(0u, B % 3);
	dout = dfill(self, 0xff, 4 * outn);
	{
		struct moem_ffn_args a = {B, H, I, NSLOT, dx.g, dout.g, NE, fg, na, as};

		ASSERT_EQ(0, moem_op_ffn(self->g, NULL, &a)) TH_LOG("%s", moem_last_error());
		a.x = dx.c;
		a.out = dout.c;
		a.experts = fc;
		ASSERT_EQ(0, moem_op_ffn(self->c, NULL, &a));
		ASSERT_EQ(0, dget(self, &dout, yg, yc));
	}
	for (uint32_t t = 0; t < B; t++)
		for (uint32_t s = 0; s < NSLOT; s++) {
			const float *rg = yg + ((size_t)t * NSLOT + s) * H;
			const float *rc = yc + ((size_t)t * NSLOT + s) * H;
			uint32_t bits;
			double md = 0, mc = 0;

			memcpy(&bits, rc, 4);
			if (bits == 0xffffffffu) { /* unassigned on the CPU: must be on the GPU */
				ASSERT_EQ(0, memcmp(rg, rc, 4 * H))
				TH_LOG("H %u B %u: row t %u s %u written", H, B, t, s);
				continue;
			}
			for (uint32_t h = 0; h < H; h++) {
				md = fmax(md, fabs((double)rg[h] - rc[h]));
				mc = fmax(mc, fabs((double)rc[h]));
			}
			ASSERT_LE(md, 1e-3 * mc)
			TH_LOG("H %u I %u B %u: token %u expert %u (%s): max |dy| %g of %g", H, I,
			       B, t, s, moem_prec_name(ex[s].l.prec), md, mc);
			worst = fmax(worst, md / (mc + 1e-30));
		}
	TH_LOG("ffn H %u I %u B %u: worst row error %.2e", H, I, B, worst);
	/* Repeat with the experts reversed: bitwise the same. */
	for (uint32_t e = 0; e < NE; e++)
		frev[e] = fg[NE - 1 - e];
	{
		struct moem_ffn_args a = {B, H, I, NSLOT, dx.g, dout.g, NE, frev, na, as};

		ASSERT_EQ(0, moem_be_memset(self->g, dout.g, 0xff, 4 * outn, NULL));
		ASSERT_EQ(0, moem_op_ffn(self->g, NULL, &a));
		ASSERT_EQ(0, tb_get(self->g, y2, dout.g, 4 * outn));
		EXPECT_EQ(0, memcmp(yg, y2, 4 * outn)) TH_LOG("not repeatable across expert order");
	}
	for (uint32_t e = 0; e < NE; e++) {
		dfree(self, &blob[e]);
		tb_expert_free(&ex[e]);
	}
	dfree(self, &dx);
	dfree(self, &dout);
	free(as);
	free(x);
	free(yg);
	free(yc);
	free(y2);
}

static void ffn_case(struct __test_metadata *_metadata, FIXTURE_DATA(pair) * self, uint32_t H,
		     uint32_t I, uint32_t B, uint64_t seed)
{
	ffn_case_prec(_metadata, self, H, I, B, seed, -1);
}

TEST_F_TIMEOUT(pair, ffn_qwen3_shape, 1200)
{
	ffn_case(_metadata, self, 2048, 768, 64, 100);
	ffn_case(_metadata, self, 2048, 768, 16, 200);
	ffn_case(_metadata, self, 2048, 768, 1, 300);
}

TEST_F_TIMEOUT(pair, ffn_small_and_odd_shapes, 1200)
{
	ffn_case(_metadata, self, 256, 128, 7, 400);
	ffn_case(_metadata, self, 384, 1408, 20, 500); /* deepseek-v2-lite width */
	ffn_case(_metadata, self, 4096, 1024, 5, 600);
	/* q2 with an odd number of 64-column groups: the half load unit */
	ffn_case_prec(_metadata, self, 320, 192, 64, 700, MOEM_PREC_Q2);
}

/*
 * Every FFN row tiling of 1..16 tokens an expert (cuda/ffn.cuh, chosen per
 * precision at open, MOEM_CUDA_FFN_RT overriding): each within the
 * tolerance, at 1, 5 and 16 tokens.
 */
TEST_F_TIMEOUT(pair, ffn_every_row_tiling, 1200)
{
	static const char *const rts[] = {"1", "2", "4", "bf16=4,q8=2,q4=1,q2=4"};
	const char *old = getenv("MOEM_CUDA_FFN_RT");
	struct moem_backend *b = NULL;

	for (unsigned int i = 0; i < sizeof(rts) / sizeof(rts[0]); i++) {
		setenv("MOEM_CUDA_FFN_RT", rts[i], 1);
		moem_backend_close(self->g);
		self->g = NULL;
		ASSERT_EQ(0, moem_backend_open(gpu_name(), NULL, &self->g))
		TH_LOG("%s", moem_last_error());
		TH_LOG("MOEM_CUDA_FFN_RT=%s", rts[i]);
		ffn_case(_metadata, self, 2048, 768, 1, 800 + i);
		ffn_case(_metadata, self, 384, 1408, 5, 810 + i);
		ffn_case(_metadata, self, 256, 1152, 16, 820 + i);
	}
	/* a bad value is refused at open, naming the variable */
	if (!strcmp(gpu_name(), "cuda")) {
		setenv("MOEM_CUDA_FFN_RT", "q4=3", 1);
		EXPECT_EQ(-EINVAL, moem_backend_open("cuda", NULL, &b));
		EXPECT_NE(NULL, strstr(moem_last_error(), "MOEM_CUDA_FFN_RT"));
		setenv("MOEM_CUDA_FFN_RT", "q5=4", 1);
		EXPECT_EQ(-EINVAL, moem_backend_open("cuda", NULL, &b));
	}
	if (old)
		setenv("MOEM_CUDA_FFN_RT", old, 1);
	else
		unsetenv("MOEM_CUDA_FFN_RT");
}

TEST_F(pair, combine_bitwise)
{
	const uint32_t B = 37, H = 2100, k = 8, S = 2;
	float *h = tb_rand_f32(1, (size_t)B * H, 1.0), *ro = tb_rand_f32(2, (size_t)B * k * H, 1.0);
	float *sh = tb_rand_f32(3, (size_t)B * S * H, 1.0), *w = tb_rand_f32(4, B * k, 0.2);
	float *hg = malloc(4 * (size_t)B * H), *hc = malloc(4 * (size_t)B * H);
	uint32_t *cnt = malloc(4 * B);
	struct dbuf dh, dr, ds, dw, dc;

	for (uint32_t t = 0; t < B; t++)
		cnt[t] = t % 10; /* 0..9: 9 is clamped to k */
	dh = dput(self, h, 4 * (size_t)B * H);
	dr = dput(self, ro, 4 * (size_t)B * k * H);
	ds = dput(self, sh, 4 * (size_t)B * S * H);
	dw = dput(self, w, 4 * B * k);
	dc = dput(self, cnt, 4 * B);
	{
		struct moem_combine_args a = {B, H, dh.g, k, dr.g, dw.g, dc.g, S, ds.g};

		ASSERT_EQ(0, moem_op_combine(self->g, NULL, &a)) TH_LOG("%s", moem_last_error());
		a = (struct moem_combine_args){B, H, dh.c, k, dr.c, dw.c, dc.c, S, ds.c};
		ASSERT_EQ(0, moem_op_combine(self->c, NULL, &a));
	}
	ASSERT_EQ(0, dget(self, &dh, hg, hc));
	EXPECT_EQ(0, memcmp(hg, hc, 4 * (size_t)B * H));
	free(h);
	free(ro);
	free(sh);
	free(w);
	free(hg);
	free(hc);
	free(cnt);
	dfree(self, &dh);
	dfree(self, &dr);
	dfree(self, &ds);
	dfree(self, &dw);
	dfree(self, &dc);
}

/* Rows that stress the rounding rules without failing the checks. */
static void adversarial_rows(uint16_t *w, uint32_t rows, uint32_t cols)
{
	for (uint32_t r = 0; r < rows; r++)
		for (uint32_t c = 0; c < cols; c++) {
			uint16_t *p = &w[(size_t)r * cols + c];

			switch (r % 8) {
			case 0: /* zeros of both signs: the min's sign bit */
				*p = c % 3 ? 0x0000 : 0x8000;
				break;
			case 1: /* constant groups: scale 0 */
				*p = 0x3fc0;
				break;
			case 2: /* bf16 subnormals and tiny values */
				*p = (uint16_t)(c % 7 ? 0x0001 + c % 100 : 0x8003);
				break;
			case 3: /* near the fp16 range */
				*p = moem_f32_to_bf16(c % 2 ? 60000.0f : -61000.0f);
				break;
			case 4: /* NaN away from the group start (ignored by min/max) */
				if (c % 64 == 17)
					*p = 0x7fc1;
				break;
			case 5: /* exact .5 steps: round half to even */
				*p = moem_f32_to_bf16((float)(c % 16) * 0.5f);
				break;
			default:
				break;
			}
		}
}

TEST_F(pair, quantize_bytes_and_status)
{
	const uint32_t rows = 48, cols = 1024;
	uint16_t *w = tb_rand_bf16(9, (size_t)rows * cols, 0.05);
	struct dbuf src, st;

	adversarial_rows(w, rows, cols);
	src = dput(self, w, 2 * (size_t)rows * cols);
	st = dfill(self, 0, 8);
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1) { /* failures: NaN first, +inf, fp16 overflow of the min */
			w[9 * cols + 128] = 0x7fc0;
			w[17 * cols + 300] = 0x7f80;
			w[30 * cols + 5] = moem_f32_to_bf16(-70000.0f);
			dfree(self, &src);
			src = dput(self, w, 2 * (size_t)rows * cols);
		}
		for (int p = 0; p < MOEM_PREC_NR; p++) {
			struct moem_qmat_layout l;
			uint8_t *bg, *bc;
			uint64_t sg, sc;
			struct dbuf dst;
			struct moem_quantize_args a = {
				(enum moem_prec)p, rows, cols, 0, 0, 0, 0, 7};

			ASSERT_EQ(0, moem_qmat_layout((enum moem_prec)p, rows, cols, &l));
			dst = dfill(self, 0xa5, l.bytes);
			bg = malloc(l.bytes);
			bc = malloc(l.bytes);
			a.dst_len = l.bytes;
			a.src = src.g;
			a.dst = dst.g;
			a.status = st.g;
			ASSERT_EQ(0, moem_op_quantize(self->g, NULL, &a))
			TH_LOG("%s", moem_last_error());
			a.src = src.c;
			a.dst = dst.c;
			a.status = st.c;
			ASSERT_EQ(0, moem_op_quantize(self->c, NULL, &a));
			ASSERT_EQ(0, dget(self, &dst, bg, bc));
			ASSERT_EQ(0, tb_get(self->g, &sg, st.g, 8));
			ASSERT_EQ(0, tb_get(self->c, &sc, st.c, 8));
			EXPECT_EQ(sc, sg)
			TH_LOG("%s pass %d: status 0x%llx vs 0x%llx", moem_prec_name(p), pass,
			       (unsigned long long)sg, (unsigned long long)sc);
			if (pass == 0 || p == MOEM_PREC_BF16) {
				EXPECT_EQ(MOEM_QSTATUS_OK, sg);
				for (uint64_t i = 0; i < l.bytes; i++) {
					ASSERT_EQ(bc[i], bg[i])
					TH_LOG("%s: byte %llu of %llu differs", moem_prec_name(p),
					       (unsigned long long)i, (unsigned long long)l.bytes);
				}
			} else {
				/* the first failure: row 9 + row_base 7, NaN first in its group */
				EXPECT_EQ(16ull, sg >> 32);
				EXPECT_EQ(MOEM_QSTATUS_NONFINITE, (uint32_t)(sg & 0xf));
			}
			free(bg);
			free(bc);
			dfree(self, &dst);
		}
	}
	free(w);
	dfree(self, &src);
	dfree(self, &st);
}

TEST_F(pair, histogram)
{
	const uint32_t B = 64, k = 8, N = 128, L = 3;
	int32_t *ids = malloc(4 * B * k);
	uint32_t cnt[64], hg[3 * 128], hc[3 * 128];
	struct moem_rng r;
	struct dbuf di, dc, dh;

	moem_rng_seed(&r, 8, 0);
	for (uint32_t i = 0; i < B * k; i++)
		ids[i] = (int32_t)moem_rng_below(&r, N + 2) - 1; /* includes -1 and N */
	for (uint32_t t = 0; t < B; t++)
		cnt[t] = moem_rng_below(&r, k + 2);
	di = dput(self, ids, 4 * B * k);
	dc = dput(self, cnt, 4 * B);
	dh = dfill(self, 0, sizeof(hg));
	for (uint32_t layer = 0; layer < L; layer++) {
		struct moem_hist_args a = {B, k, N, layer, L, di.g, dc.g, dh.g};

		ASSERT_EQ(0, moem_op_histogram(self->g, NULL, &a)) TH_LOG("%s", moem_last_error());
		a = (struct moem_hist_args){B, k, N, layer, L, di.c, dc.c, dh.c};
		ASSERT_EQ(0, moem_op_histogram(self->c, NULL, &a));
	}
	ASSERT_EQ(0, dget(self, &dh, hg, hc));
	EXPECT_EQ(0, memcmp(hg, hc, sizeof(hg)));
	free(ids);
	dfree(self, &di);
	dfree(self, &dc);
	dfree(self, &dh);
}

/*
 * moem_op_ffn_routed (the plan made on the device from ids, cnt and a
 * residency table) against moem_op_ffn with the host's plan of the same
 * routing on the same backend: the same bits, for batches that reach
 * every n-tile class and experts of every precision; an expert missing
 * from the table is reported in status and its rows left alone.
 */
static void ffn_routed_case(struct __test_metadata *_metadata, FIXTURE_DATA(pair) * self,
			    uint32_t B, uint64_t seed, int missing)
{
	const uint32_t H = 256, I = 128, N = 12, K = 4;
	struct tb_expert ex[12];
	moem_dptr blob[12], dx, dids, dcnt, dtab, dst, dout;
	struct moem_res_entry tab[12];
	struct moem_ffn_expert fe[12];
	struct moem_ffn_assign *as = malloc(sizeof(*as) * B * K);
	int32_t *ids = malloc(4 * B * K);
	uint32_t cnt[64], na = 0, ne = 0, status = 0;
	uint16_t *x = tb_rand_bf16(seed, (size_t)B * H, 1.0);
	size_t outn = (size_t)B * K * H;
	float *yr = malloc(4 * outn), *yh = malloc(4 * outn);
	struct moem_rng r;

	ASSERT_LE(B, 64u);
	moem_rng_seed(&r, seed, 1);
	for (uint32_t t = 0; t < B; t++) {
		/* k distinct experts, skewed so that some get many tokens */
		cnt[t] = t % 5 == 4 ? K - 1 : K;
		for (uint32_t j = 0; j < K; j++) {
			int32_t e;
			bool dup;

			do {
				e = (int32_t)(moem_rng_below(&r, 3) ? moem_rng_below(&r, 4)
								    : moem_rng_below(&r, N));
				dup = false;
				for (uint32_t i = 0; i < j; i++)
					dup |= ids[t * K + i] == e;
			} while (dup);
			ids[t * K + j] = e;
		}
	}
	for (uint32_t e = 0; e < N; e++) {
		ASSERT_EQ(0, tb_expert_make(&ex[e], (enum moem_prec)(e % 4), H, I, seed + 20 + e));
		blob[e] = tb_put(self->g, ex[e].blob, ex[e].l.bytes);
		ASSERT_NE(0, blob[e]);
		tab[e] = (struct moem_res_entry){(int)e == missing ? 0 : blob[e], e % 4, 0};
	}
	/* the host plan: experts ascending, then token, then slot */
	for (uint32_t e = 0; e < N; e++) {
		uint32_t first = na;

		for (uint32_t t = 0; t < B; t++)
			for (uint32_t j = 0; j < cnt[t]; j++)
				if (ids[t * K + j] == (int32_t)e)
					as[na++] =
						(struct moem_ffn_assign){(uint16_t)t, (uint16_t)j};
		if (na > first && (int)e != missing)
			fe[ne++] =
				(struct moem_ffn_expert){blob[e], ex[e].l.prec, first, na - first};
	}
	dx = tb_put(self->g, x, 2 * (size_t)B * H);
	dids = tb_put(self->g, ids, 4 * B * K);
	dcnt = tb_put(self->g, cnt, 4 * B);
	dtab = tb_put(self->g, tab, sizeof(tab));
	dst = tb_zeros(self->g, 4);
	ASSERT_EQ(0, moem_be_alloc(self->g, 4 * outn, &dout)) TH_LOG("%s", moem_last_error());
	{
		struct moem_ffn_routed_args a = {B,  H,	   I,	 K,    N,    0xf,
						 dx, dout, dids, dcnt, dtab, dst};
		struct moem_ffn_args h = {B, H, I, K, dx, dout, ne, fe, na, as};

		ASSERT_EQ(0, moem_be_memset(self->g, dout, 0xff, 4 * outn, NULL));
		ASSERT_EQ(0, moem_op_ffn_routed(self->g, NULL, &a)) TH_LOG("%s", moem_last_error());
		ASSERT_EQ(0, tb_get(self->g, yr, dout, 4 * outn));
		ASSERT_EQ(0, tb_get(self->g, &status, dst, 4));
		ASSERT_EQ(0, moem_be_memset(self->g, dout, 0xff, 4 * outn, NULL));
		ASSERT_EQ(0, moem_op_ffn(self->g, NULL, &h)) TH_LOG("%s", moem_last_error());
		ASSERT_EQ(0, tb_get(self->g, yh, dout, 4 * outn));
	}
	EXPECT_EQ(missing >= 0 ? (uint32_t)missing + 1 : 0u, status);
	for (uint32_t i = 0; i < B * K; i++) {
		EXPECT_EQ(0, memcmp(yr + (size_t)i * H, yh + (size_t)i * H, 4 * H))
		TH_LOG("B %u: token %u slot %u (expert %d) differs from the host plan's", B, i / K,
		       i % K, ids[i]);
	}
	for (uint32_t e = 0; e < N; e++) {
		moem_be_free(self->g, blob[e]);
		tb_expert_free(&ex[e]);
	}
	moem_be_free(self->g, dx);
	moem_be_free(self->g, dids);
	moem_be_free(self->g, dcnt);
	moem_be_free(self->g, dtab);
	moem_be_free(self->g, dst);
	moem_be_free(self->g, dout);
	free(as);
	free(ids);
	free(x);
	free(yr);
	free(yh);
}

TEST_F_TIMEOUT(pair, ffn_routed_equals_host_plan, 1200)
{
	if (!moem_be_has_ffn_routed(self->g)) {
		struct moem_ffn_routed_args a = {1, 256, 128, 4, 12, 1, 16, 16, 16, 16, 16, 16};

		EXPECT_EQ(-EOPNOTSUPP, moem_op_ffn_routed(self->g, NULL, &a));
		SKIP(return, "the %s backend plans on the host only", gpu_name());
	}
	ffn_routed_case(_metadata, self, 1, 900, -1); /* decode */
	ffn_routed_case(_metadata, self, 7, 910, -1);
	ffn_routed_case(_metadata, self, 64, 920, -1); /* every n-tile class */
	ffn_routed_case(_metadata, self, 20, 930, 2);  /* expert 2 not in the table */
}

TEST_F(pair, streams_events_ordering)
{
	const uint64_t bytes = 64 << 20;
	struct moem_stream *s1, *s2;
	struct moem_event *a, *b;
	uint8_t *host = malloc(bytes), probe[256];
	moem_dptr d1, d2;
	float ms = -1;

	memset(host, 0x3c, bytes);
	ASSERT_EQ(0, moem_be_host_register(self->g, host, bytes));
	ASSERT_EQ(0, moem_be_stream_create(self->g, &s1));
	ASSERT_EQ(0, moem_be_stream_create(self->g, &s2));
	ASSERT_EQ(0, moem_be_event_create(self->g, &a));
	ASSERT_EQ(0, moem_be_event_create(self->g, &b));
	ASSERT_EQ(0, moem_be_alloc(self->g, bytes, &d1));
	ASSERT_EQ(0, moem_be_alloc(self->g, bytes, &d2));
	ASSERT_EQ(0, moem_be_memset(self->g, d2, 0, bytes, s2));
	ASSERT_EQ(0, moem_be_stream_sync(self->g, s2));
	ASSERT_EQ(0, moem_be_event_record(self->g, a, s1));
	ASSERT_EQ(0, moem_be_htod(self->g, d1, host, bytes, s1));
	ASSERT_EQ(0, moem_be_event_record(self->g, b, s1));
	/* s2 copies d1 only after s1's upload: the event orders them. */
	ASSERT_EQ(0, moem_be_stream_wait(self->g, s2, b));
	ASSERT_EQ(0, moem_be_dtod(self->g, d2, d1, bytes, s2));
	ASSERT_EQ(0, moem_be_dtoh(self->g, probe, d2 + bytes - 256, 256, s2));
	ASSERT_EQ(0, moem_be_stream_sync(self->g, s2));
	for (int i = 0; i < 256; i++)
		ASSERT_EQ(0x3c, probe[i]);
	ASSERT_EQ(0, moem_be_event_sync(self->g, b));
	ASSERT_EQ(0, moem_be_event_query(self->g, b));
	ASSERT_EQ(0, moem_be_event_elapsed(self->g, a, b, &ms));
	TH_LOG("64 MiB host->device: %.3f ms (%.1f GB/s)", ms, bytes / (ms * 1e6));
	EXPECT_GE(ms, 0.0f);
	ASSERT_EQ(0, moem_be_host_unregister(self->g, host));
	moem_be_event_destroy(self->g, a);
	moem_be_event_destroy(self->g, b);
	moem_be_stream_destroy(self->g, s1);
	moem_be_stream_destroy(self->g, s2);
	moem_be_free(self->g, d1);
	moem_be_free(self->g, d2);
	free(host);
}

GPU_TEST_MAIN
