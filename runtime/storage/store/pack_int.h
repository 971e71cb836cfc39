/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The pack reader's state, shared by its files: pack_open.c validates a
 * pack into it, pack_index.c answers lookups, pack_read.c reads data.
 */
#ifndef MOEM_PACK_INT_H
#define MOEM_PACK_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <moem/pack.h>

#include "pack_fmt.h"

struct moem_pack {
	char *path;
	int fd;
	struct moem_pack_io io;
	uint64_t size, data_offset;
	uint32_t major, minor, prec_mask;
	struct moem_pack_id id;
	struct moem_model_config cfg;
	uint8_t *meta; /* [4096, data_offset) */
	const char *strings;
	uint64_t strings_len;
	struct moem_pack_tensor *tens; /* by name */
	uint32_t n_tens;
	struct moem_pack_blob *blobs; /* file order */
	uint32_t n_blobs;
	int32_t *routed;		  /* [moe layer][expert][prec] -> blob, or -1 */
	int16_t moe_idx[MOEM_MAX_LAYERS]; /* layer -> MoE index, or -1 */
	int32_t *layer_blob;		  /* [layer][prec]: shared or dense blob, or -1 */
	char *config_json;
	size_t config_json_len;
	bool has_synth;
	struct moem_synth_params synth;
	struct pack_tok_view tok; /* points into meta */
};

/* Index into routed[] of a routed blob of a MoE layer. */
static inline size_t moem_pack_routed_slot(const struct moem_pack *p, uint32_t layer,
					   uint32_t expert, enum moem_prec prec)
{
	return ((size_t)p->moe_idx[layer] * p->cfg.n_experts + expert) * MOEM_PREC_NR + prec;
}

/* Read len bytes at off from the pack's file or io; -errno with a message. */
int moem_pack_pread(const struct moem_pack *p, void *buf, size_t len, uint64_t off);

#endif /* MOEM_PACK_INT_H */
