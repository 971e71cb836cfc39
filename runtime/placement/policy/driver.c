// SPDX-License-Identifier: GPL-2.0-only
/*
 * The policy driver (driver.h): life cycle, the evictor the owner asks
 * for victims, and the per-layer routing and use events.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>

#include "driver_int.h"

static void drv_lock(struct moem_driver *d)
{
	pthread_mutex_lock(&d->lock);
}

static void drv_unlock(struct moem_driver *d)
{
	pthread_mutex_unlock(&d->lock);
}

int moem_driver_create(const struct moem_driver_cfg *c, const struct moem_driver_ops *ops,
		       void *arg, struct moem_driver **out)
{
	const size_t LN = (size_t)c->n_layers * c->n_experts;
	struct moem_evict_cfg ec = c->evict;
	struct moem_driver *d;
	int ret;

	if (!c->n_layers || !c->n_experts || !c->top_k || c->n_experts > 1024)
		return moem_errf(EINVAL, "driver: shape %u x %u, top-%u out of range", c->n_layers,
				 c->n_experts, c->top_k);
	if (!ops || !ops->state || !ops->fetch || !ops->cancel)
		return moem_errf(EINVAL, "driver: the owner's ops are missing");
	if ((c->dynaexq && (!ops->transition || !ops->published)) || (c->paging && !ops->keep))
		return moem_errf(EINVAL, "driver: the owner cannot run this policy");
	ret = moem_cost_check(&c->cost);
	if (ret)
		return ret;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->c = *c;
	d->ops = ops;
	d->arg = arg;
	d->L = c->n_layers;
	d->N = c->n_experts;
	d->K = c->top_k;
	d->depth = UINT32_MAX;
	pthread_mutex_init(&d->lock, NULL);
	d->plan = calloc(LN, 1);
	d->pin = calloc(LN, sizeof(*d->pin));
	d->brought = calloc(LN, 1);
	d->fl_seq = calloc(LN, sizeof(*d->fl_seq));
	d->fl_tpos = calloc(LN, sizeof(*d->fl_tpos));
	d->fl_used = calloc(LN, 1);
	d->req = malloc(4096 * sizeof(*d->req));
	d->prob = malloc(d->N * sizeof(*d->prob));
	if (!d->plan || !d->pin || !d->brought || !d->fl_seq || !d->fl_tpos || !d->fl_used ||
	    !d->req || !d->prob) {
		ret = -ENOMEM;
		goto err;
	}
	ec.n_layers = d->L;
	ec.n_experts = 2 * d->N; /* version ids */
	ret = moem_evict_create(&ec, &d->ev);
	if (ret)
		goto err;
	if (c->predictor || c->prefetch) {
		struct moem_prefetch_cfg pc = c->pf;

		pc.n_layers = d->L;
		pc.n_experts = d->N;
		pc.top_k = d->K;
		pc.bw_bytes_per_ns = c->cost.link_gbps;
		pc.layer_ns = c->cost.layer_ns;
		pc.expert_bytes = c->expert_bytes;
		ret = moem_prefetch_create(&pc, &d->pf);
		if (ret)
			goto err;
	}
	ret = moem_drv_modes_create(d);
	if (ret)
		goto err;
	*out = d;
	return 0;
err:
	moem_driver_destroy(d);
	return ret;
}

void moem_driver_destroy(struct moem_driver *d)
{
	if (!d)
		return;
	moem_drv_modes_destroy(d);
	moem_evict_destroy(d->ev);
	moem_prefetch_destroy(d->pf);
	moem_drv_flight_free(d);
	free(d->plan);
	free(d->pin);
	free(d->brought);
	free(d->fl_seq);
	free(d->fl_tpos);
	free(d->fl_used);
	free(d->req);
	free(d->prob);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

/* ---- the evictor ---------------------------------------------------------- */

/* Never the current layer's experts, nor FluxMoE's resident set; then the owner's say. */
static bool drv_ok(void *arg, uint32_t vid)
{
	struct moem_driver *d = arg;
	uint32_t key = vid / 2;

	if (d->pin[key] == d->pos + 1)
		return false;
	if (d->resident && d->resident[key] && vid == moem_drv_vid(d, key))
		return false;
	return d->ok(d->ok_arg, vid);
}

int moem_driver_pick(struct moem_driver *d, uint32_t incoming, enum moem_prio prio,
		     bool (*ok)(void *arg, uint32_t vid), void *arg, uint32_t *vid)
{
	int ret;

	drv_lock(d);
	d->ok = ok;
	d->ok_arg = arg;
	if (prio == MOEM_PRIO_MISS || incoming >= 2 * d->L * d->N)
		ret = moem_evict_victim(d->ev, d->pos, 0, drv_ok, d, vid);
	else if (d->c.evict.kind == MOEM_EVICT_PRED)
		/* never evict something worth more than what comes in */
		ret = moem_evict_victim_below(d->ev, d->pos, moem_evict_get_score(d->ev, incoming),
					      drv_ok, d, vid);
	else
		ret = moem_evict_victim(d->ev, d->pos, MOEM_EVICT_LOW_ONLY, drv_ok, d, vid);
	drv_unlock(d);
	return ret;
}

void moem_driver_inserted(struct moem_driver *d, uint32_t vid)
{
	drv_lock(d);
	moem_evict_insert(d->ev, vid, d->pos);
	drv_unlock(d);
}

void moem_driver_removed(struct moem_driver *d, uint32_t vid)
{
	uint32_t key = vid / 2;

	drv_lock(d);
	if (vid == moem_drv_vid(d, key)) {
		if (d->brought[key])
			d->st.pf_wasted++; /* brought by a prefetch, gone unused */
		d->brought[key] = 0;
		moem_drv_flight_drop(d, key);
	}
	moem_evict_remove(d->ev, vid);
	drv_unlock(d);
}

/* ---- per layer ------------------------------------------------------------- */

int moem_driver_routed(struct moem_driver *d, uint64_t pos, uint32_t tokens, const int32_t *ids,
		       const uint32_t *keys, uint32_t T)
{
	const uint32_t m = (uint32_t)(pos % d->L);
	int ret = 0;

	drv_lock(d);
	d->pos = pos;
	d->ids = ids;
	d->tokens = tokens;
	for (uint32_t i = 0; i < T; i++)
		d->pin[keys[i]] = pos + 1;
	drv_unlock(d);
	if (d->live_fl)
		moem_drv_cancel_stale(d);
	drv_lock(d);
	/*
	 * As soon as the routing is known (before the misses): teach the
	 * predictor and refresh this layer's pred scores, so the evictions the
	 * misses cause already rank this layer's unused experts for its next run.
	 */
	if (d->pf && !moem_prefetch_observe(d->pf, pos, tokens, ids) &&
	    d->c.evict.kind == MOEM_EVICT_PRED && !moem_prefetch_reuse(d->pf, m, d->prob))
		for (uint32_t e = 0; e < d->N; e++)
			moem_evict_score(d->ev, moem_drv_vid(d, m * d->N + e), d->prob[e]);
	drv_unlock(d);
	if (d->dx)
		moem_drv_dx_poll(d);
	return ret;
}

void moem_driver_used(struct moem_driver *d, uint32_t key, enum moem_res state, bool early)
{
	drv_lock(d);
	if (state == MOEM_RES_RESIDENT && d->brought[key]) {
		d->st.pf_used++;
		/* landed more than a layer's compute before its use */
		if (d->pf && early)
			moem_prefetch_early(d->pf);
		d->brought[key] = 0;
	} else if (state == MOEM_RES_FLIGHT) {
		if (d->brought[key]) {
			d->st.pf_used++;
			moem_prefetch_stall(d->pf); /* issued too late */
			d->brought[key] = 0;
		}
		if (d->fl_seq[key])
			d->fl_used[key] = 1; /* needed now: no longer speculative */
	}
	moem_evict_access(d->ev, moem_drv_vid(d, key), d->pos);
	drv_unlock(d);
}

void moem_driver_unpin(struct moem_driver *d, uint32_t key)
{
	drv_lock(d);
	d->pin[key] = 0;
	drv_unlock(d);
}

void moem_driver_layer_time(struct moem_driver *d, uint64_t ns)
{
	drv_lock(d);
	if (d->pf)
		moem_prefetch_layer_time(d->pf, ns);
	drv_unlock(d);
}

void moem_driver_transfer(struct moem_driver *d, uint64_t bytes, uint64_t ns)
{
	drv_lock(d);
	if (d->pf)
		moem_prefetch_transfer(d->pf, bytes, ns);
	drv_unlock(d);
}

int moem_driver_layer_end(struct moem_driver *d, uint64_t now_ns)
{
	return moem_drv_modes_layer_end(d, now_ns);
}

/* ---- queries and settings ---------------------------------------------------- */

void moem_driver_get_stats(const struct moem_driver *d, struct moem_driver_stats *s)
{
	struct moem_driver *w = (struct moem_driver *)d;

	drv_lock(w);
	*s = d->st;
	drv_unlock(w);
}

uint32_t moem_driver_horizon(struct moem_driver *d)
{
	uint32_t S;

	drv_lock(d);
	S = d->pf && d->c.prefetch ? moem_prefetch_horizon(d->pf) : 0;
	drv_unlock(d);
	return S;
}

void moem_driver_set_depth(struct moem_driver *d, uint32_t depth)
{
	drv_lock(d);
	d->depth = depth;
	drv_unlock(d);
}

const struct moem_cost *moem_driver_cost(const struct moem_driver *d)
{
	return &d->c.cost;
}
