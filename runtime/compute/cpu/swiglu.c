// SPDX-License-Identifier: GPL-2.0-only
/* The FFN's SwiGLU activation on the CPU backend (cpu_int.h moem_cpu_swiglu()). */
#include <string.h>

#include "cpu_int.h"

/*
 * o[i] = silu(g[i]) * u[i] = g / (1 + e^-g) * u. e^x by Cody-Waite
 * reduction and Cephes' degree-6 polynomial (about 1 ulp from expf), in
 * plain float operations without branches, so that every build and clone
 * vectorises the loop and gives the same bits: libm's expf, one call a
 * value, was a tenth of an expert FFN at 64 tokens. Where e^x would be
 * below 2^-125 (1 + e is 1 either way) x is clamped; above FLT_MAX it is
 * inf, as expf's; a NaN g gives NaN through the division.
 *
 * This file is built with -fno-trapping-math (mk/backend.mk): without it
 * GCC keeps the clamps as branches in every clone but the AVX-512 one
 * (which has masked moves), and the AVX2 clone ran the loop one value at
 * a time. It changes no value here, only whether a comparison may raise
 * a floating-point flag that nothing reads.
 */
MOEM_CPU_CLONES512 void moem_cpu_swiglu(const float *g, const float *u, float *o, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		float x = -g[i], nf, r, p, s, e;
		uint32_t bits;

		x = x == x ? x : 0.0f;
		x = x < -87.0f ? -87.0f : x > 89.0f ? 89.0f : x;
		nf = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round(x / ln 2) */
		r = x - nf * 0.693359375f;
		r = r - nf * -2.12194440e-4f;
		p = 1.9875691500e-4f;
		p = p * r + 1.3981999507e-3f;
		p = p * r + 8.3334519073e-3f;
		p = p * r + 4.1665795894e-2f;
		p = p * r + 1.6666665459e-1f;
		p = p * r + 5.0000001201e-1f;
		p = p * (r * r) + r + 1.0f;
		/* 2^(n - 1) (0 at n = -126, where e is negligible), then x 2: inf past FLT_MAX */
		bits = (uint32_t)((int32_t)nf + 126) << 23;
		memcpy(&s, &bits, sizeof(s));
		e = p * s * 2.0f;
		o[i] = g[i] / (1.0f + e) * u[i];
	}
}
