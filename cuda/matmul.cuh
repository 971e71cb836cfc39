/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the dense projection kernels share (cuda/matmul.cu for bf16
 * weights, cuda/matmul_q.cu for q8/q4/q2): loading a token's bf16 input,
 * and the order of operations of every (token, row) sum: a lane FMAs its
 * columns into one fp32 sum per token, eight at a time in column order
 * (mm_fma8), and one lane adds the 32 lanes' sums in lane order
 * (mm_reduce). Both kernels go through these two, so their results differ
 * only in how a weight is dequantized, never in summation order, and
 * batching never changes a bit.
 */
#ifndef MOEM_CUDA_MATMUL_CUH
#define MOEM_CUDA_MATMUL_CUH

#include "common.cuh"

/* Tokens whose sums a warp carries at once while it streams its row. */
#define MM_GROUP 4

/* Eight bf16 from p (16-byte aligned when vec), widened. */
MOEM_DEVI void load8(const uint16_t *p, bool vec, float (&v)[8])
{
	if (vec) {
		const uint4 u = *reinterpret_cast<const uint4 *>(p);
		const uint32_t w[4] = {u.x, u.y, u.z, u.w};

#pragma unroll
		for (int i = 0; i < 4; i++) {
			v[2 * i] = __uint_as_float(w[i] << 16);
			v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
		}
		return;
	}
#pragma unroll
	for (int i = 0; i < 8; i++)
		v[i] = bf16_bits_to_f32(p[i]);
}

/*
 * acc[g] += sum_i wv[i] * xk[(tg + g) * K + i] for the ng (<= MM_GROUP)
 * tokens of the group, i in order; xk is the [B][K] bf16 input from the
 * eight columns' first.
 */
MOEM_DEVI void mm_fma8(const float (&wv)[8], const uint16_t *xk, uint32_t K, uint32_t tg,
		       uint32_t ng, bool vec, float (&acc)[MM_GROUP])
{
#pragma unroll
	for (uint32_t g = 0; g < MM_GROUP; g++) {
		float xv[8];

		if (g >= ng)
			break;
		load8(xk + (size_t)(tg + g) * K, vec, xv);
#pragma unroll
		for (int i = 0; i < 8; i++)
			acc[g] = fmaf(wv[i], xv[i], acc[g]);
	}
}

/*
 * y[tg + g][r] (row length R) = the 32 lanes' acc[g] added in lane order,
 * lane g doing token g's sum through red, the warp's own slice of shared
 * memory. Every lane of the warp calls it.
 */
MOEM_DEVI void mm_reduce(float (&red)[MM_GROUP][32], const float (&acc)[MM_GROUP], uint32_t lane,
			 uint32_t ng, float *y, uint32_t tg, uint32_t R, uint32_t r)
{
#pragma unroll
	for (uint32_t g = 0; g < MM_GROUP; g++)
		red[g][lane] = acc[g];
	__syncwarp();
	if (lane < ng) {
		float s = 0.0f;

		for (int l = 0; l < 32; l++)
			s = __fadd_rn(s, red[lane][l]);
		y[(size_t)(tg + lane) * R + r] = s;
	}
	__syncwarp();
}

#endif /* MOEM_CUDA_MATMUL_CUH */
