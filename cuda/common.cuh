/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Device helpers shared by the kernels: tensor-core mma, streaming loads,
 * bf16/f16 bit conversions. Numerics that must match the CPU backend
 * bit for bit use the explicit _rn intrinsics (no FMA contraction).
 */
#ifndef MOEM_CUDA_COMMON_CUH
#define MOEM_CUDA_COMMON_CUH

#include <stdint.h>

#include "kparams.h"

#define MOEM_DEVI __device__ __forceinline__

enum { P_BF16 = 0, P_Q8 = 1, P_Q4 = 2, P_Q2 = 3 }; /* == enum moem_prec */

#ifdef MOEM_KERNEL_EMU
/*
 * Built for the host kernel emulator (tests/gpu/emu): cuda_emu.h, force-
 * included, provides the CUDA types and intrinsics, these helpers and
 * MOEM_DYN_SMEM.
 */
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* The block's dynamic shared memory. */
#define MOEM_DYN_SMEM(name) extern __shared__ __align__(16) uint8_t name[]

/* D = A(16x16, row) * B(16x8, col) + D, bf16 in, fp32 accumulate. */
MOEM_DEVI void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
			uint32_t b0, uint32_t b1)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
	    "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Weights are read once per call: keep them out of L1. */
MOEM_DEVI uint4 ld_stream(const uint4 *p)
{
	uint4 v;

	asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
	    : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
	    : "l"(p));
	return v;
}

MOEM_DEVI uint2 ld_stream(const uint2 *p)
{
	uint2 v;

	asm("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
	return v;
}

/* Two bf16 holding small integers (128 + q, exact) minus 128: exact. */
MOEM_DEVI uint32_t bf16x2_minus128(uint32_t v)
{
	uint32_t r;

	asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(v), "r"(0x3f803f80u), "r"(0xc300c300u));
	return r;
}

MOEM_DEVI uint32_t pack_bf16x2(float lo, float hi)
{
	__nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);

	return *reinterpret_cast<uint32_t *>(&h);
}
#endif /* MOEM_KERNEL_EMU */

MOEM_DEVI float bf16_bits_to_f32(uint16_t h)
{
	return __uint_as_float((uint32_t)h << 16);
}

MOEM_DEVI float f16_bits_to_f32(uint16_t h)
{
	return __half2float(__ushort_as_half(h));
}

/* NaN logits rank below everything (route.c clean()). */
MOEM_DEVI float clean_logit(float v)
{
	return isnan(v) ? -INFINITY : v;
}

#endif /* MOEM_CUDA_COMMON_CUH */
