/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Kernel parameter blocks: the ABI between the host launchers
 * (runtime/compute/cuda/, C) and the kernels (the .cu files in cuda/,
 * CUDA C++). Plain fixed-width fields with explicit padding so both
 * compilers lay them out identically; every kernel takes one of these by
 * value.
 *
 * Kernels are extern "C" with the stable names listed in
 * runtime/compute/cuda/kernels.c.
 */
#ifndef MOEM_CUDA_KPARAMS_H
#define MOEM_CUDA_KPARAMS_H

#include <stdint.h>

/* The FFN/GEMM kernels' fixed block: 4 warps. */
#define MOEM_K_THREADS 128
/* Tokens per n-tile (mma n = 8) and the largest n-tile count (64 tokens). */
#define MOEM_K_NTILE   8
#define MOEM_K_MAX_NT  8

/* One weight matrix in quant.h layout: where its scale/min planes are. */
struct moem_kq_mat {
	uint64_t scale_off; /* from the matrix start; 0 for bf16 */
	uint64_t min_off;   /* 0 unless asymmetric */
	uint32_t row_bytes;
	uint32_t groups_per_row;
};

/* One expert of a grouped FFN launch. */
struct moem_kffn_desc {
	uint64_t blob;
	uint32_t assign_off; /* its first entry in the assignment array */
	uint32_t n;	     /* tokens, 1..64 */
	uint32_t act_off;    /* its first row of the activation scratch */
	uint32_t pad;
};

/*
 * A grouped FFN launch: blockIdx.y picks desc[y]; all experts share one
 * precision and the n-tile count of the kernel variant.
 */
struct moem_kffn_params {
	uint64_t desc;	     /* struct moem_kffn_desc[gridDim.y] */
	uint64_t assign;     /* u32: token | slot << 16 */
	uint64_t x;	     /* bf16 [B][H] */
	uint64_t act;	     /* f32 [rows][I] */
	uint64_t out;	     /* f32 [B][n_slots][H] */
	uint64_t mat_off[3]; /* gate, up, down inside a blob */
	struct moem_kq_mat mat[3];
	uint32_t H, I, n_slots, pad;
};

/*
 * Where an expert's weights are for this step (the device-resident
 * residency table, one row of N per MoE layer): blob 0 if it is in no
 * tier the device can read.
 */
struct moem_kres_entry {
	uint64_t blob;
	uint32_t prec; /* enum moem_prec */
	uint32_t pad;
};

/*
 * The device-side FFN plan (cuda/ffn_plan.cu): from one layer's routing
 * (ids, cnt) and residency table, the grouped FFN's descriptors bucketed
 * as the host plan buckets them, by precision and n-tile class:
 * desc[(prec * 4 + class) * D + i] for i < D, the unused ones with n = 0
 * (the FFN kernels skip them; only buckets of prec_mask and classes below
 * n_class are written), and the compact assignment list in the host
 * plan's order (expert ascending, then token, then slot). work: u32[N]
 * scratch. status: set to 1 + the first routed expert with no blob
 * (never by a correct host, which builds the table of every expert).
 */
#define MOEM_K_PLAN_THREADS 32
struct moem_kffn_plan_params {
	uint64_t ids, cnt, table, desc, assign, work, status;
	uint32_t B, k, N, D;
	uint32_t n_class, prec_mask;
};

/* Router GEMM: out[n][r] = W[r][:] . x[n][:] for r < rows, n < n_tok. */
struct moem_kgemm_params {
	uint64_t w;   /* bf16 [rows][K] */
	uint64_t x;   /* bf16 [n_tok][K] */
	uint64_t out; /* f32, row n at out + n * out_stride */
	uint32_t rows, K, n_tok, out_stride;
};

struct moem_krmsnorm_params {
	uint64_t x, w, y;
	uint32_t B, H;
	float eps;
	uint32_t pad;
};

/* route.h semantics; one block of MOEM_K_ROUTE_THREADS threads. */
#define MOEM_K_ROUTE_THREADS 1024
struct moem_kroute_params {
	uint64_t logits, pad, resident, ids, w, cnt;
	uint32_t mode, B, N, k;
	uint32_t k0, beta, norm_topk_prob, n_group; /* n_group: route.h, 0 or 1 = none */
	float alpha, routed_scaling;
	uint32_t topk_group, pad0;
};

struct moem_kcombine_params {
	uint64_t h, routed, w, cnt, shared;
	uint32_t B, H, k, n_shared;
};

struct moem_khist_params {
	uint64_t ids, cnt, counts; /* counts already offset to the layer's row */
	uint32_t B, k, N, pad;
};

struct moem_kquant_params {
	uint64_t src, dst, status;
	uint64_t scale_off, min_off;
	uint32_t rows, cols, row_bytes, groups_per_row;
	uint32_t row_base, pad;
};

/*
 * Staging geometry of the FFN/GEMM kernels (cuda/gemm.cuh), shared with
 * the host so it can pass the dynamic shared memory size: KC columns of
 * the n-tile's activations per stage, rows padded by 64 bytes against
 * bank conflicts, two planes (hi, lo) when the B operand is fp32 split
 * into two bf16, plus per-group sums for asymmetric formats.
 */
#if defined(__CUDACC__)
#define MOEM_KFN __host__ __device__ static inline constexpr
#elif defined(__cplusplus)
#define MOEM_KFN static inline constexpr
#else
#define MOEM_KFN static inline
#endif

MOEM_KFN uint32_t moem_k_kc(uint32_t nt, uint32_t hilo)
{
	return 2048u / nt / (hilo ? 2u : 1u);
}

MOEM_KFN uint32_t moem_k_rowstride(uint32_t nt, uint32_t hilo)
{
	return moem_k_kc(nt, hilo) * 2u + 64u;
}

/*
 * FFN row tiling (cuda/ffn.cuh): a block covers 16 * RT rows, its 4 warps
 * splitting K 4 / RT ways. The plain kernel of n-tile class c (NT = 1 << c)
 * has RT = min(NT, 4); classes 0 and 1 also have variants _r<RT> with
 * moem_k_ffn_var_rt(c, v), v = 0, 1, in that order.
 */
MOEM_KFN uint32_t moem_k_ffn_rt_plain(uint32_t cls)
{
	return cls < 2 ? 1u << cls : 4u;
}

MOEM_KFN uint32_t moem_k_ffn_var_rt(uint32_t cls, uint32_t v)
{
	return v ? 4u : cls ? 1u : 2u;
}

/* prec: 0 bf16, 1 q8, 2 q4, 3 q2 (enum moem_prec). */
MOEM_KFN uint32_t moem_k_smem(uint32_t prec, uint32_t nt, uint32_t hilo)
{
	return (hilo ? 2u : 1u) * nt * MOEM_K_NTILE * moem_k_rowstride(nt, hilo) +
	       (prec >= 2
			? nt * MOEM_K_NTILE * (moem_k_kc(nt, hilo) / (prec == 3 ? 64u : 128u)) * 4u
			: 0u);
}

#endif /* MOEM_CUDA_KPARAMS_H */
