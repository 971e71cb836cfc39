// SPDX-License-Identifier: GPL-2.0-only
/*
 * AVX-512 row kernels (kern.h) with BF16 and VNNI, after ggml-cpu's and
 * KTransformers' AVX-512 paths: bf16 weights against bf16 activations
 * with vdpbf16ps (two bf16 products per fp32 lane, exact products); q8,
 * q4 and q2 weights against int8 activations with vpdpbusd (four u8 x s8
 * products per 32-bit lane, exact within a 64-element block). vpdpbusd
 * wants its first operand unsigned: q4/q2 codes are; q8 weights are not,
 * so the activations go in biased (q + 128, format QU8) and the bias,
 * 128 x (sum of the block's weights), is taken off once per row and
 * block for all tokens.
 *
 * Per output the order is: lane j of one 16-wide accumulator takes,
 * block by block in k order (bf16: 32 elements at a time), then a
 * 16-to-1 sum of fixed shape; q4/q2 add the min term last, as AVX2 does.
 * Rows and tokens are interleaved, never merged.
 *
 * The unit tests also compile this file against SIMDe's portable
 * AVX-512 (MOEM_CPU_SIMDE), so its logic is checked on machines without
 * AVX-512; the table is then moem_cpu_kern_avx512_emu.
 */
#include <string.h>

#ifdef MOEM_CPU_SIMDE
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <stdint.h>
typedef simde__m512bh bh512;
#define KERN_TABLE moem_cpu_kern_avx512_emu
/* SIMDe 0.7 has no _mm512_cvtepi32_ps: int32 to float rounds to nearest, as vcvtdq2ps does. */
static inline simde__m512 emu_cvtepi32_ps(simde__m512i v)
{
	int32_t i[16];
	float f[16];

	memcpy(i, &v, sizeof(i));
	for (int k = 0; k < 16; k++)
		f[k] = (float)i[k];
	return simde_mm512_loadu_ps(f);
}
#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps(v) emu_cvtepi32_ps(v)
#else
#include <immintrin.h>
typedef __m512bh bh512;
#define KERN_TABLE moem_cpu_kern_avx512
#endif

#include "kern.h"

#define INL static inline __attribute__((always_inline))

INL float hsum16(__m512 v)
{
	__m256 lo = _mm512_castps512_ps256(v);
	__m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
	__m256 s8 = _mm256_add_ps(lo, hi);
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

INL bh512 load_bh(const void *p)
{
	bh512 v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static void f16_row(const uint16_t *in, float *out, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		out[i] = moem_f16_to_f32(in[i]);
}

/* ---- bf16: R rows x T tokens, vdpbf16ps, one accumulator per output ------ */

/*
 * R <= 4 rows x T <= 4 tokens: 16 accumulators, 4 weight vectors and x in
 * 32 zmm. The loops over rows and tokens are unrolled by pragma: at -O2
 * GCC otherwise keeps the accumulator array on the stack (a store and a
 * reload per vdpbf16ps).
 */
INL void bf16_tile(const uint16_t *w0, size_t ldw, const uint16_t *const *xr, uint32_t K,
		   const int R, const int T, float *y, uint32_t ldy)
{
	__m512 acc[4][4];

#pragma GCC unroll 4
	for (int r = 0; r < R; r++) {
#pragma GCC unroll 4
		for (int t = 0; t < T; t++)
			acc[r][t] = _mm512_setzero_ps();
	}
	for (uint32_t k = 0; k < K; k += 32) {
		bh512 w[4];

#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
			w[r] = load_bh(w0 + r * ldw + k);
#pragma GCC unroll 4
		for (int t = 0; t < T; t++) {
			bh512 x = load_bh(xr[t] + k);

#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
				acc[r][t] = _mm512_dpbf16_ps(acc[r][t], w[r], x);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++) {
#pragma GCC unroll 4
		for (int t = 0; t < T; t++)
			y[(size_t)t * ldy + r] = hsum16(acc[r][t]);
	}
}

#define TILE_T(fn, R, T, ...)                           \
	do {                                            \
		switch (T) {                            \
		case 1:                                 \
			fn(__VA_ARGS__, R, 1, y_, ldy); \
			break;                          \
		case 2:                                 \
			fn(__VA_ARGS__, R, 2, y_, ldy); \
			break;                          \
		case 3:                                 \
			fn(__VA_ARGS__, R, 3, y_, ldy); \
			break;                          \
		default:                                \
			fn(__VA_ARGS__, R, 4, y_, ldy); \
			break;                          \
		}                                       \
	} while (0)

static void avx512_bf16(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0,
			uint32_t r1, const struct cpu_act *x, const uint32_t *tok, uint32_t T,
			float *y, uint32_t ldy, float *scratch)
{
	const uint16_t *W = (const uint16_t *)(const void *)(mat + l->data_off);
	const uint16_t *xb = x->v[CPU_ACT_BF16];
	const uint32_t K = l->cols;

	for (uint32_t i = 0; i < T; i += 4) {
		const uint16_t *xr[4];
		uint32_t n = T - i < 4 ? T - i : 4, r = r0;

		for (uint32_t t = 0; t < n; t++)
			xr[t] = xb + (size_t)tok[i + t] * K;
		for (; r + 4 <= r1; r += 4) {
			float *y_ = y + (size_t)i * ldy + (r - r0);

			TILE_T(bf16_tile, 4, n, W + (size_t)r * K, K, xr, K);
		}
		for (; r + 2 <= r1; r += 2) {
			float *y_ = y + (size_t)i * ldy + (r - r0);

			TILE_T(bf16_tile, 2, n, W + (size_t)r * K, K, xr, K);
		}
		if (r < r1) {
			float *y_ = y + (size_t)i * ldy + (r - r0);

			TILE_T(bf16_tile, 1, n, W + (size_t)r * K, K, xr, K);
		}
	}
}

/* ---- quantized: 1 row x T tokens, vpdpbusd over blocks of 64 --------------- */

/*
 * The min term of q4/q2 (sum over groups of min x the group's activation
 * sum, in group order), out of line so that every tile shape runs the
 * very same instructions for it.
 */
static __attribute__((noinline)) float min_term(const float *mn, const float *xs, uint32_t ng,
						uint32_t gshift)
{
	float m = 0.0f;

	for (uint32_t g = 0; g < ng; g++)
		m += mn[g] * (gshift ? xs[2 * g] + xs[2 * g + 1] : xs[g]);
	return m;
}

INL void q_tile(enum moem_prec p, const uint8_t *wq, const float *sw, const float *mn, uint32_t NB,
		uint32_t gshift, const int8_t *const *xq, const float *const *qs,
		const float *const *xs, const int T, float *y, uint32_t ldy)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3);
	const __m512i bias = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
	/* q2: the 16-byte block in four 128-bit lanes shifted right by 0, 2, 4, 6 */
	const __m512i sh =
		_mm512_set_epi32(0x60006, 0x60006, 0x60006, 0x60006, 0x40004, 0x40004, 0x40004,
				 0x40004, 0x20002, 0x20002, 0x20002, 0x20002, 0, 0, 0, 0);
	__m512 acc[4];

#pragma GCC unroll 4
	for (int t = 0; t < T; t++)
		acc[t] = _mm512_setzero_ps();
	for (uint32_t b = 0; b < NB; b++) {
		float s = sw[b >> gshift];
		__m512i w, comp = zero;

		if (p == MOEM_PREC_Q8) {
			w = _mm512_loadu_si512((const void *)(wq + 64 * b));
			comp = _mm512_dpbusd_epi32(zero, bias, w);
		} else if (p == MOEM_PREC_Q4) {
			__m256i v =
				_mm256_loadu_si256((const __m256i *)(const void *)(wq + 32 * b));
			__m256i lo = _mm256_and_si256(v, _mm512_castsi512_si256(m4));
			__m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4),
						      _mm512_castsi512_si256(m4));

			w = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
		} else {
			__m128i v = _mm_loadu_si128((const __m128i *)(const void *)(wq + 16 * b));

			w = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i32x4(v), sh), m2);
		}
#pragma GCC unroll 4
		for (int t = 0; t < T; t++) {
			__m512i xv = _mm512_loadu_si512((const void *)(xq[t] + 64 * (size_t)b));
			__m512i d =
				p == MOEM_PREC_Q8
					? _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, xv, w), comp)
					: _mm512_dpbusd_epi32(zero, w, xv);

			acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d),
						 _mm512_set1_ps(s * qs[t][b]), acc[t]);
		}
	}
#pragma GCC unroll 4
	for (int t = 0; t < T; t++) {
		float v = hsum16(acc[t]);

		if (p != MOEM_PREC_Q8)
			v += min_term(mn, xs[t], NB >> gshift, gshift);
		y[(size_t)t * ldy] = v;
	}
}

INL void avx512_q(enum moem_prec p, enum cpu_act_fmt fmt, const struct moem_qmat_layout *l,
		  const uint8_t *mat, uint32_t r0, uint32_t r1, const struct cpu_act *x,
		  const uint32_t *tok, uint32_t T, float *y, uint32_t ldy, float *scratch)
{
	const uint32_t K = l->cols, NB = K / MOEM_CPU_QBLOCK, G = l->groups_per_row;
	const uint32_t gshift = p == MOEM_PREC_Q2 ? 0 : 1;
	const int8_t *xq_all = x->v[fmt];
	float *sw = scratch, *mn = scratch + G;

	for (uint32_t r = r0; r < r1; r++) {
		const uint8_t *wq = mat + l->data_off + (size_t)r * l->row_bytes;

		f16_row((const uint16_t *)(const void *)(mat + l->scale_off) + (size_t)r * G, sw,
			G);
		if (p != MOEM_PREC_Q8)
			f16_row((const uint16_t *)(const void *)(mat + l->min_off) + (size_t)r * G,
				mn, G);
		for (uint32_t i = 0; i < T; i += 4) {
			const int8_t *xq[4];
			const float *qs[4], *xs[4];
			uint32_t n = T - i < 4 ? T - i : 4;
			float *yy = y + (size_t)i * ldy + (r - r0);

			for (uint32_t t = 0; t < n; t++) {
				xq[t] = xq_all + (size_t)tok[i + t] * K;
				qs[t] = x->qs + (size_t)tok[i + t] * NB;
				xs[t] = x->xs + (size_t)tok[i + t] * NB;
			}
			switch (n) {
			case 1:
				q_tile(p, wq, sw, mn, NB, gshift, xq, qs, xs, 1, yy, ldy);
				break;
			case 2:
				q_tile(p, wq, sw, mn, NB, gshift, xq, qs, xs, 2, yy, ldy);
				break;
			case 3:
				q_tile(p, wq, sw, mn, NB, gshift, xq, qs, xs, 3, yy, ldy);
				break;
			default:
				q_tile(p, wq, sw, mn, NB, gshift, xq, qs, xs, 4, yy, ldy);
				break;
			}
		}
	}
}

static void avx512_q8(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0,
		      uint32_t r1, const struct cpu_act *x, const uint32_t *tok, uint32_t T,
		      float *y, uint32_t ldy, float *scratch)
{
	avx512_q(MOEM_PREC_Q8, CPU_ACT_QU8, l, mat, r0, r1, x, tok, T, y, ldy, scratch);
}

static void avx512_q4(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0,
		      uint32_t r1, const struct cpu_act *x, const uint32_t *tok, uint32_t T,
		      float *y, uint32_t ldy, float *scratch)
{
	avx512_q(MOEM_PREC_Q4, CPU_ACT_QEO, l, mat, r0, r1, x, tok, T, y, ldy, scratch);
}

static void avx512_q2(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0,
		      uint32_t r1, const struct cpu_act *x, const uint32_t *tok, uint32_t T,
		      float *y, uint32_t ldy, float *scratch)
{
	avx512_q(MOEM_PREC_Q2, CPU_ACT_QM4, l, mat, r0, r1, x, tok, T, y, ldy, scratch);
}

const struct moem_cpu_kern KERN_TABLE = {
	.isa = MOEM_CPU_ISA_AVX512,
	.rows = {avx512_bf16, avx512_q8, avx512_q4, avx512_q2},
	.fmt = {CPU_ACT_BF16, CPU_ACT_QU8, CPU_ACT_QEO, CPU_ACT_QM4},
};
