// SPDX-License-Identifier: GPL-2.0-only
/*
 * RoPE in place, a thread per (token, head, pair): rotate_half pairs
 * (x[i], x[i + dim/2]) for Qwen3, Mixtral and OLMoE, adjacent pairs
 * (x[2i], x[2i+1]) for DeepSeek; the angle tables (plain, or YaRN's with
 * its mscale folded in) come from the host. Each output is two products
 * and a sum rounded separately (no FMA), as the CPU backend computes
 * them: bitwise identical.
 */
#include "common.cuh"
#include "decode_kparams.h"

extern "C" __global__ void __launch_bounds__(256) moem_rope(const moem_krope_params p)
{
	const uint32_t half = p.dim / 2, t = blockIdx.y;
	const uint32_t e = blockIdx.x * 256 + threadIdx.x, h = e / half, i = e % half;
	const int32_t pos = reinterpret_cast<const int32_t *>(p.pos)[t];
	float *x, *p0, *p1, c, s, x0, x1;

	if (h >= p.n_heads || pos < 0 || (uint32_t)pos >= p.n_pos)
		return;
	x = reinterpret_cast<float *>(p.x) + (size_t)t * p.tok_stride + (size_t)h * p.head_stride +
	    p.off;
	p0 = p.pairs ? &x[2 * i] : &x[i];
	p1 = p.pairs ? &x[2 * i + 1] : &x[i + half];
	c = reinterpret_cast<const float *>(p.cos)[(size_t)pos * half + i];
	s = reinterpret_cast<const float *>(p.sin)[(size_t)pos * half + i];
	x0 = *p0;
	x1 = *p1;
	*p0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
	*p1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}
