// SPDX-License-Identifier: GPL-2.0-only
/* Fork-join thread pool (tpool.h): one job at a time, items by atomic counter. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include <moem/error.h>

#include "tpool.h"

struct moem_tpool {
	uint32_t n;
	pthread_t *threads;
	pthread_mutex_t submit; /* one job at a time */
	pthread_mutex_t lock;
	pthread_cond_t go, done;
	uint64_t gen;  /* job generation, under lock */
	uint32_t busy; /* workers still in the current job, under lock */
	int stop;
	/* the current job */
	moem_tpool_fn fn;
	void *arg;
	uint32_t n_items;
	atomic_uint next;
};

struct worker_arg {
	struct moem_tpool *p;
	uint32_t id;
};

static void drain(struct moem_tpool *p, uint32_t worker)
{
	uint32_t i;

	while ((i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < p->n_items)
		p->fn(p->arg, i, worker);
}

static void *worker_main(void *v)
{
	struct worker_arg wa = *(struct worker_arg *)v;
	struct moem_tpool *p = wa.p;
	uint64_t seen = 0;

	free(v);
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->stop && p->gen == seen)
			pthread_cond_wait(&p->go, &p->lock);
		if (p->stop)
			break;
		seen = p->gen;
		pthread_mutex_unlock(&p->lock);
		drain(p, wa.id);
		pthread_mutex_lock(&p->lock);
		if (--p->busy == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int moem_tpool_create(uint32_t n, struct moem_tpool **out)
{
	struct moem_tpool *p;
	uint32_t i;
	int ret;

	*out = NULL;
	if (!n)
		n = 1;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->n = n;
	p->threads = calloc(n, sizeof(*p->threads));
	if (!p->threads) {
		free(p);
		return -ENOMEM;
	}
	pthread_mutex_init(&p->submit, NULL);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	for (i = 1; i < n; i++) {
		struct worker_arg *wa = malloc(sizeof(*wa));

		if (!wa) {
			ret = -ENOMEM;
			goto err_stop;
		}
		wa->p = p;
		wa->id = i;
		ret = -pthread_create(&p->threads[i], NULL, worker_main, wa);
		if (ret) {
			free(wa);
			moem_errf(-ret, "cpu backend: cannot start worker thread %u", i);
			goto err_stop;
		}
	}
	*out = p;
	return 0;

err_stop:
	p->n = i; /* threads 1..i-1 are running */
	moem_tpool_destroy(p);
	return ret;
}

void moem_tpool_destroy(struct moem_tpool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->lock);
	for (uint32_t i = 1; i < p->n; i++)
		pthread_join(p->threads[i], NULL);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->submit);
	free(p->threads);
	free(p);
}

uint32_t moem_tpool_size(const struct moem_tpool *p)
{
	return p->n;
}

void moem_tpool_run(struct moem_tpool *p, uint32_t n_items, moem_tpool_fn fn, void *arg)
{
	if (!n_items)
		return;
	pthread_mutex_lock(&p->submit);
	p->fn = fn;
	p->arg = arg;
	p->n_items = n_items;
	atomic_store(&p->next, 0);
	if (p->n == 1 || n_items == 1) {
		drain(p, 0);
		pthread_mutex_unlock(&p->submit);
		return;
	}
	pthread_mutex_lock(&p->lock);
	p->busy = p->n - 1;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->lock);
	drain(p, 0);
	pthread_mutex_lock(&p->lock);
	while (p->busy)
		pthread_cond_wait(&p->done, &p->lock);
	pthread_mutex_unlock(&p->lock);
	pthread_mutex_unlock(&p->submit);
}
