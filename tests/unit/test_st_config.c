// SPDX-License-Identifier: GPL-2.0-only
/*
 * config.json per architecture (the real configs of Qwen3-30B-A3B,
 * Mixtral-8x7B, OLMoE-1B-7B and DeepSeek-V2-Lite), refusals with messages
 * naming the field, the config.json writer's round trip, and tensor names.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/store.h>

#include "kselftest_harness.h"
#include "store_test_util.h"

static const char qwen3[] =
	"{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"attention_bias\":false,"
	"\"attention_dropout\":0.0,\"bos_token_id\":151643,\"decoder_sparse_step\":1,"
	"\"eos_token_id\":151645,\"head_dim\":128,\"hidden_act\":\"silu\",\"hidden_size\":2048,"
	"\"initializer_range\":0.02,\"intermediate_size\":6144,\"max_position_embeddings\":40960,"
	"\"max_window_layers\":48,\"mlp_only_layers\":[],\"model_type\":\"qwen3_moe\","
	"\"moe_intermediate_size\":768,\"norm_topk_prob\":true,\"num_attention_heads\":32,"
	"\"num_experts\":128,\"num_experts_per_tok\":8,\"num_hidden_layers\":48,"
	"\"num_key_value_heads\":4,\"output_router_logits\":false,\"rms_norm_eps\":1e-06,"
	"\"rope_scaling\":null,\"rope_theta\":1000000.0,\"router_aux_loss_coef\":0.001,"
	"\"sliding_window\":null,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\","
	"\"transformers_version\":\"4.51.0\",\"use_cache\":true,\"use_sliding_window\":false,"
	"\"vocab_size\":151936}";

static const char mixtral[] =
	"{\"architectures\":[\"MixtralForCausalLM\"],\"attention_dropout\":0.0,"
	"\"bos_token_id\":1,\"eos_token_id\":2,\"hidden_act\":\"silu\",\"hidden_size\":4096,"
	"\"initializer_range\":0.02,\"intermediate_size\":14336,"
	"\"max_position_embeddings\":32768,\"model_type\":\"mixtral\","
	"\"num_attention_heads\":32,\"num_experts_per_tok\":2,\"num_hidden_layers\":32,"
	"\"num_key_value_heads\":8,\"num_local_experts\":8,\"output_router_logits\":false,"
	"\"rms_norm_eps\":1e-05,\"rope_theta\":1000000.0,\"router_aux_loss_coef\":0.02,"
	"\"sliding_window\":null,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\","
	"\"transformers_version\":\"4.36.0.dev0\",\"use_cache\":true,\"vocab_size\":32000}";

static const char olmoe[] =
	"{\"architectures\":[\"OlmoeForCausalLM\"],\"attention_bias\":false,"
	"\"attention_dropout\":0.0,\"clip_qkv\":null,\"eos_token_id\":50279,"
	"\"hidden_act\":\"silu\",\"hidden_size\":2048,\"initializer_range\":0.02,"
	"\"intermediate_size\":1024,\"max_position_embeddings\":4096,\"model_type\":\"olmoe\","
	"\"norm_topk_prob\":false,\"num_attention_heads\":16,\"num_experts\":64,"
	"\"num_experts_per_tok\":8,\"num_hidden_layers\":16,\"num_key_value_heads\":16,"
	"\"output_router_logits\":false,\"pad_token_id\":1,\"rms_norm_eps\":1e-05,"
	"\"rope_scaling\":null,\"rope_theta\":10000.0,\"router_aux_loss_coef\":0.01,"
	"\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"use_cache\":true,"
	"\"vocab_size\":50304}";

static const char deepseek[] =
	"{\"architectures\":[\"DeepseekV2ForCausalLM\"],\"attention_bias\":false,"
	"\"attention_dropout\":0.0,\"aux_loss_alpha\":0.001,\"bos_token_id\":100000,"
	"\"eos_token_id\":100001,\"first_k_dense_replace\":1,\"hidden_act\":\"silu\","
	"\"hidden_size\":2048,\"initializer_range\":0.02,\"intermediate_size\":10944,"
	"\"kv_lora_rank\":512,\"max_position_embeddings\":163840,\"model_type\":\"deepseek_v2\","
	"\"moe_intermediate_size\":1408,\"moe_layer_freq\":1,\"n_group\":1,"
	"\"n_routed_experts\":64,\"n_shared_experts\":2,\"norm_topk_prob\":false,"
	"\"num_attention_heads\":16,\"num_experts_per_tok\":6,\"num_hidden_layers\":27,"
	"\"num_key_value_heads\":16,\"pretraining_tp\":1,\"q_lora_rank\":null,"
	"\"qk_nope_head_dim\":128,\"qk_rope_head_dim\":64,\"rms_norm_eps\":1e-06,"
	"\"rope_scaling\":{\"beta_fast\":32,\"beta_slow\":1,\"factor\":40,\"mscale\":0.707,"
	"\"mscale_all_dim\":0.707,\"original_max_position_embeddings\":4096,\"type\":\"yarn\"},"
	"\"rope_theta\":10000,\"routed_scaling_factor\":1.0,\"scoring_func\":\"softmax\","
	"\"seq_aux\":true,\"tie_word_embeddings\":false,\"topk_group\":1,"
	"\"topk_method\":\"greedy\",\"torch_dtype\":\"bfloat16\",\"use_cache\":true,"
	"\"v_head_dim\":128,\"vocab_size\":102400}";

static int parse(const char *s, struct moem_model_config *c)
{
	moem_clear_error();
	return moem_config_parse(s, strlen(s), c);
}

/* s with the first occurrence of from replaced by to. */
static char *edit(const char *s, const char *from, const char *to)
{
	const char *at = strstr(s, from);
	char *r = malloc(strlen(s) + strlen(to) + 1);

	if (!at) {
		strcpy(r, s);
		return r;
	}
	memcpy(r, s, (size_t)(at - s));
	strcpy(r + (at - s), to);
	strcat(r, at + strlen(from));
	return r;
}

static int parse_edit(const char *s, const char *from, const char *to, struct moem_model_config *c)
{
	char *e = edit(s, from, to);
	int ret = parse(e, c);

	free(e);
	return ret;
}

TEST(qwen3_moe)
{
	struct moem_model_config c;

	ASSERT_EQ(0, parse(qwen3, &c));
	EXPECT_EQ(MOEM_ARCH_QWEN3_MOE, c.arch);
	EXPECT_EQ(2048u, c.hidden);
	EXPECT_EQ(48u, c.n_layers);
	EXPECT_EQ(128u, c.n_experts);
	EXPECT_EQ(8u, c.top_k);
	EXPECT_EQ(768u, c.moe_inter);
	EXPECT_EQ(6144u, c.dense_inter);
	EXPECT_TRUE(c.norm_topk_prob);
	EXPECT_EQ(48u, moem_n_moe_layers(&c));
	EXPECT_EQ(128u, c.head_dim);
	EXPECT_EQ(4u, c.n_kv_heads);
	EXPECT_EQ(1e-6f, c.rms_eps);
	EXPECT_EQ(MOEM_DTYPE_BF16, c.dtype);
	/* mlp_only_layers and decoder_sparse_step make dense layers */
	ASSERT_EQ(0, parse_edit(qwen3, "\"mlp_only_layers\":[]", "\"mlp_only_layers\":[0,5]", &c));
	EXPECT_FALSE(moem_layer_is_moe(&c, 0));
	EXPECT_FALSE(moem_layer_is_moe(&c, 5));
	EXPECT_EQ(46u, moem_n_moe_layers(&c));
	ASSERT_EQ(0,
		  parse_edit(qwen3, "\"decoder_sparse_step\":1", "\"decoder_sparse_step\":2", &c));
	EXPECT_FALSE(moem_layer_is_moe(&c, 0));
	EXPECT_TRUE(moem_layer_is_moe(&c, 1));
	EXPECT_EQ(-EINVAL,
		  parse_edit(qwen3, "\"mlp_only_layers\":[]", "\"mlp_only_layers\":[48]", &c));
	EXPECT_MSG("mlp_only_layers lists layer 48 of 48");
}

TEST(mixtral_olmoe)
{
	struct moem_model_config c;

	ASSERT_EQ(0, parse(mixtral, &c));
	EXPECT_EQ(MOEM_ARCH_MIXTRAL, c.arch);
	EXPECT_EQ(8u, c.n_experts);
	EXPECT_EQ(2u, c.top_k);
	EXPECT_EQ(14336u, c.moe_inter);
	EXPECT_TRUE(c.norm_topk_prob); /* always renormalised */
	EXPECT_EQ(128u, c.head_dim);   /* hidden / heads */
	ASSERT_EQ(0, parse(olmoe, &c));
	EXPECT_EQ(MOEM_ARCH_OLMOE, c.arch);
	EXPECT_EQ(64u, c.n_experts);
	EXPECT_EQ(1024u, c.moe_inter);
	EXPECT_FALSE(c.norm_topk_prob);
	EXPECT_EQ(16u, moem_n_moe_layers(&c));
}

TEST(deepseek_v2)
{
	struct moem_model_config c;

	ASSERT_EQ(0, parse(deepseek, &c));
	EXPECT_EQ(MOEM_ARCH_DEEPSEEK_V2, c.arch);
	EXPECT_EQ(64u, c.n_experts);
	EXPECT_EQ(6u, c.top_k);
	EXPECT_EQ(2u, c.n_shared);
	EXPECT_EQ(1408u, c.shared_inter);
	EXPECT_EQ(1u, c.first_dense);
	EXPECT_FALSE(moem_layer_is_moe(&c, 0));
	EXPECT_EQ(26u, moem_n_moe_layers(&c));
	EXPECT_EQ(0u, c.q_lora_rank);
	EXPECT_EQ(512u, c.kv_lora_rank);
	EXPECT_EQ(192u, c.head_dim);
	EXPECT_EQ(1.0f, c.routed_scaling);
	EXPECT_EQ(0u, c.n_group); /* "greedy": n_group 1 / topk_group 1 mean nothing */
	EXPECT_EQ(-EINVAL, parse_edit(deepseek, "\"greedy\"", "\"noaux_tc\"", &c));
	EXPECT_MSG("topk_method \"noaux_tc\" is not supported (\"greedy\" or "
		   "\"group_limited_greedy\")");
	EXPECT_EQ(-EINVAL, parse_edit(deepseek, "\"softmax\"", "\"sigmoid\"", &c));
	EXPECT_EQ(-EINVAL, parse_edit(deepseek, "\"softmax\"", "\"sigmoid\"", &c));
	EXPECT_MSG("scoring_func");
	ASSERT_EQ(0, parse_edit(deepseek, "\"q_lora_rank\":null", "\"q_lora_rank\":1536", &c));
	EXPECT_EQ(1536u, c.q_lora_rank);
	/* absent: DeepseekV2Config's default (1536), not "none" */
	ASSERT_EQ(0, parse_edit(deepseek, "\"q_lora_rank\":null,", "", &c));
	EXPECT_EQ(1536u, c.q_lora_rank);
	/* moe_layer_freq 2: odd layers are dense */
	ASSERT_EQ(0, parse_edit(deepseek, "\"moe_layer_freq\":1", "\"moe_layer_freq\":2", &c));
	EXPECT_TRUE(moem_layer_is_moe(&c, 2));
	EXPECT_FALSE(moem_layer_is_moe(&c, 3));
	EXPECT_EQ(13u, moem_n_moe_layers(&c));
	ASSERT_EQ(0, parse_edit(deepseek, "\"routed_scaling_factor\":1.0",
				"\"routed_scaling_factor\":16.0", &c));
	EXPECT_EQ(16.0f, c.routed_scaling);
}

/* DeepSeek-V2, V2-Chat, V2.5: "group_limited_greedy" with n_group / topk_group. */
TEST(deepseek_v2_group_limited)
{
	static const struct {
		const char *ng, *tg;
		int ret;
		uint32_t n_group, topk_group;
		const char *msg;
	} cases[] = {
		{"\"n_group\":8", "\"topk_group\":3", 0, 8, 3, NULL},
		{"\"n_group\":64", "\"topk_group\":6", 0, 64, 6, NULL},
		/* one group, or every group kept: plain top-k */
		{"\"n_group\":1", "\"topk_group\":1", 0, 0, 0, NULL},
		{"\"n_group\":4", "\"topk_group\":4", 0, 0, 0, NULL},
		{"\"n_group\":7", "\"topk_group\":3", -EINVAL, 0, 0, "n_group 7 must divide"},
		{"\"n_group\":8", "\"topk_group\":0", -EINVAL, 0, 0, "topk_group 0, want"},
		{"\"n_group\":8", "\"topk_group\":9", -EINVAL, 0, 0, "topk_group 9, want"},
		{"\"n_group\":32", "\"topk_group\":2", -EINVAL, 0, 0, "fewer than top_k 6"},
		{"\"n_group\":null", "\"topk_group\":3", -EINVAL, 0, 0, "n_group"},
		{"\"n_group\":8", "\"topk_group\":\"3\"", -EINVAL, 0, 0, "topk_group"},
	};
	struct moem_model_config c;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *a = edit(deepseek, "\"greedy\"", "\"group_limited_greedy\"");
		char *b = edit(a, "\"n_group\":1", cases[i].ng);
		char *d = edit(b, "\"topk_group\":1", cases[i].tg);

		EXPECT_EQ(cases[i].ret, parse(d, &c)) TH_LOG("case %zu: %s", i, moem_last_error());
		if (!cases[i].ret) {
			EXPECT_EQ(cases[i].n_group, c.n_group);
			EXPECT_EQ(cases[i].topk_group, c.topk_group);
		} else {
			EXPECT_NE(NULL, strstr(moem_last_error(), cases[i].msg))
			TH_LOG("case %zu: %s", i, moem_last_error());
		}
		free(a);
		free(b);
		free(d);
	}
	/* the groups are DeepSeek-V2's alone */
	c = (struct moem_model_config){0};
	ASSERT_EQ(0, parse(deepseek, &c));
	c.n_group = 8;
	c.topk_group = 3;
	EXPECT_EQ(0, moem_model_config_validate(&c));
	c.arch = MOEM_ARCH_QWEN3_MOE;
	EXPECT_EQ(-EINVAL, moem_model_config_validate(&c));
	EXPECT_MSG("only deepseek_v2 routes within expert groups");
}

TEST(decode_fields)
{
	struct moem_model_config c;

	ASSERT_EQ(0, parse(qwen3, &c));
	EXPECT_EQ(40960u, c.max_pos);
	EXPECT_EQ(1u, c.n_eos);
	EXPECT_EQ(151645, c.eos[0]);
	EXPECT_EQ(MOEM_ROPE_DEFAULT, c.rope_kind);
	EXPECT_EQ(0u, c.sliding_window);
	ASSERT_EQ(0, parse_edit(qwen3, "\"eos_token_id\":151645", "\"eos_token_id\":[7,9]", &c));
	EXPECT_EQ(2u, c.n_eos);
	EXPECT_EQ(9, c.eos[1]);
	/* transformers 5 carries rope_theta inside rope_parameters */
	ASSERT_EQ(0,
		  parse_edit(qwen3, "\"rope_scaling\":null",
			     "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":500.0}",
			     &c));
	EXPECT_EQ(500.0f, c.rope_theta);
	ASSERT_EQ(0, parse(mixtral, &c));
	EXPECT_EQ(0u, c.sliding_window);
	ASSERT_EQ(0, parse_edit(mixtral, "\"sliding_window\":null", "\"sliding_window\":4096", &c));
	EXPECT_EQ(4096u, c.sliding_window);
	ASSERT_EQ(0, parse_edit(olmoe, "\"clip_qkv\":null", "\"clip_qkv\":8.0", &c));
	EXPECT_EQ(8.0f, c.clip_qkv);
	ASSERT_EQ(0, parse(deepseek, &c));
	EXPECT_EQ(MOEM_ROPE_YARN, c.rope_kind);
	EXPECT_EQ(40.0f, c.yarn.factor);
	EXPECT_EQ(4096u, c.yarn.orig_max_pos);
	EXPECT_EQ(32.0f, c.yarn.beta_fast);
	EXPECT_EQ(1.0f, c.yarn.beta_slow);
	EXPECT_EQ(0.707f, c.yarn.mscale);
	EXPECT_EQ(0.707f, c.yarn.mscale_all_dim);
	EXPECT_EQ(163840u, c.max_pos);
}

/* A field left out takes the transformers config class's default. */
TEST(class_defaults)
{
	struct moem_model_config c;

	ASSERT_EQ(0, parse_edit(deepseek, "\"n_shared_experts\":2,", "", &c));
	EXPECT_EQ(2u, c.n_shared); /* DeepseekV2Config.n_shared_experts, not 0 */
	ASSERT_EQ(0, parse_edit(deepseek, "\"kv_lora_rank\":512,", "", &c));
	EXPECT_EQ(512u, c.kv_lora_rank);
	ASSERT_EQ(0, parse_edit(qwen3, "\"num_key_value_heads\":4,", "", &c));
	EXPECT_EQ(4u, c.n_kv_heads);
	ASSERT_EQ(0, parse_edit(mixtral, "\"num_key_value_heads\":8,", "", &c));
	EXPECT_EQ(8u, c.n_kv_heads);
	ASSERT_EQ(0, parse_edit(olmoe, "\"num_key_value_heads\":16,", "", &c));
	EXPECT_EQ(16u, c.n_kv_heads);
	ASSERT_EQ(0, parse_edit(olmoe, "\"max_position_embeddings\":4096,", "", &c));
	EXPECT_EQ(4096u, c.max_pos);
	ASSERT_EQ(0, parse_edit(mixtral, "\"eos_token_id\":2,", "", &c));
	EXPECT_EQ(1u, c.n_eos);
	EXPECT_EQ(2, c.eos[0]);
}

/* Options the decoder does not implement are refused, never ignored. */
TEST(unimplemented_fields_refused)
{
	struct moem_model_config c;

	EXPECT_EQ(-EINVAL, parse_edit(qwen3, "\"use_sliding_window\":false",
				      "\"use_sliding_window\":true", &c));
	EXPECT_MSG("\"use_sliding_window\": true is not implemented");
	EXPECT_EQ(-EINVAL,
		  parse_edit(olmoe, "\"attention_bias\":false", "\"attention_bias\":true", &c));
	EXPECT_MSG("\"attention_bias\"");
	EXPECT_EQ(-EINVAL,
		  parse_edit(qwen3, "\"rope_scaling\":null",
			     "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0}", &c));
	EXPECT_MSG("rope_scaling type \"yarn\" is not implemented for qwen3_moe");
	EXPECT_EQ(-EINVAL, parse_edit(deepseek, "\"type\":\"yarn\"", "\"type\":\"linear\"", &c));
	EXPECT_MSG("rope_scaling type \"linear\"");
	EXPECT_EQ(-EINVAL, parse_edit(mixtral, "\"use_cache\":true",
				      "\"quantization_config\":{\"quant_method\":\"fp8\"}", &c));
	EXPECT_MSG("\"quantization_config\" is not implemented");
	EXPECT_EQ(-EINVAL, parse_edit(olmoe, "\"clip_qkv\":null", "\"clip_qkv\":-1.0", &c));
	EXPECT_MSG("clip_qkv");
}

TEST(refusals_name_the_field)
{
	struct moem_model_config c;

	EXPECT_EQ(-EINVAL, parse_edit(qwen3, "\"num_experts\":128,", "", &c));
	EXPECT_MSG("missing \"num_experts\"");
	EXPECT_EQ(-EINVAL, parse_edit(qwen3, "\"num_experts\":128", "\"num_experts\":\"128\"", &c));
	EXPECT_MSG("\"num_experts\" must be a non-negative integer");
	EXPECT_EQ(-EINVAL, parse_edit(qwen3, "\"hidden_size\":2048", "\"hidden_size\":2048.0", &c));
	EXPECT_MSG("\"hidden_size\"");
	EXPECT_EQ(-EINVAL, parse_edit(qwen3, "\"num_experts_per_tok\":8",
				      "\"num_experts_per_tok\":129", &c));
	EXPECT_MSG("num_experts_per_tok");
	EXPECT_EQ(-EINVAL, parse_edit(qwen3, "\"qwen3_moe\"", "\"llama\"", &c));
	EXPECT_MSG("unknown architecture 'llama'");
	EXPECT_EQ(-EINVAL, parse_edit(qwen3, "\"silu\"", "\"gelu\"", &c));
	EXPECT_MSG("hidden_act \"gelu\" not supported");
	EXPECT_EQ(-EINVAL, parse_edit(qwen3, "\"bfloat16\"", "\"int8\"", &c));
	EXPECT_MSG("torch_dtype \"int8\"");
	EXPECT_EQ(-EINVAL,
		  parse_edit(qwen3, "\"num_key_value_heads\":4", "\"num_key_value_heads\":5", &c));
	EXPECT_MSG("num_key_value_heads 5");
	EXPECT_EQ(-EINVAL,
		  parse_edit(qwen3, "\"num_hidden_layers\":48", "\"num_hidden_layers\":99999", &c));
	EXPECT_MSG("num_hidden_layers");
	EXPECT_EQ(-EINVAL, parse("{\"model_type\":", &c));
	EXPECT_MSG("config.json");
	EXPECT_EQ(-EINVAL, parse("[]", &c));
	EXPECT_MSG("not a JSON object");
}

TEST(writer_round_trip)
{
	for (int p = 0; p < MOEM_PRESET_NR; p++) {
		struct moem_mkmodel_opts o;
		struct moem_model_config back;
		struct json_object *j;

		moem_mkmodel_defaults(&o, (enum moem_mkmodel_preset)p);
		o.cfg.dtype = MOEM_DTYPE_F16;
		ASSERT_EQ(0, moem_config_to_json(&o.cfg, &j));
		ASSERT_EQ(0, moem_config_from_json(j, &back));
		json_object_put(j);
		EXPECT_EQ(o.cfg.arch, back.arch);
		EXPECT_EQ(o.cfg.hidden, back.hidden);
		EXPECT_EQ(o.cfg.n_experts, back.n_experts);
		EXPECT_EQ(o.cfg.top_k, back.top_k);
		EXPECT_EQ(o.cfg.moe_inter, back.moe_inter);
		EXPECT_EQ(o.cfg.n_shared, back.n_shared);
		EXPECT_EQ(o.cfg.first_dense, back.first_dense);
		EXPECT_EQ(o.cfg.norm_topk_prob, back.norm_topk_prob);
		EXPECT_EQ(o.cfg.rms_eps, back.rms_eps);
		EXPECT_EQ(o.cfg.rope_theta, back.rope_theta);
		EXPECT_EQ(o.cfg.head_dim, back.head_dim);
		EXPECT_EQ(MOEM_DTYPE_F16, back.dtype);
		/* deepseek-v2 (236B): group-limited routing, scaling 16, q LoRA */
		EXPECT_EQ(o.cfg.n_group, back.n_group);
		EXPECT_EQ(o.cfg.topk_group, back.topk_group);
		EXPECT_EQ(o.cfg.routed_scaling, back.routed_scaling);
		EXPECT_EQ(o.cfg.q_lora_rank, back.q_lora_rank);
		EXPECT_EQ(p == MOEM_PRESET_DEEPSEEK_V2 ? 8u : 0u, back.n_group);
		if (o.cfg.arch == MOEM_ARCH_DEEPSEEK_V2) {
			/* group-limited routing written as DeepSeek-V2's config.json has it */
			o.cfg.n_group = 8;
			o.cfg.topk_group = 3;
			ASSERT_EQ(0, moem_config_to_json(&o.cfg, &j));
			EXPECT_STREQ(
				"group_limited_greedy",
				json_object_get_string(json_object_object_get(j, "topk_method")));
			ASSERT_EQ(0, moem_config_from_json(j, &back));
			json_object_put(j);
			EXPECT_EQ(8u, back.n_group);
			EXPECT_EQ(3u, back.topk_group);
		}
	}
}

TEST(tensor_names)
{
	struct moem_model_config c;
	struct moem_tensor_spec *s;
	char name[MOEM_TENSOR_NAME_MAX];
	size_t n;

	ASSERT_EQ(0, parse(mixtral, &c));
	ASSERT_EQ(0, moem_tensor_name(&c, MOEM_TR_EXPERT, 3, 7, MOEM_MAT_UP, name, sizeof(name)));
	EXPECT_STREQ("model.layers.3.block_sparse_moe.experts.7.w3.weight", name);
	ASSERT_EQ(0, moem_tensor_name(&c, MOEM_TR_ROUTER, 0, 0, 0, name, sizeof(name)));
	EXPECT_STREQ("model.layers.0.block_sparse_moe.gate.weight", name);
	EXPECT_EQ(-EINVAL, moem_tensor_name(&c, MOEM_TR_SHARED, 0, 0, 0, name, sizeof(name)));
	EXPECT_EQ(-ENAMETOOLONG, moem_tensor_name(&c, MOEM_TR_ROUTER, 0, 0, 0, name, 8));
	ASSERT_EQ(0, moem_arch_tensors(&c, &s, &n));
	/* embed + 32 x (4 attn + router + 8 x 3 + 2 norms) + norm + lm_head */
	EXPECT_EQ(1u + 32 * (4 + 1 + 24 + 2) + 2, n);
	free(s);

	ASSERT_EQ(0, parse(deepseek, &c));
	ASSERT_EQ(0, moem_tensor_name(&c, MOEM_TR_SHARED, 1, 0, MOEM_MAT_DOWN, name, sizeof(name)));
	EXPECT_STREQ("model.layers.1.mlp.shared_experts.down_proj.weight", name);
	ASSERT_EQ(0, moem_tensor_name(&c, MOEM_TR_DENSE, 0, 0, MOEM_MAT_GATE, name, sizeof(name)));
	EXPECT_STREQ("model.layers.0.mlp.gate_proj.weight", name);
	EXPECT_EQ(-EINVAL, moem_tensor_name(&c, MOEM_TR_ROUTER, 0, 0, 0, name, sizeof(name)));
	EXPECT_EQ(2u * 1408, moem_ffn_width(&c, MOEM_TR_SHARED));
	ASSERT_EQ(0, moem_arch_tensors(&c, &s, &n));
	for (size_t i = 0; i < n; i++) {
		if (!strcmp(s[i].name, "model.layers.1.mlp.shared_experts.up_proj.weight")) {
			EXPECT_EQ(2816u, s[i].shape[0]);
			EXPECT_EQ(2048u, s[i].shape[1]);
		}
		if (!strcmp(s[i].name, "model.layers.4.self_attn.kv_b_proj.weight")) {
			EXPECT_EQ(16u * (128 + 128), s[i].shape[0]);
			EXPECT_EQ(512u, s[i].shape[1]);
		}
		EXPECT_NE(0, strcmp(s[i].name, "model.layers.0.mlp.gate.weight"));
	}
	free(s);
}

TEST_HARNESS_MAIN
