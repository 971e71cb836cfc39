/* SPDX-License-Identifier: GPL-2.0-only */
/* A checkpoint directory's state (checkpoint.c), shared with fused.c. */
#ifndef MOEM_STORE_CKPT_INT_H
#define MOEM_STORE_CKPT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <moem/safetensors.h>
#include <moem/store.h>
#include <moem/synth.h>

struct ckpt_entry {
	const char *name;
	uint32_t file;
	const struct moem_st_tensor *t;
	bool expected; /* a tensor of the architecture's list */
	bool viewed;   /* fused: read through per-expert views, never by its own name */
};

/* A per-expert tensor that is a contiguous slice of a fused one. */
struct ckpt_view {
	struct moem_st_tensor t; /* name points at name[] */
	char name[MOEM_TENSOR_NAME_MAX];
};

struct moem_ckpt {
	char *dir;
	struct moem_model_config cfg;
	char *config_text, *synth_text;
	size_t config_len, synth_len;
	bool has_synth;
	struct moem_synth_params synth;
	uint32_t n_files;
	struct moem_st_file **files;
	struct ckpt_entry *idx; /* every tensor of every file (and view), by name */
	size_t n_idx;
	struct ckpt_view *views;
	size_t n_views;
	struct moem_tensor_spec *specs;
	size_t n_specs;
	uint64_t tensor_bytes;
};

/*
 * Checkpoints written by transformers 5 keep a layer's routed experts as
 * two fused tensors, mlp.experts.gate_up_proj [E, 2I, H] (gate rows
 * first, then up) and mlp.experts.down_proj [E, H, I], and name
 * Mixtral's block_sparse_moe "mlp". Add to c->idx (unsorted) a view per
 * expert matrix under the classic name, and the classic name of every
 * renamed Mixtral tensor; mark the fused tensors viewed. Each view is one
 * contiguous byte range of its fused tensor, so readers need no change.
 * -EINVAL with a message on a fused tensor of the wrong shape or dtype,
 * or a layer with both layouts.
 */
int moem_ckpt_unfuse(struct moem_ckpt *c);
/* t is one of the views moem_ckpt_unfuse() added. */
bool moem_ckpt_entry_is_view(const struct moem_ckpt *c, const struct moem_st_tensor *t);

#endif /* MOEM_STORE_CKPT_INT_H */
