// SPDX-License-Identifier: GPL-2.0-only
/*
 * CPU reference of the paged KV cache and attention (backend.h): scores
 * and the weighted sum in key order, the softmax's max subtracted first
 * and its sum in double. A score is dot_f32()'s fixed-order dot product
 * when the head width is a multiple of 8 (every real config). Work items
 * are tiles (attn_item()): the query heads of one KV head for up to 16
 * tokens of one sequence, so a prompt chunk reads each key and value once
 * per tile instead of once per (token, head); per query the operations
 * and their order are those of the query alone, so a result depends on
 * neither the thread count nor the batch (tests/unit/test_cpu_attention.c).
 * Within a tile, scores are taken four queries to a key (their add chains
 * overlap), keys and values are prefetched ahead (one head's rows of
 * consecutive positions are an entry apart, a page each), and the
 * weighted sum runs over blocks of ATT_VB keys with the output in
 * registers. Against the plain loops, the same bits; at Qwen3-30B's
 * shapes on a 2-thread AMD EPYC (AVX2) a decode token at a context of
 * 4096 took 3.7 ms instead of 7.6, a 64-token prompt chunk at 512 17.5
 * instead of 25.
 */
#include <errno.h>
#include <math.h>

#include <moem/error.h>

#include "cpu_int.h"

/* The entry of position j of the sequence whose block table is tab, or NULL. */
static float *kv_entry(const struct moem_kv_geom *g, const int32_t *tab, uint32_t j)
{
	int32_t b = tab[j / g->block_tokens];

	if (b < 0 || (uint32_t)b >= g->n_blocks)
		return NULL;
	return (float *)moem_dptr_host(g->pool) +
	       (((size_t)b * g->n_layers + g->layer) * g->block_tokens + j % g->block_tokens) *
		       g->entry;
}

static void store_row(void *arg, uint32_t t, uint32_t worker)
{
	const struct moem_kv_store_args *a = arg;
	const int32_t pos = ((const int32_t *)moem_dptr_host(a->pos))[t];
	const uint32_t off = ((const uint32_t *)moem_dptr_host(a->tab))[t];
	const int32_t *tab = (const int32_t *)moem_dptr_host(a->kv.tables) + off;
	float *dst = pos >= 0 ? kv_entry(&a->kv, tab, (uint32_t)pos) : NULL;

	if (dst)
		memcpy(dst, (const float *)moem_dptr_host(a->src) + (size_t)t * a->src_stride,
		       sizeof(float) * a->kv.entry);
}

int moem_cpu_kv_store(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_kv_store_args *a)
{
	moem_tpool_run(cpu_of(be)->pool, a->T, store_row, (void *)a);
	return 0;
}

/*
 * Queries of one tile: the heads that share one KV head, for up to
 * ATT_QT tokens of one sequence (same block table), so each key and
 * value is read from memory once for all of them instead of once per
 * (token, head); at most ATT_Q queries, fewer at long contexts, so that
 * a worker's scores stay within ATT_SCORES bytes.
 */
#define ATT_QT	   16
#define ATT_Q	   128
#define ATT_SCORES (4u << 20) /* bytes of one worker's tile scores, at most (1 query: more) */
#define ATT_VB	   32	      /* keys per block of the value pass (their rows stay in L1) */
#define ATT_PF	   8	      /* keys ahead the score pass prefetches */

struct attn_tile {
	uint32_t t0, nt; /* tokens t0 .. t0 + nt - 1 */
	uint32_t g;	 /* the KV head */
	uint32_t h0, nh; /* query heads h0 .. h0 + nh - 1 (of g's group) */
};

struct attn_job {
	const struct moem_attn_args *a;
	struct attn_tile *tiles;
	float *scores; /* [workers][qmax][max_ctx] */
	uint32_t max_ctx, qmax;
};

/* What one query of a tile needs. */
struct attn_q {
	const float *q;
	float *out, *sc;
	uint32_t lo, hi; /* keys lo .. hi - 1 (hi 0: none) */
	float mx;
	double sum;
};

/*
 * Start loading n floats at e + off (e: a KV entry, or NULL). One
 * position's key or value row is a slice of an entry that holds every
 * KV head's, so consecutive keys of one head lie an entry (4 KiB at
 * Qwen3-30B's shapes) apart: a new page each, which the hardware
 * prefetchers do not follow (a decode step at a context of 4096 waited
 * on most of its key loads).
 */
static inline __attribute__((always_inline)) void prefetch_row(const float *e, uint32_t off,
							       uint32_t n)
{
	if (e)
		for (uint32_t c = 0; c < n; c += 16)
			__builtin_prefetch(e + off + c, 0, 3);
}

/*
 * d[r] = dot_f32(q_r, k, n) for four queries against one key, bit for
 * bit: each keeps dot_f32()'s two accumulators and order, only
 * interleaved, so that four chains of dependent adds overlap where one
 * query's left the score pass waiting on add latency.
 */
static inline __attribute__((always_inline)) void dot_f32_x4(const float *q0, const float *q1,
							     const float *q2, const float *q3,
							     const float *k, uint32_t n, float *d)
{
	v8f a0 = {0}, b0 = {0}, a1 = {0}, b1 = {0}, a2 = {0}, b2 = {0}, a3 = {0}, b3 = {0};
	v8f k0, k1, y;
	uint32_t i = 0;

#define DOT4_STEP(a, b, q)               \
	do {                             \
		V8_LOAD(y, (q) + i);     \
		a += y * k0;             \
		V8_LOAD(y, (q) + i + 8); \
		b += y * k1;             \
	} while (0)
	for (; i + 16 <= n; i += 16) {
		V8_LOAD(k0, k + i);
		V8_LOAD(k1, k + i + 8);
		DOT4_STEP(a0, b0, q0);
		DOT4_STEP(a1, b1, q1);
		DOT4_STEP(a2, b2, q2);
		DOT4_STEP(a3, b3, q3);
	}
#undef DOT4_STEP
	if (i < n) {
		V8_LOAD(k0, k + i);
		V8_LOAD(y, q0 + i);
		a0 += y * k0;
		V8_LOAD(y, q1 + i);
		a1 += y * k0;
		V8_LOAD(y, q2 + i);
		a2 += y * k0;
		V8_LOAD(y, q3 + i);
		a3 += y * k0;
	}
	a0 += b0;
	a1 += b1;
	a2 += b2;
	a3 += b3;
	d[0] = V8_HSUM(a0);
	d[1] = V8_HSUM(a1);
	d[2] = V8_HSUM(a2);
	d[3] = V8_HSUM(a3);
}

/* A query's score for key p, and its running max (fmaxf's, as mx is never NaN). */
static inline __attribute__((always_inline)) void score_put(struct attn_q *x, uint32_t p, float s)
{
	x->sc[p - x->lo] = s;
	if (s > x->mx)
		x->mx = s;
}

/*
 * out[c] += pr[k] * v[k][c] for k < n in k order (a NULL v[k], a missing
 * block, is skipped), the very float operations of the plain loop; out is
 * held in registers over the n keys, 32 floats at a time, where the plain
 * loop loaded and stored it for every key (a decode step at a context of
 * 4096 spent most of its attention there).
 */
static inline __attribute__((always_inline)) void
value_sum(float *out, const float *const *v, const float *pr, uint32_t n, uint32_t dim)
{
	uint32_t c = 0;

	for (; c + 32 <= dim; c += 32) {
		v8f a0, a1, a2, a3, y;

		V8_LOAD(a0, out + c);
		V8_LOAD(a1, out + c + 8);
		V8_LOAD(a2, out + c + 16);
		V8_LOAD(a3, out + c + 24);
		for (uint32_t k = 0; k < n; k++) {
			const v8f s = {pr[k], pr[k], pr[k], pr[k], pr[k], pr[k], pr[k], pr[k]};

			if (!v[k])
				continue;
			V8_LOAD(y, v[k] + c);
			a0 += s * y;
			V8_LOAD(y, v[k] + c + 8);
			a1 += s * y;
			V8_LOAD(y, v[k] + c + 16);
			a2 += s * y;
			V8_LOAD(y, v[k] + c + 24);
			a3 += s * y;
		}
		memcpy(out + c, &a0, sizeof(a0));
		memcpy(out + c + 8, &a1, sizeof(a1));
		memcpy(out + c + 16, &a2, sizeof(a2));
		memcpy(out + c + 24, &a3, sizeof(a3));
	}
	for (; c + 8 <= dim; c += 8) {
		v8f a0, y;

		V8_LOAD(a0, out + c);
		for (uint32_t k = 0; k < n; k++) {
			const v8f s = {pr[k], pr[k], pr[k], pr[k], pr[k], pr[k], pr[k], pr[k]};

			if (!v[k])
				continue;
			V8_LOAD(y, v[k] + c);
			a0 += s * y;
		}
		memcpy(out + c, &a0, sizeof(a0));
	}
	for (; c < dim; c++)
		for (uint32_t k = 0; k < n; k++)
			if (v[k])
				out[c] += pr[k] * v[k][c];
}

/*
 * Per query the very operations of one query alone, in the same order:
 * each score a dot_f32() (or the plain loop) times scale, the max, the
 * exponentials and their double sum in key order, then the weighted sum
 * of the values in key order; only the loop over keys is outside the
 * loop over queries. So a result does not depend on the tile, the batch
 * or the thread count.
 */
MOEM_CPU_CLONES static void attn_item(void *arg, uint32_t item, uint32_t worker)
{
	struct attn_job *j = arg;
	const struct moem_attn_args *a = j->a;
	const struct attn_tile *tl = &j->tiles[item];
	const int32_t *pos = moem_dptr_host(a->pos);
	const uint32_t off = ((const uint32_t *)moem_dptr_host(a->tab))[tl->t0];
	const int32_t *tab = (const int32_t *)moem_dptr_host(a->kv.tables) + off;
	struct attn_q qs[ATT_Q];
	uint32_t nq = 0, jlo = UINT32_MAX, jhi = 0;

	for (uint32_t t = tl->t0; t < tl->t0 + tl->nt; t++) {
		for (uint32_t h = tl->h0; h < tl->h0 + tl->nh; h++) {
			struct attn_q *x = &qs[nq];

			x->q = (const float *)moem_dptr_host(a->q) + (size_t)t * a->q_stride +
			       (size_t)h * a->qk_dim;
			x->out = (float *)moem_dptr_host(a->out) +
				 ((size_t)t * a->n_heads + h) * a->v_dim;
			x->sc = j->scores + ((size_t)worker * j->qmax + nq) * j->max_ctx;
			x->lo = x->hi = 0;
			x->mx = -INFINITY;
			x->sum = 0;
			memset(x->out, 0, sizeof(float) * a->v_dim);
			if (pos[t] >= 0) {
				x->hi = (uint32_t)pos[t] + 1;
				if (a->window && x->hi > a->window)
					x->lo = x->hi - a->window;
				jlo = moem_min(jlo, x->lo);
				jhi = moem_max(jhi, x->hi);
			}
			nq++;
		}
	}
	for (uint32_t p = jlo; p < jhi; p++) {
		const float *k = kv_entry(&a->kv, tab, p);

		if (k)
			k += a->k_off + (size_t)tl->g * a->qk_dim;
		if (p + ATT_PF < jhi)
			prefetch_row(kv_entry(&a->kv, tab, p + ATT_PF),
				     a->k_off + tl->g * a->qk_dim, a->qk_dim);
		uint32_t act[ATT_Q], na = 0, i = 0;

		for (uint32_t n = 0; n < nq; n++) {
			if (p < qs[n].lo || p >= qs[n].hi)
				continue;
			if (k)
				act[na++] = n;
			else
				qs[n].sc[p - qs[n].lo] = -INFINITY;
		}
		if (a->qk_dim % 8 == 0)
			for (; i + 4 <= na; i += 4) {
				struct attn_q *x[4] = {&qs[act[i]], &qs[act[i + 1]],
						       &qs[act[i + 2]], &qs[act[i + 3]]};
				float d[4];

				dot_f32_x4(x[0]->q, x[1]->q, x[2]->q, x[3]->q, k, a->qk_dim, d);
				for (int r = 0; r < 4; r++)
					score_put(x[r], p, d[r] * a->scale);
			}
		for (; i < na; i++) {
			struct attn_q *x = &qs[act[i]];
			float d = 0.0f;

			if (a->qk_dim % 8 == 0) {
				d = dot_f32(x->q, k, a->qk_dim);
			} else {
				for (uint32_t c = 0; c < a->qk_dim; c++)
					d += x->q[c] * k[c];
			}
			score_put(x, p, d * a->scale);
		}
	}
	for (uint32_t i = 0; i < nq; i++) {
		struct attn_q *x = &qs[i];

		if (x->mx == -INFINITY) {
			x->hi = 0; /* no key: the output stays zero */
			continue;
		}
		for (uint32_t n = 0; n < x->hi - x->lo; n++) {
			x->sc[n] = expf(x->sc[n] - x->mx);
			x->sum += x->sc[n];
		}
		/* the weights, each the float of its double quotient */
		for (uint32_t n = 0; n < x->hi - x->lo; n++)
			x->sc[n] = (float)(x->sc[n] / x->sum);
	}
	for (uint32_t p0 = jlo; p0 < jhi; p0 += ATT_VB) {
		const uint32_t p1 = moem_min(p0 + ATT_VB, jhi);
		const float *vp[ATT_VB];

		for (uint32_t p = p0; p < p1; p++) {
			vp[p - p0] = kv_entry(&a->kv, tab, p);
			if (vp[p - p0])
				vp[p - p0] += a->v_off + (size_t)tl->g * a->v_dim;
			if (p + ATT_VB < jhi) /* the next block's rows */
				prefetch_row(kv_entry(&a->kv, tab, p + ATT_VB),
					     a->v_off + tl->g * a->v_dim, a->v_dim);
		}
		for (uint32_t i = 0; i < nq; i++) {
			struct attn_q *x = &qs[i];
			const uint32_t lo = moem_max(p0, x->lo), hi = moem_min(p1, x->hi);

			if (lo < hi)
				value_sum(x->out, vp + (lo - p0), x->sc + (lo - x->lo), hi - lo,
					  a->v_dim);
		}
	}
}

/* Tokens of the run from t0: those of t0's sequence (block table) in a row, at most qt. */
static uint32_t run_len(const uint32_t *tabs, uint32_t T, uint32_t t0, uint32_t qt)
{
	uint32_t nt = 1;

	while (t0 + nt < T && nt < qt && tabs[t0 + nt] == tabs[t0])
		nt++;
	return nt;
}

int moem_cpu_attention(struct moem_backend *be, struct moem_stream *s,
		       const struct moem_attn_args *a)
{
	struct cpu_backend *c = cpu_of(be);
	const int32_t *pos = moem_dptr_host(a->pos);
	const uint32_t *tabs = moem_dptr_host(a->tab);
	const uint32_t group = a->n_heads / a->n_kv_heads, workers = moem_tpool_size(c->pool);
	uint32_t hs, qt, n_tiles = 0, n_runs = 0, cap;
	struct attn_job j = {a};

	for (uint32_t t = 0; t < a->T; t++)
		if (pos[t] >= 0 && (uint32_t)pos[t] + 1 > j.max_ctx)
			j.max_ctx = (uint32_t)pos[t] + 1;
	if (!j.max_ctx)
		j.max_ctx = 1;
	/* queries of a tile: ATT_Q, fewer where their scores would pass ATT_SCORES */
	j.qmax = moem_max(
		1u, moem_min((uint32_t)ATT_Q, ATT_SCORES / (uint32_t)(sizeof(float) * j.max_ctx)));
	hs = moem_min(group, j.qmax);
	qt = moem_max(1u, moem_min((uint32_t)ATT_QT, j.qmax / hs));
	for (uint32_t t0 = 0; t0 < a->T; t0 += run_len(tabs, a->T, t0, qt))
		n_runs++;
	/* fewer tiles than two per worker (a decode batch): fewer heads a tile */
	while (hs > 1 && n_runs * a->n_kv_heads * ((group + hs - 1) / hs) < 2 * workers)
		hs = (hs + 1) / 2;
	cap = n_runs * a->n_kv_heads * ((group + hs - 1) / hs);
	j.tiles = moem_cpu_scratch(s, sizeof(*j.tiles) * cap +
					      sizeof(float) * j.qmax * j.max_ctx * workers);
	if (!j.tiles)
		return -ENOMEM;
	j.scores = (float *)(j.tiles + cap);
	for (uint32_t t0 = 0, nt; t0 < a->T; t0 += nt) {
		nt = run_len(tabs, a->T, t0, qt);
		for (uint32_t g = 0; g < a->n_kv_heads; g++)
			for (uint32_t h = 0; h < group; h += hs)
				j.tiles[n_tiles++] = (struct attn_tile){t0, nt, g, g * group + h,
									moem_min(hs, group - h)};
	}
	moem_tpool_run(c->pool, n_tiles, attn_item, &j);
	return 0;
}
