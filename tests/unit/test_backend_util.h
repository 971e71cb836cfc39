/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Helpers for the backend tests (tests/unit/test_backend_*.c and
 * tests/gpu/): random inputs from a seed, expert blobs in every
 * precision, device upload/download, and error measures.
 */
#ifndef MOEM_TEST_BACKEND_UTIL_H
#define MOEM_TEST_BACKEND_UTIL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/backend.h>
#include <moem/half.h>
#include <moem/quant.h>
#include <moem/rng.h>

/* n bf16 values ~ N(0, scale^2). */
static inline uint16_t *tb_rand_bf16(uint64_t seed, size_t n, double scale)
{
	uint16_t *p = malloc(n * sizeof(*p));
	struct moem_rng r;

	moem_rng_seed(&r, seed, 0);
	for (size_t i = 0; i < n; i++)
		p[i] = moem_f32_to_bf16((float)(moem_rng_normal(&r) * scale));
	return p;
}

static inline float *tb_rand_f32(uint64_t seed, size_t n, double scale)
{
	float *p = malloc(n * sizeof(*p));
	struct moem_rng r;

	moem_rng_seed(&r, seed, 1);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(moem_rng_normal(&r) * scale);
	return p;
}

/*
 * An expert blob of precision p (moem_expert_layout(p, H, I)), quantized
 * with moem_quantize() from the bf16 matrices of *src (gate, up, down,
 * row-major, as a bf16 blob would hold them). Weights ~ N(0, 1/sqrt(in)).
 */
struct tb_expert {
	struct moem_expert_layout l;
	uint8_t *blob;
	uint16_t *w[MOEM_MAT_NR]; /* the bf16 sources */
};

static inline int tb_expert_make(struct tb_expert *e, enum moem_prec p, uint32_t H, uint32_t I,
				 uint64_t seed)
{
	int ret = moem_expert_layout(p, H, I, &e->l);

	if (ret)
		return ret;
	e->blob = aligned_alloc(MOEM_QMAT_ALIGN, e->l.bytes);
	memset(e->blob, 0, e->l.bytes);
	for (int m = 0; m < MOEM_MAT_NR; m++) {
		const struct moem_qmat_layout *q = &e->l.mat[m];

		e->w[m] =
			tb_rand_bf16(seed * 3 + m, (size_t)q->rows * q->cols, 1.0 / sqrt(q->cols));
		ret = moem_quantize(p, e->w[m], q->rows, q->cols, e->blob + e->l.mat_off[m],
				    q->bytes);
		if (ret)
			return ret;
	}
	return 0;
}

static inline void tb_expert_free(struct tb_expert *e)
{
	free(e->blob);
	for (int m = 0; m < MOEM_MAT_NR; m++)
		free(e->w[m]);
}

/* Allocate and fill a device buffer from host memory (synchronously). */
static inline moem_dptr tb_put(struct moem_backend *be, const void *host, uint64_t bytes)
{
	moem_dptr d = 0;

	if (moem_be_alloc(be, bytes, &d))
		return 0;
	if (moem_be_htod(be, d, host, bytes, NULL) || moem_be_stream_sync(be, NULL)) {
		moem_be_free(be, d);
		return 0;
	}
	return d;
}

static inline moem_dptr tb_zeros(struct moem_backend *be, uint64_t bytes)
{
	moem_dptr d = 0;

	if (moem_be_alloc(be, bytes, &d))
		return 0;
	if (moem_be_memset(be, d, 0, bytes, NULL)) {
		moem_be_free(be, d);
		return 0;
	}
	return d;
}

static inline int tb_get(struct moem_backend *be, void *host, moem_dptr d, uint64_t bytes)
{
	int ret = moem_be_dtoh(be, host, d, bytes, NULL);

	return ret ? ret : moem_be_stream_sync(be, NULL);
}

/* max |a - b| / max |b|, a measured against reference b. */
static inline double tb_rel_err(const float *a, const double *b, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		num = fmax(num, fabs(a[i] - b[i]));
		den = fmax(den, fabs(b[i]));
	}
	return den > 0 ? num / den : num;
}

/* Distance in float ulps between two finite floats (across zero too). */
static inline int64_t tb_f32_ulps(float a, float b)
{
	int64_t ia = (int32_t)moem_f32_bits(a), ib = (int32_t)moem_f32_bits(b);

	if (ia < 0)
		ia = INT32_MIN - ia;
	if (ib < 0)
		ib = INT32_MIN - ib;
	return ia > ib ? ia - ib : ib - ia;
}

/* bf16 ulps between two bf16 values of the same sign (sign change: big). */
static inline int tb_bf16_ulps(uint16_t a, uint16_t b)
{
	if ((a ^ b) & 0x8000u)
		return (a & 0x7fffu) + (b & 0x7fffu);
	return abs((int)(a & 0x7fffu) - (int)(b & 0x7fffu));
}

#endif /* MOEM_TEST_BACKEND_UTIL_H */
