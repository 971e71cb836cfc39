// SPDX-License-Identifier: GPL-2.0-only
/*
 * The decoder's forward pass (decode.h): embedding; per layer the
 * attention half of each architecture through the backend's decode ops
 * and the paged KV cache, then the engine's own MoE / dense MLP half
 * (moem_eng_layer: residency, policies, budgets); final norm and lm_head.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/half.h>
#include <moem/util.h>

#include "decode_int.h"

/*
 * Upload rows of pack tensors, stacked, as one device matrix: bf16, or
 * when q (a projection the decoder multiplies with mm()) and the
 * decoder's dense_prec says so, quantized to it (moem_quantize()).
 */
static int upload_q(struct moem_decoder *d, const char *const *names, uint32_t n, bool q,
		    moem_dptr *out)
{
	const enum moem_prec p = q ? d->o.dense_prec : MOEM_PREC_BF16;
	const struct moem_pack_tensor *t[2];
	uint64_t total = 0, at = 0, bytes, cols = 0;
	struct moem_qmat_layout l;
	uint16_t *b = NULL, *dev;
	void *qm = NULL;
	int ret = 0;

	for (uint32_t i = 0; i < n; i++) {
		t[i] = moem_pack_tensor(d->e->pack, names[i]);
		if (!t[i])
			return moem_errf(ENOENT, "the pack has no tensor %s", names[i]);
		total += t[i]->nelem;
	}
	bytes = total * 2;
	if (p != MOEM_PREC_BF16) {
		cols = t[0]->shape[t[0]->ndim - 1];
		for (uint32_t i = 0; i < n; i++)
			if (t[i]->ndim != 2 || t[i]->shape[1] != cols)
				return moem_errf(EINVAL,
						 "%s: not a matrix of %llu columns to quantize",
						 names[i], (unsigned long long)cols);
		if (!cols || cols > UINT32_MAX || total / cols > UINT32_MAX)
			return moem_errf(EINVAL, "%s: not a matrix to quantize", names[0]);
		ret = moem_qmat_layout(p, (uint32_t)(total / cols), (uint32_t)cols, &l);
		if (ret)
			return moem_err_prefix(-ret, "%s to %s (--dense-prec)", names[0],
					       moem_prec_name(p));
		bytes = l.bytes;
	}
	ret = moem_be_alloc(d->be, bytes, out);
	if (ret)
		return ret;
	/* On the CPU backend the device memory is filled in place. */
	dev = moem_be_host_ptr(d->be, *out);
	b = dev && p == MOEM_PREC_BF16 ? dev : malloc(total * 2);
	if (!b)
		ret = -ENOMEM;
	for (uint32_t i = 0; i < n && !ret; i++) {
		ret = moem_pack_read_tensor_bf16(d->e->pack, t[i], b + at, t[i]->nelem);
		at += t[i]->nelem;
	}
	if (!ret && p != MOEM_PREC_BF16) {
		qm = dev ? dev : malloc(bytes);
		ret = qm ? moem_quantize(p, b, l.rows, l.cols, qm, bytes) : -ENOMEM;
		if (ret)
			ret = moem_err_prefix(-ret, "%s to %s", names[0], moem_prec_name(p));
	}
	if (!ret && !dev)
		ret = moem_be_htod(d->be, *out, qm ? qm : (void *)b, bytes, NULL);
	if (!ret && !dev)
		ret = moem_be_stream_sync(d->be, NULL);
	if (!ret)
		d->weight_bytes += bytes;
	if (qm != dev)
		free(qm);
	if (b != dev)
		free(b);
	if (ret) {
		moem_be_free(d->be, *out);
		*out = 0;
	}
	return ret;
}

static int upload(struct moem_decoder *d, const char *const *names, uint32_t n, moem_dptr *out)
{
	return upload_q(d, names, n, false, out);
}

static int up1(struct moem_decoder *d, uint32_t l, const char *what, moem_dptr *out)
{
	char name[MOEM_TENSOR_NAME_MAX];
	const char *names[1] = {name};

	snprintf(name, sizeof(name), "model.layers.%u.self_attn.%s.weight", l, what);
	return upload(d, names, 1, out);
}

/* A projection mm() multiplies with: quantized as dense_prec says. */
static int up1_q(struct moem_decoder *d, uint32_t l, const char *what, moem_dptr *out)
{
	char name[MOEM_TENSOR_NAME_MAX];
	const char *names[1] = {name};

	snprintf(name, sizeof(name), "model.layers.%u.self_attn.%s.weight", l, what);
	return upload_q(d, names, 1, true, out);
}

static int load_layer(struct moem_decoder *d, uint32_t l)
{
	const struct moem_model_config *c = d->cfg;
	struct dec_layer *L = &d->L[l];
	char k[MOEM_TENSOR_NAME_MAX], v[MOEM_TENSOR_NAME_MAX], in[MOEM_TENSOR_NAME_MAX];
	const char *kv[2] = {k, v}, *inn[1] = {in};
	int ret;

	ret = moem_tensor_name(c, MOEM_TR_INPUT_NORM, l, 0, 0, in, sizeof(in));
	if (!ret)
		ret = upload(d, inn, 1, &L->in_norm);
	if (!ret)
		ret = up1_q(d, l, "o_proj", &L->wo);
	if (ret)
		return ret;
	if (d->mla) {
		if (c->q_lora_rank) {
			ret = up1_q(d, l, "q_a_proj", &L->wq_a);
			if (!ret)
				ret = up1(d, l, "q_a_layernorm", &L->q_a_norm);
			if (!ret)
				ret = up1_q(d, l, "q_b_proj", &L->wq_b);
		} else {
			ret = up1_q(d, l, "q_proj", &L->wq);
		}
		if (!ret)
			ret = up1_q(d, l, "kv_a_proj_with_mqa", &L->wkv_a);
		if (!ret)
			ret = up1(d, l, "kv_a_layernorm", &L->kv_a_norm);
		if (!ret)
			ret = up1(d, l, "kv_b_proj", &L->wkv_b);
		return ret;
	}
	snprintf(k, sizeof(k), "model.layers.%u.self_attn.k_proj.weight", l);
	snprintf(v, sizeof(v), "model.layers.%u.self_attn.v_proj.weight", l);
	ret = up1_q(d, l, "q_proj", &L->wq);
	if (!ret)
		ret = upload_q(d, kv, 2, true, &L->wkv);
	if (!ret && (c->arch == MOEM_ARCH_QWEN3_MOE || c->arch == MOEM_ARCH_OLMOE)) {
		ret = up1(d, l, "q_norm", &L->q_norm);
		if (!ret)
			ret = up1(d, l, "k_norm", &L->k_norm);
	}
	return ret;
}

int moem_dec_load(struct moem_decoder *d)
{
	const struct moem_model_config *c = d->cfg;
	char name[MOEM_TENSOR_NAME_MAX];
	const char *names[1] = {name};
	int ret;

	d->L = calloc(c->n_layers, sizeof(*d->L));
	if (!d->L)
		return -ENOMEM;
	for (uint32_t l = 0; l < c->n_layers; l++) {
		ret = load_layer(d, l);
		if (ret)
			return moem_err_prefix(-ret, "layer %u attention weights", l);
	}
	ret = moem_tensor_name(c, MOEM_TR_EMBED, 0, 0, 0, name, sizeof(name));
	if (!ret)
		ret = upload(d, names, 1, &d->embed);
	if (!ret)
		ret = moem_tensor_name(c, MOEM_TR_FINAL_NORM, 0, 0, 0, name, sizeof(name));
	if (!ret)
		ret = upload(d, names, 1, &d->final_norm);
	if (ret)
		return ret;
	if (c->tie_embeddings) {
		d->lm_head = d->embed;
		return 0;
	}
	ret = moem_tensor_name(c, MOEM_TR_LM_HEAD, 0, 0, 0, name, sizeof(name));
	return ret ? ret : upload_q(d, names, 1, true, &d->lm_head);
}

void moem_dec_unload(struct moem_decoder *d)
{
	if (d->L) {
		for (uint32_t l = 0; l < d->cfg->n_layers; l++) {
			moem_dptr *p = (moem_dptr *)&d->L[l];

			for (size_t i = 0; i < sizeof(d->L[l]) / sizeof(moem_dptr); i++)
				moem_be_free(d->be, p[i]);
		}
		free(d->L);
		d->L = NULL;
	}
	if (d->lm_head != d->embed)
		moem_be_free(d->be, d->lm_head);
	moem_be_free(d->be, d->embed);
	moem_be_free(d->be, d->final_norm);
	d->embed = d->lm_head = d->final_norm = 0;
}

static struct moem_kv_geom geom(const struct moem_decoder *d, uint32_t l)
{
	struct moem_kv_geom g = {
		.pool = d->pool,
		.n_blocks = d->pool_blocks,
		.n_layers = d->cfg->n_layers,
		.block_tokens = d->o.block_tokens,
		.entry = d->entry,
		.layer = l,
		.tables = d->tables,
	};

	return g;
}

static int mm_p(struct moem_decoder *d, uint32_t T, moem_dptr x, uint32_t K, moem_dptr w,
		uint32_t R, moem_dptr y, enum moem_prec p)
{
	struct moem_matmul_args a = {T, K, R, x, w, y, p};

	return moem_op_matmul(d->be, NULL, &a);
}

/* A projection uploaded by upload_q(.., true, ..): in dense_prec. */
static int mm(struct moem_decoder *d, uint32_t T, moem_dptr x, uint32_t K, moem_dptr w, uint32_t R,
	      moem_dptr y)
{
	return mm_p(d, T, x, K, w, R, y, d->o.dense_prec);
}

static int norm_rows(struct moem_decoder *d, uint32_t rows, uint32_t n, uint32_t stride,
		     moem_dptr x, moem_dptr w, float eps, moem_dptr y, bool bf16)
{
	struct moem_rownorm_args a = {rows, n, stride, bf16 ? n : stride, eps, x, w, y, bf16};

	return moem_op_rownorm(d->be, NULL, &a);
}

static int rope(struct moem_decoder *d, uint32_t T, moem_dptr x, uint32_t n_heads,
		uint32_t tok_stride, uint32_t head_stride, uint32_t off)
{
	struct moem_rope_args a = {
		.T = T,
		.n_heads = n_heads,
		.tok_stride = tok_stride,
		.head_stride = head_stride,
		.off = off,
		.dim = d->rope.dim,
		.pairs = d->rope.pairs,
		.n_pos = d->o.max_context,
		.x = x,
		.pos = d->pos_d,
		.cos = d->cos,
		.sin = d->sin,
	};

	return moem_op_rope(d->be, NULL, &a);
}

static int store_kv(struct moem_decoder *d, uint32_t l, uint32_t T, moem_dptr src)
{
	struct moem_kv_store_args a = {geom(d, l), T, d->entry, src, d->pos_d, d->tab_d};

	return moem_op_kv_store(d->be, NULL, &a);
}

/* o_proj(att) added to the residual stream. */
static int out_proj(struct moem_decoder *d, uint32_t l, uint32_t T, uint32_t width)
{
	struct moem_convert_args cv = {T, width, width, width, 0, d->att, d->att_b, true};
	struct moem_combine_args cb = {
		.B = T, .H = d->cfg->hidden, .h = d->e->h, .n_shared = 1, .shared = d->oproj};
	int ret = moem_op_convert(d->be, NULL, &cv);

	if (!ret)
		ret = mm(d, T, d->att_b, width, d->L[l].wo, d->cfg->hidden, d->oproj);
	if (!ret)
		ret = moem_op_combine(d->be, NULL, &cb);
	return ret;
}

/* Qwen3-MoE, Mixtral, OLMoE: GQA with the architecture's q/k norms. */
static int attn_gqa(struct moem_decoder *d, uint32_t l, uint32_t T)
{
	const struct moem_model_config *c = d->cfg;
	const struct dec_layer *L = &d->L[l];
	const uint32_t H = c->hidden, nh = c->n_heads, kvh = c->n_kv_heads, hd = c->head_dim;
	const uint32_t qw = nh * hd, kw = kvh * hd;
	struct moem_attn_args at = {
		.kv = geom(d, l),
		.T = T,
		.n_heads = nh,
		.n_kv_heads = kvh,
		.qk_dim = hd,
		.v_dim = hd,
		.k_off = 0,
		.v_off = kw,
		.q_stride = qw,
		.window = c->sliding_window,
		.scale = (float)d->rope.attn_scale,
		.q = d->q,
		.pos = d->pos_d,
		.tab = d->tab_d,
		.out = d->att,
	};
	int ret;

	ret = mm(d, T, d->xb, H, L->wq, qw, d->q);
	if (!ret)
		ret = mm(d, T, d->xb, H, L->wkv, 2 * kw, d->kv);
	if (ret)
		return ret;
	if (c->arch == MOEM_ARCH_QWEN3_MOE) { /* per head */
		ret = norm_rows(d, T * nh, hd, hd, d->q, L->q_norm, c->rms_eps, d->q, false);
		for (uint32_t t = 0; !ret && t < T; t++) /* k heads of each token's row */
			ret = norm_rows(d, kvh, hd, hd, d->kv + (uint64_t)t * 2 * kw * 4, L->k_norm,
					c->rms_eps, d->kv + (uint64_t)t * 2 * kw * 4, false);
	} else if (c->arch == MOEM_ARCH_OLMOE) { /* over the whole projection */
		ret = norm_rows(d, T, qw, qw, d->q, L->q_norm, c->rms_eps, d->q, false);
		if (!ret)
			ret = norm_rows(d, T, kw, 2 * kw, d->kv, L->k_norm, c->rms_eps, d->kv,
					false);
	}
	if (!ret && c->clip_qkv > 0) {
		struct moem_convert_args q = {T, qw, qw, qw, c->clip_qkv, d->q, d->q, false};
		struct moem_convert_args k = {T,	   2 * kw, 2 * kw, 2 * kw,
					      c->clip_qkv, d->kv,  d->kv,  false};

		ret = moem_op_convert(d->be, NULL, &q);
		if (!ret)
			ret = moem_op_convert(d->be, NULL, &k);
	}
	if (!ret)
		ret = rope(d, T, d->q, nh, qw, hd, 0);
	if (!ret)
		ret = rope(d, T, d->kv, kvh, 2 * kw, hd, 0);
	if (!ret)
		ret = store_kv(d, l, T, d->kv);
	if (!ret)
		ret = moem_op_attention(d->be, NULL, &at);
	return ret ? ret : out_proj(d, l, T, qw);
}

/*
 * DeepSeek-V2 multi-head latent attention, absorbed: the cache holds the
 * normalised latent c_kv and the rotated k_pe of each token; queries are
 * taken into the latent space through kv_b_proj's key half (W_UK), the
 * attention output out of it through its value half (W_UV).
 */
static int attn_mla(struct moem_decoder *d, uint32_t l, uint32_t T)
{
	const struct moem_model_config *c = d->cfg;
	const struct dec_layer *L = &d->L[l];
	const uint32_t H = c->hidden, nh = c->n_heads, rank = c->kv_lora_rank;
	const uint32_t nope = c->qk_nope_dim, rd = c->qk_rope_dim, vd = c->v_head_dim;
	const uint32_t qd = nope + rd, lat = rank + rd;
	struct moem_attn_args at = {
		.kv = geom(d, l),
		.T = T,
		.n_heads = nh,
		.n_kv_heads = 1,
		.qk_dim = lat,
		.v_dim = rank,
		.q_stride = nh * lat,
		.scale = (float)d->rope.attn_scale,
		.q = d->qattn,
		.pos = d->pos_d,
		.tab = d->tab_d,
		.out = d->olat,
	};
	struct moem_head_matmul_args uk = {
		.T = T,
		.n_heads = nh,
		.in_dim = nope,
		.out_dim = rank,
		.transpose = true,
		.x = d->q,
		.x_tok_stride = nh * qd,
		.x_head_stride = qd,
		.w = L->wkv_b,
		.w_head_stride = (uint64_t)(nope + vd) * rank,
		.w_row_stride = rank,
		.y = d->qattn,
		.y_tok_stride = nh * lat,
		.y_head_stride = lat,
	};
	struct moem_head_matmul_args uv = {
		.T = T,
		.n_heads = nh,
		.in_dim = rank,
		.out_dim = vd,
		.x = d->olat,
		.x_tok_stride = nh * rank,
		.x_head_stride = rank,
		.w = L->wkv_b + (uint64_t)nope * rank * 2,
		.w_head_stride = (uint64_t)(nope + vd) * rank,
		.w_row_stride = rank,
		.y = d->att,
		.y_tok_stride = nh * vd,
		.y_head_stride = vd,
	};
	struct moem_convert_args pe = {
		T * nh, rd, qd, lat, 0, d->q + (uint64_t)nope * 4, d->qattn + (uint64_t)rank * 4,
		false};
	int ret;

	if (c->q_lora_rank) {
		ret = mm(d, T, d->xb, H, L->wq_a, c->q_lora_rank, d->qa);
		if (!ret) /* q_a_layernorm: eps 1e-6 in DeepSeek's code, whatever rms_norm_eps */
			ret = norm_rows(d, T, c->q_lora_rank, c->q_lora_rank, d->qa, L->q_a_norm,
					1e-6f, d->qa_b, true);
		if (!ret)
			ret = mm(d, T, d->qa_b, c->q_lora_rank, L->wq_b, nh * qd, d->q);
	} else {
		ret = mm(d, T, d->xb, H, L->wq, nh * qd, d->q);
	}
	if (!ret)
		ret = mm(d, T, d->xb, H, L->wkv_a, lat, d->kv);
	if (!ret) /* kv_a_layernorm: eps 1e-6 too */
		ret = norm_rows(d, T, rank, lat, d->kv, L->kv_a_norm, 1e-6f, d->kv, false);
	if (!ret)
		ret = rope(d, T, d->kv, 1, lat, lat, rank);
	if (!ret)
		ret = store_kv(d, l, T, d->kv);
	if (!ret)
		ret = rope(d, T, d->q, nh, nh * qd, qd, nope);
	if (!ret)
		ret = moem_op_head_matmul(d->be, NULL, &uk);
	if (!ret)
		ret = moem_op_convert(d->be, NULL, &pe);
	if (!ret)
		ret = moem_op_attention(d->be, NULL, &at);
	if (!ret)
		ret = moem_op_head_matmul(d->be, NULL, &uv);
	return ret ? ret : out_proj(d, l, T, nh * vd);
}

static void add_tiers(struct moem_engine *e, const struct moem_tiers_stats *a,
		      const struct moem_tiers_stats *b, struct moem_step_stats *st)
{
	st->hits = b->hits - a->hits;
	st->misses = b->misses - a->misses;
	st->fallbacks = b->fallbacks - a->fallbacks;
	st->bytes_nvme = b->bytes_nvme - a->bytes_nvme;
	st->bytes_d2h = b->bytes_d2h - a->bytes_d2h;
	for (int p = 0; p < MOEM_PRIO_NR; p++)
		st->bytes_h2d += b->bytes_h2d[p] - a->bytes_h2d[p];
}

/*
 * The step's launches after its input upload, up to the copy of the
 * logits back: what a graph of the step holds (graph.c). knobs: apply
 * the engine's knobs before each layer (not inside a capture: a changed
 * routing policy would change the launches the graph's key stands for).
 */
static int launches(struct moem_decoder *d, uint32_t T, const uint32_t *rows, uint32_t n_out,
		    bool knobs, struct moem_step_stats *st, struct moem_decode_stats *ds)
{
	struct moem_engine *e = d->e;
	const struct moem_model_config *c = d->cfg;
	struct moem_embed_args em = {T, c->hidden, c->vocab, d->ids_d, d->embed, e->h};
	struct moem_rmsnorm_args fn = {T, c->hidden, c->rms_eps, e->h, d->final_norm, d->xb};
	uint64_t a0 = moem_now_ns(), m0;
	int ret;

	ret = moem_op_embed(d->be, NULL, &em);
	ds->attn_ns += moem_now_ns() - a0;
	for (uint32_t l = 0; l < c->n_layers && !ret; l++) {
		struct moem_rmsnorm_args in = {T,    c->hidden,	      c->rms_eps,
					       e->h, d->L[l].in_norm, d->xb};

		if (knobs)
			moem_eng_apply_knobs(e);
		a0 = moem_now_ns();
		ret = moem_op_rmsnorm(d->be, NULL, &in);
		if (!ret)
			ret = d->mla ? attn_mla(d, l, T) : attn_gqa(d, l, T);
		m0 = moem_now_ns();
		ds->attn_ns += m0 - a0;
		if (!ret)
			ret = moem_eng_layer(e, l, T, st->step, NULL, st);
		ds->moe_ns += moem_now_ns() - m0;
	}
	a0 = moem_now_ns();
	if (!ret)
		ret = moem_op_rmsnorm(d->be, NULL, &fn);
	/* lm_head on the rows that need logits only, gathered. */
	for (uint32_t i = 0; !ret && i < n_out; i++)
		ret = moem_be_dtod(d->be, d->hb + (uint64_t)i * c->hidden * 2,
				   d->xb + (uint64_t)rows[i] * c->hidden * 2,
				   (uint64_t)c->hidden * 2, NULL);
	if (!ret && n_out)
		/* a tied lm_head is the bf16 embedding table */
		ret = mm_p(d, n_out, d->hb, c->hidden, d->lm_head, c->vocab, d->logits,
			   c->tie_embeddings ? MOEM_PREC_BF16 : d->o.dense_prec);
	if (!ret && n_out)
		ret = moem_be_dtoh(d->be, d->logits_host, d->logits, (uint64_t)n_out * c->vocab * 4,
				   NULL);
	ds->head_ns += moem_now_ns() - a0;
	return ret;
}

/* The graph key of a device-planned step (engine_int.h). */
static void graph_key(const struct moem_decoder *d, uint32_t T, const uint32_t *rows,
		      uint32_t n_out, struct moem_eng_graph_key *k)
{
	memset(k, 0, sizeof(*k));
	k->T = T;
	k->n_out = n_out;
	for (uint32_t i = 0; i < n_out; i++)
		k->rows[i] = (uint8_t)rows[i]; /* < DEC_PIECE */
	k->kv_pool = d->pool;
	k->kv_blocks = d->pool_blocks;
}

int moem_dec_forward(struct moem_decoder *d, uint32_t T, bool prefill, const uint32_t *rows,
		     uint32_t n_out, struct moem_decode_stats *ds)
{
	struct moem_engine *e = d->e;
	struct moem_step_stats st = {.step = e->total.step, .tokens = T};
	enum moem_eng_graph_mode gm = ENG_GRAPH_OFF;
	struct moem_eng_graph_key key;
	struct moem_tiers_stats t0, t1;
	enum moem_route_kind kind = e->rp.kind;
	uint64_t s0 = moem_now_ns(), a0;
	bool dev, rerun = false;
	int ret;

	_Static_assert(DEC_PIECE <= 256, "graph keys hold rows in a byte");
	moem_tiers_get_stats(e->tiers, &t0);
	a0 = moem_now_ns();
	/* Through pinned memory: the last step's sync ended its copies from there. */
	memcpy(d->io_host, d->ids, 4 * T);
	memcpy(d->io_host + DEC_PIECE, d->pos, 4 * T);
	memcpy(d->io_host + 2 * DEC_PIECE, d->tab, 4 * T);
	ret = moem_be_htod(d->be, d->ids_d, d->io_host, 4 * T, NULL);
	if (!ret)
		ret = moem_be_htod(d->be, d->pos_d, d->io_host + DEC_PIECE, 4 * T, NULL);
	if (!ret)
		ret = moem_be_htod(d->be, d->tab_d, d->io_host + 2 * DEC_PIECE, 4 * T, NULL);
	ds->attn_ns += moem_now_ns() - a0;
	moem_eng_apply_knobs(e);
	/* A prefill chunk is compute-bound and wakes most experts anyway:
	 * LYNX/OEA/piggyback reduce decode batches only. */
	if (prefill && (kind == MOEM_RP_LYNX || kind == MOEM_RP_OEA || kind == MOEM_RP_PIGGYBACK))
		e->rp.kind = MOEM_RP_NONE;
	/* Every expert in HBM: the step's MoE layers plan on the device (dstep.c),
	 * and its launches can be a graph (graph.c). */
	if (!ret)
		ret = moem_eng_dstep_begin(e, T);
	dev = moem_eng_dstep_on(e);
	if (!ret && dev) {
		graph_key(d, T, rows, n_out, &key);
		ret = moem_eng_graph_begin(e, &key, &gm);
	}
	if (!ret && gm != ENG_GRAPH_REPLAY)
		ret = launches(d, T, rows, n_out, gm == ENG_GRAPH_OFF, &st, ds);
	if (gm == ENG_GRAPH_CAPTURE) {
		ret = moem_eng_graph_end(e, ret, &rerun);
		if (!ret && rerun) /* the capture failed and ran nothing */
			ret = launches(d, T, rows, n_out, false, &st, ds);
	}
	e->rp.kind = kind;
	a0 = moem_now_ns();
	if (!ret)
		ret = moem_be_stream_sync(d->be, NULL);
	if (dev)
		ds->device_ns += moem_now_ns() - a0;
	else
		ds->head_ns += moem_now_ns() - a0;
	if (!ret)
		ret = moem_eng_dstep_end(e, st.step, &st);
	if (ret) {
		moem_eng_dstep_abort(e);
		return ret;
	}
	moem_tiers_get_stats(e->tiers, &t1);
	add_tiers(e, &t0, &t1, &st);
	st.step_ns = moem_now_ns() - s0;
	moem_eng_after_step(e, st.step_ns - moem_min(st.stall_ns, st.step_ns), st.bytes_h2d);
	moem_eng_count_step(e, &st);
	ds->wait_ns += st.stall_ns;
	ds->hits += st.hits;
	ds->misses += st.misses;
	ds->fallbacks += st.fallbacks;
	ds->bytes_nvme += st.bytes_nvme;
	ds->bytes_h2d += st.bytes_h2d;
	ds->device_steps += dev;
	ds->graph_steps += gm != ENG_GRAPH_OFF && !rerun;
	ds->graph_captures += gm == ENG_GRAPH_CAPTURE && !rerun;
	ds->cpu_experts += st.cpu_experts;
	ds->cpu_ns += st.cpu_ns;
	moem_phases_add(ds->phase_ns, st.phase_ns);
	return 0;
}
