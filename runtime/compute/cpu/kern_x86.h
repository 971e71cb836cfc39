/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * 256-bit helpers of the x86 row kernels (included by kern_avx2.c,
 * kern_avx512.c, the latter also in its SIMDe build, and kern_amx_q.c,
 * for f16_row()): kern_avx2.c's q4/q2 min term in particular
 * (min_term(), min_pass()) must be the very same instructions, lane by
 * lane, for every tile shape it has. Included after the file's
 * intrinsics header and its INL.
 */
#ifndef MOEM_CPU_KERN_X86_H
#define MOEM_CPU_KERN_X86_H

#include "kern.h"

INL float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
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

/*
 * The min term of q4/q2: the sum over groups of min x the group's
 * activation sum (q4: the sums of its two blocks), 8 groups at a time in
 * 8 lanes, the lanes summed in hsum8's shape, then the groups left over
 * in order. Out of line, so that every tile shape runs the very same
 * instructions for it. (A scalar chain of one add per group cost about
 * as much as a q2 row's blocks at batch 1.)
 */
static __attribute__((noinline, unused)) float min_term(const float *mn, const float *xs,
							uint32_t ng, uint32_t gshift)
{
	__m256 m8 = _mm256_setzero_ps();
	uint32_t g = 0;
	float m;

	for (; g + 8 <= ng; g += 8) {
		__m256 xg;

		if (gshift) {
			/* block pairs: vhaddps leaves groups 0 1 4 5 2 3 6 7, vpermpd reorders */
			__m256 h = _mm256_hadd_ps(_mm256_loadu_ps(xs + 2 * g),
						  _mm256_loadu_ps(xs + 2 * g + 8));

			xg = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(h), 0xd8));
		} else {
			xg = _mm256_loadu_ps(xs + g);
		}
		m8 = _mm256_add_ps(m8, _mm256_mul_ps(_mm256_loadu_ps(mn + g), xg));
	}
	m = hsum8(m8);
	for (; g < ng; g++)
		m += mn[g] * (gshift ? xs[2 * g] + xs[2 * g + 1] : xs[g]);
	return m;
}

/*
 * The min terms of rows r0..r1 x T tokens added to y (which holds each
 * output's hsum8 of its blocks), 8 tokens to a vector: the very
 * operations min_term() does for one output, lane by lane. xg: the
 * tokens' group sums, [g][8]; P[j]: what min_term()'s lane j holds (the
 * products of groups j, j + 8, ..., in order), summed in hsum8's tree;
 * then the groups left over, in order. Per row and 8 tokens this is
 * about 3 G instructions, where min_term() took about 30 per output: a
 * q4 prefill profile (16 tokens an expert) had min_term() at a quarter
 * of the expert FFN's time. scratch: 9 G floats.
 */
static __attribute__((unused)) void min_pass(const uint16_t *m16, uint32_t G, uint32_t gshift,
					     const struct cpu_act *x, uint32_t NB,
					     const uint32_t *tok, uint32_t T, uint32_t r0,
					     uint32_t r1, float *y, uint32_t ldy, float *scratch)
{
	float *xg = scratch, *mn = scratch + 8 * (size_t)G;
	const uint32_t G8 = G / 8 * 8;

	for (uint32_t i = 0; i < T; i += 8) {
		const uint32_t n = T - i < 8 ? T - i : 8;

		for (uint32_t t = 0; t < 8; t++) {
			const float *xs = x->xs + (size_t)tok[i + (t < n ? t : 0)] * NB;

			for (uint32_t g = 0; g < G; g++)
				xg[g * 8 + t] = t >= n	 ? 0.0f
						: gshift ? xs[2 * g] + xs[2 * g + 1]
							 : xs[g];
		}
		for (uint32_t r = r0; r < r1; r++) {
			__m256 m = _mm256_setzero_ps();
			float o[8];

			f16_row(m16 + (size_t)r * G, mn, G);
			if (G8) {
				__m256 P[8];

#pragma GCC unroll 8
				for (int j = 0; j < 8; j++)
					P[j] = _mm256_setzero_ps();
				for (uint32_t g = 0; g < G8; g += 8) {
#pragma GCC unroll 8
					for (int j = 0; j < 8; j++)
						P[j] = _mm256_add_ps(
							P[j],
							_mm256_mul_ps(
								_mm256_broadcast_ss(mn + g + j),
								_mm256_loadu_ps(xg + (g + j) * 8)));
				}
				m = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(P[0], P[4]),
								_mm256_add_ps(P[2], P[6])),
						  _mm256_add_ps(_mm256_add_ps(P[1], P[5]),
								_mm256_add_ps(P[3], P[7])));
			}
			for (uint32_t g = G8; g < G; g++)
				m = _mm256_add_ps(m, _mm256_mul_ps(_mm256_broadcast_ss(mn + g),
								   _mm256_loadu_ps(xg + g * 8)));
			_mm256_storeu_ps(o, m);
			for (uint32_t t = 0; t < n; t++)
				y[(size_t)(i + t) * ldy + (r - r0)] += o[t];
		}
	}
}

#endif /* MOEM_CPU_KERN_X86_H */
