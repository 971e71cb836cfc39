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
 * takes 32 elements at a time in k order, then a 16-to-1 sum of fixed
 * shape (hsum16, or hsum16x4 with the same adds); q8, q4 and q2, one
 * fp32 accumulator takes each block of 64 in k order: the block's exact
 * integer dot product, converted, times sw x qs, then (q4, q2) + the
 * group's min x the block's activation sum (the section "16 rows in
 * the lanes" below says how). Rows and tokens are interleaved, never
 * merged.
 *
 * The quantized kernels went row by row first (kern_avx2.c's structure,
 * tuned on an Intel Xeon): from 4 tokens up that paid the unpacking,
 * the conversion and the scales per row and token, and on an AMD EPYC
 * (2 threads) they reached 0.55 of PyTorch's bf16 speed at batch 64 in
 * every precision. Now 16 rows share each vector.
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
#define KERN_TABLE  moem_cpu_kern_avx512_emu
#define BLOCK_STATS moem_cpu_block_stats_avx512_emu
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
#define KERN_TABLE  moem_cpu_kern_avx512
#define BLOCK_STATS moem_cpu_block_stats_avx512
#endif

#include "kern.h"

#define INL static inline __attribute__((always_inline))

#include "kern_x86.h"
#include "kern_tr16.h"

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
		   const uint16_t *pf, uint32_t pf_lo, uint32_t pf_hi, const int R, const int T,
		   float *y, uint32_t ldy)
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
		if (pf && k - pf_lo < pf_hi - pf_lo)
			for (int r = 0; r < 4; r++)
				_mm_prefetch((const char *)(pf + r * ldw + k), _MM_HINT_T1);
#pragma GCC unroll 4
		for (int t = 0; t < T; t++) {
			bh512 x = load_bh(xr[t] + k);

#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
				acc[r][t] = _mm512_dpbf16_ps(acc[r][t], w[r], x);
		}
	}
	if (R == 4) { /* hsum16x4: the same adds, a third of the instructions */
#pragma GCC unroll 4
		for (int t = 0; t < T; t++)
			hsum16x4(acc[0][t], acc[1][t], acc[2][t], acc[3][t], y + (size_t)t * ldy);
		return;
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

/*
 * Rows in groups of 4, each group's tokens 4 at a time, so a group's
 * weights (16 KB at K 2048) stay in L1 for all its tokens; from 2 tokens the next
 * 4 rows of the matrix (past r1 too: most likely the next item's) are
 * prefetched into L2, a share of their K in each token pass, so their
 * read from DRAM overlaps this group's compute (one token streams at the
 * memory's speed without it and lost 10% with it). Tokens outside and
 * rows inside left the first token pass stalled on DRAM for the item's
 * weights (bf16 at 64 tokens, AMD EPYC: about 0.57 of the vdpbf16ps
 * peak). Per output the same operations in the same order.
 */
static void avx512_bf16(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0,
			uint32_t r1, const struct cpu_act *x, const uint32_t *tok, uint32_t T,
			float *y, uint32_t ldy, float *scratch)
{
	const uint16_t *W = (const uint16_t *)(const void *)(mat + l->data_off);
	const uint16_t *xb = x->v[CPU_ACT_BF16];
	const uint32_t K = l->cols, passes = (T + 3) / 4;
	/* each pass's share of the next rows' K, in whole 32-value steps */
	const uint32_t share = ((K + passes - 1) / passes + 31) / 32 * 32;

	for (uint32_t r = r0; r < r1;) {
		const uint32_t R = r1 - r >= 4 ? 4 : r1 - r >= 2 ? 2 : 1;
		const uint16_t *pf = T > 1 && r + R + 4 <= l->rows ? W + (size_t)(r + R) * K : NULL;

		for (uint32_t i = 0, lo = 0; i < T; i += 4, lo += share) {
			const uint16_t *xr[4], *w = W + (size_t)r * K;
			const uint32_t n = T - i < 4 ? T - i : 4, hi = lo + share;
			float *y_ = y + (size_t)i * ldy + (r - r0);

			for (uint32_t t = 0; t < n; t++)
				xr[t] = xb + (size_t)tok[i + t] * K;
			if (R == 4)
				TILE_T(bf16_tile, 4, n, w, K, xr, K, pf, lo, hi);
			else if (R == 2)
				TILE_T(bf16_tile, 2, n, w, K, xr, K, pf, lo, hi);
			else
				TILE_T(bf16_tile, 1, n, w, K, xr, K, pf, lo, hi);
		}
		r += R;
	}
}

/* ---- quantized: the weights' own forms ------------------------------------ */

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

/* Bytes of weights per block of 64. */
#define QBPB(p) ((p) == MOEM_PREC_Q8 ? 64u : (p) == MOEM_PREC_Q4 ? 32u : 16u)

/*
 * q4 and q2 in groups of blocks, 2 and 4, one 64-byte load of weights
 * (activation formats QEO2, QM4X): masked, and shifted by 4 (q4) or by 2i
 * (q2), vector i is nibble or bit pair i of every block of the group,
 * against the activations' vector i; block L's codes are in dwords
 * 16 L / QG .. 16 (L + 1) / QG - 1 of every vector.
 */
#define QG(p) ((p) == MOEM_PREC_Q2 ? 4u : 2u) /* blocks per group */

/* The QG vectors of a group's 64 bytes v: nibble or bit pair i of every byte in w[i]. */
INL void qg_split(enum moem_prec p, __m512i v, __m512i w[4])
{
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

INL void qg_unpack(enum moem_prec p, const uint8_t *wq, uint32_t b, __m512i w[4])
{
	qg_split(p, _mm512_loadu_si512((const void *)(wq + QBPB(p) * (size_t)b)), w);
}

/* ---- quantized: 16 rows in the lanes, exact block sums -------------------- */

/*
 * What avx512_q() computes per output: each block's integer dot product
 * (exact), to fp32, times the block's scale sw x qs (one fp32 product of
 * the row's group scale and the token's block scale), added by one FMA
 * to one fp32 accumulator, the blocks in k order, each block's followed
 * (q4, q2) by its group's min x the block's activation sum (xs, one more
 * FMA). Two ways to the very same integers, so the same bits for any T:
 *  - one token (qr_dot): per row, vpdpbusd of its weights in their own
 *    layout against the activations, 16 rows' lanes then summed to one
 *    vector per block (tree16: integer adds, exact);
 *  - more (qr_outer): 16 rows' weights transposed once per call and
 *    chunk into scratch (qr_fill: row r in lane r), then per block and
 *    token 16 vpdpbusd of a broadcast activation dword against 16 rows'
 *    codes, and one conversion, scale and FMA for 16 outputs.
 * Measured with bench_kernels (2 threads, AMD EPYC, us per expert at
 * Qwen3-30B-A3B shapes, against the row-by-row form in the same runs):
 * q4 at batch 1/4/16/64 75/130/237/634 against 84/133/323/1613, q8 at
 * batch 64 650 against 1700, q2 626 against 1660.
 * A weight vector of a group (qg_unpack(): vector i of its QG) or of a
 * lone block (q_unpack(): q8, and the blocks after the last group of
 * q2) pairs byte for byte with the 64 activation bytes at 64 i from the
 * group's (block's) own; dword d of a group's vector holds codes of its
 * block d / (16 / QG).
 */
#define QR_CB 8 /* blocks one fill of the tile holds: whole groups (a multiple of 4) */
#define QR_TG 8 /* tokens one pass over the tile takes: 2 x 8 zmm of accumulators */

typedef int32_t __attribute__((may_alias, aligned(1))) i32u;

/* A dword of activations in every lane. */
INL __m512i bcast32(const int8_t *p)
{
	return _mm512_set1_epi32(*(const i32u *)(const void *)p);
}

/*
 * s + u8 weights w x the s8 dword at p in every lane: vpdpbusd with its
 * memory operand broadcast ({1to16}), one instruction where GCC 12 makes
 * a vpbroadcastd and a vpdpbusd of the intrinsics.
 */
INL __m512i dp_bcast(__m512i s, __m512i w, const int8_t *p)
{
#ifdef MOEM_CPU_SIMDE
	return _mm512_dpbusd_epi32(s, w, bcast32(p));
#else
	__asm__("vpdpbusd %2%{1to16%}, %1, %0"
		: "+v"(s)
		: "v"(w), "m"(*(const i32u *)(const void *)p));
	return s;
#endif
}

/*
 * The weights 16 rows on: 16 rows are read side by side, so the next 16
 * are what a row's stream needs next (a prefetch past the matrix is
 * harmless).
 */
INL void pf16(const void *p)
{
	_mm_prefetch((const char *)p, _MM_HINT_T0);
}

/* y[0..nr) = lanes of v (the rows of a block of 16). */
INL void qr_store(float *y, uint32_t nr, __m512 v)
{
	float o[16];

	if (nr == 16) {
		_mm512_storeu_ps(y, v);
		return;
	}
	_mm512_storeu_ps(o, v);
	memcpy(y, o, sizeof(float) * nr);
}

/*
 * o[L] lane r = the sum of 128-bit lane L of d[r] (4 dwords), for the 16
 * vectors d[0..15]: integer adds, exact.
 */
INL void tree16(__m512i *d, __m512i *o)
{
	__m512i a[8], b[4], P, Q;

#pragma GCC unroll 8
	for (int k = 0; k < 8; k++)
		a[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(d[2 * k], d[2 * k + 1]),
					_mm512_unpackhi_epi32(d[2 * k], d[2 * k + 1]));
		/* b[k]'s 128-bit lane L, dword m: lane L of d[4 k + m] summed */
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++)
		b[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(a[2 * k], a[2 * k + 1]),
					_mm512_unpackhi_epi64(a[2 * k], a[2 * k + 1]));
	P = _mm512_shuffle_i32x4(b[0], b[1], 0x44);
	Q = _mm512_shuffle_i32x4(b[2], b[3], 0x44);
	o[0] = _mm512_shuffle_i32x4(P, Q, 0x88);
	o[1] = _mm512_shuffle_i32x4(P, Q, 0xdd);
	P = _mm512_shuffle_i32x4(b[0], b[1], 0xee);
	Q = _mm512_shuffle_i32x4(b[2], b[3], 0xee);
	o[2] = _mm512_shuffle_i32x4(P, Q, 0x88);
	o[3] = _mm512_shuffle_i32x4(P, Q, 0xdd);
}

/*
 * acc + block b's integer sums s (16 rows) x (the rows' scales sw x the
 * token's qs[b]), then (q4, q2) + the rows' mins mn x the token's xs[b].
 */
INL __m512 qr_fma(enum moem_prec p, __m512i s, const float *sw, const float *mn, const float *qs,
		  const float *xs, uint32_t b, __m512 acc)
{
	acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
			      _mm512_mul_ps(_mm512_loadu_ps(sw), _mm512_set1_ps(qs[b])), acc);
	if (p != MOEM_PREC_Q8)
		acc = _mm512_fmadd_ps(_mm512_loadu_ps(mn), _mm512_set1_ps(xs[b]), acc);
	return acc;
}

/* n <= 16 fp16 values at h, zeros after them, as 256 bits; nothing past h + n is read. */
INL __m256i h16x16(const uint16_t *h, uint32_t n)
{
#ifdef MOEM_CPU_SIMDE
	uint16_t b[16] = {0};

	memcpy(b, h, sizeof(*h) * n);
	return _mm256_loadu_si256((const __m256i *)(const void *)b);
#else
	/* masked: a row's last scales may end its plane */
	return _mm256_maskz_loadu_epi16((__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1), h);
#endif
}

/* The same to fp32 (exact). */
INL __m512 f16x16(const uint16_t *h, uint32_t n)
{
	const __m256i v = h16x16(h, n);

#ifdef MOEM_CPU_SIMDE /* SIMDe 0.7 has no _mm512_cvtph_ps */
	return _mm512_castsi512_ps(_mm512_inserti64x4(
		_mm512_castsi256_si512(
			_mm256_castps_si256(_mm256_cvtph_ps(_mm256_castsi256_si128(v)))),
		_mm256_castps_si256(_mm256_cvtph_ps(_mm256_extracti128_si256(v, 1))), 1));
#else
	return _mm512_cvtph_ps(v);
#endif
}

/*
 * t[g * 16 + r] = row r's value of group g, of the fp16 rows at s16 (0
 * for r >= nr): 16 x 16 at a time converted and transposed in registers.
 */
static void qr_scales(const uint16_t *s16, uint32_t G, uint32_t nr, float *t)
{
	for (uint32_t g0 = 0; g0 < G; g0 += 16) {
		const uint32_t n = G - g0 < 16 ? G - g0 : 16;
		__m512i v[16];

		for (uint32_t r = 0; r < 16; r++) {
			const uint16_t *h = s16 + (size_t)r * G + g0;

			v[r] = _mm512_setzero_si512();
			if (r < nr)
				v[r] = _mm512_castps_si512(f16x16(h, n));
		}
		tr16(v);
		for (uint32_t d = 0; d < n; d++)
			_mm512_storeu_si512((void *)(t + (size_t)(g0 + d) * 16), v[d]);
	}
}

/* The 16 fp16 in the low (hi 0) or high halves of v's dwords, to fp32 (exact). */
INL __m512 f16_halves(__m512i v, int hi)
{
#ifdef MOEM_CPU_SIMDE
	uint32_t d[16];
	uint16_t h[16];

	memcpy(d, &v, sizeof(d));
	for (int k = 0; k < 16; k++)
		h[k] = (uint16_t)(d[k] >> (hi ? 16 : 0));
	return f16x16(h, 16);
#else
	return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hi ? _mm512_srli_epi32(v, 16) : v));
#endif
}

/*
 * qr_scales() of the scales s16 into ts and the mins m16 into tm at
 * once (q4, q2): a row's 16 fp16 scales and 16 mins are one vector,
 * transposed as dwords (pairs of fp16), the pairs then split and
 * converted: half the shuffles of two qr_scales() (q2 carries a scale
 * and a min per 16 bytes of codes; perf put 30% of its one-token time in
 * the two calls, 20% in this one).
 */
static void qr_scales2(const uint16_t *s16, const uint16_t *m16, uint32_t G, uint32_t nr, float *ts,
		       float *tm)
{
	for (uint32_t g0 = 0; g0 < G; g0 += 16) {
		const uint32_t n = G - g0 < 16 ? G - g0 : 16;
		__m512i v[16];

		for (uint32_t r = 0; r < 16; r++) {
			const size_t o = (size_t)r * G + g0;

			v[r] = _mm512_setzero_si512();
			if (r < nr)
				v[r] = _mm512_inserti64x4(
					_mm512_castsi256_si512(h16x16(s16 + o, n)),
					h16x16(m16 + o, n), 1);
		}
		tr16(v); /* v[d] lane r: dword d of row r, d < 8 scales 2d, 2d + 1; d >= 8 mins */
		for (uint32_t d = 0; 2 * d < n; d++) {
			float *s = ts + (size_t)(g0 + 2 * d) * 16,
			      *m = tm + (size_t)(g0 + 2 * d) * 16;

			_mm512_storeu_ps(s, f16_halves(v[d], 0));
			_mm512_storeu_ps(m, f16_halves(v[8 + d], 0));
			if (2 * d + 1 == n)
				break;
			_mm512_storeu_ps(s + 16, f16_halves(v[d], 1));
			_mm512_storeu_ps(m + 16, f16_halves(v[8 + d], 1));
		}
	}
}

/*
 * One token, 16 rows (nr of them real) from wq: y[0..nr). The rows'
 * weights in their own layout against the token's activation vectors,
 * per group (or lone block), then tree16.
 */
INL void qr_dot(enum moem_prec p, const uint8_t *wq, size_t rowb, uint32_t nr, uint32_t NB,
		uint32_t gshift, const float *swt, const float *mnt, const int8_t *xq,
		const float *qs, const float *xs, float *y)
{
	const uint32_t qg = QG(p), gend = p == MOEM_PREC_Q8 ? 0 : NB / qg * qg;
	__m512 acc = _mm512_setzero_ps();
	uint32_t b = 0;

	for (; b < gend; b += qg) {
		__m512i d[16], o[4], x[4];

#pragma GCC unroll 4
		for (uint32_t i = 0; i < qg; i++)
			x[i] = _mm512_loadu_si512((const void *)(xq + 64 * (size_t)(b + i)));
#pragma GCC unroll 16
		for (uint32_t r = 0; r < 16; r++) {
			__m512i w[4];

			d[r] = _mm512_setzero_si512();
			if (r >= nr)
				continue;
			qg_unpack(p, wq + r * rowb, b, w);
			pf16(wq + (r + 16) * rowb + QBPB(p) * (size_t)b);
#pragma GCC unroll 4
			for (uint32_t i = 0; i < qg; i++)
				d[r] = _mm512_dpbusd_epi32(d[r], w[i], x[i]);
		}
		tree16(d, o);
		if (p == MOEM_PREC_Q4) { /* block b in 128-bit lanes 0, 1; b + 1 in 2, 3 */
			o[0] = _mm512_add_epi32(o[0], o[1]);
			o[1] = _mm512_add_epi32(o[2], o[3]);
		}
#pragma GCC unroll 4
		for (uint32_t L = 0; L < qg; L++)
			acc = qr_fma(p, o[L], swt + 16 * ((b + L) >> gshift),
				     mnt + 16 * ((b + L) >> gshift), qs, xs, b + L, acc);
	}
	for (; b < NB; b++) {
		__m512i d[16], o[4];

#pragma GCC unroll 16
		for (uint32_t r = 0; r < 16; r++) {
			struct qw w;

			/* rows past nr are past the matrix in the last block: not read */
			d[r] = _mm512_setzero_si512();
			if (r >= nr)
				continue;
			w = q_unpack(p, wq + r * rowb, b);
			d[r] = q_dot(p, &w, xq + 64 * (size_t)b);
			pf16(wq + (r + 16) * rowb + QBPB(p) * (size_t)b);
		}
		tree16(d, o);
		o[0] = _mm512_add_epi32(_mm512_add_epi32(o[0], o[1]), _mm512_add_epi32(o[2], o[3]));
		acc = qr_fma(p, o[0], swt + 16 * (b >> gshift), mnt + 16 * (b >> gshift), qs, xs, b,
			     acc);
	}
	qr_store(y, nr, acc);
}

/*
 * Blocks [b0, b1) of 16 rows (nr real, zeros for the rest) into tile, 16
 * vectors (1 KB) a block, lane r row r: a group of q4/q2 blocks as its
 * packed dwords d (at its first block's place: qr_outer() splits them
 * into codes), a lone block (q8, q2's last) as its codes' dwords; q8
 * also comp (minus 128 x each row's sum of the block's weights, at
 * comp + (b - b0) * 16: a token's sums start there, for the u8 offset).
 */
INL void qr_fill(enum moem_prec p, const uint8_t *wq, size_t rowb, uint32_t nr, uint32_t NB,
		 uint32_t b0, uint32_t b1, uint8_t *tile, int32_t *comp)
{
	const uint32_t qg = QG(p), gend = p == MOEM_PREC_Q8 ? 0 : NB / qg * qg;
	uint32_t b = b0;

	for (; b < b1 && b < gend; b += qg) {
		__m512i v[16];

#pragma GCC unroll 16
		for (uint32_t r = 0; r < 16; r++)
			v[r] = r < nr ? _mm512_loadu_si512(
						(const void *)(wq + r * rowb + QBPB(p) * (size_t)b))
				      : _mm512_setzero_si512();
		tr16(v);
#pragma GCC unroll 16
		for (uint32_t d = 0; d < 16; d++)
			_mm512_storeu_si512((void *)(tile + 64 * ((size_t)(b - b0) * 16 + d)),
					    v[d]);
	}
	for (; b < b1; b++) {
		__m512i v[16], c = _mm512_setzero_si512();

		for (uint32_t r = 0; r < 16; r++)
			v[r] = r < nr ? q_unpack(p, wq + r * rowb, b).w : _mm512_setzero_si512();
		tr16(v);
		for (uint32_t d = 0; d < 16; d++) {
			_mm512_storeu_si512((void *)(tile + 64 * ((size_t)(b - b0) * 16 + d)),
					    v[d]);
			if (p == MOEM_PREC_Q8)
				c = _mm512_dpbusd_epi32(c, _mm512_set1_epi8((char)0x80), v[d]);
		}
		if (p == MOEM_PREC_Q8)
			_mm512_storeu_si512((void *)(comp + 16 * (size_t)(b - b0)),
					    _mm512_sub_epi32(_mm512_setzero_si512(), c));
	}
}

/*
 * N tokens (xq[t], their block scales qs[t]) x the 16 rows of the tile,
 * blocks [b0, b1): the accumulators start at zero (b0 0) or from fa
 * (fa + 16 t), and go back there, or to y (token t at y + t * ldy, nr
 * rows) once b1 is NB.
 */
INL void qr_outer(enum moem_prec p, const uint8_t *tile, const int32_t *comp, const float *swt,
		  const float *mnt, uint32_t gshift, uint32_t NB, uint32_t b0, uint32_t b1,
		  const int8_t *const *xq, const float *const *qs, const float *const *xs,
		  float *fa, uint32_t nr, const int N, float *y, uint32_t ldy)
{
	const uint32_t qg = QG(p), per = 16 / qg, gend = p == MOEM_PREC_Q8 ? 0 : NB / qg * qg;
	__m512 acc[QR_TG];

#pragma GCC unroll 8
	for (int t = 0; t < N; t++)
		acc[t] = b0 ? _mm512_loadu_ps(fa + 16 * t) : _mm512_setzero_ps();
	for (uint32_t b = b0; b < b1; b++) {
		const uint8_t *tb = tile + 64 * (size_t)(b - b0) * 16;
		__m512i s[QR_TG];

		/* q8: from -comp, one subtraction fewer per token (integers: the same sums) */
		const __m512i s0 =
			p == MOEM_PREC_Q8
				? _mm512_loadu_si512((const void *)(comp + 16 * (size_t)(b - b0)))
				: _mm512_setzero_si512();

#pragma GCC unroll 8
		for (int t = 0; t < N; t++)
			s[t] = s0;
		if (b < gend) {
			/* block L of the group: packed dwords L per .. L per + per - 1 */
			const uint32_t gb = b & ~(qg - 1), L = b & (qg - 1);
			const uint8_t *tg =
				tile + 64 * (size_t)(gb - b0) * 16 + 64 * (size_t)L * per;
			const size_t base = 64 * (size_t)gb + 4 * (size_t)L * per;

#pragma GCC unroll 8
			for (uint32_t e = 0; e < per; e++) {
				__m512i w[4];

				qg_split(p, _mm512_loadu_si512((const void *)(tg + 64 * e)), w);
#pragma GCC unroll 4
				for (uint32_t i = 0; i < qg; i++) {
					const size_t off = base + 64 * i + 4 * e;

#pragma GCC unroll 8
					for (int t = 0; t < N; t++)
						s[t] = dp_bcast(s[t], w[i], xq[t] + off);
				}
			}
		} else {
#pragma GCC unroll 16
			for (uint32_t j = 0; j < 16; j++) {
				const __m512i w = _mm512_loadu_si512((const void *)(tb + 64 * j));
				const size_t off = 64 * (size_t)b + 4 * j;

#pragma GCC unroll 8
				for (int t = 0; t < N; t++)
					s[t] = p == MOEM_PREC_Q8
						       ? _mm512_dpbusd_epi32(
								 s[t], bcast32(xq[t] + off), w)
						       : dp_bcast(s[t], w, xq[t] + off);
			}
		}
#pragma GCC unroll 8
		for (int t = 0; t < N; t++)
			acc[t] = qr_fma(p, s[t], swt + 16 * (b >> gshift), mnt + 16 * (b >> gshift),
					qs[t], xs[t], b, acc[t]);
	}
#pragma GCC unroll 8
	for (int t = 0; t < N; t++) {
		if (b1 < NB)
			_mm512_storeu_ps(fa + 16 * t, acc[t]);
		else
			qr_store(y + (size_t)t * ldy, nr, acc[t]);
	}
}

/*
 * The weights the next fill reads, into L2 while this chunk is computed:
 * blocks [b1, b1 + cb) of rows rb..rb+15, or once b1 is NB blocks
 * [0, cb) of the next 16 rows; share k of n of those blocks (whole
 * blocks). The fill's loads of 16 rows' streams missed the hardware
 * prefetcher (bench_kernels q8 at 64 tokens, AMD EPYC: 5% faster with
 * it; _MM_HINT_T0 did no better). q8 spreads them over the chunk's token
 * passes, a block of 16 rows (16 lines) a pass, rather than 128 lines at
 * once: 2-4% faster at 16 and 64 tokens in alternated runs; q4 1-3%, q2
 * 2-5% slower that way (a block is a quarter / half line there), so they
 * issue the chunk at once.
 */
INL void qr_pf_next(enum moem_prec p, const struct moem_qmat_layout *l, const uint8_t *mat,
		    uint32_t rb, uint32_t r1, uint32_t NB, uint32_t b1, uint32_t cb, uint32_t k,
		    uint32_t n)
{
	const uint32_t lo = cb * k / n, hi = cb * (k + 1) / n;
	const size_t bytes = QBPB(p) * (size_t)(hi - lo);
	const uint8_t *w;

	if (b1 >= NB) {
		rb += 16;
		b1 = 0;
	}
	if (rb >= r1 || lo >= hi)
		return;
	w = mat + l->data_off + (size_t)rb * l->row_bytes + QBPB(p) * (size_t)(b1 + lo);
	for (uint32_t r = 0; r < 16 && rb + r < r1; r++)
		for (size_t o = 0; o < bytes; o += 64)
			_mm_prefetch((const char *)(w + r * l->row_bytes + o), _MM_HINT_T1);
}

#define QR_N(N)                                                                                    \
	case N:                                                                                    \
		qr_outer(p, tile, comp, swt, mnt, gshift, NB, b0, b1, xq, qs, xs,                  \
			 fa + 16 * (size_t)(i - i0), nr, N, y + (size_t)i * ldy + (rb - r0), ldy); \
		break

/*
 * Rows in blocks of 16. scratch (MOEM_CPU_SCRATCH_FLOATS(K) = 16 K
 * floats, kern.h): the block's scales and mins (2 x 16 G floats), q8's
 * comp and the tile (QR_CB x 16 + QR_CB x 256 floats), and 16 floats of
 * accumulators per token, the tokens in runs of what is left (at least
 * 45 tokens for K 64, 1848 for K 2048).
 */
INL void avx512_q(enum moem_prec p, enum cpu_act_fmt fmt, const struct moem_qmat_layout *l,
		  const uint8_t *mat, uint32_t r0, uint32_t r1, const struct cpu_act *x,
		  const uint32_t *tok, uint32_t T, float *y, uint32_t ldy, float *scratch)
{
	const uint32_t K = l->cols, NB = K / MOEM_CPU_QBLOCK, G = l->groups_per_row;
	const uint32_t gshift = p == MOEM_PREC_Q2 ? 0 : 1, cb = NB < QR_CB ? NB : QR_CB;
	const int8_t *xq_all = x->v[fmt];
	const uint16_t *s16 = (const uint16_t *)(const void *)(mat + l->scale_off);
	const uint16_t *m16 = (const uint16_t *)(const void *)(mat + l->min_off);
	float *swt = scratch, *mnt = swt + 16 * (size_t)G;
	int32_t *comp = (int32_t *)(void *)(mnt + 16 * (size_t)G);
	uint8_t *tile = (uint8_t *)(void *)(comp + 16 * (size_t)cb);
	float *fa = (float *)(void *)(tile + 1024 * (size_t)cb);
	const uint32_t run =
		(uint32_t)((MOEM_CPU_SCRATCH_FLOATS(K) - 32 * (size_t)G - 272 * (size_t)cb) / 16);

	for (uint32_t rb = r0; rb < r1; rb += 16) {
		const uint32_t nr = r1 - rb < 16 ? r1 - rb : 16;
		const uint8_t *wq = mat + l->data_off + (size_t)rb * l->row_bytes;

		/*
		 * the next block's scales and mins: 2 x 16 G bytes each block
		 * touches once, a miss per line where the prefetcher, seeing a
		 * few lines per block, does not run ahead
		 */
		for (uint32_t o = 0; rb + 16 < l->rows && o < 32 * G; o += 64) {
			pf16((const uint8_t *)(s16 + (size_t)(rb + 16) * G) + o);
			if (p != MOEM_PREC_Q8)
				pf16((const uint8_t *)(m16 + (size_t)(rb + 16) * G) + o);
		}
		if (p == MOEM_PREC_Q8)
			qr_scales(s16 + (size_t)rb * G, G, nr, swt);
		else
			qr_scales2(s16 + (size_t)rb * G, m16 + (size_t)rb * G, G, nr, swt, mnt);
		if (T == 1) {
			qr_dot(p, wq, l->row_bytes, nr, NB, gshift, swt, mnt,
			       xq_all + (size_t)tok[0] * K, x->qs + (size_t)tok[0] * NB,
			       x->xs + (size_t)tok[0] * NB, y + (rb - r0));
			continue;
		}
		for (uint32_t i0 = 0; i0 < T; i0 += run) {
			const uint32_t i1 = T - i0 < run ? T : i0 + run;

			for (uint32_t b0 = 0; b0 < NB; b0 += cb) {
				const uint32_t b1 = NB - b0 < cb ? NB : b0 + cb;

				/* q8: a share of the next fill's prefetches each token pass */
				const uint32_t np =
					p == MOEM_PREC_Q8 ? (i1 - i0 + QR_TG - 1) / QR_TG : 1;

				qr_fill(p, wq, l->row_bytes, nr, NB, b0, b1, tile, comp);
				for (uint32_t i = i0; i < i1; i += QR_TG) {
					const int8_t *xq[QR_TG];
					const float *qs[QR_TG], *xs[QR_TG];
					uint32_t n = i1 - i < QR_TG ? i1 - i : QR_TG;
					const uint32_t pass = (i - i0) / QR_TG;

					for (uint32_t t = 0; t < n; t++) {
						xq[t] = xq_all + (size_t)tok[i + t] * K;
						qs[t] = x->qs + (size_t)tok[i + t] * NB;
						xs[t] = x->xs + (size_t)tok[i + t] * NB;
					}
					if (pass < np)
						qr_pf_next(p, l, mat, rb, r1, NB, b1, cb, pass, np);
					switch (n) {
						QR_N(1);
						QR_N(2);
						QR_N(3);
						QR_N(4);
						QR_N(5);
						QR_N(6);
						QR_N(7);
					default:
						QR_N(8);
					}
				}
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
	avx512_q(MOEM_PREC_Q4, CPU_ACT_QEO2, l, mat, r0, r1, x, tok, T, y, ldy, scratch);
}

static void avx512_q2(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0,
		      uint32_t r1, const struct cpu_act *x, const uint32_t *tok, uint32_t T,
		      float *y, uint32_t ldy, float *scratch)
{
	avx512_q(MOEM_PREC_Q2, CPU_ACT_QM4X, l, mat, r0, r1, x, tok, T, y, ldy, scratch);
}

/* ---- the activation quantizer's block statistics -------------------------- */

/*
 * moem_cpu_block_stats() (cpu_int.h) with 16 blocks in the lanes: 16
 * values of each block side by side, transposed (tr16), then per value
 * in element order the plain form's comparison and add, so the same
 * amax and sum. The AVX2 form's gathers took a tenth of an FFN at 64
 * tokens (perf, bench_kernels q8) on the AMD EPYC.
 */
void BLOCK_STATS(const float *x, uint32_t blk, uint32_t n, float *amax, float *sum)
{
	const __m512i abs = _mm512_set1_epi32(0x7fffffff);
	__m512 am = _mm512_setzero_ps(), sm = _mm512_setzero_ps();

	for (uint32_t i0 = 0; i0 < MOEM_CPU_QBLOCK; i0 += 16) {
		__m512i v[16];

#pragma GCC unroll 16
		for (uint32_t j = 0; j < 16; j++) {
			const float *b = x + (size_t)(blk + (j < n ? j : n - 1)) * MOEM_CPU_QBLOCK;

			v[j] = _mm512_loadu_si512((const void *)(b + i0));
		}
		tr16(v);
#pragma GCC unroll 16
		for (uint32_t d = 0; d < 16; d++) {
			const __m512 c = _mm512_castsi512_ps(v[d]);
			const __m512 m = _mm512_castsi512_ps(_mm512_and_epi32(v[d], abs));
			/* !(|c| <= amax) and amax not NaN */
			const __mmask16 upd = (__mmask16)(~_mm512_cmp_ps_mask(m, am, _CMP_LE_OQ) &
							  _mm512_cmp_ps_mask(am, am, _CMP_EQ_OQ));

			am = _mm512_mask_mov_ps(am, upd, m);
			sm = _mm512_add_ps(sm, c);
		}
	}
	_mm512_storeu_ps(amax, am);
	_mm512_storeu_ps(sum, sm);
}

const struct moem_cpu_kern KERN_TABLE = {
	.isa = MOEM_CPU_ISA_AVX512,
	.rows = {avx512_bf16, avx512_q8, avx512_q4, avx512_q2},
	.fmt = {CPU_ACT_BF16, CPU_ACT_QU8, CPU_ACT_QEO2, CPU_ACT_QM4X},
};
