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
 * Per output the order is, for bf16: lane j of one 8-wide accumulator
 * takes, 8 elements by 8, in k order, then an 8-to-1 sum of fixed shape;
 * for q8/q4/q2: two fp32 chains take, block by block in k order, a
 * block's integer dot product summed in two halves (q2: in its full
 * groups of 4 blocks, block b into one chain and b + 1 into the other),
 * times the block's scale, then one sum of the two (q_quad()); q4/q2 add
 * their min term (sum over groups of min x block sums, in group order)
 * last. Rows and tokens are only interleaved, never merged, so the bits
 * do not depend on how many share a call.
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
/*
 * Batch 1's quads of four rows prefetch the rows PFQ quads ahead as one
 * sequential stream, 64 bytes at a time as they read (q_quad()): four
 * rows each prefetched PF_DIST ahead of itself ran at half the rate of
 * one row alone (four streams 0.5-2 KiB apart). Rows of 2048, one
 * thread, against the former one-row kernel: 1.00, 0.90 and 0.88 of its
 * time for q8, q4 and q2 with 2 quads; 1 was slower, 3-4 slower for q8
 * and q4.
 */
#define PFQ	2

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

INL __m256 bcast128(const float *p)
{
	return _mm256_broadcast_ps((const __m128 *)(const void *)p);
}

/* [p[0] x 4, p[1] x 4]: two blocks' scales, each over its half of the lanes */
INL __m256 bcast2x4(const float *p)
{
	return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_castsi128_ps(
						_mm_loadl_epi64((const __m128i *)(const void *)p))),
					_mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

/* The four q2 operands of blocks b, b + 1 (32 bytes of codes): bit pair i of every byte. */
struct qw2 {
	__m256i u[4];
};

INL struct qw2 q2_unpack2(const uint8_t *wq, uint32_t b)
{
	const __m256i m2 = _mm256_set1_epi8(3);
	const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(wq + 16 * b));
	struct qw2 w;

	w.u[0] = _mm256_and_si256(v, m2);
	w.u[1] = _mm256_and_si256(_mm256_srli_epi16(v, 2), m2);
	w.u[2] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m2);
	w.u[3] = _mm256_and_si256(_mm256_srli_epi16(v, 6), m2);
	return w;
}

/*
 * Blocks b, b + 1 (b % 4 = 0 or 2, in a full group of 4) of q2 against
 * QM4X activations: lanes 0-3 block b's integer dot product, 4-7 block
 * b + 1's. Codes <= 3: the four operands' pair sums add in 16 bits
 * without overflow (4 x 2 x 3 x 127).
 */
INL __m256i q2_dot2(const struct qw2 *w, const int8_t *xq, uint32_t b)
{
	const int8_t *x = xq + 64 * (size_t)(b & ~3u) + 32 * ((b >> 1) & 1);
	__m256i s =
		_mm256_maddubs_epi16(w->u[0], _mm256_loadu_si256((const __m256i *)(const void *)x));

#pragma GCC unroll 3
	for (int i = 1; i < 4; i++)
		s = _mm256_add_epi16(
			s, _mm256_maddubs_epi16(
				   w->u[i], _mm256_loadu_si256(
						    (const __m256i *)(const void *)(x + 64 * i))));
	return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}

INL __m256i hsum4x8(const __m256i *d)
{
	return _mm256_hadd_epi32(_mm256_hadd_epi32(d[0], d[1]), _mm256_hadd_epi32(d[2], d[3]));
}

/*
 * Before blocks b..b + nb - 1 of bpb bytes: batch 1's next quad (pfq)
 * as one sequential stream, 4 rows' worth of what these blocks read;
 * else each row PF_DIST ahead of itself, once per 64 bytes.
 */
INL void q_prefetch(const uint8_t *const *wr, const int R, const int T, const uint8_t *pfq,
		    uint32_t bpb, uint32_t b, uint32_t nb)
{
	if (T == 1 && pfq) {
		for (uint32_t o = 0; o < 4 * bpb * nb; o += 64)
			_mm_prefetch((const char *)pfq + 4 * bpb * b + o, _MM_HINT_T0);
	} else if (!((b * bpb) & 63)) {
#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
			pf(wr[r] + (size_t)bpb * b);
	}
}

/*
 * Four outputs to an fp32 vector (a quad): lane l of a quad is one
 * (row, token) output. Per block, each output's integer dot product in 8
 * lanes (q_dot()) is summed to two integers, of its lanes 0-3 and 4-7,
 * by two levels of vphaddd over the quad's four (exact), converted
 * (exact: |sum| < 2^24) and added into the quad's accumulator by one
 * FMA with the four outputs' block scales (fp32 products sw x qs):
 * lane l of the low half is output l's chain over its lanes 0-3, lane
 * l of the high half the chain over 4-7, and the output is low plus
 * high. A conversion and an FMA per output and block took the
 * multiply pipes as long as the integer products of q4/q2 and a third
 * as long as q8's (register-only loops, AMD EPYC: 1.15 against 0.74
 * ns a token and block for q4, 0.63 with one of each per quad).
 *
 * A call computes R rows x T tokens, R T = 4 or 8 (one quad or two):
 * lane l = r T + t of quad l / 4. The shapes: 4 x 1 (batch 1: four
 * row streams, prefetched as one from pfq, PFQ quads ahead), 2 x 2,
 * 1 x 4 and 2 x 4 (the tokens of a group of four, each block of x
 * loaded once for two rows). A shape's lanes past the real rows or tokens repeat the last
 * real one and are not stored. Every output has the same operations
 * in every shape, so its bits depend on nothing but its row and token.
 *
 * Scales: with T >= 4 a quad is one row, whose scales (row r's G floats
 * at swr + r G) are broadcast, and qsq holds the four tokens' block
 * scales [b][4]; with T == 1 swq holds the four rows' scales [g][4] and
 * qs1 is the token's block scales; 2 x 2 takes both tables, in lane
 * order.
 */
INL void q_quad(enum moem_prec p, const uint8_t *const *wr, uint32_t NB, uint32_t gshift,
		const int8_t *const *xq, const float *swr, uint32_t G, const float *swq,
		const float *qsq, const float *qs1, const uint8_t *pfq, const int R, const int T,
		__m128 *out)
{
	const uint32_t bpb = p == MOEM_PREC_Q8 ? 64 : p == MOEM_PREC_Q4 ? 32 : 16;
	/* q2's blocks in pairs up to the last full group of 4 (QM4X) */
	const uint32_t NP = p == MOEM_PREC_Q2 ? NB / 4 * 4 : 0;
	__m256 acc[2];

#pragma GCC unroll 2
	for (int q = 0; q < R * T / 4; q++)
		acc[q] = _mm256_setzero_ps();
	for (uint32_t b = 0; b < NP; b += 2) {
		q_prefetch(wr, R, T, pfq, bpb, b, 2);
#pragma GCC unroll 2
		for (int q = 0; q < R * T / 4; q++) {
			__m256i d[4];
			__m256 s;

#pragma GCC unroll 4
			for (int i = 0; i < 4; i++) {
				const int r = (4 * q + i) / T, t = (4 * q + i) % T;
				const struct qw2 w = q2_unpack2(wr[r], b);

				d[i] = q2_dot2(&w, xq[t], b);
			}
			if (T >= 4)
				s = _mm256_mul_ps(bcast2x4(swr + q * G + b),
						  _mm256_loadu_ps(qsq + 4 * b));
			else if (T == 1)
				s = _mm256_mul_ps(_mm256_loadu_ps(swq + 4 * b), bcast2x4(qs1 + b));
			else
				s = _mm256_mul_ps(_mm256_loadu_ps(swq + 4 * b),
						  _mm256_loadu_ps(qsq + 4 * b));
			acc[q] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum4x8(d)), s, acc[q]);
		}
	}
	for (uint32_t b = NP; b < NB; b++) {
		q_prefetch(wr, R, T, pfq, bpb, b, 1);
#pragma GCC unroll 2
		for (int q = 0; q < R * T / 4; q++) {
			__m256i d[4];
			__m256 s;

#pragma GCC unroll 4
			for (int i = 0; i < 4; i++) {
				const int r = (4 * q + i) / T, t = (4 * q + i) % T;
				const struct qw w = q_unpack(p, wr[r], b);
				const int8_t *xb = xq[t] + 64 * (size_t)b;

				d[i] = q_dot(p, &w,
					     _mm256_loadu_si256((const __m256i *)(const void *)xb),
					     _mm256_loadu_si256(
						     (const __m256i *)(const void *)(xb + 32)));
			}
			if (T >= 4)
				s = _mm256_mul_ps(_mm256_broadcast_ss(swr + q * G + (b >> gshift)),
						  bcast128(qsq + 4 * b));
			else if (T == 1)
				s = _mm256_mul_ps(bcast128(swq + 4 * (b >> gshift)),
						  _mm256_broadcast_ss(qs1 + b));
			else
				s = _mm256_mul_ps(bcast128(swq + 4 * (b >> gshift)),
						  bcast128(qsq + 4 * b));
			acc[q] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum4x8(d)), s, acc[q]);
		}
	}
#pragma GCC unroll 2
	for (int q = 0; q < R * T / 4; q++)
		out[q] = _mm_add_ps(_mm256_castps256_ps128(acc[q]),
				    _mm256_extractf128_ps(acc[q], 1));
}

/* dst[j][4] = the four rows src[i] + j, j < n: rows of scales as lanes. */
static void lanes4(const float *const *src, uint32_t n, float *dst)
{
	uint32_t j = 0;

	for (; j + 4 <= n; j += 4) {
		__m128 a = _mm_loadu_ps(src[0] + j), b = _mm_loadu_ps(src[1] + j);
		__m128 c = _mm_loadu_ps(src[2] + j), d = _mm_loadu_ps(src[3] + j);

		_MM_TRANSPOSE4_PS(a, b, c, d);
		_mm_storeu_ps(dst + 4 * j, a);
		_mm_storeu_ps(dst + 4 * j + 4, b);
		_mm_storeu_ps(dst + 4 * j + 8, c);
		_mm_storeu_ps(dst + 4 * j + 12, d);
	}
	for (; j < n; j++)
		for (int i = 0; i < 4; i++)
			dst[4 * j + i] = src[i][j];
}

/*
 * Rows r0..r1 (in quads of four) x one token, xq its row: batch 1, and
 * a last token of a group left alone. xs1: the token's block sums, to
 * add q4/q2's min term here (batch 1), or NULL (q8; min_pass() after).
 * scratch: 4 G + 4 G + 4 G floats.
 */
INL void q_rows1(enum moem_prec p, const struct moem_qmat_layout *l, const uint8_t *mat,
		 uint32_t r0, uint32_t r1, const int8_t *xq, const float *qs1, const float *xs1,
		 float *y, float *scratch)
{
	const uint32_t NB = l->cols / MOEM_CPU_QBLOCK, G = l->groups_per_row;
	const uint32_t gshift = p == MOEM_PREC_Q2 ? 0 : 1;
	const uint16_t *s16 = (const uint16_t *)(const void *)(mat + l->scale_off);
	const uint16_t *m16 = (const uint16_t *)(const void *)(mat + l->min_off);
	float *sw = scratch, *mn = scratch + 4 * G, *swq = scratch + 8 * G;

	for (uint32_t r = r0; r < r1; r += 4) {
		const uint32_t n = r1 - r < 4 ? r1 - r : 4;
		const uint8_t *wr[4];
		const float *sr[4];
		float v[4];
		__m128 o;

		/* the n rows' scales and mins are adjacent: one conversion each */
		f16_row(s16 + (size_t)r * G, sw, n * G);
		if (xs1)
			f16_row(m16 + (size_t)r * G, mn, n * G);
		for (uint32_t i = 0; i < 4; i++) {
			const uint32_t ri = i < n ? i : n - 1;

			wr[i] = mat + l->data_off + (size_t)(r + ri) * l->row_bytes;
			sr[i] = sw + ri * G;
		}
		lanes4(sr, G, swq);
		q_quad(p, wr, NB, gshift, &xq, NULL, G, swq, NULL, qs1,
		       wr[0] + PFQ * 4 * (size_t)l->row_bytes, 4, 1, &o);
		_mm_storeu_ps(v, o);
		for (uint32_t i = 0; i < n; i++)
			y[r + i - r0] =
				xs1 ? v[i] + min_term(mn + i * G, xs1, NB >> gshift, gshift) : v[i];
	}
}

/*
 * Rows r0..r1 x T tokens: batch 1 in quads of rows (q_rows1()); more in
 * groups of four tokens, each group over the rows two at a time (2 x 4;
 * 3 tokens as 4 with one repeated), a group of 2 as 2 x 2 and of 1 as
 * batch 1's row quads; then min_pass() adds q4/q2's min terms. scratch:
 * 12 G floats for q_rows1(), or 2 G + 4 G for a pair of rows' scales
 * and the 2 x 2 lane table, 4 NB for the tokens' block scales; <= K / 4.
 */
INL void avx2_q(enum moem_prec p, enum cpu_act_fmt fmt, const struct moem_qmat_layout *l,
		const uint8_t *mat, uint32_t r0, uint32_t r1, const struct cpu_act *x,
		const uint32_t *tok, uint32_t T, float *y, uint32_t ldy, float *scratch)
{
	const uint32_t K = l->cols, NB = K / MOEM_CPU_QBLOCK, G = l->groups_per_row;
	const uint32_t gshift = p == MOEM_PREC_Q2 ? 0 : 1;
	const uint16_t *s16 = (const uint16_t *)(const void *)(mat + l->scale_off);
	const int8_t *xq_all = x->v[fmt];
	float *sw = scratch, *swq = scratch + 2 * G, *qsq = scratch + 6 * G;

	if (T == 1) {
		q_rows1(p, l, mat, r0, r1, xq_all + (size_t)tok[0] * K, x->qs + (size_t)tok[0] * NB,
			p != MOEM_PREC_Q8 ? x->xs + (size_t)tok[0] * NB : NULL, y, scratch);
		return;
	}
	for (uint32_t i = 0; i < T; i += 4) {
		const uint32_t n = T - i < 4 ? T - i : 4;
		const int8_t *xq[4];
		const float *qs[4];
		float *y_ = y + (size_t)i * ldy;

		if (n == 1) {
			q_rows1(p, l, mat, r0, r1, xq_all + (size_t)tok[i] * K,
				x->qs + (size_t)tok[i] * NB, NULL, y_, scratch);
			continue;
		}
		for (uint32_t t = 0; t < 4; t++) {
			/* 2 x 2's lanes are t0 t1 t0 t1; 1 x 4's repeat the last token */
			const uint32_t ti = n == 2 ? t % 2 : t < n ? t : n - 1;

			xq[t] = xq_all + (size_t)tok[i + ti] * K;
			qs[t] = x->qs + (size_t)tok[i + ti] * NB;
		}
		lanes4(qs, NB, qsq);
		for (uint32_t r = r0; r < r1; r += 2) {
			const uint32_t nr = r1 - r < 2 ? 1 : 2, rl = r + nr - 1;
			const uint8_t *wr[2] = {mat + l->data_off + (size_t)r * l->row_bytes,
						mat + l->data_off + (size_t)rl * l->row_bytes};
			__m128 o[2];
			float v[8];

			f16_row(s16 + (size_t)r * G, sw, G);
			f16_row(s16 + (size_t)rl * G, sw + G, G);
			if (n == 2) {
				const float *sr[4] = {sw, sw, sw + G, sw + G};

				lanes4(sr, G, swq);
				q_quad(p, wr, NB, gshift, xq, NULL, G, swq, qsq, NULL, NULL, 2, 2,
				       o);
				_mm_storeu_ps(v, o[0]);
				for (uint32_t j = 0; j < nr; j++)
					for (uint32_t t = 0; t < 2; t++)
						y_[(size_t)t * ldy + (r + j - r0)] = v[2 * j + t];
				continue;
			}
			if (nr == 2)
				q_quad(p, wr, NB, gshift, xq, sw, G, NULL, qsq, NULL, NULL, 2, 4,
				       o);
			else
				q_quad(p, wr, NB, gshift, xq, sw, G, NULL, qsq, NULL, NULL, 1, 4,
				       o);
			_mm_storeu_ps(v, o[0]);
			_mm_storeu_ps(v + 4, o[1]);
			for (uint32_t j = 0; j < nr; j++)
				for (uint32_t t = 0; t < n; t++)
					y_[(size_t)t * ldy + (r + j - r0)] = v[4 * j + t];
		}
	}
	if (p != MOEM_PREC_Q8)
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
	avx2_q(MOEM_PREC_Q2, CPU_ACT_QM4X, l, mat, r0, r1, x, tok, T, y, ldy, scratch);
}

const struct moem_cpu_kern moem_cpu_kern_avx2 = {
	.isa = MOEM_CPU_ISA_AVX2,
	.rows = {avx2_bf16, avx2_q8, avx2_q4, avx2_q2},
	.fmt = {CPU_ACT_F32, CPU_ACT_QNAT, CPU_ACT_QEO, CPU_ACT_QM4X},
};
