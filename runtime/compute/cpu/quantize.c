// SPDX-License-Identifier: GPL-2.0-only
/*
 * CPU quantize op: moem_quantize() itself (the bit-exact reference), plus
 * the status word of backend.h. When moem_quantize() refuses a matrix,
 * the first failing group is found with the same checks, in the same
 * order, as quant.c and the CUDA kernel make them.
 */
#include <errno.h>
#include <math.h>

#include <moem/error.h>

#include "cpu_int.h"

/* 0, MOEM_QSTATUS_NONFINITE or MOEM_QSTATUS_RANGE for one group. */
static uint32_t group_code(enum moem_prec p, const uint16_t *x, uint32_t n)
{
	float lo = moem_bf16_to_f32(x[0]), hi = lo;

	/* quant.c's scan: a NaN only counts when it is the first element. */
	for (uint32_t i = 1; i < n; i++) {
		float v = moem_bf16_to_f32(x[i]);

		lo = v < lo ? v : lo;
		hi = v > hi ? v : hi;
	}
	if (p == MOEM_PREC_Q8) {
		float amax = fmaxf(fabsf(lo), fabsf(hi));

		if (!isfinite(amax))
			return MOEM_QSTATUS_NONFINITE;
		if ((moem_f32_to_f16(amax / 127.0f) & 0x7c00u) == 0x7c00u)
			return MOEM_QSTATUS_RANGE;
		return 0;
	}
	if (!isfinite(lo) || !isfinite(hi))
		return MOEM_QSTATUS_NONFINITE;
	if ((moem_f32_to_f16((hi - lo) / (p == MOEM_PREC_Q4 ? 15.0f : 3.0f)) & 0x7c00u) ==
		    0x7c00u ||
	    (moem_f32_to_f16(lo) & 0x7c00u) == 0x7c00u)
		return MOEM_QSTATUS_RANGE;
	return 0;
}

static uint64_t first_failure(const struct moem_quantize_args *a, const uint16_t *src)
{
	uint32_t G = a->prec == MOEM_PREC_Q2 ? 64 : 128;

	for (uint32_t r = 0; r < a->rows; r++)
		for (uint32_t g = 0; g < a->cols / G; g++) {
			uint32_t code = group_code(a->prec, src + (size_t)r * a->cols + g * G, G);

			if (code)
				return ((uint64_t)(a->row_base + r) << 32) | (g << 4) | code;
		}
	return MOEM_QSTATUS_OK;
}

int moem_cpu_quantize(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_quantize_args *a)
{
	const uint16_t *src = moem_dptr_host(a->src);
	uint64_t *status = moem_dptr_host(a->status), key;
	int ret;

	ret = moem_quantize(a->prec, src, a->rows, a->cols, moem_dptr_host(a->dst), a->dst_len);
	if (ret != -ERANGE)
		return ret;
	/* Reported through the status word, like the device does. */
	moem_clear_error();
	key = first_failure(a, src);
	if (key < *status)
		*status = key;
	return 0;
}
