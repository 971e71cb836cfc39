// SPDX-License-Identifier: GPL-2.0-only
/*
 * The HBM arena (tiers_int.h): slots of 64 KiB granules in a reserved
 * range, eviction through the HBM evictor, and the graveyard: space
 * freed while a kernel may still read it carries that reader's compute
 * sequence, and whatever is copied there later waits for it on the copy
 * engine (never on the host).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>

#include "tiers_int.h"

void moem_tr_grave_prune(struct moem_tiers *t)
{
	uint64_t done = t->dev->ops->compute_done(t->dev);
	uint32_t j = 0;

	for (uint32_t i = 0; i < t->n_grave; i++)
		if (t->grave[i].seq > done)
			t->grave[j++] = t->grave[i];
	t->n_grave = j;
}

static int grave_add(struct moem_tiers *t, uint64_t off, uint64_t len, uint64_t seq)
{
	if (!seq || seq <= t->dev->ops->compute_done(t->dev))
		return 0;
	if (t->n_grave == t->cap_grave) {
		uint32_t cap = t->cap_grave ? t->cap_grave * 2 : 64;
		struct grave *g = realloc(t->grave, sizeof(*g) * cap);

		if (!g)
			return -ENOMEM;
		t->grave = g;
		t->cap_grave = cap;
	}
	t->grave[t->n_grave++] = (struct grave){off, len, seq};
	return 0;
}

uint64_t moem_tr_grave_seq(struct moem_tiers *t, uint64_t off, uint64_t len)
{
	uint64_t seq = 0;

	for (uint32_t i = 0; i < t->n_grave; i++) {
		const struct grave *g = &t->grave[i];

		if (g->off < off + len && off < g->off + g->len && g->seq > seq)
			seq = g->seq;
	}
	return seq;
}

bool moem_tr_hbm_ok(void *arg, uint32_t id)
{
	const struct ver *v = &((struct moem_tiers *)arg)->v[id];

	return v->hs == H_RESIDENT && !v->hpins && !v->waiters;
}

void moem_tr_hbm_evict(struct moem_tiers *t, struct ver *v)
{
	uint64_t need = moem_tr_hbm_need(t, moem_tr_vbytes(t, v));

	moem_tr_copy_back(t, v);
	t->hev->del(t->hev, v->id);
	v->hs = H_ABSENT;
	t->n_resident[moem_tr_pi(v)]--;
	/* If the graveyard cannot grow, wait for the reader here instead. */
	if (grave_add(t, v->hoff, need, v->last_use))
		t->dev->ops->compute_wait(t->dev, v->last_use);
	moem_extent_free(&t->hx, v->hoff, need);
	moem_tr_publish(t, moem_tr_le(t, v));
	t->st.evict_hbm++;
}

int moem_tr_hbm_alloc(struct moem_tiers *t, const struct ver *in, enum moem_prio prio,
		      uint64_t *off, uint64_t *wait_seq)
{
	uint64_t bytes = moem_tr_vbytes(t, in);
	uint64_t need = moem_tr_hbm_need(t, bytes);
	uint32_t id;

	if (need > t->hbm_budget)
		return moem_errf(ENOSPC, "expert version of %llu bytes exceeds the HBM budget %llu",
				 (unsigned long long)bytes, (unsigned long long)t->hbm_budget);
	for (;;) {
		if (moem_extent_used_bytes(&t->hx) + need <= t->hbm_budget &&
		    moem_extent_alloc(&t->hx, need, off) == 0)
			break;
		if (t->hev->pick(t->hev, in->id, prio, moem_tr_hbm_ok, t, &id))
			return -EAGAIN;
		moem_tr_hbm_evict(t, &t->v[id]);
	}
	moem_tr_grave_prune(t);
	*wait_seq = moem_tr_grave_seq(t, *off, need);
	return 0;
}
