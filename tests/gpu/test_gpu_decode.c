// SPDX-License-Identifier: GPL-2.0-only
/*
 * The CUDA backend's full-decode ops against the CPU backend on the same
 * inputs (tolerances in Documentation/backends.md, "Numerics"):
 *   embed, convert, rope, head_matmul, kv_store   bitwise identical
 *   rownorm     f32 <= 1 float ulp, bf16 <= 1 bf16 ulp (double sum of squares)
 *   matmul      |dy| <= 5e-5 * sum_i |x_i w_i|; unaligned rows too
 *   matmul q8/q4/q2   |dy| <= (K/16 + K/32 + 38) 2^-24 sum_i |x_i w_i|
 *               (derived at matmul_q_case)
 *   attention   |dout| <= 2e-5 * max|V| (split-KV online softmax vs exact);
 *               GQA, sliding window, MLA's latent cache, missing blocks,
 *               a prefill chunk, contexts long enough for many splits
 * and, on the CUDA side alone, that a token's matmul and attention
 * results are bitwise the same in a batch and alone. Skips (exit 4)
 * without a CUDA device; MOEM_GPU_TEST_BACKEND=cpu checks the test itself.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/backend.h>
#include <moem/error.h>
#include <moem/half.h>
#include <moem/rng.h>

#include "kselftest_harness.h"
#include "../unit/test_backend_util.h"
#include "gpu_main.h"

static const char *gpu_name(void)
{
	const char *n = getenv("MOEM_GPU_TEST_BACKEND");

	return n ? n : "cuda";
}

FIXTURE(dec)
{
	struct moem_backend *g, *c;
};

FIXTURE_SETUP(dec)
{
	ASSERT_EQ(0, moem_backend_open(gpu_name(), NULL, &self->g)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0,
		  moem_backend_open("cpu", &(struct moem_backend_opts){.isa = MOEM_CPU_ISA_SCALAR},
				    &self->c));
}

FIXTURE_TEARDOWN(dec)
{
	moem_backend_close(self->g);
	moem_backend_close(self->c);
}

/* The same host bytes on both backends. */
struct dbuf {
	moem_dptr g, c;
	uint64_t bytes;
};

static struct dbuf dput(FIXTURE_DATA(dec) * self, const void *host, uint64_t bytes)
{
	struct dbuf d = {tb_put(self->g, host, bytes), tb_put(self->c, host, bytes), bytes};

	return d;
}

static struct dbuf dfill(FIXTURE_DATA(dec) * self, int v, uint64_t bytes)
{
	struct dbuf d = {0, 0, bytes};

	if (!moem_be_alloc(self->g, bytes, &d.g))
		moem_be_memset(self->g, d.g, v, bytes, NULL);
	if (!moem_be_alloc(self->c, bytes, &d.c))
		moem_be_memset(self->c, d.c, v, bytes, NULL);
	return d;
}

static int dget(FIXTURE_DATA(dec) * self, const struct dbuf *d, void *g, void *c)
{
	int ret = tb_get(self->g, g, d->g, d->bytes);

	return ret ? ret : tb_get(self->c, c, d->c, d->bytes);
}

static void dfree(FIXTURE_DATA(dec) * self, struct dbuf *d)
{
	moem_be_free(self->g, d->g);
	moem_be_free(self->c, d->c);
}

TEST_F(dec, embed)
{
	const uint32_t B = 6, H = 300, V = 50;
	const int32_t ids[6] = {0, 49, 7, -1, 50, 7};
	uint16_t *tab = tb_rand_bf16(1, (size_t)V * H, 1.0);
	float *hg = malloc(4 * B * H), *hc = malloc(4 * B * H);
	struct dbuf di = dput(self, ids, sizeof(ids)), dt = dput(self, tab, 2 * (size_t)V * H);
	struct dbuf dh = dfill(self, 0x7f, 4 * B * H);
	struct moem_embed_args a = {B, H, V, di.g, dt.g, dh.g};

	ASSERT_EQ(0, moem_op_embed(self->g, NULL, &a)) TH_LOG("%s", moem_last_error());
	a = (struct moem_embed_args){B, H, V, di.c, dt.c, dh.c};
	ASSERT_EQ(0, moem_op_embed(self->c, NULL, &a));
	ASSERT_EQ(0, dget(self, &dh, hg, hc));
	ASSERT_EQ(0, memcmp(hg, hc, 4 * B * H));
	/* the rows are the table's, and out-of-table ids give zeros */
	EXPECT_EQ(moem_bf16_to_f32(tab[49 * H + 5]), hg[1 * H + 5]);
	EXPECT_EQ(0.0f, hg[3 * H + 17]);
	EXPECT_EQ(0.0f, hg[4 * H]);
	free(tab);
	free(hg);
	free(hc);
	dfree(self, &di);
	dfree(self, &dt);
	dfree(self, &dh);
}

/* y = W x on both backends at byte offset off (0: aligned rows), compared. */
static void matmul_case(struct __test_metadata *_metadata, FIXTURE_DATA(dec) * self, uint32_t B,
			uint32_t K, uint32_t R, uint32_t off)
{
	uint16_t *x = tb_rand_bf16(10 + B, (size_t)B * K + 8, 1.0);
	uint16_t *w = tb_rand_bf16(20 + R, (size_t)R * K + 8, 0.05);
	float *yg = malloc(4 * (size_t)B * R), *yc = malloc(4 * (size_t)B * R);
	float *y1 = malloc(4 * (size_t)R);
	struct dbuf dx = dput(self, x, 2 * ((size_t)B * K + 8));
	struct dbuf dw = dput(self, w, 2 * ((size_t)R * K + 8));
	struct dbuf dy = dfill(self, 0xff, 4 * (size_t)B * R);
	struct moem_matmul_args a = {B, K, R, dx.g + off, dw.g + off, dy.g};
	double worst = 0;

	ASSERT_EQ(0, moem_op_matmul(self->g, NULL, &a)) TH_LOG("%s", moem_last_error());
	a = (struct moem_matmul_args){B, K, R, dx.c + off, dw.c + off, dy.c};
	ASSERT_EQ(0, moem_op_matmul(self->c, NULL, &a));
	ASSERT_EQ(0, dget(self, &dy, yg, yc));
	for (uint32_t t = 0; t < B; t++)
		for (uint32_t r = 0; r < R; r++) {
			const uint16_t *xr = x + off / 2 + (size_t)t * K,
				       *wr = w + off / 2 + (size_t)r * K;
			double mag = 0, d = fabs((double)yg[t * R + r] - yc[t * R + r]);

			for (uint32_t i = 0; i < K; i++)
				mag += fabs((double)moem_bf16_to_f32(xr[i]) *
					    moem_bf16_to_f32(wr[i]));
			ASSERT_LE(d, 5e-5 * mag + 1e-30)
			TH_LOG("B %u K %u R %u off %u: t %u r %u: %.9g vs %.9g", B, K, R, off, t, r,
			       yg[t * R + r], yc[t * R + r]);
			worst = fmax(worst, d / (mag + 1e-30));
		}
	/* a token alone gives the bits it got in the batch */
	for (uint32_t t = 0; t < B; t += (B > 3 ? B / 3 : 1)) {
		a = (struct moem_matmul_args){1,	  K,   R, dx.g + off + (uint64_t)t * K * 2,
					      dw.g + off, dy.g};
		ASSERT_EQ(0, moem_op_matmul(self->g, NULL, &a));
		ASSERT_EQ(0, tb_get(self->g, y1, dy.g, 4 * (size_t)R));
		ASSERT_EQ(0, memcmp(y1, yg + (size_t)t * R, 4 * (size_t)R))
		TH_LOG("B %u K %u R %u: token %u alone differs from the batch", B, K, R, t);
	}
	TH_LOG("matmul B %u K %u R %u off %u: worst |dy| / sum|xw| = %.2e", B, K, R, off, worst);
	free(x);
	free(w);
	free(yg);
	free(yc);
	free(y1);
	dfree(self, &dx);
	dfree(self, &dw);
	dfree(self, &dy);
}

TEST_F_TIMEOUT(dec, matmul, 900)
{
	matmul_case(_metadata, self, 1, 256, 4096, 0); /* lm_head GEMV */
	matmul_case(_metadata, self, 7, 264, 100, 0);  /* K not a multiple of 256 */
	matmul_case(_metadata, self, 37, 512, 33, 0);  /* several token chunks, rows % 8 */
	matmul_case(_metadata, self, 5, 64, 24, 2);    /* rows not 16-byte aligned */
	matmul_case(_metadata, self, 3, 8, 5, 0);      /* K below a warp's width */
}

/*
 * Quantized weights (moem_quantize()'s bytes on both backends) against
 * the CPU backend's scalar table, which dequantizes a row exactly as
 * moem_dequantize_row() and dots it with the fp32 x. The CUDA kernel
 * dequantizes each weight with the same IEEE operations, so the two
 * differ in summation order alone. Bound (Higham, first order): a sum
 * of products carried through d sequential roundings is within d * u *
 * sum|x w| of the exact one (u = 2^-24). The CPU's dot_f32 rounds each
 * product (1), carries 16 lanes through K / 16 additions, adds its two
 * accumulators (1) and sums 16 lanes as a tree (4); the kernel FMAs
 * (no product rounding) K / 32 terms per lane and adds 32 lane sums in
 * order (32). The two results are then within
 *   (K / 16 + 6 + K / 32 + 32) * u * sum_i |x_i w_i|
 * of each other, w the dequantized weights (about 1.1e-5 for K = 1024).
 */
static void matmul_q_case(struct __test_metadata *_metadata, FIXTURE_DATA(dec) * self,
			  enum moem_prec p, uint32_t B, uint32_t K, uint32_t R, uint32_t off)
{
	const double tol = ((double)K / 16 + 6 + (double)K / 32 + 32) * 0x1p-24;
	uint16_t *x = tb_rand_bf16(30 + B, (size_t)B * K + 8, 1.0);
	uint16_t *w = tb_rand_bf16(40 + R, (size_t)R * K, 0.05);
	float *yg = malloc(4 * (size_t)B * R), *yc = malloc(4 * (size_t)B * R);
	float *y1 = malloc(4 * (size_t)R), *wr = malloc(4 * (size_t)K);
	struct moem_qmat_layout l;
	uint8_t *q;
	struct dbuf dx, dw, dy;
	struct moem_matmul_args a;
	double worst = 0;

	ASSERT_EQ(0, moem_qmat_layout(p, R, K, &l));
	q = calloc(1, l.bytes + off);
	ASSERT_NE(NULL, q);
	ASSERT_EQ(0, moem_quantize(p, w, R, K, q + off, l.bytes));
	dx = dput(self, x, 2 * ((size_t)B * K + 8));
	dw = dput(self, q, l.bytes + off);
	dy = dfill(self, 0xff, 4 * (size_t)B * R);
	a = (struct moem_matmul_args){B, K, R, dx.g + off, dw.g + off, dy.g, p};
	ASSERT_EQ(0, moem_op_matmul(self->g, NULL, &a)) TH_LOG("%s", moem_last_error());
	a = (struct moem_matmul_args){B, K, R, dx.c + off, dw.c + off, dy.c, p};
	ASSERT_EQ(0, moem_op_matmul(self->c, NULL, &a)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, dget(self, &dy, yg, yc));
	for (uint32_t r = 0; r < R; r++) {
		moem_dequantize_row(&l, q + off, r, wr);
		for (uint32_t t = 0; t < B; t++) {
			const uint16_t *xr = x + off / 2 + (size_t)t * K;
			double mag = 0, d = fabs((double)yg[t * R + r] - yc[t * R + r]);

			for (uint32_t i = 0; i < K; i++)
				mag += fabs((double)moem_bf16_to_f32(xr[i]) * wr[i]);
			ASSERT_LE(d, tol * mag + 1e-30)
			TH_LOG("%s B %u K %u R %u off %u: t %u r %u: %.9g vs %.9g",
			       moem_prec_name(p), B, K, R, off, t, r, yg[t * R + r], yc[t * R + r]);
			worst = fmax(worst, d / (mag + 1e-30));
		}
	}
	/* a token alone gives the bits it got in the batch */
	for (uint32_t t = 0; t < B; t += (B > 3 ? B / 3 : 1)) {
		a = (struct moem_matmul_args){.B = 1,
					      .K = K,
					      .R = R,
					      .x = dx.g + off + (uint64_t)t * K * 2,
					      .w = dw.g + off,
					      .y = dy.g,
					      .prec = p};
		ASSERT_EQ(0, moem_op_matmul(self->g, NULL, &a));
		ASSERT_EQ(0, tb_get(self->g, y1, dy.g, 4 * (size_t)R));
		ASSERT_EQ(0, memcmp(y1, yg + (size_t)t * R, 4 * (size_t)R))
		TH_LOG("%s B %u K %u R %u: token %u alone differs from the batch",
		       moem_prec_name(p), B, K, R, t);
	}
	TH_LOG("matmul %s B %u K %u R %u off %u: worst |dy| / sum|xw| = %.2e (bound %.2e)",
	       moem_prec_name(p), B, K, R, off, worst, tol);
	free(q);
	free(x);
	free(w);
	free(yg);
	free(yc);
	free(y1);
	free(wr);
	dfree(self, &dx);
	dfree(self, &dw);
	dfree(self, &dy);
}

TEST_F_TIMEOUT(dec, matmul_quantized, 900)
{
	for (int p = MOEM_PREC_Q8; p < MOEM_PREC_NR; p++) {
		const enum moem_prec pr = (enum moem_prec)p;

		matmul_q_case(_metadata, self, pr, 1, 1024, 520, 0); /* lm_head GEMV */
		matmul_q_case(_metadata, self, pr, 7, 384, 100, 0);  /* chunks % 32, rows % 8 */
		matmul_q_case(_metadata, self, pr, 37, 256, 33, 0);  /* several token chunks */
		matmul_q_case(_metadata, self, pr, 5, 128, 24, 2);   /* not 16-byte aligned */
	}
}

/* What the quantized matmul refuses, on both backends alike. */
TEST_F(dec, matmul_quantized_refused)
{
	struct moem_backend *be[2] = {self->g, self->c};
	struct dbuf d = dfill(self, 0, 1 << 20);

	for (int i = 0; i < 2; i++) {
		moem_dptr b = i ? d.c : d.g;
		struct moem_matmul_args a = {2, 200, 8, b, b, b, MOEM_PREC_Q8};

		/* K 200 is no whole number of q8's groups of 128; 7 is no precision */
		EXPECT_EQ(-EINVAL, moem_op_matmul(be[i], NULL, &a));
		EXPECT_NE(NULL, strstr(moem_last_error(), "multiple of 128"))
		TH_LOG("%s", moem_last_error());
		a = (struct moem_matmul_args){2, 192, 8, b, b, b + (512 << 10), MOEM_PREC_Q2};
		EXPECT_EQ(0, moem_op_matmul(be[i], NULL, &a)) TH_LOG("%s", moem_last_error());
		a.prec = (enum moem_prec)7;
		EXPECT_EQ(-EINVAL, moem_op_matmul(be[i], NULL, &a));
	}
	EXPECT_EQ(0, moem_be_sync(self->g));
	dfree(self, &d);
}

TEST_F(dec, rownorm)
{
	const uint32_t rows = 9, n = 200, xs = 232;
	float *x = tb_rand_f32(3, (size_t)rows * xs, 3.0);
	uint16_t *w = tb_rand_bf16(4, n, 1.0);
	float *fg = malloc(4 * (size_t)rows * xs), *fc = malloc(4 * (size_t)rows * xs);
	uint16_t *bg = malloc(2 * (size_t)rows * n), *bc = malloc(2 * (size_t)rows * n);
	struct dbuf dx = dput(self, x, 4 * (size_t)rows * xs), dw = dput(self, w, 2 * n);
	struct dbuf dy = dfill(self, 0, 2 * (size_t)rows * n);
	struct moem_rownorm_args a = {rows, n, xs, n, 1e-6f, dx.g, dw.g, dy.g, true};
	size_t exact = 0;

	/* into bf16 */
	ASSERT_EQ(0, moem_op_rownorm(self->g, NULL, &a)) TH_LOG("%s", moem_last_error());
	a.x = dx.c;
	a.weight = dw.c;
	a.y = dy.c;
	ASSERT_EQ(0, moem_op_rownorm(self->c, NULL, &a));
	ASSERT_EQ(0, dget(self, &dy, bg, bc));
	for (size_t i = 0; i < (size_t)rows * n; i++) {
		ASSERT_LE(tb_bf16_ulps(bg[i], bc[i]), 1) TH_LOG("bf16 element %zu", i);
	}
	/* f32 in place, strided: the gaps between rows stay untouched */
	a = (struct moem_rownorm_args){rows, n, xs, xs, 1e-5f, dx.g, dw.g, dx.g, false};
	ASSERT_EQ(0, moem_op_rownorm(self->g, NULL, &a));
	a.x = a.y = dx.c;
	a.weight = dw.c;
	ASSERT_EQ(0, moem_op_rownorm(self->c, NULL, &a));
	ASSERT_EQ(0, dget(self, &dx, fg, fc));
	for (size_t i = 0; i < (size_t)rows * xs; i++) {
		ASSERT_LE(tb_f32_ulps(fg[i], fc[i]), 1)
		TH_LOG("f32 element %zu: %.9g vs %.9g", i, fg[i], fc[i]);
		if (i % xs >= n) {
			ASSERT_EQ(moem_f32_bits(x[i]), moem_f32_bits(fg[i]));
		}
		exact += fg[i] == fc[i];
	}
	TH_LOG("rownorm: %zu of %zu f32 values bitwise equal", exact, (size_t)rows * xs);
	free(x);
	free(w);
	free(fg);
	free(fc);
	free(bg);
	free(bc);
	dfree(self, &dx);
	dfree(self, &dw);
	dfree(self, &dy);
}

TEST_F(dec, convert)
{
	const uint32_t rows = 70000, n = 3, xs = 5; /* more rows than one grid dimension */
	const size_t nx = (size_t)rows * xs;
	float *x = tb_rand_f32(5, nx, 4.0);
	float *fg = malloc(4 * nx), *fc = malloc(4 * nx);
	uint16_t *bg = malloc(2 * nx), *bc = malloc(2 * nx);
	struct dbuf dx = dput(self, x, 4 * nx), dy = dfill(self, 0, 2 * nx),
		    df = dfill(self, 0, 4 * nx);
	struct moem_convert_args a = {rows, n, xs, n, 1.5f, dx.g, dy.g, true};

	/* clamp into bf16 */
	ASSERT_EQ(0, moem_op_convert(self->g, NULL, &a)) TH_LOG("%s", moem_last_error());
	a.x = dx.c;
	a.y = dy.c;
	ASSERT_EQ(0, moem_op_convert(self->c, NULL, &a));
	ASSERT_EQ(0, dget(self, &dy, bg, bc));
	ASSERT_EQ(0, memcmp(bg, bc, 2 * (size_t)rows * n));
	EXPECT_LE(fabsf(moem_bf16_to_f32(bg[0])), 1.5f);
	/* f32 copy, strided out, no clamp */
	a = (struct moem_convert_args){rows, n, xs, 4, 0, dx.g, df.g, false};
	ASSERT_EQ(0, moem_op_convert(self->g, NULL, &a));
	a.x = dx.c;
	a.y = df.c;
	ASSERT_EQ(0, moem_op_convert(self->c, NULL, &a));
	ASSERT_EQ(0, dget(self, &df, fg, fc));
	ASSERT_EQ(0, memcmp(fg, fc, 4 * nx));
	/* in place, rows moving down (x == y, y_stride < x_stride): sequential */
	a = (struct moem_convert_args){300, n, xs, n, 2.0f, dx.g, dx.g, false};
	ASSERT_EQ(0, moem_op_convert(self->g, NULL, &a));
	a.x = a.y = dx.c;
	ASSERT_EQ(0, moem_op_convert(self->c, NULL, &a));
	ASSERT_EQ(0, dget(self, &dx, fg, fc));
	ASSERT_EQ(0, memcmp(fg, fc, 4 * nx));
	EXPECT_EQ(moem_f32_bits(fminf(fmaxf(x[299 * xs + 2], -2.0f), 2.0f)),
		  moem_f32_bits(fg[299 * n + 2]));
	free(x);
	free(fg);
	free(fc);
	free(bg);
	free(bc);
	dfree(self, &dx);
	dfree(self, &dy);
	dfree(self, &df);
}

TEST_F(dec, rope)
{
	/* T tokens x 3 heads of 40, rotating 16 values at offset 24 */
	const uint32_t T = 5, nh = 3, hs = 40, ts = 128, n_pos = 20, dim = 16;
	const int32_t pos[5] = {0, 19, 7, -1, 20}; /* the last two: left alone */
	float *x = tb_rand_f32(6, (size_t)T * ts, 1.0), *cs = tb_rand_f32(7, n_pos * dim / 2, 1.0);
	float *sn = tb_rand_f32(8, n_pos * dim / 2, 1.0);
	float *g = malloc(4 * (size_t)T * ts), *c = malloc(4 * (size_t)T * ts);
	struct dbuf dp = dput(self, pos, sizeof(pos)), dc = dput(self, cs, 4 * n_pos * dim / 2);
	struct dbuf ds = dput(self, sn, 4 * n_pos * dim / 2);

	for (int pairs = 0; pairs < 2; pairs++) {
		struct dbuf dx = dput(self, x, 4 * (size_t)T * ts);
		struct moem_rope_args a = {T,	  nh,	 ts,   hs,   24,   dim,
					   pairs, n_pos, dx.g, dp.g, dc.g, ds.g};

		ASSERT_EQ(0, moem_op_rope(self->g, NULL, &a)) TH_LOG("%s", moem_last_error());
		a.x = dx.c;
		a.pos = dp.c;
		a.cos = dc.c;
		a.sin = ds.c;
		ASSERT_EQ(0, moem_op_rope(self->c, NULL, &a));
		ASSERT_EQ(0, dget(self, &dx, g, c));
		ASSERT_EQ(0, memcmp(g, c, 4 * (size_t)T * ts)) TH_LOG("pairs %d", pairs);
		ASSERT_NE(0, memcmp(g, x, 4 * (size_t)T * ts));
		ASSERT_EQ(0, memcmp(g + 3 * ts, x + 3 * ts, 4 * 2 * ts)); /* pos -1, 20 */
		ASSERT_EQ(0, memcmp(g, x, 4 * 24));			  /* before off */
		dfree(self, &dx);
	}
	free(x);
	free(cs);
	free(sn);
	free(g);
	free(c);
	dfree(self, &dp);
	dfree(self, &dc);
	dfree(self, &ds);
}

TEST_F(dec, head_matmul)
{
	/* MLA's absorption: 4 heads, W_h = [nope + vd][rank] rows of kv_b_proj */
	const uint32_t T = 3, nh = 4, rank = 160, nope = 24, vd = 20, rd = 8;
	const uint32_t qd = nope + rd, lat = rank + rd;
	const uint64_t wn = (uint64_t)nh * (nope + vd) * rank;
	float *q = tb_rand_f32(9, (size_t)T * nh * qd, 1.0);
	float *ol = tb_rand_f32(10, (size_t)T * nh * rank, 1.0);
	uint16_t *w = tb_rand_bf16(11, wn, 0.1);
	float *g = malloc(4 * (size_t)T * nh * lat), *c = malloc(4 * (size_t)T * nh * lat);
	struct dbuf dq = dput(self, q, 4 * (size_t)T * nh * qd);
	struct dbuf dol = dput(self, ol, 4 * (size_t)T * nh * rank), dw = dput(self, w, 2 * wn);
	struct dbuf dy = dfill(self, 0, 4 * (size_t)T * nh * lat);

	for (int tr = 0; tr < 2; tr++) {
		struct moem_head_matmul_args uk = {
			.T = T,
			.n_heads = nh,
			.in_dim = tr ? nope : rank,
			.out_dim = tr ? rank : vd,
			.transpose = tr,
			.x_tok_stride = nh * (tr ? qd : rank),
			.x_head_stride = tr ? qd : rank,
			.w_head_stride = (uint64_t)(nope + vd) * rank,
			.w_row_stride = rank,
			.y_tok_stride = nh * lat,
			.y_head_stride = lat,
		};

		uk.x = tr ? dq.g : dol.g;
		uk.w = dw.g + (tr ? 0 : (uint64_t)nope * rank * 2);
		uk.y = dy.g;
		ASSERT_EQ(0, moem_op_head_matmul(self->g, NULL, &uk))
		TH_LOG("%s", moem_last_error());
		uk.x = tr ? dq.c : dol.c;
		uk.w = dw.c + (tr ? 0 : (uint64_t)nope * rank * 2);
		uk.y = dy.c;
		ASSERT_EQ(0, moem_op_head_matmul(self->c, NULL, &uk));
		ASSERT_EQ(0, dget(self, &dy, g, c));
		ASSERT_EQ(0, memcmp(g, c, 4 * (size_t)T * nh * lat)) TH_LOG("transpose %d", tr);
	}
	/* one value by hand (the transpose pass ran last): token 2, head 3, output 7 */
	{
		float acc = 0;

		for (uint32_t i = 0; i < nope; i++)
			acc += q[(2 * nh + 3) * qd + i] *
			       moem_bf16_to_f32(
				       w[3ull * (nope + vd) * rank + (size_t)i * rank + 7]);
		EXPECT_EQ(moem_f32_bits(acc), moem_f32_bits(g[(2 * nh + 3) * lat + 7]));
	}
	free(q);
	free(ol);
	free(w);
	free(g);
	free(c);
	dfree(self, &dq);
	dfree(self, &dol);
	dfree(self, &dw);
	dfree(self, &dy);
}

TEST_F(dec, kv_store)
{
	const uint32_t nb = 6, nl = 2, bt = 4, entry = 10, ss = 12, T = 6;
	const int32_t tables[6] = {3, 0, -1, 5, /* sequence A */ 1, 2 /* B */};
	const int32_t pos[6] = {0, 5, 9, 7, 13, -1}; /* 9: a missing block; -1: none */
	const uint32_t tab[6] = {0, 0, 0, 4, 0, 0};
	const size_t np = (size_t)nb * nl * bt * entry;
	float *pool = tb_rand_f32(12, np, 1.0), *src = tb_rand_f32(13, (size_t)T * ss, 1.0);
	float *g = malloc(4 * np), *c = malloc(4 * np);
	struct dbuf dpool = dput(self, pool, 4 * np), dtabs = dput(self, tables, sizeof(tables));
	struct dbuf dsrc = dput(self, src, 4 * (size_t)T * ss), dpos = dput(self, pos, sizeof(pos));
	struct dbuf dtab = dput(self, tab, sizeof(tab));
	struct moem_kv_store_args a = {.kv = {dpool.g, nb, nl, bt, entry, 1, dtabs.g},
				       .T = T,
				       .src_stride = ss,
				       .src = dsrc.g,
				       .pos = dpos.g,
				       .tab = dtab.g};
	size_t changed = 0;

	ASSERT_EQ(0, moem_op_kv_store(self->g, NULL, &a)) TH_LOG("%s", moem_last_error());
	a.kv.pool = dpool.c;
	a.kv.tables = dtabs.c;
	a.src = dsrc.c;
	a.pos = dpos.c;
	a.tab = dtab.c;
	ASSERT_EQ(0, moem_op_kv_store(self->c, NULL, &a));
	ASSERT_EQ(0, dget(self, &dpool, g, c));
	ASSERT_EQ(0, memcmp(g, c, 4 * np));
	for (size_t i = 0; i < np; i++)
		changed += g[i] != pool[i];
	EXPECT_EQ(4 * entry, changed); /* four tokens stored, two not */
	/* token 3 (B, position 7): block 2 slot 3 of layer 1 */
	EXPECT_EQ(0, memcmp(g + ((2 * nl + 1) * bt + 3) * entry, src + 3 * ss, 4 * entry));
	free(pool);
	free(src);
	free(g);
	free(c);
	dfree(self, &dpool);
	dfree(self, &dtabs);
	dfree(self, &dsrc);
	dfree(self, &dpos);
	dfree(self, &dtab);
}

/* ---- attention ---- */

struct attn_case {
	const char *what;
	uint32_t n_heads, n_kv_heads, qk_dim, v_dim, window;
	bool mla;	 /* one kv head, value = prefix of the key */
	uint32_t n_seqs; /* sequences of max_ctx positions each */
	uint32_t max_ctx;
	int32_t hole; /* a block table entry of sequence 1 set to -1, or -1 for none */
	uint32_t T;
	const int32_t *pos;  /* [T] */
	const uint32_t *seq; /* [T] */
};

static void attn_run(struct __test_metadata *_metadata, FIXTURE_DATA(dec) * self,
		     const struct attn_case *k)
{
	const uint32_t bt = 16, nl = 2, mb = (k->max_ctx + bt - 1) / bt, nb = k->n_seqs * mb + 3;
	const uint32_t entry = k->mla ? k->qk_dim : k->n_kv_heads * (k->qk_dim + k->v_dim);
	const uint32_t qs = k->n_heads * k->qk_dim + 8, ow = k->n_heads * k->v_dim;
	const size_t np = (size_t)nb * nl * bt * entry;
	float *pool = tb_rand_f32(20, np, 1.0), *q = tb_rand_f32(21, (size_t)k->T * qs, 1.0);
	int32_t *tables = malloc(4 * (size_t)k->n_seqs * mb);
	uint32_t *tab = malloc(4 * k->T);
	float *og = malloc(4 * (size_t)k->T * ow), *oc = malloc(4 * (size_t)k->T * ow);
	float *o1 = malloc(4 * (size_t)ow);
	struct moem_rng r;
	struct dbuf dpool, dtables, dq, dpos, dtab, dout;
	struct moem_attn_args a;
	double worst = 0;

	/* blocks handed out in a scrambled order, as a long-running pool would */
	moem_rng_seed(&r, 22, 0);
	for (uint32_t i = 0; i < k->n_seqs * mb; i++)
		tables[i] = (int32_t)((i * 7 + 3) % (nb - 1));
	for (uint32_t i = k->n_seqs * mb; i-- > 1;) {
		uint32_t j = (uint32_t)moem_rng_below(&r, i + 1);
		int32_t v = tables[i];

		tables[i] = tables[j];
		tables[j] = v;
	}
	if (k->hole >= 0)
		tables[mb + k->hole] = -1;
	for (uint32_t t = 0; t < k->T; t++)
		tab[t] = k->seq[t] * mb;
	dpool = dput(self, pool, 4 * np);
	dtables = dput(self, tables, 4 * (size_t)k->n_seqs * mb);
	dq = dput(self, q, 4 * (size_t)k->T * qs);
	dpos = dput(self, k->pos, 4 * k->T);
	dtab = dput(self, tab, 4 * k->T);
	dout = dfill(self, 0x7f, 4 * (size_t)k->T * ow);
	a = (struct moem_attn_args){
		.kv = {dpool.g, nb, nl, bt, entry, 1, dtables.g},
		.T = k->T,
		.n_heads = k->n_heads,
		.n_kv_heads = k->n_kv_heads,
		.qk_dim = k->qk_dim,
		.v_dim = k->v_dim,
		.k_off = 0,
		.v_off = k->mla ? 0 : k->n_kv_heads * k->qk_dim,
		.q_stride = qs,
		.window = k->window,
		.scale = 2.0f / sqrtf((float)k->qk_dim), /* peakier than 1/sqrt(d) */
		.q = dq.g,
		.pos = dpos.g,
		.tab = dtab.g,
		.out = dout.g,
	};
	ASSERT_EQ(0, moem_op_attention(self->g, NULL, &a)) TH_LOG("%s", moem_last_error());
	a.kv.pool = dpool.c;
	a.kv.tables = dtables.c;
	a.q = dq.c;
	a.pos = dpos.c;
	a.tab = dtab.c;
	a.out = dout.c;
	ASSERT_EQ(0, moem_op_attention(self->c, NULL, &a));
	ASSERT_EQ(0, dget(self, &dout, og, oc));
	for (size_t i = 0; i < (size_t)k->T * ow; i++) {
		const double d = fabs((double)og[i] - oc[i]);

		ASSERT_LE(d, 2e-5)
		TH_LOG("%s: token %zu head %zu value %zu: %.9g vs %.9g", k->what, i / ow,
		       i % ow / k->v_dim, i % k->v_dim, og[i], oc[i]);
		worst = fmax(worst, d);
	}
	/* a token alone: the bits it got in the batch */
	a.kv.pool = dpool.g;
	a.kv.tables = dtables.g;
	a.q = dq.g;
	a.T = 1;
	for (uint32_t t = 0; t < k->T; t += 1 + k->T / 4) {
		a.pos = dpos.g + 4ull * t;
		a.tab = dtab.g + 4ull * t;
		a.q = dq.g + 4ull * t * qs;
		a.out = dout.g;
		ASSERT_EQ(0, moem_op_attention(self->g, NULL, &a));
		ASSERT_EQ(0, tb_get(self->g, o1, dout.g, 4 * (size_t)ow));
		ASSERT_EQ(0, memcmp(o1, og + (size_t)t * ow, 4 * (size_t)ow))
		TH_LOG("%s: token %u alone differs from the batch", k->what, t);
	}
	TH_LOG("attention %s: %u tokens, worst |dout| %.2e", k->what, k->T, worst);
	free(pool);
	free(q);
	free(tables);
	free(tab);
	free(og);
	free(oc);
	free(o1);
	dfree(self, &dpool);
	dfree(self, &dtables);
	dfree(self, &dq);
	dfree(self, &dpos);
	dfree(self, &dtab);
	dfree(self, &dout);
}

TEST_F_TIMEOUT(dec, attention_gqa_long_context, 1200)
{
	/* 2999 keys: 94 splits of 32 (at most MOEM_K_ATTN_SPLITS of them) */
	static const int32_t pos[] = {0, 2999, 37, 130, -1, 64, 2047, 2048};
	static const uint32_t seq[] = {0, 0, 1, 0, 1, 1, 0, 1};
	const struct attn_case k = {"gqa 8/2 x 64", 8,	2, 64,	64, 0, false, 2,
				    3000,	    -1, 8, pos, seq};

	attn_run(_metadata, self, &k);
}

TEST_F_TIMEOUT(dec, attention_window_and_holes, 1200)
{
	/* a sliding window of 100 keys; sequence 1 lost its block 2 (keys 32..47) */
	static const int32_t pos[] = {50, 99, 100, 700, 40, 45, 47, 48, 300};
	static const uint32_t seq[] = {0, 0, 0, 0, 1, 1, 1, 1, 1};
	const struct attn_case w = {"window 100", 4, 4, 32, 32, 100, false, 2, 800, 2, 9, pos, seq};
	const struct attn_case h = {"holes", 6, 3, 48, 40, 0, false, 2, 800, 2, 9, pos, seq};

	attn_run(_metadata, self, &w);
	attn_run(_metadata, self, &h);
}

TEST_F_TIMEOUT(dec, attention_prefill_chunk, 1200)
{
	/* 48 query tokens of one sequence at positions 100..147, plus a decode token */
	int32_t pos[49];
	uint32_t seq[49];
	struct attn_case k = {"prefill", 8, 1, 32, 32, 0, false, 2, 400, -1, 49, pos, seq};

	for (uint32_t i = 0; i < 48; i++) {
		pos[i] = 100 + (int32_t)i;
		seq[i] = 0;
	}
	pos[48] = 399;
	seq[48] = 1;
	attn_run(_metadata, self, &k);
}

TEST_F_TIMEOUT(dec, attention_mla_latent, 1200)
{
	/* DeepSeek-V2-Lite's absorbed MLA: 16 heads over one latent kv head of
	 * 512 + 64, values its first 512 (7 + 7 + 2 heads per block) */
	static const int32_t pos[] = {0, 130, 77};
	static const uint32_t seq[] = {0, 1, 0};
	const struct attn_case k = {
		"mla 16 x 576/512", 16, 1, 576, 512, 0, true, 2, 140, -1, 3, pos, seq};
	/* a small latent with 12 heads: blocks of 8 + 4 heads, many splits */
	static const int32_t pos2[] = {2500, 3, 1200, 2600};
	static const uint32_t seq2[] = {0, 1, 1, 0};
	const struct attn_case s = {
		"mla 12 x 80/64", 12, 1, 80, 64, 0, true, 2, 2700, -1, 4, pos2, seq2};

	attn_run(_metadata, self, &k);
	attn_run(_metadata, self, &s);
}

TEST_F(dec, attention_refuses_huge_heads_on_cuda)
{
	struct moem_attn_args a = {.kv = {1, 1, 1, 16, 10000, 0, 1},
				   .T = 1,
				   .n_heads = 1,
				   .n_kv_heads = 1,
				   .qk_dim = 5000,
				   .v_dim = 5000,
				   .q_stride = 5000,
				   .scale = 1,
				   .q = 1,
				   .pos = 1,
				   .tab = 1,
				   .out = 1};

	if (moem_backend_kind(self->g) != MOEM_BACKEND_CUDA)
		SKIP(return, "the limit is the CUDA kernel's");
	EXPECT_EQ(-EINVAL, moem_op_attention(self->g, NULL, &a));
	EXPECT_NE(NULL, strstr(moem_last_error(), "at most"));
}

GPU_TEST_MAIN
