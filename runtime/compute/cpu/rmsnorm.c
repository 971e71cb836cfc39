// SPDX-License-Identifier: GPL-2.0-only
/* CPU RMSNorm (backend.h moem_rmsnorm_args): one token per work item. */
#include <math.h>

#include "cpu_int.h"

struct rmsnorm_job {
	const struct moem_rmsnorm_args *a;
};

static void rmsnorm_token(void *arg, uint32_t t, uint32_t worker)
{
	const struct moem_rmsnorm_args *a = ((struct rmsnorm_job *)arg)->a;
	const float *x = (const float *)moem_dptr_host(a->x) + (size_t)t * a->H;
	const uint16_t *w = moem_dptr_host(a->weight);
	uint16_t *y = (uint16_t *)moem_dptr_host(a->y) + (size_t)t * a->H;
	double ss = 0;
	float ms, r;

	/* Products of floats are exact in double: the order hardly matters. */
	for (uint32_t i = 0; i < a->H; i++)
		ss += (double)x[i] * x[i];
	ms = (float)(ss / a->H);
	r = 1.0f / sqrtf(ms + a->eps);
	for (uint32_t i = 0; i < a->H; i++)
		y[i] = moem_f32_to_bf16((x[i] * r) * moem_bf16_to_f32(w[i]));
}

int moem_cpu_rmsnorm(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_rmsnorm_args *a)
{
	struct rmsnorm_job j = {a};

	moem_tpool_run(cpu_of(be)->pool, a->B, rmsnorm_token, &j);
	return 0;
}
