// SPDX-License-Identifier: GPL-2.0-only
/*
 * The driver's prefetching (driver.h): plan with the ExpertFlow predictor
 * and horizon, issue below misses in priority, keep track of what is in
 * flight (a bounded number), and withdraw what became useless: a
 * prefetch still waiting when its tick has passed, or one a miss needs
 * the room of.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include <moem/error.h>

#include "driver_int.h"

void moem_drv_flight_free(struct moem_driver *d)
{
	free(d->fl);
	d->fl = NULL;
	d->n_fl = d->cap_fl = d->live_fl = 0;
}

int moem_drv_flight_add(struct moem_driver *d, uint32_t key, uint64_t tpos)
{
	if (d->n_fl == d->cap_fl) {
		uint32_t j = 0;

		/* compact the dead entries first; grow only if that is not enough */
		for (uint32_t i = 0; i < d->n_fl; i++)
			if (d->fl_seq[d->fl[i].key] == d->fl[i].seq)
				d->fl[j++] = d->fl[i];
		d->n_fl = j;
		if (d->n_fl * 2 > d->cap_fl || !d->cap_fl) {
			uint32_t cap = d->cap_fl ? 2 * d->cap_fl : 64;
			struct drv_flight *p = realloc(d->fl, cap * sizeof(*p));

			if (!p)
				return -ENOMEM;
			d->fl = p;
			d->cap_fl = cap;
		}
	}
	d->next_seq = d->next_seq + 1 ? d->next_seq + 1 : 1;
	d->fl[d->n_fl++] = (struct drv_flight){key, d->next_seq};
	d->fl_seq[key] = d->next_seq;
	d->fl_tpos[key] = tpos;
	d->fl_used[key] = 0;
	d->live_fl++;
	return 0;
}

void moem_drv_flight_drop(struct moem_driver *d, uint32_t key)
{
	if (!d->fl_seq[key])
		return;
	d->fl_seq[key] = 0;
	d->fl_used[key] = 0;
	d->live_fl--;
}

/*
 * Walk the live prefetches in issue order; for each one fn decides (lock
 * held) whether to try to cancel it. Returns how many were cancelled; with
 * one set, stops at the first.
 */
static uint32_t cancel_walk(struct moem_driver *d, bool (*fn)(struct moem_driver *d, uint32_t key),
			    bool one)
{
	uint32_t n = 0;

	pthread_mutex_lock(&d->lock);
	for (uint32_t i = 0; i < d->n_fl; i++) {
		uint32_t key = d->fl[i].key, seq = d->fl[i].seq;
		bool gone;

		if (d->fl_seq[key] != seq || d->fl_used[key] || !fn(d, key))
			continue;
		pthread_mutex_unlock(&d->lock);
		/* the owner calls moem_driver_removed() if it withdrew it */
		gone = d->ops->cancel(d->arg, key);
		pthread_mutex_lock(&d->lock);
		if (!gone)
			continue;
		moem_drv_flight_drop(d, key);
		n++;
		if (one)
			break;
	}
	pthread_mutex_unlock(&d->lock);
	return n;
}

static bool stale(struct moem_driver *d, uint32_t key)
{
	return d->fl_tpos[key] < d->pos;
}

/*
 * A prefetch still waiting when its target layer has run is useless: drop
 * it rather than spend link time on it.
 */
void moem_drv_cancel_stale(struct moem_driver *d)
{
	cancel_walk(d, stale, false);
}

static bool not_pinned(struct moem_driver *d, uint32_t key)
{
	return d->pin[key] != d->pos + 1;
}

/* Prefetches that have landed are no longer in flight; returns how many were found. */
static uint32_t poll_landed(struct moem_driver *d)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < d->n_fl; i++) {
		uint32_t key = d->fl[i].key, seq = d->fl[i].seq;
		enum moem_res st;

		pthread_mutex_lock(&d->lock);
		if (d->fl_seq[key] != seq) {
			pthread_mutex_unlock(&d->lock);
			continue;
		}
		pthread_mutex_unlock(&d->lock);
		st = d->ops->state(d->arg, key);
		pthread_mutex_lock(&d->lock);
		if (st == MOEM_RES_RESIDENT && d->fl_seq[key] == seq) {
			moem_drv_flight_drop(d, key);
			n++;
		}
		pthread_mutex_unlock(&d->lock);
	}
	return n;
}

/*
 * A prefetch that landed since the driver last looked still counts as in
 * flight, and a DRAM pick passes over it: with a DRAM budget of a few
 * experts that can be the only copy there is to evict.
 */
bool moem_driver_reclaim(struct moem_driver *d)
{
	return cancel_walk(d, not_pinned, true) > 0 || poll_landed(d) > 0;
}

/* Issue one planned request; 1 issued, 0 skipped, -EAGAIN no room for it. */
static int issue(struct moem_driver *d, const struct moem_prefetch_req *r)
{
	uint32_t key = r->layer * d->N + r->expert, vid;
	float old;
	int ret;

	pthread_mutex_lock(&d->lock);
	vid = moem_drv_vid(d, key);
	/* what comes in is worth its expected next use (every victim is compared) */
	old = moem_evict_get_score(d->ev, vid);
	if (d->c.evict.kind == MOEM_EVICT_PRED)
		moem_evict_score(d->ev, vid, moem_drv_score_incoming(d, r->pos, r->prob));
	d->in_vid = vid;
	d->in_next_use = moem_drv_expected_use(d, r->pos, r->prob);
	pthread_mutex_unlock(&d->lock);
	ret = d->ops->fetch(d->arg, key, MOEM_PRIO_PREFETCH, r->pos);
	pthread_mutex_lock(&d->lock);
	d->in_vid = UINT32_MAX;
	if (ret == 1) {
		ret = moem_drv_flight_add(d, key, r->pos);
		d->brought[key] = 1;
		d->next_use[key] = moem_drv_expected_use(d, r->pos, r->prob);
		d->reuse_q[key] = r->prob;
		moem_evict_predict(d->ev, vid, r->pos);
		d->st.pf_issued++;
		ret = ret ? ret : 1;
	} else {
		moem_evict_score(d->ev, vid, old);
		ret = ret == -EAGAIN ? -EAGAIN : 0;
	}
	pthread_mutex_unlock(&d->lock);
	return ret;
}

/* What the link still has to move (this layer's misses, prefetches in flight), in bytes. */
static double backlog_bytes(const struct moem_driver *d)
{
	return (double)(d->layer_misses + d->live_fl) * (double)d->c.expert_bytes;
}

static int cmp_prob(const void *a, const void *b, void *arg)
{
	const float *p = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (p[x] != p[y])
		return p[x] > p[y] ? -1 : 1;
	return x < y ? -1 : 1;
}

int moem_driver_page_next(struct moem_driver *d)
{
	const uint32_t N = d->N;
	uint32_t order[1024], n = 0;
	struct moem_prefetch_req r;
	double bw, lns, backlog;
	uint64_t target;

	if (!d->c.paging || (uint32_t)(d->pos % d->L) + 1 >= d->L)
		return 0; /* the next step's first layer needs the next token */
	poll_landed(d);
	pthread_mutex_lock(&d->lock);
	target = d->pos + 1;
	if (moem_prefetch_predict(d->pf, target, d->prob)) {
		pthread_mutex_unlock(&d->lock);
		return 0;
	}
	moem_prefetch_rates(d->pf, &bw, &lns);
	/*
	 * The window is how FluxMoE's non-resident experts reach HBM at all:
	 * behind this layer's misses (which outrank it) it still lands before
	 * a demand miss of the next layer would have been issued, for the same
	 * bytes. Only the window loads still in flight count against it.
	 */
	backlog = (double)d->live_fl * (double)d->c.expert_bytes;
	pthread_mutex_unlock(&d->lock);
	for (uint32_t e = 0; e < N; e++)
		order[e] = e;
	qsort_r(order, N, sizeof(*order), cmp_prob, d->prob);
	for (uint32_t i = 0; i < N && n < d->c.pg_window; i++) {
		uint32_t e = order[i];
		int ret;

		if (d->prob[e] < d->c.pf.q_min ||
		    backlog + (double)d->c.expert_bytes > bw * lns * 2)
			break; /* the rest is less likely, or the link has no idle time for it */
		r = (struct moem_prefetch_req){target, (uint32_t)(target % d->L), e, d->prob[e]};
		if (d->ops->state(d->arg, r.layer * N + e) != MOEM_RES_ABSENT) {
			n++;
			continue;
		}
		ret = issue(d, &r);
		if (ret < 0 && ret != -EAGAIN)
			return ret;
		if (ret == 1) {
			backlog += (double)d->c.expert_bytes;
			n++;
		}
	}
	return 0;
}

int moem_driver_lookahead(struct moem_driver *d)
{
	uint32_t S, n, planned = 0, fetched = 0;
	double refused = INFINITY; /* no room was found for a prefetch expected this late */
	double bw, lns, backlog;
	uint64_t pos;

	if (!d->c.prefetch)
		return 0;
	poll_landed(d);
	pthread_mutex_lock(&d->lock);
	pos = d->pos;
	S = moem_prefetch_horizon(d->pf);
	d->st.s_sum += S;
	d->st.s_n++;
	moem_evict_set_horizon(d->ev, S);
	if (!d->depth) {
		/* prefetch_depth 0 (parked, or off): no plan to make, nothing to issue */
		pthread_mutex_unlock(&d->lock);
		return 0;
	}
	n = moem_prefetch_plan(d->pf, pos, d->req, 4096);
	/*
	 * The cost model: a prefetch pays only with link time the layers before
	 * its target leave idle. What the link still has to move (this layer's
	 * misses, the prefetches in flight) plus it must fit in the compute time
	 * until its tick; otherwise it delays the misses ahead of it and saves
	 * nothing (a saturated link moves the same bytes either way), and a
	 * wrong one costs a miss its place.
	 */
	moem_prefetch_rates(d->pf, &bw, &lns);
	backlog = backlog_bytes(d);
	pthread_mutex_unlock(&d->lock);
	for (uint32_t i = 0; i < n; i++) {
		const struct moem_prefetch_req *r = &d->req[i];
		uint32_t key = r->layer * d->N + r->expert;
		enum moem_res st;
		int ret;

		if (r->pos - pos > d->depth)
			continue;
		planned++;
		pthread_mutex_lock(&d->lock);
		moem_evict_predict(d->ev, moem_drv_vid(d, key), r->pos);
		pthread_mutex_unlock(&d->lock);
		if (d->live_fl >= d->c.pf_queue)
			continue;
		st = d->ops->state(d->arg, key);
		if (st == MOEM_RES_RESIDENT && d->ops->advise) {
			fetched += d->ops->advise(d->arg, key) == 1;
			continue;
		}
		if (st != MOEM_RES_ABSENT)
			continue;
		/*
		 * Nothing changes the candidates within one plan: if no victim was
		 * found for a prefetch expected this soon, none will be for one
		 * expected later.
		 */
		if (moem_drv_expected_use(d, r->pos, r->prob) >= refused)
			continue;
		if (backlog + (double)d->c.expert_bytes > bw * lns * (double)(r->pos - pos))
			continue;
		ret = issue(d, r);
		if (ret == 1)
			backlog += (double)d->c.expert_bytes;
		if (ret == -EAGAIN)
			refused = moem_drv_expected_use(d, r->pos, r->prob);
		else if (ret < 0)
			return ret;
		else
			fetched += ret;
	}
	pthread_mutex_lock(&d->lock);
	moem_prefetch_issued(d->pf, planned, fetched);
	pthread_mutex_unlock(&d->lock);
	return 0;
}

int moem_driver_exec_keep(struct moem_driver *d, const struct moem_exec_queue *q,
			  const uint32_t *keys, uint32_t n)
{
	/*
	 * The link carries the layer's misses: nothing behind them. Under
	 * FluxMoE's paging its window decides what enters HBM.
	 */
	if (q->link_ns || !n || !d->pf || d->c.paging)
		return 0;
	poll_landed(d); /* once for the layer: live_fl bounds what is issued */
	for (uint32_t i = 0; i < n; i++) {
		const uint32_t key = keys[i], m = key / d->N;
		struct moem_prefetch_req r;
		float p;
		int ret;

		if (key >= d->L * d->N)
			continue;
		pthread_mutex_lock(&d->lock);
		p = isfinite(d->next_use[key]) ? d->reuse_q[key] : 0;
		/* for the layer's next run, as likely as the predictor says */
		r = (struct moem_prefetch_req){moem_drv_next_run(d, m), m, key % d->N, p};
		ret = p > 0 && d->live_fl < d->c.pf_queue;
		pthread_mutex_unlock(&d->lock);
		if (!ret)
			continue;
		ret = issue(d, &r);
		if (ret < 0 && ret != -EAGAIN) /* -EAGAIN: no victim worth less, not brought */
			return ret;
	}
	return 0;
}
