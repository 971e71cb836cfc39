/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Parameter blocks of the full-decode kernels (backend.h's "full-decode
 * ops"): the ABI between their launchers (runtime/compute/cuda/decode_ops.c)
 * and the kernels (cuda/{embed,matmul,rownorm,convert,rope,head_matmul,
 * kv_store,attention}.cu), laid out as kparams.h's blocks are.
 */
#ifndef MOEM_CUDA_DECODE_KPARAMS_H
#define MOEM_CUDA_DECODE_KPARAMS_H

#include <stdint.h>

struct moem_kembed_params {
	uint64_t ids, table, h;
	uint32_t B, H, V, pad;
};

/*
 * Dense projection: a warp per output row, MOEM_K_MM_ROWS rows per block,
 * blockIdx.y a chunk of MOEM_K_MM_TOKENS tokens. vec: x and w rows are
 * 16-byte aligned (128-bit loads).
 */
#define MOEM_K_MM_ROWS	  8
#define MOEM_K_MM_TOKENS  16
/* MOEM_K_MM_ROWS warps, as a literal: the kernel emulator reads
 * __launch_bounds__ arguments as section names, which take no expression. */
#define MOEM_K_MM_THREADS 256
struct moem_kmatmul_params {
	uint64_t x, w, y;
	uint32_t B, K, R, vec;
};

struct moem_krownorm_params {
	uint64_t x, w, y;
	uint32_t rows, n, x_stride, y_stride;
	float eps;
	uint32_t y_bf16;
};

struct moem_kconvert_params {
	uint64_t x, y;
	uint32_t rows, n, x_stride, y_stride;
	float clip;
	uint32_t y_bf16;
};

struct moem_krope_params {
	uint64_t x, pos, cos, sin;
	uint32_t T, n_heads, tok_stride, head_stride;
	uint32_t off, dim, pairs, n_pos;
};

struct moem_khead_mm_params {
	uint64_t x, w, y;
	uint64_t w_head_stride;
	uint32_t T, n_heads, in_dim, out_dim;
	uint32_t x_tok_stride, x_head_stride, y_tok_stride, y_head_stride;
	uint32_t w_row_stride, transpose;
};

/* The paged cache (struct moem_kv_geom). */
struct moem_kkv_geom {
	uint64_t pool, tables;
	uint32_t n_blocks, n_layers, block_tokens, entry;
	uint32_t layer, pad;
};

struct moem_kkv_store_params {
	struct moem_kkv_geom kv;
	uint64_t src, pos, tab;
	uint32_t T, src_stride;
};

/*
 * Split-KV attention (flash-decoding). A token attending n keys cuts them
 * into splits of S = MOEM_K_ATTN_SPLIT_MIN * ceil(n / (MIN * SPLITS))
 * keys (at most MOEM_K_ATTN_SPLITS splits), a function of n alone, so a
 * token's result does not depend on the batch it is part of. Pass 1
 * (moem_attn_part): a block per (token, kv head, chunk of hb query heads,
 * split) writes the split's running max, sum of exponentials and
 * unnormalised weighted sum of values; pass 2 (moem_attn_merge): a block
 * per (token, head) merges the splits in order.
 *
 * Partials of token t - t0, head h, split s: ml[((t - t0) * n_heads + h)
 * * SPLITS + s][2] (max, sum) and o[same][v_dim].
 */
#define MOEM_K_ATTN_THREADS   128
#define MOEM_K_ATTN_SPLITS    128
#define MOEM_K_ATTN_SPLIT_MIN 32
#define MOEM_K_ATTN_KTILE     32   /* keys per tile inside a split (a warp's width) */
#define MOEM_K_ATTN_ACC	      32   /* accumulators per thread: hb * v_dim <= 32 * 128 */
#define MOEM_K_ATTN_MAX_HB    8	   /* query heads per block */
#define MOEM_K_ATTN_MAX_DIM   4096 /* qk_dim, v_dim */

struct moem_kattn_params {
	struct moem_kkv_geom kv;
	uint64_t q, pos, tab, out;
	uint64_t ml, o; /* partials */
	uint32_t t0, T; /* tokens t0 .. t0 + T - 1 of the call */
	uint32_t n_heads, n_kv_heads, qk_dim, v_dim;
	uint32_t k_off, v_off, q_stride, window;
	uint32_t hb; /* query heads per block (pass 1) */
	float scale;
};

#endif /* MOEM_CUDA_DECODE_KPARAMS_H */
