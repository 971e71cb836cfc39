// SPDX-License-Identifier: GPL-2.0-only
/*
 * Per-head projection (MLA's absorbed kv_b_proj: queries into the latent
 * space through W_UK, the attention output out of it through W_UV): a
 * thread per (token, head, output), summing in input order with each
 * product and sum rounded once, as the CPU backend does: bitwise
 * identical. transpose reads W_h[i][o], so a warp's 32 outputs are 32
 * consecutive weights (coalesced); !transpose reads W_h[o][i] rows, each
 * thread its own, through L1. blockIdx.x = head * tiles + output tile,
 * blockIdx.y = token.
 */
#include "common.cuh"
#include "decode_kparams.h"

#define HM_THREADS 128

extern "C" __global__ void __launch_bounds__(HM_THREADS)
	moem_head_matmul(const moem_khead_mm_params p)
{
	const uint32_t tiles = (p.out_dim + HM_THREADS - 1) / HM_THREADS;
	const uint32_t h = blockIdx.x / tiles, o = (blockIdx.x % tiles) * HM_THREADS + threadIdx.x;
	const uint32_t t = blockIdx.y;
	const float *x = reinterpret_cast<const float *>(p.x) + (size_t)t * p.x_tok_stride +
			 (size_t)h * p.x_head_stride;
	const uint16_t *w = reinterpret_cast<const uint16_t *>(p.w) + (size_t)h * p.w_head_stride;
	float acc = 0.0f;

	if (o >= p.out_dim)
		return;
	if (p.transpose) {
		for (uint32_t i = 0; i < p.in_dim; i++)
			acc = __fadd_rn(
				acc, __fmul_rn(x[i], bf16_bits_to_f32(
							     w[(size_t)i * p.w_row_stride + o])));
	} else {
		const uint16_t *wr = w + (size_t)o * p.w_row_stride;

		for (uint32_t i = 0; i < p.in_dim; i++)
			acc = __fadd_rn(acc, __fmul_rn(x[i], bf16_bits_to_f32(wr[i])));
	}
	reinterpret_cast<float *>(
		p.y)[(size_t)t * p.y_tok_stride + (size_t)h * p.y_head_stride + o] = acc;
}
