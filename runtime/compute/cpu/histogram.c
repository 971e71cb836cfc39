// SPDX-License-Identifier: GPL-2.0-only
/* CPU router-hit histogram (backend.h moem_hist_args). */
#include "cpu_int.h"

int moem_cpu_histogram(struct moem_backend *be, struct moem_stream *s,
		       const struct moem_hist_args *a)
{
	const int32_t *ids = moem_dptr_host(a->ids);
	const uint32_t *cnt = moem_dptr_host(a->cnt);
	uint32_t *row = (uint32_t *)moem_dptr_host(a->counts) + (size_t)a->layer * a->N;

	for (uint32_t t = 0; t < a->B; t++) {
		uint32_t n = cnt[t] < a->k ? cnt[t] : a->k;

		for (uint32_t j = 0; j < n; j++) {
			int32_t e = ids[(size_t)t * a->k + j];

			if (e >= 0 && (uint32_t)e < a->N)
				row[e]++;
		}
	}
	return 0;
}
