/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The expert store, checkpoint side: Hugging Face config.json, tensor
 * naming per architecture, checkpoint directories (single-file or sharded
 * safetensors) and the synthetic model generator behind `moem mkmodel`.
 * The .moem pack is in pack.h. Documentation/checkpoints.md lists the
 * config fields and tensor names of each architecture;
 * Documentation/synthetic-models.md describes what mkmodel writes.
 */
#ifndef MOEM_STORE_H
#define MOEM_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "progress.h"
#include "quant.h"
#include "safetensors.h"
#include "synth.h"

struct json_object;

/* ---- config.json ---- */

/*
 * Fill *c from a parsed config.json: model_type selects the architecture
 * and the fields it reads (qwen3_moe, mixtral, olmoe, deepseek_v2); the
 * result is checked with moem_model_config_validate() plus the store's own
 * limits (attention shapes, hidden_act "silu", deepseek topk_method
 * "greedy" and scoring_func "softmax"). -EINVAL with a message naming the
 * field otherwise. Unknown fields are ignored.
 */
int moem_config_from_json(struct json_object *obj, struct moem_model_config *c);
/* Same from config.json text (buf need not be NUL-terminated). */
int moem_config_parse(const char *buf, size_t len, struct moem_model_config *c);
/* Same from a file path. */
int moem_config_load(const char *path, struct moem_model_config *c);
/*
 * The config.json Hugging Face would write for c (architectures,
 * model_type, every field the architecture's config class has). -EINVAL if
 * c cannot be expressed in its architecture (e.g. dense layers in
 * mixtral).
 */
int moem_config_to_json(const struct moem_model_config *c, struct json_object **out);

/* ---- tensor naming ---- */

enum moem_tensor_role {
	MOEM_TR_EMBED = 0,  /* model.embed_tokens.weight */
	MOEM_TR_FINAL_NORM, /* model.norm.weight */
	MOEM_TR_LM_HEAD,    /* lm_head.weight (absent with tied embeddings) */
	MOEM_TR_INPUT_NORM, /* model.layers.L.input_layernorm.weight */
	MOEM_TR_POST_NORM,  /* model.layers.L.post_attention_layernorm.weight */
	MOEM_TR_ATTN,	    /* any attention tensor (the name says which) */
	MOEM_TR_ROUTER,	    /* the router ("gate") of a MoE layer, [E, hidden] */
	MOEM_TR_EXPERT,	    /* one matrix of a routed expert */
	MOEM_TR_SHARED,	    /* one matrix of the shared experts (deepseek_v2) */
	MOEM_TR_DENSE,	    /* one matrix of a dense layer's MLP */
	MOEM_TR_NR
};

#define MOEM_TENSOR_NAME_MAX 128

struct moem_tensor_spec {
	char name[MOEM_TENSOR_NAME_MAX];
	enum moem_tensor_role role;
	uint32_t layer;		  /* UINT32_MAX for model-level tensors */
	uint32_t expert;	  /* MOEM_TR_EXPERT only */
	enum moem_expert_mat mat; /* FFN roles only */
	uint32_t ndim;		  /* 1 or 2 */
	uint64_t shape[2];
};

/* "embed", "router", "expert", ... for reports. */
const char *moem_tensor_role_name(enum moem_tensor_role r);

/*
 * Every tensor a checkpoint of this config holds, in the order a
 * PyTorch state_dict lists them (embeddings, layers in order, final norm,
 * lm_head). *out is malloc'd; the caller frees it.
 */
int moem_arch_tensors(const struct moem_model_config *c, struct moem_tensor_spec **out, size_t *n);

/*
 * The name of a tensor with a fixed role (all but MOEM_TR_ATTN): layer,
 * expert and mat are used where the role needs them. -EINVAL if the role
 * does not exist there (a router in a dense layer, shared experts in
 * mixtral), -ENAMETOOLONG if buf is too short.
 */
int moem_tensor_name(const struct moem_model_config *c, enum moem_tensor_role r, uint32_t layer,
		     uint32_t expert, enum moem_expert_mat mat, char *buf, size_t len);

/*
 * Width of the FFN behind a role in layer l: moe_inter for routed experts,
 * n_shared * shared_inter for the shared experts (stored as one SwiGLU
 * MLP, as deepseek_v2 does), dense_inter for dense layers.
 */
uint32_t moem_ffn_width(const struct moem_model_config *c, enum moem_tensor_role r);

/* ---- checkpoints ---- */

struct moem_ckpt;

/*
 * Open a Hugging Face checkpoint directory: config.json, then either
 * model.safetensors.index.json (sharded; every shard file is opened and
 * validated, every tensor of the weight map must be in its shard and every
 * tensor of a shard in the map) or model.safetensors. The tensor set must
 * be exactly what moem_arch_tensors() lists, with the same shapes: missing
 * and extra tensors are named in the message. moem_synth.json is read if
 * present.
 */
int moem_ckpt_open(const char *dir, struct moem_ckpt **out);
void moem_ckpt_close(struct moem_ckpt *c);

const struct moem_model_config *moem_ckpt_config(const struct moem_ckpt *c);
const char *moem_ckpt_dir(const struct moem_ckpt *c);
/* The config.json text as read (NUL-terminated) and its length. */
const char *moem_ckpt_config_text(const struct moem_ckpt *c, size_t *len);
/* The moem_synth.json text, or NULL when the model is not synthetic. */
const char *moem_ckpt_synth_text(const struct moem_ckpt *c, size_t *len);
/* Synthetic workload parameters; -ENOENT when the model has none. */
int moem_ckpt_synth(const struct moem_ckpt *c, struct moem_synth_params *p);
/* Number of shard files (1 when unsharded) and total tensor bytes. */
uint32_t moem_ckpt_n_files(const struct moem_ckpt *c);
uint64_t moem_ckpt_tensor_bytes(const struct moem_ckpt *c);

/* The expected tensors (moem_arch_tensors order), all present. */
size_t moem_ckpt_n_specs(const struct moem_ckpt *c);
const struct moem_tensor_spec *moem_ckpt_spec(const struct moem_ckpt *c, size_t i);

/* Find a tensor by name: its file and entry, or -ENOENT with a message. */
int moem_ckpt_find(const struct moem_ckpt *c, const char *name, const struct moem_st_file **f,
		   const struct moem_st_tensor **t);

/* ---- synthetic models ---- */

enum moem_mkmodel_preset {
	MOEM_PRESET_QWEN3_30B_A3B = 0, /* qwen3_moe */
	MOEM_PRESET_MIXTRAL_8X7B,      /* mixtral */
	MOEM_PRESET_OLMOE_1B_7B,       /* olmoe */
	MOEM_PRESET_DEEPSEEK_V2_LITE,  /* deepseek_v2 */
	MOEM_PRESET_DEEPSEEK_V2,       /* deepseek_v2, the 236B model */
	MOEM_PRESET_NR
};

struct moem_mkmodel_opts {
	struct moem_model_config cfg;	/* shapes; n_layers may be scaled down */
	struct moem_synth_params synth; /* routing structure; n_layers etc. are
					 * filled from cfg by moem_mkmodel() */
	uint32_t shards;		/* 0 or 1: model.safetensors; else N shards + index */
	double moe_scale;		/* RMS of one expert's output over the residual's (0.03) */
	uint32_t threads;		/* 0: online CPUs (at most 16) */
	const char *out_dir;		/* created if absent; must not hold a model yet */
	/*
	 * NULL, or a tokenizer.json (or a directory holding one): copied into
	 * out_dir as tokenizer.json with the tokenizer_config.json,
	 * generation_config.json and special_tokens_map.json beside it, so
	 * that `moem pack` carries them. Sizing cfg.vocab to it is the
	 * caller's (the text layer reads tokenizers, storage only copies).
	 */
	const char *tokenizer;
	struct moem_progress *progress; /* may be NULL */
};

/*
 * Preset names: "qwen3-30b-a3b", "mixtral-8x7b", "olmoe-1b-7b", "deepseek-v2-lite",
 * "deepseek-v2".
 */
const char *moem_preset_name(enum moem_mkmodel_preset p);
int moem_preset_parse(const char *s, enum moem_mkmodel_preset *out);
/* The preset of an architecture (its best-known real model). */
enum moem_mkmodel_preset moem_preset_of_arch(enum moem_arch a);

/*
 * Defaults: the preset's real shapes with 4 layers, vocab 4096, bf16,
 * workloads text/math/code with synth defaults, seed 1, unsharded.
 */
void moem_mkmodel_defaults(struct moem_mkmodel_opts *o, enum moem_mkmodel_preset p);

/*
 * Write a synthetic checkpoint into o->out_dir: config.json,
 * model.safetensors or model-0000i-of-0000N.safetensors +
 * model.safetensors.index.json, moem_synth.json, and the tokenizer files
 * when o->tokenizer names them. Same options, same
 * bytes. Files are written under temporary names and renamed at the end;
 * on failure nothing is left behind.
 */
int moem_mkmodel(const struct moem_mkmodel_opts *o);

#endif /* MOEM_STORE_H */
