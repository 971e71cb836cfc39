/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The paged KV cache on the device (backend.h, struct moem_kv_geom):
 * position j of a sequence is slot j % block_tokens of block
 * table[j / block_tokens]; a block id outside the pool means "no entry".
 */
#ifndef MOEM_CUDA_KV_CUH
#define MOEM_CUDA_KV_CUH

#include "common.cuh"
#include "decode_kparams.h"

MOEM_DEVI float *kv_entry(const moem_kkv_geom &g, const int32_t *tab, uint32_t j)
{
	const int32_t b = tab[j / g.block_tokens];

	if (b < 0 || (uint32_t)b >= g.n_blocks)
		return nullptr;
	return reinterpret_cast<float *>(g.pool) +
	       (((size_t)b * g.n_layers + g.layer) * g.block_tokens + j % g.block_tokens) * g.entry;
}

/* The block table of the token whose table offset is tab_off[t]. */
MOEM_DEVI const int32_t *kv_table(const moem_kkv_geom &g, uint64_t tab_off, uint32_t t)
{
	return reinterpret_cast<const int32_t *>(g.tables) +
	       reinterpret_cast<const uint32_t *>(tab_off)[t];
}

#endif /* MOEM_CUDA_KV_CUH */
