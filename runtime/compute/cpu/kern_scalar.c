// SPDX-License-Identifier: GPL-2.0-only
/*
 * The reference row kernels: dequantize a row to fp32 exactly as
 * moem_dequantize_row() does, then dot_f32() with each token. Built
 * with -ffp-contract=off, so the bits are the same on every x86-64 (and
 * the same as the backend gave before the vector kernels existed).
 */
#include "cpu_int.h"
#include "kern.h"

/* Row r of a matrix in layout l at base, as fp32 (== moem_dequantize_row). */
MOEM_CPU_CLONES static void dequant_row(const struct moem_qmat_layout *l, const uint8_t *base,
					uint32_t r, float *out)
{
	const uint8_t *q = base + l->data_off + (size_t)r * l->row_bytes;
	const uint16_t *sc =
		(const uint16_t *)(base + l->scale_off) + (size_t)r * l->groups_per_row;
	const uint16_t *mn = (const uint16_t *)(base + l->min_off) + (size_t)r * l->groups_per_row;
	const uint32_t G = l->group;

	switch (l->prec) {
	case MOEM_PREC_BF16:
		bf16_to_f32_row((const uint16_t *)q, out, l->cols);
		break;
	case MOEM_PREC_Q8:
		for (uint32_t g = 0; g < l->groups_per_row; g++) {
			const int8_t *qg = (const int8_t *)q + (size_t)g * G;
			float s = moem_f16_to_f32(sc[g]), *o = out + (size_t)g * G;

			for (uint32_t i = 0; i < G; i++)
				o[i] = (float)qg[i] * s;
		}
		break;
	case MOEM_PREC_Q4:
		for (uint32_t g = 0; g < l->groups_per_row; g++) {
			const uint8_t *qg = q + (size_t)g * G / 2;
			float s = moem_f16_to_f32(sc[g]), m = moem_f16_to_f32(mn[g]);
			float *o = out + (size_t)g * G;

			for (uint32_t i = 0; i < G / 2; i++) {
				o[2 * i] = (float)(qg[i] & 15u) * s + m;
				o[2 * i + 1] = (float)(qg[i] >> 4) * s + m;
			}
		}
		break;
	default: /* q2 */
		for (uint32_t g = 0; g < l->groups_per_row; g++) {
			const uint8_t *qg = q + (size_t)g * G / 4;
			float s = moem_f16_to_f32(sc[g]), m = moem_f16_to_f32(mn[g]);
			float *o = out + (size_t)g * G;

			for (uint32_t i = 0; i < G / 4; i++)
				for (uint32_t b = 0; b < 4; b++)
					o[4 * i + b] = (float)((qg[i] >> (2 * b)) & 3u) * s + m;
		}
		break;
	}
}

MOEM_CPU_CLONES static void scalar_rows(const struct moem_qmat_layout *l, const uint8_t *mat,
					uint32_t r0, uint32_t r1, const struct cpu_act *x,
					const uint32_t *tok, uint32_t T, float *y, uint32_t ldy,
					float *w)
{
	const float *xf = x->v[CPU_ACT_F32];

	for (uint32_t r = r0; r < r1; r++) {
		dequant_row(l, mat, r, w);
		for (uint32_t i = 0; i < T; i++)
			y[(size_t)i * ldy + (r - r0)] =
				dot_f32(w, xf + (size_t)tok[i] * x->K, x->K);
	}
}

const struct moem_cpu_kern moem_cpu_kern_scalar = {
	.isa = MOEM_CPU_ISA_SCALAR,
	.rows = {scalar_rows, scalar_rows, scalar_rows, scalar_rows},
	.fmt = {CPU_ACT_F32, CPU_ACT_F32, CPU_ACT_F32, CPU_ACT_F32},
};
