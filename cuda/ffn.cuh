/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Grouped expert FFN kernels (SwiGLU), instantiated per precision by
 * ffn_<prec>.cu. Two launches per call and precision: gate/up writes the
 * fp32 activations silu(gate x) * (up x) of each (expert, token) to the
 * scratch rows act[act_off + n]; down reads them back (as a bf16 hi/lo
 * pair) and writes out[token][slot]. blockIdx.y picks the expert,
 * blockIdx.x its rows: 16 * RT per block. A descriptor with n = 0 is a
 * device-planned launch's spare (ffn_plan.cu: sized for the most experts
 * a layer can route); its blocks return at once, all together.
 */
#ifndef MOEM_CUDA_FFN_CUH
#define MOEM_CUDA_FFN_CUH

#include "gemm.cuh"

/*
 * A block's 4 warps take RT row tiles of 16 rows and split K KS = 4 / RT
 * ways. The plain kernels (moem_ffn_*_n<NT>) use RT = min(NT, 4); for NT 1
 * and 2 the _r<RT> kernels offer the other tilings (more rows per block:
 * the block's staging of x serves more weight bytes, which matters most
 * for the formats with few bytes per row), chosen per precision by the
 * host (runtime/compute/cuda/ops.c, ffn_kernel()).
 */
template <int NT> constexpr int FFN_RT_DEFAULT = NT < 4 ? NT : 4;

template <int P, int NT, int RT = FFN_RT_DEFAULT<NT>>
MOEM_DEVI void ffn_gateup(const moem_kffn_params &p)
{
	constexpr int KS = 4 / RT;
	MOEM_DYN_SMEM(smem);
	const moem_kffn_desc d = reinterpret_cast<const moem_kffn_desc *>(p.desc)[blockIdx.y];
	if (!d.n) /* an unused descriptor of a device-planned launch (ffn_plan.cu) */
		return;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int rt = warp % RT, ks = warp / RT, g = lane >> 2, t = lane & 3;
	const uint32_t r0 = (blockIdx.x * RT + rt) * 16;
	const uint8_t *blob = reinterpret_cast<const uint8_t *>(d.blob);
	const uint8_t *const wb[2] = {blob + p.mat_off[0], blob + p.mat_off[1]};
	const SrcBf16 src = {reinterpret_cast<const uint16_t *>(p.x),
			     reinterpret_cast<const uint32_t *>(p.assign) + d.assign_off, p.H};
	float acc[2][NT][4] = {};
	float *act = reinterpret_cast<float *>(p.act);

	gemm_tile<P, NT, KS, 2, false>(wb, p.mat[0], p.I, p.H, r0, ks, src, d.n, acc, smem);
	reduce_ks<NT, 2, KS, RT>(acc, smem, rt, ks);
	if (ks)
		return;
#pragma unroll
	for (int nt = 0; nt < NT; nt++)
#pragma unroll
		for (int c = 0; c < 4; c++) {
			const uint32_t n = nt * MOEM_K_NTILE + 2 * t + (c & 1);
			const uint32_t row = r0 + g + (c >> 1) * 8;
			const float gv = acc[0][nt][c], uv = acc[1][nt][c];

			if (n < d.n && row < p.I)
				act[(size_t)(d.act_off + n) * p.I + row] =
					gv / (1.0f + expf(-gv)) * uv;
		}
}

template <int P, int NT, int RT = FFN_RT_DEFAULT<NT>>
MOEM_DEVI void ffn_down(const moem_kffn_params &p)
{
	constexpr int KS = 4 / RT;
	MOEM_DYN_SMEM(smem);
	const moem_kffn_desc d = reinterpret_cast<const moem_kffn_desc *>(p.desc)[blockIdx.y];
	if (!d.n) /* an unused descriptor of a device-planned launch (ffn_plan.cu) */
		return;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int rt = warp % RT, ks = warp / RT, g = lane >> 2, t = lane & 3;
	const uint32_t r0 = (blockIdx.x * RT + rt) * 16;
	const uint8_t *blob = reinterpret_cast<const uint8_t *>(d.blob);
	const uint8_t *const wb[1] = {blob + p.mat_off[2]};
	const SrcF32 src = {reinterpret_cast<const float *>(p.act) + (size_t)d.act_off * p.I, p.I};
	const uint32_t *assign = reinterpret_cast<const uint32_t *>(p.assign) + d.assign_off;
	float acc[1][NT][4] = {};
	float *out = reinterpret_cast<float *>(p.out);

	gemm_tile<P, NT, KS, 1, true>(wb, p.mat[2], p.H, p.I, r0, ks, src, d.n, acc, smem);
	reduce_ks<NT, 1, KS, RT>(acc, smem, rt, ks);
	if (ks)
		return;
#pragma unroll
	for (int nt = 0; nt < NT; nt++)
#pragma unroll
		for (int c = 0; c < 4; c++) {
			const uint32_t n = nt * MOEM_K_NTILE + 2 * t + (c & 1);
			const uint32_t row = r0 + g + (c >> 1) * 8;

			if (n < d.n && row < p.H) {
				const uint32_t a = assign[n];

				out[((size_t)(a & 0xffffu) * p.n_slots + (a >> 16)) * p.H + row] =
					acc[0][nt][c];
			}
		}
}

#define MOEM_FFN_KERNELS_NT(P, name, NT)                                 \
	extern "C" __global__ void __launch_bounds__(MOEM_K_THREADS)     \
		moem_ffn_gateup_##name##_n##NT(const moem_kffn_params p) \
	{                                                                \
		ffn_gateup<P, NT>(p);                                    \
	}                                                                \
	extern "C" __global__ void __launch_bounds__(MOEM_K_THREADS)     \
		moem_ffn_down_##name##_n##NT(const moem_kffn_params p)   \
	{                                                                \
		ffn_down<P, NT>(p);                                      \
	}

#define MOEM_FFN_KERNELS_RT(P, name, NT, RT)                                     \
	extern "C" __global__ void __launch_bounds__(MOEM_K_THREADS)             \
		moem_ffn_gateup_##name##_n##NT##_r##RT(const moem_kffn_params p) \
	{                                                                        \
		ffn_gateup<P, NT, RT>(p);                                        \
	}                                                                        \
	extern "C" __global__ void __launch_bounds__(MOEM_K_THREADS)             \
		moem_ffn_down_##name##_n##NT##_r##RT(const moem_kffn_params p)   \
	{                                                                        \
		ffn_down<P, NT, RT>(p);                                          \
	}

/* The variants' order is kparams.h's moem_k_ffn_var_rt(). */
#define MOEM_FFN_KERNELS(P, name)          \
	MOEM_FFN_KERNELS_NT(P, name, 1)    \
	MOEM_FFN_KERNELS_NT(P, name, 2)    \
	MOEM_FFN_KERNELS_NT(P, name, 4)    \
	MOEM_FFN_KERNELS_NT(P, name, 8)    \
	MOEM_FFN_KERNELS_RT(P, name, 1, 2) \
	MOEM_FFN_KERNELS_RT(P, name, 1, 4) \
	MOEM_FFN_KERNELS_RT(P, name, 2, 1) \
	MOEM_FFN_KERNELS_RT(P, name, 2, 4)

#endif /* MOEM_CUDA_FFN_CUH */
