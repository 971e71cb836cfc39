// SPDX-License-Identifier: GPL-2.0-only
/*
 * Routing kernel: top-k, LYNX, OEA and the resident-set piggyback, making
 * exactly the choices of runtime/compute/route/route.c on the same logits. One
 * block of 1024 threads; a warp routes tokens t = warp, warp + 32, ...
 * What keeps the choices identical:
 *  - candidates compare as in route.c: higher primary key, then higher
 *    secondary, then lower expert id (a strict total order, so a warp
 *    arg-max by butterfly gives the same winner in any order);
 *  - LYNX bins in float with the same two operations (ceilf(alpha *
 *    (z - max))), votes are integers, and the batch score S[e] is
 *    accumulated in double in route.c's order with explicit _rn
 *    operations (no FMA contraction); the key bin + S / (B + 1) is the
 *    same double;
 *  - route.c's fallback (route normally when LYNX would activate more
 *    experts than top-k) is applied the same way;
 *  - expert groups (route.h): a token's groups are chosen as its experts
 *    are, by warp_select over group scores (the best logit of the group,
 *    ties to the lower group), and kept as a 64-bit mask every key reads.
 * Weights follow route.h's rule in double; the softmax denominator is
 * summed in a different order than on the CPU, so weights agree to about
 * 1e-16 before the final rounding to float.
 */
#include "common.cuh"

#define WARPS (MOEM_K_ROUTE_THREADS / 32)

enum { R_TOPK = 0, R_LYNX = 1, R_OEA = 2, R_PIGGY = 3 }; /* enum moem_route_mode */

struct Cand {
	double a;
	float b;
	int e; /* -1: no candidate */
};

MOEM_DEVI bool better(const Cand &x, const Cand &y)
{
	if (y.e < 0)
		return x.e >= 0;
	if (x.e < 0)
		return false;
	if (x.a != y.a)
		return x.a > y.a;
	if (x.b != y.b)
		return x.b > y.b;
	return x.e < y.e;
}

MOEM_DEVI Cand warp_best(Cand c)
{
#pragma unroll
	for (int off = 16; off; off >>= 1) {
		Cand o;

		o.a = __shfl_xor_sync(0xffffffffu, c.a, off);
		o.b = __shfl_xor_sync(0xffffffffu, c.b, off);
		o.e = __shfl_xor_sync(0xffffffffu, c.e, off);
		if (better(o, c))
			c = o;
	}
	return c;
}

/*
 * Choose up to cap experts of one token, best first, by key(e) (a Cand
 * with e = -1 to exclude it); ids go to list[0..n). The whole warp calls
 * it and gets n.
 */
template <class Key> MOEM_DEVI int warp_select(int N, int cap, Key key, int *list)
{
	const int lane = threadIdx.x & 31;
	uint32_t taken = 0; /* bit i: expert lane + 32 i already chosen */
	int n = 0;

	for (; n < cap; n++) {
		Cand best = {0.0, 0.0f, -1};

		for (int i = 0; lane + 32 * i < N; i++) {
			if (!((taken >> i) & 1u)) {
				const Cand c = key(lane + 32 * i);

				if (better(c, best))
					best = c;
			}
		}
		best = warp_best(best);
		if (best.e < 0)
			break;
		if ((best.e & 31) == lane)
			taken |= 1u << (best.e >> 5);
		if (lane == 0)
			list[n] = best.e;
	}
	__syncwarp();
	return n;
}

/* set[list[i]] = 1 for i < n (up to the 64 of the model limit), by the warp. */
MOEM_DEVI void mark(uint8_t *set, const int *list, int n)
{
	for (int i = threadIdx.x & 31; i < n; i += 32)
		set[list[i]] = 1;
	__syncwarp();
}

/* route.h moem_route_weights() for ids[0..n) of row z, written by the warp. */
MOEM_DEVI void emit(const moem_kroute_params &p, int t, const float *z, const int *list, int n)
{
	const int lane = threadIdx.x & 31;
	int32_t *ids = reinterpret_cast<int32_t *>(p.ids) + (size_t)t * p.k;
	float *w = reinterpret_cast<float *>(p.w) + (size_t)t * p.k;
	double m = -INFINITY, sum = 0.0, chosen = 0.0, pj[2];

	if (n) {
		for (int e = lane; e < (int)p.N; e += 32)
			m = fmax(m, (double)clean_logit(z[e]));
#pragma unroll
		for (int off = 16; off; off >>= 1)
			m = fmax(m, __shfl_xor_sync(0xffffffffu, m, off));
		/* normalised, the softmax's denominator cancels (route.c) */
		if (p.norm_topk_prob) {
			sum = 1.0;
		} else {
			for (int e = lane; e < (int)p.N; e += 32)
				sum += exp((double)clean_logit(z[e]) - m);
#pragma unroll
			for (int off = 16; off; off >>= 1)
				sum += __shfl_down_sync(0xffffffffu, sum, off);
			sum = __shfl_sync(0xffffffffu, sum, 0);
		}
	}
	/* Each lane its slots' probabilities (k <= 64: two per lane), then
	 * their sum in slot order as route.h adds them: the same doubles as
	 * one lane computing them all in turn, without its chain of exps. */
	for (int r = 0; r < 2; r++) {
		const int j = lane + 32 * r;

		pj[r] = j < n ? exp((double)clean_logit(z[list[j]]) - m) / sum : 0.0;
	}
	for (int j = 0; j < n; j++) /* n is the warp's: every lane shuffles */
		chosen += __shfl_sync(0xffffffffu, pj[j >> 5], j & 31);
	for (int j = lane; j < (int)p.k; j += 32) {
		float wj = 0.0f;

		if (j < n) {
			double v = pj[j >> 5];

			if (p.norm_topk_prob && chosen > 0)
				v /= chosen;
			wj = (float)(v * (double)p.routed_scaling);
		}
		ids[j] = j < n ? list[j] : -1;
		w[j] = wj;
	}
	if (lane == 0)
		reinterpret_cast<uint32_t *>(p.cnt)[t] = n;
	__syncwarp(); /* the warp rewrites list for its next token */
}

/* Expert groups a token may choose from (route.h): all, or a mask of groups. */
struct Groups {
	uint64_t mask;
	int size; /* experts a group; 0: no limit */

	MOEM_DEVI bool has(int e) const
	{
		return !size || ((mask >> (e / size)) & 1u);
	}
};

struct KeyGroup { /* a group's best logit */
	const float *z;
	int size;

	MOEM_DEVI Cand operator()(int g) const
	{
		float m = -INFINITY;

		for (int e = g * size; e < (g + 1) * size; e++)
			m = fmaxf(m, clean_logit(z[e]));
		return Cand{(double)m, 0.0f, g};
	}
};

/* route.c moem_route_groups() for row z, by the warp; list is scratch. */
MOEM_DEVI Groups warp_groups(const moem_kroute_params &p, const float *z, int *list)
{
	Groups g = {~0ull, 0};

	if (p.n_group <= 1 || p.topk_group >= p.n_group)
		return g;
	g.size = (int)(p.N / p.n_group);
	const int n = warp_select((int)p.n_group, (int)p.topk_group, KeyGroup{z, g.size}, list);

	g.mask = 0;
	for (int j = 0; j < n; j++)
		g.mask |= 1ull << list[j];
	__syncwarp(); /* every lane has read list before it is written again */
	return g;
}

struct KeyLogit { /* top-k by logit within the groups, optionally masked */
	const float *z;
	const uint8_t *mask;
	Groups groups;

	MOEM_DEVI Cand operator()(int e) const
	{
		Cand c = {(double)clean_logit(z[e]), 0.0f, e};

		if ((mask && !mask[e]) || !groups.has(e))
			c.e = -1;
		return c;
	}
};

struct KeyLynx { /* bin + S / (B + 1), then own logit; top-1 excluded */
	const float *z;
	float rowmax, alpha;
	int beta, top1;
	const double *sdiv;
	Groups groups;

	MOEM_DEVI Cand operator()(int e) const
	{
		const float zc = clean_logit(z[e]);
		const float q = ceilf(__fmul_rn(alpha, __fsub_rn(zc, rowmax)));
		const int b = isfinite(q) && q > -(float)beta ? (int)q : -beta;
		Cand c = {__dadd_rn((double)b, sdiv[e]), zc, e};

		if (e == top1 || !groups.has(e))
			c.e = -1;
		return c;
	}
};

extern "C" __global__ void __launch_bounds__(MOEM_K_ROUTE_THREADS)
	moem_route(const moem_kroute_params p)
{
	__shared__ double sdiv[1024];
	__shared__ float rowmax[4096];
	__shared__ uint8_t base[1024], act_l[1024], act_v[1024];
	__shared__ int lists[WARPS][64];
	__shared__ int nreal, t_l, t_v;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int N = p.N, k = p.k, B = p.B;
	const float *logits = reinterpret_cast<const float *>(p.logits);
	const uint8_t *pad = reinterpret_cast<const uint8_t *>(p.pad);
	int *list = lists[warp];

	if (p.mode == R_TOPK) {
		for (int t = warp; t < B; t += WARPS) {
			const float *z = logits + (size_t)t * N;
			int n = 0;

			if (!(pad && pad[t]))
				n = warp_select(N, k, KeyLogit{z, nullptr, warp_groups(p, z, list)},
						list);
			emit(p, t, z, list, n);
		}
		return;
	}

	if (p.mode == R_OEA || p.mode == R_PIGGY) {
		const uint8_t *res = reinterpret_cast<const uint8_t *>(p.resident);

		for (int e = threadIdx.x; e < N; e += blockDim.x)
			base[e] = p.mode == R_PIGGY && res[e] != 0;
		__syncthreads();
		/* Phase 1: S_base = union of every real token's top-k0. */
		for (int t = warp; t < B; t += WARPS) {
			if (pad && pad[t])
				continue;
			const float *z = logits + (size_t)t * N;
			const int n = warp_select(
				N, p.k0, KeyLogit{z, nullptr, warp_groups(p, z, list)}, list);

			mark(base, list, n);
		}
		__syncthreads();
		/* Phase 2: each token's top-k of its logits masked to S_base. */
		for (int t = warp; t < B; t += WARPS) {
			const float *z = logits + (size_t)t * N;
			int n = 0;

			if (!(pad && pad[t]))
				n = warp_select(N, k, KeyLogit{z, base, warp_groups(p, z, list)},
						list);
			emit(p, t, z, list, n);
		}
		return;
	}

	/* LYNX. Token-wise binning needs each real token's maximum logit. */
	if (threadIdx.x == 0) {
		nreal = 0;
		t_l = 0;
		t_v = 0;
	}
	for (int e = threadIdx.x; e < N; e += blockDim.x)
		act_l[e] = act_v[e] = 0;
	__syncthreads();
	for (int t = warp; t < B; t += WARPS) {
		const float *z = logits + (size_t)t * N;
		float m = -INFINITY;

		if (pad && pad[t])
			continue;
		for (int e = lane; e < N; e += 32)
			m = fmaxf(m, clean_logit(z[e]));
#pragma unroll
		for (int off = 16; off; off >>= 1)
			m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
		if (lane == 0) {
			rowmax[t] = m;
			atomicAdd(&nreal, 1);
		}
	}
	__syncthreads();
	/* Batch score per expert: integer votes per bin, then route.c's sum. */
	{
		const double bse = nreal ? (double)nreal : 1.0;

		for (int e = threadIdx.x; e < N; e += blockDim.x) {
			uint32_t votes[65];
			double s = 0.0, scale = 1.0;

			for (int q = 0; q <= (int)p.beta; q++)
				votes[q] = 0;
			for (int t = 0; t < B; t++) {
				if (pad && pad[t])
					continue;
				const float zc = clean_logit(logits[(size_t)t * N + e]);
				const float q = ceilf(__fmul_rn(p.alpha, __fsub_rn(zc, rowmax[t])));
				const int b =
					isfinite(q) && q > -(float)p.beta ? (int)q : -(int)p.beta;

				votes[-b]++;
			}
			for (int q = 0; q <= (int)p.beta; q++) {
				s = __dadd_rn(s, __dmul_rn((double)votes[q], scale));
				scale = __ddiv_rn(scale, bse);
			}
			sdiv[e] = __ddiv_rn(s, __dadd_rn(bse, 1.0));
		}
	}
	__syncthreads();
	for (int t = warp; t < B; t += WARPS) {
		const float *z = logits + (size_t)t * N;
		int n = 0;

		if (!(pad && pad[t])) {
			const Groups g = warp_groups(p, z, list);
			/* Vanilla top-k, only to count T(vanilla). */
			const int nv = warp_select(N, k, KeyLogit{z, nullptr, g}, list);

			mark(act_v, list, nv);
			/* Slot 0: the token's own top-1; slots 1..k-1 by key. */
			warp_select(N, 1, KeyLogit{z, nullptr, g}, list);
			n = 1;
			if (k > 1)
				n += warp_select(N, k - 1,
						 KeyLynx{z, rowmax[t], p.alpha, (int)p.beta,
							 list[0], sdiv, g},
						 list + 1);
			mark(act_l, list, n);
		}
		emit(p, t, z, list, n);
	}
	__syncthreads();
	for (int e = threadIdx.x; e < N; e += blockDim.x) {
		if (act_l[e])
			atomicAdd(&t_l, 1);
		if (act_v[e])
			atomicAdd(&t_v, 1);
	}
	__syncthreads();
	if (t_l <= t_v)
		return;
	/* route.c's deviation: LYNX would raise T on this batch; route normally. */
	for (int t = warp; t < B; t += WARPS) {
		const float *z = logits + (size_t)t * N;
		int n = 0;

		if (!(pad && pad[t]))
			n = warp_select(N, k, KeyLogit{z, nullptr, warp_groups(p, z, list)}, list);
		emit(p, t, z, list, n);
	}
}
