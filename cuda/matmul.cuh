/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the dense projection kernels share (cuda/matmul.cu for bf16
 * weights, cuda/matmul_q.cu for q8/q4/q2): loading a token's bf16 input.
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

#endif /* MOEM_CUDA_MATMUL_CUH */
