// SPDX-License-Identifier: GPL-2.0-only
/*
 * Fetches (tiers_int.h): take an HBM slot, load the version into DRAM if
 * it is not there, then copy it to HBM on the transfer engine at the
 * fetch's priority; a copy's completion publishes the version.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/usdt.h>

#include "tiers_int.h"

static void on_copy_done(struct moem_xfer_req *r, int status)
{
	struct ver *v = (struct ver *)r;
	struct moem_tiers *t = v->t;

	pthread_mutex_lock(&t->lock);
	v->dpins--;
	v->copying = 0;
	t->inflight--;
	if (status) {
		moem_tr_unslot(t, v);
		v->err = status;
	} else {
		v->hs = H_RESIDENT;
		t->n_resident[moem_tr_pi(v)]++;
		v->landed_ns = moem_now_ns();
		MOEM_USDT_FETCH(moem_tr_le(t, v) / t->c.n_experts,
				moem_tr_le(t, v) % t->c.n_experts,
				(uint32_t)t->c.prec[moem_tr_pi(v)], MOEM_TIER_DRAM, MOEM_TIER_HBM,
				moem_tr_vbytes(t, v), v->landed_ns - r->t_submit);
		v->prefetched = r->prio == MOEM_PRIO_PREFETCH;
		t->st.bytes_h2d[r->prio] += moem_tr_vbytes(t, v);
		moem_tr_publish(t, moem_tr_le(t, v));
	}
	moem_tr_apply_budgets(t);
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

int moem_tr_start_copy(struct moem_tiers *t, struct ver *v, enum moem_prio prio)
{
	int ret;

	v->want_hbm = 0;
	v->dpins++;
	v->copying = 1;
	memset(&v->req, 0, sizeof(v->req));
	v->req.dst = t->base + v->hoff;
	v->req.src = t->pool + v->doff;
	v->req.bytes = moem_tr_vbytes(t, v);
	v->req.wait_compute = v->wait_seq;
	v->req.prio = prio;
	v->req.done = on_copy_done;
	t->inflight++;
	ret = moem_xfer_submit(t->xfer, &v->req);
	if (ret) {
		t->inflight--;
		v->dpins--;
		v->copying = 0;
		moem_tr_unslot(t, v);
		v->err = ret;
	}
	return ret;
}

/* A version that holds a slot but never landed gives it back. */
void moem_tr_unslot(struct moem_tiers *t, struct ver *v)
{
	v->hs = H_ABSENT;
	moem_extent_free(&t->hx, v->hoff, moem_tr_hbm_need(t, moem_tr_vbytes(t, v)));
	t->hev->del(t->hev, v->id);
}

/* Make sure version v is resident or on its way to HBM at prio. */
int moem_tr_fetch(struct moem_tiers *t, struct ver *v, enum moem_prio prio)
{
	uint64_t off = 0, ws = 0;
	int ret;

	if (v->hs == H_RESIDENT)
		return 0;
	if (v->hs == H_COPYING) {
		if (prio < v->req.prio) {
			if (v->copying)
				moem_xfer_raise(t->xfer, &v->req, prio);
			else
				v->req.prio = prio;
		}
		return 0;
	}
	ret = moem_tr_hbm_alloc(t, v, prio, &off, &ws);
	if (ret)
		return ret;
	v->hs = H_COPYING;
	v->hoff = off;
	v->wait_seq = ws;
	v->err = 0;
	v->req.prio = prio;
	/* it holds a slot from now on: the evictor orders it (never picks it in flight) */
	t->hev->add(t->hev, v->id);
	if (v->ds == D_READY) {
		/* a DRAM hit; a version loaded for this fetch was ordered when its load started */
		t->dev_ev->touch(t->dev_ev, v->id);
		ret = moem_tr_start_copy(t, v, prio);
		return ret ? ret : 1;
	}
	v->want_hbm = 1;
	if (v->ds == D_ABSENT) {
		ret = moem_tr_start_load(t, v, true);
		if (ret) {
			v->want_hbm = 0;
			moem_tr_unslot(t, v);
			return ret;
		}
	}
	return 1;
}

int moem_tiers_prefetch(struct moem_tiers *t, uint32_t layer, uint32_t expert, enum moem_prio prio)
{
	uint32_t le = layer * t->c.n_experts + expert;
	int ret = moem_tr_check_le(t, layer, expert);

	if (ret)
		return ret;
	if ((unsigned int)prio >= MOEM_PRIO_NR)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	ret = moem_tr_fetch(t, &t->v[le * 2 + t->plan[le]], prio);
	pthread_mutex_unlock(&t->lock);
	moem_tr_flush_loads(t);
	return ret;
}

int moem_tiers_cancel(struct moem_tiers *t, uint32_t layer, uint32_t expert)
{
	uint32_t le = layer * t->c.n_experts + expert;
	struct ver *v;
	int ret = moem_tr_check_le(t, layer, expert);

	if (ret)
		return ret;
	pthread_mutex_lock(&t->lock);
	v = &t->v[le * 2 + t->plan[le]];
	ret = -EBUSY;
	if (v->hs == H_COPYING && !v->waiters) {
		if (v->copying && moem_xfer_cancel(t->xfer, &v->req) == 0) {
			/* the copy never started: its DRAM pin and its slot go */
			v->copying = 0;
			v->dpins--;
			t->inflight--;
			moem_tr_unslot(t, v);
			ret = 0;
		} else if (!v->copying && v->want_hbm) {
			/* still loading into DRAM: the load goes on, the copy will not */
			v->want_hbm = 0;
			moem_tr_unslot(t, v);
			ret = 0;
		}
	}
	if (!ret) {
		moem_tr_apply_budgets(t);
		pthread_cond_broadcast(&t->cond);
	}
	pthread_mutex_unlock(&t->lock);
	return ret;
}

int moem_tiers_state(struct moem_tiers *t, uint32_t layer, uint32_t expert)
{
	uint32_t le = layer * t->c.n_experts + expert;
	int st;

	if (moem_tr_check_le(t, layer, expert))
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	st = t->v[le * 2 + t->plan[le]].hs;
	pthread_mutex_unlock(&t->lock);
	return st == H_RESIDENT	 ? MOEM_TIER_RESIDENT
	       : st == H_COPYING ? MOEM_TIER_COPYING
				 : MOEM_TIER_ABSENT;
}
