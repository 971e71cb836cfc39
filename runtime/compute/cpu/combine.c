// SPDX-License-Identifier: GPL-2.0-only
/*
 * CPU combine (backend.h moem_combine_args): slot order, one rounding per
 * product and per sum, exactly as the CUDA kernel does it.
 */
#include "cpu_int.h"

struct combine_job {
	const struct moem_combine_args *a;
};

static void combine_token(void *arg, uint32_t t, uint32_t worker)
{
	const struct moem_combine_args *a = ((struct combine_job *)arg)->a;
	float *h = (float *)moem_dptr_host(a->h) + (size_t)t * a->H;
	const float *routed = a->k ? (const float *)moem_dptr_host(a->routed) : NULL;
	const float *w = a->k ? (const float *)moem_dptr_host(a->w) + (size_t)t * a->k : NULL;
	const float *sh = a->n_shared ? (const float *)moem_dptr_host(a->shared) : NULL;
	uint32_t cnt = a->k ? ((const uint32_t *)moem_dptr_host(a->cnt))[t] : 0;

	if (cnt > a->k)
		cnt = a->k;
	for (uint32_t i = 0; i < a->H; i++) {
		float acc = 0.0f;

		for (uint32_t j = 0; j < cnt; j++) {
			float p = w[j] * routed[((size_t)t * a->k + j) * a->H + i];

			acc = acc + p;
		}
		for (uint32_t s = 0; s < a->n_shared; s++)
			acc = acc + sh[((size_t)t * a->n_shared + s) * a->H + i];
		h[i] = h[i] + acc;
	}
}

int moem_cpu_combine(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_combine_args *a)
{
	struct combine_job j = {a};

	moem_tpool_run(cpu_of(be)->pool, a->B, combine_token, &j);
	return 0;
}
