// SPDX-License-Identifier: GPL-2.0-only
/* RoPE frequencies, tables and the attention scale per architecture (rope.h). */
#include <errno.h>
#include <math.h>

#include <moem/error.h>
#include <moem/rope.h>

double moem_yarn_mscale(double scale, double m)
{
	return scale <= 1 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

/* DeepSeek's yarn_find_correction_dim(). */
static double yarn_dim(double rot, double dim, double base, double max_pos)
{
	return dim * log(max_pos / (rot * 2 * M_PI)) / (2 * log(base));
}

int moem_rope_info(const struct moem_model_config *c, struct moem_rope_info *r)
{
	const double base = c->rope_theta;
	uint32_t half;

	r->pairs = c->arch == MOEM_ARCH_DEEPSEEK_V2;
	r->dim = r->pairs ? c->qk_rope_dim : c->head_dim;
	r->cos_mul = 1;
	if (!r->dim || r->dim % 2 || r->dim > 4096)
		return moem_errf(EINVAL, "rope: rotated width %u must be even and at most 4096",
				 r->dim);
	half = r->dim / 2;
	r->attn_scale =
		1.0 / sqrt((double)(r->pairs ? c->qk_nope_dim + c->qk_rope_dim : c->head_dim));
	for (uint32_t i = 0; i < half; i++)
		r->inv_freq[i] = 1.0 / pow(base, (double)(2 * i) / r->dim);
	if (c->rope_kind != MOEM_ROPE_YARN)
		return 0;
	{
		const struct moem_rope_yarn *y = &c->yarn;
		double low = floor(yarn_dim(y->beta_fast, r->dim, base, y->orig_max_pos));
		double high = ceil(yarn_dim(y->beta_slow, r->dim, base, y->orig_max_pos));

		low = fmax(low, 0);
		high = fmin(high, r->dim - 1);
		if (low == high)
			high += 0.001;
		for (uint32_t i = 0; i < half; i++) {
			double ramp = fmin(fmax((i - low) / (high - low), 0), 1);
			double mask = 1 - ramp; /* 1: keep the original frequency */

			r->inv_freq[i] =
				r->inv_freq[i] / y->factor * (1 - mask) + r->inv_freq[i] * mask;
		}
		r->cos_mul = moem_yarn_mscale(y->factor, y->mscale) /
			     moem_yarn_mscale(y->factor, y->mscale_all_dim);
		if (y->mscale_all_dim) {
			double m = moem_yarn_mscale(y->factor, y->mscale_all_dim);

			r->attn_scale *= m * m;
		}
	}
	return 0;
}

void moem_rope_tables(const struct moem_rope_info *r, uint32_t n_pos, float *cos_t, float *sin_t)
{
	const uint32_t half = r->dim / 2;

	for (uint32_t p = 0; p < n_pos; p++)
		for (uint32_t i = 0; i < half; i++) {
			double a = (double)p * r->inv_freq[i];

			cos_t[(size_t)p * half + i] = (float)(cos(a) * r->cos_mul);
			sin_t[(size_t)p * half + i] = (float)(sin(a) * r->cos_mul);
		}
}
