// SPDX-License-Identifier: GPL-2.0-only
/*
 * Quantize bf16 -> q8/q4/q2 on the device, byte for byte what quant.c's
 * moem_quantize() writes. One block per row; each group of G columns is
 * handled by G/4 lanes, four columns each. The parts that must match:
 *  - group min/max with quant.c's sequential semantics (start at the
 *    first element, replace only on strictly smaller/larger, so a NaN
 *    counts only as the first element and among equal values (-0, +0) the
 *    first one stays), reproduced as a selection under a total order
 *    (NaN at index 0 first, then value, then lower index), which makes the
 *    lane reduction order irrelevant;
 *  - every arithmetic step one IEEE operation with round-to-nearest-even
 *    (__fdiv_rn, __fsub_rn, __float2half_rn, rintf), clamps with
 *    fminf/fmaxf (NaN -> the bound, as in C);
 *  - the same failure checks, reported through the status word.
 * Padding between planes is zeroed by the host (cuMemsetD8Async) first.
 */
#include "common.cuh"

#define Q_THREADS 256

struct Sel {
	float v;
	int idx; /* -1: none */
};

/* Is a preferred over b as the group minimum (MIN) or maximum (!MIN)? */
template <bool MIN> MOEM_DEVI bool prefer(const Sel &a, const Sel &b)
{
	if (b.idx < 0)
		return a.idx >= 0;
	if (a.idx < 0)
		return false;
	if (isnan(a.v) || isnan(b.v)) /* only index 0 can hold a NaN here */
		return isnan(a.v);
	if (a.v != b.v)
		return MIN ? a.v < b.v : a.v > b.v;
	return a.idx < b.idx;
}

template <bool MIN, int L> MOEM_DEVI Sel group_select(Sel s)
{
#pragma unroll
	for (int off = L / 2; off; off >>= 1) {
		Sel o;

		o.v = __shfl_xor_sync(0xffffffffu, s.v, off);
		o.idx = __shfl_xor_sync(0xffffffffu, s.idx, off);
		if (prefer<MIN>(o, s))
			s = o;
	}
	return s;
}

MOEM_DEVI bool f16_overflow(uint16_t h)
{
	return (h & 0x7c00u) == 0x7c00u;
}

template <int P> MOEM_DEVI void quantize_row(const moem_kquant_params &p)
{
	constexpr int G = P == P_Q2 ? 64 : 128, L = G / 4, GPW = 32 / L;
	constexpr float QMAX = P == P_Q4 ? 15.0f : 3.0f;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	const int sub = lane / L, li = lane % L;
	const uint32_t r = blockIdx.x;
	const uint16_t *src = reinterpret_cast<const uint16_t *>(p.src) + (size_t)r * p.cols;
	uint8_t *dst = reinterpret_cast<uint8_t *>(p.dst);

	for (uint32_t g0 = warp * GPW; g0 < p.groups_per_row; g0 += nw * GPW) {
		const uint32_t g = g0 + sub;
		const bool active = g < p.groups_per_row;
		float v[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
		Sel lo = { 0.0f, -1 }, hi = { 0.0f, -1 };
		uint32_t code = 0;

		if (active) {
			const uint2 raw = *reinterpret_cast<const uint2 *>(src + (size_t)g * G + li * 4);

			v[0] = __uint_as_float(raw.x << 16);
			v[1] = __uint_as_float(raw.x & 0xffff0000u);
			v[2] = __uint_as_float(raw.y << 16);
			v[3] = __uint_as_float(raw.y & 0xffff0000u);
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const Sel c = { v[e], li * 4 + e };

				if (isnan(v[e]) && c.idx != 0)
					continue;
				if (prefer<true>(c, lo))
					lo = c;
				if (prefer<false>(c, hi))
					hi = c;
			}
		}
		lo = group_select<true, L>(lo);
		hi = group_select<false, L>(hi);
		if (!active)
			continue;
		if (P == P_Q8) {
			const float amax = fmaxf(fabsf(lo.v), fabsf(hi.v));
			const uint16_t s16 = __half_as_ushort(__float2half_rn(__fdiv_rn(amax, 127.0f)));
			const float s = f16_bits_to_f32(s16);
			uint32_t word = 0;

			if (!isfinite(amax))
				code = 1;
			else if (f16_overflow(s16))
				code = 2;
#pragma unroll
			for (int e = 0; e < 4; e++) {
				float q = s != 0.0f ? rintf(__fdiv_rn(v[e], s)) : 0.0f;

				q = fminf(fmaxf(q, -127.0f), 127.0f);
				word |= (uint32_t)(uint8_t)(int8_t)(int)q << (8 * e);
			}
			*reinterpret_cast<uint32_t *>(dst + (size_t)r * p.row_bytes + g * G + li * 4) =
				word;
			if (li == 0)
				reinterpret_cast<uint16_t *>(dst + p.scale_off)
					[(size_t)r * p.groups_per_row + g] = s16;
		} else {
			const uint16_t s16 = __half_as_ushort(
				__float2half_rn(__fdiv_rn(__fsub_rn(hi.v, lo.v), QMAX)));
			const uint16_t m16 = __half_as_ushort(__float2half_rn(lo.v));
			const float s = f16_bits_to_f32(s16), m = f16_bits_to_f32(m16);
			uint32_t bits = 0;

			if (!isfinite(lo.v) || !isfinite(hi.v))
				code = 1;
			else if (f16_overflow(s16) || f16_overflow(m16))
				code = 2;
#pragma unroll
			for (int e = 0; e < 4; e++) {
				float q = s != 0.0f ? rintf(__fdiv_rn(__fsub_rn(v[e], m), s)) : 0.0f;

				q = fminf(fmaxf(q, 0.0f), QMAX);
				bits |= (uint32_t)q << ((P == P_Q4 ? 4 : 2) * e);
			}
			if (P == P_Q4)
				*reinterpret_cast<uint16_t *>(dst + (size_t)r * p.row_bytes +
							      (g * G + li * 4) / 2) = (uint16_t)bits;
			else
				dst[(size_t)r * p.row_bytes + (g * G + li * 4) / 4] = (uint8_t)bits;
			if (li == 0) {
				const size_t gi = (size_t)r * p.groups_per_row + g;

				reinterpret_cast<uint16_t *>(dst + p.scale_off)[gi] = s16;
				reinterpret_cast<uint16_t *>(dst + p.min_off)[gi] = m16;
			}
		}
		if (code && li == 0)
			atomicMin(reinterpret_cast<unsigned long long *>(p.status),
				  ((unsigned long long)(p.row_base + r) << 32) | (g << 4) | code);
	}
}

#define MOEM_QUANT_KERNEL(P, name)                                                                 \
	extern "C" __global__ void __launch_bounds__(Q_THREADS)                                    \
		moem_quantize_##name(const moem_kquant_params p)                                   \
	{                                                                                          \
		quantize_row<P>(p);                                                                \
	}

MOEM_QUANT_KERNEL(P_Q8, q8)
MOEM_QUANT_KERNEL(P_Q4, q4)
MOEM_QUANT_KERNEL(P_Q2, q2)
