// SPDX-License-Identifier: GPL-2.0-only
/*
 * CPU router GEMM: logits[t][e] = dot(gate[e], x[t]) in fp32 in
 * dot_f32()'s fixed order. Work items are blocks of experts, computed
 * four gate rows at a time.
 */
#include <errno.h>

#include <moem/error.h>

#include "cpu_int.h"

#define ROUTER_ROWS 8

struct router_job {
	const struct moem_router_args *a;
	const float *xf; /* [B][H] */
};

/*
 * Two v8f accumulators side by side: lanes 0-7 are dot_f32()'s acc0
 * (elements i..i+7 of each 16), lanes 8-15 its acc1 (i+8..i+15), so one
 * 16-wide multiply and add per row and 16 elements do, lane for lane, the
 * very operations of its two 8-wide ones (a zmm each on AVX-512).
 */
typedef float v16f __attribute__((vector_size(64)));

/* 16 bf16 values (exact) as floats. */
#define V16_BF16(v, p)                                   \
	do {                                             \
		uint16_t h_[16];                         \
		uint32_t u_[16];                         \
                                                         \
		memcpy(h_, (p), sizeof(h_));             \
		for (int l_ = 0; l_ < 16; l_++)          \
			u_[l_] = (uint32_t)h_[l_] << 16; \
		memcpy(&(v), u_, sizeof(v));             \
	} while (0)

/*
 * out[r] = dot_f32(float(w_r), x, n) for R <= 4 bf16 rows, bit for bit (pf:
 * 4 rows ldw apart to prefetch alongside, or NULL):
 * each row keeps dot_f32()'s two accumulators and order; the rows are
 * only interleaved, so that their add chains overlap (one row's chain of
 * dependent adds left the router latency-bound), and the bf16 rows are
 * widened as they are loaded instead of through a float copy. A 128 x 2048
 * router at batch 1 on one thread of an AVX-512 Xeon: 22.4 us before,
 * 13.9 us after (best of 20 x 200 calls). The 16-wide form (v16f above)
 * lets the AVX-512 clone do a row's 16 elements in one multiply and add.
 */
MOEM_CPU_CLONES512 static void dot_bf16_rows(const uint16_t *const *w, uint32_t R, const float *x,
					     uint32_t n, float *out, const uint16_t *pf, size_t ldw)
{
	v16f acc[4] = {{0}}, x16, y16;
	v8f acc0, acc1, x0, y0;
	uint32_t i = 0;

	for (; i + 16 <= n; i += 16) {
		memcpy(&x16, x + i, sizeof(x16));
		if (pf && !(i & 31)) /* a 64-byte line of each next row per 32 values */
			for (uint32_t r = 0; r < 4; r++)
				__builtin_prefetch(pf + r * ldw + i, 0, 3);
		for (uint32_t r = 0; r < 4; r++) {
			if (r >= R)
				break;
			V16_BF16(y16, w[r] + i);
			acc[r] += y16 * x16;
		}
	}
	for (uint32_t r = 0; r < R && r < 4; r++) {
		memcpy(&acc0, &acc[r], sizeof(acc0));
		memcpy(&acc1, (const float *)&acc[r] + 8, sizeof(acc1));
		if (i < n) {
			uint32_t u[8];
			uint16_t h[8];

			V8_LOAD(x0, x + i);
			memcpy(h, w[r] + i, sizeof(h));
			for (int l = 0; l < 8; l++)
				u[l] = (uint32_t)h[l] << 16;
			memcpy(&y0, u, sizeof(y0));
			acc0 += y0 * x0;
		}
		acc0 += acc1;
		out[r] = V8_HSUM(acc0);
	}
}

static void router_rows(void *arg, uint32_t item, uint32_t worker)
{
	struct router_job *j = arg;
	const struct moem_router_args *a = j->a;
	const uint16_t *gate = moem_dptr_host(a->gate);
	float *logits = moem_dptr_host(a->logits);
	uint32_t e0 = item * ROUTER_ROWS, e1 = moem_min(e0 + ROUTER_ROWS, a->N);

	(void)worker;
	for (uint32_t e = e0; e < e1; e += 4) {
		const uint32_t R = moem_min(4, e1 - e);
		/*
		 * The first token's pass prefetches the next 4 rows (past e1
		 * too: most likely the next item's), a line of each as it reads
		 * one of its own: the gate (512 KB at 128 x 2048) is cold from
		 * DRAM each layer, and four rows read side by side kept too few
		 * misses in flight (AMD EPYC, 2 threads, one token: 18.5-20 us
		 * a call before, 15.3-15.5 after).
		 */
		const uint16_t *pf = e + 8 <= a->N ? gate + (size_t)(e + 4) * a->H : NULL;
		const uint16_t *w[4];
		float out[4];

		for (uint32_t r = 0; r < R; r++)
			w[r] = gate + (size_t)(e + r) * a->H;
		for (uint32_t t = 0; t < a->B; t++) {
			dot_bf16_rows(w, R, j->xf + (size_t)t * a->H, a->H, out, t ? NULL : pf,
				      a->H);
			for (uint32_t r = 0; r < R; r++)
				logits[(size_t)t * a->N + e + r] = out[r];
		}
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
	struct router_job j = {a};
	float *buf;

	/* B <= 4096, H <= 65536: the size fits easily. */
	buf = moem_cpu_scratch(s, (size_t)a->B * a->H * sizeof(float));
	if (!buf)
		return -ENOMEM;
	j.xf = buf;
	/* A few tokens' conversion is cheaper here than a round of the pool. */
	if ((size_t)a->B * a->H <= 16384)
		bf16_to_f32_row(moem_dptr_host(a->x), buf, a->B * a->H);
	else
		moem_cpu_convert_x(c->pool, moem_dptr_host(a->x), buf, a->B, a->H);
	moem_tpool_run(c->pool, (a->N + ROUTER_ROWS - 1) / ROUTER_ROWS, router_rows, &j);
	return 0;
}
