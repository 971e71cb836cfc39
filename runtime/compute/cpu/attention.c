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
		for (uint32_t i = 0; i < nq; i++) {
			struct attn_q *x = &qs[i];
			float d = 0.0f;

			if (p < x->lo || p >= x->hi)
				continue;
			if (!k) {
				x->sc[p - x->lo] = -INFINITY;
				continue;
			}
			if (a->qk_dim % 8 == 0) {
				d = dot_f32(x->q, k, a->qk_dim);
			} else {
				for (uint32_t c = 0; c < a->qk_dim; c++)
					d += x->q[c] * k[c];
			}
			x->sc[p - x->lo] = d * a->scale;
			x->mx = fmaxf(x->mx, x->sc[p - x->lo]);
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
	}
	for (uint32_t p = jlo; p < jhi; p++) {
		const float *v = kv_entry(&a->kv, tab, p);

		if (!v)
			continue;
		v += a->v_off + (size_t)tl->g * a->v_dim;
		for (uint32_t i = 0; i < nq; i++) {
			struct attn_q *x = &qs[i];
			float pr;

			if (p < x->lo || p >= x->hi)
				continue;
			pr = (float)(x->sc[p - x->lo] / x->sum);
			for (uint32_t c = 0; c < a->v_dim; c++)
				x->out[c] += pr * v[c];
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
