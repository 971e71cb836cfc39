// SPDX-License-Identifier: GPL-2.0-only
/*
 * RMSNorm: one block per token. The sum of squares is accumulated in
 * double (float products are exact there, so the CPU's different order
 * changes it by ~1e-16 at most); every later step is the single IEEE
 * float operation the CPU backend does, so the bf16 results agree except
 * when that last double rounding crosses a float boundary.
 */
#include "common.cuh"

#define RMS_THREADS 256

extern "C" __global__ void __launch_bounds__(RMS_THREADS)
	moem_rmsnorm(const moem_krmsnorm_params p)
{
	__shared__ double part[RMS_THREADS / 32];
	const float *x = reinterpret_cast<const float *>(p.x) + (size_t)blockIdx.x * p.H;
	const uint16_t *w = reinterpret_cast<const uint16_t *>(p.w);
	uint16_t *y = reinterpret_cast<uint16_t *>(p.y) + (size_t)blockIdx.x * p.H;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	double ss = 0.0;
	float ms, r;

	for (uint32_t i = threadIdx.x; i < p.H; i += RMS_THREADS)
		ss = __dadd_rn(ss, __dmul_rn((double)x[i], (double)x[i]));
#pragma unroll
	for (int off = 16; off; off >>= 1)
		ss += __shfl_down_sync(0xffffffffu, ss, off);
	if (lane == 0)
		part[warp] = ss;
	__syncthreads();
	ss = 0.0;
	for (int i = 0; i < RMS_THREADS / 32; i++)
		ss += part[i];
	ms = (float)(ss / (double)p.H);
	r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(ms, p.eps)));
	for (uint32_t i = threadIdx.x; i < p.H; i += RMS_THREADS) {
		const float v = __fmul_rn(__fmul_rn(x[i], r), bf16_bits_to_f32(w[i]));

		y[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
	}
}
