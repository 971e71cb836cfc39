// SPDX-License-Identifier: GPL-2.0-only
/*
 * Quantization formats: layouts, round-trip error within the documented
 * per-group bound, exact rounding rules, and the FFN output error order
 * q2 > q4 > q8 > bf16 (= 0).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/half.h>
#include <moem/quant.h>
#include <moem/rng.h>

#include "kselftest_harness.h"

static uint16_t *random_bf16(uint32_t n, uint64_t seed, double scale)
{
	uint16_t *w = malloc(sizeof(uint16_t) * n);
	struct moem_rng r;

	moem_rng_seed(&r, seed, 0);
	for (uint32_t i = 0; i < n; i++)
		w[i] = moem_f32_to_bf16((float)(moem_rng_normal(&r) * scale));
	return w;
}

TEST(layouts)
{
	struct moem_qmat_layout l;
	struct moem_expert_layout e;

	ASSERT_EQ(0, moem_qmat_layout(MOEM_PREC_Q4, 768, 2048, &l));
	EXPECT_EQ(1024u, l.row_bytes);
	EXPECT_EQ(16u, l.groups_per_row);
	EXPECT_EQ(768u * 1024, l.scale_off);
	EXPECT_EQ(l.scale_off + 768u * 16 * 2, l.min_off);
	ASSERT_EQ(0, moem_qmat_layout(MOEM_PREC_Q2, 4, 128, &l));
	EXPECT_EQ(32u, l.row_bytes);
	EXPECT_EQ(2u, l.groups_per_row);
	EXPECT_EQ(-EINVAL, moem_qmat_layout(MOEM_PREC_Q4, 4, 100, &l));
	EXPECT_EQ(-EINVAL, moem_qmat_layout(MOEM_PREC_Q8, 0, 128, &l));
	ASSERT_EQ(0, moem_expert_layout(MOEM_PREC_BF16, 2048, 768, &e));
	EXPECT_EQ(0u, e.bytes % MOEM_QMAT_ALIGN);
	EXPECT_EQ(3ull * 2048 * 768 * 2, e.bytes);
	ASSERT_EQ(0, moem_expert_layout(MOEM_PREC_Q4, 2048, 768, &e));
	EXPECT_LT(e.bytes * 3.5, 3.0 * 2048 * 768 * 2);
}

TEST(names)
{
	enum moem_prec p;
	uint32_t mask;

	ASSERT_EQ(0, moem_prec_parse("q4", &p));
	EXPECT_EQ(MOEM_PREC_Q4, p);
	EXPECT_EQ(-EINVAL, moem_prec_parse("q3", &p));
	ASSERT_EQ(0, moem_prec_parse_list("bf16,q4,q2", &mask));
	EXPECT_EQ((1u << MOEM_PREC_BF16) | (1u << MOEM_PREC_Q4) | (1u << MOEM_PREC_Q2), mask);
	EXPECT_EQ(-EINVAL, moem_prec_parse_list("q4,q4", &mask));
	EXPECT_EQ(-EINVAL, moem_prec_parse_list("", &mask));
}

static void check_roundtrip(struct __test_metadata *_metadata, enum moem_prec p, double scale)
{
	const uint32_t rows = 64, cols = 512;
	uint16_t *w = random_bf16(rows * cols, 7 + p, scale);
	struct moem_qmat_layout l;
	float *row = malloc(sizeof(float) * cols);
	uint8_t *q;

	ASSERT_EQ(0, moem_qmat_layout(p, rows, cols, &l));
	q = malloc(l.bytes);
	ASSERT_EQ(0, moem_quantize(p, w, rows, cols, q, l.bytes));
	for (uint32_t r = 0; r < rows; r++) {
		moem_dequantize_row(&l, q, r, row);
		for (uint32_t g = 0; g < (l.group ? l.groups_per_row : 1); g++) {
			uint32_t n = l.group ? l.group : cols, base = g * n;
			float mn = INFINITY, mx = -INFINITY;
			double bound;

			for (uint32_t i = 0; i < n; i++) {
				float v = moem_bf16_to_f32(w[r * cols + base + i]);

				mn = fminf(mn, v);
				mx = fmaxf(mx, v);
			}
			bound = moem_quant_group_bound(&l, q, r, g, mn, mx);
			for (uint32_t i = 0; i < n; i++) {
				double err = fabs(row[base + i] -
						  moem_bf16_to_f32(w[r * cols + base + i]));

				ASSERT_LE(err, bound)
				TH_LOG("%s r=%u g=%u i=%u err=%g bound=%g", moem_prec_name(p), r, g,
				       i, err, bound);
			}
		}
	}
	free(q);
	free(row);
	free(w);
}

TEST(roundtrip_within_bound)
{
	for (int p = 0; p < MOEM_PREC_NR; p++) {
		check_roundtrip(_metadata, (enum moem_prec)p, 0.02);
		check_roundtrip(_metadata, (enum moem_prec)p, 3.0);
	}
}

TEST(rounding_rules)
{
	/* One q4 group: 0..15 exactly representable, min 0, scale 1. */
	uint16_t w[128];
	struct moem_qmat_layout l;
	uint8_t q[4096];
	float out[128];

	for (int i = 0; i < 128; i++)
		w[i] = moem_f32_to_bf16((float)(i % 16));
	ASSERT_EQ(0, moem_qmat_layout(MOEM_PREC_Q4, 1, 128, &l));
	ASSERT_EQ(0, moem_quantize(MOEM_PREC_Q4, w, 1, 128, q, sizeof(q)));
	EXPECT_EQ(0x10, q[0]); /* element 0 low nibble = 0, element 1 high nibble = 1 */
	EXPECT_EQ(0xfe, q[7]);
	moem_dequantize_row(&l, q, 0, out);
	for (int i = 0; i < 128; i++) {
		EXPECT_EQ((float)(i % 16), out[i]);
	}
	/* Constant group: asymmetric scale 0, every value exact through min. */
	for (int i = 0; i < 128; i++)
		w[i] = moem_f32_to_bf16(-0.75f);
	ASSERT_EQ(0, moem_quantize(MOEM_PREC_Q4, w, 1, 128, q, sizeof(q)));
	EXPECT_EQ(0, ((uint16_t *)(q + l.scale_off))[0]);
	moem_dequantize_row(&l, q, 0, out);
	EXPECT_EQ(-0.75f, out[5]);
	/* q8 is symmetric: -0.75 becomes -127 steps of f16(0.75 / 127). */
	ASSERT_EQ(0, moem_quantize(MOEM_PREC_Q8, w, 1, 128, q, sizeof(q)));
	EXPECT_EQ(-127, (int8_t)q[5]);
	EXPECT_EQ(moem_f32_to_f16(0.75f / 127.0f), ((uint16_t *)(q + 256))[0]);
	/* Values out of fp16 range are refused, not silently saturated. */
	w[3] = moem_f32_to_bf16(1e30f);
	EXPECT_EQ(-ERANGE, moem_quantize(MOEM_PREC_Q4, w, 1, 128, q, sizeof(q)));
	/* Too small a buffer. */
	EXPECT_EQ(-ENOSPC, moem_quantize(MOEM_PREC_Q4, w, 1, 128, q, 16));
}

TEST(ffn_error_order)
{
	const uint32_t H = 256, I = 128;
	double err[MOEM_PREC_NR], *ref = NULL;
	uint16_t *gate = random_bf16(I * H, 11, 0.06), *up = random_bf16(I * H, 12, 0.06);
	uint16_t *down = random_bf16(H * I, 13, 0.06);
	float *x = malloc(sizeof(float) * H);
	double *y = malloc(sizeof(double) * H);
	struct moem_rng r;

	moem_rng_seed(&r, 99, 0);
	for (uint32_t i = 0; i < H; i++)
		x[i] = (float)moem_rng_normal(&r);
	for (int p = 0; p < MOEM_PREC_NR; p++) {
		struct moem_expert_layout l;
		uint8_t *blob;
		double num = 0, den = 0;

		ASSERT_EQ(0, moem_expert_layout((enum moem_prec)p, H, I, &l));
		blob = calloc(1, l.bytes);
		ASSERT_EQ(0,
			  moem_quantize(l.prec, gate, I, H, blob + l.mat_off[0], l.mat[0].bytes));
		ASSERT_EQ(0, moem_quantize(l.prec, up, I, H, blob + l.mat_off[1], l.mat[1].bytes));
		ASSERT_EQ(0,
			  moem_quantize(l.prec, down, H, I, blob + l.mat_off[2], l.mat[2].bytes));
		ASSERT_EQ(0, moem_ffn_ref(&l, blob, x, y));
		if (p == MOEM_PREC_BF16) {
			ref = malloc(sizeof(double) * H);
			memcpy(ref, y, sizeof(double) * H);
		}
		for (uint32_t i = 0; i < H; i++) {
			num += (y[i] - ref[i]) * (y[i] - ref[i]);
			den += ref[i] * ref[i];
		}
		err[p] = sqrt(num / den);
		TH_LOG("%s relative FFN output error %.5f", moem_prec_name(l.prec), err[p]);
		free(blob);
	}
	EXPECT_EQ(0.0, err[MOEM_PREC_BF16]);
	EXPECT_LT(err[MOEM_PREC_Q8], err[MOEM_PREC_Q4]);
	EXPECT_LT(err[MOEM_PREC_Q4], err[MOEM_PREC_Q2]);
	EXPECT_LT(err[MOEM_PREC_Q8], 0.02);
	free(ref);
	free(gate);
	free(up);
	free(down);
	free(x);
	free(y);
}

TEST_HARNESS_MAIN
