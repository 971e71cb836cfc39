// SPDX-License-Identifier: GPL-2.0-only
/*
 * Paged KV store: src row t becomes the cache entry of position pos[t] of
 * its sequence, a thread per (token, value). A position whose block is
 * not in the pool writes nothing (as on the CPU backend). Exact.
 */
#include "kv.cuh"

extern "C" __global__ void __launch_bounds__(256) moem_kv_store(const moem_kkv_store_params p)
{
	const uint32_t t = blockIdx.y, i = blockIdx.x * 256 + threadIdx.x;
	const int32_t pos = reinterpret_cast<const int32_t *>(p.pos)[t];
	float *dst;

	if (i >= p.kv.entry || pos < 0)
		return;
	dst = kv_entry(p.kv, kv_table(p.kv, p.tab, t), (uint32_t)pos);
	if (dst)
		dst[i] = reinterpret_cast<const float *>(p.src)[(size_t)t * p.src_stride + i];
}
