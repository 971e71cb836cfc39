// SPDX-License-Identifier: GPL-2.0-only
/*
 * Tensor names and shapes of each architecture, as the Hugging Face
 * modeling code registers them (Documentation/checkpoints.md). One table
 * drives both the checkpoint check (missing/extra tensors) and mkmodel.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/store.h>

#include "store_int.h"

static const char *const role_names[MOEM_TR_NR] = {
	[MOEM_TR_EMBED] = "embed",	   [MOEM_TR_FINAL_NORM] = "final_norm",
	[MOEM_TR_LM_HEAD] = "lm_head",	   [MOEM_TR_INPUT_NORM] = "input_norm",
	[MOEM_TR_POST_NORM] = "post_norm", [MOEM_TR_ATTN] = "attn",
	[MOEM_TR_ROUTER] = "router",	   [MOEM_TR_EXPERT] = "expert",
	[MOEM_TR_SHARED] = "shared",	   [MOEM_TR_DENSE] = "dense",
};

const char *moem_tensor_role_name(enum moem_tensor_role r)
{
	return (unsigned int)r < MOEM_TR_NR ? role_names[r] : "?";
}

/* Projection names of gate, up, down. */
static const char *mat_name(const struct moem_model_config *c, enum moem_expert_mat m)
{
	static const char *const hf[MOEM_MAT_NR] = {"gate_proj", "up_proj", "down_proj"};
	static const char *const mixtral[MOEM_MAT_NR] = {"w1", "w3", "w2"};

	return c->arch == MOEM_ARCH_MIXTRAL ? mixtral[m] : hf[m];
}

static const char *moe_block(const struct moem_model_config *c)
{
	return c->arch == MOEM_ARCH_MIXTRAL ? "block_sparse_moe" : "mlp";
}

uint32_t moem_ffn_width(const struct moem_model_config *c, enum moem_tensor_role r)
{
	switch (r) {
	case MOEM_TR_EXPERT:
		return c->moe_inter;
	case MOEM_TR_SHARED:
		return c->n_shared * c->shared_inter;
	case MOEM_TR_DENSE:
		return c->dense_inter;
	default:
		return 0;
	}
}

int moem_tensor_name(const struct moem_model_config *c, enum moem_tensor_role r, uint32_t layer,
		     uint32_t expert, enum moem_expert_mat mat, char *buf, size_t len)
{
	bool moe = moem_layer_is_moe(c, layer);
	int n;

	if (r >= MOEM_TR_INPUT_NORM && layer >= c->n_layers)
		return moem_errf(EINVAL, "layer %u out of range (%u layers)", layer, c->n_layers);
	if ((r == MOEM_TR_EXPERT || r == MOEM_TR_SHARED || r == MOEM_TR_DENSE) &&
	    (unsigned int)mat >= MOEM_MAT_NR)
		return moem_errf(EINVAL, "bad FFN matrix %d", (int)mat);
	switch (r) {
	case MOEM_TR_EMBED:
		n = snprintf(buf, len, "model.embed_tokens.weight");
		break;
	case MOEM_TR_FINAL_NORM:
		n = snprintf(buf, len, "model.norm.weight");
		break;
	case MOEM_TR_LM_HEAD:
		if (c->tie_embeddings)
			return moem_errf(EINVAL, "tied embeddings: no lm_head");
		n = snprintf(buf, len, "lm_head.weight");
		break;
	case MOEM_TR_INPUT_NORM:
		n = snprintf(buf, len, "model.layers.%u.input_layernorm.weight", layer);
		break;
	case MOEM_TR_POST_NORM:
		n = snprintf(buf, len, "model.layers.%u.post_attention_layernorm.weight", layer);
		break;
	case MOEM_TR_ROUTER:
		if (!moe)
			return moem_errf(EINVAL, "layer %u is dense: no router", layer);
		n = snprintf(buf, len, "model.layers.%u.%s.gate.weight", layer, moe_block(c));
		break;
	case MOEM_TR_EXPERT:
		if (!moe || expert >= c->n_experts)
			return moem_errf(EINVAL, "no expert %u in layer %u", expert, layer);
		n = snprintf(buf, len, "model.layers.%u.%s.experts.%u.%s.weight", layer,
			     moe_block(c), expert, mat_name(c, mat));
		break;
	case MOEM_TR_SHARED:
		if (!moe || !c->n_shared)
			return moem_errf(EINVAL, "no shared experts in layer %u", layer);
		n = snprintf(buf, len, "model.layers.%u.mlp.shared_experts.%s.weight", layer,
			     mat_name(c, mat));
		break;
	case MOEM_TR_DENSE:
		if (moe)
			return moem_errf(EINVAL, "layer %u is a MoE layer: no dense MLP", layer);
		n = snprintf(buf, len, "model.layers.%u.mlp.%s.weight", layer, mat_name(c, mat));
		break;
	default:
		return moem_errf(EINVAL, "role %s has no fixed name", moem_tensor_role_name(r));
	}
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	return 0;
}

struct spec_list {
	struct moem_tensor_spec *s;
	size_t n, cap;
	int err;
};

static struct moem_tensor_spec *push(struct spec_list *l, enum moem_tensor_role r, uint32_t layer,
				     uint64_t d0, uint64_t d1)
{
	struct moem_tensor_spec *s;

	if (l->err)
		return NULL;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct moem_tensor_spec *ns = realloc(l->s, sizeof(*ns) * cap);

		if (!ns) {
			l->err = -ENOMEM;
			return NULL;
		}
		l->s = ns;
		l->cap = cap;
	}
	s = &l->s[l->n++];
	memset(s, 0, sizeof(*s));
	s->role = r;
	s->layer = layer;
	s->ndim = d1 ? 2 : 1;
	s->shape[0] = d0;
	s->shape[1] = d1;
	return s;
}

/* A tensor with a fixed-role name. */
static void push_named(struct spec_list *l, const struct moem_model_config *c,
		       enum moem_tensor_role r, uint32_t layer, uint32_t expert,
		       enum moem_expert_mat m, uint64_t d0, uint64_t d1)
{
	struct moem_tensor_spec *s = push(l, r, layer, d0, d1);
	int ret;

	if (!s)
		return;
	s->expert = expert;
	s->mat = m;
	ret = moem_tensor_name(c, r, layer, expert, m, s->name, sizeof(s->name));
	if (ret)
		l->err = ret;
}

static void push_attn(struct spec_list *l, uint32_t layer, const char *what, uint64_t d0,
		      uint64_t d1)
{
	struct moem_tensor_spec *s = push(l, MOEM_TR_ATTN, layer, d0, d1);

	if (s)
		snprintf(s->name, sizeof(s->name), "model.layers.%u.self_attn.%s.weight", layer,
			 what);
}

static void push_ffn(struct spec_list *l, const struct moem_model_config *c,
		     enum moem_tensor_role r, uint32_t layer, uint32_t expert)
{
	uint64_t h = c->hidden, i = moem_ffn_width(c, r);

	push_named(l, c, r, layer, expert, MOEM_MAT_GATE, i, h);
	push_named(l, c, r, layer, expert, MOEM_MAT_UP, i, h);
	push_named(l, c, r, layer, expert, MOEM_MAT_DOWN, h, i);
}

static void push_attention(struct spec_list *l, const struct moem_model_config *c, uint32_t layer)
{
	uint64_t h = c->hidden, nh = c->n_heads, kv = c->n_kv_heads, hd = c->head_dim;

	if (c->arch == MOEM_ARCH_DEEPSEEK_V2) {
		uint64_t qd = (uint64_t)c->qk_nope_dim + c->qk_rope_dim;

		if (c->q_lora_rank) {
			push_attn(l, layer, "q_a_proj", c->q_lora_rank, h);
			push_attn(l, layer, "q_a_layernorm", c->q_lora_rank, 0);
			push_attn(l, layer, "q_b_proj", nh * qd, c->q_lora_rank);
		} else {
			push_attn(l, layer, "q_proj", nh * qd, h);
		}
		push_attn(l, layer, "kv_a_proj_with_mqa",
			  (uint64_t)c->kv_lora_rank + c->qk_rope_dim, h);
		push_attn(l, layer, "kv_a_layernorm", c->kv_lora_rank, 0);
		push_attn(l, layer, "kv_b_proj", nh * ((uint64_t)c->qk_nope_dim + c->v_head_dim),
			  c->kv_lora_rank);
		push_attn(l, layer, "o_proj", h, nh * c->v_head_dim);
		return;
	}
	push_attn(l, layer, "q_proj", nh * hd, h);
	push_attn(l, layer, "k_proj", kv * hd, h);
	push_attn(l, layer, "v_proj", kv * hd, h);
	push_attn(l, layer, "o_proj", h, nh * hd);
	if (c->arch == MOEM_ARCH_QWEN3_MOE) {
		push_attn(l, layer, "q_norm", hd, 0);
		push_attn(l, layer, "k_norm", hd, 0);
	} else if (c->arch == MOEM_ARCH_OLMOE) {
		push_attn(l, layer, "q_norm", nh * hd, 0);
		push_attn(l, layer, "k_norm", kv * hd, 0);
	}
}

int moem_arch_tensors(const struct moem_model_config *c, struct moem_tensor_spec **out, size_t *n)
{
	return moem_store_arch_tensors(c, true, out, n);
}

int moem_store_arch_tensors(const struct moem_model_config *c, bool with_ffn,
			    struct moem_tensor_spec **out, size_t *n)
{
	struct spec_list l = {0};
	uint64_t h = c->hidden;

	*out = NULL;
	*n = 0;
	push_named(&l, c, MOEM_TR_EMBED, UINT32_MAX, 0, 0, c->vocab, h);
	for (uint32_t layer = 0; layer < c->n_layers; layer++) {
		push_attention(&l, c, layer);
		if (moem_layer_is_moe(c, layer)) {
			push_named(&l, c, MOEM_TR_ROUTER, layer, 0, 0, c->n_experts, h);
			for (uint32_t e = 0; e < c->n_experts && with_ffn; e++)
				push_ffn(&l, c, MOEM_TR_EXPERT, layer, e);
			if (c->n_shared && with_ffn)
				push_ffn(&l, c, MOEM_TR_SHARED, layer, 0);
		} else if (with_ffn) {
			push_ffn(&l, c, MOEM_TR_DENSE, layer, 0);
		}
		push_named(&l, c, MOEM_TR_INPUT_NORM, layer, 0, 0, h, 0);
		push_named(&l, c, MOEM_TR_POST_NORM, layer, 0, 0, h, 0);
	}
	push_named(&l, c, MOEM_TR_FINAL_NORM, UINT32_MAX, 0, 0, h, 0);
	if (!c->tie_embeddings)
		push_named(&l, c, MOEM_TR_LM_HEAD, UINT32_MAX, 0, 0, c->vocab, h);
	if (l.err) {
		free(l.s);
		return l.err;
	}
	*out = l.s;
	*n = l.n;
	return 0;
}
