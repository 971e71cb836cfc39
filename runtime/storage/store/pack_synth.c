// SPDX-License-Identifier: GPL-2.0-only
/* The synthetic routing basis recovered from a pack's router tensors (pack.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include <moem/error.h>
#include <moem/pack.h>

int moem_pack_synth_basis(const struct moem_pack *p, float *out)
{
	const struct moem_model_config *c = moem_pack_config(p);
	const uint64_t H = c->hidden, E = c->n_experts;
	uint32_t m = 0;

	for (uint32_t l = 0; l < c->n_layers; l++) {
		const struct moem_pack_tensor *t;
		float *rows = out + (size_t)m * E * H;
		int ret;

		if (!moem_layer_is_moe(c, l))
			continue;
		t = moem_pack_tensor_role(p, MOEM_TR_ROUTER, l);
		if (!t)
			return moem_errf(ENOENT, "%s: no router tensor for layer %u",
					 moem_pack_path(p), l);
		ret = moem_pack_read_tensor_f32(p, t, rows, E * H);
		if (ret)
			return ret;
		for (uint64_t e = 0; e < E; e++) {
			float *r = rows + e * H;
			double nn = 0;

			for (uint64_t k = 0; k < H; k++)
				nn += (double)r[k] * r[k];
			if (!(nn > 0) || !isfinite(nn))
				return moem_errf(EDOM, "%s: router row %llu of layer %u %s",
						 moem_pack_path(p), (unsigned long long)e, l,
						 isnan(nn)   ? "holds NaN"
						 : isinf(nn) ? "is infinite"
							     : "is zero");
			nn = sqrt(nn);
			for (uint64_t k = 0; k < H; k++)
				r[k] = (float)(r[k] / nn);
		}
		m++;
	}
	return 0;
}
