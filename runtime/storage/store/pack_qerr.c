// SPDX-License-Identifier: GPL-2.0-only
/*
 * Quantization error report (pack.h): the relative output error of each
 * quantized expert FFN against its bf16 blob, on the same activations,
 * through the double-precision reference FFN.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/pack.h>

#include "store_int.h"

struct qe_ctx {
	const struct moem_pack *p;
	uint32_t n_experts, n_acts;
	uint64_t seed;
	double sum[MOEM_PREC_NR], max[MOEM_PREC_NR];
	uint32_t count[MOEM_PREC_NR];
	pthread_mutex_t lock; /* the sums */
};

static void sample_act(uint64_t seed, uint32_t s, uint32_t a, float *act, uint32_t n)
{
	struct moem_rng r;

	moem_rng_seed(&r, seed ^ ((uint64_t)s << 20), a + 1);
	for (uint32_t i = 0; i < n; i++)
		act[i] = (float)moem_rng_normal(&r);
}

static int grow_buf(uint8_t **buf, uint64_t *cap, uint64_t need)
{
	uint8_t *nb;

	if (*cap >= need)
		return 0;
	nb = realloc(*buf, (size_t)need);
	if (!nb)
		return -ENOMEM;
	*buf = nb;
	*cap = need;
	return 0;
}

/*
 * Sample s: an expert drawn from (seed, s), independent of the thread
 * count; its bf16 outputs on n_acts activations are the reference for
 * every quantized precision of the same expert.
 */
static int measure(struct qe_ctx *x, uint32_t s, uint8_t **buf, uint64_t *cap)
{
	const struct moem_model_config *c = moem_pack_config(x->p);
	uint32_t n_moe = moem_n_moe_layers(c), m, layer = 0, e, H = c->hidden;
	double sum[MOEM_PREC_NR] = {0}, max[MOEM_PREC_NR] = {0};
	double *y_ref = malloc(sizeof(double) * H * x->n_acts), *y_q = malloc(sizeof(double) * H);
	float *act = malloc(sizeof(float) * H);
	const struct moem_pack_blob *ref, *q;
	uint32_t measured = 0;
	struct moem_rng r;
	int ret = 0;

	if (!y_ref || !y_q || !act) {
		ret = -ENOMEM;
		goto out;
	}
	moem_rng_seed(&r, x->seed, 0x71657272ULL + s);
	m = moem_rng_below(&r, n_moe);
	e = moem_rng_below(&r, c->n_experts);
	for (uint32_t l = 0, k = 0; l < c->n_layers; l++)
		if (moem_layer_is_moe(c, l) && k++ == m)
			layer = l;
	ref = moem_pack_expert(x->p, layer, e, MOEM_PREC_BF16);
	ret = grow_buf(buf, cap, ref->size);
	if (!ret)
		ret = moem_pack_read_blob(x->p, ref, *buf, ref->size);
	for (uint32_t a = 0; a < x->n_acts && !ret; a++) {
		sample_act(x->seed, s, a, act, H);
		ret = moem_ffn_ref(&ref->layout, *buf, act, y_ref + (size_t)a * H);
	}
	for (int p = MOEM_PREC_Q8; p < MOEM_PREC_NR && !ret; p++) {
		q = moem_pack_expert(x->p, layer, e, (enum moem_prec)p);
		if (!q)
			continue;
		measured |= 1u << p;
		ret = grow_buf(buf, cap, q->size);
		if (!ret)
			ret = moem_pack_read_blob(x->p, q, *buf, q->size);
		for (uint32_t a = 0; a < x->n_acts && !ret; a++) {
			const double *yr = y_ref + (size_t)a * H;
			double num = 0, den = 0, rel;

			sample_act(x->seed, s, a, act, H);
			ret = moem_ffn_ref(&q->layout, *buf, act, y_q);
			for (uint32_t i = 0; i < H && !ret; i++) {
				num += (y_q[i] - yr[i]) * (y_q[i] - yr[i]);
				den += yr[i] * yr[i];
			}
			rel = den > 0 ? sqrt(num / den) : 0;
			sum[p] += rel;
			max[p] = fmax(max[p], rel);
		}
	}
	if (!ret) {
		pthread_mutex_lock(&x->lock);
		for (int p = MOEM_PREC_Q8; p < MOEM_PREC_NR; p++) {
			if (!(measured & (1u << p)))
				continue;
			x->sum[p] += sum[p];
			x->max[p] = fmax(x->max[p], max[p]);
			x->count[p] += x->n_acts;
		}
		pthread_mutex_unlock(&x->lock);
	}
out:
	free(y_ref);
	free(y_q);
	free(act);
	return ret;
}

/* One measuring thread's buffer for an expert's blobs. */
struct qe_scratch {
	uint8_t *buf;
	uint64_t cap;
};

static int qe_init(void *ctx, void **scratch)
{
	(void)ctx;
	*scratch = calloc(1, sizeof(struct qe_scratch));
	return *scratch ? 0 : -ENOMEM;
}

static int qe_run(void *ctx, size_t job, void *scratch)
{
	struct qe_scratch *sc = scratch;

	return measure(ctx, (uint32_t)job, &sc->buf, &sc->cap);
}

static void qe_fini(void *ctx, void *scratch)
{
	struct qe_scratch *sc = scratch;

	(void)ctx;
	if (sc)
		free(sc->buf);
	free(sc);
}

static const struct moem_store_jobs qe_jobs = {.init = qe_init, .run = qe_run, .fini = qe_fini};

int moem_pack_quant_error(const struct moem_pack *p, uint32_t n_experts, uint32_t n_acts,
			  uint64_t seed, uint32_t threads, struct moem_qerr out[MOEM_PREC_NR])
{
	struct qe_ctx x = {.p = p, .n_experts = n_experts, .n_acts = n_acts, .seed = seed};
	int ret;

	memset(out, 0, sizeof(*out) * MOEM_PREC_NR);
	if (!(moem_pack_precisions(p) & (1u << MOEM_PREC_BF16)))
		return moem_errf(ENOENT, "%s: no bf16 blobs to measure quantization error against",
				 moem_pack_path(p));
	if (!n_experts || !n_acts || n_experts > 1000000 || n_acts > 1024)
		return moem_errf(EINVAL,
				 "quantization error: %u experts x %u activations (want "
				 "1..1000000 x 1..1024)",
				 n_experts, n_acts);
	pthread_mutex_init(&x.lock, NULL);
	ret = moem_store_run_jobs(&qe_jobs, &x, n_experts, threads);
	pthread_mutex_destroy(&x.lock);
	if (ret)
		return ret;
	for (int q = MOEM_PREC_Q8; q < MOEM_PREC_NR; q++) {
		out[q].samples = x.count[q];
		out[q].mean_rel = x.count[q] ? x.sum[q] / x.count[q] : 0;
		out[q].max_rel = x.max[q];
	}
	return 0;
}
