// SPDX-License-Identifier: GPL-2.0-only
/*
 * Token embedding: h[t][:] = float(table[ids[t]][:]), a thread per
 * (token, element); an id outside the table gives a zero row, as the CPU
 * backend does (the decoder checks ids before they get here). Exact.
 */
#include "common.cuh"
#include "decode_kparams.h"

extern "C" __global__ void __launch_bounds__(256) moem_embed(const moem_kembed_params p)
{
	const uint32_t t = blockIdx.y, i = blockIdx.x * 256 + threadIdx.x;
	const int32_t id = reinterpret_cast<const int32_t *>(p.ids)[t];
	float *h = reinterpret_cast<float *>(p.h) + (size_t)t * p.H;

	if (i >= p.H)
		return;
	if (id < 0 || (uint32_t)id >= p.V) {
		h[i] = 0.0f;
		return;
	}
	h[i] = bf16_bits_to_f32(reinterpret_cast<const uint16_t *>(p.table)[(size_t)id * p.H + i]);
}
