// SPDX-License-Identifier: GPL-2.0-only
/* The tiers' invariants (tiers.h, moem_tiers_check()), for tests and debug builds. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>

#include "tiers_int.h"

int moem_tiers_check(struct moem_tiers *t)
{
	const uint32_t nv = t->c.n_layers * t->c.n_experts * 2;
	uint64_t hsum = 0, dsum = 0, h_above = 0, d_above = 0, res[2] = {0, 0}, ready = 0;
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	for (uint32_t le = 0; le < nv / 2 && !ret; le++) {
		uint64_t h = t->pub[le];
		const struct ver *v;

		if (!h)
			continue;
		v = &t->v[le * 2 + (h & PUB_LO ? 1 : 0)];
		if (v->hs != H_RESIDENT || v->hoff != PUB_OFF(h))
			ret = moem_errf(EFAULT,
					"handle %u publishes a version that is not resident", le);
	}
	for (uint32_t i = 0; i < nv && !ret; i++) {
		const struct ver *v = &t->v[i];
		uint64_t hn = moem_tr_hbm_need(t, moem_tr_vbytes(t, v)),
			 dn = moem_align_up(moem_tr_vbytes(t, v), 4096);

		if (i % 2 >= t->c.n_prec && (v->hs != H_ABSENT || v->ds != D_ABSENT))
			ret = moem_errf(EFAULT, "version %u of an unmanaged precision is present",
					i);
		if (v->hs != H_ABSENT) {
			hsum += hn;
			if (v->hoff + hn > t->mapped)
				ret = moem_errf(EFAULT, "version %u lies in unmapped HBM", i);
			if (v->hoff + hn > t->hbm_budget && !v->hpins && !v->waiters &&
			    v->hs == H_RESIDENT)
				h_above++;
			for (uint32_t j = 0; j < i && !ret; j++) {
				const struct ver *w = &t->v[j];
				uint64_t wn = moem_tr_hbm_need(t, moem_tr_vbytes(t, w));

				if (w->hs != H_ABSENT && w->hoff < v->hoff + hn &&
				    v->hoff < w->hoff + wn)
					ret = moem_errf(EFAULT, "versions %u and %u overlap in HBM",
							j, i);
			}
		}
		if (v->ds != D_ABSENT) {
			dsum += dn;
			if (v->ds == D_READY && moem_tr_dram_above(t, v) && !v->dpins && !v->cpins)
				d_above++;
		}
		res[i & 1] += v->hs == H_RESIDENT;
		ready += v->ds == D_READY;
		if (v->hs == H_RESIDENT && v->copying)
			ret = moem_errf(EFAULT, "version %u resident while copying", i);
		if (v->dpins != (v->copying ? 1 : 0))
			ret = moem_errf(EFAULT, "version %u: %u DRAM pins, %u copies", i, v->dpins,
					v->copying);
		if (v->hpins && v->hs != H_RESIDENT)
			ret = moem_errf(EFAULT, "version %u pinned but not resident", i);
	}
	if (!ret &&
	    (res[0] != t->n_resident[0] || res[1] != t->n_resident[1] || ready != t->n_ready))
		ret = moem_errf(EFAULT,
				"version counters: %llu/%llu resident, %llu ready counted as "
				"%llu/%llu, %llu",
				(unsigned long long)res[0], (unsigned long long)res[1],
				(unsigned long long)ready, (unsigned long long)t->n_resident[0],
				(unsigned long long)t->n_resident[1],
				(unsigned long long)t->n_ready);
	if (!ret && hsum != moem_extent_used_bytes(&t->hx))
		ret = moem_errf(EFAULT, "HBM accounting: versions hold %llu, allocator says %llu",
				(unsigned long long)hsum,
				(unsigned long long)moem_extent_used_bytes(&t->hx));
	if (!ret && dsum != moem_extent_used_bytes(&t->dx))
		ret = moem_errf(EFAULT, "DRAM accounting: versions hold %llu, allocator says %llu",
				(unsigned long long)dsum,
				(unsigned long long)moem_extent_used_bytes(&t->dx));
	/* Over budget only by what is pinned, waited for or in flight. */
	if (!ret && (h_above || d_above))
		ret = moem_errf(EFAULT, "%llu HBM / %llu DRAM versions above budget and evictable",
				(unsigned long long)h_above, (unsigned long long)d_above);
	pthread_mutex_unlock(&t->lock);
	return ret;
}
