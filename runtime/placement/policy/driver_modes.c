// SPDX-License-Identifier: GPL-2.0-only
/*
 * The driver's DynaExq and FluxMoE (driver.h): the precision state
 * machine's transitions become the owner's transitions, within its
 * budget; FluxMoE's resident set follows hotness one migration per layer
 * per step, and the rho controller sizes it once per step.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>

#include "driver_int.h"

int moem_drv_modes_create(struct moem_driver *d)
{
	int ret;

	if (d->c.dynaexq) {
		struct moem_dynaexq_cfg c = d->c.dx;

		c.n_layers = d->L;
		c.n_experts = d->N;
		ret = moem_dynaexq_create(&c, &d->dx);
		if (ret)
			return ret;
		/* every expert starts planned in the low precision */
		memset(d->plan, 1, (size_t)d->L * d->N);
	}
	if (d->c.paging) {
		struct moem_paging_cfg c = d->c.pg;

		c.n_layers = d->L;
		c.n_experts = d->N;
		ret = moem_paging_create(&c, &d->pg);
		if (!ret)
			ret = moem_hot_create(d->L, d->N, MOEM_HOT_DEFAULT_ALPHA,
					      MOEM_HOT_DEFAULT_INTERVAL_NS, &d->hot);
		if (ret)
			return ret;
		d->resident = calloc((size_t)d->L * d->N, 1);
		if (!d->resident)
			return -ENOMEM;
	}
	return 0;
}

void moem_drv_modes_destroy(struct moem_driver *d)
{
	moem_dynaexq_destroy(d->dx);
	moem_paging_destroy(d->pg);
	moem_hot_destroy(d->hot);
	free(d->dx_fl);
	free(d->resident);
}

/* ---- DynaExq -------------------------------------------------------------- */

/* Complete the transitions whose new version the owner has published. */
void moem_drv_dx_poll(struct moem_driver *d)
{
	uint32_t j = 0;

	for (uint32_t i = 0; i < d->n_dx_fl; i++) {
		struct moem_dx_action a = d->dx_fl[i];
		int want = a.promote ? 0 : 1;

		if (d->ops->published(d->arg, a.layer * d->N + a.expert) == want) {
			pthread_mutex_lock(&d->lock);
			moem_dynaexq_complete(d->dx, &a);
			pthread_mutex_unlock(&d->lock);
		} else {
			d->dx_fl[j++] = a;
		}
	}
	d->n_dx_fl = j;
}

void moem_driver_counts(struct moem_driver *d, uint32_t layer, const uint32_t *counts)
{
	pthread_mutex_lock(&d->lock);
	if (d->dx && layer < d->L)
		moem_dynaexq_add_counts(d->dx, layer, counts);
	pthread_mutex_unlock(&d->lock);
}

static int dx_keep(struct moem_driver *d, const struct moem_dx_action *a)
{
	if (d->n_dx_fl == d->cap_dx_fl) {
		uint32_t cap = d->cap_dx_fl ? 2 * d->cap_dx_fl : 64;
		struct moem_dx_action *p = realloc(d->dx_fl, sizeof(*p) * cap);

		if (!p)
			return -ENOMEM;
		d->dx_fl = p;
		d->cap_dx_fl = cap;
	}
	d->dx_fl[d->n_dx_fl++] = *a;
	return 0;
}

/* Start what the policy wants, within the owner's budget. */
static int dx_layer_end(struct moem_driver *d, uint64_t now_ns)
{
	const uint32_t m = (uint32_t)(d->pos % d->L);
	struct moem_dx_action a;
	int ret = 0;

	pthread_mutex_lock(&d->lock);
	if (d->c.dx_count_ids && d->ids)
		moem_dynaexq_count(d->dx, m, d->ids, d->tokens * d->K);
	moem_dynaexq_tick(d->dx, now_ns);
	pthread_mutex_unlock(&d->lock);
	for (;;) {
		uint32_t key, pi;

		pthread_mutex_lock(&d->lock);
		ret = moem_dynaexq_next(d->dx, &a);
		pthread_mutex_unlock(&d->lock);
		if (ret != 1)
			return 0;
		key = a.layer * d->N + a.expert;
		pi = a.promote ? 0 : 1;
		ret = d->ops->transition(d->arg, key, pi);
		if (!ret)
			ret = dx_keep(d, &a);
		if (ret) {
			/* a promotion that does not fit waits: offered again later */
			pthread_mutex_lock(&d->lock);
			moem_dynaexq_cancel(d->dx, &a);
			pthread_mutex_unlock(&d->lock);
			return ret == -EAGAIN ? 0 : ret;
		}
		pthread_mutex_lock(&d->lock);
		d->plan[key] = (uint8_t)pi;
		pthread_mutex_unlock(&d->lock);
	}
}

bool moem_driver_use_hi(struct moem_driver *d, uint32_t layer, uint32_t expert)
{
	bool hi;

	pthread_mutex_lock(&d->lock);
	hi = d->dx && moem_dynaexq_use_hi(d->dx, layer, expert);
	pthread_mutex_unlock(&d->lock);
	return hi;
}

void moem_driver_set_n_hi(struct moem_driver *d, uint32_t n_hi)
{
	pthread_mutex_lock(&d->lock);
	if (d->dx)
		moem_dynaexq_set_n_hi(d->dx, n_hi);
	pthread_mutex_unlock(&d->lock);
}

/* ---- FluxMoE ----------------------------------------------------------------- */

/* One staggered migration for the current layer this step. */
static int pg_layer_end(struct moem_driver *d, uint64_t now_ns)
{
	const uint32_t m = (uint32_t)(d->pos % d->L);
	struct moem_paging_mig mig;
	uint32_t key;
	int ret;

	pthread_mutex_lock(&d->lock);
	if (d->ids)
		moem_hot_count(d->hot, m, d->ids, (size_t)d->tokens * d->K);
	moem_hot_tick(d->hot, now_ns);
	ret = moem_paging_migration(d->pg, d->pos / d->L, m, d->resident + (size_t)m * d->N,
				    moem_hot_scores(d->hot, m), &mig);
	pthread_mutex_unlock(&d->lock);
	if (ret != 1)
		return 0;
	key = mig.layer * d->N + mig.expert;
	ret = d->ops->keep(d->arg, key, mig.promote);
	if (ret == -EAGAIN)
		return 0; /* no room to keep it: it stays out */
	if (ret)
		return ret;
	pthread_mutex_lock(&d->lock);
	d->resident[key] = mig.promote;
	pthread_mutex_unlock(&d->lock);
	return 0;
}

int moem_drv_modes_layer_end(struct moem_driver *d, uint64_t now_ns)
{
	int ret = 0;

	if (d->dx)
		ret = dx_layer_end(d, now_ns);
	if (!ret && d->pg)
		ret = pg_layer_end(d, now_ns);
	return ret;
}

void moem_driver_step_end(struct moem_driver *d, double tau_comp_ns, double tau_load_ns)
{
	pthread_mutex_lock(&d->lock);
	if (d->pg)
		moem_paging_control(d->pg, tau_comp_ns, tau_load_ns);
	pthread_mutex_unlock(&d->lock);
}

void moem_driver_set_capacity(struct moem_driver *d, uint32_t capacity)
{
	pthread_mutex_lock(&d->lock);
	if (d->pg)
		moem_paging_set_capacity(d->pg, capacity);
	pthread_mutex_unlock(&d->lock);
}

void moem_driver_set_window(struct moem_driver *d, uint32_t window)
{
	pthread_mutex_lock(&d->lock);
	d->c.pg_window = window;
	pthread_mutex_unlock(&d->lock);
}

bool moem_driver_resident(const struct moem_driver *d, uint32_t key)
{
	return d->resident && key < d->L * d->N && d->resident[key];
}

uint32_t moem_driver_window(const struct moem_driver *d, uint32_t layer, uint32_t *keys)
{
	uint32_t n = 0;

	for (uint32_t e = 0; d->resident && layer < d->L && e < d->N; e++)
		if (!d->resident[layer * d->N + e])
			keys[n++] = layer * d->N + e;
	return n;
}
