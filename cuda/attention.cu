// SPDX-License-Identifier: GPL-2.0-only
/*
 * Attention over the paged KV cache, split-KV (flash-decoding): the keys
 * a token attends are cut into splits (decode_kparams.h), each split is
 * one block computing a partial softmax, and a second pass merges the
 * splits. A decode step of one sequence at a long context thus spreads
 * over up to MOEM_K_ATTN_SPLITS blocks per kv head instead of one block
 * per head; a prefill chunk is the same launch over many query tokens,
 * each against the keys up to its own position (causal by position, a
 * sliding window when the model has one).
 *
 * Pass 1, moem_attn_part: blockIdx.x = (token, kv head g, chunk of hb
 * query heads of g's group), blockIdx.y = split. The chunk's queries sit
 * in shared memory; each 32-key tile is scored by the four warps (a warp
 * per key, lanes over the head dimension, one butterfly sum per head),
 * then a warp per head updates the running max and sum (online softmax),
 * then every thread updates its (head, value column) accumulators in key
 * order, reading each V row coalesced. All query heads of a kv head share
 * the block, so GQA's K/V rows are read once per block; for MLA (one kv
 * head, its value the prefix of its key) that is the compressed latent.
 *
 * Pass 2, moem_attn_merge: a block per (token, head) rescales the splits'
 * sums to the common max in split order and divides once.
 *
 * Everything is a fixed sequence of IEEE operations that depends only on
 * the token's own query, position and cache: bitwise repeatable and
 * independent of the batch. Against the CPU backend (exact softmax, sum in
 * double) the difference is a few float roundings (backends.md).
 */
#include "kv.cuh"

#define AT_WARPS (MOEM_K_ATTN_THREADS / 32)
#define KT	 MOEM_K_ATTN_KTILE

/* Keys [lo, pos]: n keys, split length and count (decode_kparams.h). */
MOEM_DEVI bool attn_range(const moem_kattn_params &p, uint32_t t, uint32_t *lo, uint32_t *n,
			  uint32_t *len, uint32_t *ns)
{
	const int32_t pos = reinterpret_cast<const int32_t *>(p.pos)[t];
	const uint32_t unit = MOEM_K_ATTN_SPLIT_MIN * MOEM_K_ATTN_SPLITS;

	if (pos < 0)
		return false;
	*lo = p.window && (uint32_t)pos + 1 > p.window ? (uint32_t)pos + 1 - p.window : 0;
	*n = (uint32_t)pos + 1 - *lo;
	*len = MOEM_K_ATTN_SPLIT_MIN * ((*n + unit - 1) / unit);
	*ns = (*n + *len - 1) / *len;
	return true;
}

MOEM_DEVI float warp_max(float v)
{
#pragma unroll
	for (int off = 16; off; off >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
	return v;
}

MOEM_DEVI float warp_sum(float v)
{
#pragma unroll
	for (int off = 16; off; off >>= 1)
		v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
	return v;
}

/* exp(a - b), 0 for a = -inf (b = -inf only with a = -inf). */
MOEM_DEVI float exp_diff(float a, float b)
{
	return a == -INFINITY ? 0.0f : expf(__fsub_rn(a, b));
}

extern "C" __global__ void __launch_bounds__(MOEM_K_ATTN_THREADS)
	moem_attn_part(const moem_kattn_params p)
{
	MOEM_DYN_SMEM(smem);
	__shared__ float sc[MOEM_K_ATTN_MAX_HB][KT]; /* scores, then probabilities */
	__shared__ float mx[MOEM_K_ATTN_MAX_HB], sm[MOEM_K_ATTN_MAX_HB], corr[MOEM_K_ATTN_MAX_HB];
	__shared__ const float *vrow[KT];
	const uint32_t gsz = p.n_heads / p.n_kv_heads, nhc = (gsz + p.hb - 1) / p.hb;
	const uint32_t item = blockIdx.x, split = blockIdx.y;
	const uint32_t t = p.t0 + item / (p.n_kv_heads * nhc);
	const uint32_t g = item / nhc % p.n_kv_heads, h0 = g * gsz + item % nhc * p.hb;
	const uint32_t nh = min(p.hb, g * gsz + gsz - h0);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	float *qs = reinterpret_cast<float *>(smem); /* [nh][qk_dim] */
	const int32_t *tab = kv_table(p.kv, p.tab, t);
	uint32_t lo, n, len, ns, j0, j1;
	float acc[MOEM_K_ATTN_ACC];
	size_t part;

	if (!attn_range(p, t, &lo, &n, &len, &ns) || split >= ns)
		return; /* the merge knows which splits exist */
	j0 = lo + split * len;
	j1 = min(j0 + len, lo + n);
	for (uint32_t i = threadIdx.x; i < nh * p.qk_dim; i += MOEM_K_ATTN_THREADS)
		qs[i] = reinterpret_cast<const float *>(
			p.q)[(size_t)t * p.q_stride + (size_t)h0 * p.qk_dim + i];
	if (threadIdx.x < MOEM_K_ATTN_MAX_HB) {
		mx[threadIdx.x] = -INFINITY;
		sm[threadIdx.x] = 0.0f;
	}
#pragma unroll
	for (int a = 0; a < MOEM_K_ATTN_ACC; a++)
		acc[a] = 0.0f;
	__syncthreads();
	for (uint32_t jt = j0; jt < j1; jt += KT) {
		/* scores: a warp per key, lanes over the dimension; unrolled so that
		 * the warp's keys are loaded together (rolled, each key's block-table
		 * lookup and K row were a dependent round trip to memory) */
#pragma unroll
		for (uint32_t i = 0; i < KT / AT_WARPS; i++) {
			const uint32_t kk = warp + i * AT_WARPS;
			const uint32_t j = jt + kk;
			const float *e = j < j1 ? kv_entry(p.kv, tab, j) : nullptr;
			float d[MOEM_K_ATTN_MAX_HB];

#pragma unroll
			for (int hh = 0; hh < MOEM_K_ATTN_MAX_HB; hh++)
				d[hh] = 0.0f;
			if (e) {
				const float *k = e + p.k_off + (size_t)g * p.qk_dim;

#pragma unroll 4
				for (uint32_t c = lane; c < p.qk_dim; c += 32) {
					const float kv = k[c];

#pragma unroll
					for (uint32_t hh = 0; hh < MOEM_K_ATTN_MAX_HB; hh++)
						if (hh < nh)
							d[hh] = fmaf(qs[hh * p.qk_dim + c], kv,
								     d[hh]);
				}
			}
#pragma unroll
			for (uint32_t hh = 0; hh < MOEM_K_ATTN_MAX_HB; hh++) {
				float s;

				if (hh >= nh) /* uniform across the block */
					break;
				s = warp_sum(d[hh]);
				if (lane == 0)
					sc[hh][kk] = e ? __fmul_rn(s, p.scale) : -INFINITY;
			}
			if (lane == 0)
				vrow[kk] = e ? e + p.v_off + (size_t)g * p.v_dim : nullptr;
		}
		__syncthreads();
		/* online softmax: a warp per head, a lane per key */
		for (uint32_t hh = warp; hh < nh; hh += AT_WARPS) {
			const float s = sc[hh][lane], m_old = mx[hh];
			const float m_new = fmaxf(m_old, warp_max(s));
			const float pr = exp_diff(s, m_new);
			const float tot = warp_sum(pr);

			sc[hh][lane] = pr;
			if (lane == 0) {
				const float c = exp_diff(m_old, m_new);

				corr[hh] = c;
				sm[hh] = __fadd_rn(__fmul_rn(sm[hh], c), tot);
				mx[hh] = m_new;
			}
		}
		__syncthreads();
		/* accumulators: thread owns (head, column) e = tid + 128 a */
#pragma unroll
		for (int a = 0; a < MOEM_K_ATTN_ACC; a++) {
			const uint32_t e = threadIdx.x + a * MOEM_K_ATTN_THREADS;
			const uint32_t hh = e / p.v_dim, c = e % p.v_dim;
			float v;

			if (hh >= nh)
				break;
			v = __fmul_rn(acc[a], corr[hh]);
			/* unrolled: the tile's V loads in flight together, same FMA order */
#pragma unroll
			for (uint32_t kk = 0; kk < KT; kk++)
				if (vrow[kk])
					v = fmaf(sc[hh][kk], vrow[kk][c], v);
			acc[a] = v;
		}
		__syncthreads();
	}
	part = ((size_t)(t - p.t0) * p.n_heads + h0) * MOEM_K_ATTN_SPLITS + split;
	if (threadIdx.x < nh) {
		float *ml = reinterpret_cast<float *>(p.ml) +
			    (part + (size_t)threadIdx.x * MOEM_K_ATTN_SPLITS) * 2;

		ml[0] = mx[threadIdx.x];
		ml[1] = sm[threadIdx.x];
	}
#pragma unroll
	for (int a = 0; a < MOEM_K_ATTN_ACC; a++) {
		const uint32_t e = threadIdx.x + a * MOEM_K_ATTN_THREADS;
		const uint32_t hh = e / p.v_dim, c = e % p.v_dim;

		if (hh >= nh)
			break;
		reinterpret_cast<float *>(
			p.o)[(part + (size_t)hh * MOEM_K_ATTN_SPLITS) * p.v_dim + c] = acc[a];
	}
}

extern "C" __global__ void __launch_bounds__(MOEM_K_ATTN_THREADS)
	moem_attn_merge(const moem_kattn_params p)
{
	const uint32_t t = p.t0 + blockIdx.x / p.n_heads, h = blockIdx.x % p.n_heads;
	const size_t part = ((size_t)(t - p.t0) * p.n_heads + h) * MOEM_K_ATTN_SPLITS;
	const float *ml = reinterpret_cast<const float *>(p.ml) + part * 2;
	const float *o = reinterpret_cast<const float *>(p.o) + part * p.v_dim;
	float *out = reinterpret_cast<float *>(p.out) + ((size_t)t * p.n_heads + h) * p.v_dim;
	uint32_t lo, n, len, ns = 0;
	float m = -INFINITY, l = 0.0f;

	if (attn_range(p, t, &lo, &n, &len, &ns))
		for (uint32_t s = 0; s < ns; s++)
			m = fmaxf(m, ml[2 * s]);
	if (m == -INFINITY) { /* no position or no key in the pool: zeros, as on the CPU */
		for (uint32_t c = threadIdx.x; c < p.v_dim; c += MOEM_K_ATTN_THREADS)
			out[c] = 0.0f;
		return;
	}
	for (uint32_t s = 0; s < ns; s++)
		l = __fadd_rn(l, __fmul_rn(ml[2 * s + 1], exp_diff(ml[2 * s], m)));
	for (uint32_t c = threadIdx.x; c < p.v_dim; c += MOEM_K_ATTN_THREADS) {
		float v = 0.0f;

		for (uint32_t s = 0; s < ns; s++)
			v = fmaf(o[(size_t)s * p.v_dim + c], exp_diff(ml[2 * s], m), v);
		out[c] = __fdiv_rn(v, l);
	}
}
