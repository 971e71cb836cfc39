// SPDX-License-Identifier: GPL-2.0-only
/*
 * AVX2 + FMA + F16C row kernels (kern.h), after ggml-cpu's AVX2 dot
 * products: bf16 weights widened to fp32 and FMA'd with fp32
 * activations; q8/q4/q2 weights against int8 activations with
 * vpmaddubsw (unsigned x signed bytes to 16-bit pairs) and vpmaddwd
 * (pairs to 32-bit lanes), exact in integers within a 64-element block,
 * then scaled into an fp32 accumulator once per block. q8 weights are
 * signed, so they go in as |w| with the activation's sign flipped where
 * w < 0 (vpsignb); |w| <= 128 and |x| <= 127 keep every 16-bit pair sum
 * below 2^15 (no saturation).
 *
 * Per output the order is: lane j of one 8-wide accumulator takes, block
 * by block (bf16: 8 elements by 8), in k order, then an 8-to-1 sum of
 * fixed shape; q4/q2 add their min term (sum over groups of min x block
 * sums, in group order) last. Rows and tokens are only interleaved, never
 * merged, so the bits do not depend on how many share a call.
 */
#include <immintrin.h>
#include <string.h>

#include "kern.h"

#define INL static inline __attribute__((always_inline))

#include "kern_x86.h"

/*
 * Bytes ahead of its weight stream a quantized kernel prefetches, once
 * per 64 bytes it reads: at batch 1 the hardware prefetcher alone left
 * the q8/q4/q2 GEMV short of a read-only stream's rate (matrices of 40-70
 * MB, best of 4 runs, 1 thread: 0.92/0.86/0.68 of it without,
 * 1.16/0.91/0.76 with). The bf16 tiles read 4 rows at once and measured
 * slower with it.
 */
#define PF_DIST 1024

INL void pf(const void *p)
{
	_mm_prefetch((const char *)p + PF_DIST, _MM_HINT_T0);
}

INL __m256 bf16x8(const uint16_t *p)
{
	__m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);

	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/*
 * The tiles below keep every accumulator and weight vector in a register:
 * their loops over rows and tokens are unrolled by pragma (at -O2 GCC keeps
 * a small array indexed by a loop variable on the stack, and an
 * accumulator there costs a store and a reload per FMA).
 */

/* ---- bf16: R rows x T tokens, one accumulator per output ------------------ */

/*
 * R <= 4 rows x T <= 4 tokens with R + 1 + R * T <= 16 ymm: the R weight
 * vectors are widened once per 8 elements and used by all T tokens.
 */
INL void bf16_tile(const uint16_t *w0, size_t ldw, const float *const *xr, uint32_t K, const int R,
		   const int T, float *y, uint32_t ldy)
{
	__m256 acc[4][4];

#pragma GCC unroll 4
	for (int r = 0; r < R; r++) {
#pragma GCC unroll 4
		for (int t = 0; t < T; t++)
			acc[r][t] = _mm256_setzero_ps();
	}
	for (uint32_t k = 0; k < K; k += 8) {
		__m256 w[4];

#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
			w[r] = bf16x8(w0 + r * ldw + k);
#pragma GCC unroll 4
		for (int t = 0; t < T; t++) {
			__m256 x = _mm256_loadu_ps(xr[t] + k);

#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
				acc[r][t] = _mm256_fmadd_ps(w[r], x, acc[r][t]);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++) {
#pragma GCC unroll 4
		for (int t = 0; t < T; t++)
			y[(size_t)t * ldy + r] = hsum8(acc[r][t]);
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
 * One row x one token with the row prefetched BF16_PF bytes ahead: at
 * batch 1, one row at a time is one sequential stream that the
 * prefetch keeps ahead of, where the 4-row tile's four streams 4 KiB
 * apart left the GEMV short of a read-only stream (2048 x 32768, one
 * thread, AMD EPYC: 0.68-0.79 of it as tiles, 0.83-0.84 so). One
 * accumulator, so the same operations as bf16_tile's for that row.
 */
#define BF16_PF 2048

INL void bf16_row_pf(const uint16_t *w, const float *x, uint32_t K, float *y)
{
	__m256 acc = _mm256_setzero_ps();

	for (uint32_t k = 0; k < K; k += 8) {
		if (!(k & 31)) /* one 64-byte line per 32 values */
			_mm_prefetch((const char *)(w + k) + BF16_PF, _MM_HINT_T0);
		acc = _mm256_fmadd_ps(bf16x8(w + k), _mm256_loadu_ps(x + k), acc);
	}
	*y = hsum8(acc);
}

/* The tile shapes avx2_bf16 uses (each within the register budget). */
static void bf16_shape(uint32_t R, uint32_t T, const uint16_t *w0, size_t ldw,
		       const float *const *xr, uint32_t K, float *y, uint32_t ldy)
{
#define BF16_CASE(r, t)                                  \
	case (r)*8 + (t):                                \
		bf16_tile(w0, ldw, xr, K, r, t, y, ldy); \
		break
	switch (R * 8 + T) {
		BF16_CASE(4, 1);
		BF16_CASE(4, 2);
		BF16_CASE(3, 1);
		BF16_CASE(3, 2);
		BF16_CASE(3, 3);
		BF16_CASE(3, 4);
		BF16_CASE(2, 1);
		BF16_CASE(2, 2);
		BF16_CASE(2, 3);
		BF16_CASE(2, 4);
		BF16_CASE(1, 1);
		BF16_CASE(1, 2);
		BF16_CASE(1, 3);
	default:
		bf16_tile(w0, ldw, xr, K, 1, 4, y, ldy);
		break;
	}
#undef BF16_CASE
}

/* Bytes of bf16 rows a block holds while every token group passes over it (L2: 512 KiB+). */
#define BF16_BLOCK_BYTES (192u << 10)

/*
 * One token: row by row (bf16_row_pf()). More: tokens in groups of 4
 * (a batch that is a multiple of 4 has no remainder), rows in tiles of 3
 * for 3-4 tokens and of 4 for 1-2 (the register budget above). Rows go in blocks of a multiple of 12 rows and
 * <= BF16_BLOCK_BYTES: every token group passes over a block while it
 * sits in L2, so the matrix is read from memory once per call whatever
 * T is (the FFN's 16 and 32 rows are one block).
 */
static void avx2_bf16(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0,
		      uint32_t r1, const struct cpu_act *x, const uint32_t *tok, uint32_t T,
		      float *y, uint32_t ldy, float *scratch)
{
	const uint16_t *W = (const uint16_t *)(const void *)(mat + l->data_off);
	const float *xf = x->v[CPU_ACT_F32];
	const uint32_t K = l->cols;
	uint32_t rb = BF16_BLOCK_BYTES / (2 * K) / 12 * 12;

	if (T == 1) {
		for (uint32_t r = r0; r < r1; r++)
			bf16_row_pf(W + (size_t)r * K, xf + (size_t)tok[0] * K, K, y + (r - r0));
		return;
	}
	if (rb < 12)
		rb = 12;
	for (uint32_t b0 = r0; b0 < r1; b0 += rb) {
		const uint32_t b1 = r1 - b0 < rb ? r1 : b0 + rb;

		for (uint32_t i = 0; i < T; i += 4) {
			const float *xr[4];
			uint32_t n = T - i < 4 ? T - i : 4, rt = n <= 2 ? 4 : 3;

			for (uint32_t t = 0; t < n; t++)
				xr[t] = xf + (size_t)tok[i + t] * K;
			for (uint32_t r = b0; r < b1; r += rt) {
				uint32_t nr = b1 - r < rt ? b1 - r : rt;
				float *y_ = y + (size_t)i * ldy + (r - r0);

				bf16_shape(nr, n, W + (size_t)r * K, K, xr, K, y_, ldy);
			}
		}
	}
}

/* ---- quantized: R rows x T tokens, int8 blocks of 64 ---------------------- */

/*
 * q8 weights as the two operands vpmaddubsw needs against signed
 * activations: the codes (their signs go onto x) and |codes|.
 */
struct qw {
	__m256i u0, u1, a0, a1;
};

/* Block b of a row: q8 codes and magnitudes; q4/q2 codes 0..15 / 0..3 in activation order. */
INL struct qw q_unpack(enum moem_prec p, const uint8_t *wq, uint32_t b)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
	struct qw w;

	if (p == MOEM_PREC_Q8) {
		w.u0 = _mm256_loadu_si256((const __m256i *)(const void *)(wq + 64 * b));
		w.u1 = _mm256_loadu_si256((const __m256i *)(const void *)(wq + 64 * b + 32));
		w.a0 = _mm256_abs_epi8(w.u0);
		w.a1 = _mm256_abs_epi8(w.u1);
	} else if (p == MOEM_PREC_Q4) {
		__m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(wq + 32 * b));

		w.u0 = _mm256_and_si256(v, m4);
		w.u1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
		w.a0 = w.a1 = w.u0;
	} else {
		/* [v, v >> 2]: bit pairs 0 and 1 in the low lane, 2 and 3 in the high one */
		__m256i vv =
			_mm256_srlv_epi64(_mm256_broadcastsi128_si256(_mm_loadu_si128(
						  (const __m128i *)(const void *)(wq + 16 * b))),
					  _mm256_set_epi64x(2, 2, 0, 0));

		w.u0 = _mm256_and_si256(vv, m2);
		w.u1 = _mm256_and_si256(_mm256_srli_epi16(vv, 4), m2);
		w.a0 = w.a1 = w.u0;
	}
	return w;
}

/* The block's integer dot product in 8 lanes (exact). */
INL __m256i q_dot(enum moem_prec p, const struct qw *w, __m256i x0, __m256i x1)
{
	const __m256i ones = _mm256_set1_epi16(1);

	if (p == MOEM_PREC_Q8) {
		/* |w| <= 128, |x| <= 127: every 16-bit pair sum is below 2^15 */
		__m256i p0 = _mm256_maddubs_epi16(w->a0, _mm256_sign_epi8(x0, w->u0));
		__m256i p1 = _mm256_maddubs_epi16(w->a1, _mm256_sign_epi8(x1, w->u1));

		return _mm256_add_epi32(_mm256_madd_epi16(p0, ones), _mm256_madd_epi16(p1, ones));
	}
	/* unsigned codes <= 15: the pairs of both halves add without overflow */
	return _mm256_madd_epi16(
		_mm256_add_epi16(_mm256_maddubs_epi16(w->u0, x0), _mm256_maddubs_epi16(w->u1, x1)),
		ones);
}

/*
 * One row x T <= 4 tokens of a quantized matrix: mn the row's mins as
 * floats, sq + t * NB token t's block scales (block_scales(): the fp32
 * product s x qs). Per block the row's weights are unpacked once for
 * the T tokens. One row at a time keeps the weights
 * one sequential stream: tiles of 2 and 4 rows interleave streams 1-2 KiB
 * apart and measured slower at batch 1 (the hardware prefetcher follows
 * one stream better than four), and a tile of 2 rows at batch 1 measured
 * no faster with the weights in cache either (the core's vector ports,
 * not one accumulator's FMA chain, bound a block). The stream is
 * prefetched PF_DIST ahead.
 */
INL void q_tile(enum moem_prec p, const uint8_t *wq, const float *sq, const float *mn, uint32_t NB,
		uint32_t gshift, int mins, const int8_t *const *xq, const float *const *xs,
		const int T, float *y, uint32_t ldy)
{
	__m256 acc[4];

#pragma GCC unroll 4
	for (int t = 0; t < T; t++)
		acc[t] = _mm256_setzero_ps();
	for (uint32_t b = 0; b < NB; b++) {
		const uint32_t bpb = p == MOEM_PREC_Q8 ? 64 : p == MOEM_PREC_Q4 ? 32 : 16;
		const struct qw w = q_unpack(p, wq, b);

		if (!((b * bpb) & 63)) /* bytes per block */
			pf(wq + (size_t)bpb * b);

#pragma GCC unroll 4
		for (int t = 0; t < T; t++) {
			const int8_t *xb = xq[t] + 64 * (size_t)b;
			__m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)xb);
			__m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(xb + 32));
			__m256i d = q_dot(p, &w, x0, x1);

			acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d),
						 _mm256_broadcast_ss(sq + (size_t)t * NB + b),
						 acc[t]);
		}
	}
#pragma GCC unroll 4
	for (int t = 0; t < T; t++) {
		float v = hsum8(acc[t]);

		if (p != MOEM_PREC_Q8 && mins)
			v += min_term(mn, xs[t], NB >> gshift, gshift);
		y[(size_t)t * ldy] = v;
	}
}

/*
 * sq[b] = sw[b >> gshift] x qs[b] for the NB blocks of a row and a token:
 * the scale of each block's integer dot product, the very fp32 product
 * the tile took per block before (a broadcast of each and a vmulps),
 * made 8 blocks to an instruction once per row and token.
 */
static void block_scales(const float *sw, const float *qs, uint32_t NB, uint32_t gshift, float *sq)
{
	uint32_t b = 0;

	if (gshift) { /* two blocks per group: each scale twice */
		const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);

		for (; b + 8 <= NB; b += 8) {
			__m256 s = _mm256_permutevar8x32_ps(
				_mm256_castps128_ps256(_mm_loadu_ps(sw + b / 2)), dup);

			_mm256_storeu_ps(sq + b, _mm256_mul_ps(s, _mm256_loadu_ps(qs + b)));
		}
	} else {
		for (; b + 8 <= NB; b += 8)
			_mm256_storeu_ps(sq + b, _mm256_mul_ps(_mm256_loadu_ps(sw + b),
							       _mm256_loadu_ps(qs + b)));
	}
	for (; b < NB; b++)
		sq[b] = sw[b >> gshift] * qs[b];
}

/* Rows per q_rows() call, and the row length (blocks) below which batch 1 takes it. */
#define SHORT_R	 4
#define SHORT_NB 32

/*
 * R rows x 1 token of a matrix with short rows (K < 2048: an expert's
 * down projection), for batch 1. There one row is only 12 blocks, and a
 * row's own setup (its scales converted, block scales made, the min
 * term, one chain of NB dependent FMAs) cost about as much as its
 * blocks: q2 at 2048 x 768 ran at 0.34 of the read stream. R adjacent
 * rows are still one sequential stream, their scales and mins are
 * converted in one go with no tail, and R accumulator chains overlap.
 * Each block's scale is the same fp32 product sw x qs that
 * block_scales() makes, taken in the loop, so every output keeps
 * q_tile's order and bits (test_cpu_kern). Long rows stay on q_tile:
 * there R streams a KiB apart measured slower, as above.
 */
INL void q_rows(enum moem_prec p, const uint8_t *wq, size_t rowb, const float *sw, const float *mn,
		uint32_t G, uint32_t NB, uint32_t gshift, const int8_t *xq, const float *qs,
		const float *xs, const int R, float *y)
{
	const uint32_t bpb = p == MOEM_PREC_Q4 ? 32 : 16; /* bytes per block */
	__m256 acc[SHORT_R];

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		acc[r] = _mm256_setzero_ps();
	for (uint32_t b = 0; b < NB; b++) {
		const int8_t *xb = xq + 64 * (size_t)b;
		__m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)xb);
		__m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(xb + 32));
		__m256 xsc = _mm256_broadcast_ss(qs + b);

#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			const struct qw w = q_unpack(p, wq + r * rowb, b);
			__m256 s =
				_mm256_mul_ps(_mm256_broadcast_ss(sw + r * G + (b >> gshift)), xsc);

			if (!((b * bpb) & 63))
				pf(wq + r * rowb + (size_t)bpb * b);
			acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q_dot(p, &w, x0, x1)), s,
						 acc[r]);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		y[r] = hsum8(acc[r]) + min_term(mn + r * G, xs, NB >> gshift, gshift);
}

/*
 * 2 rows x T <= 4 tokens of a short-row matrix (K < 2048), for calls of
 * several tokens (prefill: the tokens routed to an expert): each
 * token's activation block is loaded once for both rows, where the
 * one-row tile loaded it per row (a profile of a q4 prefill had most of
 * the tile's time on the vpmaddubsw that take the activations from
 * memory), and a row pair's scales convert in one go. On long rows it
 * measured slower at 4 tokens (two streams a KiB apart) and no faster
 * at 16, so they keep q_tile. sq + (r * 4 + t) * NB: block scales of
 * row r, token t. The min term is min_pass()'s. Same order per output
 * as q_tile.
 */
INL void q_tile2(enum moem_prec p, const uint8_t *wq, size_t rowb, const float *sq, uint32_t NB,
		 const int8_t *const *xq, const int T, float *y, uint32_t ldy)
{
	const uint32_t bpb = p == MOEM_PREC_Q4 ? 32 : 16; /* bytes per block */
	__m256 acc[2][4];

#pragma GCC unroll 4
	for (int t = 0; t < T; t++)
		acc[0][t] = acc[1][t] = _mm256_setzero_ps();
	for (uint32_t b = 0; b < NB; b++) {
		const struct qw w0 = q_unpack(p, wq, b), w1 = q_unpack(p, wq + rowb, b);

		if (!((b * bpb) & 63)) {
			pf(wq + (size_t)bpb * b);
			pf(wq + rowb + (size_t)bpb * b);
		}
#pragma GCC unroll 4
		for (int t = 0; t < T; t++) {
			const int8_t *xb = xq[t] + 64 * (size_t)b;
			__m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)xb);
			__m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(xb + 32));

			acc[0][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q_dot(p, &w0, x0, x1)),
						    _mm256_broadcast_ss(sq + (size_t)t * NB + b),
						    acc[0][t]);
			acc[1][t] = _mm256_fmadd_ps(
				_mm256_cvtepi32_ps(q_dot(p, &w1, x0, x1)),
				_mm256_broadcast_ss(sq + (size_t)(4 + t) * NB + b), acc[1][t]);
		}
	}
#pragma GCC unroll 4
	for (int t = 0; t < T; t++) {
		y[(size_t)t * ldy] = hsum8(acc[0][t]);
		y[(size_t)t * ldy + 1] = hsum8(acc[1][t]);
	}
}

/*
 * Row by row; the tokens in groups of 4, which share each block of the
 * row as unpacked once. scratch: the row's scales (and mins) as floats
 * and the block scales of up to 4 tokens, 2 G + 4 NB <= K floats; in
 * q_rows() the scales and mins of SHORT_R rows, 2 SHORT_R G <= K / 8;
 * for q_tile2() 2 rows' scales and block scales, 2 G + 8 NB <= K / 4.
 */
INL void avx2_q(enum moem_prec p, enum cpu_act_fmt fmt, const struct moem_qmat_layout *l,
		const uint8_t *mat, uint32_t r0, uint32_t r1, const struct cpu_act *x,
		const uint32_t *tok, uint32_t T, float *y, uint32_t ldy, float *scratch)
{
	const uint32_t K = l->cols, NB = K / MOEM_CPU_QBLOCK, G = l->groups_per_row;
	const uint32_t gshift = p == MOEM_PREC_Q2 ? 0 : 1;
	const int8_t *xq_all = x->v[fmt];
	float *sw = scratch, *mn = scratch + G, *sq = scratch + 2 * G;
	uint32_t r = r0;

	if (T == 1 && NB < SHORT_NB && p != MOEM_PREC_Q8) {
		const uint16_t *s16 = (const uint16_t *)(const void *)(mat + l->scale_off);
		const uint16_t *m16 = (const uint16_t *)(const void *)(mat + l->min_off);

		for (; r + SHORT_R <= r1; r += SHORT_R) {
			f16_row(s16 + (size_t)r * G, sw, SHORT_R * G);
			f16_row(m16 + (size_t)r * G, sw + SHORT_R * G, SHORT_R * G);
			q_rows(p, mat + l->data_off + (size_t)r * l->row_bytes, l->row_bytes, sw,
			       sw + SHORT_R * G, G, NB, gshift, xq_all + (size_t)tok[0] * K,
			       x->qs + (size_t)tok[0] * NB, x->xs + (size_t)tok[0] * NB, SHORT_R,
			       y + (r - r0));
		}
	}
	if (T > 1 && NB < SHORT_NB && p != MOEM_PREC_Q8) {
		const uint16_t *s16 = (const uint16_t *)(const void *)(mat + l->scale_off);

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

		f16_row((const uint16_t *)(const void *)(mat + l->scale_off) + (size_t)r * G, sw,
			G);
		if (p != MOEM_PREC_Q8 && T == 1) /* else min_pass() */
			f16_row((const uint16_t *)(const void *)(mat + l->min_off) + (size_t)r * G,
				mn, G);
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
		min_pass((const uint16_t *)(const void *)(mat + l->min_off), G, gshift, x, NB, tok,
			 T, r0, r1, y, ldy, scratch);
}

static void avx2_q8(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0, uint32_t r1,
		    const struct cpu_act *x, const uint32_t *tok, uint32_t T, float *y,
		    uint32_t ldy, float *scratch)
{
	avx2_q(MOEM_PREC_Q8, CPU_ACT_QNAT, l, mat, r0, r1, x, tok, T, y, ldy, scratch);
}

static void avx2_q4(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0, uint32_t r1,
		    const struct cpu_act *x, const uint32_t *tok, uint32_t T, float *y,
		    uint32_t ldy, float *scratch)
{
	avx2_q(MOEM_PREC_Q4, CPU_ACT_QEO, l, mat, r0, r1, x, tok, T, y, ldy, scratch);
}

static void avx2_q2(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0, uint32_t r1,
		    const struct cpu_act *x, const uint32_t *tok, uint32_t T, float *y,
		    uint32_t ldy, float *scratch)
{
	avx2_q(MOEM_PREC_Q2, CPU_ACT_QM4, l, mat, r0, r1, x, tok, T, y, ldy, scratch);
}

const struct moem_cpu_kern moem_cpu_kern_avx2 = {
	.isa = MOEM_CPU_ISA_AVX2,
	.rows = {avx2_bf16, avx2_q8, avx2_q4, avx2_q2},
	.fmt = {CPU_ACT_F32, CPU_ACT_QNAT, CPU_ACT_QEO, CPU_ACT_QM4},
};
