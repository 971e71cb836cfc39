// SPDX-License-Identifier: GPL-2.0-only
/*
 * Convert rows of f32 to bf16 or f32, clamped to [-clip, clip] when
 * clip > 0 (OLMoE's clip_qkv, attention outputs into o_proj, MLA's
 * rearrangements). Exact: a clamp and at most one rounding.
 *
 * moem_convert: a thread per (row, value), blockIdx.y striding rows.
 * moem_convert_seq: in place with different strides (x == y) a row may
 * overwrite what a later row still has to read, so one block walks the
 * rows in order, a 256-value chunk at a time, reading the chunk before
 * any of it is written: the CPU backend's sequential result whenever
 * rows move down (y_stride <= x_stride, the only in-place use that keeps
 * the input intact).
 */
#include "common.cuh"
#include "decode_kparams.h"

MOEM_DEVI float clamp_clip(float v, float c)
{
	if (c > 0.0f)
		v = v > c ? c : v < -c ? -c : v;
	return v;
}

MOEM_DEVI void put(const moem_kconvert_params &p, size_t at, float v)
{
	if (p.y_bf16)
		reinterpret_cast<uint16_t *>(p.y)[at] =
			__bfloat16_as_ushort(__float2bfloat16_rn(v));
	else
		reinterpret_cast<float *>(p.y)[at] = v;
}

extern "C" __global__ void __launch_bounds__(256) moem_convert(const moem_kconvert_params p)
{
	const uint32_t i = blockIdx.x * 256 + threadIdx.x;
	const float *x = reinterpret_cast<const float *>(p.x);

	if (i >= p.n)
		return;
	for (uint32_t r = blockIdx.y; r < p.rows; r += gridDim.y)
		put(p, (size_t)r * p.y_stride + i,
		    clamp_clip(x[(size_t)r * p.x_stride + i], p.clip));
}

extern "C" __global__ void __launch_bounds__(256) moem_convert_seq(const moem_kconvert_params p)
{
	const float *x = reinterpret_cast<const float *>(p.x);

	for (uint32_t r = 0; r < p.rows; r++)
		for (uint32_t c = 0; c < p.n; c += 256) {
			const uint32_t i = c + threadIdx.x;
			const float v = i < p.n ? x[(size_t)r * p.x_stride + i] : 0.0f;

			__syncthreads();
			if (i < p.n)
				put(p, (size_t)r * p.y_stride + i, clamp_clip(v, p.clip));
			__syncthreads();
		}
}
