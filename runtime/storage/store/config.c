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
	return 0;
}

static int parse_olmoe(struct json_object *o, struct moem_model_config *c)
{
	REQ(moem_store_json_u32(o, "num_experts", true, W, &c->n_experts));
	REQ(moem_store_json_u32(o, "num_experts_per_tok", true, W, &c->top_k));
	REQ(moem_store_json_u32(o, "intermediate_size", true, W, &c->moe_inter));
	OPT(moem_store_json_bool(o, "norm_topk_prob", false, W, &c->norm_topk_prob));
	return 0;
}

static int parse_deepseek(struct json_object *o, struct moem_model_config *c)
{
	struct json_object *q;
	const char *s;
	uint32_t freq = 1;
	int ret;

	REQ(moem_store_json_u32(o, "n_routed_experts", true, W, &c->n_experts));
	REQ(moem_store_json_u32(o, "num_experts_per_tok", true, W, &c->top_k));
	REQ(moem_store_json_u32(o, "moe_intermediate_size", true, W, &c->moe_inter));
	OPT(moem_store_json_u32(o, "intermediate_size", false, W, &c->dense_inter));
	OPT(moem_store_json_u32(o, "n_shared_experts", false, W, &c->n_shared));
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
	if (!ret && strcmp(s, "greedy"))
		return moem_errf(EINVAL,
				 W ": deepseek_v2 topk_method \"%.40s\" is not supported (moem "
				   "routes with \"greedy\" top-k only)",
				 s);
	ret = moem_store_json_str(o, "scoring_func", false, W, &s);
	if (ret && ret != -ENOENT)
		return ret;
	if (!ret && strcmp(s, "softmax"))
		return moem_errf(EINVAL,
				 W ": deepseek_v2 scoring_func \"%.40s\" is not supported "
				   "(softmax)",
				 s);
	/* q_lora_rank: null means a plain q_proj (V2-Lite). */
	if (!json_object_object_get_ex(o, "q_lora_rank", &q))
		return moem_errf(EINVAL,
				 W ": missing \"q_lora_rank\" (deepseek_v2; null for none)");
	if (q)
		REQ(moem_store_json_u32(o, "q_lora_rank", true, W, &c->q_lora_rank));
	REQ(moem_store_json_u32(o, "kv_lora_rank", true, W, &c->kv_lora_rank));
	REQ(moem_store_json_u32(o, "qk_nope_head_dim", true, W, &c->qk_nope_dim));
	REQ(moem_store_json_u32(o, "qk_rope_head_dim", true, W, &c->qk_rope_dim));
	REQ(moem_store_json_u32(o, "v_head_dim", true, W, &c->v_head_dim));
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
	c->n_kv_heads = c->n_heads;
	OPT(moem_store_json_u32(o, "num_key_value_heads", false, W, &c->n_kv_heads));
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
