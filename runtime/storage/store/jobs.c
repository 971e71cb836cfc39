// SPDX-License-Identifier: GPL-2.0-only
/*
 * The store's one worker pool (store_int.h): mkmodel, pack and the
 * quantization-error measurement run independent jobs on up to 16
 * threads, each with its own scratch, stop at the first error and report
 * it with the message of the thread that failed (messages are per thread).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include <moem/error.h>

#include "store_int.h"

#define JOBS_MAX_THREADS 16

struct jobs {
	const struct moem_store_jobs *j;
	void *ctx;
	size_t n, next;
	pthread_mutex_t lock;
	int err;
	char msg[512];
};

static void *jobs_worker(void *arg)
{
	struct jobs *x = arg;
	void *scratch = NULL;
	int ret = x->j->init ? x->j->init(x->ctx, &scratch) : 0;

	while (!ret) {
		size_t i = __atomic_fetch_add(&x->next, 1, __ATOMIC_RELAXED);

		if (i >= x->n || __atomic_load_n(&x->err, __ATOMIC_RELAXED))
			break;
		ret = x->j->run(x->ctx, i, scratch);
	}
	if (ret) {
		pthread_mutex_lock(&x->lock);
		if (!x->err) {
			snprintf(x->msg, sizeof(x->msg), "%s", moem_strerror(ret));
			__atomic_store_n(&x->err, ret, __ATOMIC_RELAXED);
		}
		pthread_mutex_unlock(&x->lock);
	}
	if (x->j->fini)
		x->j->fini(x->ctx, scratch);
	return NULL;
}

int moem_store_run_jobs(const struct moem_store_jobs *j, void *ctx, size_t n_jobs, uint32_t threads)
{
	struct jobs x = {.j = j, .ctx = ctx, .n = n_jobs};
	pthread_t tid[JOBS_MAX_THREADS];
	uint32_t started = 0;

	if (!n_jobs)
		return 0;
	if (!threads)
		threads = moem_store_default_threads();
	if (threads > JOBS_MAX_THREADS)
		threads = JOBS_MAX_THREADS;
	if (threads > n_jobs)
		threads = (uint32_t)n_jobs;
	pthread_mutex_init(&x.lock, NULL);
	for (; started < threads; started++)
		if (pthread_create(&tid[started], NULL, jobs_worker, &x))
			break;
	/* No thread could start: the caller's thread does all the work. */
	if (!started)
		jobs_worker(&x);
	for (uint32_t i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	pthread_mutex_destroy(&x.lock);
	if (x.err)
		return moem_errf(-x.err, "%s", x.msg);
	return 0;
}
