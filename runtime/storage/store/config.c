// SPDX-License-Identifier: GPL-2.0-only
/*
 * config.json -> struct moem_model_config, per architecture
 * (Documentation/checkpoints.md lists the fields read). Fields that define
 * the MoE shape are required; the rest default as the transformers config
 * class of that architecture does.
 */
#include <errno.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/route.h>
#include <moem/store.h>

#include "store_int.h"

#define W "config.json"

/* Optional fields: -ENOENT keeps the default already in *out. */
#define OPT(call)                        \
	do {                             \
		int r_ = (call);         \
		if (r_ && r_ != -ENOENT) \
			return r_;       \
	} while (0)
#define REQ(call)                  \
	do {                       \
		int r_ = (call);   \
		if (r_)            \
			return r_; \
	} while (0)

static int opt_f32(struct json_object *o, const char *key, float *out)
{
	double d;
	int ret = moem_store_json_f64(o, key, false, W, &d);

	if (!ret && !(d >= -FLT_MAX && d <= FLT_MAX))
		return moem_errf(EINVAL, W ": \"%s\" = %g does not fit a float", key, d);
	if (!ret)
		*out = (float)d;
	return ret;
}

static int parse_dtype(struct json_object *o, struct moem_model_config *c)
{
	static const char *const names[] = {"bfloat16", "float16", "float32"};
	const char *s;
	int ret;

	ret = moem_store_json_str(o, "torch_dtype", false, W, &s);
	if (ret == -ENOENT)
		ret = moem_store_json_str(o, "dtype", false, W, &s);
	if (ret == -ENOENT) {
		c->dtype = MOEM_DTYPE_BF16;
		return 0;
	}
	if (ret)
		return ret;
	for (int i = 0; i < MOEM_DTYPE_NR; i++) {
		if (!strcmp(s, names[i])) {
			c->dtype = (enum moem_dtype)i;
			return 0;
		}
	}
	return moem_errf(EINVAL,
			 W ": torch_dtype \"%.32s\" not supported (bfloat16, float16, "
			   "float32)",
			 s);
}

static int set_layers(struct moem_model_config *c, uint32_t layer, const char *field)
{
	if (layer >= c->n_layers)
		return moem_errf(EINVAL, W ": %s lists layer %u of %u", field, layer, c->n_layers);
	c->dense_mask[layer / 64] |= 1ULL << (layer % 64);
	return 0;
}

/* A boolean option moem does not implement: absent, null or false only. */
static int refuse_true(struct json_object *o, const char *key, const char *why)
{
	bool v = false;
	int ret = moem_store_json_bool(o, key, false, W, &v);

	if (ret && ret != -ENOENT)
		return ret;
	if (v)
		return moem_errf(EINVAL, W ": \"%s\": true is not implemented (%s)", key, why);
	return 0;
}

/* A field moem does not implement: absent or null only. */
static int refuse_present(struct json_object *o, const char *key, const char *why)
{
	struct json_object *v;

	if (json_object_object_get_ex(o, key, &v) && v)
		return moem_errf(EINVAL, W ": \"%s\" is not implemented (%s)", key, why);
	return 0;
}

/*
 * rope_scaling (transformers 4) or rope_parameters (transformers 5, which
 * also carries rope_theta): no scaling, or deepseek_v2's YaRN with
 * DeepSeek's defaults for absent fields. Any other kind is refused.
 */
static int parse_rope(struct json_object *o, struct moem_model_config *c)
{
	const char *field = "rope_parameters", *kind = NULL;
	struct json_object *r = NULL;
	struct moem_rope_yarn *y = &c->yarn;
	int ret;

	if (!json_object_object_get_ex(o, field, &r) || !r) {
		field = "rope_scaling";
		if (!json_object_object_get_ex(o, field, &r) || !r)
			return 0;
	}
	if (!json_object_is_type(r, json_type_object))
		return moem_errf(EINVAL, W ": \"%s\" must be an object or null", field);
	OPT(opt_f32(r, "rope_theta", &c->rope_theta));
	ret = moem_store_json_str(r, "rope_type", false, W, &kind);
	if (ret == -ENOENT)
		ret = moem_store_json_str(r, "type", false, W, &kind);
	if (ret == -ENOENT)
		return moem_errf(EINVAL, W ": \"%s\" has no \"rope_type\"", field);
	if (ret)
		return ret;
	if (!strcmp(kind, "default"))
		return 0;
	if (strcmp(kind, "yarn") || c->arch != MOEM_ARCH_DEEPSEEK_V2)
		return moem_errf(EINVAL,
				 W ": %s type \"%.32s\" is not implemented for %s (moem decodes "
				   "unscaled RoPE, and deepseek_v2's yarn)",
				 field, kind, moem_arch_name(c->arch));
	c->rope_kind = MOEM_ROPE_YARN;
	*y = (struct moem_rope_yarn){
		.orig_max_pos = 4096, .beta_fast = 32, .beta_slow = 1, .mscale = 1};
	REQ(opt_f32(r, "factor", &y->factor));
	OPT(moem_store_json_u32(r, "original_max_position_embeddings", false, W, &y->orig_max_pos));
	OPT(opt_f32(r, "beta_fast", &y->beta_fast));
	OPT(opt_f32(r, "beta_slow", &y->beta_slow));
	OPT(opt_f32(r, "mscale", &y->mscale));
	OPT(opt_f32(r, "mscale_all_dim", &y->mscale_all_dim));
	if (!(y->factor >= 1 && y->factor <= 1e4) || !y->orig_max_pos ||
	    !(y->beta_fast > 0 && y->beta_fast < 1e4) ||
	    !(y->beta_slow > 0 && y->beta_slow < 1e4) || !(y->mscale >= 0 && y->mscale < 100) ||
	    !(y->mscale_all_dim >= 0 && y->mscale_all_dim < 100))
		return moem_errf(EINVAL, W ": %s yarn values out of range", field);
	return 0;
}

/* eos_token_id: an id, a list of ids, or null. */
int moem_store_parse_eos(struct json_object *o, const char *what, struct moem_model_config *c)
{
	struct json_object *v;
	uint64_t id;

	if (!json_object_object_get_ex(o, "eos_token_id", &v))
		return -ENOENT;
	c->n_eos = 0; /* null: none */
	if (!v)
		return 0;
	if (json_object_is_type(v, json_type_array)) {
		size_t n = json_object_array_length(v);

		if (n > MOEM_MAX_EOS)
			return moem_errf(EINVAL, "%s: eos_token_id lists %zu ids, moem keeps %d",
					 what, n, MOEM_MAX_EOS);
		for (size_t i = 0; i < n; i++) {
			if (moem_store_json_as_u64(json_object_array_get_idx(v, i), &id) ||
			    id > INT32_MAX)
				return moem_errf(EINVAL, "%s: eos_token_id[%zu] is not a token id",
						 what, i);
			c->eos[c->n_eos++] = (int32_t)id;
		}
		return 0;
	}
	if (moem_store_json_as_u64(v, &id) || id > INT32_MAX)
		return moem_errf(EINVAL, "%s: eos_token_id is not a token id", what);
	c->eos[c->n_eos++] = (int32_t)id;
	return 0;
}

static int parse_qwen3(struct json_object *o, struct moem_model_config *c)
{
	struct json_object *only;

	REQ(moem_store_json_u32(o, "num_experts", true, W, &c->n_experts));
	REQ(moem_store_json_u32(o, "num_experts_per_tok", true, W, &c->top_k));
	REQ(moem_store_json_u32(o, "moe_intermediate_size", true, W, &c->moe_inter));
	OPT(moem_store_json_u32(o, "intermediate_size", false, W, &c->dense_inter));
	c->sparse_step = 1;
	OPT(moem_store_json_u32(o, "decoder_sparse_step", false, W, &c->sparse_step));
	if (!c->sparse_step)
		return moem_errf(EINVAL, W ": decoder_sparse_step must be at least 1");
	OPT(moem_store_json_bool(o, "norm_topk_prob", false, W, &c->norm_topk_prob));
	REQ(refuse_true(o, "attention_bias", "projections without bias"));
	REQ(refuse_true(o, "use_sliding_window", "qwen3_moe attends the whole context"));
	if (json_object_object_get_ex(o, "mlp_only_layers", &only) && only) {
		if (!json_object_is_type(only, json_type_array))
			return moem_errf(EINVAL, W ": mlp_only_layers must be an array");
		for (size_t i = 0; i < json_object_array_length(only); i++) {
			uint64_t l;

			if (moem_store_json_as_u64(json_object_array_get_idx(only, i), &l) ||
			    l > UINT32_MAX)
				return moem_errf(EINVAL, W ": mlp_only_layers[%zu] is not a layer",
						 i);
			REQ(set_layers(c, (uint32_t)l, "mlp_only_layers"));
		}
	}
	return 0;
}

static int parse_mixtral(struct json_object *o, struct moem_model_config *c)
{
	REQ(moem_store_json_u32(o, "num_local_experts", true, W, &c->n_experts));
	REQ(moem_store_json_u32(o, "num_experts_per_tok", true, W, &c->top_k));
	REQ(moem_store_json_u32(o, "intermediate_size", true, W, &c->moe_inter));
	/* MixtralSparseMoeBlock always renormalises the top-k weights. */
	c->norm_topk_prob = true;
	OPT(moem_store_json_u32(o, "sliding_window", false, W, &c->sliding_window));
	return 0;
}

static int parse_olmoe(struct json_object *o, struct moem_model_config *c)
{
	REQ(moem_store_json_u32(o, "num_experts", true, W, &c->n_experts));
	REQ(moem_store_json_u32(o, "num_experts_per_tok", true, W, &c->top_k));
	REQ(moem_store_json_u32(o, "intermediate_size", true, W, &c->moe_inter));
	OPT(moem_store_json_bool(o, "norm_topk_prob", false, W, &c->norm_topk_prob));
	REQ(refuse_true(o, "attention_bias", "projections without bias"));
	OPT(opt_f32(o, "clip_qkv", &c->clip_qkv));
	if (c->clip_qkv < 0 || !(c->clip_qkv < 1e30f))
		return moem_errf(EINVAL, W ": clip_qkv %g out of range", (double)c->clip_qkv);
	return 0;
}

static int parse_deepseek(struct json_object *o, struct moem_model_config *c)
{
	struct json_object *q = NULL;
	const char *s;
	uint32_t freq = 1;
	int ret;

	REQ(moem_store_json_u32(o, "n_routed_experts", true, W, &c->n_experts));
	REQ(moem_store_json_u32(o, "num_experts_per_tok", true, W, &c->top_k));
	REQ(moem_store_json_u32(o, "moe_intermediate_size", true, W, &c->moe_inter));
	OPT(moem_store_json_u32(o, "intermediate_size", false, W, &c->dense_inter));
	/* DeepseekV2Config's default, not 0: a config without it has two. */
	c->n_shared = 2;
	OPT(moem_store_json_u32(o, "n_shared_experts", false, W, &c->n_shared));
	REQ(refuse_true(o, "attention_bias", "projections without bias"));
	REQ(refuse_true(o, "mlp_bias", "MLPs without bias"));
	c->shared_inter = c->n_shared ? c->moe_inter : 0;
	OPT(moem_store_json_u32(o, "first_k_dense_replace", false, W, &c->first_dense));
	OPT(moem_store_json_u32(o, "moe_layer_freq", false, W, &freq));
	if (!freq)
		return moem_errf(EINVAL, W ": moe_layer_freq must be at least 1");
	OPT(opt_f32(o, "routed_scaling_factor", &c->routed_scaling));
	OPT(moem_store_json_bool(o, "norm_topk_prob", false, W, &c->norm_topk_prob));
	ret = moem_store_json_str(o, "topk_method", false, W, &s);
	if (ret && ret != -ENOENT)
		return ret;
	if (!ret && !strcmp(s, "group_limited_greedy")) {
		/* DeepSeek-V2 (236B), V2-Chat, V2.5: no class default to fall back on */
		REQ(moem_store_json_u32(o, "n_group", true, W, &c->n_group));
		REQ(moem_store_json_u32(o, "topk_group", true, W, &c->topk_group));
		const struct moem_route_cfg rc = moem_route_cfg_of(c);

		if ((ret = moem_route_groups_check(&rc)))
			return moem_err_prefix(-ret, W);
		if (!moem_route_grouped(&rc))
			c->n_group = c->topk_group = 0; /* every group allowed: plain top-k */
	} else if (!ret && strcmp(s, "greedy")) {
		return moem_errf(EINVAL,
				 W ": deepseek_v2 topk_method \"%.40s\" is not supported "
				   "(\"greedy\" or \"group_limited_greedy\")",
				 s);
	}
	ret = moem_store_json_str(o, "scoring_func", false, W, &s);
	if (ret && ret != -ENOENT)
		return ret;
	if (!ret && strcmp(s, "softmax"))
		return moem_errf(EINVAL,
				 W ": deepseek_v2 scoring_func \"%.40s\" is not supported "
				   "(softmax)",
				 s);
	/* q_lora_rank: null means a plain q_proj (V2-Lite); absent, the class default. */
	c->q_lora_rank = 1536;
	if (json_object_object_get_ex(o, "q_lora_rank", &q))
		c->q_lora_rank = 0;
	if (q)
		REQ(moem_store_json_u32(o, "q_lora_rank", true, W, &c->q_lora_rank));
	c->kv_lora_rank = 512;
	c->qk_nope_dim = 128;
	c->qk_rope_dim = 64;
	c->v_head_dim = 128;
	OPT(moem_store_json_u32(o, "kv_lora_rank", false, W, &c->kv_lora_rank));
	OPT(moem_store_json_u32(o, "qk_nope_head_dim", false, W, &c->qk_nope_dim));
	OPT(moem_store_json_u32(o, "qk_rope_head_dim", false, W, &c->qk_rope_dim));
	OPT(moem_store_json_u32(o, "v_head_dim", false, W, &c->v_head_dim));
	if (c->qk_rope_dim % 2)
		return moem_errf(EINVAL, W ": qk_rope_head_dim %u is odd", c->qk_rope_dim);
	/* moe_layer_freq: layer l >= first_k_dense_replace is MoE iff l % freq == 0. */
	for (uint32_t l = c->first_dense; l < c->n_layers && freq > 1; l++)
		if (l % freq)
			REQ(set_layers(c, l, "moe_layer_freq"));
	return 0;
}

/* The store's limits beyond moem_model_config_validate(): names and shapes. */
static int check_shapes(const struct moem_model_config *c)
{
	const uint32_t lim = 1u << 20;

	if (c->arch == MOEM_ARCH_DEEPSEEK_V2 && c->head_dim != c->qk_nope_dim + c->qk_rope_dim)
		return moem_errf(EINVAL, W ": deepseek_v2 head_dim must be qk_nope + qk_rope");
	if (c->sparse_step < 1)
		return moem_errf(EINVAL, W ": decoder_sparse_step must be at least 1");
	if (c->n_shared && c->arch != MOEM_ARCH_DEEPSEEK_V2)
		return moem_errf(EINVAL, W ": only deepseek_v2 has shared experts");
	if (!c->vocab || c->vocab > (1u << 24))
		return moem_errf(EINVAL, W ": vocab_size %u out of range 1..%u", c->vocab,
				 1u << 24);
	if (!c->n_heads || c->n_heads > 4096)
		return moem_errf(EINVAL, W ": num_attention_heads %u out of range 1..4096",
				 c->n_heads);
	if (!c->n_kv_heads || c->n_kv_heads > c->n_heads || c->n_heads % c->n_kv_heads)
		return moem_errf(EINVAL, W ": num_key_value_heads %u must divide %u heads",
				 c->n_kv_heads, c->n_heads);
	if (!c->head_dim || c->head_dim > 4096)
		return moem_errf(EINVAL, W ": head_dim %u out of range 1..4096", c->head_dim);
	if (c->arch == MOEM_ARCH_DEEPSEEK_V2 &&
	    (!c->kv_lora_rank || c->kv_lora_rank > lim || c->q_lora_rank > lim || !c->qk_rope_dim ||
	     c->qk_rope_dim > 4096 || c->qk_nope_dim > 4096 || !c->v_head_dim ||
	     c->v_head_dim > 4096))
		return moem_errf(EINVAL, W ": deepseek_v2 attention ranks out of range");
	if (c->dense_inter > 262144)
		return moem_errf(EINVAL, W ": intermediate_size %u out of range", c->dense_inter);
	if (!(c->rope_theta > 0))
		return moem_errf(EINVAL, W ": rope_theta must be positive");
	/* 0: a pack of format 1.0, which did not record it. */
	if (c->max_pos == 1 || c->max_pos > (1u << 24))
		return moem_errf(EINVAL, W ": max_position_embeddings %u out of range 2..%u",
				 c->max_pos, 1u << 24);
	if (c->clip_qkv < 0 || c->sliding_window > (1u << 24) || c->n_eos > MOEM_MAX_EOS ||
	    (unsigned int)c->rope_kind > MOEM_ROPE_YARN)
		return moem_errf(EINVAL, W ": attention options out of range");
	if (c->arch != MOEM_ARCH_DEEPSEEK_V2 && c->head_dim % 2)
		return moem_errf(EINVAL, W ": head_dim %u is odd (RoPE rotates pairs)",
				 c->head_dim);
	if ((uint64_t)c->n_shared * c->shared_inter > 262144)
		return moem_errf(EINVAL, W ": shared experts %u x %u too wide", c->n_shared,
				 c->shared_inter);
	return 0;
}

int moem_config_from_json(struct json_object *o, struct moem_model_config *c)
{
	const char *type, *act;
	int ret;

	memset(c, 0, sizeof(*c));
	if (!json_object_is_type(o, json_type_object))
		return moem_errf(EINVAL, W ": not a JSON object");
	REQ(moem_store_json_str(o, "model_type", true, W, &type));
	ret = moem_arch_parse(type, &c->arch);
	if (ret)
		return moem_err_prefix(-ret, W);
	REQ(parse_dtype(o, c));
	REQ(moem_store_json_u32(o, "hidden_size", true, W, &c->hidden));
	REQ(moem_store_json_u32(o, "num_hidden_layers", true, W, &c->n_layers));
	if (!c->n_layers || c->n_layers > MOEM_MAX_LAYERS)
		return moem_errf(EINVAL, W ": num_hidden_layers %u out of range 1..%u", c->n_layers,
				 MOEM_MAX_LAYERS);
	REQ(moem_store_json_u32(o, "vocab_size", true, W, &c->vocab));
	REQ(moem_store_json_u32(o, "num_attention_heads", true, W, &c->n_heads));
	/* The config classes' defaults: qwen3_moe 4, mixtral 8, else all heads. */
	c->n_kv_heads = c->arch == MOEM_ARCH_QWEN3_MOE ? 4
			: c->arch == MOEM_ARCH_MIXTRAL ? 8
						       : c->n_heads;
	OPT(moem_store_json_u32(o, "num_key_value_heads", false, W, &c->n_kv_heads));
	{
		static const uint32_t max_pos[MOEM_ARCH_NR] = {32768, 131072, 4096, 2048};
		static const int32_t eos[MOEM_ARCH_NR] = {-1, 2, 50279, 2};

		c->max_pos = max_pos[c->arch];
		if (eos[c->arch] >= 0) {
			c->eos[0] = eos[c->arch];
			c->n_eos = 1;
		}
	}
	OPT(moem_store_json_u32(o, "max_position_embeddings", false, W, &c->max_pos));
	if (c->max_pos < 2)
		return moem_errf(EINVAL, W ": max_position_embeddings %u out of range", c->max_pos);
	OPT(moem_store_parse_eos(o, W, c));
	REQ(refuse_present(o, "quantization_config", "moem packs bf16/f16/f32 checkpoints"));
	c->head_dim = c->n_heads ? c->hidden / c->n_heads : 0;
	OPT(moem_store_json_u32(o, "head_dim", false, W, &c->head_dim));
	ret = moem_store_json_str(o, "hidden_act", false, W, &act);
	if (ret && ret != -ENOENT)
		return ret;
	if (!ret && strcmp(act, "silu"))
		return moem_errf(EINVAL, W ": hidden_act \"%.32s\" not supported (silu)", act);
	c->routed_scaling = 1.0f;
	c->sparse_step = 1;
	c->rope_theta = c->arch == MOEM_ARCH_MIXTRAL ? 1e6f : 10000.0f;
	c->rms_eps =
		c->arch == MOEM_ARCH_QWEN3_MOE || c->arch == MOEM_ARCH_DEEPSEEK_V2 ? 1e-6f : 1e-5f;
	OPT(opt_f32(o, "rms_norm_eps", &c->rms_eps));
	OPT(opt_f32(o, "rope_theta", &c->rope_theta));
	OPT(moem_store_json_bool(o, "tie_word_embeddings", false, W, &c->tie_embeddings));
	switch (c->arch) {
	case MOEM_ARCH_QWEN3_MOE:
		ret = parse_qwen3(o, c);
		break;
	case MOEM_ARCH_MIXTRAL:
		ret = parse_mixtral(o, c);
		break;
	case MOEM_ARCH_OLMOE:
		ret = parse_olmoe(o, c);
		break;
	default:
		ret = parse_deepseek(o, c);
		if (!ret)
			c->head_dim = c->qk_nope_dim + c->qk_rope_dim;
		break;
	}
	if (!ret)
		ret = parse_rope(o, c);
	if (ret)
		return ret;
	return moem_store_config_check(c);
}

int moem_store_config_check(const struct moem_model_config *c)
{
	int ret = moem_model_config_validate(c); /* its messages start "config: " */

	if (ret)
		return ret;
	return check_shapes(c);
}

int moem_config_parse(const char *buf, size_t len, struct moem_model_config *c)
{
	struct json_object *o;
	int ret;

	ret = moem_store_json_parse(buf, len, 16, W, &o);
	if (ret)
		return ret;
	ret = moem_config_from_json(o, c);
	json_object_put(o);
	return ret;
}

int moem_config_load(const char *path, struct moem_model_config *c)
{
	size_t len;
	char *buf;
	int ret;

	ret = moem_store_read_file(path, STORE_JSON_MAX, &buf, &len);
	if (ret)
		return ret;
	ret = moem_config_parse(buf, len, c);
	free(buf);
	return ret;
}
