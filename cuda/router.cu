// SPDX-License-Identifier: GPL-2.0-only
/*
 * Router GEMM: logits[n][r] = gate[r] . x[n] (bf16 in, fp32 out) through
 * gemm.cuh's tile engine. N is small (8..256 experts), so each block's 4
 * warps split K four ways on one 16-row tile, giving N/16 * 4 warps that
 * each stream a quarter of 16 gate rows. Up to 64 tokens per launch.
 */
#include "gemm.cuh"

template <int NT> MOEM_DEVI void router(const moem_kgemm_params &p)
{
	MOEM_DYN_SMEM(smem);
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const uint32_t r0 = blockIdx.x * 16;
	const moem_kq_mat mq = { 0, 0, p.K * 2, 0 };
	const uint8_t *const wb[1] = { reinterpret_cast<const uint8_t *>(p.w) };
	const SrcBf16 src = { reinterpret_cast<const uint16_t *>(p.x), nullptr, p.K };
	float acc[1][NT][4] = {};
	float *out = reinterpret_cast<float *>(p.out);

	gemm_tile<P_BF16, NT, 4, 1, false>(wb, mq, p.rows, p.K, r0, warp, src, p.n_tok, acc, smem);
	reduce_ks<NT, 1, 4, 1>(acc, smem, 0, warp);
	if (warp)
		return;
#pragma unroll
	for (int nt = 0; nt < NT; nt++)
#pragma unroll
		for (int c = 0; c < 4; c++) {
			const uint32_t n = nt * MOEM_K_NTILE + 2 * t + (c & 1);
			const uint32_t row = r0 + g + (c >> 1) * 8;

			if (n < p.n_tok && row < p.rows)
				out[(size_t)n * p.out_stride + row] = acc[0][nt][c];
		}
}

#define MOEM_ROUTER_KERNEL(NT)                                                                     \
	extern "C" __global__ void __launch_bounds__(MOEM_K_THREADS)                               \
		moem_router_n##NT(const moem_kgemm_params p)                                       \
	{                                                                                          \
		router<NT>(p);                                                                     \
	}

MOEM_ROUTER_KERNEL(1)
MOEM_ROUTER_KERNEL(2)
MOEM_ROUTER_KERNEL(4)
MOEM_ROUTER_KERNEL(8)
