// SPDX-License-Identifier: GPL-2.0-only
/*
 * Tiered expert residency (tiers.h, tiers_int.h for the layout of this
 * folder): life cycle, handle publication, the engine's side (acquire,
 * wait, release), the precision plan and queries.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>

#include "tiers_int.h"

void moem_tr_publish(struct moem_tiers *t, uint32_t le)
{
	uint32_t want = t->plan[le];
	struct ver *a = &t->v[le * 2 + want], *b = &t->v[le * 2 + (want ^ 1)];
	struct ver *p =
		a->hs == H_RESIDENT ? a : (t->c.n_prec > 1 && b->hs == H_RESIDENT ? b : NULL);

	__atomic_store_n(&t->pub[le], p ? PUB_VALID | (moem_tr_pi(p) ? PUB_LO : 0) | p->hoff : 0,
			 __ATOMIC_RELEASE);
}

int moem_tr_check_le(const struct moem_tiers *t, uint32_t layer, uint32_t expert)
{
	if (layer >= t->c.n_layers || expert >= t->c.n_experts)
		return moem_errf(EINVAL, "expert (%u, %u) out of range (%u layers, %u experts)",
				 layer, expert, t->c.n_layers, t->c.n_experts);
	return 0;
}

/* moem_tr_check_le() plus a managed precision index. */
int moem_tr_check_version(const struct moem_tiers *t, uint32_t layer, uint32_t expert, uint32_t pi)
{
	int ret = moem_tr_check_le(t, layer, expert);

	if (!ret && pi >= t->c.n_prec)
		ret = moem_errf(EINVAL, "precision index %u: only %u managed", pi, t->c.n_prec);
	return ret;
}

int moem_tiers_acquire(struct moem_tiers *t, uint32_t layer, uint32_t expert, struct moem_xref *ref)
{
	uint32_t le = layer * t->c.n_experts + expert, pi;
	struct ver *v;
	uint64_t h;
	bool staged;
	int ret = moem_tr_check_le(t, layer, expert);

	if (ret)
		return ret;
	ref->layer = layer;
	ref->expert = expert;
	pthread_mutex_lock(&t->lock);
	h = t->pub[le];
	if (h) {
		pi = h & PUB_LO ? 1 : 0;
		if (pi == t->plan[le] || t->c.allow_fallback) {
			v = &t->v[le * 2 + pi];
			v->hpins++;
			t->hev->touch(t->hev, v->id);
			ref->pi = pi;
			ref->addr = t->base + PUB_OFF(h);
			ref->prefetched = v->prefetched;
			ref->landed_ns = v->landed_ns;
			v->prefetched = 0;
			ret = pi == t->plan[le] ? MOEM_ACQ_HIT : MOEM_ACQ_FALLBACK;
			if (ret == MOEM_ACQ_HIT)
				t->st.hits++;
			else
				t->st.fallbacks++;
			pthread_mutex_unlock(&t->lock);
			return ret;
		}
	}
	pi = t->plan[le];
	v = &t->v[le * 2 + pi];
	/* A prefetch still in flight when the layer needs it came too late. */
	ref->prefetched = v->hs == H_COPYING && v->req.prio == MOEM_PRIO_PREFETCH;
	ref->landed_ns = 0;
	staged = v->ds == D_READY;
	ret = moem_tr_fetch(t, v, MOEM_PRIO_MISS);
	if (ret >= 0) {
		v->waiters++;
		t->st.misses++;
		if (staged)
			t->st.dram_hits++;
		else
			t->st.dram_misses++;
		ref->pi = pi;
		ref->addr = 0;
		ret = MOEM_ACQ_PENDING;
	}
	pthread_mutex_unlock(&t->lock);
	moem_tr_flush_loads(t);
	return ret;
}

int moem_tiers_wait(struct moem_tiers *t, struct moem_xref *ref)
{
	uint32_t le = ref->layer * t->c.n_experts + ref->expert;
	struct ver *v = &t->v[le * 2 + ref->pi];
	uint64_t t0 = moem_now_ns();
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	while (v->hs == H_COPYING)
		pthread_cond_wait(&t->cond, &t->lock);
	v->waiters--;
	if (v->hs == H_RESIDENT) {
		v->hpins++;
		v->prefetched = 0;
		t->hev->touch(t->hev, v->id);
		ref->addr = t->base + v->hoff;
	} else {
		char why[256];

		if (!t->xfer || !moem_xfer_failure(t->xfer, why, sizeof(why)) || !why[0])
			snprintf(why, sizeof(why), "%s", strerror(v->err ? -v->err : EIO));
		ret = moem_errf(v->err ? -v->err : EIO, "expert (%u, %u) %s: fetch failed: %s",
				ref->layer, ref->expert, ref->pi ? "lo" : "hi", why);
	}
	t->st.stall_ns += moem_now_ns() - t0;
	pthread_mutex_unlock(&t->lock);
	return ret;
}

void moem_tiers_release(struct moem_tiers *t, const struct moem_xref *refs, uint32_t n,
			uint64_t compute_seq)
{
	pthread_mutex_lock(&t->lock);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t le = refs[i].layer * t->c.n_experts + refs[i].expert;
		struct ver *v = &t->v[le * 2 + refs[i].pi];

		if (v->hpins)
			v->hpins--;
		if (compute_seq > v->last_use)
			v->last_use = compute_seq;
	}
	moem_tr_apply_budgets(t);
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

int moem_tiers_published(struct moem_tiers *t, uint32_t layer, uint32_t expert)
{
	uint64_t h;

	if (layer >= t->c.n_layers || expert >= t->c.n_experts)
		return -1;
	h = __atomic_load_n(&t->pub[layer * t->c.n_experts + expert], __ATOMIC_ACQUIRE);
	return h ? (h & PUB_LO ? 1 : 0) : -1;
}

int moem_tiers_published_range(struct moem_tiers *t, uint32_t layer, uint32_t expert,
			       moem_dptr *addr, uint64_t *bytes)
{
	uint64_t h;

	if (layer >= t->c.n_layers || expert >= t->c.n_experts)
		return -1;
	h = __atomic_load_n(&t->pub[layer * t->c.n_experts + expert], __ATOMIC_ACQUIRE);
	if (!h)
		return -1;
	*addr = t->base + PUB_OFF(h);
	*bytes = t->c.bytes[h & PUB_LO ? 1 : 0];
	return h & PUB_LO ? 1 : 0;
}

int moem_tiers_set_plan(struct moem_tiers *t, uint32_t layer, uint32_t expert, uint32_t pi)
{
	uint32_t le = layer * t->c.n_experts + expert;
	int ret = moem_tr_check_version(t, layer, expert, pi);

	if (ret)
		return ret;
	pthread_mutex_lock(&t->lock);
	t->plan[le] = (uint8_t)pi;
	moem_tr_publish(t, le);
	pthread_mutex_unlock(&t->lock);
	return 0;
}

uint32_t moem_tiers_plan(struct moem_tiers *t, uint32_t layer, uint32_t expert)
{
	return __atomic_load_n(&t->plan[layer * t->c.n_experts + expert], __ATOMIC_RELAXED);
}

uint32_t moem_tiers_pin_planned(struct moem_tiers *t, uint32_t layer, struct moem_xref *refs,
				uint8_t *ok)
{
	uint32_t n = 0;

	if (layer >= t->c.n_layers)
		return 0;
	pthread_mutex_lock(&t->lock);
	for (uint32_t e = 0; e < t->c.n_experts; e++) {
		uint32_t le = layer * t->c.n_experts + e;
		uint64_t h = t->pub[le];
		uint32_t pi = h & PUB_LO ? 1 : 0;

		ok[e] = 0;
		if (!h || pi != t->plan[le])
			continue;
		t->v[le * 2 + pi].hpins++;
		refs[e] = (struct moem_xref){
			.addr = t->base + PUB_OFF(h), .layer = layer, .expert = e, .pi = pi};
		ok[e] = 1;
		n++;
	}
	pthread_mutex_unlock(&t->lock);
	return n;
}

void moem_tiers_resident_mask(struct moem_tiers *t, uint32_t layer, uint8_t *mask)
{
	for (uint32_t e = 0; e < t->c.n_experts; e++)
		mask[e] =
			__atomic_load_n(&t->pub[layer * t->c.n_experts + e], __ATOMIC_ACQUIRE) != 0;
}

void moem_tiers_drain(struct moem_tiers *t)
{
	pthread_mutex_lock(&t->lock);
	while (t->inflight)
		pthread_cond_wait(&t->cond, &t->lock);
	pthread_mutex_unlock(&t->lock);
}

void moem_tiers_get_stats(struct moem_tiers *t, struct moem_tiers_stats *s)
{
	pthread_mutex_lock(&t->lock);
	*s = t->st;
	s->hbm_used = moem_extent_used_bytes(&t->hx);
	s->hbm_budget = t->hbm_budget;
	s->hbm_mapped = t->mapped;
	s->dram_used = moem_extent_used_bytes(&t->dx);
	s->dram_budget = t->dram_budget;
	s->hbm_resident[0] = t->n_resident[0];
	s->hbm_resident[1] = t->n_resident[1];
	s->dram_ready = t->n_ready;
	s->n_nodes = t->n_nodes;
	for (uint32_t k = 0; k < t->n_nodes; k++) {
		uint64_t lim = t->n_nodes > 1 ? t->nlim[k]
					      : moem_min(t->nhi[k], t->dram_budget & ~4095ULL);

		s->dram_node[k].node = t->c.node_id[k];
		s->dram_node[k].bytes = t->nhi[k] - t->nlo[k];
		s->dram_node[k].budget = lim - t->nlo[k];
		s->dram_node[k].used = moem_extent_used_in(&t->dx, t->nlo[k], t->nhi[k]);
	}
	pthread_mutex_unlock(&t->lock);
	s->link_bw = moem_xfer_bandwidth(t->xfer);
	{
		struct moem_xfer_stats xs;

		moem_xfer_get_stats(t->xfer, &xs);
		s->link_busy_ns = xs.busy_ns;
	}
}

int moem_tiers_dram_node(struct moem_tiers *t, uint32_t layer, uint32_t expert, uint32_t pi,
			 int32_t *node, uint64_t *off)
{
	const struct ver *v;
	int ret = moem_tr_check_version(t, layer, expert, pi);

	if (ret)
		return ret;
	v = &t->v[((uint64_t)layer * t->c.n_experts + expert) * 2 + pi];
	pthread_mutex_lock(&t->lock);
	if (v->ds == D_READY) {
		*off = v->doff;
		*node = t->c.node_id[moem_tr_node_of(t, v->doff)];
	} else {
		ret = -ENOENT;
	}
	pthread_mutex_unlock(&t->lock);
	return ret;
}

/* The nodes' ranges from cfg (one covering the pool when none are given). */
static int setup_nodes(struct moem_tiers *t, uint64_t pool_bytes)
{
	const struct moem_tiers_cfg *c = &t->c;

	t->n_nodes = c->n_nodes ? c->n_nodes : 1;
	if (t->n_nodes > MOEM_TIERS_MAX_NODES || c->node_off[0])
		return moem_errf(EINVAL, "tiers: %u NUMA nodes, the first at %llu", c->n_nodes,
				 (unsigned long long)c->node_off[0]);
	if (!c->n_nodes)
		t->c.node_id[0] = -1;
	for (uint32_t k = 0; k < t->n_nodes; k++) {
		t->nlo[k] = c->node_off[k];
		t->nhi[k] = k + 1 < t->n_nodes ? c->node_off[k + 1] : pool_bytes;
		if (t->nhi[k] <= t->nlo[k] || t->nhi[k] > pool_bytes || (t->nlo[k] & 4095))
			return moem_errf(EINVAL,
					 "tiers: NUMA node %d's range [%llu, %llu) is empty, "
					 "unaligned or beyond the %llu-byte pool",
					 c->node_id[k], (unsigned long long)t->nlo[k],
					 (unsigned long long)t->nhi[k],
					 (unsigned long long)pool_bytes);
		t->nhint[k] = t->nlo[k];
	}
	return 0;
}

const void *moem_tiers_host_view(struct moem_tiers *t, const struct moem_xref *ref)
{
	return t->dev->ops->host_view ? t->dev->ops->host_view(t->dev, ref->addr) : NULL;
}

int moem_tiers_create(const struct moem_tiers_cfg *cfg, struct moem_tierdev *dev, void *pool,
		      uint64_t pool_bytes, struct moem_stager *stager, struct moem_evictor *hbm_ev,
		      struct moem_evictor *dram_ev, struct moem_tiers **out)
{
	struct moem_tiers *t;
	uint64_t nle, all = 0;
	int ret;

	if (!cfg->n_layers || !cfg->n_experts || cfg->n_layers > 1024 || cfg->n_experts > 4096)
		return moem_errf(EINVAL, "tiers: %u layers x %u experts out of range",
				 cfg->n_layers, cfg->n_experts);
	if (cfg->n_prec < 1 || cfg->n_prec > 2 || !cfg->bytes[0] ||
	    (cfg->n_prec == 2 && !cfg->bytes[1]))
		return moem_errf(EINVAL, "tiers: bad precision setup");
	if (!pool || !pool_bytes || !moem_is_aligned((uintptr_t)pool, 4096))
		return moem_errf(EINVAL, "tiers: staging pool missing or unaligned");
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->c = *cfg;
	t->dev = dev;
	t->stager = stager;
	t->hev = hbm_ev;
	t->dev_ev = dram_ev;
	t->pool = pool;
	t->pool_bytes = pool_bytes;
	t->gran = dev->ops->granularity(dev);
	t->slot_gran = 1ULL << (cfg->hbm_granule_shift ? cfg->hbm_granule_shift : 16);
	nle = (uint64_t)cfg->n_layers * cfg->n_experts;
	for (uint32_t p = 0; p < cfg->n_prec; p++)
		all += nle * moem_align_up(cfg->bytes[p], t->slot_gran);
	t->capacity = moem_align_up(cfg->hbm_capacity ? cfg->hbm_capacity : all, t->gran);
	t->v = calloc(nle * 2, sizeof(*t->v));
	t->pub = calloc(nle, sizeof(*t->pub));
	t->plan = calloc(nle, 1);
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->cond, NULL);
	if (!t->v || !t->pub || !t->plan) {
		ret = -ENOMEM;
		goto err_free;
	}
	for (uint64_t i = 0; i < nle * 2; i++) {
		t->v[i].t = t;
		t->v[i].id = (uint32_t)i;
	}
	ret = setup_nodes(t, pool_bytes);
	if (ret)
		goto err_free;
	ret = moem_extent_init(&t->hx, t->capacity, 0, __builtin_ctzll(t->slot_gran));
	if (ret)
		goto err_free;
	ret = moem_extent_init(&t->dx, pool_bytes, t->n_nodes > 1 ? pool_bytes : 0, 12);
	if (ret)
		goto err_hx;
	ret = dev->ops->reserve(dev, t->capacity, &t->base);
	if (ret)
		goto err_dx;
	ret = dev->ops->host_register(dev, pool, pool_bytes);
	if (ret)
		goto err_reserve;
	ret = moem_xfer_create(dev, &cfg->xfer, &t->xfer);
	if (ret)
		goto err_register;
	ret = moem_tiers_set_budget(t, cfg->hbm_budget, cfg->dram_budget);
	if (ret)
		goto err_xfer;
	*out = t;
	return 0;

err_xfer:
	moem_xfer_destroy(t->xfer);
err_register:
	dev->ops->host_unregister(dev, pool);
err_reserve:
	dev->ops->unreserve(dev, t->base, t->capacity);
err_dx:
	moem_extent_fini(&t->dx);
err_hx:
	moem_extent_fini(&t->hx);
err_free:
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->cond);
	free(t->v);
	free(t->pub);
	free(t->plan);
	free(t);
	return ret;
}

void moem_tiers_destroy(struct moem_tiers *t)
{
	uint64_t last = 0;

	if (!t)
		return;
	moem_tiers_drain(t);
	moem_xfer_destroy(t->xfer);
	/* No kernel may still read the arena when it goes. */
	for (uint32_t i = 0; i < t->c.n_layers * t->c.n_experts * 2; i++)
		last = moem_max(last, t->v[i].last_use);
	for (uint32_t i = 0; i < t->n_grave; i++)
		last = moem_max(last, t->grave[i].seq);
	t->dev->ops->compute_wait(t->dev, last);
	if (t->mapped)
		t->dev->ops->unmap(t->dev, t->base, t->mapped);
	t->dev->ops->unreserve(t->dev, t->base, t->capacity);
	t->dev->ops->host_unregister(t->dev, t->pool);
	moem_extent_fini(&t->hx);
	moem_extent_fini(&t->dx);
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->cond);
	free(t->grave);
	free(t->v);
	free(t->pub);
	free(t->plan);
	free(t);
}
