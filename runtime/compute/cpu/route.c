// SPDX-License-Identifier: GPL-2.0-only
/*
 * CPU routing op: the route.h functions themselves, on the backend's
 * host-memory buffers. They are the reference the CUDA kernel matches.
 */
#include "cpu_int.h"

int moem_cpu_route(struct moem_backend *be, struct moem_stream *s, const struct moem_route_args *a)
{
	const float *z = moem_dptr_host(a->logits);
	const uint8_t *pad = a->pad ? moem_dptr_host(a->pad) : NULL;
	struct moem_route_out out = {
		.ids = moem_dptr_host(a->ids),
		.w = moem_dptr_host(a->w),
		.cnt = moem_dptr_host(a->cnt),
	};

	switch (a->mode) {
	case MOEM_ROUTE_TOPK:
		return moem_route_topk(&a->cfg, a->B, z, pad, &out);
	case MOEM_ROUTE_LYNX:
		return moem_route_lynx(&a->cfg, &a->lynx, a->B, z, pad, &out);
	case MOEM_ROUTE_OEA:
		return moem_route_oea(&a->cfg, a->k0, a->B, z, pad, NULL, &out);
	default:
		return moem_route_oea(&a->cfg, a->k0, a->B, z, pad, moem_dptr_host(a->resident),
				      &out);
	}
}
