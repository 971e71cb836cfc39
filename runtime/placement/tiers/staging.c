// SPDX-License-Identifier: GPL-2.0-only
/*
 * The DRAM staging area (tiers_int.h): extents of 4 KiB granules in the
 * pinned pool, eviction through the DRAM evictor, loads from the stager,
 * and warm-restart adoption of versions a previous process staged.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/usdt.h>

#include "tiers_int.h"

bool moem_tr_dram_ok(void *arg, uint32_t id)
{
	const struct ver *v = &((struct moem_tiers *)arg)->v[id];

	return v->ds == D_READY && !v->dpins && !v->cpins;
}

void moem_tr_dram_evict(struct moem_tiers *t, struct ver *v)
{
	t->dev_ev->del(t->dev_ev, v->id);
	v->ds = D_ABSENT;
	t->n_ready--;
	moem_tr_note(t, v, 0);
	moem_extent_free(&t->dx, v->doff, moem_tr_vbytes(t, v));
	t->st.evict_dram++;
}

uint32_t moem_tr_node_of(const struct moem_tiers *t, uint64_t off)
{
	uint32_t k = 0;

	while (k + 1 < t->n_nodes && off >= t->nhi[k])
		k++;
	return k;
}

bool moem_tr_dram_above(const struct moem_tiers *t, const struct ver *v)
{
	uint64_t end = v->doff + moem_tr_vbytes(t, v);

	if (t->n_nodes <= 1)
		return end > t->dram_budget;
	return end > t->nlim[moem_tr_node_of(t, v->doff)];
}

/*
 * Each node may use the share of its range that the budget is of the
 * pool, but never less than one version (rounded to granules), so that
 * every node can take the experts given to it under any budget the
 * tiers accept.
 */
void moem_tr_dram_windows(struct moem_tiers *t)
{
	uint64_t big = moem_max(t->c.bytes[0], t->c.n_prec > 1 ? t->c.bytes[1] : 0);

	big = moem_align_up(big, 4096);
	for (uint32_t k = 0; k < t->n_nodes; k++) {
		uint64_t len = t->nhi[k] - t->nlo[k];
		uint64_t share =
			(uint64_t)((unsigned __int128)t->dram_budget * len / t->pool_bytes) &
			~4095ULL;

		t->nlim[k] = t->nlo[k] + moem_min(len, moem_max(share, big));
	}
}

/*
 * A place for in: one node, first fit as before; over several, the node
 * the version is given to ((layer + expert) % nodes: a layer's experts
 * alternate, so the CPU workers of every node get a share of a layer's
 * work and every node's memory bandwidth serves it), else the next node
 * with room.
 */
static int dram_place(struct moem_tiers *t, const struct ver *in, uint64_t bytes, uint64_t *off)
{
	uint32_t le = moem_tr_le(t, in), k0;

	if (t->n_nodes <= 1)
		return moem_extent_alloc(&t->dx, bytes, off);
	k0 = (le / t->c.n_experts + le % t->c.n_experts) % t->n_nodes;
	for (uint32_t i = 0; i < t->n_nodes; i++) {
		uint32_t k = (k0 + i) % t->n_nodes;

		if (moem_extent_alloc_in(&t->dx, bytes, t->nlo[k], t->nlim[k], &t->nhint[k], off) ==
		    0) {
			if (i)
				t->st.dram_node_fallback++;
			return 0;
		}
	}
	return -ENOSPC;
}

int moem_tr_dram_alloc(struct moem_tiers *t, const struct ver *in, bool evict, uint64_t *off)
{
	uint64_t bytes = moem_tr_vbytes(t, in);
	uint32_t id;

	if (bytes > t->dram_budget)
		return moem_errf(ENOSPC,
				 "expert version of %llu bytes exceeds the DRAM budget %llu",
				 (unsigned long long)bytes, (unsigned long long)t->dram_budget);
	for (;;) {
		if (moem_extent_used_bytes(&t->dx) + moem_align_up(bytes, 4096) <= t->dram_budget &&
		    dram_place(t, in, bytes, off) == 0)
			return 0;
		if (!evict ||
		    t->dev_ev->pick(t->dev_ev, in->id, MOEM_PRIO_MISS, moem_tr_dram_ok, t, &id))
			return -EAGAIN;
		moem_tr_dram_evict(t, &t->v[id]);
	}
}

/*
 * Exclusive DRAM (cost.h): v leaves HBM and DRAM does not hold it; the
 * HBM evictor (the policy driver's moem_driver_copy_back()) decides
 * whether it is copied back. The copy reads the device memory through
 * the host (host_view: the emulated device); a CUDA VMM arena has no
 * such view, and there the tiers stay inclusive. Synchronous, under
 * the lock, before the slot is freed: the slot's next tenant cannot
 * overwrite it while it is read. Compute may still be reading it too,
 * which is harmless: nothing writes a resident version.
 */
void moem_tr_copy_back(struct moem_tiers *t, struct ver *v)
{
	uint64_t bytes = moem_tr_vbytes(t, v), off;
	const void *src;
	uint32_t id;
	bool room;

	if (v->ds != D_ABSENT || !t->hev->copy_back || !t->dev->ops->host_view)
		return;
	src = t->dev->ops->host_view(t->dev, t->base + v->hoff);
	if (!src)
		return;
	room = moem_extent_used_bytes(&t->dx) + moem_align_up(bytes, 4096) <= t->dram_budget;
	if (!t->hev->copy_back(t->hev, v->id, bytes, room, moem_tr_dram_ok, t, &id))
		return;
	if (!room)
		moem_tr_dram_evict(t, &t->v[id]);
	if (moem_tr_dram_alloc(t, v, false, &off))
		return;
	memcpy(t->pool + off, src, bytes);
	v->doff = off;
	v->ds = D_READY;
	t->n_ready++;
	t->dev_ev->add(t->dev_ev, v->id);
	moem_tr_note(t, v, 1);
	t->st.bytes_d2h += bytes;
}

static void on_load_done(void *arg, int status)
{
	struct ver *v = arg;
	struct moem_tiers *t = v->t;

	pthread_mutex_lock(&t->lock);
	t->inflight--;
	if (status) {
		v->ds = D_ABSENT;
		t->dev_ev->del(t->dev_ev, v->id);
		moem_extent_free(&t->dx, v->doff, moem_tr_vbytes(t, v));
		v->err = status;
		t->st.load_errors++;
		t->st.last_load_err = status;
		t->st.last_load_layer = moem_tr_le(t, v) / t->c.n_experts;
		t->st.last_load_expert = moem_tr_le(t, v) % t->c.n_experts;
		t->st.last_load_pi = moem_tr_pi(v);
		moem_tr_note(t, v, 0);
		if (v->want_hbm) {
			v->want_hbm = 0;
			moem_tr_unslot(t, v);
		}
	} else {
		v->ds = D_READY;
		t->n_ready++;
		t->st.bytes_nvme += moem_tr_vbytes(t, v);
		MOEM_USDT_FETCH(moem_tr_le(t, v) / t->c.n_experts,
				moem_tr_le(t, v) % t->c.n_experts,
				(uint32_t)t->c.prec[moem_tr_pi(v)], MOEM_TIER_NVME, MOEM_TIER_DRAM,
				moem_tr_vbytes(t, v), moem_now_ns() - v->load_ns);
		moem_tr_note(t, v, 1);
		if (v->want_hbm && v->hs == H_COPYING)
			moem_tr_start_copy(t, v, (enum moem_prio)v->req.prio);
	}
	moem_tr_apply_budgets(t);
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

int moem_tr_start_load(struct moem_tiers *t, struct ver *v, bool evict)
{
	uint64_t off;
	int ret = moem_tr_dram_alloc(t, v, evict, &off);

	if (ret)
		return ret;
	v->ds = D_LOADING;
	/* the evictor hears of it in the order loads start (it picks only READY ones) */
	t->dev_ev->add(t->dev_ev, v->id);
	v->doff = off;
	v->err = 0;
	v->load_ns = moem_now_ns();
	moem_tr_note(t, v, 0);
	t->inflight++;
	v->next_load = t->loads;
	t->loads = v;
	return 0;
}

/* Start the loads queued under the lock; called without it. */
void moem_tr_flush_loads(struct moem_tiers *t)
{
	struct ver *v;

	pthread_mutex_lock(&t->lock);
	v = t->loads;
	t->loads = NULL;
	pthread_mutex_unlock(&t->lock);
	while (v) {
		struct ver *next = v->next_load;
		uint32_t le = moem_tr_le(t, v);
		int ret;

		ret = t->stager->read(t->stager, le / t->c.n_experts, le % t->c.n_experts,
				      moem_tr_pi(v), t->pool + v->doff, moem_tr_vbytes(t, v),
				      on_load_done, v);
		if (ret)
			on_load_done(v, ret);
		v = next;
	}
}

int moem_tiers_stage(struct moem_tiers *t, uint32_t layer, uint32_t expert, uint32_t pi)
{
	uint32_t le = layer * t->c.n_experts + expert;
	int ret = moem_tr_check_version(t, layer, expert, pi);

	if (ret)
		return ret;
	pthread_mutex_lock(&t->lock);
	if (t->v[le * 2 + pi].ds == D_ABSENT)
		ret = moem_tr_start_load(t, &t->v[le * 2 + pi], false);
	pthread_mutex_unlock(&t->lock);
	moem_tr_flush_loads(t);
	return ret;
}

bool moem_tiers_staged(struct moem_tiers *t, uint32_t layer, uint32_t expert, uint32_t pi)
{
	bool r;

	if (moem_tr_check_version(t, layer, expert, pi))
		return false;
	pthread_mutex_lock(&t->lock);
	r = t->v[(layer * t->c.n_experts + expert) * 2 + pi].ds == D_READY;
	pthread_mutex_unlock(&t->lock);
	return r;
}

void moem_tiers_set_note(struct moem_tiers *t, moem_tiers_note_fn fn, void *arg)
{
	pthread_mutex_lock(&t->lock);
	t->note = fn;
	t->note_arg = arg;
	pthread_mutex_unlock(&t->lock);
}

int moem_tiers_adopt(struct moem_tiers *t, uint32_t vid, uint64_t doff)
{
	struct ver *v;
	int ret;

	if (vid >= t->c.n_layers * t->c.n_experts * 2 || vid % 2 >= t->c.n_prec)
		return moem_errf(EINVAL, "adopt: version %u out of range", vid);
	pthread_mutex_lock(&t->lock);
	v = &t->v[vid];
	if (v->ds != D_ABSENT) {
		ret = moem_errf(EEXIST, "adopt: version %u already staged", vid);
		goto out;
	}
	if (!moem_is_aligned(doff, 4096) || doff + moem_tr_vbytes(t, v) > t->dram_budget) {
		ret = moem_errf(ERANGE, "adopt: version %u at %llu outside the DRAM budget", vid,
				(unsigned long long)doff);
		goto out;
	}
	ret = moem_extent_reserve(&t->dx, doff, moem_tr_vbytes(t, v));
	if (ret) {
		ret = moem_errf(-ret, "adopt: version %u at %llu overlaps another", vid,
				(unsigned long long)doff);
		goto out;
	}
	v->ds = D_READY;
	t->n_ready++;
	v->doff = doff;
	t->dev_ev->add(t->dev_ev, vid);
out:
	pthread_mutex_unlock(&t->lock);
	return ret;
}

/* The CPU executor's side (tiers.h). */
int moem_tiers_cpu_acquire(struct moem_tiers *t, uint32_t layer, uint32_t expert,
			   struct moem_cref *ref)
{
	uint32_t le = layer * t->c.n_experts + expert;
	struct ver *v;
	int ret = moem_tr_check_le(t, layer, expert);

	if (ret)
		return ret;
	pthread_mutex_lock(&t->lock);
	ref->layer = layer;
	ref->expert = expert;
	ref->pi = t->plan[le];
	ref->host = NULL;
	v = &t->v[le * 2 + ref->pi];
	if (v->ds == D_ABSENT) {
		ret = moem_tr_start_load(t, v, true);
		if (ret)
			goto out;
		t->st.cpu_dram_misses++;
	}
	if (v->cpins == UINT16_MAX) {
		ret = moem_errf(EOVERFLOW, "expert (%u, %u): too many CPU readers", layer, expert);
		goto out;
	}
	v->cpins++;
	if (v->ds == D_READY) {
		t->dev_ev->touch(t->dev_ev, v->id);
		ref->host = t->pool + v->doff;
		ret = 0;
	} else {
		ret = MOEM_ACQ_PENDING;
	}
out:
	pthread_mutex_unlock(&t->lock);
	moem_tr_flush_loads(t);
	return ret;
}

int moem_tiers_cpu_wait(struct moem_tiers *t, struct moem_cref *ref)
{
	struct ver *v = &t->v[(ref->layer * t->c.n_experts + ref->expert) * 2 + ref->pi];
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	while (v->ds == D_LOADING)
		pthread_cond_wait(&t->cond, &t->lock);
	if (v->ds == D_READY) {
		t->dev_ev->touch(t->dev_ev, v->id);
		ref->host = t->pool + v->doff;
	} else {
		v->cpins--;
		ret = moem_errf(v->err ? -v->err : EIO, "expert (%u, %u) %s: load failed: %s",
				ref->layer, ref->expert, ref->pi ? "lo" : "hi",
				strerror(v->err ? -v->err : EIO));
		moem_tr_apply_budgets(t);
	}
	pthread_mutex_unlock(&t->lock);
	return ret;
}

void moem_tiers_cpu_release(struct moem_tiers *t, const struct moem_cref *refs, uint32_t n)
{
	pthread_mutex_lock(&t->lock);
	for (uint32_t i = 0; i < n; i++) {
		struct ver *v =
			&t->v[(refs[i].layer * t->c.n_experts + refs[i].expert) * 2 + refs[i].pi];

		if (refs[i].host && v->cpins)
			v->cpins--;
	}
	moem_tr_apply_budgets(t);
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}
