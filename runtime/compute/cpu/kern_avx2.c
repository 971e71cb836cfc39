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

INL float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

INL __m256 bf16x8(const uint16_t *p)
{
	__m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);

	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/*
 * n fp16 values to fp32 (exact), with F16C for the tail too: a q8 down
 * row (K 768) has 6 scales, and the library's software conversion of
 * those was a visible share of a q8 decode profile.
 */
static void f16_row(const uint16_t *in, float *out, uint32_t n)
{
	uint32_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(
						  (const __m128i *)(const void *)(in + i))));
	for (; i < n; i++)
		out[i] = _cvtsh_ss(in[i]);
}

/* ---- bf16: R rows x T tokens, one accumulator per output ------------------ */

INL void bf16_tile(const uint16_t *w0, size_t ldw, const float *const *xr, uint32_t K, const int R,
		   const int T, float *y, uint32_t ldy)
{
	__m256 acc[4][4];

	for (int r = 0; r < R; r++)
		for (int t = 0; t < T; t++)
			acc[r][t] = _mm256_setzero_ps();
	for (uint32_t k = 0; k < K; k += 8) {
		__m256 w[4];

		for (int r = 0; r < R; r++)
			w[r] = bf16x8(w0 + r * ldw + k);
		for (int t = 0; t < T; t++) {
			__m256 x = _mm256_loadu_ps(xr[t] + k);

			for (int r = 0; r < R; r++)
				acc[r][t] = _mm256_fmadd_ps(w[r], x, acc[r][t]);
		}
	}
	for (int r = 0; r < R; r++)
		for (int t = 0; t < T; t++)
			y[(size_t)t * ldy + r] = hsum8(acc[r][t]);
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

static void avx2_bf16(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0,
		      uint32_t r1, const struct cpu_act *x, const uint32_t *tok, uint32_t T,
		      float *y, uint32_t ldy, float *scratch)
{
	const uint16_t *W = (const uint16_t *)(const void *)(mat + l->data_off);
	const float *xf = x->v[CPU_ACT_F32];
	const uint32_t K = l->cols;

	for (uint32_t i = 0; i < T; i += 4) {
		const float *xr[4];
		uint32_t n = T - i < 4 ? T - i : 4, r = r0;

		for (uint32_t t = 0; t < n; t++)
			xr[t] = xf + (size_t)tok[i + t] * K;
		/* one token (decode's GEMV): four rows, four FMA chains in flight */
		for (; n == 1 && r + 4 <= r1; r += 4) {
			float *y_ = y + (size_t)i * ldy + (r - r0);

			bf16_tile(W + (size_t)r * K, K, xr, K, 4, 1, y_, ldy);
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

/* ---- quantized: 1 row x T tokens, int8 blocks of 64 ------------------------ */

/* Sum of 32-bit lanes of two vpmaddubsw results, each widened separately (q8). */
INL __m256i dot_s8(__m256i aw0, __m256i w0, __m256i aw1, __m256i w1, const int8_t *xq)
{
	const __m256i ones = _mm256_set1_epi16(1);
	__m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)xq);
	__m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(xq + 32));
	__m256i p0 = _mm256_maddubs_epi16(aw0, _mm256_sign_epi8(x0, w0));
	__m256i p1 = _mm256_maddubs_epi16(aw1, _mm256_sign_epi8(x1, w1));

	return _mm256_add_epi32(_mm256_madd_epi16(p0, ones), _mm256_madd_epi16(p1, ones));
}

/* Unsigned weights (q4: <= 15, q2: <= 3): the 16-bit pairs of both halves add without overflow. */
INL __m256i dot_u(__m256i u0, __m256i u1, const int8_t *xq)
{
	__m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)xq);
	__m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(xq + 32));
	__m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(u0, x0), _mm256_maddubs_epi16(u1, x1));

	return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/*
 * One row of a quantized matrix against T tokens. gshift: log2(blocks per
 * group) (q8/q4: 1, q2: 0); sw/mn the row's scales and mins as floats.
 */
INL void q_tile(enum moem_prec p, const uint8_t *wq, const float *sw, const float *mn, uint32_t NB,
		uint32_t gshift, const int8_t *const *xq, const float *const *qs,
		const float *const *xs, const int T, float *y, uint32_t ldy)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
	__m256 acc[4];

	for (int t = 0; t < T; t++)
		acc[t] = _mm256_setzero_ps();
	for (uint32_t b = 0; b < NB; b++) {
		float s = sw[b >> gshift];
		__m256i u0, u1, a0 = _mm256_setzero_si256(), a1 = a0;

		if (p == MOEM_PREC_Q8) {
			u0 = _mm256_loadu_si256((const __m256i *)(const void *)(wq + 64 * b));
			u1 = _mm256_loadu_si256((const __m256i *)(const void *)(wq + 64 * b + 32));
			a0 = _mm256_abs_epi8(u0);
			a1 = _mm256_abs_epi8(u1);
		} else if (p == MOEM_PREC_Q4) {
			__m256i v =
				_mm256_loadu_si256((const __m256i *)(const void *)(wq + 32 * b));

			u0 = _mm256_and_si256(v, m4);
			u1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
		} else {
			__m128i v = _mm_loadu_si128((const __m128i *)(const void *)(wq + 16 * b));
			__m256i vv = _mm256_inserti128_si256(_mm256_castsi128_si256(v),
							     _mm_srli_epi16(v, 2), 1);

			u0 = _mm256_and_si256(vv, m2);
			u1 = _mm256_and_si256(_mm256_srli_epi16(vv, 4), m2);
		}
		for (int t = 0; t < T; t++) {
			const int8_t *xb = xq[t] + 64 * (size_t)b;
			__m256i d =
				p == MOEM_PREC_Q8 ? dot_s8(a0, u0, a1, u1, xb) : dot_u(u0, u1, xb);

			acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d),
						 _mm256_set1_ps(s * qs[t][b]), acc[t]);
		}
	}
	for (int t = 0; t < T; t++) {
		float v = hsum8(acc[t]);

		if (p != MOEM_PREC_Q8) {
			float m = 0.0f;

			for (uint32_t g = 0; g < (NB >> gshift); g++)
				m += mn[g] * (gshift ? xs[t][2 * g] + xs[t][2 * g + 1] : xs[t][g]);
			v += m;
		}
		y[(size_t)t * ldy] = v;
	}
}

INL void avx2_q(enum moem_prec p, enum cpu_act_fmt fmt, const struct moem_qmat_layout *l,
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
