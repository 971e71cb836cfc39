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
 * Per output the order is: bf16, lane j of one 16-wide accumulator
 * takes 32 elements at a time in k order; q8, lane j of two
 * accumulators takes the even and the odd blocks in k order, the two are
 * added; q4 and q2 the same with groups of 2 and 4 blocks for blocks (one
 * integer sum of the group's products, block L's in its 16 / QG lanes,
 * scaled by one FMA), the blocks after the last full group in the odd
 * accumulator;
 * then a 16-to-1 sum of fixed shape (hsum16, or hsum16x4 with the same
 * adds); q4/q2 add the min term last, in the 8-lane order of kern_x86.h.
 * Rows and tokens are interleaved, never merged.
 *
 * The quantized path has kern_avx2.c's structure (tuned there on an
 * AVX2-only machine, then here on an Intel Xeon with AVX-512 BF16/VNNI,
 * 2 cores): F16C scale rows, block scales made once per row and token,
 * the weight stream prefetched PF_DIST ahead, short rows (K < 2048, the
 * down projection) 4 rows at a time at batch 1 and 2 rows x 4 tokens for
 * more, and the min term of several tokens 8 at a time (min_pass). Two
 * accumulator chains per output, because at batch 1 one chain of
 * dependent FMAs bounded a q4/q2 row before the ports did. On that Xeon
 * these kernels beat kern_avx2.c at every precision and batch 1-64
 * (bench_kernels, 2 threads; q4 at batch 1 140 against 245 us/expert).
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

#include "kern_x86.h"

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

/* 128-bit lanes of a and b picked by imm as vshuff32x4 does (SIMDe aliases only the integer one). */
#define SHUF128(a, b, imm)   \
	_mm512_castsi512_ps( \
		_mm512_shuffle_i32x4(_mm512_castps_si512(a), _mm512_castps_si512(b), (imm)))

/*
 * out[i] = hsum16(v[i]) for 4 vectors, bit for bit: per vector the very
 * adds of hsum16's tree (the 512 -> 256 fold, 256 -> 128, the high pair,
 * the odd element), two or four vectors to an instruction. About 14
 * instructions where 4 hsum16() take 36: a sixth of a short row's work.
 */
INL void hsum16x4(__m512 a, __m512 b, __m512 c, __m512 d, float *out)
{
	/* [a 0-3 + a 8-11, a 4-7 + a 12-15, the same of b] */
	__m512 x = _mm512_add_ps(SHUF128(a, b, 0x44), SHUF128(a, b, 0xee));
	__m512 y = _mm512_add_ps(SHUF128(c, d, 0x44), SHUF128(c, d, 0xee));
	/* one 128-bit lane each of a, b, c, d: the halves added */
	__m512 s = _mm512_add_ps(SHUF128(x, y, 0x88), SHUF128(x, y, 0xdd));

	s = _mm512_add_ps(s, _mm512_shuffle_ps(s, s, 0xee)); /* movehl */
	s = _mm512_add_ps(s, _mm512_shuffle_ps(s, s, 0xf5)); /* movehdup */
	_mm_storeu_ps(
		out,
		_mm512_castps512_ps128(_mm512_permutexvar_ps(
			_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), s)));
}

INL bh512 load_bh(const void *p)
{
	bh512 v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* n fp16 values to fp32 (exact) with F16C, 8 at a time (also in the SIMDe build). */
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

/* ---- quantized: R rows x T tokens, vpdpbusd over blocks of 64 ------------- */

/*
 * Bytes ahead of its weight stream a quantized kernel prefetches, once
 * per 64 bytes it reads, as kern_avx2.c does (there the hardware
 * prefetcher alone left the batch-1 GEMV short of the read stream).
 */
#define PF_DIST 2048

INL void pf(const void *p)
{
	_mm_prefetch((const char *)p + PF_DIST, _MM_HINT_T0);
}

/* Block b of a row as vpdpbusd's weight operand; q8 also its bias, 128 x its lane sums. */
struct qw {
	__m512i w, comp;
};

INL struct qw q_unpack(enum moem_prec p, const uint8_t *wq, uint32_t b)
{
	const __m512i m2 = _mm512_set1_epi8(3);
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	/* q2: the 16-byte block in four 128-bit lanes shifted right by 0, 2, 4, 6 */
	const __m512i sh =
		_mm512_set_epi32(0x60006, 0x60006, 0x60006, 0x60006, 0x40004, 0x40004, 0x40004,
				 0x40004, 0x20002, 0x20002, 0x20002, 0x20002, 0, 0, 0, 0);
	struct qw w;

	if (p == MOEM_PREC_Q8) {
		w.w = _mm512_loadu_si512((const void *)(wq + 64 * (size_t)b));
		w.comp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80),
					     w.w);
	} else if (p == MOEM_PREC_Q4) {
		__m256i v =
			_mm256_loadu_si256((const __m256i *)(const void *)(wq + 32 * (size_t)b));
		__m256i lo = _mm256_and_si256(v, m4);
		__m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);

		w.w = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
		w.comp = w.w;
	} else {
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)(wq + 16 * (size_t)b));

		w.w = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i32x4(v), sh), m2);
		w.comp = w.w;
	}
	return w;
}

/* The block's integer dot product with activation block xb, 16 lanes (exact). */
INL __m512i q_dot(enum moem_prec p, const struct qw *w, const int8_t *xb)
{
	__m512i x = _mm512_loadu_si512((const void *)xb);

	if (p == MOEM_PREC_Q8)
		return _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), x, w->w),
					w->comp);
	return _mm512_dpbusd_epi32(_mm512_setzero_si512(), w->w, x);
}

/*
 * sq[b] = sw[b >> gshift] x qs[b] for the NB blocks of a row and a token:
 * the scale of each block's integer dot product, 16 blocks to a vmulps.
 */
static void block_scales(const float *sw, const float *qs, uint32_t NB, uint32_t gshift, float *sq)
{
	uint32_t b = 0;

	if (gshift) { /* two blocks per group: each scale twice */
		const __m512i dup =
			_mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);

		for (; b + 16 <= NB; b += 16) {
			__m512 s = _mm512_permutexvar_ps(
				dup, _mm512_castps256_ps512(_mm256_loadu_ps(sw + b / 2)));

			_mm512_storeu_ps(sq + b, _mm512_mul_ps(s, _mm512_loadu_ps(qs + b)));
		}
	} else {
		for (; b + 16 <= NB; b += 16)
			_mm512_storeu_ps(sq + b, _mm512_mul_ps(_mm512_loadu_ps(sw + b),
							       _mm512_loadu_ps(qs + b)));
	}
	for (; b < NB; b++)
		sq[b] = sw[b >> gshift] * qs[b];
}

/* Bytes of weights per block of 64. */
#define QBPB(p) ((p) == MOEM_PREC_Q8 ? 64u : (p) == MOEM_PREC_Q4 ? 32u : 16u)

/* acc + block b's dot product with activation row xq at scale s (broadcast). */
INL __m512 q_fma(enum moem_prec p, const struct qw *w, const int8_t *xq, uint32_t b, float s,
		 __m512 acc)
{
	return _mm512_fmadd_ps(_mm512_cvtepi32_ps(q_dot(p, w, xq + 64 * (size_t)b)),
			       _mm512_set1_ps(s), acc);
}

/*
 * q4 and q2 in groups of blocks, 2 and 4, one 64-byte load of weights
 * (activation formats QEO2, QM4X): masked, and shifted by 4 (q4) or by 2i
 * (q2), vector i is nibble or bit pair i of every block of the group,
 * against the activations' vector i. The group's vpdpbusd go into one
 * int32 sum (exact), block L's in lanes 16 L / QG .. 16 (L + 1) / QG - 1,
 * so a group takes one vcvtdq2ps and one FMA, with its block scales each
 * in its lanes, where block by block took one of each a block (and q2 a
 * variable shift a block): a batch-1 q2 row was bound by those
 * instructions.
 */
#define QG(p) ((p) == MOEM_PREC_Q2 ? 4u : 2u) /* blocks per group */

INL void qg_unpack(enum moem_prec p, const uint8_t *wq, uint32_t b, __m512i w[4])
{
	__m512i v = _mm512_loadu_si512((const void *)(wq + QBPB(p) * (size_t)b));

	if (p == MOEM_PREC_Q4) {
		const __m512i m4 = _mm512_set1_epi8(0x0f);

		w[0] = _mm512_and_si512(v, m4);
		w[1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
	} else {
		const __m512i m2 = _mm512_set1_epi8(3);

		w[0] = _mm512_and_si512(v, m2);
		w[1] = _mm512_and_si512(_mm512_srli_epi16(v, 2), m2);
		w[2] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m2);
		w[3] = _mm512_and_si512(_mm512_srli_epi16(v, 6), m2);
	}
}

/* The QG floats at s (a group's block scales), for qg_scale(). */
INL __m128 qg_ld(enum moem_prec p, const float *s)
{
	if (p == MOEM_PREC_Q4)
		return _mm_castpd_ps(_mm_load_sd((const double *)(const void *)s));
	return _mm_loadu_ps(s);
}

/* A row's weight scale of each block of the group at b, for a qg_ld() of its block scales. */
INL __m128 qg_sw(enum moem_prec p, const float *sw, uint32_t b)
{
	if (p == MOEM_PREC_Q4)
		return _mm_set1_ps(sw[b >> 1]);
	return _mm_loadu_ps(sw + b);
}

/* The group's block scales s[0..QG - 1], each in its lanes. */
INL __m512 qg_scale(enum moem_prec p, __m128 s)
{
	const __m512i i2 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
	const __m512i i4 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);

	return _mm512_permutexvar_ps(p == MOEM_PREC_Q4 ? i2 : i4, _mm512_castps128_ps512(s));
}

/* acc + the group at block b of activation row xq (QEO2, QM4X) at scales s. */
INL __m512 qg_fma(enum moem_prec p, const __m512i w[4], const int8_t *xq, uint32_t b, __m512 s,
		  __m512 acc)
{
	const int8_t *xb = xq + 64 * (size_t)b;
	__m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0],
					_mm512_loadu_si512((const void *)xb));

	d = _mm512_dpbusd_epi32(d, w[1], _mm512_loadu_si512((const void *)(xb + 64)));
	if (p == MOEM_PREC_Q2) {
		d = _mm512_dpbusd_epi32(d, w[2], _mm512_loadu_si512((const void *)(xb + 128)));
		d = _mm512_dpbusd_epi32(d, w[3], _mm512_loadu_si512((const void *)(xb + 192)));
	}
	return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc);
}

/*
 * Every quantized tile keeps two accumulators per output, even blocks
 * and odd blocks, each in k order, added before hsum16: at batch 1 one
 * chain of dependent FMAs (4 cycles each) bounded a q4/q2 row, not the
 * ports.
 */

/* q_tile's group at block b into acc[0..T-1]. */
INL void qg_tile(enum moem_prec p, const uint8_t *wq, const float *sq, uint32_t NB,
		 const int8_t *const *xq, const int T, uint32_t b, __m512 *acc)
{
	__m512i w[4];

	qg_unpack(p, wq, b, w);
	pf(wq + QBPB(p) * (size_t)b);
#pragma GCC unroll 4
	for (int t = 0; t < T; t++)
		acc[t] = qg_fma(p, w, xq[t], b, qg_scale(p, qg_ld(p, sq + (size_t)t * NB + b)),
				acc[t]);
}

/*
 * One row x T <= 4 tokens: per block the row's weights are unpacked
 * once for the T tokens; sq + t * NB token t's block scales. One row at
 * a time keeps the weights one sequential stream, prefetched PF_DIST
 * ahead. The min term only where mins (batch 1; else min_pass()).
 */
INL void q_tile(enum moem_prec p, const uint8_t *wq, const float *sq, const float *mn, uint32_t NB,
		uint32_t gshift, int mins, const int8_t *const *xq, const float *const *xs,
		const int T, float *y, uint32_t ldy)
{
	__m512 acc[2][4];
	uint32_t b = 0;

#pragma GCC unroll 4
	for (int t = 0; t < T; t++)
		acc[0][t] = acc[1][t] = _mm512_setzero_ps();
	if (p != MOEM_PREC_Q8) { /* groups 2n, 2n + 1 in acc 0, 1; the block(s) after in acc 1 */
		for (; b + 2 * QG(p) <= NB; b += 2 * QG(p)) {
			qg_tile(p, wq, sq, NB, xq, T, b, acc[0]);
			qg_tile(p, wq, sq, NB, xq, T, b + QG(p), acc[1]);
		}
		if (b + QG(p) <= NB) {
			qg_tile(p, wq, sq, NB, xq, T, b, acc[0]);
			b += QG(p);
		}
		for (; b < NB; b++) {
			const struct qw w = q_unpack(p, wq, b);

#pragma GCC unroll 4
			for (int t = 0; t < T; t++)
				acc[1][t] =
					q_fma(p, &w, xq[t], b, sq[(size_t)t * NB + b], acc[1][t]);
		}
	}
	for (; b + 2 <= NB; b += 2) { /* q8 (q4 and q2 took every block above): 64 bytes a block */
		const struct qw w0 = q_unpack(p, wq, b), w1 = q_unpack(p, wq, b + 1);

		pf(wq + 64 * (size_t)b);
		pf(wq + 64 * (size_t)(b + 1));
#pragma GCC unroll 4
		for (int t = 0; t < T; t++) {
			acc[0][t] = q_fma(p, &w0, xq[t], b, sq[(size_t)t * NB + b], acc[0][t]);
			acc[1][t] =
				q_fma(p, &w1, xq[t], b + 1, sq[(size_t)t * NB + b + 1], acc[1][t]);
		}
	}
	if (b < NB) {
		const struct qw w = q_unpack(p, wq, b);

#pragma GCC unroll 4
		for (int t = 0; t < T; t++)
			acc[0][t] = q_fma(p, &w, xq[t], b, sq[(size_t)t * NB + b], acc[0][t]);
	}
#pragma GCC unroll 4
	for (int t = 0; t < T; t++) {
		float v = hsum16(_mm512_add_ps(acc[0][t], acc[1][t]));

		if (p != MOEM_PREC_Q8 && mins)
			v += min_term(mn, xs[t], NB >> gshift, gshift);
		y[(size_t)t * ldy] = v;
	}
}

/* Rows per q_rows() call, and the row length (blocks) below which batch 1 takes it. */
#define SHORT_R	 4
#define SHORT_NB 32

/*
 * min_term() of 4 rows (mins mn + r * G) and one token, row r in lane r:
 * lane by lane the very operations min_term() does (its lane j's
 * products of groups j, j + 8, ... summed in hsum8's tree, then the
 * groups left over), where 4 calls of it were a sixth of a q4 down
 * projection's time at batch 1.
 */
static void min_rows4(const float *mn, uint32_t G, const float *xs, uint32_t gshift, float *out)
{
	const uint32_t G8 = G / 8 * 8;
	__m128 m = _mm_setzero_ps();

#define XG(g)  (gshift ? xs[2 * (g)] + xs[2 * (g) + 1] : xs[g])
#define MN4(g) _mm_set_ps(mn[3 * G + (g)], mn[2 * G + (g)], mn[G + (g)], mn[g])
	if (G8) {
		__m128 P[8];

#pragma GCC unroll 8
		for (int j = 0; j < 8; j++)
			P[j] = _mm_setzero_ps();
		for (uint32_t g = 0; g < G8; g += 8) {
#pragma GCC unroll 8
			for (int j = 0; j < 8; j++)
				P[j] = _mm_add_ps(P[j],
						  _mm_mul_ps(MN4(g + j), _mm_set1_ps(XG(g + j))));
		}
		m = _mm_add_ps(_mm_add_ps(_mm_add_ps(P[0], P[4]), _mm_add_ps(P[2], P[6])),
			       _mm_add_ps(_mm_add_ps(P[1], P[5]), _mm_add_ps(P[3], P[7])));
	}
	for (uint32_t g = G8; g < G; g++)
		m = _mm_add_ps(m, _mm_mul_ps(MN4(g), _mm_set1_ps(XG(g))));
#undef XG
#undef MN4
	_mm_storeu_ps(out, m);
}

/* q_rows()'s group at block b of SHORT_R rows into acc[0..SHORT_R-1]. */
INL void qg_rows(enum moem_prec p, const uint8_t *wq, size_t rowb, const float *sw, uint32_t G,
		 const int8_t *xq, const float *qs, uint32_t b, __m512 *acc)
{
	const __m128 q = qg_ld(p, qs + b);

#pragma GCC unroll 4
	for (int r = 0; r < SHORT_R; r++) {
		__m512i w[4];

		qg_unpack(p, wq + r * rowb, b, w);
		pf(wq + r * rowb + QBPB(p) * (size_t)b);
		acc[r] = qg_fma(p, w, xq, b, qg_scale(p, _mm_mul_ps(qg_sw(p, sw + r * G, b), q)),
				acc[r]);
	}
}

/*
 * R rows x 1 token of a matrix with short rows (K < 2048: an expert's
 * down projection, 12 blocks a row), for batch 1, as kern_avx2.c does:
 * a row's own setup cost about as much as its blocks. R adjacent rows
 * are still one sequential stream, their scales and mins convert in one
 * go, R x 2 accumulator chains overlap, and the min terms of the R rows
 * are one min_rows4(). Each block's scale is the same fp32 product
 * sw x qs that block_scales() makes, so every output keeps q_tile's
 * order and bits.
 */
INL void q_rows(enum moem_prec p, const uint8_t *wq, size_t rowb, const float *sw, const float *mn,
		uint32_t G, uint32_t NB, uint32_t gshift, const int8_t *xq, const float *qs,
		const float *xs, float *y)
{
	__m512 acc[2][SHORT_R];
	float m[SHORT_R];
	uint32_t b = 0;

#pragma GCC unroll 4
	for (int r = 0; r < SHORT_R; r++)
		acc[0][r] = acc[1][r] = _mm512_setzero_ps();
	/* q4 and q2 only (q8 has no short-row tiles): q_tile's order */
	for (; b + 2 * QG(p) <= NB; b += 2 * QG(p)) {
		qg_rows(p, wq, rowb, sw, G, xq, qs, b, acc[0]);
		qg_rows(p, wq, rowb, sw, G, xq, qs, b + QG(p), acc[1]);
	}
	if (b + QG(p) <= NB) {
		qg_rows(p, wq, rowb, sw, G, xq, qs, b, acc[0]);
		b += QG(p);
	}
	for (; b < NB; b++) {
#pragma GCC unroll 4
		for (int r = 0; r < SHORT_R; r++) {
			const struct qw w = q_unpack(p, wq + r * rowb, b);

			acc[1][r] =
				q_fma(p, &w, xq, b, sw[r * G + (b >> gshift)] * qs[b], acc[1][r]);
		}
	}
	min_rows4(mn, G, xs, gshift, m);
	hsum16x4(_mm512_add_ps(acc[0][0], acc[1][0]), _mm512_add_ps(acc[0][1], acc[1][1]),
		 _mm512_add_ps(acc[0][2], acc[1][2]), _mm512_add_ps(acc[0][3], acc[1][3]), y);
#pragma GCC unroll 4
	for (int r = 0; r < SHORT_R; r++)
		y[r] += m[r];
}

/* q_tile2()'s group at block b of 2 rows into acc0 and acc1 [0..T-1]. */
INL void qg_tile2(enum moem_prec p, const uint8_t *wq, size_t rowb, const float *sq, uint32_t NB,
		  const int8_t *const *xq, const int T, uint32_t b, __m512 *acc0, __m512 *acc1)
{
	__m512i w[2][4];

#pragma GCC unroll 2
	for (int r = 0; r < 2; r++) {
		qg_unpack(p, wq + r * rowb, b, w[r]);
		pf(wq + r * rowb + QBPB(p) * (size_t)b);
	}
#pragma GCC unroll 4
	for (int t = 0; t < T; t++) {
		acc0[t] = qg_fma(p, w[0], xq[t], b, qg_scale(p, qg_ld(p, sq + (size_t)t * NB + b)),
				 acc0[t]);
		acc1[t] = qg_fma(p, w[1], xq[t], b,
				 qg_scale(p, qg_ld(p, sq + (size_t)(4 + t) * NB + b)), acc1[t]);
	}
}

/*
 * 2 rows x T <= 4 tokens of a short-row matrix, for calls of several
 * tokens: each token's activation block is loaded once for both rows.
 * sq + (r * 4 + t) * NB: block scales of row r, token t. Same order per
 * output as q_tile; the min term is min_pass()'s.
 */
INL void q_tile2(enum moem_prec p, const uint8_t *wq, size_t rowb, const float *sq, uint32_t NB,
		 const int8_t *const *xq, const int T, float *y, uint32_t ldy)
{
	__m512 acc[2][2][4]; /* [row][even/odd block][token] */
	uint32_t b = 0;

#pragma GCC unroll 4
	for (int t = 0; t < T; t++)
		acc[0][0][t] = acc[0][1][t] = acc[1][0][t] = acc[1][1][t] = _mm512_setzero_ps();
	/* q4 and q2 only: q_tile's order */
	for (; b + 2 * QG(p) <= NB; b += 2 * QG(p)) {
		qg_tile2(p, wq, rowb, sq, NB, xq, T, b, acc[0][0], acc[1][0]);
		qg_tile2(p, wq, rowb, sq, NB, xq, T, b + QG(p), acc[0][1], acc[1][1]);
	}
	if (b + QG(p) <= NB) {
		qg_tile2(p, wq, rowb, sq, NB, xq, T, b, acc[0][0], acc[1][0]);
		b += QG(p);
	}
	for (; b < NB; b++) {
#pragma GCC unroll 2
		for (int r = 0; r < 2; r++) {
			const struct qw w = q_unpack(p, wq + r * rowb, b);

#pragma GCC unroll 4
			for (int t = 0; t < T; t++)
				acc[r][1][t] =
					q_fma(p, &w, xq[t], b, sq[(size_t)(4 * r + t) * NB + b],
					      acc[r][1][t]);
		}
	}
	if (T == 4) {
		float o[2][4];

#pragma GCC unroll 2
		for (int r = 0; r < 2; r++)
			hsum16x4(_mm512_add_ps(acc[r][0][0], acc[r][1][0]),
				 _mm512_add_ps(acc[r][0][1], acc[r][1][1]),
				 _mm512_add_ps(acc[r][0][2], acc[r][1][2]),
				 _mm512_add_ps(acc[r][0][3], acc[r][1][3]), o[r]);
#pragma GCC unroll 4
		for (int t = 0; t < 4; t++) {
			y[(size_t)t * ldy] = o[0][t];
			y[(size_t)t * ldy + 1] = o[1][t];
		}
		return;
	}
#pragma GCC unroll 4
	for (int t = 0; t < T; t++) {
		y[(size_t)t * ldy] = hsum16(_mm512_add_ps(acc[0][0][t], acc[0][1][t]));
		y[(size_t)t * ldy + 1] = hsum16(_mm512_add_ps(acc[1][0][t], acc[1][1][t]));
	}
}

/* One call of fn(..., T, y_, ldy) for T in 1..4 known at compile time. */
#define TILE_N(fn, T, ...)                           \
	do {                                         \
		switch (T) {                         \
		case 1:                              \
			fn(__VA_ARGS__, 1, y_, ldy); \
			break;                       \
		case 2:                              \
			fn(__VA_ARGS__, 2, y_, ldy); \
			break;                       \
		case 3:                              \
			fn(__VA_ARGS__, 3, y_, ldy); \
			break;                       \
		default:                             \
			fn(__VA_ARGS__, 4, y_, ldy); \
			break;                       \
		}                                    \
	} while (0)

/*
 * kern_avx2.c's structure: short rows 4 at a time at batch 1 and 2 at a
 * time for several tokens, else row by row with the tokens in groups of
 * 4; the min term of several tokens in min_pass(). scratch: the row's
 * scales (and mins) as floats and the block scales of up to 4 tokens,
 * 2 G + 4 NB <= K floats; in q_rows() the scales and mins of SHORT_R
 * rows, 2 SHORT_R G <= K / 8; for q_tile2() 2 rows' scales and block
 * scales, 2 G + 8 NB <= K / 4.
 */
INL void avx512_q(enum moem_prec p, enum cpu_act_fmt fmt, const struct moem_qmat_layout *l,
		  const uint8_t *mat, uint32_t r0, uint32_t r1, const struct cpu_act *x,
		  const uint32_t *tok, uint32_t T, float *y, uint32_t ldy, float *scratch)
{
	const uint32_t K = l->cols, NB = K / MOEM_CPU_QBLOCK, G = l->groups_per_row;
	const uint32_t gshift = p == MOEM_PREC_Q2 ? 0 : 1;
	const int8_t *xq_all = x->v[fmt];
	const uint16_t *s16 = (const uint16_t *)(const void *)(mat + l->scale_off);
	const uint16_t *m16 = (const uint16_t *)(const void *)(mat + l->min_off);
	float *sw = scratch, *mn = scratch + G, *sq = scratch + 2 * G;
	uint32_t r = r0;

	if (T == 1 && NB < SHORT_NB && p != MOEM_PREC_Q8) {
		for (; r + SHORT_R <= r1; r += SHORT_R) {
			f16_row(s16 + (size_t)r * G, sw, SHORT_R * G);
			f16_row(m16 + (size_t)r * G, sw + SHORT_R * G, SHORT_R * G);
			q_rows(p, mat + l->data_off + (size_t)r * l->row_bytes, l->row_bytes, sw,
			       sw + SHORT_R * G, G, NB, gshift, xq_all + (size_t)tok[0] * K,
			       x->qs + (size_t)tok[0] * NB, x->xs + (size_t)tok[0] * NB,
			       y + (r - r0));
		}
	}
	if (T > 1 && NB < SHORT_NB && p != MOEM_PREC_Q8) {
		for (; r + 2 <= r1; r += 2) {
			const uint8_t *wq = mat + l->data_off + (size_t)r * l->row_bytes;

			f16_row(s16 + (size_t)r * G, sw, 2 * G);
			for (uint32_t i = 0; i < T; i += 4) {
				const int8_t *xq[4];
				uint32_t n = T - i < 4 ? T - i : 4;
				float *y_ = y + (size_t)i * ldy + (r - r0);

				for (uint32_t t = 0; t < n; t++) {
					const float *qs = x->qs + (size_t)tok[i + t] * NB;

					xq[t] = xq_all + (size_t)tok[i + t] * K;
					block_scales(sw, qs, NB, gshift, sq + (size_t)t * NB);
					block_scales(sw + G, qs, NB, gshift,
						     sq + (size_t)(4 + t) * NB);
				}
				TILE_N(q_tile2, n, p, wq, l->row_bytes, sq, NB, xq);
			}
		}
	}
	for (; r < r1; r++) {
		const uint8_t *wq = mat + l->data_off + (size_t)r * l->row_bytes;

		f16_row(s16 + (size_t)r * G, sw, G);
		if (p != MOEM_PREC_Q8 && T == 1) /* else min_pass() */
			f16_row(m16 + (size_t)r * G, mn, G);
		for (uint32_t i = 0; i < T; i += 4) {
			const int8_t *xq[4];
			const float *xs[4];
			uint32_t n = T - i < 4 ? T - i : 4;
			float *y_ = y + (size_t)i * ldy + (r - r0);

			for (uint32_t t = 0; t < n; t++) {
				xq[t] = xq_all + (size_t)tok[i + t] * K;
				xs[t] = x->xs + (size_t)tok[i + t] * NB;
				block_scales(sw, x->qs + (size_t)tok[i + t] * NB, NB, gshift,
					     sq + (size_t)t * NB);
			}
			TILE_N(q_tile, n, p, wq, sq, mn, NB, gshift, T == 1, xq, xs);
		}
	}
	if (p != MOEM_PREC_Q8 && T > 1)
		min_pass(m16, G, gshift, x, NB, tok, T, r0, r1, y, ldy, scratch);
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
	avx512_q(MOEM_PREC_Q4, CPU_ACT_QEO2, l, mat, r0, r1, x, tok, T, y, ldy, scratch);
}

static void avx512_q2(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0,
		      uint32_t r1, const struct cpu_act *x, const uint32_t *tok, uint32_t T,
		      float *y, uint32_t ldy, float *scratch)
{
	avx512_q(MOEM_PREC_Q2, CPU_ACT_QM4X, l, mat, r0, r1, x, tok, T, y, ldy, scratch);
}

const struct moem_cpu_kern KERN_TABLE = {
	.isa = MOEM_CPU_ISA_AVX512,
	.rows = {avx512_bf16, avx512_q8, avx512_q4, avx512_q2},
	.fmt = {CPU_ACT_BF16, CPU_ACT_QU8, CPU_ACT_QEO2, CPU_ACT_QM4X},
};
