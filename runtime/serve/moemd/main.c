// SPDX-License-Identifier: GPL-2.0-only
/*
 * moemd: serve one .moem pack. Start-up: settings (flags, config file),
 * the control socket, then on the worker thread the engine (the pool:
 * moem.ko's persistent region when loaded, re-attached on a warm restart,
 * else a userspace provider; NVMe staging with progress), then serve
 * until SIGTERM. Documentation/admin-guide.md ("moemd") is the manual.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/util.h>

#include "moemd.h"

/* Under systemd (stderr is the journal) prefix lines with their priority. */
static void log_sink(enum moem_log_level lvl, const char *msg, void *arg)
{
	static const char *const name[] = {"error", "warning", "info", "debug"};
	static const int prio[] = {3, 4, 6, 7};
	bool journal = arg != NULL;

	if (journal)
		fprintf(stderr, "<%d>%s\n", prio[lvl], msg);
	else
		fprintf(stderr, "moemd: %s: %s\n", name[lvl], msg);
}

static int block_signals(struct moemd *d)
{
	sigset_t set;

	/* Every thread inherits the mask: signals arrive only through sfd. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	if (pthread_sigmask(SIG_BLOCK, &set, NULL))
		return -EINVAL;
	signal(SIGPIPE, SIG_IGN);
	d->sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (d->sfd < 0)
		return moem_errf(errno, "signalfd: %s", strerror(errno));
	return 0;
}

static void log_choices(const struct moemd *d)
{
	const struct moem_engine_opts *o = &d->cfg.ea.o;
	char hb[32], db[32];

	moem_info("moemd %s (pid %d): pack %s%s%s", MOEMD_VERSION, getpid(), o->pack_path,
		  d->cfg.config ? ", config " : "", d->cfg.config ? d->cfg.config : "");
	moem_info("budgets: HBM %s%s%s%s, DRAM %s%s%s%s",
		  o->hbm_budget ? moem_fmt_bytes(o->hbm_budget, hb, sizeof(hb)) : "the whole model",
		  d->cfg.ea.hbm ? " ('" : "", d->cfg.ea.hbm ? d->cfg.ea.hbm : "",
		  d->cfg.ea.hbm ? "')" : "",
		  o->dram_budget ? moem_fmt_bytes(o->dram_budget, db, sizeof(db))
				 : "the whole model",
		  d->cfg.ea.dram ? " ('" : "", d->cfg.ea.dram ? d->cfg.ea.dram : "",
		  d->cfg.ea.dram ? "')" : "");
	moem_info("policies: route %s, evict %s, prefetch %s, precision %s, paging %s",
		  o->route ? o->route : "none", o->evict ? o->evict : "lru",
		  o->prefetch ? o->prefetch : "none", o->precision ? o->precision : "none",
		  o->paging ? o->paging : "none");
	moem_info("region: %s (%s%s)", o->pool.name,
		  d->cfg.region_given ? "as configured" : "named from the pack id",
		  o->pool.persistent ? ", persistent with moem.ko" : ", not persistent");
}

/* The model server: its state, then the HTTP listener (threads of its own). */
static int srv_create(struct moemd *d)
{
	struct moemd_srv *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->d = d;
	s->cfg = d->cfg.http; /* shared strings: owned by d->cfg */
	s->sched_opts = d->cfg.sched;
	s->listen_fd = -1;
	s->created = (int64_t)time(NULL);
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->conns_cond, NULL);
	d->srv = s;
	return moemd_http_start(d);
}

static void srv_free(struct moemd *d)
{
	if (!d->srv)
		return;
	pthread_cond_destroy(&d->srv->conns_cond);
	pthread_mutex_destroy(&d->srv->lock);
	free(d->srv);
	d->srv = NULL;
}

int main(int argc, char **argv)
{
	static struct moemd daemon;
	struct moemd *d = &daemon;
	struct moemd_job *open_job;
	int rc, ret;

	d->start_ns = moem_now_ns();
	d->lfd = d->lock_fd = d->sfd = d->done_efd = d->watchdog_efd = -1;
	d->argc = argc;
	d->argv = argv;
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->cond, NULL);
	pthread_mutex_init(&d->kstats_lock, NULL);
	moemd_cfg_init(&d->cfg);
	rc = moemd_cfg_parse(&d->cfg, argc, argv);
	if (rc) {
		moemd_cfg_free(&d->cfg);
		return rc < 0 ? 0 : rc;
	}
	moem_log_set_level(d->cfg.log_level);
	moem_log_set_sink(log_sink, getenv("JOURNAL_STREAM") ? d : NULL);
	log_choices(d);

	rc = MOEMD_EXIT_FAIL;
	ret = block_signals(d);
	if (!ret)
		ret = moemd_server_open(d);
	if (ret) {
		moem_err("%s", moem_strerror(ret));
		goto out;
	}
	if (!ret)
		ret = srv_create(d);
	if (ret) {
		moem_err("%s", moem_strerror(ret));
		rc = MOEMD_EXIT_CONFIG;
		goto out;
	}
	ret = moemd_sysfs_open(d);
	if (ret)
		moem_warn("%s: budgets through the control socket only", moem_strerror(ret));
	ret = moemd_watchdog_start(d);
	if (ret)
		moem_warn("watchdog: %s", moem_strerror(ret));
	open_job = calloc(1, sizeof(*open_job));
	if (!open_job)
		goto out;
	open_job->kind = JOB_OPEN;
	ret = moemd_worker_start(d);
	if (!ret)
		ret = moemd_worker_submit(d, open_job);
	if (ret) {
		moemd_job_free(open_job);
		moem_err("%s", moem_strerror(ret));
		goto out;
	}
	rc = moemd_loop(d);
out:
	moemd_sysfs_close(d);
	if ((rc == MOEMD_EXIT_FAIL && d->exiting && !moemd_worker_idle(d)) ||
	    rc == MOEMD_EXIT_DEVICE || d->abandon) {
		/* The worker is stuck in the engine, or the device is gone:
		 * closing it could wait forever. Leave without: the kernel
		 * frees the rest, and a persistent region's directory is
		 * consistent at any instant. */
		moemd_server_close(d);
		moem_info("exit %d without closing the engine", rc);
		_exit(rc);
	}
	/* HTTP first: no new requests, waiting connections answered; the
	 * worker then ends the scheduler before it closes the engine. */
	moemd_http_stop(d);
	moemd_worker_stop(d);
	srv_free(d);
	moemd_watchdog_stop(d);
	moemd_server_close(d);
	if (d->sfd >= 0)
		close(d->sfd);
	if (d->done_efd >= 0)
		close(d->done_efd);
	moem_info("exit %d%s", rc, rc == MOEMD_EXIT_OK ? "" : " (see above)");
	moemd_cfg_free(&d->cfg);
	return rc;
}
