/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The expert FFN's row kernels, one table per instruction set (isa.c
 * picks; ffn.c drives). A kernel computes, for rows r0..r1 of one weight
 * matrix and T activation rows,
 *
 *   y[i * ldy + (r - r0)] = sum_k W[r][k] * act[tok[i]][k]
 *
 * with one fixed order of operations per output element that depends on
 * nothing but K: not on T, not on which other rows or tokens share the
 * call, not on the thread. That is what keeps results bitwise the same
 * for any thread count, expert order or batch split.
 *
 * How a kernel tiles rows and tokens, blocks rows for the cache or
 * splits K into chunks is its own affair, as long as each output keeps
 * that one order (a partial sum stored and reloaded in fp32 is exact);
 * test_cpu_kern compares every output of a call, bit for bit, with the
 * same row and token computed alone and in calls of other shapes.
 *
 * scratch holds MOEM_CPU_SCRATCH_FLOATS(K) floats of the calling
 * worker's own (every caller sizes it so for every table): the scalar
 * kernels dequantize a row into it; the AVX2 quantized kernels keep
 * four rows' scales and mins there as floats, transposed to lanes, and
 * four tokens' block scales (<= K / 4 in all; kern_avx2.c); the
 * AVX-512 quantized ones 16 rows' scales and mins, their weights of up
 * to 8 blocks transposed, and 16 partial sums per token
 * (kern_avx512.c); the AVX2 and AVX-512 bf16 kernels use none;
 * the AMX bf16 kernel lays 32 tokens' activations out as its B tiles
 * there (32 x K bf16) when they are not in VNNI form already, and the
 * AMX int8 kernels 16 tokens' (16 x K bytes) with their scales.
 *
 * Activations are prepared once per call (ffn.c) in the form each
 * kernel reads, named by enum cpu_act_fmt:
 *   F32    float [rows][K]
 *   BF16   bf16  [rows][K] (the FFN input as is; act rounded to nearest)
 *   Q*     int8  [rows][K] quantized per token in blocks of 64:
 *          sx = amax / 127, q = rne(x / sx), block b's 64 values stored
 *          in the order the weight format unpacks to (below), plus
 *          qs[row][b] = sx and xs[row][b] = the float sum of the block's
 *          unquantized values (for the min term of q4/q2).
 *          QNAT natural order (q8 weights); QU8 natural order, q + 128 as
 *          u8 (the unsigned operand of vpdpbusd, with the weights signed);
 *          QEO evens then odds (q4: low nibbles, then high nibbles);
 *          QEO2 the same in pairs of blocks, the pair's evens (block b's,
 *          then b + 1's) then its odds, a last odd block as QEO;
 *          QM4 element 4j+i at i * 16 + j (q2: bit pair i of byte j);
 *          QM4X the same in groups of 4 blocks, bit pair i of the group's
 *          block L at i * 64 + L * 16 + j (one 64-byte load of q2 weights
 *          shifted by 2i is that vector's weight operand; on AVX2 each
 *          32-byte half, blocks 0-1 and 2-3), the blocks after the last
 *          full group as QM4.
 *   VNNI   uint32 [rows / 16][K / 2][16] (rows rounded up to 16): the
 *          BF16 values in pairs, row r's pair (2p, 2p + 1) at
 *          (r / 16) * 8 K + 16 p + r % 16; the AMX kernel's B tiles for
 *          each group of 16 rows, loaded in place (1 KB a K step, as
 *          the kernel lays them out itself otherwise), so the FFN builds
 *          them once per stage rather than once per call of a row block.
 *          Only where the amx ISA passed isa.c's check (the packing is
 *          AVX-512); no table names it as what it reads: the amx one
 *          takes it instead of BF16 when it is there.
 *   QT     int8 [T / 16][K / 64][16][16 x 4 bytes] (T rounded up to 16):
 *          the amx table's q8/q4/q2 B tiles of a call's own tokens, in
 *          call order: block b of tokens 16 g .. 16 g + 15 at
 *          (16 g * K / 64 + b) * 1024, row j its dwords j (VNNI-4), the
 *          block's bytes in the order of the precision (q8 natural, q4
 *          QEO, q2 QM4), zeros past the tokens; made by
 *          moem_cpu_amxq_pack() from the table's format, once per FFN
 *          stage and expert, and set per call (the FFN's own cpu_act for
 *          the call): a call that has none builds its tiles itself.
 */
#ifndef MOEM_CPU_KERN_H
#define MOEM_CPU_KERN_H

#include <stddef.h>
#include <stdint.h>

#include <moem/backend.h>
#include <moem/half.h>
#include <moem/quant.h>

#define MOEM_CPU_QBLOCK		   64 /* activation quantization block */
/* The amx table's q8/q4/q2 take tiles (QT) for groups of this many tokens and more. */
#define MOEM_CPU_AMX_QMIN	   4
/* The floats of scratch a row kernel may use for rows of K elements. */
#define MOEM_CPU_SCRATCH_FLOATS(K) (16 * (size_t)(K))

enum cpu_act_fmt {
	CPU_ACT_F32 = 0,
	CPU_ACT_BF16,
	CPU_ACT_QNAT,
	CPU_ACT_QU8,
	CPU_ACT_QEO,
	CPU_ACT_QM4,
	CPU_ACT_VNNI,
	CPU_ACT_QM4X,
	CPU_ACT_QEO2,
	CPU_ACT_QT,
	CPU_ACT_NR
};

struct cpu_act {
	uint32_t K;
	const void *v[CPU_ACT_NR]; /* [rows][K] per format, NULL if not prepared */
	const float *qs;	   /* [rows][K / 64] block scales */
	const float *xs;	   /* [rows][K / 64] block sums */
	void *mem;		   /* what moem_cpu_prepare_act() allocated */
};

/*
 * Prepare rows x K fp32 values (K % 64 == 0) in the formats of the mask
 * fmts (1 << enum cpu_act_fmt), as the FFN does, into memory of its own
 * (moem_cpu_free_act()). For tests of single kernels. -ENOMEM.
 */
int moem_cpu_prepare_act(const float *x, uint32_t rows, uint32_t K, uint32_t fmts,
			 struct cpu_act *out);
void moem_cpu_free_act(struct cpu_act *a);

struct moem_tpool;
/* Bytes of memory moem_cpu_prepare_act_in() lays the formats out in. */
size_t moem_cpu_act_bytes(uint32_t rows, uint32_t K, uint32_t fmts);
/*
 * The same into mem (64-byte aligned, moem_cpu_act_bytes() long), the
 * rows spread over pool (NULL: this thread); x must outlive *out.
 */
void moem_cpu_prepare_act_in(struct moem_tpool *pool, const float *x, uint32_t rows, uint32_t K,
			     uint32_t fmts, void *mem, struct cpu_act *out);
/*
 * The VNNI group of rows c..c + 15 (c % 16 == 0) of an operand laid out
 * as above at vnni: row c + t from the bf16 row xb + map[t] * K (map
 * NULL: row c + t) for t < n, zeros for t in n..15 (kern_amx.c; only
 * after the amx ISA's check).
 */
void moem_cpu_amx_pack(const uint16_t *xb, const uint32_t *map, uint32_t n, uint32_t K,
		       uint32_t *vnni, uint32_t c);
/*
 * The QT group of a call's tokens c..c + 15 (c % 16 == 0) for precision
 * p (q8, q4, q2) at qt: token c + t from row map[t] of xq, in the amx
 * table's format for p (q8 QNAT, q4 QEO2, q2 QM4X; rows of K bytes), for
 * t < n, zeros for t in n..15 (kern_amx_q.c; only after the amx ISA's
 * check).
 */
void moem_cpu_amxq_pack(enum moem_prec p, const int8_t *xq, const uint32_t *map, uint32_t n,
			uint32_t K, uint8_t *qt, uint32_t c);

typedef void (*moem_cpu_rows_fn)(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0,
				 uint32_t r1, const struct cpu_act *x, const uint32_t *tok,
				 uint32_t T, float *y, uint32_t ldy, float *scratch);

struct moem_cpu_kern {
	enum moem_cpu_isa isa;
	moem_cpu_rows_fn rows[MOEM_PREC_NR];
	enum cpu_act_fmt fmt[MOEM_PREC_NR]; /* what rows[p] reads */
};

/* The tables (kern_*.c); the vector ones are only called after isa.c's check. */
extern const struct moem_cpu_kern moem_cpu_kern_scalar;
extern const struct moem_cpu_kern moem_cpu_kern_avx2;
extern const struct moem_cpu_kern moem_cpu_kern_avx512;
extern const struct moem_cpu_kern moem_cpu_kern_amx;
/* kern_avx512.c built against SIMDe's portable AVX-512 (unit tests only). */
extern const struct moem_cpu_kern moem_cpu_kern_avx512_emu;

/*
 * moem_cpu_block_stats()'s AVX-512 form, n <= 16 blocks, 16 values
 * stored to amax and sum (kern_avx512.c; the _emu one from its SIMDe
 * build, unit tests only).
 */
void moem_cpu_block_stats_avx512(const float *x, uint32_t blk, uint32_t n, float *amax, float *sum);
void moem_cpu_block_stats_avx512_emu(const float *x, uint32_t blk, uint32_t n, float *amax,
				     float *sum);

#endif /* MOEM_CPU_KERN_H */
