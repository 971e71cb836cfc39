/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * bf16 and IEEE fp16 conversions, round-to-nearest-even, bit-exact with
 * CUDA's __float2bfloat16_rn / __float2half_rn and x86 F16C, so CPU and
 * GPU quantizers produce the same bytes. Integer-only: no dependence on
 * the FPU rounding mode or on -ffast-math.
 */
#ifndef MOEM_HALF_H
#define MOEM_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t moem_f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float moem_bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline float moem_bf16_to_f32(uint16_t h)
{
	return moem_bits_f32((uint32_t)h << 16);
}

static inline uint16_t moem_f32_to_bf16(float f)
{
	uint32_t u = moem_f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a quiet NaN */
		return (uint16_t)((u >> 16) | 0x0040u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static inline float moem_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 0x1fu;
	uint32_t m = h & 0x3ffu;

	if (e == 0x1f)
		return moem_bits_f32(sign | 0x7f800000u | (m << 13));
	if (e == 0) {
		if (!m)
			return moem_bits_f32(sign);
		e = 113; /* normalise a subnormal: value = m * 2^-24 */
		while (!(m & 0x400u)) {
			m <<= 1;
			e--;
		}
		return moem_bits_f32(sign | (e << 23) | ((m & 0x3ffu) << 13));
	}
	return moem_bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

static inline uint16_t moem_f32_to_f16(float f)
{
	uint32_t x = moem_f32_bits(f);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
	uint32_t ax = x & 0x7fffffffu;
	uint32_t e, m, shift, q, rem, half;

	if (ax > 0x7f800000u)
		return sign | 0x7e00u;
	if (ax >= 0x477ff000u) /* >= 65520 rounds to infinity */
		return sign | 0x7c00u;
	if (ax >= 0x38800000u) { /* normal half */
		uint32_t r = ax - 0x38000000u;

		r += 0xfffu + ((r >> 13) & 1u);
		return sign | (uint16_t)(r >> 13);
	}
	if (ax <= 0x33000000u) /* <= 2^-25 rounds to (even) zero */
		return sign;
	e = ax >> 23;
	m = (ax & 0x7fffffu) | 0x800000u;
	shift = 126 - e;
	q = m >> shift;
	rem = m & ((1u << shift) - 1);
	half = 1u << (shift - 1);
	if (rem > half || (rem == half && (q & 1u)))
		q++;
	return sign | (uint16_t)q;
}

#endif /* MOEM_HALF_H */
