// SPDX-License-Identifier: GPL-2.0-only
/*
 * Argument checks of the full-decode ops (backend.h) before they go
 * through the ops table; a backend without a kernel for one says so.
 */
#include <errno.h>
#include <math.h>

#include <moem/error.h>

#include "backend_int.h"

#define MAX_ROWS (1u << 24)

static int alive(struct moem_backend *be)
{
	if (moem_unlikely(moem_backend_fatal(be)))
		return moem_errf(EIO, "%s backend: unusable after a fatal device error (%s)",
				 be->ops->name, moem_backend_fatal_msg(be));
	return 0;
}

static int have(struct moem_backend *be, const void *fn, const char *op)
{
	int ret = alive(be);

	if (ret)
		return ret;
	if (!fn)
		return moem_errf(EOPNOTSUPP, "%s backend: no kernel for the %s op yet",
				 be->ops->name, op);
	return 0;
}

static int need(moem_dptr p, const char *op, const char *what)
{
	if (!p)
		return moem_errf(EINVAL, "%s: %s is a null device pointer", op, what);
	return 0;
}

static int range(uint64_t v, uint64_t lo, uint64_t hi, const char *op, const char *what)
{
	if (v < lo || v > hi)
		return moem_errf(EINVAL, "%s: %s = %llu, want %llu..%llu", op, what,
				 (unsigned long long)v, (unsigned long long)lo,
				 (unsigned long long)hi);
	return 0;
}

static struct moem_stream *strm(struct moem_backend *be, struct moem_stream *s)
{
	return s ? s : be->dflt;
}

int moem_op_embed(struct moem_backend *be, struct moem_stream *s, const struct moem_embed_args *a)
{
	int ret;

	if ((ret = have(be, be->ops->embed, "embed")) ||
	    (ret = range(a->B, 1, MOEM_BE_MAX_BATCH, "embed", "B")) ||
	    (ret = range(a->H, 1, MOEM_BE_MAX_HIDDEN, "embed", "H")) ||
	    (ret = range(a->V, 1, MAX_ROWS, "embed", "V")) ||
	    (ret = need(a->ids, "embed", "ids")) || (ret = need(a->table, "embed", "table")) ||
	    (ret = need(a->h, "embed", "h")))
		return ret;
	return be->ops->embed(be, strm(be, s), a);
}

int moem_op_matmul(struct moem_backend *be, struct moem_stream *s, const struct moem_matmul_args *a)
{
	int ret;

	if ((ret = have(be, be->ops->matmul, "matmul")) ||
	    (ret = range(a->B, 1, MOEM_BE_MAX_BATCH, "matmul", "B")) ||
	    (ret = range(a->K, 8, 1u << 20, "matmul", "K")) ||
	    (ret = range(a->R, 1, MAX_ROWS, "matmul", "R")) || (ret = need(a->x, "matmul", "x")) ||
	    (ret = need(a->w, "matmul", "w")) || (ret = need(a->y, "matmul", "y")))
		return ret;
	if (a->K % 8)
		return moem_errf(EINVAL, "matmul: K = %u is not a multiple of 8", a->K);
	if ((unsigned int)a->prec >= MOEM_PREC_NR)
		return moem_errf(EINVAL, "matmul: no precision %d", (int)a->prec);
	if (a->prec != MOEM_PREC_BF16) {
		struct moem_qmat_layout l;

		/* K must be a whole number of the precision's groups */
		ret = moem_qmat_layout(a->prec, a->R, a->K, &l);
		if (ret)
			return moem_err_prefix(-ret, "matmul");
	}
	return be->ops->matmul(be, strm(be, s), a);
}

int moem_op_rownorm(struct moem_backend *be, struct moem_stream *s,
		    const struct moem_rownorm_args *a)
{
	int ret;

	if ((ret = have(be, be->ops->rownorm, "rownorm")) ||
	    (ret = range(a->rows, 1, MAX_ROWS, "rownorm", "rows")) ||
	    (ret = range(a->n, 1, 1u << 20, "rownorm", "n")) ||
	    (ret = range(a->x_stride, a->n, 1u << 24, "rownorm", "x_stride")) ||
	    (ret = range(a->y_stride, a->n, 1u << 24, "rownorm", "y_stride")) ||
	    (ret = need(a->x, "rownorm", "x")) || (ret = need(a->weight, "rownorm", "weight")) ||
	    (ret = need(a->y, "rownorm", "y")))
		return ret;
	if (!isfinite(a->eps) || a->eps < 0)
		return moem_errf(EINVAL, "rownorm: eps %g", (double)a->eps);
	if (a->y_bf16 && a->y == a->x)
		return moem_errf(EINVAL, "rownorm: a bf16 output cannot overwrite its f32 input");
	return be->ops->rownorm(be, strm(be, s), a);
}

int moem_op_convert(struct moem_backend *be, struct moem_stream *s,
		    const struct moem_convert_args *a)
{
	int ret;

	if ((ret = have(be, be->ops->convert, "convert")) ||
	    (ret = range(a->rows, 1, MAX_ROWS, "convert", "rows")) ||
	    (ret = range(a->n, 1, 1u << 24, "convert", "n")) ||
	    (ret = range(a->x_stride, a->n, 1u << 26, "convert", "x_stride")) ||
	    (ret = range(a->y_stride, a->n, 1u << 26, "convert", "y_stride")) ||
	    (ret = need(a->x, "convert", "x")) || (ret = need(a->y, "convert", "y")))
		return ret;
	if (!(a->clip >= 0) || isinf(a->clip))
		return moem_errf(EINVAL, "convert: clip %g", (double)a->clip);
	if (a->y_bf16 && a->y == a->x)
		return moem_errf(EINVAL, "convert: bf16 output over its f32 input");
	return be->ops->convert(be, strm(be, s), a);
}

int moem_op_rope(struct moem_backend *be, struct moem_stream *s, const struct moem_rope_args *a)
{
	int ret;

	if ((ret = have(be, be->ops->rope, "rope")) ||
	    (ret = range(a->T, 1, MOEM_BE_MAX_BATCH, "rope", "T")) ||
	    (ret = range(a->n_heads, 1, 4096, "rope", "n_heads")) ||
	    (ret = range(a->dim, 2, 4096, "rope", "dim")) ||
	    (ret = range(a->n_pos, 1, MAX_ROWS, "rope", "n_pos")) ||
	    (ret = need(a->x, "rope", "x")) || (ret = need(a->pos, "rope", "pos")) ||
	    (ret = need(a->cos, "rope", "cos")) || (ret = need(a->sin, "rope", "sin")))
		return ret;
	if (a->dim % 2 || (uint64_t)a->off + a->dim > a->head_stride ||
	    (uint64_t)a->head_stride * a->n_heads > a->tok_stride)
		return moem_errf(EINVAL,
				 "rope: dim %u at %u does not fit heads of %u, tokens of %u",
				 a->dim, a->off, a->head_stride, a->tok_stride);
	return be->ops->rope(be, strm(be, s), a);
}

int moem_op_head_matmul(struct moem_backend *be, struct moem_stream *s,
			const struct moem_head_matmul_args *a)
{
	uint64_t wrows;
	int ret;

	if ((ret = have(be, be->ops->head_matmul, "head_matmul")) ||
	    (ret = range(a->T, 1, MOEM_BE_MAX_BATCH, "head_matmul", "T")) ||
	    (ret = range(a->n_heads, 1, 4096, "head_matmul", "n_heads")) ||
	    (ret = range(a->in_dim, 1, 65536, "head_matmul", "in_dim")) ||
	    (ret = range(a->out_dim, 1, 65536, "head_matmul", "out_dim")) ||
	    (ret = need(a->x, "head_matmul", "x")) || (ret = need(a->w, "head_matmul", "w")) ||
	    (ret = need(a->y, "head_matmul", "y")))
		return ret;
	wrows = a->transpose ? a->in_dim : a->out_dim;
	if (a->w_row_stride < (a->transpose ? a->out_dim : a->in_dim) ||
	    (a->n_heads > 1 && a->w_head_stride < wrows * a->w_row_stride))
		return moem_errf(EINVAL, "head_matmul: weight strides too small");
	return be->ops->head_matmul(be, strm(be, s), a);
}

static int check_geom(const struct moem_kv_geom *g, const char *op)
{
	int ret;

	if ((ret = need(g->pool, op, "pool")) || (ret = need(g->tables, op, "tables")) ||
	    (ret = range(g->n_blocks, 1, 1u << 30, op, "n_blocks")) ||
	    (ret = range(g->n_layers, 1, 4096, op, "n_layers")) ||
	    (ret = range(g->block_tokens, 1, 1024, op, "block_tokens")) ||
	    (ret = range(g->entry, 1, 1u << 20, op, "entry")))
		return ret;
	if (g->layer >= g->n_layers)
		return moem_errf(EINVAL, "%s: layer %u of %u", op, g->layer, g->n_layers);
	return 0;
}

int moem_op_kv_store(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_kv_store_args *a)
{
	int ret;

	if ((ret = have(be, be->ops->kv_store, "kv_store")) ||
	    (ret = check_geom(&a->kv, "kv_store")) ||
	    (ret = range(a->T, 1, MOEM_BE_MAX_BATCH, "kv_store", "T")) ||
	    (ret = range(a->src_stride, a->kv.entry, 1u << 24, "kv_store", "src_stride")) ||
	    (ret = need(a->src, "kv_store", "src")) || (ret = need(a->pos, "kv_store", "pos")) ||
	    (ret = need(a->tab, "kv_store", "tab")))
		return ret;
	return be->ops->kv_store(be, strm(be, s), a);
}

int moem_op_attention(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_attn_args *a)
{
	int ret;

	if ((ret = have(be, be->ops->attention, "attention")) ||
	    (ret = check_geom(&a->kv, "attention")) ||
	    (ret = range(a->T, 1, MOEM_BE_MAX_BATCH, "attention", "T")) ||
	    (ret = range(a->n_heads, 1, 4096, "attention", "n_heads")) ||
	    (ret = range(a->n_kv_heads, 1, a->n_heads, "attention", "n_kv_heads")) ||
	    (ret = range(a->qk_dim, 1, 65536, "attention", "qk_dim")) ||
	    (ret = range(a->v_dim, 1, 65536, "attention", "v_dim")) ||
	    (ret = need(a->q, "attention", "q")) || (ret = need(a->pos, "attention", "pos")) ||
	    (ret = need(a->tab, "attention", "tab")) || (ret = need(a->out, "attention", "out")))
		return ret;
	if (a->n_heads % a->n_kv_heads)
		return moem_errf(EINVAL, "attention: %u kv heads do not divide %u heads",
				 a->n_kv_heads, a->n_heads);
	if ((uint64_t)a->k_off + (uint64_t)a->n_kv_heads * a->qk_dim > a->kv.entry ||
	    (uint64_t)a->v_off + (uint64_t)a->n_kv_heads * a->v_dim > a->kv.entry ||
	    (uint64_t)a->n_heads * a->qk_dim > a->q_stride)
		return moem_errf(EINVAL, "attention: heads do not fit the cache entry or q rows");
	if (!isfinite(a->scale) || a->scale <= 0)
		return moem_errf(EINVAL, "attention: scale %g", (double)a->scale);
	return be->ops->attention(be, strm(be, s), a);
}
