// SPDX-License-Identifier: GPL-2.0-only
/*
 * struct moem_model_config -> the config.json transformers would write
 * (keys sorted, floats in Python's shortest repr), for mkmodel.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/store.h>

/* Python repr() of a float32 value widened to double: shortest digits. */
static struct json_object *new_float(float v)
{
	char buf[48];
	int p, exp10;

	for (p = 1; p < 17; p++) {
		snprintf(buf, sizeof(buf), "%.*e", p - 1, (double)v);
		if ((float)strtod(buf, NULL) == v)
			break;
	}
	exp10 = atoi(strchr(buf, 'e') + 1);
	if (exp10 < -4 || exp10 >= 16) {
		/* "1e-06" as Python writes it: C's %e gives the same exponent form. */
		snprintf(buf, sizeof(buf), "%.*e", p - 1, (double)v);
	} else {
		int dec = p - 1 - exp10;

		snprintf(buf, sizeof(buf), "%.*f", dec > 0 ? dec : 1, (double)v);
	}
	return json_object_new_double_s((double)v, buf);
}

static void add_u(struct json_object *o, const char *k, uint64_t v)
{
	json_object_object_add(o, k, json_object_new_uint64(v));
}

static void add_b(struct json_object *o, const char *k, bool v)
{
	json_object_object_add(o, k, json_object_new_boolean(v));
}

static void add_s(struct json_object *o, const char *k, const char *v)
{
	json_object_object_add(o, k, json_object_new_string(v));
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Rebuild o with its keys sorted (transformers writes sort_keys=True). */
static struct json_object *sorted(struct json_object *o)
{
	size_t n = (size_t)json_object_object_length(o), i = 0;
	const char **keys = malloc(sizeof(char *) * (n ? n : 1));
	struct json_object *s = json_object_new_object();

	if (!keys || !s) {
		free(keys);
		json_object_put(s);
		return NULL;
	}
	json_object_object_foreach(o, key, val)
	{
		(void)val;
		keys[i++] = key;
	}
	qsort(keys, n, sizeof(char *), cmp_str);
	for (i = 0; i < n; i++) {
		struct json_object *v = json_object_object_get(o, keys[i]);

		json_object_object_add(s, keys[i], json_object_get(v));
	}
	free(keys);
	return s;
}

static int dense_list(const struct moem_model_config *c, struct json_object *o)
{
	struct json_object *a = json_object_new_array();

	if (!a)
		return -ENOMEM;
	for (uint32_t l = 0; l < c->n_layers; l++)
		if ((c->dense_mask[l / 64] >> (l % 64)) & 1)
			json_object_array_add(a, json_object_new_uint64(l));
	json_object_object_add(o, "mlp_only_layers", a);
	return 0;
}

static bool has_mask(const struct moem_model_config *c)
{
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(c->dense_mask); i++)
		if (c->dense_mask[i])
			return true;
	return false;
}

static int fill_arch(const struct moem_model_config *c, struct json_object *o)
{
	struct json_object *arch = json_object_new_array();
	static const char *const cls[MOEM_ARCH_NR] = {
		[MOEM_ARCH_QWEN3_MOE] = "Qwen3MoeForCausalLM",
		[MOEM_ARCH_MIXTRAL] = "MixtralForCausalLM",
		[MOEM_ARCH_OLMOE] = "OlmoeForCausalLM",
		[MOEM_ARCH_DEEPSEEK_V2] = "DeepseekV2ForCausalLM",
	};

	if (!arch)
		return -ENOMEM;
	json_object_array_add(arch, json_object_new_string(cls[c->arch]));
	json_object_object_add(o, "architectures", arch);
	/* n_heads 0 is refused when the JSON is read back; written, head_dim says it */
	if (c->arch != MOEM_ARCH_DEEPSEEK_V2 &&
	    (!c->n_heads || c->head_dim != c->hidden / c->n_heads))
		add_u(o, "head_dim", c->head_dim);
	switch (c->arch) {
	case MOEM_ARCH_QWEN3_MOE:
		if (c->first_dense || c->n_shared || c->routed_scaling != 1.0f)
			return moem_errf(EINVAL, "qwen3_moe has no dense-first layers, shared "
						 "experts or routed scaling");
		add_u(o, "head_dim", c->head_dim);
		add_u(o, "num_experts", c->n_experts);
		add_u(o, "moe_intermediate_size", c->moe_inter);
		add_u(o, "intermediate_size", c->dense_inter ? c->dense_inter : 4 * c->hidden);
		add_u(o, "decoder_sparse_step", c->sparse_step ? c->sparse_step : 1);
		add_b(o, "norm_topk_prob", c->norm_topk_prob);
		add_b(o, "attention_bias", false);
		add_b(o, "output_router_logits", false);
		json_object_object_add(o, "router_aux_loss_coef", new_float(0.001f));
		add_b(o, "use_sliding_window", false);
		json_object_object_add(o, "sliding_window", NULL);
		json_object_object_add(o, "rope_scaling", NULL);
		return dense_list(c, o);
	case MOEM_ARCH_MIXTRAL:
	case MOEM_ARCH_OLMOE:
		if (has_mask(c) || c->first_dense || c->n_shared || c->sparse_step > 1 ||
		    c->routed_scaling != 1.0f)
			return moem_errf(EINVAL, "%s has neither dense layers nor shared experts",
					 moem_arch_name(c->arch));
		add_u(o, c->arch == MOEM_ARCH_MIXTRAL ? "num_local_experts" : "num_experts",
		      c->n_experts);
		add_u(o, "intermediate_size", c->moe_inter);
		json_object_object_add(o, "router_aux_loss_coef",
				       new_float(c->arch == MOEM_ARCH_MIXTRAL ? 0.02f : 0.01f));
		add_b(o, "output_router_logits", false);
		if (c->arch == MOEM_ARCH_MIXTRAL) {
			if (!c->norm_topk_prob)
				return moem_errf(EINVAL, "mixtral always renormalises top-k");
			if (c->sliding_window)
				add_u(o, "sliding_window", c->sliding_window);
			else
				json_object_object_add(o, "sliding_window", NULL);
		} else {
			add_b(o, "norm_topk_prob", c->norm_topk_prob);
			add_b(o, "attention_bias", false);
			if (c->clip_qkv > 0)
				json_object_object_add(o, "clip_qkv", new_float(c->clip_qkv));
			else
				json_object_object_add(o, "clip_qkv", NULL);
		}
		return 0;
	default:
		if (has_mask(c) || c->sparse_step > 1 ||
		    (c->n_shared && c->shared_inter != c->moe_inter))
			return moem_errf(EINVAL,
					 "deepseek_v2: only first_k_dense_replace dense "
					 "layers and shared experts as wide as routed ones");
		add_u(o, "n_routed_experts", c->n_experts);
		add_u(o, "n_shared_experts", c->n_shared);
		add_u(o, "moe_intermediate_size", c->moe_inter);
		add_u(o, "intermediate_size", c->dense_inter ? c->dense_inter : 4 * c->hidden);
		add_u(o, "first_k_dense_replace", c->first_dense);
		add_u(o, "moe_layer_freq", 1);
		json_object_object_add(o, "routed_scaling_factor", new_float(c->routed_scaling));
		add_b(o, "norm_topk_prob", c->norm_topk_prob);
		add_s(o, "topk_method", c->n_group ? "group_limited_greedy" : "greedy");
		add_s(o, "scoring_func", "softmax");
		add_u(o, "n_group", c->n_group ? c->n_group : 1);
		add_u(o, "topk_group", c->n_group ? c->topk_group : 1);
		json_object_object_add(o, "aux_loss_alpha", new_float(0.001f));
		add_b(o, "seq_aux", true);
		if (c->q_lora_rank)
			add_u(o, "q_lora_rank", c->q_lora_rank);
		else
			json_object_object_add(o, "q_lora_rank", NULL);
		add_u(o, "kv_lora_rank", c->kv_lora_rank);
		add_u(o, "qk_nope_head_dim", c->qk_nope_dim);
		add_u(o, "qk_rope_head_dim", c->qk_rope_dim);
		add_u(o, "v_head_dim", c->v_head_dim);
		add_b(o, "attention_bias", false);
		return 0;
	}
}

/* rope_scaling as DeepSeek's configs write YaRN, or null. */
static int add_rope(const struct moem_model_config *c, struct json_object *o)
{
	struct json_object *r;

	if (c->rope_kind != MOEM_ROPE_YARN) {
		json_object_object_add(o, "rope_scaling", NULL);
		return 0;
	}
	r = json_object_new_object();
	if (!r)
		return -ENOMEM;
	add_s(r, "type", "yarn");
	json_object_object_add(r, "factor", new_float(c->yarn.factor));
	add_u(r, "original_max_position_embeddings", c->yarn.orig_max_pos);
	json_object_object_add(r, "beta_fast", new_float(c->yarn.beta_fast));
	json_object_object_add(r, "beta_slow", new_float(c->yarn.beta_slow));
	json_object_object_add(r, "mscale", new_float(c->yarn.mscale));
	json_object_object_add(r, "mscale_all_dim", new_float(c->yarn.mscale_all_dim));
	json_object_object_add(o, "rope_scaling", r);
	return 0;
}

static int add_eos(const struct moem_model_config *c, struct json_object *o)
{
	struct json_object *a;

	if (c->n_eos == 1) {
		add_u(o, "eos_token_id", (uint64_t)c->eos[0]);
		return 0;
	}
	if (!c->n_eos) {
		json_object_object_add(o, "eos_token_id", NULL);
		return 0;
	}
	a = json_object_new_array();
	if (!a)
		return -ENOMEM;
	for (uint32_t i = 0; i < c->n_eos; i++)
		json_object_array_add(a, json_object_new_uint64((uint64_t)c->eos[i]));
	json_object_object_add(o, "eos_token_id", a);
	return 0;
}

int moem_config_to_json(const struct moem_model_config *c, struct json_object **out)
{
	static const char *const dtypes[MOEM_DTYPE_NR] = {"bfloat16", "float16", "float32"};
	struct json_object *o;
	int ret;

	*out = NULL;
	ret = moem_model_config_validate(c);
	if (ret)
		return ret;
	o = json_object_new_object();
	if (!o)
		return -ENOMEM;
	add_s(o, "model_type", moem_arch_name(c->arch));
	add_s(o, "torch_dtype", dtypes[c->dtype]);
	add_s(o, "hidden_act", "silu");
	add_u(o, "hidden_size", c->hidden);
	add_u(o, "num_hidden_layers", c->n_layers);
	add_u(o, "num_attention_heads", c->n_heads);
	add_u(o, "num_key_value_heads", c->n_kv_heads);
	add_u(o, "num_experts_per_tok", c->top_k);
	add_u(o, "vocab_size", c->vocab);
	add_u(o, "max_position_embeddings", c->max_pos ? c->max_pos : 4096);
	json_object_object_add(o, "rms_norm_eps", new_float(c->rms_eps));
	json_object_object_add(o, "rope_theta", new_float(c->rope_theta));
	json_object_object_add(o, "initializer_range", new_float(0.02f));
	json_object_object_add(o, "attention_dropout", new_float(0.0f));
	add_b(o, "tie_word_embeddings", c->tie_embeddings);
	add_b(o, "use_cache", true);
	ret = fill_arch(c, o);
	if (!ret && c->arch != MOEM_ARCH_QWEN3_MOE)
		ret = add_rope(c, o);
	if (!ret)
		ret = add_eos(c, o);
	if (ret) {
		json_object_put(o);
		return ret;
	}
	*out = sorted(o);
	json_object_put(o);
	return *out ? 0 : -ENOMEM;
}
