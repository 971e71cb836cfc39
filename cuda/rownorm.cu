// SPDX-License-Identifier: GPL-2.0-only
/*
 * RMSNorm of strided f32 rows (q_norm/k_norm, MLA's q_a/kv_a layernorms),
 * in place or into bf16: a block per row with rmsnorm.cu's numerics (the
 * sum of squares in double, every later step the single IEEE float
 * operation the CPU backend does), so f32 outputs agree with the CPU
 * backend except where the double sum's last rounding crosses a float.
 * Each thread reads its elements before the barrier and writes the same
 * ones after it, so y may be x.
 */
#include "common.cuh"
#include "decode_kparams.h"

#define RN_THREADS 256

extern "C" __global__ void __launch_bounds__(RN_THREADS) moem_rownorm(const moem_krownorm_params p)
{
	__shared__ double part[RN_THREADS / 32];
	const float *x = reinterpret_cast<const float *>(p.x) + (size_t)blockIdx.x * p.x_stride;
	const uint16_t *w = reinterpret_cast<const uint16_t *>(p.w);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	double ss = 0.0;
	float ms, r;

	for (uint32_t i = threadIdx.x; i < p.n; i += RN_THREADS)
		ss = __dadd_rn(ss, __dmul_rn((double)x[i], (double)x[i]));
#pragma unroll
	for (int off = 16; off; off >>= 1)
		ss += __shfl_down_sync(0xffffffffu, ss, off);
	if (lane == 0)
		part[warp] = ss;
	__syncthreads();
	ss = 0.0;
	for (int i = 0; i < RN_THREADS / 32; i++)
		ss += part[i];
	ms = (float)(ss / (double)p.n);
	r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(ms, p.eps)));
	for (uint32_t i = threadIdx.x; i < p.n; i += RN_THREADS) {
		const float v = __fmul_rn(__fmul_rn(x[i], r), bf16_bits_to_f32(w[i]));

		if (p.y_bf16)
			reinterpret_cast<uint16_t *>(p.y)[(size_t)blockIdx.x * p.y_stride + i] =
				__bfloat16_as_ushort(__float2bfloat16_rn(v));
		else
			reinterpret_cast<float *>(p.y)[(size_t)blockIdx.x * p.y_stride + i] = v;
	}
}
