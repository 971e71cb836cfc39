// SPDX-License-Identifier: GPL-2.0-only
/*
 * Host launchers of the CUDA ops: parameter blocks (cuda/kparams.h),
 * grids, and the FFN's grouping of experts into launches. backend.c has
 * checked every argument already.
 */
#include <errno.h>
#include <string.h>

#include <moem/error.h>
#include <moem/util.h>

#include "cuda_int.h"

#define ENTER(cb)                              \
	do {                                   \
		int __r = moem_cuda_enter(cb); \
		if (__r)                       \
			return __r;            \
	} while (0)

/* n-tile class of a token count: 0..3 for 8, 16, 32, 64 tokens. */
static uint32_t nt_class(uint32_t n)
{
	return n <= 8 ? 0 : n <= 16 ? 1 : n <= 32 ? 2 : 3;
}

int moem_cuda_rmsnorm(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_rmsnorm_args *a)
{
	struct cuda_backend *cb = cuda_of(be);
	struct moem_krmsnorm_params p = {
		.x = a->x,
		.w = a->weight,
		.y = a->y,
		.B = a->B,
		.H = a->H,
		.eps = a->eps,
	};

	ENTER(cb);
	return moem_cuda_launch(cb, K_RMSNORM, a->B, 1, 256, 0, cuda_stream_of(s), &p);
}

/*
 * A router has few rows (one per expert): the tile engine's 16 rows a block
 * gave a 128-expert router 8 blocks, and on the H200 the router took 16.5
 * us for one token (Documentation/benchmarks/gpu.md, profile). When the
 * tile engine would not cover the SMs, the dense projection kernel (a warp
 * per row) computes it instead: 8 times the warps. Both are fp32 sums of
 * bf16 products (backends.md: the router within 5e-5 of the CPU's).
 */
static bool router_by_rows(const struct cuda_backend *cb, const struct moem_router_args *a)
{
	return (a->N + 15) / 16 < cb->base.info.sm_count && !(a->H % 8);
}

int moem_cuda_router(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_router_args *a)
{
	struct cuda_backend *cb = cuda_of(be);
	int ret = 0;

	ENTER(cb);
	if (router_by_rows(cb, a)) {
		struct moem_kmatmul_params p = {
			.x = a->x,
			.w = a->gate,
			.y = a->logits,
			.B = a->B,
			.K = a->H,
			.R = a->N,
			.vec = !(a->x % 16) && !(a->gate % 16),
		};

		return moem_cuda_launch(cb, K_MATMUL, (a->N + MOEM_K_MM_ROWS - 1) / MOEM_K_MM_ROWS,
					(a->B + MOEM_K_MM_TOKENS - 1) / MOEM_K_MM_TOKENS,
					MOEM_K_MM_THREADS, 0, cuda_stream_of(s), &p);
	}
	/* The tile engine takes up to 64 tokens: one launch per chunk. */
	for (uint32_t t0 = 0; !ret && t0 < a->B; t0 += MOEM_BE_MAX_TOKENS) {
		uint32_t n = moem_min(MOEM_BE_MAX_TOKENS, a->B - t0), c = nt_class(n);
		struct moem_kgemm_params p = {
			.w = a->gate,
			.x = a->x + (uint64_t)t0 * a->H * 2,
			.out = a->logits + (uint64_t)t0 * a->N * 4,
			.rows = a->N,
			.K = a->H,
			.n_tok = n,
			.out_stride = a->N,
		};

		ret = moem_cuda_launch(cb, K_ROUTER + c, (a->N + 15) / 16, 1, MOEM_K_THREADS,
				       moem_k_smem(0, 1u << c, 0), cuda_stream_of(s), &p);
	}
	return ret;
}

int moem_cuda_route(struct moem_backend *be, struct moem_stream *s, const struct moem_route_args *a)
{
	struct cuda_backend *cb = cuda_of(be);
	float scale;
	bool norm;
	struct moem_kroute_params p;

	/* The kernel implements "normalise, then scale": flatten the rule. */
	moem_route_rule_flat(&a->cfg, &norm, &scale);
	p = (struct moem_kroute_params){
		.logits = a->logits,
		.pad = a->pad,
		.resident = a->resident,
		.ids = a->ids,
		.w = a->w,
		.cnt = a->cnt,
		.mode = a->mode,
		.B = a->B,
		.N = a->cfg.n_experts,
		.k = a->cfg.top_k,
		.k0 = a->k0,
		.beta = a->lynx.beta,
		.norm_topk_prob = norm,
		/* the kernel takes n_group 0 for "no limit" */
		.n_group = moem_route_grouped(&a->cfg) ? a->cfg.n_group : 0,
		.alpha = a->lynx.alpha,
		.routed_scaling = scale,
		.topk_group = a->cfg.topk_group,
	};

	ENTER(cb);
	return moem_cuda_launch(cb, K_ROUTE, 1, 1, MOEM_K_ROUTE_THREADS, 0, cuda_stream_of(s), &p);
}

int moem_cuda_combine(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_combine_args *a)
{
	struct cuda_backend *cb = cuda_of(be);
	struct moem_kcombine_params p = {
		.h = a->h,
		.routed = a->routed,
		.w = a->w,
		.cnt = a->cnt,
		.shared = a->shared,
		.B = a->B,
		.H = a->H,
		.k = a->k,
		.n_shared = a->n_shared,
	};

	ENTER(cb);
	return moem_cuda_launch(cb, K_COMBINE, (a->H + 255) / 256, a->B, 256, 0, cuda_stream_of(s),
				&p);
}

int moem_cuda_histogram(struct moem_backend *be, struct moem_stream *s,
			const struct moem_hist_args *a)
{
	struct cuda_backend *cb = cuda_of(be);
	struct moem_khist_params p = {
		.ids = a->ids,
		.cnt = a->cnt,
		.counts = a->counts + (uint64_t)a->layer * a->N * 4,
		.B = a->B,
		.k = a->k,
		.N = a->N,
	};

	ENTER(cb);
	return moem_cuda_launch(cb, K_HIST, (a->B * a->k + 255) / 256, 1, 256, 0, cuda_stream_of(s),
				&p);
}

int moem_cuda_quantize(struct moem_backend *be, struct moem_stream *s,
		       const struct moem_quantize_args *a)
{
	struct cuda_backend *cb = cuda_of(be);
	struct cuda_stream *cs = cuda_stream_of(s);
	struct moem_qmat_layout l;
	struct moem_kquant_params p;
	int ret;

	ENTER(cb);
	moem_qmat_layout(a->prec, a->rows, a->cols, &l); /* checked by backend.c */
	/* moem_quantize() zeroes the whole matrix first: so do we. */
	ret = ck(cb, cb->api->cuMemsetD8Async(a->dst, 0, l.bytes, cs->s), "cuMemsetD8Async");
	if (ret)
		return ret;
	if (a->prec == MOEM_PREC_BF16)
		return ck(cb,
			  cb->api->cuMemcpyDtoDAsync(a->dst, a->src, (size_t)a->rows * a->cols * 2,
						     cs->s),
			  "cuMemcpyDtoDAsync");
	p = (struct moem_kquant_params){
		.src = a->src,
		.dst = a->dst,
		.status = a->status,
		.scale_off = l.scale_off,
		.min_off = l.min_off,
		.rows = a->rows,
		.cols = a->cols,
		.row_bytes = l.row_bytes,
		.groups_per_row = l.groups_per_row,
		.row_base = a->row_base,
	};
	return moem_cuda_launch(cb, K_QUANT_Q8 + (a->prec - MOEM_PREC_Q8), a->rows, 1, 256, 0, cs,
				&p);
}

/* The FFN parameters every launch of one call shares (desc is per launch). */
static void ffn_params(struct moem_kffn_params *p, enum moem_prec prec, uint32_t H, uint32_t I,
		       uint32_t n_slots, moem_dptr x, CUdeviceptr act, moem_dptr out)
{
	struct moem_expert_layout l;

	moem_expert_layout(prec, H, I, &l);
	memset(p, 0, sizeof(*p));
	p->x = x;
	p->act = act;
	p->out = out;
	for (int m = 0; m < MOEM_MAT_NR; m++) {
		p->mat_off[m] = l.mat_off[m];
		p->mat[m].scale_off = l.mat[m].scale_off;
		p->mat[m].min_off = l.mat[m].min_off;
		p->mat[m].row_bytes = l.mat[m].row_bytes;
		p->mat[m].groups_per_row = l.mat[m].groups_per_row;
	}
	p->H = H;
	p->I = I;
	p->n_slots = n_slots;
}

_Static_assert(sizeof(struct moem_res_entry) == sizeof(struct moem_kres_entry),
	       "backend.h and kparams.h agree on the residency table");

/*
 * The kernel of an FFN pass (0 gate/up, 1 down) for a precision and
 * n-tile class, and its row tiles per block (*rt): the plain kernel, or
 * for classes 0 and 1 the variant of the backend's tiling (ffn_rt).
 */
static enum cuda_kernel ffn_kernel(const struct cuda_backend *cb, uint32_t pass, uint32_t prec,
				   uint32_t c, uint32_t *rt)
{
	*rt = moem_k_ffn_rt_plain(c);
	if (c < 2 && cb->ffn_rt[prec][c] != *rt) {
		for (uint32_t v = 0; v < 2; v++)
			if (moem_k_ffn_var_rt(c, v) == cb->ffn_rt[prec][c]) {
				*rt = cb->ffn_rt[prec][c];
				return K_FFN_VAR + pass * 16 + prec * 4 + c * 2 + v;
			}
	}
	return (pass ? K_FFN_DOWN : K_FFN_GATEUP) + prec * 4 + c;
}

/*
 * Grouped FFN: experts are bucketed by (precision, n-tile class); each
 * bucket is one gate/up launch and one down launch (blockIdx.y = expert).
 * Descriptors and the compact assignment list go through the stream's
 * ring; activations through its scratch, expert e's rows at act_off[e].
 */
int moem_cuda_ffn(struct moem_backend *be, struct moem_stream *s, const struct moem_ffn_args *a)
{
	struct cuda_backend *cb = cuda_of(be);
	struct cuda_stream *cs = cuda_stream_of(s);
	uint32_t cnt[16] = {0}, first[16], total = 0, n_desc = a->n_experts;
	uint32_t desc_bytes, len, off, act_off = 0, fill[16], afill = 0;
	struct moem_kffn_desc *desc;
	uint32_t *asg;
	CUdeviceptr ring_d, act;
	void *ring_h;
	int ret, err;

	ENTER(cb);
	for (uint32_t e = 0; e < n_desc; e++) {
		const struct moem_ffn_expert *ex = &a->experts[e];

		cnt[ex->prec * 4 + nt_class(ex->n)]++;
		total += ex->n; /* <= 64 * 64: (token, slot) pairs are unique */
	}
	ret = moem_cuda_scratch(cb, cs, (uint64_t)total * a->I * sizeof(float), &act);
	if (ret)
		return ret;
	desc_bytes = (uint32_t)moem_align_up((uint64_t)n_desc * sizeof(*desc), 16);
	len = desc_bytes + total * 4;
	ret = moem_cuda_ring_get(cb, cs, len, &ring_h, &ring_d, &off);
	if (ret)
		return ret;
	desc = ring_h;
	asg = (uint32_t *)((uint8_t *)ring_h + desc_bytes);
	for (uint32_t b = 0, acc = 0; b < 16; b++) {
		first[b] = acc;
		fill[b] = acc;
		acc += cnt[b];
	}
	for (uint32_t e = 0; e < n_desc; e++) {
		const struct moem_ffn_expert *ex = &a->experts[e];
		struct moem_kffn_desc *d = &desc[fill[ex->prec * 4 + nt_class(ex->n)]++];

		d->blob = ex->blob;
		d->assign_off = afill;
		d->n = ex->n;
		d->act_off = act_off;
		d->pad = 0;
		act_off += ex->n;
		for (uint32_t j = 0; j < ex->n; j++) {
			const struct moem_ffn_assign *as = &a->assign[ex->first + j];

			asg[afill++] = as->token | (uint32_t)as->slot << 16;
		}
	}
	ret = moem_cuda_ring_copy(cb, cs, off, len);
	for (int pass = 0; !ret && pass < 2; pass++) {
		for (uint32_t b = 0; !ret && b < 16; b++) {
			uint32_t prec = b / 4, c = b % 4, nt = 1u << c, rt;
			uint32_t rows = pass ? a->H : a->I;
			enum cuda_kernel k = ffn_kernel(cb, pass, prec, c, &rt);
			struct moem_kffn_params p;

			if (!cnt[b])
				continue;
			ffn_params(&p, (enum moem_prec)prec, a->H, a->I, a->n_slots, a->x, act,
				   a->out);
			p.desc = ring_d + (uint64_t)first[b] * sizeof(*desc);
			p.assign = ring_d + desc_bytes;
			ret = moem_cuda_launch(cb, k, (rows + 16 * rt - 1) / (16 * rt), cnt[b],
					       MOEM_K_THREADS, moem_k_smem(prec, nt, pass), cs, &p);
		}
	}
	/* Even after a failed launch the copy may be queued: keep the region. */
	err = moem_cuda_ring_commit(cb, cs, off, len);
	return ret ? ret : err;
}

/*
 * Grouped FFN planned on the device: moem_ffn_plan writes, per bucket
 * (precision, n-tile class) the host plan would use, D = min(N, B * k)
 * descriptors (the most experts a layer can route; the unused ones empty)
 * and the assignment list into the stream's scratch after the
 * activations; then one gate/up and one down launch per bucket of a
 * precision in prec_mask and a class up to B's (an expert has at most B
 * tokens), D experts wide. The host never sees the plan; decode (B = 1)
 * launches two FFN kernels per precision, as the host plan does.
 */
int moem_cuda_ffn_routed(struct moem_backend *be, struct moem_stream *s,
			 const struct moem_ffn_routed_args *a)
{
	struct cuda_backend *cb = cuda_of(be);
	struct cuda_stream *cs = cuda_stream_of(s);
	const uint32_t pairs = a->B * a->k, D = moem_min(a->N, pairs), n_class = nt_class(a->B) + 1;
	uint64_t act_bytes = moem_align_up((uint64_t)pairs * a->I * sizeof(float), 256);
	uint64_t desc_bytes = moem_align_up((uint64_t)16 * D * sizeof(struct moem_kffn_desc), 256);
	uint64_t asg_bytes = moem_align_up((uint64_t)pairs * 4, 256);
	struct moem_kffn_plan_params pp;
	CUdeviceptr act;
	int ret;

	ENTER(cb);
	ret = moem_cuda_scratch(cb, cs, act_bytes + desc_bytes + asg_bytes + (uint64_t)a->N * 4,
				&act);
	if (ret)
		return ret;
	pp = (struct moem_kffn_plan_params){
		.ids = a->ids,
		.cnt = a->cnt,
		.table = a->table,
		.desc = act + act_bytes,
		.assign = act + act_bytes + desc_bytes,
		.work = act + act_bytes + desc_bytes + asg_bytes,
		.status = a->status,
		.B = a->B,
		.k = a->k,
		.N = a->N,
		.D = D,
		.n_class = n_class,
		.prec_mask = a->prec_mask,
	};
	ret = moem_cuda_launch(cb, K_FFN_PLAN, 1, 1, MOEM_K_PLAN_THREADS, 0, cs, &pp);
	for (int pass = 0; !ret && pass < 2; pass++) {
		for (uint32_t b = 0; !ret && b < 16; b++) {
			uint32_t prec = b / 4, c = b % 4, nt = 1u << c, rt;
			uint32_t rows = pass ? a->H : a->I;
			enum cuda_kernel k = ffn_kernel(cb, pass, prec, c, &rt);
			struct moem_kffn_params p;

			if (!(a->prec_mask & 1u << prec) || c >= n_class)
				continue;
			ffn_params(&p, (enum moem_prec)prec, a->H, a->I, a->k, a->x, act, a->out);
			p.desc = pp.desc + (uint64_t)b * D * sizeof(struct moem_kffn_desc);
			p.assign = pp.assign;
			ret = moem_cuda_launch(cb, k, (rows + 16 * rt - 1) / (16 * rt), D,
					       MOEM_K_THREADS, moem_k_smem(prec, nt, pass), cs, &p);
		}
	}
	return ret;
}
