/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * On-disk structures of the .moem pack, version 1.1
 * (Documentation/pack-format.md). Little-endian, no implicit padding
 * (sizes are asserted below). Shared by the writer and the reader only.
 */
#ifndef MOEM_PACK_FMT_H
#define MOEM_PACK_FMT_H

#include <stdint.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .moem pack format is little-endian; add byte swapping for this target"
#endif

#define PACK_MAGIC	    "MOEMPACK"
#define PACK_HDR_SIZE	    4096u
#define PACK_MAX_SECTIONS   32u
#define PACK_HDR_SUM_OFF    (PACK_HDR_SIZE - 8)
/* Sections live in [4096, data_offset); at most this much of them. */
#define PACK_MAX_META	    (256ULL << 20)
/*
 * Header flags; a reader refuses any bit it does not know, so a flag marks
 * what an older reader must not open as something else.
 * ROUTE_GROUPS (1.2): the config's n_group/topk_group limit routing to
 * expert groups; a 1.0/1.1 reader would route by plain top-k.
 */
#define PACK_F_ROUTE_GROUPS (1ULL << 0)
#define PACK_KNOWN_FLAGS    PACK_F_ROUTE_GROUPS

enum pack_section_type {
	PACK_SECT_CONFIG = 1,	   /* struct pack_config */
	PACK_SECT_STRINGS = 2,	   /* NUL-terminated tensor names */
	PACK_SECT_TENSORS = 3,	   /* struct pack_tensor[] sorted by name */
	PACK_SECT_BLOBS = 4,	   /* struct pack_blob[] in file order */
	PACK_SECT_CONFIG_JSON = 5, /* the checkpoint's config.json (optional) */
	PACK_SECT_SYNTH_JSON = 6,  /* moem_synth.json (optional) */
	PACK_SECT_TOKENIZER = 7,   /* tokenizer files, struct pack_tok_hdr (optional) */
};

/* A reader may skip a section type it does not know only if this is set. */
#define PACK_SECT_F_OPTIONAL 1u

struct pack_section {
	uint32_t type;
	uint32_t flags;
	uint64_t offset; /* from the start of the file, multiple of 8 */
	uint64_t size;
	uint64_t xxh3; /* XXH3-64 of the section bytes */
};

struct pack_header {
	char magic[8]; /* "MOEMPACK" */
	uint16_t major, minor;
	uint32_t header_size; /* 4096 */
	uint64_t file_size;
	uint64_t flags;
	uint8_t id[16]; /* XXH3-128, canonical (big-endian) byte order */
	uint32_t n_sections;
	uint32_t prec_mask;   /* routed-expert precisions, 1 << enum moem_prec */
	uint64_t data_offset; /* first byte of the data area, multiple of 4096 */
	uint8_t reserved0[64];
	struct pack_section sect[PACK_MAX_SECTIONS];
	uint8_t reserved1[PACK_HDR_SIZE - 128 - 32 * PACK_MAX_SECTIONS - 8];
	uint64_t header_xxh3; /* XXH3-64 of bytes [0, 4088) */
};

struct pack_config {
	uint32_t size; /* sizeof(struct pack_config) */
	uint32_t arch, dtype;
	uint32_t hidden, n_layers, n_experts, top_k;
	uint32_t moe_inter, dense_inter, n_shared, shared_inter;
	uint32_t first_dense, sparse_step, norm_topk_prob;
	float routed_scaling, rms_eps, rope_theta;
	uint32_t vocab, n_heads, n_kv_heads, head_dim, tie_embeddings;
	uint32_t q_lora_rank, kv_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim;
	uint32_t reserved0;
	uint64_t dense_mask[4];
	/* 1.1: full decode. All zero in a 1.0 pack. */
	uint32_t max_pos, sliding_window;
	float clip_qkv;
	uint32_t rope_kind; /* enum moem_rope_kind */
	float yarn_factor;
	uint32_t yarn_orig_max_pos;
	float yarn_beta_fast, yarn_beta_slow, yarn_mscale, yarn_mscale_all_dim;
	uint32_t n_eos;
	int32_t eos[8];
	/* 1.2: group-limited routing (header flag ROUTE_GROUPS); 0 otherwise */
	uint32_t n_group, topk_group;
	uint8_t reserved1[28];
};

struct pack_tensor {
	uint32_t name_off, name_len; /* in the string table; name_len excludes the NUL */
	uint8_t dtype, ndim, role, reserved0;
	uint32_t layer; /* UINT32_MAX for model-level tensors */
	uint64_t shape[4];
	uint64_t offset, size, xxh3;
	uint64_t reserved1;
};

struct pack_blob {
	uint8_t kind, prec, quantizer, reserved0;
	uint32_t layer, expert;
	uint32_t inter; /* FFN width of this blob */
	uint64_t offset, size, xxh3;
	uint64_t reserved1;
};

/*
 * TOKENIZER section: the Hugging Face tokenizer files of the checkpoint,
 * verbatim. A header, n_files entries, then the bytes of each file at an
 * 8-byte aligned offset from the start of the section.
 */
#define PACK_TOK_MAGIC	   "MOEMTOK"
#define PACK_TOK_VERSION   1u
#define PACK_TOK_MAX_FILES 8u
#define PACK_TOK_NAME_LEN  48u

struct pack_tok_hdr {
	char magic[8]; /* "MOEMTOK\0" */
	uint32_t version;
	uint32_t n_files;
};

struct pack_tok_file {
	char name[PACK_TOK_NAME_LEN]; /* NUL-terminated, e.g. "tokenizer.json" */
	uint64_t offset;	      /* from the start of the section, multiple of 8 */
	uint64_t size;
};

_Static_assert(sizeof(struct pack_header) == PACK_HDR_SIZE, "pack header size");
_Static_assert(sizeof(struct pack_tok_hdr) == 16, "pack tokenizer header size");
_Static_assert(sizeof(struct pack_tok_file) == 64, "pack tokenizer file entry size");
_Static_assert(sizeof(struct pack_section) == 32, "pack section size");
_Static_assert(sizeof(struct pack_config) == 256, "pack config size");
_Static_assert(sizeof(struct pack_tensor) == 80, "pack tensor entry size");
_Static_assert(sizeof(struct pack_blob) == 48, "pack blob entry size");

struct moem_model_config;

/* Convert the model config to and from its on-disk form. */
void moem_pack_config_encode(const struct moem_model_config *c, struct pack_config *d);
/* -EINVAL with a message if d is not a valid config. */
int moem_pack_config_decode(const struct pack_config *d, struct moem_model_config *c);

/*
 * The pack id: XXH3-128 over the header with id and header_xxh3 zeroed
 * (bytes [0, 4088)) followed by the section area [4096, data_offset).
 */
int moem_pack_compute_id(const struct pack_header *h, const void *meta, uint64_t meta_len,
			 uint8_t id[16]);

/* The files of a TOKENIZER section, as the reader found them (pack_tok.c). */
struct pack_tok_view {
	uint32_t version; /* 0: no section */
	uint32_t n;
	const char *name[PACK_TOK_MAX_FILES];
	const char *data[PACK_TOK_MAX_FILES];
	size_t len[PACK_TOK_MAX_FILES];
};

/*
 * Build a TOKENIZER section from the tokenizer files in dir (malloc'ed;
 * *len = 0 and *out = NULL when dir has no tokenizer.json).
 */
int moem_pack_tok_build(const char *dir, void **out, size_t *len);
/* Validate a TOKENIZER section; v points into data. A newer version is left unread. */
int moem_pack_tok_parse(const void *data, uint64_t len, const char *path, struct pack_tok_view *v);

#endif /* MOEM_PACK_FMT_H */
