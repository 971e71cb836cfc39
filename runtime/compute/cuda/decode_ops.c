// SPDX-License-Identifier: GPL-2.0-only
/*
 * Host launchers of the full-decode kernels (backend.h; kernels in
 * cuda/{embed,matmul,matmul_q,rownorm,convert,rope,head_matmul,
 * kv_store,attention}.cu, parameter blocks in cuda/decode_kparams.h).
 * backend.c has checked sizes and pointers; what is left here are the
 * grids and the CUDA kernels' own limits (attention's head dimensions).
 * Grids keep gridDim.y <= 65535.
 */
#include <errno.h>

#include <moem/error.h>
#include <moem/util.h>

#include "cuda_int.h"

#define MAX_GRID_Y 65535u

/* The split-KV partials of one launch stay under this much scratch. */
#define ATTN_SCRATCH (64ull << 20)

static int launch(struct moem_backend *be, struct moem_stream *s, enum cuda_kernel k, uint32_t gx,
		  uint32_t gy, uint32_t block, uint32_t smem, void *params)
{
	struct cuda_backend *cb = cuda_of(be);
	int ret = moem_cuda_enter(cb);

	return ret ? ret : moem_cuda_launch(cb, k, gx, gy, block, smem, cuda_stream_of(s), params);
}

static uint32_t div_up(uint64_t a, uint32_t b)
{
	return (uint32_t)((a + b - 1) / b);
}

int moem_cuda_embed(struct moem_backend *be, struct moem_stream *s, const struct moem_embed_args *a)
{
	struct moem_kembed_params p = {
		.ids = a->ids, .table = a->table, .h = a->h, .B = a->B, .H = a->H, .V = a->V};

	return launch(be, s, K_EMBED, div_up(a->H, 256), a->B, 256, 0, &p);
}

/*
 * Quantized weights (moem_qmat_layout(prec, R, K), checked by
 * moem_op_matmul): moem_matmul_q8/q4/q2 on moem_matmul's grid, told the
 * layout's plane offsets so that kernel and layout cannot disagree.
 */
static int matmul_q(struct moem_backend *be, struct moem_stream *s,
		    const struct moem_matmul_args *a)
{
	struct moem_qmat_layout l;
	struct moem_kmatmul_q_params p;
	int ret = moem_qmat_layout(a->prec, a->R, a->K, &l);

	if (ret)
		return moem_err_prefix(-ret, "matmul");
	p = (struct moem_kmatmul_q_params){
		.x = a->x,
		.w = a->w,
		.y = a->y,
		.data_off = l.data_off,
		.scale_off = l.scale_off,
		.min_off = l.min_off,
		.B = a->B,
		.K = a->K,
		.R = a->R,
		/* data rows are whole 16-byte chunks, planes 256-byte aligned */
		.vec = !(a->x % 16) && !(a->w % 16),
		.row_bytes = l.row_bytes,
		.groups_per_row = l.groups_per_row,
	};
	return launch(be, s, K_MATMUL_Q8 + (a->prec - MOEM_PREC_Q8), div_up(a->R, MOEM_K_MM_ROWS),
		      div_up(a->B, MOEM_K_MM_TOKENS), MOEM_K_MM_THREADS, 0, &p);
}

int moem_cuda_matmul(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_matmul_args *a)
{
	struct moem_kmatmul_params p = {
		.x = a->x,
		.w = a->w,
		.y = a->y,
		.B = a->B,
		.K = a->K,
		.R = a->R,
		/* K % 8 == 0: every row is 16-byte aligned when the base is */
		.vec = !(a->x % 16) && !(a->w % 16),
	};

	if (a->prec != MOEM_PREC_BF16)
		return matmul_q(be, s, a);
	return launch(be, s, K_MATMUL, div_up(a->R, MOEM_K_MM_ROWS), div_up(a->B, MOEM_K_MM_TOKENS),
		      MOEM_K_MM_THREADS, 0, &p);
}

int moem_cuda_rownorm(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_rownorm_args *a)
{
	struct moem_krownorm_params p = {
		.x = a->x,
		.w = a->weight,
		.y = a->y,
		.rows = a->rows,
		.n = a->n,
		.x_stride = a->x_stride,
		.y_stride = a->y_stride,
		.eps = a->eps,
		.y_bf16 = a->y_bf16,
	};

	return launch(be, s, K_ROWNORM, a->rows, 1, 256, 0, &p);
}

int moem_cuda_convert(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_convert_args *a)
{
	struct moem_kconvert_params p = {
		.x = a->x,
		.y = a->y,
		.rows = a->rows,
		.n = a->n,
		.x_stride = a->x_stride,
		.y_stride = a->y_stride,
		.clip = a->clip,
		.y_bf16 = a->y_bf16,
	};

	/* In place with other strides: rows in order (convert.cu). */
	if (a->x == a->y && a->x_stride != a->y_stride)
		return launch(be, s, K_CONVERT_SEQ, 1, 1, 256, 0, &p);
	return launch(be, s, K_CONVERT, div_up(a->n, 256), moem_min(a->rows, MAX_GRID_Y), 256, 0,
		      &p);
}

int moem_cuda_rope(struct moem_backend *be, struct moem_stream *s, const struct moem_rope_args *a)
{
	struct moem_krope_params p = {
		.x = a->x,
		.pos = a->pos,
		.cos = a->cos,
		.sin = a->sin,
		.T = a->T,
		.n_heads = a->n_heads,
		.tok_stride = a->tok_stride,
		.head_stride = a->head_stride,
		.off = a->off,
		.dim = a->dim,
		.pairs = a->pairs,
		.n_pos = a->n_pos,
	};

	return launch(be, s, K_ROPE, div_up((uint64_t)a->n_heads * (a->dim / 2), 256), a->T, 256, 0,
		      &p);
}

int moem_cuda_head_matmul(struct moem_backend *be, struct moem_stream *s,
			  const struct moem_head_matmul_args *a)
{
	struct moem_khead_mm_params p = {
		.x = a->x,
		.w = a->w,
		.y = a->y,
		.w_head_stride = a->w_head_stride,
		.T = a->T,
		.n_heads = a->n_heads,
		.in_dim = a->in_dim,
		.out_dim = a->out_dim,
		.x_tok_stride = a->x_tok_stride,
		.x_head_stride = a->x_head_stride,
		.y_tok_stride = a->y_tok_stride,
		.y_head_stride = a->y_head_stride,
		.w_row_stride = a->w_row_stride,
		.transpose = a->transpose,
	};

	return launch(be, s, K_HEAD_MM, a->n_heads * div_up(a->out_dim, 128), a->T, 128, 0, &p);
}

static struct moem_kkv_geom kgeom(const struct moem_kv_geom *g)
{
	struct moem_kkv_geom k = {
		.pool = g->pool,
		.tables = g->tables,
		.n_blocks = g->n_blocks,
		.n_layers = g->n_layers,
		.block_tokens = g->block_tokens,
		.entry = g->entry,
		.layer = g->layer,
	};

	return k;
}

int moem_cuda_kv_store(struct moem_backend *be, struct moem_stream *s,
		       const struct moem_kv_store_args *a)
{
	struct moem_kkv_store_params p = {
		.kv = kgeom(&a->kv),
		.src = a->src,
		.pos = a->pos,
		.tab = a->tab,
		.T = a->T,
		.src_stride = a->src_stride,
	};

	return launch(be, s, K_KV_STORE, div_up(a->kv.entry, 256), a->T, 256, 0, &p);
}

/*
 * Split-KV attention (cuda/attention.cu): the tokens go in chunks whose
 * partials fit ATTN_SCRATCH; per chunk one launch of each pass. The
 * split layout depends on each token's own context only, so chunking
 * changes no bit.
 */
int moem_cuda_attention(struct moem_backend *be, struct moem_stream *s,
			const struct moem_attn_args *a)
{
	struct cuda_backend *cb = cuda_of(be);
	struct cuda_stream *cs = cuda_stream_of(s);
	const uint32_t gsz = a->n_heads / a->n_kv_heads;
	const uint32_t dmax = moem_max(a->qk_dim, a->v_dim);
	uint64_t per_tok, ml_bytes;
	uint32_t hb, nhc, tc;
	CUdeviceptr part;
	int ret;

	if (dmax > MOEM_K_ATTN_MAX_DIM)
		return moem_errf(EINVAL,
				 "attention: head dimensions %u (qk) and %u (v); the CUDA kernel "
				 "takes at most %u",
				 a->qk_dim, a->v_dim, MOEM_K_ATTN_MAX_DIM);
	/* hb * v_dim values per block in 128 threads' accumulators; hb queries in smem */
	hb = moem_min(moem_min((uint32_t)MOEM_K_ATTN_MAX_HB, gsz),
		      MOEM_K_ATTN_ACC * MOEM_K_ATTN_THREADS / dmax);
	nhc = div_up(gsz, hb);
	per_tok = (uint64_t)a->n_heads * MOEM_K_ATTN_SPLITS * (a->v_dim + 2) * sizeof(float);
	tc = (uint32_t)moem_max(moem_min(ATTN_SCRATCH / per_tok, (uint64_t)a->T), 1);
	ml_bytes = moem_align_up((uint64_t)tc * a->n_heads * MOEM_K_ATTN_SPLITS * 2 * 4, 256);
	ret = moem_cuda_enter(cb);
	if (!ret)
		ret = moem_cuda_scratch(cb, cs, ml_bytes + (uint64_t)tc * per_tok, &part);
	for (uint32_t t0 = 0; !ret && t0 < a->T; t0 += tc) {
		const uint32_t n = moem_min(tc, a->T - t0);
		struct moem_kattn_params p = {
			.kv = kgeom(&a->kv),
			.q = a->q,
			.pos = a->pos,
			.tab = a->tab,
			.out = a->out,
			.ml = part,
			.o = part + ml_bytes,
			.t0 = t0,
			.T = n,
			.n_heads = a->n_heads,
			.n_kv_heads = a->n_kv_heads,
			.qk_dim = a->qk_dim,
			.v_dim = a->v_dim,
			.k_off = a->k_off,
			.v_off = a->v_off,
			.q_stride = a->q_stride,
			.window = a->window,
			.hb = hb,
			.scale = a->scale,
		};

		ret = moem_cuda_launch(cb, K_ATTN_PART, n * a->n_kv_heads * nhc, MOEM_K_ATTN_SPLITS,
				       MOEM_K_ATTN_THREADS, hb * a->qk_dim * 4, cs, &p);
		if (!ret)
			ret = moem_cuda_launch(cb, K_ATTN_MERGE, n * a->n_heads, 1,
					       MOEM_K_ATTN_THREADS, 0, cs, &p);
	}
	return ret;
}
