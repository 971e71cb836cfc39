// SPDX-License-Identifier: GPL-2.0-only
/*
 * CPU reference of the paged KV cache and attention (backend.h): one work
 * item per (token, head), scores and the weighted sum in key order, the
 * softmax's max subtracted first and its sum in double. A score is
 * dot_f32()'s fixed-order dot product when the head width is a multiple
 * of 8 (every real config), so it vectorises without depending on the
 * thread count or the batch.
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

struct attn_job {
	const struct moem_attn_args *a;
	float *scores; /* [workers][max_ctx] */
	uint32_t max_ctx;
};

MOEM_CPU_CLONES static void attn_item(void *arg, uint32_t item, uint32_t worker)
{
	struct attn_job *j = arg;
	const struct moem_attn_args *a = j->a;
	const uint32_t t = item / a->n_heads, h = item % a->n_heads;
	const uint32_t g = h / (a->n_heads / a->n_kv_heads);
	const int32_t pos = ((const int32_t *)moem_dptr_host(a->pos))[t];
	const uint32_t off = ((const uint32_t *)moem_dptr_host(a->tab))[t];
	const int32_t *tab = (const int32_t *)moem_dptr_host(a->kv.tables) + off;
	const float *q = (const float *)moem_dptr_host(a->q) + (size_t)t * a->q_stride +
			 (size_t)h * a->qk_dim;
	float *out = (float *)moem_dptr_host(a->out) + ((size_t)t * a->n_heads + h) * a->v_dim;
	float *sc = j->scores + (size_t)worker * j->max_ctx;
	uint32_t lo = 0, n;
	float mx = -INFINITY;
	double sum = 0;

	memset(out, 0, sizeof(float) * a->v_dim);
	if (pos < 0)
		return;
	if (a->window && (uint32_t)pos + 1 > a->window)
		lo = (uint32_t)pos + 1 - a->window;
	n = (uint32_t)pos + 1 - lo;
	for (uint32_t i = 0; i < n; i++) {
		const float *k = kv_entry(&a->kv, tab, lo + i);
		float d = 0.0f;

		if (!k) {
			sc[i] = -INFINITY;
			continue;
		}
		k += a->k_off + (size_t)g * a->qk_dim;
		if (a->qk_dim % 8 == 0) {
			d = dot_f32(q, k, a->qk_dim);
		} else {
			for (uint32_t c = 0; c < a->qk_dim; c++)
				d += q[c] * k[c];
		}
		sc[i] = d * a->scale;
		mx = fmaxf(mx, sc[i]);
	}
	if (mx == -INFINITY)
		return;
	for (uint32_t i = 0; i < n; i++) {
		sc[i] = expf(sc[i] - mx);
		sum += sc[i];
	}
	for (uint32_t i = 0; i < n; i++) {
		const float *v = kv_entry(&a->kv, tab, lo + i);
		const float p = (float)(sc[i] / sum);

		if (!v)
			continue;
		v += a->v_off + (size_t)g * a->v_dim;
		for (uint32_t c = 0; c < a->v_dim; c++)
			out[c] += p * v[c];
	}
}

int moem_cpu_attention(struct moem_backend *be, struct moem_stream *s,
		       const struct moem_attn_args *a)
{
	struct cpu_backend *c = cpu_of(be);
	const int32_t *pos = moem_dptr_host(a->pos);
	struct attn_job j = {a};

	for (uint32_t t = 0; t < a->T; t++)
		if (pos[t] >= 0 && (uint32_t)pos[t] + 1 > j.max_ctx)
			j.max_ctx = (uint32_t)pos[t] + 1;
	if (!j.max_ctx)
		j.max_ctx = 1;
	j.scores = moem_cpu_scratch(s, sizeof(float) * j.max_ctx * moem_tpool_size(c->pool));
	if (!j.scores)
		return -ENOMEM;
	moem_tpool_run(c->pool, a->T * a->n_heads, attn_item, &j);
	return 0;
}
