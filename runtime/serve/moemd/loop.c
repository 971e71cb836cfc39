// SPDX-License-Identifier: GPL-2.0-only
/*
 * The event loop: one poll() over the control socket, its clients, the
 * signals (signalfd) and the worker's completions. It never waits for
 * the engine, so status and knob changes are served while a run is in
 * progress, and the watchdog sees it pass at least once a second.
 *
 * Exit: SIGTERM, SIGINT or "shutdown" stop the run in progress after its
 * current step, refuse new work, send every pending response, close the
 * engine (a persistent region stays for the next start) and exit 0
 * within 10 s. A sticky device error exits MOEMD_EXIT_DEVICE.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/util.h>

#include "moemd.h"

void moemd_begin_exit(struct moemd *d, int code, const char *why)
{
	if (d->exiting) {
		if (code && !d->exit_code)
			d->exit_code = code;
		return;
	}
	d->exiting = true;
	d->exit_code = code;
	d->exit_from = moemd_state_get(d);
	d->drain_deadline = moem_now_ns() + MOEMD_DRAIN_NS;
	moem_info("stopping: %s", why);
	moemd_notify("STOPPING=1\nSTATUS=stopping: %s", why);
	moemd_state_set(d, MOEMD_DRAINING);
	if (d->e)
		moem_engine_stop(d->e);
}

static void on_signal(struct moemd *d)
{
	struct signalfd_siginfo si;

	while (read(d->sfd, &si, sizeof(si)) == sizeof(si)) {
		switch (si.ssi_signo) {
		case SIGTERM:
		case SIGINT:
			moemd_begin_exit(d, MOEMD_EXIT_OK,
					 si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
			break;
		case SIGHUP:
			moem_info("SIGHUP: reloading the configuration");
			moemd_notify("RELOADING=1");
			moemd_reload(d);
			moemd_notify("READY=1");
			break;
		default:
			break;
		}
	}
}

static void opened(struct moemd *d, struct moemd_job *j)
{
	struct moem_engine_status st;
	char hb[32], db[32];
	int ret;

	if (j->ret) {
		/* A setting the pack or the region refuses will be refused
		 * again: do not ask for a restart. A missing device or memory
		 * may come back. */
		bool config = j->ret == -EEXIST || j->ret == -EINVAL || j->ret == -ERANGE ||
			      j->ret == -ENOENT || j->ret == -EPERM;

		moem_err("cannot serve %s: %s", d->cfg.ea.o.pack_path, j->err);
		moemd_begin_exit(d, config ? MOEMD_EXIT_CONFIG : MOEMD_EXIT_FAIL,
				 "the engine did not start");
		return;
	}
	if (d->exiting)
		return;
	d->ready_ns = moem_now_ns();
	moem_engine_get_status(d->e, &st);
	ret = moemd_sysfs_start(d);
	if (ret)
		moem_warn("%s", moem_strerror(ret));
	if (!st.pool_pinned)
		moem_warn("the %s pool is NOT PINNED (%llu of %llu bytes locked): staged experts "
			  "may be swapped out; %s (require-pinned refuses this)",
			  st.pool_provider, (unsigned long long)st.pool_pinned_bytes,
			  (unsigned long long)st.pool_bytes, st.pool_why);
	if (strcmp(st.pool_provider, "kmod"))
		moem_info("warm restart: not available: the %s pool dies with this process (load "
			  "moem.ko for a persistent region)",
			  st.pool_provider);
	moemd_state_set(d, MOEMD_READY);
	moem_info("ready after %.2f s (engine open %.2f s, warm-up %.2f s): %s, pool %s%s, HBM %s, "
		  "DRAM %s",
		  (double)(d->ready_ns - d->start_ns) / 1e9, (double)d->open_ns / 1e9,
		  (double)d->warmup_ns / 1e9, st.backend, st.pool_provider,
		  st.warm ? " (warm restart)" : "", moem_fmt_bytes(st.hbm_budget, hb, sizeof(hb)),
		  moem_fmt_bytes(st.dram_budget, db, sizeof(db)));
	moemd_notify("READY=1\nSTATUS=serving %s on %s", d->cfg.ea.o.pack_path, d->cfg.socket);
}

static void on_done(struct moemd *d)
{
	struct moemd_job *j = moemd_worker_take_done(d), *next;

	for (; j; j = next) {
		next = j->next;
		if (j->kind == JOB_OPEN)
			opened(d, j);
		else
			moemd_job_done(d, j);
		if (j->fatal) {
			char msg[256];

			moem_engine_fatal(d->e, msg, sizeof(msg));
			moem_err("fatal device error: %s: exiting with status %d so that the "
				 "supervisor restarts moemd",
				 msg, MOEMD_EXIT_DEVICE);
			moemd_begin_exit(d, MOEMD_EXIT_DEVICE, "fatal device error");
		}
		moemd_job_free(j);
	}
}

/* Staging can take minutes: say how far it is, and keep systemd patient. */
static void staging_progress(struct moemd *d, uint64_t now)
{
	uint64_t done, total;
	char a[32], b[32];

	if (moemd_state_get(d) != MOEMD_STAGING || now - d->last_progress_log_ns < 5000000000ULL)
		return;
	if (!d->last_progress_log_ns) {
		d->last_progress_log_ns = now;
		return;
	}
	d->last_progress_log_ns = now;
	done = __atomic_load_n(&d->prog.done, __ATOMIC_RELAXED);
	total = d->prog.total;
	moem_info("staging: %s of %s (%.0f%%)", moem_fmt_bytes(done, a, sizeof(a)),
		  moem_fmt_bytes(total, b, sizeof(b)),
		  total ? 100.0 * (double)done / (double)total : 0.0);
	moemd_notify("EXTEND_TIMEOUT_USEC=30000000\nSTATUS=staging experts: %.0f%%",
		     total ? 100.0 * (double)done / (double)total : 0.0);
}

int moemd_loop(struct moemd *d)
{
	struct pollfd p[MOEMD_CLIENT_SLOTS + 3];
	uint64_t who[MOEMD_CLIENT_SLOTS];
	/* Pass often enough for the watchdog to see the loop alive. */
	int tick_ms = d->watchdog_usec ? (int)moem_clamp(d->watchdog_usec / 4000, 1, 1000) : 1000;

	for (;;) {
		uint64_t now = moem_now_ns();
		int n = 0, nc = 0, r;

		__atomic_store_n(&d->heartbeat_ns, now, __ATOMIC_RELEASE);
		staging_progress(d, now);
		if (d->exiting && (moemd_worker_idle(d) || d->exit_code == MOEMD_EXIT_DEVICE))
			break;
		if (d->exiting && d->exit_from == MOEMD_STARTING) {
			/* Opening the engine cannot be interrupted and no work is
			 * in flight: leave without waiting (main's _exit path). */
			d->abandon = true;
			break;
		}
		if (d->exiting && now > d->drain_deadline) {
			moem_err("the run did not stop within %llu s: exiting without draining",
				 MOEMD_DRAIN_NS / 1000000000ULL);
			return MOEMD_EXIT_FAIL;
		}
		p[n++] = (struct pollfd){.fd = d->sfd, .events = POLLIN};
		p[n++] = (struct pollfd){.fd = d->done_efd, .events = POLLIN};
		p[n++] = (struct pollfd){.fd = d->lfd, .events = d->exiting ? 0 : POLLIN};
		moemd_server_reap_idle(d, now);
		for (int i = 0; i < MOEMD_CLIENT_SLOTS; i++) {
			struct moemd_client *c = d->clients[i];

			if (!c)
				continue;
			who[nc++] = moemd_client_serial(c);
			p[n++] = (struct pollfd){
				.fd = moemd_client_fd(c),
				.events = moemd_client_events(c),
			};
		}
		r = poll(p, (nfds_t)n, d->exiting ? 50 : tick_ms);
		if (r < 0 && errno != EINTR) {
			moem_err("poll: %s", strerror(errno));
			return MOEMD_EXIT_FAIL;
		}
		if (r <= 0)
			continue;
		if (p[0].revents)
			on_signal(d);
		if (p[1].revents)
			on_done(d);
		/* Clients first: slots of those that left are free for new ones. */
		for (int i = 0; i < nc; i++) {
			struct moemd_client *c = moemd_client_find(d, who[i]);

			if (p[3 + i].revents && c)
				moemd_client_io(d, c, p[3 + i].revents);
		}
		if (p[2].revents)
			moemd_server_accept(d);
	}
	/* Answers to the last requests (the stopped run's result, shutdown). */
	on_done(d);
	moemd_server_flush(d, 500);
	return d->exit_code;
}
