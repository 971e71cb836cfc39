// SPDX-License-Identifier: GPL-2.0-only
/*
 * Budgets (tiers_int.h): both tiers are brought within theirs as far as
 * pins allow whenever something is released or completes; arena memory
 * is mapped when the HBM budget grows and unmapped, after its last
 * reader, when it shrinks.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>

#include "tiers_int.h"

/*
 * Bring both tiers within their budgets as far as pins allow, then move
 * the allocation limits and unmap arena memory no reader can touch.
 * Called whenever something is released or completes.
 */
void moem_tr_apply_budgets(struct moem_tiers *t)
{
	uint64_t lim = t->hbm_budget & ~(t->slot_gran - 1), new_mapped;
	uint32_t id;

	/* Called on every release and completion: nothing to do once both
	 * tiers are within budget and their limits and mapping are in place. */
	if (moem_extent_used_bytes(&t->hx) <= t->hbm_budget &&
	    moem_extent_used_bytes(&t->dx) <= t->dram_budget &&
	    moem_extent_limit_bytes(&t->hx) == moem_min(lim, t->mapped) &&
	    (t->n_nodes > 1 ? t->win_budget == t->dram_budget
			    : moem_extent_limit_bytes(&t->dx) == (t->dram_budget & ~4095ULL)) &&
	    t->mapped == moem_align_up(t->hbm_budget, t->gran))
		return;

	for (uint32_t i = 0; i < t->c.n_layers * t->c.n_experts * 2; i++) {
		struct ver *v = &t->v[i];

		if (v->hs == H_RESIDENT &&
		    v->hoff + moem_tr_hbm_need(t, moem_tr_vbytes(t, v)) > lim &&
		    moem_tr_hbm_ok(t, i))
			moem_tr_hbm_evict(t, v);
		if (v->ds == D_READY && moem_tr_dram_above(t, v) && moem_tr_dram_ok(t, i))
			moem_tr_dram_evict(t, v);
	}
	while (moem_extent_used_bytes(&t->hx) > t->hbm_budget &&
	       !t->hev->pick(t->hev, MOEM_NO_VERSION, MOEM_PRIO_MISS, moem_tr_hbm_ok, t, &id))
		moem_tr_hbm_evict(t, &t->v[id]);
	while (moem_extent_used_bytes(&t->dx) > t->dram_budget &&
	       !t->dev_ev->pick(t->dev_ev, MOEM_NO_VERSION, MOEM_PRIO_MISS, moem_tr_dram_ok, t,
				&id))
		moem_tr_dram_evict(t, &t->v[id]);
	if (moem_extent_set_limit(&t->hx, moem_min(lim, t->mapped)) == 0) {
		new_mapped = moem_align_up(t->hbm_budget, t->gran);
		if (new_mapped < t->mapped) {
			moem_tr_grave_prune(t);
			t->dev->ops->compute_wait(
				t->dev, moem_tr_grave_seq(t, new_mapped, t->mapped - new_mapped));
			if (t->dev->ops->unmap(t->dev, t->base + new_mapped,
					       t->mapped - new_mapped) == 0)
				t->mapped = new_mapped;
		}
	}
	if (t->n_nodes <= 1) {
		moem_extent_set_limit(&t->dx, t->dram_budget & ~4095ULL);
		return;
	}
	/* Over nodes the allocator's limit stays at the pool's end; the
	 * budget is each node's allowed part, clean once nothing is beyond. */
	for (uint32_t k = 0; k < t->n_nodes; k++)
		if (moem_extent_used_in(&t->dx, t->nlim[k], t->nhi[k]))
			return;
	t->win_budget = t->dram_budget;
}

int moem_tiers_set_budget(struct moem_tiers *t, uint64_t hbm, uint64_t dram)
{
	uint64_t big = moem_max(t->c.bytes[0], t->c.n_prec > 1 ? t->c.bytes[1] : 0);
	uint64_t new_mapped;
	int ret = 0;

	if (hbm > t->capacity)
		return moem_errf(ERANGE, "HBM budget %llu above the %llu-byte reservation",
				 (unsigned long long)hbm, (unsigned long long)t->capacity);
	if (hbm < moem_tr_hbm_need(t, big))
		return moem_errf(ERANGE, "HBM budget %llu below one expert version (%llu bytes)",
				 (unsigned long long)hbm,
				 (unsigned long long)moem_tr_hbm_need(t, big));
	if (dram > t->pool_bytes)
		return moem_errf(ERANGE, "DRAM budget %llu above the %llu-byte pool",
				 (unsigned long long)dram, (unsigned long long)t->pool_bytes);
	if (dram < big)
		return moem_errf(ERANGE, "DRAM budget %llu below one expert version (%llu bytes)",
				 (unsigned long long)dram, (unsigned long long)big);
	pthread_mutex_lock(&t->lock);
	new_mapped = moem_align_up(hbm, t->gran);
	if (new_mapped > t->mapped) {
		ret = t->dev->ops->map(t->dev, t->base + t->mapped, new_mapped - t->mapped);
		if (ret)
			goto out;
		t->mapped = new_mapped;
	}
	t->hbm_budget = hbm;
	t->dram_budget = dram;
	if (t->n_nodes > 1) {
		moem_tr_dram_windows(t);
		t->win_budget = UINT64_MAX; /* apply_budgets checks them anew */
	}
	moem_tr_apply_budgets(t);
	pthread_cond_broadcast(&t->cond);
out:
	pthread_mutex_unlock(&t->lock);
	return ret;
}

void moem_tiers_usage(struct moem_tiers *t, uint64_t *hbm_used, uint64_t *hbm_budget,
		      uint64_t *dram_used, uint64_t *dram_budget, uint64_t *bytes_nvme)
{
	pthread_mutex_lock(&t->lock);
	*hbm_used = moem_extent_used_bytes(&t->hx);
	*hbm_budget = t->hbm_budget;
	*dram_used = moem_extent_used_bytes(&t->dx);
	*dram_budget = t->dram_budget;
	*bytes_nvme = t->st.bytes_nvme;
	pthread_mutex_unlock(&t->lock);
}
