// SPDX-License-Identifier: GPL-2.0-only
/*
 * The AMX row kernels (kern.h): bf16 weights against bf16 activations
 * with TDPBF16PS, and the table; q8, q4 and q2 are kern_amx_q.c's. The
 * output is C^T:
 *
 *   A tile  16 weight rows x 32 bf16 of K, loaded straight from the
 *           weight matrix with the row stride;
 *   B tile  16 pairs of K x 16 tokens: B[k / 2][2 t + (k & 1)] =
 *           act[tok[t]][k] (VNNI pairs): loaded in place from the
 *           operand's VNNI form (kern.h) when the tokens are a group of
 *           16 rows there, as the FFN lays them out, else built per call
 *           in scratch;
 *   C tile  16 rows x 16 tokens of fp32, then written to y transposed.
 *
 * Per output the order is: one fp32 accumulator (C element) that takes
 * K 32 elements at a time in k order, as TDPBF16PS adds a row of A times
 * a column of B to it (bf16 products exact, the fp32 sums rounded to
 * nearest even; denormal inputs and outputs are flushed to zero). It is
 * the same for every T, every row range and thread: rows and tokens only
 * pick which tiles an output sits in. A padding token (a zero column of
 * B) or a padding row only reaches its own C elements, never stored. At
 * batch 1 fifteen of B's sixteen columns are padding; TDPBF16PS has the
 * throughput to spare there (a 16 x 32 weight tile, 1 KB, per
 * instruction), the weight stream bounds it.
 *
 * Rows: blocks of m = min(16, matrix rows). A last block that would run
 * past the matrix is moved back to end on its last row (its first rows
 * computed again, the same bits; only rows in range are stored), so no
 * tile load reads past the matrix; only a matrix under 16 rows takes a
 * tile configuration of m rows. Tokens: groups of up to 16 (one B tile)
 * take four row blocks at a time (4 C tiles, A tiles 4, 5, 7 and 4
 * again); groups of 17-32 (two B tiles) two row blocks (4 C, 2 A, 2 B).
 * The FFN hands this table row blocks of 64 (ffn.c AMX_ROWS).
 *
 * Scratch: the B tiles of a group of 32 tokens not in VNNI form already
 * (dense matmuls, tests), 32 x K bf16, are
 * MOEM_CPU_SCRATCH_FLOATS(K) = 16 K floats (kern.h), the part of the
 * per-call scratch every caller sizes for every table (ffn.c,
 * decode_ops.c), allocated before any kernel runs; so the kernel itself
 * allocates nothing and cannot fail half way (a fallback to another
 * kernel would change bits). The activations are put in place once per
 * group of tokens: up to SCATTER_MAX tokens by vpscatterdd (a token's 16
 * pairs of a K step to its B column), more by 16 x 16 dword transposes
 * (the same transposes lay out the VNNI form: moem_cpu_amx_pack()), or
 * gathered from a VNNI form whose rows are not one group.
 * Columns of absent tokens are left as they are: they only reach C
 * columns that are never stored (TDPBF16PS raises no exceptions).
 *
 * Tiles: the process asks for the tile state once, in isa.c's check of
 * the amx ISA (arch_prctl(ARCH_REQ_XCOMP_PERM)), before the backend
 * makes its workers; each thread loads the tile configuration (LDTILECFG)
 * before its first tile instruction, and again only when a call needs
 * other tile shapes (a thread-local key: amx_cfg_key). Nothing else in moem
 * uses tiles; the tiles are left configured between calls.
 */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kern.h"

#define INL static inline __attribute__((always_inline))

#include "kern_amx.h"

#define PF_DIST	    8	 /* steps of 32 elements a weight row is prefetched ahead */
#define RUN_STEPS   32	 /* K steps of one row block before the next (amx_block4) */
#define PF_BYTES    8192 /* how far ahead amx_block4 prefetches a weight row */
#define SCATTER_MAX 1	 /* tokens up to this many go to their B columns by vpscatterdd */

struct amx_cfg {
	uint8_t palette;
	uint8_t start_row;
	uint8_t reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};

/*
 * Tiles 0-3 C (m rows x n 32-bit columns), 4-5 A (m rows x 64 bytes),
 * 6-7 B (16 rows x n 32-bit columns), loaded when this thread's is not
 * that already. bf16 takes n = 16; the quantized kernels n = the tokens
 * of a group rounded up to 4, 8 or 16 (kern_amx_q.c).
 */
static __thread uint32_t amx_cfg_key;

void moem_cpu_amx_config(uint32_t m, uint32_t n)
{
	struct amx_cfg c;

	if (amx_cfg_key == (m | n << 8))
		return;
	amx_cfg_key = m | n << 8;
	memset(&c, 0, sizeof(c));
	c.palette = 1;
	for (int i = 0; i < 8; i++) {
		c.colsb[i] = i == 4 || i == 5 ? 64 : (uint16_t)(4 * n);
		c.rows[i] = i < 6 ? (uint8_t)m : 16;
	}
	/*
	 * Not _tile_loadconfig(): GCC 12's asm names only the first 8 bytes
	 * of the configuration as its input, so the compiler may drop or
	 * sink the stores of the rest past LDTILECFG, which then faults
	 * (#GP) on garbage column widths.
	 */
	__asm__ volatile("ldtilecfg %0" ::"m"(c));
}

/*
 * The B tiles of n <= 16 tokens: tile s (k = 32 s .. 32 s + 31) at
 * vb + 256 s dwords, row j the pair k = 32 s + 2 j of the 16 tokens,
 * zeros for the tokens past n, or, if scatter (a lone token), those
 * columns left as they are.
 */
static void vnni_build(const uint16_t *xb, const uint32_t *tok, uint32_t n, uint32_t K,
		       uint32_t *vb, bool scatter)
{
	const uint16_t *xr[16];

	for (uint32_t t = 0; t < n; t++)
		xr[t] = xb + (size_t)tok[t] * K;
	if (scatter) {
		const __m512i idx = _mm512_mullo_epi32(
			_mm512_set1_epi32(16),
			_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));

		for (uint32_t s = 0; s < K / 32; s++)
			for (uint32_t t = 0; t < n; t++)
				_mm512_i32scatter_epi32(vb + 256 * s + t, idx,
							_mm512_loadu_si512(xr[t] + 32 * s), 4);
		return;
	}
	for (uint32_t s = 0; s < K / 32; s++) {
		__m512i r[16];

		for (uint32_t t = 0; t < 16; t++)
			r[t] = t < n ? _mm512_loadu_si512(xr[t] + 32 * s) : _mm512_setzero_si512();
		tr16(r);
#pragma GCC unroll 16
		for (int j = 0; j < 16; j++)
			_mm512_storeu_si512(vb + 256 * s + 16 * j, r[j]);
	}
}

void moem_cpu_amx_pack(const uint16_t *xb, const uint32_t *map, uint32_t n, uint32_t K,
		       uint32_t *vnni, uint32_t c)
{
	uint32_t id[16];

	if (!map) {
		for (uint32_t t = 0; t < n; t++)
			id[t] = c + t;
		map = id;
	}
	vnni_build(xb, map, n, K, vnni + (size_t)c * K / 2, false);
}

/*
 * Where the B tiles of n <= 16 tokens come from: in place in x's VNNI
 * form if the tokens are one group of rows there (consecutive, the first
 * a multiple of 16), else laid out in vb, from the VNNI form or the bf16
 * rows. The same values either way, so the same bits.
 */
static const uint32_t *b_tiles(const struct cpu_act *x, const uint32_t *tok, uint32_t n, uint32_t K,
			       uint32_t *vb)
{
	const uint32_t *v = x->v[CPU_ACT_VNNI];
	uint32_t t = 1;

	if (!v) {
		vnni_build(x->v[CPU_ACT_BF16], tok, n, K, vb, n <= SCATTER_MAX);
		return vb;
	}
	while (t < n && tok[t] == tok[0] + t)
		t++;
	if (t == n && tok[0] % 16 == 0)
		return v + (size_t)tok[0] * K / 2;
	for (uint32_t p = 0; p < K / 2; p++)
		for (t = 0; t < 16; t++)
			vb[16 * p + t] =
				t < n ? v[(size_t)(tok[t] / 16) * 8 * K + 16 * p + tok[t] % 16] : 0;
	return vb;
}

/*
 * NA row blocks (A tiles 4, 5 from rows s0, s1) x NB token tiles (B tiles
 * 6, 7 from vb0, vb1) into C tiles 0 (s0, vb0), 1 (s0, vb1), 2 (s1, vb0),
 * 3 (s1, vb1), K in steps of 32.
 */
INL void amx_block(const uint8_t *w0, const uint8_t *w1, size_t ldw, uint32_t m,
		   const uint32_t *vb0, const uint32_t *vb1, uint32_t K, const int NA, const int NB)
{
	_tile_zero(0);
	if (NB > 1)
		_tile_zero(1);
	if (NA > 1)
		_tile_zero(2);
	if (NA > 1 && NB > 1)
		_tile_zero(3);
	for (uint32_t s = 0; s < K / 32; s++) {
		/* the weight rows PF_DIST steps ahead: a tile load waits for all 16 lines */
		for (uint32_t r = 0; r < m; r++) {
			_mm_prefetch((const char *)w0 + r * ldw + 64 * (size_t)(s + PF_DIST),
				     _MM_HINT_T1);
			if (NA > 1)
				_mm_prefetch((const char *)w1 + r * ldw +
						     64 * (size_t)(s + PF_DIST),
					     _MM_HINT_T1);
		}
		_tile_loadd(4, w0 + 64 * (size_t)s, ldw);
		_tile_loadd(6, vb0 + 256 * (size_t)s, 64);
		if (NA > 1)
			_tile_loadd(5, w1 + 64 * (size_t)s, ldw);
		if (NB > 1)
			_tile_loadd(7, vb1 + 256 * (size_t)s, 64);
		_tile_dpbf16ps(0, 4, 6);
		if (NB > 1)
			_tile_dpbf16ps(1, 4, 7);
		if (NA > 1)
			_tile_dpbf16ps(2, 5, 6);
		if (NA > 1 && NB > 1)
			_tile_dpbf16ps(3, 5, 7);
	}
}

/*
 * K steps [s0, se) of one row block: weights w, A tile A, into C tile C,
 * B tile 6 from vb0. A macro: the tile numbers are spelled into the
 * instructions.
 */
#define ROW_RUN(C, A, w, s0, se)                                                                \
	for (uint32_t s_ = (s0); s_ < (se); s_++) {                                             \
		for (uint32_t r_ = 0; r_ < m; r_++)                                             \
			_mm_prefetch((const char *)(w) + r_ * ldw + 64 * (size_t)s_ + PF_BYTES, \
				     _MM_HINT_T0);                                              \
		_tile_loadd(6, vb0 + 256 * (size_t)s_, 64);                                     \
		_tile_loadd(A, (w) + 64 * (size_t)s_, ldw);                                     \
		_tile_dpbf16ps(C, A, 6);                                                        \
	}

/*
 * Four row blocks (A tiles 4, 5, 7, 4 from rows w[0..3]) x one token tile
 * (B tile 6) into C tiles 0-3, K in runs of RUN_STEPS steps: block 0's
 * run, then block 1's, 2's, 3's, then the next run. Each C tile still
 * takes its own steps in k order; long runs along 16 rows stream the
 * weights better than all 64 rows a line at a time (batch 1, one thread,
 * a 768 x 2048 matrix: 150 -> 130 us; avx512 110).
 */
static void amx_block4(const uint8_t *const *w, size_t ldw, uint32_t m, const uint32_t *vb0,
		       uint32_t K)
{
	_tile_zero(0);
	_tile_zero(1);
	_tile_zero(2);
	_tile_zero(3);
	for (uint32_t s0 = 0; s0 < K / 32; s0 += RUN_STEPS) {
		uint32_t se = s0 + RUN_STEPS < K / 32 ? s0 + RUN_STEPS : K / 32;

		ROW_RUN(0, 4, w[0], s0, se);
		ROW_RUN(1, 5, w[1], s0, se);
		ROW_RUN(2, 7, w[2], s0, se);
		ROW_RUN(3, 4, w[3], s0, se);
	}
}

static void amx_bf16(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0, uint32_t r1,
		     const struct cpu_act *x, const uint32_t *tok, uint32_t T, float *y,
		     uint32_t ldy, float *scratch)
{
	const uint8_t *W = mat + l->data_off;
	const uint32_t K = l->cols, m = l->rows < 16 ? l->rows : 16;
	const size_t ldw = l->row_bytes;
	uint32_t *sb0 = (uint32_t *)(void *)scratch, *sb1 = sb0 + 8 * (size_t)K;
	float c[4][16 * 16];

	if (r0 >= r1 || !T)
		return;
	moem_cpu_amx_config(m, 16);
	for (uint32_t i = 0; i < T; i += 32) {
		uint32_t n = T - i < 32 ? T - i : 32, n0 = n < 16 ? n : 16, n1 = n - n0;

		const uint32_t *vb0 = b_tiles(x, tok + i, n0, K, sb0), *vb1 = NULL;
		uint32_t b0 = r0;

		if (n1)
			vb1 = b_tiles(x, tok + i + 16, n1, K, sb1);

		for (; !n1 && b0 + 3 * m < r1; b0 += 4 * m) {
			const uint8_t *w[4];
			uint32_t st[4];

			for (uint32_t b = 0; b < 4; b++) {
				uint32_t bb = b0 + b * m;

				st[b] = bb + m > l->rows ? l->rows - m : bb;
				w[b] = W + st[b] * ldw;
			}
			amx_block4(w, ldw, m, vb0, K);
			for (uint32_t b = 0; b < 4; b++) {
				uint32_t bb = b0 + b * m;

				if (b == 0)
					_tile_stored(0, c[0], 64);
				else if (b == 1)
					_tile_stored(1, c[0], 64);
				else if (b == 2)
					_tile_stored(2, c[0], 64);
				else if (b == 3)
					_tile_stored(3, c[0], 64);
				c_store(c[0], st[b], bb, bb + m < r1 ? bb + m : r1, n0,
					y + (size_t)i * ldy, ldy, r0);
			}
		}
		for (; b0 < r1; b0 += 2 * m) {
			uint32_t b1 = b0 + m, s0 = b0 + m > l->rows ? l->rows - m : b0;
			uint32_t s1 = b1 + m > l->rows ? l->rows - m : b1;
			uint32_t e0 = b0 + m < r1 ? b0 + m : r1, e1 = b1 + m < r1 ? b1 + m : r1;
			const uint8_t *w0 = W + s0 * ldw, *w1 = W + s1 * ldw;
			float *yt = y + (size_t)i * ldy;

			if (b1 < r1) {
				if (n1)
					amx_block(w0, w1, ldw, m, vb0, vb1, K, 2, 2);
				else
					amx_block(w0, w1, ldw, m, vb0, vb1, K, 2, 1);
			} else {
				if (n1)
					amx_block(w0, w1, ldw, m, vb0, vb1, K, 1, 2);
				else
					amx_block(w0, w1, ldw, m, vb0, vb1, K, 1, 1);
			}
			_tile_stored(0, c[0], 64);
			c_store(c[0], s0, b0, e0, n0, yt, ldy, r0);
			if (n1) {
				_tile_stored(1, c[1], 64);
				c_store(c[1], s0, b0, e0, n1, yt + 16 * (size_t)ldy, ldy, r0);
			}
			if (b1 < r1) {
				_tile_stored(2, c[2], 64);
				c_store(c[2], s1, b1, e1, n0, yt, ldy, r0);
				if (n1) {
					_tile_stored(3, c[3], 64);
					c_store(c[3], s1, b1, e1, n1, yt + 16 * (size_t)ldy, ldy,
						r0);
				}
			}
		}
	}
}

const struct moem_cpu_kern moem_cpu_kern_amx = {
	.isa = MOEM_CPU_ISA_AMX,
	.rows = {amx_bf16, moem_cpu_amx_q8, moem_cpu_amx_q4, moem_cpu_amx_q2},
	.fmt = {CPU_ACT_BF16, CPU_ACT_QNAT, CPU_ACT_QEO2, CPU_ACT_QM4X},
};
