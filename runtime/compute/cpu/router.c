// SPDX-License-Identifier: GPL-2.0-only
/*
 * CPU router GEMM: logits[t][e] = dot(gate[e], x[t]) in fp32 with the
 * fixed-order dot_f32(). Work items are blocks of experts; each gate row
 * is converted once and used for every token.
 */
#include <errno.h>

#include <moem/error.h>

#include "cpu_int.h"

#define ROUTER_ROWS 8

struct router_job {
	const struct moem_router_args *a;
	const float *xf; /* [B][H] */
	float *wbuf;	 /* [workers][H] */
};

MOEM_CPU_CLONES static void router_rows(void *arg, uint32_t item, uint32_t worker)
{
	struct router_job *j = arg;
	const struct moem_router_args *a = j->a;
	const uint16_t *gate = moem_dptr_host(a->gate);
	float *logits = moem_dptr_host(a->logits);
	float *w = j->wbuf + (size_t)worker * a->H;
	uint32_t e0 = item * ROUTER_ROWS, e1 = moem_min(e0 + ROUTER_ROWS, a->N);

	for (uint32_t e = e0; e < e1; e++) {
		bf16_to_f32_row(gate + (size_t)e * a->H, w, a->H);
		for (uint32_t t = 0; t < a->B; t++)
			logits[(size_t)t * a->N + e] = dot_f32(w, j->xf + (size_t)t * a->H, a->H);
	}
}

struct convert_job {
	const uint16_t *in;
	float *out;
	uint32_t n;
};

static void convert_row(void *arg, uint32_t t, uint32_t worker)
{
	struct convert_job *c = arg;

	bf16_to_f32_row(c->in + (size_t)t * c->n, c->out + (size_t)t * c->n, c->n);
}

/* xf[t][:] = float(x[t][:]) for t < B, on the pool. */
void moem_cpu_convert_x(struct moem_tpool *pool, const uint16_t *x, float *xf, uint32_t B,
			uint32_t H)
{
	struct convert_job c = {x, xf, H};

	moem_tpool_run(pool, B, convert_row, &c);
}

int moem_cpu_router(struct moem_backend *be, struct moem_stream *s,
		    const struct moem_router_args *a)
{
	struct cpu_backend *c = cpu_of(be);
	uint32_t nw = moem_tpool_size(c->pool);
	struct router_job j = {a};
	float *buf;

	/* B <= 4096, H <= 65536, workers <= 256: the sum fits easily. */
	buf = moem_cpu_scratch(s, ((size_t)a->B + nw) * a->H * sizeof(float));
	if (!buf)
		return -ENOMEM;
	j.xf = buf;
	j.wbuf = buf + (size_t)a->B * a->H;
	moem_cpu_convert_x(c->pool, moem_dptr_host(a->x), buf, a->B, a->H);
	moem_tpool_run(c->pool, (a->N + ROUTER_ROWS - 1) / ROUTER_ROWS, router_rows, &j);
	return 0;
}
