// SPDX-License-Identifier: GPL-2.0-only
/*
 * Dense projection y[t][r] = W[r] . x[t] (bf16 in, fp32 accumulate): the
 * attention projections, MLA's down/up projections and lm_head. A warp
 * owns one weight row and streams it once per group of four tokens (a
 * decode step's GEMV reads every weight byte once; a prefill chunk's
 * tokens re-read the row from L1/L2). Lane l takes the 8 columns at
 * 8 * (l + 32 j), FMAs them in j order into its own fp32 sum, and one
 * lane adds the 32 sums in lane order (through shared memory: one
 * exchange per token group instead of a five-step butterfly per token):
 * every (token, row) is computed the same way whatever the batch, so
 * batching never changes a bit.
 */
#include "decode_kparams.h"
#include "matmul.cuh"

static_assert(MOEM_K_MM_THREADS == MOEM_K_MM_ROWS * 32, "a warp per row");

extern "C" __global__ void __launch_bounds__(MOEM_K_MM_THREADS)
	moem_matmul(const moem_kmatmul_params p)
{
	const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const uint32_t r = blockIdx.x * MOEM_K_MM_ROWS + warp;
	const uint32_t t0 = blockIdx.y * MOEM_K_MM_TOKENS;
	const uint32_t t1 = min(t0 + MOEM_K_MM_TOKENS, p.B);
	const uint16_t *w = reinterpret_cast<const uint16_t *>(p.w) + (size_t)r * p.K;
	const uint16_t *x = reinterpret_cast<const uint16_t *>(p.x);
	float *y = reinterpret_cast<float *>(p.y);
	const bool vec = p.vec != 0;
	__shared__ float red[MOEM_K_MM_ROWS][MM_GROUP][32];

	if (r >= p.R)
		return; /* whole warps: no collective below is left half-empty */
	for (uint32_t tg = t0; tg < t1; tg += MM_GROUP) {
		const uint32_t ng = min((uint32_t)MM_GROUP, t1 - tg);
		float acc[MM_GROUP] = {};

		/* unrolled: several 16-byte weight loads in flight per lane (the
		 * H200 profile of the rolled loop: one, and 0.4 of the copy
		 * bandwidth at batch 1); the FMA order per sum is unchanged */
#pragma unroll 4
		for (uint32_t k = lane * 8; k < p.K; k += 256) {
			float wv[8];

			load8(w + k, vec, wv);
			mm_fma8(wv, x + k, p.K, tg, ng, vec, acc);
		}
		mm_reduce(red[warp], acc, lane, ng, y, tg, p.R, r);
	}
}
