// SPDX-License-Identifier: GPL-2.0-only
/*
 * Dense projection with quantized weights (moem decode --dense-prec):
 * y[t][r] = W[r] . x[t], W one matrix in moem_qmat_layout(prec, R, K)
 * (include/moem/quant.h, the layout the CPU backend's quantized dense
 * GEMV reads and moem_quantize() writes: one pack/load path serves both
 * backends), x bf16, y fp32.
 *
 * The shape is moem_matmul's (matmul.cu): a warp per weight row, the
 * row's data plane streamed once per group of four tokens with 16-byte
 * loads that bypass L1 (at batch 1 every weight byte is read once), its
 * fp16 scales (and mins) read beside it. Lane l takes the 16-byte chunks
 * l, l + 32, ...: 16 weights of q8, 32 of q4, 64 of q2, never across a
 * quantization group (groups are 128, 128 and 64 weights: 128, 64 and
 * 16 bytes). Each weight is dequantized as moem_dequantize_row() does it,
 * w = q * s (+ m), each step one IEEE fp32 operation, so the weights are
 * the CPU reference's bit for bit and the two backends differ only in
 * summation order. The lane FMAs its weights in column order into one
 * fp32 sum per token and one lane adds the 32 sums in lane order: every
 * (token, row) is computed the same way whatever the batch.
 */
#include "decode_kparams.h"
#include "matmul.cuh"

static_assert(MOEM_K_MM_THREADS == MOEM_K_MM_ROWS * 32, "a warp per row");

/* Weights per 16-byte chunk, per group. */
template <int P> struct QDense;
template <> struct QDense<P_Q8> {
	static constexpr uint32_t E = 16, G = 128;
};
template <> struct QDense<P_Q4> {
	static constexpr uint32_t E = 32, G = 128;
};
template <> struct QDense<P_Q2> {
	static constexpr uint32_t E = 64, G = 64;
};

/* Sixteen bytes at p: one streaming load when aligned, else bytes. */
MOEM_DEVI uint4 load16(const uint8_t *p, bool vec)
{
	uint32_t w[4] = {};

	if (vec)
		return ld_stream(reinterpret_cast<const uint4 *>(p));
#pragma unroll
	for (int i = 0; i < 16; i++)
		w[i / 4] |= (uint32_t)p[i] << (8 * (i & 3));
	return uint4{w[0], w[1], w[2], w[3]};
}

/* An fp16 scale or min (2-byte aligned when vec). */
MOEM_DEVI float load_f16(const uint8_t *p, bool vec)
{
	const uint16_t h = vec ? *reinterpret_cast<const uint16_t *>(p)
			       : (uint16_t)(p[0] | (uint32_t)p[1] << 8);

	return f16_bits_to_f32(h);
}

/*
 * Quantized value e (0 .. E-1) of a chunk, in quant.h's element order,
 * as a float. Not (float)q: integer-to-float conversions run at 16 a
 * clock per SM on sm_80/sm_90, an eighth of fp32 arithmetic, which
 * would make q4 and q2 bound by conversions. Instead the
 * integer u (< 2^23) goes into the mantissa of 2^23 and 2^23 is
 * subtracted: one logic op and one exact fp32 subtraction. q8's signed
 * byte is biased to u = q + 128 first (w ^ 0x80808080).
 */
MOEM_DEVI float u23(uint32_t u, float bias)
{
	return __fsub_rn(__uint_as_float(0x4b000000u | u), bias);
}

template <int P> MOEM_DEVI float qval(const uint32_t (&w)[4], uint32_t e)
{
	if (P == P_Q8) /* w holds q + 128 per byte */
		return u23((w[e / 4] >> (8 * (e & 3))) & 0xffu, 8388736.0f);
	if (P == P_Q4) /* element 2j in the low nibble of byte j */
		return u23((w[e / 8] >> (4 * (e & 7))) & 15u, 8388608.0f);
	return u23((w[e / 16] >> (2 * (e & 15))) & 3u, 8388608.0f); /* q2: bits 2i of byte j */
}

/*
 * VEC (x and w 16-byte aligned) is a template argument rather than a
 * branch in the loop, so that the unrolled iterations' weight loads can
 * be issued together.
 */
template <int P, bool VEC> MOEM_DEVI void matmul_q(const moem_kmatmul_q_params &p)
{
	constexpr uint32_t E = QDense<P>::E, G = QDense<P>::G;
	[[maybe_unused]] constexpr int n_unroll = P == P_Q8 ? 4 : 2; /* the emulator ignores the pragma */
	const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const uint32_t r = blockIdx.x * MOEM_K_MM_ROWS + warp;
	const uint32_t t0 = blockIdx.y * MOEM_K_MM_TOKENS;
	const uint32_t t1 = min(t0 + MOEM_K_MM_TOKENS, p.B);
	const uint32_t chunks = p.row_bytes / 16;
	const uint8_t *base = reinterpret_cast<const uint8_t *>(p.w);
	const uint8_t *wq = base + p.data_off + (size_t)r * p.row_bytes;
	const uint8_t *sc = base + p.scale_off + (size_t)r * p.groups_per_row * 2;
	const uint8_t *mn = base + p.min_off + (size_t)r * p.groups_per_row * 2;
	const uint16_t *x = reinterpret_cast<const uint16_t *>(p.x);
	float *y = reinterpret_cast<float *>(p.y);
	const bool vec = VEC;
	__shared__ float red[MOEM_K_MM_ROWS][MM_GROUP][32];

	if (r >= p.R)
		return; /* whole warps: no collective below is left half-empty */
	for (uint32_t tg = t0; tg < t1; tg += MM_GROUP) {
		const uint32_t ng = min((uint32_t)MM_GROUP, t1 - tg);
		float acc[MM_GROUP] = {};

		/* unrolled as moem_matmul's K loop: several 16-byte weight loads
		 * in flight per lane (q4 and q2 rows are 2x and 4x shorter) */
#pragma unroll n_unroll
		for (uint32_t c = lane; c < chunks; c += 32) {
			const uint4 raw = load16(wq + (size_t)c * 16, vec);
			const uint32_t bias = P == P_Q8 ? 0x80808080u : 0;
			const uint32_t w4[4] = {raw.x ^ bias, raw.y ^ bias, raw.z ^ bias, raw.w ^ bias};
			const uint32_t col = c * E, g = col / G;
			const float s = load_f16(sc + 2 * g, vec);
			const float m = P == P_Q8 ? 0.0f : load_f16(mn + 2 * g, vec);

#pragma unroll
			for (uint32_t e0 = 0; e0 < E; e0 += 8) {
				float wv[8];

#pragma unroll
				for (uint32_t i = 0; i < 8; i++) {
					wv[i] = __fmul_rn(qval<P>(w4, e0 + i), s);
					if (P != P_Q8)
						wv[i] = __fadd_rn(wv[i], m);
				}
				mm_fma8(wv, x + col + e0, p.K, tg, ng, vec, acc);
			}
		}
		mm_reduce(red[warp], acc, lane, ng, y, tg, p.R, r);
	}
}

extern "C" __global__ void __launch_bounds__(MOEM_K_MM_THREADS)
	moem_matmul_q8(const moem_kmatmul_q_params p)
{
	if (p.vec)
		matmul_q<P_Q8, true>(p);
	else
		matmul_q<P_Q8, false>(p);
}

extern "C" __global__ void __launch_bounds__(MOEM_K_MM_THREADS)
	moem_matmul_q4(const moem_kmatmul_q_params p)
{
	if (p.vec)
		matmul_q<P_Q4, true>(p);
	else
		matmul_q<P_Q4, false>(p);
}

extern "C" __global__ void __launch_bounds__(MOEM_K_MM_THREADS)
	moem_matmul_q2(const moem_kmatmul_q_params p)
{
	if (p.vec)
		matmul_q<P_Q2, true>(p);
	else
		matmul_q<P_Q2, false>(p);
}
