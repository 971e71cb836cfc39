// SPDX-License-Identifier: GPL-2.0-only
/*
 * Combine: h[t][i] += sum over slots j < cnt[t] of w[t][j] * routed[t][j][i]
 * plus the shared experts' rows, in slot order with one rounding per
 * product and per sum (__fmul_rn/__fadd_rn: no FMA), bitwise identical to
 * the CPU backend. One thread per (token, i).
 */
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(256) moem_combine(const moem_kcombine_params p)
{
	const uint32_t t = blockIdx.y, i = blockIdx.x * 256 + threadIdx.x;
	float *h = reinterpret_cast<float *>(p.h);
	float acc = 0.0f;
	uint32_t cnt;

	if (i >= p.H)
		return;
	cnt = p.k ? reinterpret_cast<const uint32_t *>(p.cnt)[t] : 0;
	if (cnt > p.k)
		cnt = p.k;
	for (uint32_t j = 0; j < cnt; j++) {
		const float wj = reinterpret_cast<const float *>(p.w)[(size_t)t * p.k + j];
		const float o =
			reinterpret_cast<const float *>(p.routed)[((size_t)t * p.k + j) * p.H + i];

		acc = __fadd_rn(acc, __fmul_rn(wj, o));
	}
	for (uint32_t s = 0; s < p.n_shared; s++)
		acc = __fadd_rn(acc, reinterpret_cast<const float *>(
					     p.shared)[((size_t)t * p.n_shared + s) * p.H + i]);
	h[(size_t)t * p.H + i] = __fadd_rn(h[(size_t)t * p.H + i], acc);
}
