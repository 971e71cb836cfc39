/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The tile engine of the expert FFN and router kernels: a warp computes a
 * 16-row tile of W (bf16, q8, q4 or q2 in quant.h layout) times the
 * expert's tokens (up to 64, in n-tiles of 8) with mma.sync m16n8k16
 * (bf16 in, fp32 accumulate). Decode is memory bound, so the design is
 * about streaming W at HBM speed:
 *
 *  - W is read straight from global memory into mma A fragments, 16 bytes
 *    per lane per load (q2: 8, two groups' worth, exchanged within the quad
 *    by one shuffle), L1 bypassed, several loads in flight per warp (a
 *    D-deep register pipeline) and the first ones issued before the
 *    activations are staged, so that the staging hides behind them; every
 *    weight byte is read once.
 *  - The k order inside one mma is free as long as A and B agree, so each
 *    lane takes E consecutive columns of its two rows (g, g+8) and the
 *    activations (B) are staged in shared memory pre-permuted to that
 *    order. Quantized nibbles therefore decode with one shift+LOP3 and one
 *    bf16x2 FMA per two weights (128 + q trick), no shuffles.
 *  - Quantized formats are factored per group: sum((q*s + m) * x) =
 *    s * sum(q * x) + m * sum(x); the tensor core computes sum(q * x)
 *    exactly (small integers times bf16), group sums of x come with the
 *    staging (a warp per group, a fixed shuffle tree), and scales are
 *    applied per group in fp32.
 *  - An fp32 B operand (the down projection's SwiGLU activations) is
 *    split into hi = bf16(a) and lo = bf16(a - hi), two mmas: ~16
 *    significant bits instead of bf16's 8.
 *  - Few tokens leave little work per row, so the block's 4 warps split K
 *    (KS ways) for small n-tile counts and cover more rows (RT) for large
 *    ones; split-K partials are added in a fixed order.
 *
 * One iteration of a lane covers E columns; the 4 lanes of a quad cover
 * S = 4E columns, which never straddle a quantization group. A load unit
 * is IPL iterations (q2: two, one 8-byte load per lane and row).
 */
#ifndef MOEM_CUDA_GEMM_CUH
#define MOEM_CUDA_GEMM_CUH

#include "common.cuh"

template <int P> struct Prec;
template <> struct Prec<P_BF16> {
	static constexpr int E = 8, G = 0, ASYM = 0, BITS = 16, IPL = 1;
	typedef uint4 Raw;
};
template <> struct Prec<P_Q8> {
	static constexpr int E = 16, G = 128, ASYM = 0, BITS = 8, IPL = 1;
	typedef uint4 Raw;
};
template <> struct Prec<P_Q4> {
	static constexpr int E = 32, G = 128, ASYM = 1, BITS = 4, IPL = 1;
	typedef uint4 Raw;
};
/*
 * q2: a lane loads 8 bytes of a row, lanes 0-1 of a quad group 2u's 16
 * bytes, lanes 2-3 group 2u+1's; one shuffle (lane t with t ^ 2) leaves
 * lane t with word lane_col(t) of both groups (lane_col: 0, 2, 1, 3).
 */
template <> struct Prec<P_Q2> {
	static constexpr int E = 16, G = 64, ASYM = 1, BITS = 2, IPL = 2;
	typedef uint2 Raw;
};

/* Which E columns of an iteration's S lane t takes (the quad order). */
template <int P> MOEM_DEVI int lane_col(int t)
{
	return P == P_Q2 ? ((t & 1) << 1) | (t >> 1) : t;
}

MOEM_DEVI void decode(uint4 raw, uint32_t (&r)[4]) /* bf16 */
{
	r[0] = raw.x;
	r[1] = raw.y;
	r[2] = raw.z;
	r[3] = raw.w;
}

template <int P> MOEM_DEVI void decode_q(uint4 raw, uint32_t (&r)[Prec<P>::E / 2])
{
	const uint32_t w[4] = { raw.x, raw.y, raw.z, raw.w };

#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (P == P_Q8) {
			/* Signed bytes -> float -> bf16: exact for -127..127. */
			r[2 * i] = pack_bf16x2((float)((int)(w[i] << 24) >> 24),
					       (float)((int)(w[i] << 16) >> 24));
			r[2 * i + 1] = pack_bf16x2((float)((int)(w[i] << 8) >> 24),
						   (float)((int)w[i] >> 24));
		} else { /* q4: nibble s and s + 4 of the word's 8 */
#pragma unroll
			for (int s = 0; s < 4; s++)
				r[4 * i + s] = bf16x2_minus128(((w[i] >> (4 * s)) & 0x000f000fu) |
								0x43004300u);
		}
	}
}

MOEM_DEVI void decode_q2(uint32_t w, uint32_t (&r)[8])
{
#pragma unroll
	for (int k = 0; k < 8; k++)
		r[k] = bf16x2_minus128(((w >> (2 * k)) & 0x00030003u) | 0x43004300u);
}

/* Iteration h of a load unit: the registers of one row's E columns. */
template <int P> MOEM_DEVI void decode_any(const typename Prec<P>::Raw &raw, int h,
					   uint32_t (&r)[Prec<P>::E / 2])
{
	if constexpr (P == P_BF16)
		decode(raw, r);
	else if constexpr (P == P_Q2)
		decode_q2(h ? raw.y : raw.x, r);
	else
		decode_q<P>(raw, r);
}

/* q2: from the loaded words (group A's or B's half) to lane_col order. */
MOEM_DEVI uint2 q2_exchange(uint2 w, int t)
{
	const bool up = t >= 2;
	const uint32_t got = __shfl_xor_sync(0xffffffffu, up ? w.x : w.y, 2);

	return uint2{ up ? got : w.x, up ? w.y : got };
}

/*
 * B operand sources. load<P>(n, col) reads the source values of the
 * 16-byte staging piece starting at column col of token n; piece_of<P>()
 * turns them into the piece's 8 bf16 values in register order (hi, and lo
 * for an fp32 source) and returns their sum, added in order in fp32.
 */
MOEM_DEVI void unpack8(uint4 v, uint16_t (&h)[8])
{
	const uint32_t w[4] = { v.x, v.y, v.z, v.w };

#pragma unroll
	for (int i = 0; i < 8; i++)
		h[i] = (uint16_t)(w[i / 2] >> (16 * (i & 1)));
}

/* Register order inside a piece: q4 pairs (q, q + 4), q2 pairs (q, q + 8). */
template <int P> MOEM_DEVI int piece_src(int i)
{
	return P == P_Q4 || P == P_Q2 ? (i >> 1) + 4 * (i & 1) : i;
}

/*
 * A piece's 8 source values as loaded: bf16 (q2: columns 0..3 and
 * 8..11), or fp32 (q2: columns 0..3 and 8..11).
 */
struct RawBf16 {
	uint4 v;
};
struct RawF32 {
	float4 v0, v1;
};

/* The piece in register order (h; fp32: hi h + lo l) and its sum in order. */
template <int P> MOEM_DEVI float piece_of(const RawBf16 &r, uint16_t (&h)[8], uint16_t (&l)[8])
{
	uint16_t v[8];
	float sum = 0.0f;

	unpack8(r.v, v);
#pragma unroll
	for (int i = 0; i < 8; i++) {
		h[i] = v[piece_src<P>(i)];
		l[i] = 0;
		sum = __fadd_rn(sum, bf16_bits_to_f32(v[i]));
	}
	return sum;
}

template <int P> MOEM_DEVI float piece_of(const RawF32 &r, uint16_t (&h)[8], uint16_t (&l)[8])
{
	const float v[8] = { r.v0.x, r.v0.y, r.v0.z, r.v0.w, r.v1.x, r.v1.y, r.v1.z, r.v1.w };
	float sum = 0.0f;

#pragma unroll
	for (int i = 0; i < 8; i++) {
		const float x = v[piece_src<P>(i)];
		const __nv_bfloat16 hb = __float2bfloat16_rn(x);
		const __nv_bfloat16 lb = __float2bfloat16_rn(x - __bfloat162float(hb));

		h[i] = __bfloat16_as_ushort(hb);
		l[i] = __bfloat16_as_ushort(lb);
		sum = __fadd_rn(sum, v[i]);
	}
	return sum;
}

struct SrcBf16 { /* rows of bf16 x */
	typedef RawBf16 Raw;
	const uint16_t *x;
	const uint32_t *assign; /* token of n (low 16 bits); NULL: token n */
	uint32_t K;

	MOEM_DEVI const uint16_t *row(int n) const
	{
		return x + (size_t)(assign ? assign[n] & 0xffffu : (uint32_t)n) * K;
	}
	/* the piece of token n starting at column col */
	template <int P> MOEM_DEVI Raw load(int n, uint32_t col) const
	{
		const uint16_t *r = row(n) + col;

		if (P == P_Q2) {
			const uint2 a = *reinterpret_cast<const uint2 *>(r);
			const uint2 b = *reinterpret_cast<const uint2 *>(r + 8);

			return Raw{ uint4{ a.x, a.y, b.x, b.y } };
		}
		return Raw{ *reinterpret_cast<const uint4 *>(r) };
	}
};

struct SrcF32 { /* rows n of the fp32 activation scratch, split hi + lo */
	typedef RawF32 Raw;
	const float *a;
	uint32_t K;

	template <int P> MOEM_DEVI Raw load(int n, uint32_t col) const
	{
		const float *r = a + (size_t)n * K + col;

		return Raw{ *reinterpret_cast<const float4 *>(r),
			    *reinterpret_cast<const float4 *>(r + (P == P_Q2 ? 8 : 4)) };
	}
};

MOEM_DEVI uint4 pack8(const uint16_t (&v)[8])
{
	return uint4{ v[0] | (uint32_t)v[1] << 16, v[2] | (uint32_t)v[3] << 16,
		      v[4] | (uint32_t)v[5] << 16, v[6] | (uint32_t)v[7] << 16 };
}

/*
 * Whether padding tokens (n_tok <= n < NPAD) are left out of the staging,
 * gemm_tile() giving the mma zeros for their rows instead of reading them:
 * for the asymmetric formats, whose staging (with the group sums) is heavy
 * against their few weight bytes per block. Not for bf16 and q8: on the
 * H200 (runs of 1aa7a7e and 27d8500) the predicated shared-memory load in
 * the innermost loop cost them 13-40% per expert, while skipping saved q4
 * and q2 18% and 12% at batch 1. The padding tokens' group sums are still
 * written (zeros): the epilogue reads them for the columns it discards.
 */
template <int P> constexpr bool PAD_SKIP = Prec<P>::ASYM != 0;

/*
 * Pieces a thread loads before it converts and stores them (stage()): at
 * one n-tile a thread stages at most two real pieces a chunk, and the
 * registers would cost the batch-1 kernels occupancy; at eight the
 * registers are spent on the accumulators.
 */
template <int NT> constexpr int STAGE_UNROLL = NT == 1 ? 1 : NT == 8 ? 2 : 4;

/*
 * Stage columns [kc, kc + len) of the n-tiles' B rows into shared memory
 * in the lanes' register order. Lane t's E columns of iteration it start
 * at it * S + t * E; its register r holds the bf16 pair decode() puts in
 * A register r: natural pairs for bf16 and q8, (8i + s, 8i + 4 + s) for
 * q4 (word i), (r, r + 8) for q2. Its 16-byte piece c (registers 4c..4c+3)
 * is stored at piece index it * E/2 + c * 4 + t of the token's row, so
 * the quad's lanes read 64 contiguous bytes and token rows are RS (= 64
 * mod 128) bytes apart: conflict-free 128-bit loads. Each thread builds
 * whole pieces (one 16-byte store each); padding tokens' pieces are zeros,
 * or not staged at all (PAD_SKIP).
 *
 * Asymmetric formats also get xs[n][group] = the sum of the group's
 * columns (fp32), a by-product of the staging: each thread adds its
 * piece's 8 values in order, and the G/8 pieces of a group, which sit in
 * G/8 consecutive lanes of one warp (S == G, and the pieces of a token are
 * a multiple of G/8, as is blockDim.x), are added by a fixed butterfly of
 * shuffles: the same tree every time, so the result is deterministic. Why
 * not a warp per group: that costs a dependent load and a five-step
 * butterfly per (token, group) in every block, which made the asymmetric
 * formats' blocks slower than their weight bytes at every batch (the H200
 * run of b02b17e).
 */
template <int P, int NT, bool HILO, class Src>
MOEM_DEVI void stage(const Src &src, int n_tok, uint32_t kc, uint32_t len, uint8_t *hi,
		     uint8_t *lo, float *xs)
{
	typedef Prec<P> PR;
	constexpr int E = PR::E, S = 4 * E, NPAD = NT * MOEM_K_NTILE;
	constexpr int GP = PR::ASYM ? PR::G / 8 : 1; /* pieces per group */
	constexpr uint32_t RS = moem_k_rowstride(NT, HILO), KC = moem_k_kc(NT, HILO);
	const int pieces = len / 8, total = NPAD * pieces;
	constexpr int SU = STAGE_UNROLL<NT>;

	static_assert(!PR::ASYM || (S == PR::G && 32 % GP == 0), "a group is one iteration");
	/*
	 * SU pieces a thread: all their loads first, then the conversions and
	 * stores (the compiler cannot move a load above a store to shared
	 * memory through these pointers, so one piece at a time waited out
	 * the global latency SU times over). Every lane of a warp runs the
	 * same trips (total is a multiple of 32): the group sums shuffle.
	 */
	for (int base = 0; base < total; base += SU * blockDim.x) {
		typename Src::Raw rv[SU];

#pragma unroll
		for (int u = 0; u < SU; u++) {
			const int idx = base + u * blockDim.x + threadIdx.x;
			const int n = idx / pieces, q = idx - n * pieces;
			const int it = q / (E / 2), c = (q % (E / 2)) / 4, t = q % 4;
			/* q2 pieces take columns 4c..4c+3 and 4c+8..4c+11 of the lane's 16 */
			const uint32_t col =
				kc + it * S + lane_col<P>(t) * E + (P == P_Q2 ? 4 * c : 8 * c);

			if (idx < total && n < n_tok)
				rv[u] = src.template load<P>(n, col);
		}
#pragma unroll
		for (int u = 0; u < SU; u++) {
			const int idx = base + u * blockDim.x + threadIdx.x;
			const int n = idx / pieces, q = idx - n * pieces;
			uint16_t h[8], l[8];
			float sum = 0.0f;

			if (idx >= total)
				break; /* the whole warp, and every later u */
			if (n < n_tok) {
				sum = piece_of<P>(rv[u], h, l);
			} else {
#pragma unroll
				for (int i = 0; i < 8; i++)
					h[i] = l[i] = 0;
			}
			if (!PAD_SKIP<P> || n < n_tok) {
				*reinterpret_cast<uint4 *>(hi + n * RS + q * 16) = pack8(h);
				if (HILO)
					*reinterpret_cast<uint4 *>(lo + n * RS + q * 16) = pack8(l);
			}
			if constexpr (PR::ASYM != 0) {
#pragma unroll
				for (int off = GP / 2; off; off >>= 1)
					sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, off));
				if (q % GP == 0)
					xs[n * (KC / PR::G) + q / GP] = sum;
			}
		}
	}
}

/* One pipeline slot: a lane's raw weights of one load unit for MATS
 * matrices, rows g and g+8, and the fp16 scale | min << 16 of each of its
 * IPL groups (one register each). */
template <int P, int MATS> struct RawSlot {
	typename Prec<P>::Raw w[MATS][2];
	uint32_t sm[MATS][2][Prec<P>::IPL];
};

/*
 * acc[m][nt][c] += sum over k < K of W_m[row][k] * B[n][k] for the warp's
 * rows r0 + g (c = 0, 1) and r0 + g + 8 (c = 2, 3) and tokens
 * n = nt * 8 + 2t + (c & 1). The warp takes load units ks, ks + KS, ...
 * of each staged chunk. All threads of the block must call it (it
 * synchronises the block); rows beyond `rows` are computed on the last
 * row and must not be stored. Ends with a __syncthreads(): smem is free.
 */
template <int P, int NT, int KS, int MATS, bool HILO, class Src>
MOEM_DEVI void gemm_tile(const uint8_t *const (&wb)[MATS], const moem_kq_mat &mq, uint32_t rows,
			 uint32_t K, uint32_t r0, int ks, const Src &src, int n_tok,
			 float (&acc)[MATS][NT][4], uint8_t *smem)
{
	typedef Prec<P> PR;
	typedef RawSlot<P, MATS> Slot;
	constexpr int E = PR::E, S = 4 * E, REGS = E / 2, PIECES = E / 8, IPL = PR::IPL;
	constexpr int NPAD = NT * MOEM_K_NTILE, G = PR::G;
	constexpr uint32_t KC = moem_k_kc(NT, HILO), RS = moem_k_rowstride(NT, HILO);
	/* load units in flight per warp: 12-16 bytes of each row per lane */
	constexpr int D = MATS == 2 && NT >= 8 ? (IPL > 1 ? 1 : 2) : IPL > 1 ? 2 : MATS == 2 ? 3 : 4;
	const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const uint32_t rg = min(r0 + g, rows - 1), rg8 = min(r0 + g + 8, rows - 1);
	uint8_t *const hi = smem, *const lo = smem + NPAD * RS;
	float *const xs = reinterpret_cast<float *>(smem + (HILO ? 2 : 1) * NPAD * RS);

	for (uint32_t kc = 0; kc < K; kc += KC) {
		const uint32_t len = min(KC, K - kc);
		const int nit = len / S, nu = (nit + IPL - 1) / IPL;

		/* Load unit u: iterations u * IPL ..; an odd q2 tail has one. */
		auto load = [&](Slot &sl, int u) {
			const int it0 = u * IPL;
			const bool half = IPL > 1 && it0 + 1 >= nit;
			const uint32_t boff = (kc + it0 * S) * PR::BITS / 8 +
					      t * (uint32_t)sizeof(typename PR::Raw);

#pragma unroll
			for (int m = 0; m < MATS; m++) {
				const uint8_t *w0 = wb[m] + (size_t)rg * mq.row_bytes + boff;
				const uint8_t *w1 = wb[m] + (size_t)rg8 * mq.row_bytes + boff;

				if (IPL > 1 && half && t >= 2) {
					/* lanes 2-3 would read the absent second group */
					sl.w[m][0] = sl.w[m][1] = typename PR::Raw{};
				} else {
					sl.w[m][0] = ld_stream(
						reinterpret_cast<const typename PR::Raw *>(w0));
					sl.w[m][1] = ld_stream(
						reinterpret_cast<const typename PR::Raw *>(w1));
				}
#pragma unroll
				for (int h = 0; h < IPL; h++) {
					const uint32_t grp = G ? (kc + (it0 + h) * S) / (G ? G : 1) : 0;
					const size_t o0 = (size_t)rg * mq.groups_per_row + grp;
					const size_t o1 = (size_t)rg8 * mq.groups_per_row + grp;
					const uint16_t *sc =
						reinterpret_cast<const uint16_t *>(wb[m] + mq.scale_off);
					const uint16_t *mn =
						reinterpret_cast<const uint16_t *>(wb[m] + mq.min_off);

					sl.sm[m][0][h] = sl.sm[m][1][h] = 0;
					if (G && !(h && half)) {
						sl.sm[m][0][h] = __ldg(sc + o0);
						sl.sm[m][1][h] = __ldg(sc + o1);
						if (PR::ASYM) {
							sl.sm[m][0][h] |= (uint32_t)__ldg(mn + o0) << 16;
							sl.sm[m][1][h] |= (uint32_t)__ldg(mn + o1) << 16;
						}
					}
				}
			}
		};

		/* One iteration: the mmas over its S columns, then the group's scale. */
		auto iteration = [&](const uint32_t (&a)[MATS][2][REGS], const Slot &sl, int h,
				     int it) {
			float tmp[MATS][NT][4];

#pragma unroll
			for (int m = 0; m < MATS; m++)
#pragma unroll
				for (int nt = 0; nt < NT; nt++)
#pragma unroll
					for (int c = 0; c < 4; c++)
						tmp[m][nt][c] = 0.0f;
#pragma unroll
			for (int pc = 0; pc < PIECES; pc++) {
				const uint32_t off = (it * (E / 2) + pc * 4 + t) << 4;
				uint4 bh[NT], bl[NT];

#pragma unroll
				for (int nt = 0; nt < NT; nt++) {
					const uint32_t ro = (nt * MOEM_K_NTILE + g) * RS + off;
					/* rows of unstaged padding tokens: zeros */
					const bool real =
						!PAD_SKIP<P> || nt * MOEM_K_NTILE + g < n_tok;

					bh[nt] = real ? *reinterpret_cast<const uint4 *>(hi + ro)
						      : uint4{};
					if (HILO)
						bl[nt] = real ? *reinterpret_cast<const uint4 *>(lo + ro)
							      : uint4{};
				}
#pragma unroll
				for (int hh = 0; hh < 2; hh++) {
					const int j = pc * 2 + hh;

#pragma unroll
					for (int nt = 0; nt < NT; nt++) {
						const uint32_t b0 = hh ? bh[nt].z : bh[nt].x;
						const uint32_t b1 = hh ? bh[nt].w : bh[nt].y;

#pragma unroll
						for (int m = 0; m < MATS; m++) {
							float(&c)[4] = G ? tmp[m][nt] : acc[m][nt];

							mma16816(c, a[m][0][2 * j], a[m][1][2 * j],
								 a[m][0][2 * j + 1], a[m][1][2 * j + 1],
								 b0, b1);
							if (HILO)
								mma16816(c, a[m][0][2 * j],
									 a[m][1][2 * j],
									 a[m][0][2 * j + 1],
									 a[m][1][2 * j + 1],
									 hh ? bl[nt].z : bl[nt].x,
									 hh ? bl[nt].w : bl[nt].y);
						}
					}
				}
			}
			if (G) {
				const int gl = it * S / (G ? G : 1);

#pragma unroll
				for (int m = 0; m < MATS; m++) {
					const float s0 = f16_bits_to_f32(sl.sm[m][0][h] & 0xffffu);
					const float s1 = f16_bits_to_f32(sl.sm[m][1][h] & 0xffffu);

#pragma unroll
					for (int nt = 0; nt < NT; nt++) {
						float *c = acc[m][nt];

						c[0] += s0 * tmp[m][nt][0];
						c[1] += s0 * tmp[m][nt][1];
						c[2] += s1 * tmp[m][nt][2];
						c[3] += s1 * tmp[m][nt][3];
						if (PR::ASYM) {
							const int n0 = nt * MOEM_K_NTILE + 2 * t;
							const float x0 = xs[n0 * (KC / (G ? G : 1)) + gl];
							const float x1 =
								xs[(n0 + 1) * (KC / (G ? G : 1)) + gl];
							const float m0 = f16_bits_to_f32(sl.sm[m][0][h] >> 16);
							const float m1 = f16_bits_to_f32(sl.sm[m][1][h] >> 16);

							c[0] += m0 * x0;
							c[1] += m0 * x1;
							c[2] += m1 * x0;
							c[3] += m1 * x1;
						}
					}
				}
			}
		};

		auto compute = [&](Slot &sl, int u) {
			if constexpr (P == P_Q2) {
#pragma unroll
				for (int m = 0; m < MATS; m++) {
					sl.w[m][0] = q2_exchange(sl.w[m][0], t);
					sl.w[m][1] = q2_exchange(sl.w[m][1], t);
				}
			}
#pragma unroll
			for (int h = 0; h < IPL; h++) {
				uint32_t a[MATS][2][REGS];

				if (u * IPL + h >= nit) /* an odd q2 tail (warp-uniform) */
					break;
#pragma unroll
				for (int m = 0; m < MATS; m++) {
					decode_any<P>(sl.w[m][0], h, a[m][0]);
					decode_any<P>(sl.w[m][1], h, a[m][1]);
				}
				iteration(a, sl, h, u * IPL + h);
			}
		};

		{
			Slot buf[D];

			/* The first weights are on their way while the block stages. */
#pragma unroll
			for (int d = 0; d < D; d++)
				if (ks + d * KS < nu)
					load(buf[d], ks + d * KS);
			stage<P, NT, HILO>(src, n_tok, kc, len, hi, lo, xs);
			__syncthreads();
			for (int base = ks; base < nu; base += D * KS) {
#pragma unroll
				for (int d = 0; d < D; d++) {
					const int u = base + d * KS;

					if (u < nu) {
						Slot cur = buf[d];

						if (u + D * KS < nu)
							load(buf[d], u + D * KS);
						compute(cur, u);
					}
				}
			}
		}
		__syncthreads();
	}
}

/*
 * Add the split-K partials of warps ks = 1..KS-1 into warp ks = 0 of the
 * same row tile, in that fixed order (through shared memory, which
 * gemm_tile() left free). Only ks == 0 holds the result afterwards.
 */
template <int NT, int MATS, int KS, int RT>
MOEM_DEVI void reduce_ks(float (&acc)[MATS][NT][4], uint8_t *smem, int rt, int ks)
{
	constexpr int PER = MATS * NT * 4;
	float *red = reinterpret_cast<float *>(smem);
	const int lane = threadIdx.x & 31;

	if (KS == 1)
		return;
	if (ks > 0) {
		float *dst = red + ((ks - 1) * RT + rt) * PER * 32;

#pragma unroll
		for (int i = 0; i < PER; i++)
			dst[i * 32 + lane] = acc[i / (NT * 4)][(i / 4) % NT][i % 4];
	}
	__syncthreads();
	if (ks == 0) {
		for (int kk = 1; kk < KS; kk++) {
			const float *src = red + ((kk - 1) * RT + rt) * PER * 32;

#pragma unroll
			for (int i = 0; i < PER; i++)
				acc[i / (NT * 4)][(i / 4) % NT][i % 4] += src[i * 32 + lane];
		}
	}
}

#endif /* MOEM_CUDA_GEMM_CUH */
