// SPDX-License-Identifier: GPL-2.0-only
/*
 * transformers 5's checkpoint layout (ckpt_int.h): fused expert tensors
 * and Mixtral's block_sparse_moe renamed to mlp, read as the classic
 * per-expert tensors through views. The fused layout is
 *   model.layers.L.mlp.experts.gate_up_proj  [E, 2I, H]  (gate rows 0..I-1, up I..2I-1)
 *   model.layers.L.mlp.experts.down_proj     [E, H, I]
 * (a ".weight" suffix is accepted too), so expert e's gate, up and down
 * matrices are each one contiguous row-major range of the file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/util.h>

#include "ckpt_int.h"

enum fused_kind { F_NONE, F_GATE_UP, F_DOWN, F_RENAME };

/* What entry name is: a fused tensor of layer *l, a renamed Mixtral tensor (rest), or neither. */
static enum fused_kind classify(const struct moem_model_config *cfg, const char *name, uint32_t *l,
				const char **rest)
{
	int off = 0;

	if (sscanf(name, "model.layers.%u.mlp.%n", l, &off) != 1 || off <= 0)
		return F_NONE;
	*rest = name + off;
	if (!strcmp(*rest, "experts.gate_up_proj") || !strcmp(*rest, "experts.gate_up_proj.weight"))
		return F_GATE_UP;
	if (!strcmp(*rest, "experts.down_proj") || !strcmp(*rest, "experts.down_proj.weight"))
		return F_DOWN;
	return cfg->arch == MOEM_ARCH_MIXTRAL ? F_RENAME : F_NONE;
}

static int check_fused(const struct moem_model_config *cfg, const struct moem_st_tensor *t,
		       uint64_t d1, uint64_t d2)
{
	if (t->ndim != 3 || t->shape[0] != cfg->n_experts || t->shape[1] != d1 || t->shape[2] != d2)
		return moem_errf(EINVAL,
				 "fused expert tensor %s: shape [%llu, %llu, %llu] (%u dims) but "
				 "config.json says [%u, %llu, %llu]",
				 t->name, (unsigned long long)t->shape[0],
				 (unsigned long long)(t->ndim > 1 ? t->shape[1] : 0),
				 (unsigned long long)(t->ndim > 2 ? t->shape[2] : 0), t->ndim,
				 cfg->n_experts, (unsigned long long)d1, (unsigned long long)d2);
	return 0;
}

/* Append view v (already filled) to the index, file f. */
static void add(struct moem_ckpt *c, struct ckpt_view *v, uint32_t f)
{
	struct ckpt_entry *e = &c->idx[c->n_idx++];

	v->t.name = v->name;
	e->name = v->name;
	e->t = &v->t;
	e->file = f;
}

/* Views of one fused tensor: mats[0..n_mats) of rows x cols each, per expert. */
static int view_fused(struct moem_ckpt *c, const struct ckpt_entry *src, uint32_t l,
		      const enum moem_expert_mat *mats, uint32_t n_mats, uint64_t rows,
		      uint64_t cols)
{
	const struct moem_st_tensor *t = src->t;
	const uint64_t es = t->bytes / t->nelem, mat_bytes = rows * cols * es;

	for (uint32_t e = 0; e < c->cfg.n_experts; e++)
		for (uint32_t m = 0; m < n_mats; m++) {
			struct ckpt_view *v = &c->views[c->n_views++];
			int ret = moem_tensor_name(&c->cfg, MOEM_TR_EXPERT, l, e, mats[m], v->name,
						   sizeof(v->name));

			if (ret)
				return moem_err_prefix(-ret, "fused expert tensor %s", t->name);
			v->t.dtype = t->dtype;
			v->t.ndim = 2;
			v->t.shape[0] = rows;
			v->t.shape[1] = cols;
			v->t.nelem = rows * cols;
			v->t.bytes = mat_bytes;
			v->t.offset = t->offset + ((uint64_t)e * n_mats + m) * mat_bytes;
			add(c, v, src->file);
		}
	return 0;
}

int moem_ckpt_unfuse(struct moem_ckpt *c)
{
	const struct moem_model_config *cfg = &c->cfg;
	const uint64_t H = cfg->hidden, I = moem_ffn_width(cfg, MOEM_TR_EXPERT);
	static const enum moem_expert_mat gu[2] = {MOEM_MAT_GATE, MOEM_MAT_UP};
	static const enum moem_expert_mat dn[1] = {MOEM_MAT_DOWN};
	const size_t n_orig = c->n_idx;
	size_t n_views = 0;
	struct ckpt_entry *idx;

	for (size_t i = 0; i < n_orig; i++) {
		const char *rest;
		uint32_t l;

		switch (classify(cfg, c->idx[i].name, &l, &rest)) {
		case F_GATE_UP:
			n_views += 2 * (size_t)cfg->n_experts;
			break;
		case F_DOWN:
			n_views += cfg->n_experts;
			break;
		case F_RENAME:
			n_views++;
			break;
		default:
			break;
		}
	}
	if (!n_views)
		return 0;
	c->views = calloc(n_views, sizeof(*c->views));
	idx = realloc(c->idx, (n_orig + n_views) * sizeof(*idx));
	if (idx)
		c->idx = idx;
	if (!c->views || !idx)
		return -ENOMEM;
	memset(c->idx + n_orig, 0, n_views * sizeof(*idx));
	for (size_t i = 0; i < n_orig; i++) {
		struct ckpt_entry *src = &c->idx[i];
		const char *rest;
		struct ckpt_view *v;
		uint32_t l;
		int ret = 0;

		switch (classify(cfg, src->name, &l, &rest)) {
		case F_GATE_UP:
			ret = check_fused(cfg, src->t, 2 * I, H);
			if (!ret)
				ret = view_fused(c, src, l, gu, 2, I, H);
			break;
		case F_DOWN:
			ret = check_fused(cfg, src->t, H, I);
			if (!ret)
				ret = view_fused(c, src, l, dn, 1, H, I);
			break;
		case F_RENAME:
			v = &c->views[c->n_views++];
			if (snprintf(v->name, sizeof(v->name),
				     "model.layers.%u.block_sparse_moe.%s", l,
				     rest) >= (int)sizeof(v->name))
				return moem_errf(EINVAL, "tensor %s: name too long", src->name);
			v->t = *src->t;
			add(c, v, src->file);
			break;
		default:
			continue;
		}
		if (ret)
			return ret;
		src->viewed = true;
	}
	return 0;
}

bool moem_ckpt_entry_is_view(const struct moem_ckpt *c, const struct moem_st_tensor *t)
{
	return c->n_views && t >= &c->views[0].t && t <= &c->views[c->n_views - 1].t;
}
