// SPDX-License-Identifier: GPL-2.0-only
/*
 * The worker thread owns the engine: it opens it (pool, warm restart or
 * NVMe staging), then runs jobs one at a time (workload runs,
 * verifications) and closes it when the daemon exits. Each finished job
 * goes to the done list and the event loop is woken through an eventfd.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <moem/dev.h>
#include <moem/error.h>
#include <moem/util.h>

#include "moemd.h"

void moemd_job_free(struct moemd_job *j)
{
	if (!j)
		return;
	moem_engine_args_free(&j->wl);
	if (j->wl_fd > 0)
		close(j->wl_fd);
	free(j);
}

static void job_fail(struct moemd_job *j, int ret)
{
	j->ret = ret;
	snprintf(j->err, sizeof(j->err), "%s", moem_strerror(ret));
}

/* --cold: forget what a previous daemon staged for this pack (its region,
 * or its regions name@<node> of a pool over NUMA nodes). */
static void destroy_region(struct moemd *d)
{
	const char *name = d->cfg.ea.o.pool.name;
	uint32_t n = 0;
	int ret;

	ret = moem_pool_kmod_destroy(NULL, name, &n);
	if (ret == -ENODEV)
		return; /* no moem.ko: nothing persists anyway */
	if (n)
		moem_info("--cold: destroyed %u region%s of '%s'", n, n > 1 ? "s" : "", name);
	if (ret)
		moem_warn("--cold: cannot destroy region '%s': %s", name, moem_strerror(ret));
}

static int open_engine(struct moemd *d)
{
	int ret;

	if (d->cfg.cold)
		destroy_region(d);
	moem_clear_error();
	ret = moem_engine_open(&d->cfg.ea.o, &d->e);
	if (ret == -EEXIST && !d->cfg.region_given && d->cfg.ea.o.pool.name) {
		/* Our own region (named from the pack id) staged with other
		 * precisions or a different DRAM budget: start it afresh. */
		moem_warn("%s", moem_strerror(ret));
		moem_warn("region '%s' is this pack's but was staged differently: destroying it "
			  "and staging from NVMe",
			  d->cfg.ea.o.pool.name);
		destroy_region(d);
		ret = moem_engine_open(&d->cfg.ea.o, &d->e);
	}
	return ret;
}

static void do_open(struct moemd *d, struct moemd_job *j)
{
	struct moem_engine_status st;
	uint64_t t0 = moem_now_ns();
	int ret = open_engine(d);

	d->open_ns = moem_now_ns() - t0;
	if (ret) {
		job_fail(j, ret);
		return;
	}
	moem_engine_get_status(d->e, &st);
	snprintf(d->pack_id, sizeof(d->pack_id), "%s", st.pack_id);
	d->hbm_at_open = moem_engine_get_knob(d->e, MOEM_BUDGET_HBM_BYTES);
	moemd_sysfs_adopt(d);
	if (d->cfg.no_warmup || moemd_state_get(d) == MOEMD_DRAINING)
		return;
	moemd_state_set(d, MOEMD_STAGING);
	moemd_notify("STATUS=staging experts from NVMe");
	/* The engine draws the bar on a terminal; status and the loop's log
	 * lines read d->prog. */
	t0 = moem_now_ns();
	ret = moem_engine_warmup(d->e, &d->prog);
	d->warmup_ns = moem_now_ns() - t0;
	if (ret == -ECANCELED)
		ret = 0; /* SIGTERM while staging: what is staged stays staged */
	if (ret)
		job_fail(j, moem_err_prefix(-ret, "warm-up"));
}

static int on_step(void *arg, const struct moem_step_stats *s)
{
	struct moemd *d = arg;

	if (!s->step) {
		pthread_mutex_lock(&d->lock);
		if (d->cur && !d->cur->first_step_ns)
			d->cur->first_step_ns = moem_now_ns();
		pthread_mutex_unlock(&d->lock);
	}
	__atomic_store_n(&d->run_steps_done, s->step + 1, __ATOMIC_RELEASE);
	return 0;
}

static void do_run(struct moemd *d, struct moemd_job *j)
{
	int ret;

	__atomic_store_n(&d->run_steps_done, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&d->run_steps, j->wl.w.steps, __ATOMIC_RELEASE);
	moem_info("run %llu: %llu steps x %u tokens (%s)", (unsigned long long)j->run_id,
		  (unsigned long long)j->wl.w.steps, j->wl.w.batch,
		  j->wl.w.kind == MOEM_WL_SYNTH	   ? "synthetic workload"
		  : j->wl.w.kind == MOEM_WL_HIDDEN ? "hidden-state file"
						   : "trace replay");
	moem_clear_error();
	ret = moem_engine_run(d->e, &j->wl.w, on_step, d, &j->rs);
	if (ret) {
		job_fail(j, ret);
		j->fatal = moem_engine_fatal(d->e, NULL, 0);
		moem_warn("run %llu failed: %s", (unsigned long long)j->run_id, j->err);
	} else {
		moem_info("run %llu: %llu steps, %.1f tokens/s, hit rate %.3f%s",
			  (unsigned long long)j->run_id, (unsigned long long)j->rs.total.step,
			  j->rs.tokens_per_s, j->rs.hit_rate, j->rs.stopped ? " (stopped)" : "");
	}
}

static void do_verify(struct moemd *d, struct moemd_job *j)
{
	int ret;

	moem_clear_error();
	ret = moem_engine_verify_staged(d->e, &j->checked, &j->bad);
	if (ret)
		job_fail(j, ret);
	moem_info("verify: %llu staged expert versions checked, %llu bad",
		  (unsigned long long)j->checked, (unsigned long long)j->bad);
}

static void *worker_main(void *arg)
{
	struct moemd *d = arg;
	uint64_t one = 1;

	for (;;) {
		struct moemd_job *j, **tail;

		pthread_mutex_lock(&d->lock);
		while (!d->queue && !d->worker_exit) {
			/* Between jobs, the model server's steps (serve.c). */
			if (moemd_state_get(d) == MOEMD_READY && d->e && !d->exiting &&
			    moemd_serve_take_retry(d)) {
				pthread_mutex_unlock(&d->lock);
				moemd_serve_open(d);
				pthread_mutex_lock(&d->lock);
				continue;
			}
			if (moemd_state_get(d) == MOEMD_READY && moemd_serve_busy(d)) {
				pthread_mutex_unlock(&d->lock);
				moemd_serve_step(d);
				pthread_mutex_lock(&d->lock);
				continue;
			}
			pthread_cond_wait(&d->cond, &d->lock);
		}
		if (!d->queue) {
			pthread_mutex_unlock(&d->lock);
			break;
		}
		j = d->queue;
		d->queue = j->next;
		j->next = NULL;
		d->cur = j;
		pthread_mutex_unlock(&d->lock);

		if (j->kind != JOB_OPEN && moemd_state_get(d) == MOEMD_DRAINING) {
			/* Submitted just before the exit began: do not start it. */
			job_fail(j, moem_errf(ESHUTDOWN, "moemd is shutting down"));
			goto done;
		}
		switch (j->kind) {
		case JOB_OPEN:
			do_open(d, j);
			if (!j->ret && d->e && moemd_state_get(d) != MOEMD_DRAINING)
				moemd_serve_open(d);
			break;
		case JOB_RUN:
			do_run(d, j);
			break;
		case JOB_VERIFY:
			do_verify(d, j);
			break;
		}
	done:
		j->done_ns = moem_now_ns();

		pthread_mutex_lock(&d->lock);
		d->cur = NULL;
		for (tail = &d->done; *tail; tail = &(*tail)->next)
			;
		*tail = j;
		pthread_mutex_unlock(&d->lock);
		if (write(d->done_efd, &one, sizeof(one)) != sizeof(one))
			moem_err("worker: cannot wake the event loop: %s", strerror(errno));
	}
	/* The engine closes on the thread that ran it, after the server's
	 * scheduler and decoder, which use it. */
	moemd_serve_close(d);
	if (d->e) {
		moem_engine_close(d->e);
		d->e = NULL;
	}
	return NULL;
}

int moemd_worker_start(struct moemd *d)
{
	d->done_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->done_efd < 0)
		return moem_errf(errno, "eventfd: %s", strerror(errno));
	if (pthread_create(&d->worker, NULL, worker_main, d))
		return moem_errf(EAGAIN, "cannot start the worker thread");
	d->worker_started = true;
	return 0;
}

int moemd_worker_submit(struct moemd *d, struct moemd_job *j)
{
	pthread_mutex_lock(&d->lock);
	if (d->queue || d->cur || d->worker_exit) {
		pthread_mutex_unlock(&d->lock);
		return -EBUSY;
	}
	j->submit_ns = moem_now_ns();
	d->queue = j;
	pthread_cond_signal(&d->cond);
	pthread_mutex_unlock(&d->lock);
	return 0;
}

struct moemd_job *moemd_worker_take_done(struct moemd *d)
{
	struct moemd_job *j;
	uint64_t n;

	if (read(d->done_efd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		moem_warn("worker eventfd: %s", strerror(errno));
	pthread_mutex_lock(&d->lock);
	j = d->done;
	d->done = NULL;
	pthread_mutex_unlock(&d->lock);
	return j;
}

bool moemd_worker_idle(struct moemd *d)
{
	bool idle;

	pthread_mutex_lock(&d->lock);
	idle = !d->queue && !d->cur;
	pthread_mutex_unlock(&d->lock);
	return idle;
}

/* Ask the worker to finish (after the job in progress) and wait for it. */
void moemd_worker_stop(struct moemd *d)
{
	struct moemd_job *j;

	if (!d->worker_started)
		return;
	pthread_mutex_lock(&d->lock);
	d->worker_exit = true;
	/* A job that has not started will not: drop it. */
	j = d->queue;
	d->queue = NULL;
	pthread_cond_signal(&d->cond);
	pthread_mutex_unlock(&d->lock);
	moemd_job_free(j);
	pthread_join(d->worker, NULL);
	d->worker_started = false;
}
