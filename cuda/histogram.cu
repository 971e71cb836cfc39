// SPDX-License-Identifier: GPL-2.0-only
/*
 * Router-hit histogram: counts[ids[t][j]] += 1 for j < cnt[t], with
 * integer atomics (exact, any order). The counts row is the layer's; the
 * host reads all layers once per interval.
 */
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(256) moem_histogram(const moem_khist_params p)
{
	const uint32_t i = blockIdx.x * 256 + threadIdx.x;
	const uint32_t t = i / p.k, j = i % p.k;
	uint32_t cnt;
	int32_t e;

	if (t >= p.B)
		return;
	cnt = reinterpret_cast<const uint32_t *>(p.cnt)[t];
	if (j >= cnt)
		return;
	e = reinterpret_cast<const int32_t *>(p.ids)[(size_t)t * p.k + j];
	if (e >= 0 && (uint32_t)e < p.N)
		atomicAdd(reinterpret_cast<uint32_t *>(p.counts) + e, 1u);
}
