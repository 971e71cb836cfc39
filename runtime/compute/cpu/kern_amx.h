/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the amx table's two files share (kern_amx.c: bf16 and the tile
 * configuration; kern_amx_q.c: q8, q4, q2). Both are built for AMX and
 * AVX-512 and only called after isa.c's check of the amx ISA. Included
 * after <immintrin.h> and the file's INL.
 */
#ifndef MOEM_CPU_KERN_AMX_H
#define MOEM_CPU_KERN_AMX_H

#include "kern.h"
#include "kern_tr16.h"

/*
 * Load this thread's tile configuration for C and A tiles of m rows and
 * C and B tiles of n 32-bit columns (A tiles 64 bytes wide, B tiles 16
 * rows), unless it is that already. One thread-local key for both
 * files: the tiles are the thread's, whichever kernel used them last.
 */
void moem_cpu_amx_config(uint32_t m, uint32_t n);

/* The amx table's quantized row kernels (kern_amx_q.c). */
void moem_cpu_amx_q8(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0, uint32_t r1,
		     const struct cpu_act *x, const uint32_t *tok, uint32_t T, float *y,
		     uint32_t ldy, float *scratch);
void moem_cpu_amx_q4(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0, uint32_t r1,
		     const struct cpu_act *x, const uint32_t *tok, uint32_t T, float *y,
		     uint32_t ldy, float *scratch);
void moem_cpu_amx_q2(const struct moem_qmat_layout *l, const uint8_t *mat, uint32_t r0, uint32_t r1,
		     const struct cpu_act *x, const uint32_t *tok, uint32_t T, float *y,
		     uint32_t ldy, float *scratch);

/*
 * Rows [b, e) of the C tile of rows from start, tokens [0, n), to y (token
 * t at y + t * ldy). From 4 tokens the tile is transposed in registers
 * and each token's rows stored under a mask (rows outside [b, e) are not
 * touched); fewer go element by element. Moves only: the same bits.
 */
static inline void c_store(const float *c, uint32_t start, uint32_t b, uint32_t e, uint32_t n,
			   float *y, uint32_t ldy, uint32_t r0)
{
	if (n >= 4) {
		__mmask16 k =
			(__mmask16)((((1u << (e - start)) - 1) >> (b - start)) << (b - start));
		__m512i v[16];

		for (int i = 0; i < 16; i++)
			v[i] = _mm512_loadu_si512(c + 16 * i);
		tr16(v);
		for (uint32_t t = 0; t < n; t++)
			_mm512_mask_storeu_epi32(y + (ptrdiff_t)t * ldy + ((ptrdiff_t)start - r0),
						 k, v[t]);
		return;
	}
	for (uint32_t t = 0; t < n; t++)
		for (uint32_t r = b; r < e; r++)
			y[(size_t)t * ldy + (r - r0)] = c[(r - start) * 16 + t];
}

#endif /* MOEM_CPU_KERN_AMX_H */
