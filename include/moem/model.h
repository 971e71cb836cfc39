/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The model shape moem needs, normalised across the Hugging Face
 * architectures it reads (qwen3_moe, mixtral, olmoe, deepseek_v2). The
 * store fills it from config.json; packs carry it; backends and the engine
 * read it. Field names follow Qwen3's config where the four differ.
 */
#ifndef MOEM_MODEL_H
#define MOEM_MODEL_H

#include <stdbool.h>
#include <stdint.h>

enum moem_arch {
	MOEM_ARCH_QWEN3_MOE = 0,
	MOEM_ARCH_MIXTRAL = 1,
	MOEM_ARCH_OLMOE = 2,
	MOEM_ARCH_DEEPSEEK_V2 = 3,
	MOEM_ARCH_NR
};

/* Source dtype of a checkpoint tensor. */
enum moem_dtype { MOEM_DTYPE_BF16 = 0, MOEM_DTYPE_F16 = 1, MOEM_DTYPE_F32 = 2, MOEM_DTYPE_NR };

#define MOEM_MAX_LAYERS	 256
#define MOEM_MAX_EXPERTS 1024
#define MOEM_MAX_TOPK	 64
#define MOEM_MAX_EOS	 8

/* rope_scaling (rope_parameters in transformers 5) that moem implements. */
enum moem_rope_kind {
	MOEM_ROPE_DEFAULT = 0, /* no scaling */
	MOEM_ROPE_YARN = 1,    /* deepseek_v2's YaRN, as DeepSeek's own modeling code has it */
};

/* YaRN parameters (rope_scaling fields, DeepSeek's defaults when absent). */
struct moem_rope_yarn {
	float factor;	       /* "factor" (> 1 to scale) */
	uint32_t orig_max_pos; /* "original_max_position_embeddings" (4096) */
	float beta_fast;       /* 32 */
	float beta_slow;       /* 1 */
	float mscale;	       /* 1 */
	float mscale_all_dim;  /* 0 */
};

struct moem_model_config {
	enum moem_arch arch;
	enum moem_dtype dtype;			   /* torch_dtype of the checkpoint */
	uint32_t hidden;			   /* hidden_size */
	uint32_t n_layers;			   /* num_hidden_layers */
	uint32_t n_experts;			   /* routed experts per MoE layer */
	uint32_t top_k;				   /* num_experts_per_tok */
	uint32_t moe_inter;			   /* routed expert FFN width */
	uint32_t dense_inter;			   /* dense-layer FFN width (intermediate_size) */
	uint32_t n_shared;			   /* shared experts per MoE layer (deepseek_v2) */
	uint32_t shared_inter;			   /* width of one shared expert */
	uint32_t first_dense;			   /* layers [0, first_dense) are dense
					 * (deepseek first_k_dense_replace) */
	uint32_t sparse_step;			   /* qwen3 decoder_sparse_step (1 = every layer) */
	uint64_t dense_mask[MOEM_MAX_LAYERS / 64]; /* extra dense layers
						    * (qwen3 mlp_only_layers) */
	bool norm_topk_prob;			   /* renormalise the top-k weights to sum 1 */
	float routed_scaling;			   /* deepseek routed_scaling_factor, else 1 */
	/* deepseek_v2 topk_method "group_limited_greedy": each token takes its
	 * top-k within the topk_group groups (of n_group) with the best
	 * expert (route.h); both 0 for "greedy" and the other architectures. */
	uint32_t n_group, topk_group;
	float rms_eps;				/* rms_norm_eps */
	uint32_t vocab;				/* vocab_size */
	uint32_t n_heads, n_kv_heads, head_dim; /* attention shape (unused by MoE-stack mode) */
	/* Added by the store: what full-model decode and tensor naming need. */
	float rope_theta;      /* rope_theta (10000 when absent) */
	bool tie_embeddings;   /* tie_word_embeddings: no lm_head.weight */
	uint32_t q_lora_rank;  /* deepseek_v2 MLA (0 = no q LoRA: plain q_proj) */
	uint32_t kv_lora_rank; /* deepseek_v2 MLA */
	uint32_t qk_nope_dim, qk_rope_dim, v_head_dim; /* deepseek_v2 MLA head parts */
	/*
	 * Full decode (pack format 1.1; zero in a 1.0 pack): context, the
	 * attention options of each architecture, end-of-sequence ids.
	 */
	uint32_t max_pos;	 /* max_position_embeddings */
	uint32_t sliding_window; /* mixtral sliding_window: keys with pos > q - W; 0 = all */
	float clip_qkv;		 /* olmoe clip_qkv: |q|, |k|, |v| <= c; 0 = none */
	enum moem_rope_kind rope_kind;
	struct moem_rope_yarn yarn; /* MOEM_ROPE_YARN only */
	uint32_t n_eos;		    /* generation_config.json's eos_token_id, else config.json's */
	int32_t eos[MOEM_MAX_EOS];
};

/* "qwen3_moe", "mixtral", "olmoe", "deepseek_v2" (the HF model_type). */
const char *moem_arch_name(enum moem_arch a);
int moem_arch_parse(const char *s, enum moem_arch *out);
const char *moem_dtype_name(enum moem_dtype d);
/* Bytes per element of a checkpoint dtype. */
uint32_t moem_dtype_size(enum moem_dtype d);

/* True if layer l has routed experts; false for a dense layer. */
bool moem_layer_is_moe(const struct moem_model_config *c, uint32_t l);
/* Number of MoE layers, and the index among them of layer l (or -1). */
uint32_t moem_n_moe_layers(const struct moem_model_config *c);
int moem_moe_index(const struct moem_model_config *c, uint32_t l);

/*
 * Check a config for internal consistency and moem's limits; -EINVAL with a
 * message naming the field otherwise.
 */
int moem_model_config_validate(const struct moem_model_config *c);

#endif /* MOEM_MODEL_H */
