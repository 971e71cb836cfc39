// SPDX-License-Identifier: GPL-2.0-only
/*
 * The amx table's quantized row kernels (kern.h): q8, q4 and q2 weights
 * against int8 activations quantized per token in blocks of 64, in two
 * forms that give every output the same bits, so that the table can
 * pick by the number of tokens without the batch changing a result:
 *
 *   AMX-INT8 (groups of AMX_QMIN..16 tokens): TDPBSSD (q8: s8 weights,
 *            s8 activations) or TDPBUSD (q4/q2: u8 codes unpacked per
 *            block) into one C tile per block of 64, its element the
 *            block's exact int32 dot product of a row and a token;
 *   VNNI     (fewer tokens, batch-1 decode): panels of 16 rows, one
 *            vpdpbusd per row and 64 bytes of weights, the partial sums
 *            of each row's block added up as integers (exact), so the
 *            same int32 per row, block and token, 16 rows to a vector.
 *
 * Per output the order is then the same in both and depends only on K:
 * one fp32 accumulator takes the blocks in k order, each block's int32
 * converted and times fl(sw x qs) (the row's group scale times the
 * token's block scale) in one FMA; for q4 and q2 the min term, the sum
 * over groups in order of min x the token's group sum (one FMA each,
 * from 0), is added last. kern_avx512.c takes the same block terms but
 * adds each block's min term as it goes, so the amx and avx512 tables
 * give different bits, each its own bits for any batch.
 *
 * Activations (kern.h): q8 QNAT, q4 QEO2 (pairs of blocks), q2 QM4X
 * (groups of 4): the VNNI form reads 64 bytes of a row's weights in one
 * load, a block pair or group, against them. The AMX form takes each
 * block's 64 activation bytes in the block's own order (q4 QEO, q2 QM4),
 * gathered from the pair or group when it lays the B tiles out, and
 * unpacks its A tiles to that order.
 */
#include <immintrin.h>
#include <string.h>

#include "kern.h"

#define INL static inline __attribute__((always_inline))

#include "kern_amx.h"
#include "kern_x86.h"

/*
 * Token groups of this many and more take the AMX form. A TDPBUSD costs
 * the same for 1 or 16 columns of B while the VNNI form's work grows
 * with each token; the VNNI form streams a batch-1 row block faster.
 */
#define AMX_QMIN MOEM_CPU_AMX_QMIN

/*
 * Steps (64 bytes of a row) the VNNI form takes of one row before the
 * next: 16 rows a step at a time were 16 streams the prefetchers kept
 * below the read bandwidth (q2 at batch 1: 9.7 GB/s against 11.5 for
 * kern_avx512.c's row-by-row stream on one thread); a run's partials
 * wait in L1 (8 KB) for the reduction.
 */
#define RP_RUN 8
#define RP_TOK 3 /* tokens a run takes each row step for (its steps: RP_RUN / tokens) */

/*
 * Codes are taken out of their bytes by GFNI's affine transform (one
 * instruction, where a shift and a mask were two): GF_FIELD(s, n) is the
 * bit matrix that moves bits s..s + n - 1 of each byte to bits 0..n - 1
 * and clears the others (output bit i is the parity of its row, byte
 * 7 - i of the matrix, with the input byte: that row is input bit s + i).
 */
#define GF_ROW(s, n, i) ((i) < (n) ? (1ull << ((s) + (i))) << (8 * (7 - (i))) : 0ull)
#define GF_FIELD(s, n) \
	((long long)(GF_ROW(s, n, 0) | GF_ROW(s, n, 1) | GF_ROW(s, n, 2) | GF_ROW(s, n, 3)))

INL __m512i gf_take(__m512i v, __m512i A)
{
	return _mm512_gf2p8affine_epi64_epi8(v, A, 0);
}

/* ---- the AMX form: TDPBSSD / TDPBUSD, one C tile per block of 64 -------- */

/*
 * One block's 64 u8 codes of a q4 row (32 bytes at wb) in QEO order: the
 * low nibbles, then the high ones (element 2j is byte j's low nibble).
 */
INL __m512i q4_blk(const uint8_t *wb)
{
	const __m512i A =
		_mm512_set_epi64(GF_FIELD(4, 4), GF_FIELD(4, 4), GF_FIELD(4, 4), GF_FIELD(4, 4),
				 GF_FIELD(0, 4), GF_FIELD(0, 4), GF_FIELD(0, 4), GF_FIELD(0, 4));

	return gf_take(
		_mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)wb)), A);
}

/*
 * One block's 64 u8 codes of a q2 row (16 bytes at wb) in QM4 order: bit
 * pair i of byte j at i * 16 + j.
 */
INL __m512i q2_blk(const uint8_t *wb)
{
	const __m512i A =
		_mm512_set_epi64(GF_FIELD(6, 2), GF_FIELD(6, 2), GF_FIELD(4, 2), GF_FIELD(4, 2),
				 GF_FIELD(2, 2), GF_FIELD(2, 2), GF_FIELD(0, 2), GF_FIELD(0, 2));

	return gf_take(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)wb)),
		       A);
}

/* Block b of m q4/q2 weight rows (from w, stride ldw) as an A tile of u8 codes at a. */
INL void a_unpack(enum moem_prec p, const uint8_t *w, size_t ldw, uint32_t m, uint32_t b,
		  uint8_t *a)
{
	for (uint32_t r = 0; r < m; r++)
		_mm512_storeu_si512(a + 64 * r, p == MOEM_PREC_Q4
							? q4_blk(w + r * ldw + 32 * (size_t)b)
							: q2_blk(w + r * ldw + 16 * (size_t)b));
}

/*
 * q4/q2 weights are unpacked QCH blocks ahead of their tile loads, a
 * chunk of QCH blocks at a time into a ring of 2 QCH A tiles: a tile load
 * of bytes just stored waits for the stores to drain, which bound the
 * kernel at few tokens when each block was unpacked right before its
 * load.
 */
#define QCH 4

/*
 * Block b's C tile Ct from A tile At (weights) and B tile Bt (the
 * tokens' activations of the block): zeroed, then one dot product of 64
 * bytes, exact in int32. The lines of the next row block (wn, 16 rows
 * on) are prefetched a block's share at a time, in address order: 16
 * rows read 64 bytes at a time are 16 streams, which the hardware
 * prefetcher alone left at about half the read bandwidth at few tokens.
 * A macro: tile numbers are spelled into the instructions.
 */
#define Q_ISSUE(Ct, At, Bt, b)                                                            \
	do {                                                                              \
		const uint32_t b_ = (b);                                                  \
		for (size_t u_ = 0; u_ < QB_ / 4; u_++)                                   \
			_mm_prefetch((const char *)wn + 64 * ((size_t)b_ * QB_ / 4 + u_), \
				     _MM_HINT_T0);                                        \
		_tile_zero(Ct);                                                           \
		_tile_loadd(Bt, vb + bstep * (size_t)b_, bstride);                        \
		if (p == MOEM_PREC_Q8) {                                                  \
			_tile_loadd(At, w + 64 * (size_t)b_, ldw);                        \
			_tile_dpbssd(Ct, At, Bt);                                         \
		} else {                                                                  \
			const uint8_t *a_ = abuf + 1024 * (b_ % (2 * QCH));               \
			_tile_loadd(At, a_, 64);                                          \
			_tile_dpbusd(Ct, At, Bt);                                         \
		}                                                                         \
	} while (0)

/* Lane l of vector j of a flat tile of N (4, 8, 16) columns: row (16 j + l) / N, token l % N. */
INL __m512i q_ridx(const int N, int j)
{
	const __m512i l = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);

	return _mm512_srli_epi32(_mm512_add_epi32(l, _mm512_set1_epi32(16 * j)), N == 4	  ? 2
										 : N == 8 ? 3
											  : 4);
}

/*
 * C tiles are stored to a ring of C_RING buffers and scaled C_LAG blocks
 * later: vector loads of a tile store's bytes wait for it to reach L1,
 * and scaling each block's C right after its store bound the kernel
 * from 16 tokens.
 */
#define C_RING 4
#define C_LAG  2

/* Block b's C (flat, c) into acc[0..N-1] at its block scales: one FMA an output. */
INL void q_scale(const int N, const int32_t *c, const float *qsf, const float *sw, const float *swf,
		 uint32_t G, uint32_t gshift, uint32_t b, __m512 *acc)
{
	const __m512 q = _mm512_loadu_ps(qsf + 16 * (size_t)b);
	const uint32_t g = b >> gshift;

#pragma GCC unroll 16
	for (int j = 0; j < N; j++) {
		__m512 s = N == 16 ? _mm512_set1_ps(sw[j * G + g])
				   : _mm512_loadu_ps(swf + 16 * ((size_t)g * N + j));

		acc[j] = _mm512_fmadd_ps(
			_mm512_cvtepi32_ps(_mm512_loadu_si512((const void *)(c + 16 * j))),
			_mm512_mul_ps(q, s), acc[j]);
	}
}

/*
 * Rows of 16 x one group of tokens in N (4, 8, 16) columns: C
 * tiles stored flat, row r's token t at r N + t, so N vectors of 16
 * lanes hold the block's 16 N products. B tiles at vb + bstep b, stride
 * bstride; qsf[b] and xgf[g]: the tokens' block scales and group sums in
 * lane l % N; swf (N < 16): the rows' weight scales in the flat lanes,
 * [g][N][16].
 *
 * Per output the order is: one fp32 accumulator takes the blocks in k
 * order, each block's exact int32 dot product (its C element) converted
 * and times the block's scale, fl(sw x qs), in one FMA; for q4 and q2
 * then the min term, the sum over groups in order of min x the token's
 * group sum (one FMA each, from 0), added last. Nothing of it depends on
 * N, the other rows or tokens of the tiles, the call or the thread.
 */
INL void q_rowblk(enum moem_prec p, const int N, const uint8_t *w, const uint8_t *wn, size_t ldw,
		  uint32_t m, uint32_t NB, uint32_t G, uint32_t gshift, const float *sw,
		  const float *swf, const float *mn, const uint8_t *vb, size_t bstep,
		  size_t bstride, const float *qsf, const float *xgf, uint8_t *abuf,
		  int32_t (*cb)[256], float *out)
{
	const size_t QB_ = p == MOEM_PREC_Q8 ? 64 : p == MOEM_PREC_Q4 ? 32 : 16;
	__m512 acc[16];

	/*
	 * N = 16: the min terms first, parked in out and added last: 16
	 * chains of FMAs side by side (groups outside), with no accumulator
	 * of the blocks live yet.
	 */
	if (p != MOEM_PREC_Q8 && N == 16) {
		__m512 s[16];

#pragma GCC unroll 16
		for (int j = 0; j < 16; j++)
			s[j] = _mm512_setzero_ps();
		for (uint32_t g = 0; g < G; g++) {
			const __m512 x = _mm512_loadu_ps(xgf + 16 * (size_t)g);

#pragma GCC unroll 16
			for (int j = 0; j < 16; j++)
				s[j] = _mm512_fmadd_ps(_mm512_set1_ps(mn[j * G + g]), x, s[j]);
		}
#pragma GCC unroll 16
		for (int j = 0; j < 16; j++)
			_mm512_storeu_ps(out + 16 * j, s[j]);
	}
#pragma GCC unroll 16
	for (int j = 0; j < N; j++)
		acc[j] = _mm512_setzero_ps();
	/* block b + 1's tiles are issued before block b's C is scaled: two C tiles in turn */
	if (p != MOEM_PREC_Q8)
		for (uint32_t u = 0; u < QCH && u < NB; u++)
			a_unpack(p, w, ldw, m, u, abuf + 1024 * u);
	Q_ISSUE(0, 4, 6, 0);
	for (uint32_t b = 0; b < NB; b++) {
		if (p != MOEM_PREC_Q8 && b % QCH == 0) /* the next chunk */
			for (uint32_t u = b + QCH; u < b + 2 * QCH && u < NB; u++)
				a_unpack(p, w, ldw, m, u, abuf + 1024 * (u % (2 * QCH)));
		if (b & 1) {
			if (b + 1 < NB)
				Q_ISSUE(0, 4, 6, b + 1);
			_tile_stored(1, cb[b % C_RING], 4 * N);
		} else {
			if (b + 1 < NB)
				Q_ISSUE(1, 5, 7, b + 1);
			_tile_stored(0, cb[b % C_RING], 4 * N);
		}
		if (b >= C_LAG)
			q_scale(N, cb[(b - C_LAG) % C_RING], qsf, sw, swf, G, gshift, b - C_LAG,
				acc);
	}
	for (uint32_t b = NB > C_LAG ? NB - C_LAG : 0; b < NB; b++)
		q_scale(N, cb[b % C_RING], qsf, sw, swf, G, gshift, b, acc);
	if (p != MOEM_PREC_Q8 && N == 16) {
#pragma GCC unroll 16
		for (int j = 0; j < 16; j++)
			acc[j] = _mm512_add_ps(acc[j], _mm512_loadu_ps(out + 16 * j));
	} else if (p != MOEM_PREC_Q8) {
		const __m512i gi = _mm512_mullo_epi32(
			_mm512_set1_epi32((int)G),
			_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
		__m512 s[8];

#pragma GCC unroll 8
		for (int j = 0; j < N; j++)
			s[j] = _mm512_setzero_ps();
		for (uint32_t g = 0; g < G; g++) {
			const __m512 mt = _mm512_i32gather_ps(gi, mn + g, 4);
			const __m512 x = _mm512_loadu_ps(xgf + 16 * (size_t)g);

#pragma GCC unroll 8
			for (int j = 0; j < N; j++)
				s[j] = _mm512_fmadd_ps(_mm512_permutexvar_ps(q_ridx(N, j), mt), x,
						       s[j]);
		}
#pragma GCC unroll 8
		for (int j = 0; j < N; j++)
			acc[j] = _mm512_add_ps(acc[j], s[j]);
	}
#pragma GCC unroll 16
	for (int j = 0; j < N; j++)
		_mm512_storeu_ps(out + 16 * j, acc[j]);
}

/*
 * swf for N < 16: sw[r][g] of the 16 rows ([16][G]) in the flat lanes of
 * N columns, 16 groups at a time by a 16 x 16 transpose (moves only).
 */
static void sw_flat(const float *sw, uint32_t G, const int N, float *swf)
{
	for (uint32_t g0 = 0; g0 < G; g0 += 16) {
		const uint32_t ng = G - g0 < 16 ? G - g0 : 16;
		const __mmask16 k = (__mmask16)((1u << ng) - 1);
		__m512i r[16];

		for (int j = 0; j < 16; j++)
			r[j] = _mm512_maskz_loadu_epi32(k, sw + (size_t)j * G + g0);
		tr16(r);
		for (uint32_t g = 0; g < ng; g++)
			for (int j = 0; j < N; j++)
				_mm512_storeu_ps(swf + 16 * ((size_t)(g0 + g) * N + j),
						 _mm512_permutexvar_ps(q_ridx(N, j),
								       _mm512_castsi512_ps(r[g])));
	}
}

/* ---- the B tiles of the AMX form ------------------------------------- */

/*
 * Block b's 64 activation bytes of row xr in the block's own order (q8
 * natural, q4 QEO, q2 QM4), from the row's format (QNAT, QEO2: a pair's
 * evens then its odds, QM4X: bit pair i of a group's block L at
 * i * 64 + L * 16; the blocks after the last pair or group as QEO, QM4).
 */
INL __m512i act_blk(enum moem_prec p, const int8_t *xr, uint32_t b, uint32_t NB)
{
	if (p == MOEM_PREC_Q4 && b < (NB & ~1u)) {
		const int8_t *e = xr + 128 * (size_t)(b / 2) + 32 * (b & 1);

		return _mm512_inserti64x4(
			_mm512_castsi256_si512(
				_mm256_loadu_si256((const __m256i *)(const void *)e)),
			_mm256_loadu_si256((const __m256i *)(const void *)(e + 64)), 1);
	}
	if (p == MOEM_PREC_Q2 && b < (NB & ~3u)) {
		const int8_t *g = xr + 256 * (size_t)(b / 4) + 16 * (b & 3);
		__m512i v =
			_mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)g));

		v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)(g + 64)),
				       1);
		v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(const void *)(g + 128)),
				       2);
		return _mm512_inserti32x4(
			v, _mm_loadu_si128((const __m128i *)(const void *)(g + 192)), 3);
	}
	return _mm512_loadu_si512((const void *)(xr + 64 * (size_t)b));
}

/*
 * The B tiles of nt <= 16 tokens, block b's at vb + 1024 b: row j the
 * dwords j of the block of the 16 tokens (VNNI-4: B[k / 4][4 t + k % 4]),
 * zeros past nt, by 16 x 16 dword transposes.
 */
INL void b_build(enum moem_prec p, const int8_t *xq, const uint32_t *tok, uint32_t nt, uint32_t K,
		 uint8_t *vb)
{
	const uint32_t NB = K / MOEM_CPU_QBLOCK;

	for (uint32_t b = 0; b < NB; b++) {
		__m512i r[16];

		for (uint32_t t = 0; t < 16; t++)
			r[t] = t < nt ? act_blk(p, xq + (size_t)tok[t] * K, b, NB)
				      : _mm512_setzero_si512();
		tr16(r);
#pragma GCC unroll 16
		for (int j = 0; j < 16; j++)
			_mm512_storeu_si512(vb + 1024 * (size_t)b + 64 * j, r[j]);
	}
}

/* ---- the VNNI form: panels of 16 rows --------------------------------- */

/* Blocks of a 64-byte step of a row's weights, and weight bytes a block. */
#define QG(p)	((p) == MOEM_PREC_Q8 ? 1u : (p) == MOEM_PREC_Q4 ? 2u : 4u)
#define QBPB(p) ((p) == MOEM_PREC_Q8 ? 64u : (p) == MOEM_PREC_Q4 ? 32u : 16u)

/*
 * A row's 64 bytes of weights of one step (wb) as the unsigned operands
 * w[0..QG - 1] of the step's vpdpbusd: q8 w + 128 (w ^ 0x80; 128 x the
 * block's activation sum is taken off after the lanes are added up), q4
 * low and high nibbles, q2 bit pairs 0..3.
 */
INL void rp_unpack(enum moem_prec p, const uint8_t *wb, __m512i *w)
{
	const __m512i v = _mm512_loadu_si512((const void *)wb);

	if (p == MOEM_PREC_Q8) {
		w[0] = _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
	} else if (p == MOEM_PREC_Q4) {
		w[0] = _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
		w[1] = gf_take(v, _mm512_set1_epi64(GF_FIELD(4, 4)));
	} else {
		w[0] = _mm512_and_si512(v, _mm512_set1_epi8(3));
		w[1] = gf_take(v, _mm512_set1_epi64(GF_FIELD(2, 2)));
		w[2] = gf_take(v, _mm512_set1_epi64(GF_FIELD(4, 2)));
		w[3] = gf_take(v, _mm512_set1_epi64(GF_FIELD(6, 2)));
	}
}

/*
 * The step's int32 partial sums of one row and token (activations xv):
 * q8 all 16 lanes block b's, q4 lanes 0-7 block b's and 8-15 b + 1's,
 * q2 128-bit chunk L block b + L's.
 */
INL __m512i rp_dotw(enum moem_prec p, const __m512i *w, const __m512i *xv)
{
	__m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], xv[0]);

	for (uint32_t i = 1; i < QG(p); i++)
		d = _mm512_dpbusd_epi32(d, w[i], xv[i]);
	return d;
}

/* A lone q4/q2 block (after the last pair or group): its codes in the activations' order. */
INL __m512i rp_dot1(enum moem_prec p, const uint8_t *wb, __m512i xv)
{
	return _mm512_dpbusd_epi32(_mm512_setzero_si512(),
				   p == MOEM_PREC_Q4 ? q4_blk(wb) : q2_blk(wb), xv);
}

/* Chunk c of the result: the sums of the 4 lanes of chunk c of d0, d1, d2, d3 (exact). */
INL __m512i red4(__m512i d0, __m512i d1, __m512i d2, __m512i d3)
{
	const __m512i s01 =
		_mm512_add_epi32(_mm512_unpacklo_epi32(d0, d1), _mm512_unpackhi_epi32(d0, d1));
	const __m512i s23 =
		_mm512_add_epi32(_mm512_unpacklo_epi32(d2, d3), _mm512_unpackhi_epi32(d2, d3));

	return _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
}

/*
 * The int32 partials d[r] of 16 rows of one step into Tv[0..3]: lane r
 * of Tv[c] is row r's sum of its chunk c of partials (red4(), then the
 * 128-bit chunks transposed 4 x 4). Integer adds: exact in any order.
 */
INL void rp_reduce(const __m512i *d, __m512i *Tv)
{
	__m512i V[4], u[4];

#pragma GCC unroll 4
	for (int q = 0; q < 4; q++)
		V[q] = red4(d[4 * q], d[4 * q + 1], d[4 * q + 2], d[4 * q + 3]);
	u[0] = _mm512_shuffle_i32x4(V[0], V[1], 0x44);
	u[1] = _mm512_shuffle_i32x4(V[0], V[1], 0xee);
	u[2] = _mm512_shuffle_i32x4(V[2], V[3], 0x44);
	u[3] = _mm512_shuffle_i32x4(V[2], V[3], 0xee);
	Tv[0] = _mm512_shuffle_i32x4(u[0], u[2], 0x88);
	Tv[1] = _mm512_shuffle_i32x4(u[0], u[2], 0xdd);
	Tv[2] = _mm512_shuffle_i32x4(u[1], u[3], 0x88);
	Tv[3] = _mm512_shuffle_i32x4(u[1], u[3], 0xdd);
}

/* Group g's 16 values of a rows_T16() output, as fp32. */
INL __m512 gv(const uint16_t *t, uint32_t g)
{
	return _mm512_cvtph_ps(
		_mm256_loadu_si256((const __m256i *)(const void *)(t + 16 * (size_t)g)));
}

/* acc + a block's int32 S of 16 rows at the rows' group scales sw times the token's qs. */
INL __m512 blk_fma(__m512i S, __m512 sw, float qs, __m512 acc)
{
	return _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(_mm512_set1_ps(qs), sw), acc);
}

/*
 * acc + the blocks of one step from b (rp_reduce()'s Tv) in k order: q8
 * one block (less 128 x its activation sum, xsum[b]), q4 two, q2 four.
 */
INL __m512 step_fma(enum moem_prec p, const __m512i *Tv, const uint16_t *swT, const float *qs,
		    uint32_t b, const int32_t *xsum, __m512 acc)
{
	if (p == MOEM_PREC_Q8) {
		__m512i S = _mm512_add_epi32(_mm512_add_epi32(Tv[0], Tv[1]),
					     _mm512_add_epi32(Tv[2], Tv[3]));

		S = _mm512_sub_epi32(S, _mm512_set1_epi32(xsum[b]));
		return blk_fma(S, gv(swT, b >> 1), qs[b], acc);
	}
	if (p == MOEM_PREC_Q4) {
		acc = blk_fma(_mm512_add_epi32(Tv[0], Tv[1]), gv(swT, b >> 1), qs[b], acc);
		return blk_fma(_mm512_add_epi32(Tv[2], Tv[3]), gv(swT, (b + 1) >> 1), qs[b + 1],
			       acc);
	}
#pragma GCC unroll 4
	for (uint32_t L = 0; L < 4; L++)
		acc = blk_fma(Tv[L], gv(swT, b + L), qs[b + L], acc);
	return acc;
}

/*
 * The fp16 values [m][G] at h (a panel's scales or mins) transposed, as
 * fp16: out[16 g + r] = row r's value of group g, rows past m repeating
 * row m - 1; converted where they are used (exact). 32 groups at a time:
 * a 16 x 16 transpose of the rows' dwords (group pairs), then each pair's
 * two groups apart. out has room for 16 (G + 1) values.
 */
static void rows_T16(const uint16_t *h, uint32_t G, uint32_t m, uint16_t *out)
{
	const __m512i eo =
		_mm512_set_epi16(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1, 30, 28,
				 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);

	for (uint32_t g0 = 0; g0 < G; g0 += 32) {
		const uint32_t ng = G - g0 < 32 ? G - g0 : 32;
		const __mmask32 k = ng == 32 ? ~0u : (1u << ng) - 1;
		__m512i r[16];

		for (uint32_t j = 0; j < 16; j++)
			r[j] = _mm512_maskz_loadu_epi16(k,
							h + (size_t)(j < m ? j : m - 1) * G + g0);
		tr16(r);
		for (uint32_t j = 0; 2 * j < ng; j++)
			_mm512_storeu_si512(out + 16 * (size_t)(g0 + 2 * j),
					    _mm512_permutexvar_epi16(eo, r[j]));
	}
}

/* What rp_group() needs of a panel, the call and its tokens. */
struct rp_panel {
	const uint8_t *wr[16]; /* the panel's rows (past m: row m - 1 again) */
	const uint8_t *wn;     /* the next panel's first row */
	size_t ldw;
	const uint16_t *swT, *mnT; /* rows_T16() of the scales and mins */
	const float *xg, *qs;	   /* group sums [T][G]; x->qs */
	const int32_t *xsum;	   /* q8: 128 x block activation sums [T][NB] */
	const int8_t *xq;
	const uint32_t *tok;
	uint32_t K, NB, NS, G, gshift, ldy;
	float *y; /* token t's rows of the panel at y + t ldy */
	__mmask16 km;
};

/*
 * Tokens t0..t0 + NT - 1 (NT <= RP_TOK) through one panel: runs of
 * RP_RUN / NT steps, row by row, each row step's weights unpacked once
 * for the NT tokens, then the run's partials reduced step by step into
 * each token's accumulator in k order.
 */
INL void rp_group(enum moem_prec p, const int NT, const struct rp_panel *c, uint32_t t0,
		  __m512i (*run)[16])
{
	const uint32_t nt = (uint32_t)NT, rs = RP_RUN / nt;
	const int8_t *xr[RP_TOK];
	const float *qs[RP_TOK];
	__m512 acc[RP_TOK], mt[RP_TOK];
	uint32_t b = 0;

	for (uint32_t t = 0; t < nt; t++) {
		xr[t] = c->xq + (size_t)c->tok[t0 + t] * c->K;
		qs[t] = c->qs + (size_t)c->tok[t0 + t] * c->NB;
		acc[t] = mt[t] = _mm512_setzero_ps();
		/* the min term first: G FMAs in a chain the blocks' chain overlaps */
		for (uint32_t g = 0; p != MOEM_PREC_Q8 && g < c->G; g++)
			mt[t] = _mm512_fmadd_ps(gv(c->mnT, g),
						_mm512_set1_ps(c->xg[(size_t)(t0 + t) * c->G + g]),
						mt[t]);
	}
	for (uint32_t s0 = 0; s0 < c->NS / QG(p); s0 += rs) {
		const uint32_t ns = c->NS / QG(p) - s0 < rs ? c->NS / QG(p) - s0 : rs;
		const int ahead = s0 + rs < c->NS / QG(p);

		/* row by row: the weights one stream, as they lie */
		for (uint32_t r = 0; r < 16; r++)
			for (uint32_t j = 0; j < ns; j++) {
				const size_t o = 64 * (size_t)(s0 + j);
				__m512i w[4];

				if (!t0)
					_mm_prefetch((const char *)(ahead ? c->wr[r] + o + 64 * rs
									  : c->wn + r * c->ldw +
										    64 * (size_t)j),
						     _MM_HINT_T1);
				rp_unpack(p, c->wr[r] + o, w);
				for (uint32_t t = 0; t < nt; t++) {
					__m512i xv[4];

					for (uint32_t i = 0; i < QG(p); i++)
						xv[i] = _mm512_loadu_si512(
							(const void *)(xr[t] + o * QG(p) + 64 * i));
					run[j * nt + t][r] = rp_dotw(p, w, xv);
				}
			}
		for (uint32_t j = 0; j < ns; j++, b += QG(p))
			for (uint32_t t = 0; t < nt; t++) {
				__m512i Tv[4];

				rp_reduce(run[j * nt + t], Tv);
				acc[t] = step_fma(p, Tv, c->swT, qs[t], b,
						  c->xsum + (size_t)(t0 + t) * c->NB, acc[t]);
			}
	}
	for (; b < c->NB; b++) /* q4's last odd block, q2's after the last group */
		for (uint32_t t = 0; t < nt; t++) {
			const __m512i xv =
				_mm512_loadu_si512((const void *)(xr[t] + 64 * (size_t)b));
			__m512i d[16], Tv[4];

			for (uint32_t r = 0; r < 16; r++)
				d[r] = rp_dot1(p, c->wr[r] + QBPB(p) * (size_t)b, xv);
			rp_reduce(d, Tv);
			acc[t] = blk_fma(_mm512_add_epi32(_mm512_add_epi32(Tv[0], Tv[1]),
							  _mm512_add_epi32(Tv[2], Tv[3])),
					 gv(c->swT, b >> c->gshift), qs[t][b], acc[t]);
		}
	for (uint32_t t = 0; t < nt; t++)
		_mm512_mask_storeu_ps(c->y + (ptrdiff_t)(t0 + t) * c->ldy, c->km,
				      p == MOEM_PREC_Q8 ? acc[t] : _mm512_add_ps(acc[t], mt[t]));
}

/*
 * T tokens (few: batch-1 decode) in the VNNI form. Rows in panels of
 * m = min(16, rows), a last panel moved back as the AMX form does (rows
 * past m of a small matrix repeat its last row, never stored); per panel
 * the rows' scales and mins transposed (rows_T16()), then the tokens in
 * groups of up to RP_TOK (rp_group()). The first group prefetches, into
 * L2, each row's line a run ahead, or in the last run the next panel's.
 *
 * Scratch (floats): the panel's scales and mins transposed, 16 (G + 1)
 * in all; the tokens' group sums T G and (q8) block activation sums
 * T NB: <= K for T <= 16.
 */
INL void vnni_q(enum moem_prec p, const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0,
		uint32_t r1, const struct cpu_act *x, const int8_t *xq, const uint32_t *tok,
		uint32_t T, float *y, uint32_t ldy, float *scratch)
{
	const uint32_t K = l->cols, NB = K / MOEM_CPU_QBLOCK, G = l->groups_per_row;
	const uint32_t m = l->rows < 16 ? l->rows : 16, gshift = p == MOEM_PREC_Q2 ? 0 : 1;
	const uint32_t NS = NB / QG(p) * QG(p); /* blocks in whole steps */
	const size_t ldw = l->row_bytes;
	const uint8_t *W = mat + l->data_off;
	const uint16_t *s16 = (const uint16_t *)(const void *)(mat + l->scale_off);
	const uint16_t *m16 = (const uint16_t *)(const void *)(mat + l->min_off);
	uint16_t *swT = (uint16_t *)(void *)scratch, *mnT = swT + 16 * (size_t)(G + 1);
	float *xg = scratch + 16 * (size_t)(G + 1);
	int32_t *xsum = (int32_t *)(void *)(xg + (size_t)T * G);
	__m512i run[RP_RUN][16]; /* a run's partials, [step and token][row] */
	struct rp_panel c = {.ldw = ldw,
			     .swT = swT,
			     .mnT = mnT,
			     .xg = xg,
			     .qs = x->qs,
			     .xsum = xsum,
			     .xq = xq,
			     .tok = tok,
			     .K = K,
			     .NB = NB,
			     .NS = NS,
			     .G = G,
			     .gshift = gshift,
			     .ldy = ldy};

	if (r0 >= r1 || !T)
		return;
	for (uint32_t t = 0; t < T; t++) {
		const int8_t *xr = xq + (size_t)tok[t] * K;
		const float *xs = x->xs + (size_t)tok[t] * NB;

		if (p == MOEM_PREC_Q8)
			for (uint32_t b = 0; b < NB; b++)
				xsum[(size_t)t * NB + b] =
					128 * _mm512_reduce_add_epi32(_mm512_dpbusd_epi32(
						      _mm512_setzero_si512(), _mm512_set1_epi8(1),
						      _mm512_loadu_si512((
							      const void *)(xr + 64 * (size_t)b))));
		else
			for (uint32_t g = 0; g < G; g++)
				xg[(size_t)t * G + g] = gshift ? xs[2 * g] + xs[2 * g + 1] : xs[g];
	}
	/* the first panel's lines: each step prefetches the next panel's */
	for (size_t u = 0; u < m * ldw; u += 64)
		_mm_prefetch((const char *)W + r0 * ldw + u, _MM_HINT_T1);
	for (uint32_t b0 = r0; b0 < r1; b0 += m) {
		const uint32_t st = b0 + m > l->rows ? l->rows - m : b0;
		const uint32_t e = b0 + m < r1 ? b0 + m : r1;

		c.km = (__mmask16)(((1u << (e - st)) - 1) & ~((1u << (b0 - st)) - 1));
		c.wn = W + (size_t)(st + 16) * ldw;
		c.y = y + ((ptrdiff_t)st - (ptrdiff_t)r0);
		for (uint32_t r = 0; r < 16; r++)
			c.wr[r] = W + (size_t)(st + (r < m ? r : m - 1)) * ldw;
		rows_T16(s16 + (size_t)st * G, G, m, swT);
		if (p != MOEM_PREC_Q8)
			rows_T16(m16 + (size_t)st * G, G, m, mnT);
		for (uint32_t t0 = 0; t0 < T; t0 += RP_TOK) {
			switch (T - t0 < RP_TOK ? T - t0 : RP_TOK) {
			case 1:
				rp_group(p, 1, &c, t0, run);
				break;
			case 2:
				rp_group(p, 2, &c, t0, run);
				break;
			default:
				rp_group(p, 3, &c, t0, run);
				break;
			}
		}
	}
}

#define Q_N(N)                                                                                    \
	q_rowblk(p, N, mat + l->data_off + st * ldw, mat + l->data_off + (st + 16) * ldw, ldw, m, \
		 NB, G, gshift, sw, swf, mn, vb, bstep, bstride, qsf, xgf, abuf, cb, c)

/*
 * The quantized kernels: fewer than AMX_QMIN tokens in the VNNI form,
 * else the AMX form, its last group too if it has fewer (the same bits
 * either way). Weights are the A tiles (m rows x one block of 64): q8
 * loaded straight from the matrix (s8, TDPBSSD against the s8
 * activations), q4/q2 unpacked to u8 codes in a buffer on the stack
 * (TDPBUSD). Tokens in groups of up to 16, each group's B tiles in N
 * columns (its count rounded up to 4, 8 or 16), from the call's QT form
 * when it has one, else laid out in scratch by b_build(). Rows in blocks
 * of m = min(16, matrix rows), a last block moved back as amx_bf16 does.
 *
 * Scratch (floats): B tiles 4 K, qsf K / 4, xgf K / 4, sw and mn 16 G
 * each (<= K / 4), swf 16 N G (<= 128 K / 64 = 2 K): <= 7 K <=
 * MOEM_CPU_SCRATCH_FLOATS(K); vnni_q() less.
 */
INL void amx_q(enum moem_prec p, enum cpu_act_fmt fmt, const struct moem_qmat_layout *l,
	       const uint8_t *mat, uint32_t r0, uint32_t r1, const struct cpu_act *x,
	       const uint32_t *tok, uint32_t T, float *y, uint32_t ldy, float *scratch)
{
	const uint32_t K = l->cols, NB = K / MOEM_CPU_QBLOCK, G = l->groups_per_row;
	const uint32_t m = l->rows < 16 ? l->rows : 16, gshift = p == MOEM_PREC_Q2 ? 0 : 1;
	const size_t ldw = l->row_bytes;
	const uint16_t *s16 = (const uint16_t *)(const void *)(mat + l->scale_off);
	const uint16_t *m16 = (const uint16_t *)(const void *)(mat + l->min_off);
	const int8_t *xq = x->v[fmt];
	uint32_t *vbuf = (uint32_t *)(void *)scratch;
	float *qsf = scratch + 4 * (size_t)K, *xgf = qsf + 16 * (size_t)NB;
	float *sw = xgf + 16 * (size_t)G, *mn = sw + 16 * (size_t)G, *swf = mn + 16 * (size_t)G;
	uint8_t abuf[2 * QCH * 1024] __attribute__((aligned(64)));
	int32_t cb[C_RING][256] __attribute__((aligned(64)));
	float c[256] __attribute__((aligned(64)));

	if (r0 >= r1 || !T)
		return;
	if (T < AMX_QMIN) {
		vnni_q(p, l, mat, r0, r1, x, xq, tok, T, y, ldy, scratch);
		return;
	}
	memset(cb, 0, sizeof(cb)); /* rows past m of a small matrix: never stored */
	memset(sw, 0, 2 * 16 * sizeof(float) * G);
	for (uint32_t i = 0; i < T; i += 16) {
		const uint32_t nt = T - i < 16 ? T - i : 16;
		const uint32_t N = nt <= 4 ? 4 : nt <= 8 ? 8 : 16;
		const uint8_t *vb = (const uint8_t *)vbuf;
		const size_t bstep = 1024, bstride = 64;

		if (nt < AMX_QMIN) { /* the last few tokens */
			vnni_q(p, l, mat, r0, r1, x, xq, tok + i, nt, y + (size_t)i * ldy, ldy,
			       scratch);
			break;
		}
		moem_cpu_amx_config(m, N);
		if (x->v[CPU_ACT_QT]) /* laid out once per FFN stage */
			vb = (const uint8_t *)x->v[CPU_ACT_QT] + (size_t)i * K;
		else
			b_build(p, xq, tok + i, nt, K, (uint8_t *)vbuf);
		{ /* lane l: token l % N's block scales and group sums, 0 past the tokens */
			const __m512i tl =
				_mm512_and_si512(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7,
								  6, 5, 4, 3, 2, 1, 0),
						 _mm512_set1_epi32((int)N - 1));
			const __mmask16 vm =
				_mm512_cmplt_epu32_mask(tl, _mm512_set1_epi32((int)nt));
			const __m512i ro = _mm512_mullo_epi32(
				_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), vm, tl, tok + i,
							    4),
				_mm512_set1_epi32((int)NB));

			for (uint32_t b = 0; b < NB; b++)
				_mm512_storeu_ps(
					qsf + 16 * (size_t)b,
					_mm512_mask_i32gather_ps(
						_mm512_setzero_ps(), vm,
						_mm512_add_epi32(ro, _mm512_set1_epi32((int)b)),
						x->qs, 4));
			for (uint32_t g = 0; p != MOEM_PREC_Q8 && g < G; g++) {
				const __m512i o =
					_mm512_add_epi32(ro, _mm512_set1_epi32((int)(g << gshift)));
				__m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), vm, o,
								    x->xs, 4);

				if (gshift)
					v = _mm512_add_ps(
						v,
						_mm512_mask_i32gather_ps(
							_mm512_setzero_ps(), vm,
							_mm512_add_epi32(o, _mm512_set1_epi32(1)),
							x->xs, 4));
				_mm512_storeu_ps(xgf + 16 * (size_t)g, v);
			}
		}
		/* the first row block's lines: Q_ISSUE() prefetches each next one's */
		for (size_t u = 0; u < m * ldw; u += 64)
			_mm_prefetch((const char *)mat + l->data_off + r0 * ldw + u, _MM_HINT_T1);
		for (uint32_t b0 = r0; b0 < r1; b0 += m) {
			const uint32_t st = b0 + m > l->rows ? l->rows - m : b0;
			const uint32_t e = b0 + m < r1 ? b0 + m : r1;

			f16_row(s16 + (size_t)st * G, sw, m * G);
			if (p != MOEM_PREC_Q8)
				f16_row(m16 + (size_t)st * G, mn, m * G);
			if (N < 16)
				sw_flat(sw, G, (int)N, swf);
			switch (N) {
			case 4:
				Q_N(4);
				break;
			case 8:
				Q_N(8);
				break;
			default:
				Q_N(16);
				break;
			}
			if (N == 16) { /* c is rows x tokens as a C tile is */
				c_store(c, st, b0, e, nt, y + (size_t)i * ldy, ldy, r0);
				continue;
			}
			for (uint32_t t = 0; t < nt; t++)
				for (uint32_t r = b0; r < e; r++)
					y[(size_t)(i + t) * ldy + (r - r0)] = c[(r - st) * N + t];
		}
	}
}

void moem_cpu_amxq_pack(enum moem_prec p, const int8_t *xq, const uint32_t *map, uint32_t n,
			uint32_t K, uint8_t *qt, uint32_t c)
{
	qt += (size_t)c * K;
	if (p == MOEM_PREC_Q8)
		b_build(MOEM_PREC_Q8, xq, map, n, K, qt);
	else if (p == MOEM_PREC_Q4)
		b_build(MOEM_PREC_Q4, xq, map, n, K, qt);
	else
		b_build(MOEM_PREC_Q2, xq, map, n, K, qt);
}

void moem_cpu_amx_q8(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0, uint32_t r1,
		     const struct cpu_act *x, const uint32_t *tok, uint32_t T, float *y,
		     uint32_t ldy, float *scratch)
{
	amx_q(MOEM_PREC_Q8, CPU_ACT_QNAT, l, mat, r0, r1, x, tok, T, y, ldy, scratch);
}

void moem_cpu_amx_q4(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0, uint32_t r1,
		     const struct cpu_act *x, const uint32_t *tok, uint32_t T, float *y,
		     uint32_t ldy, float *scratch)
{
	amx_q(MOEM_PREC_Q4, CPU_ACT_QEO2, l, mat, r0, r1, x, tok, T, y, ldy, scratch);
}

void moem_cpu_amx_q2(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0, uint32_t r1,
		     const struct cpu_act *x, const uint32_t *tok, uint32_t T, float *y,
		     uint32_t ldy, float *scratch)
{
	amx_q(MOEM_PREC_Q2, CPU_ACT_QM4X, l, mat, r0, r1, x, tok, T, y, ldy, scratch);
}
