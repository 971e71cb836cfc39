/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The .moem pack: one file holding a model ready to serve
 * (Documentation/pack-format.md has the byte layout).
 *
 *   [0, 4096)            header: magic "MOEMPACK", version, file size, pack
 *                        id, section table, XXH3-64 of itself
 *   [4096, data_offset)  sections: model config, string table, tensor
 *                        index, blob index, config.json, moem_synth.json
 *   [data_offset, end)   data: every non-FFN tensor as stored in the
 *                        checkpoint, then one blob per FFN, each 4 KiB
 *                        aligned, laid out as quant.h says (what the
 *                        kernels read: one read and one copy, no repack)
 *
 * Blobs: every routed expert of every MoE layer in every precision of the
 * pack; the shared experts (deepseek_v2) and dense-layer MLPs in bf16. Each
 * blob and tensor carries an XXH3-64 checksum; the header, each section
 * and the 128-bit pack id (over header and sections) are checked at open.
 *
 * Thread safety: a pack opened with moem_pack_open() is immutable; every
 * function below may be called from any number of threads at once.
 */
#ifndef MOEM_PACK_H
#define MOEM_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "progress.h"
#include "quant.h"
#include "store.h"
#include "synth.h"

#define MOEM_PACK_MAJOR 1
/*
 * Minor versions add what older readers may skip: 1.1 records the
 * config fields full decode needs (context, RoPE scaling, sliding window,
 * clip_qkv, eos ids); a 1.0 pack still serves MoE-stack runs. 1.2
 * records DeepSeek-V2's expert groups, with a header flag that older
 * readers refuse (only in packs whose model routes within groups).
 */
#define MOEM_PACK_MINOR 2
#define MOEM_PACK_ALIGN 4096u /* every tensor and blob offset */

/* ---- writing ---- */

struct moem_pack_opts {
	const char *model_dir;		/* a checkpoint directory (moem_ckpt_open) */
	const char *out_path;		/* written as a temporary file, renamed when complete */
	uint32_t prec_mask;		/* routed-expert precisions, 1 << MOEM_PREC_* */
	uint32_t threads;		/* 0: online CPUs (at most 16) */
	struct moem_progress *progress; /* may be NULL */
};

/*
 * Write a pack from a checkpoint. f16/f32 expert weights are rounded to
 * bf16 (nearest even) before quantizing; bf16 sources are copied byte for
 * byte. Plain tensors keep their checkpoint dtype. -EINVAL with a message
 * if a precision does not fit the shapes (q8/q4 need hidden and expert
 * width multiples of 128, q2 of 64). On any failure the output path is
 * untouched.
 */
int moem_pack_write(const struct moem_pack_opts *o);

/* ---- reading ---- */

enum moem_blob_kind {
	MOEM_BLOB_ROUTED = 1, /* routed expert (layer, expert, precision) */
	MOEM_BLOB_SHARED = 2, /* the shared experts of a MoE layer, one SwiGLU MLP */
	MOEM_BLOB_DENSE = 3,  /* the MLP of a dense layer */
};

struct moem_pack_blob {
	enum moem_blob_kind kind;
	enum moem_prec prec;
	uint32_t quantizer;		  /* 0: round-to-nearest as quant.h defines */
	uint32_t layer;			  /* model layer (not the MoE index) */
	uint32_t expert;		  /* routed experts; 0 otherwise */
	uint64_t offset;		  /* in the file, multiple of MOEM_PACK_ALIGN */
	uint64_t size;			  /* == layout.bytes, multiple of MOEM_PACK_ALIGN */
	uint64_t xxh3;			  /* XXH3-64 of the size bytes */
	struct moem_expert_layout layout; /* hidden x width, where each matrix lies */
};

struct moem_pack_tensor {
	const char *name;
	enum moem_dtype dtype; /* as in the checkpoint */
	enum moem_tensor_role role;
	uint32_t layer; /* UINT32_MAX for model-level tensors */
	uint32_t ndim;	/* 1..4 */
	uint64_t shape[4];
	uint64_t nelem;
	uint64_t offset; /* multiple of MOEM_PACK_ALIGN */
	uint64_t size;	 /* nelem * dtype size */
	uint64_t xxh3;
};

struct moem_pack_id {
	uint8_t b[16];
};

/*
 * Where open_io reads from: size bytes, pread(arg, buf, len, off) returns
 * 0 or a negative errno (-EIO for a short read). Lets tests and fuzzers
 * parse a pack held in memory.
 */
struct moem_pack_io {
	uint64_t size;
	int (*pread)(void *arg, void *buf, size_t len, uint64_t off);
	void *arg;
};

struct moem_pack;

/*
 * Open a pack: read and validate the header, every section and the whole
 * index against the file size and the model config (bounds, 4 KiB
 * alignment, overlaps, duplicates, completeness, checksums of header,
 * sections and id). Blob and tensor data are not read; their checksums
 * are checked by the read helpers and moem_pack_verify(). -EINVAL (bad
 * format), -EBADMSG (checksum), -EPROTONOSUPPORT (unknown major version or
 * flags) with a message.
 */
int moem_pack_open(const char *path, struct moem_pack **out);
int moem_pack_open_io(const struct moem_pack_io *io, const char *label, struct moem_pack **out);
void moem_pack_close(struct moem_pack *p);

const char *moem_pack_path(const struct moem_pack *p);
/* The open file (O_RDONLY, buffered) for callers issuing their own reads; -1 for open_io. */
int moem_pack_fd(const struct moem_pack *p);
uint64_t moem_pack_file_size(const struct moem_pack *p);
uint64_t moem_pack_data_offset(const struct moem_pack *p);
void moem_pack_version(const struct moem_pack *p, uint32_t *major, uint32_t *minor);
/*
 * The pack identity: XXH3-128 over the header (id field zeroed) and all
 * sections, which hold every blob's checksum. Two packs with equal ids
 * hold the same bytes; the daemon compares it with a persistent region's
 * to decide on a warm restart.
 */
void moem_pack_get_id(const struct moem_pack *p, struct moem_pack_id *id);
/* 32 hex digits and a NUL into buf[33]; returns buf. */
char *moem_pack_id_str(const struct moem_pack_id *id, char *buf);

const struct moem_model_config *moem_pack_config(const struct moem_pack *p);
/* Routed-expert precisions present, as a mask of 1 << MOEM_PREC_*. */
uint32_t moem_pack_precisions(const struct moem_pack *p);
/* Synthetic workload parameters; -ENOENT if the model is not synthetic. */
int moem_pack_synth(const struct moem_pack *p, struct moem_synth_params *out);
/*
 * The unit router rows of a synthetic model, laid out as moem_synth_basis()
 * writes them: out[m][e][0..hidden) for MoE layer m (in layer order),
 * expert e, read from the pack's router tensors and normalised. This is
 * the basis moem_synth_hidden() takes to generate entry hidden states for
 * a workload mix (Documentation/synthetic-models.md). out holds
 * n_moe_layers * n_experts * hidden floats; -EDOM if a row is zero.
 */
int moem_pack_synth_basis(const struct moem_pack *p, float *out);
/* The checkpoint's config.json text (NUL-terminated), or NULL. */
const char *moem_pack_config_json(const struct moem_pack *p, size_t *len);
/*
 * Whether the pack carries tokenizer files (section TOKENIZER): 1 yes,
 * 0 no (packs written before it, checkpoints without tokenizer.json),
 * -EPROTONOSUPPORT with a message for a newer section layout.
 */
int moem_pack_has_tokenizer(const struct moem_pack *p);
/*
 * A tokenizer file of the pack ("tokenizer.json", "tokenizer_config.json",
 * "generation_config.json", "special_tokens_map.json"), verbatim and not
 * NUL-terminated, or NULL. Valid while the pack is open.
 */
const char *moem_pack_tokenizer_file(const struct moem_pack *p, const char *name, size_t *len);

/*
 * Blob lookup by model layer. NULL if absent: a dense layer has no routed
 * or shared blobs, a precision may not be in the pack, shared/dense blobs
 * exist in bf16 only.
 */
const struct moem_pack_blob *moem_pack_expert(const struct moem_pack *p, uint32_t layer,
					      uint32_t expert, enum moem_prec prec);
const struct moem_pack_blob *moem_pack_shared(const struct moem_pack *p, uint32_t layer,
					      enum moem_prec prec);
const struct moem_pack_blob *moem_pack_dense(const struct moem_pack *p, uint32_t layer,
					     enum moem_prec prec);
/* All blobs in file order. */
uint32_t moem_pack_n_blobs(const struct moem_pack *p);
const struct moem_pack_blob *moem_pack_blob_at(const struct moem_pack *p, uint32_t i);
/* "layer 3 expert 17 q4" (routed), "layer 0 dense bf16", ... into buf; returns buf. */
char *moem_pack_blob_desc(const struct moem_pack_blob *b, char *buf, size_t len);

/* Tensors by name (NULL if absent), and all of them in name order. */
const struct moem_pack_tensor *moem_pack_tensor(const struct moem_pack *p, const char *name);
uint32_t moem_pack_n_tensors(const struct moem_pack *p);
const struct moem_pack_tensor *moem_pack_tensor_at(const struct moem_pack *p, uint32_t i);
/* The tensor of a fixed role (moem_tensor_name()), e.g. the router of a layer. */
const struct moem_pack_tensor *moem_pack_tensor_role(const struct moem_pack *p,
						     enum moem_tensor_role r, uint32_t layer);

/*
 * Read a blob into dst (len >= b->size) and check its checksum:
 * -EBADMSG "blob layer 3 expert 5 q4: checksum ..." on mismatch.
 */
int moem_pack_read_blob(const struct moem_pack *p, const struct moem_pack_blob *b, void *dst,
			uint64_t len);
/* Check bytes already read (e.g. by the io_uring loader) against b's checksum. */
int moem_pack_verify_blob(const struct moem_pack_blob *b, const void *data);
/* Read a tensor's raw bytes (len >= t->size), checksum checked. */
int moem_pack_read_tensor(const struct moem_pack *p, const struct moem_pack_tensor *t, void *dst,
			  uint64_t len);
/* Read a tensor converted to float (exact for all three dtypes), checksum checked. */
int moem_pack_read_tensor_f32(const struct moem_pack *p, const struct moem_pack_tensor *t,
			      float *dst, uint64_t nelem);
/*
 * Read a tensor converted to bf16 (f32 rounded to nearest even, as
 * moem_f32_to_bf16(); bf16 as stored), checksum checked. Needs no buffer
 * of the tensor's size besides dst, which is what loads of large dense
 * weights (embeddings, lm_head) want.
 */
int moem_pack_read_tensor_bf16(const struct moem_pack *p, const struct moem_pack_tensor *t,
			       uint16_t *dst, uint64_t nelem);
/* Check every tensor and blob checksum, with a progress bar if given. */
int moem_pack_verify(const struct moem_pack *p, struct moem_progress *prog);

/* ---- quantization error report ---- */

struct moem_qerr {
	uint32_t samples; /* experts x activations measured */
	double mean_rel;  /* mean of |y_q - y_bf16| / |y_bf16| */
	double max_rel;
};

/*
 * Relative output error of the expert FFN (moem_ffn_ref) in each
 * quantized precision of the pack against its bf16 blob, on the same
 * seeded N(0, 1) activations, over n_experts routed experts drawn from
 * seed (n_acts activations each). out[prec] is filled for every
 * precision in the pack except bf16. -ENOENT if the pack has no bf16
 * blobs to compare against.
 */
int moem_pack_quant_error(const struct moem_pack *p, uint32_t n_experts, uint32_t n_acts,
			  uint64_t seed, uint32_t threads, struct moem_qerr out[MOEM_PREC_NR]);

#endif /* MOEM_PACK_H */
