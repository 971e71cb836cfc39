// SPDX-License-Identifier: GPL-2.0-only
/* Double-precision SwiGLU expert FFN: the oracle for kernels and reports. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include <moem/error.h>
#include <moem/quant.h>

static double silu(double z)
{
	return z / (1.0 + exp(-z));
}

int moem_ffn_ref(const struct moem_expert_layout *l, const void *blob, const float *x, double *y)
{
	const uint8_t *b = blob;
	const struct moem_qmat_layout *gl = &l->mat[MOEM_MAT_GATE];
	const struct moem_qmat_layout *ul = &l->mat[MOEM_MAT_UP];
	const struct moem_qmat_layout *dl = &l->mat[MOEM_MAT_DOWN];
	float *row = malloc(sizeof(float) * (l->hidden > l->inter ? l->hidden : l->inter));
	double *act = malloc(sizeof(double) * l->inter);

	if (!row || !act) {
		free(row);
		free(act);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < l->inter; i++) {
		double g = 0, u = 0;

		moem_dequantize_row(gl, b + l->mat_off[MOEM_MAT_GATE], i, row);
		for (uint32_t j = 0; j < l->hidden; j++)
			g += (double)row[j] * x[j];
		moem_dequantize_row(ul, b + l->mat_off[MOEM_MAT_UP], i, row);
		for (uint32_t j = 0; j < l->hidden; j++)
			u += (double)row[j] * x[j];
		act[i] = silu(g) * u;
	}
	for (uint32_t o = 0; o < l->hidden; o++) {
		double acc = 0;

		moem_dequantize_row(dl, b + l->mat_off[MOEM_MAT_DOWN], o, row);
		for (uint32_t i = 0; i < l->inter; i++)
			acc += (double)row[i] * act[i];
		y[o] = acc;
	}
	free(row);
	free(act);
	return 0;
}
