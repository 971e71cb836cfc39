// SPDX-License-Identifier: GPL-2.0-only
/*
 * Following moem.ko's budget knobs (the files in /sys/kernel/moem/budgets). The
 * kernel stores and validates them and calls sysfs_notify() on a write;
 * a thread here sleeps in poll() on every knob file (POLLPRI|POLLERR
 * after a read, the kernfs protocol), re-reads the knob that changed and
 * hands it to the engine, which checks it against the model (a budget
 * below one expert is refused, nothing changes) and applies it at once
 * when idle or at the next layer boundary of a run.
 *
 * Every write the kernel accepted is applied, also one that leaves the
 * file as it was: an administrator who writes "gpu" to exec while moemd
 * runs hybrid from its config means gpu.
 *
 * At startup, a knob that holds something other than its load-time
 * default (0, "none" or "gpu") was set by an administrator: it overrides
 * the config (logged). A knob an older moem.ko lacks (ABI 1.2 has no exec
 * or cpu_moe_layers) is logged and left to the command line, config and
 * socket. The watcher's own file descriptors are read only by the
 * watcher: a read elsewhere would consume the notification.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <moem/dev.h>
#include <moem/error.h>
#include <moem/util.h>

#include "moemd.h"

struct moemd_sysfs {
	int fd[MOEM_BUDGET_NR];
	uint64_t seen[MOEM_BUDGET_NR];
	int stop_efd;
	pthread_t thr;
	bool started;
};

static void knob_path(enum moem_budget_knob k, char *buf, size_t len)
{
	snprintf(buf, len, "%s/budgets/%s", MOEM_SYSFS_ROOT, moem_budget_name(k));
}

static int read_value(int fd, enum moem_budget_knob k, uint64_t *v)
{
	char buf[64];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	if (n < 0)
		return moem_errf(errno, "read %s: %s", moem_budget_name(k), strerror(errno));
	buf[n] = 0;
	if (n && buf[n - 1] == '\n')
		buf[n - 1] = 0;
	return moem_budget_parse(k, buf, v);
}

bool moemd_sysfs_present(const struct moemd *d)
{
	return d->sysfs != NULL;
}

int moemd_sysfs_open(struct moemd *d)
{
	struct moemd_sysfs *s;
	char path[128];
	int ret;

	if (!d->cfg.sysfs_knobs) {
		moem_info("budgets: not following %s/budgets (sysfs-knobs = no)", MOEM_SYSFS_ROOT);
		return 0;
	}
	snprintf(path, sizeof(path), "%s/budgets", MOEM_SYSFS_ROOT);
	if (access(path, F_OK)) {
		moem_info("budgets: moem.ko not loaded (%s missing): set them through the control "
			  "socket",
			  path);
		return 0;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->stop_efd = -1;
	for (int k = 0; k < MOEM_BUDGET_NR; k++)
		s->fd[k] = -1;
	for (int k = 0; k < MOEM_BUDGET_NR; k++) {
		knob_path((enum moem_budget_knob)k, path, sizeof(path));
		s->fd[k] = open(path, O_RDONLY | O_CLOEXEC);
		if (s->fd[k] < 0 && errno == ENOENT && k) {
			/* An older moem.ko without this knob: the socket sets it. */
			moem_info("budgets: moem.ko has no %s (an older module): %s is as the "
				  "command line or config set it, the control socket changes it",
				  path, moem_budget_name((enum moem_budget_knob)k));
			continue;
		}
		if (s->fd[k] < 0) {
			ret = moem_errf(errno, "open %s: %s", path, strerror(errno));
			goto err;
		}
		ret = read_value(s->fd[k], (enum moem_budget_knob)k, &s->seen[k]);
		if (ret)
			goto err;
	}
	s->stop_efd = eventfd(0, EFD_CLOEXEC);
	if (s->stop_efd < 0) {
		ret = -errno;
		goto err;
	}
	d->sysfs = s;
	moem_info("budgets: following %s/budgets (poll, sysfs_notify)", MOEM_SYSFS_ROOT);
	return 0;
err:
	for (int k = 0; k < MOEM_BUDGET_NR; k++)
		if (s->fd[k] >= 0)
			close(s->fd[k]);
	free(s);
	return ret;
}

static bool is_default(enum moem_budget_knob k, uint64_t v)
{
	/* 0 bytes = no limit set, 0 permille, depth 0, reroute none, exec gpu,
	 * no MoE layer on the CPU */
	return v == 0;
}

/* Hand one kernel value to the engine; log what happened. */
static void apply(struct moemd *d, enum moem_budget_knob k, uint64_t v, uint64_t wake_ns,
		  const char *why)
{
	char val[32];
	int ret;

	moem_budget_format(k, v, val, sizeof(val));
	moem_clear_error();
	ret = moem_engine_set_knob(d->e, k, v);
	/* The refusal is logged before the counter moves: whoever saw the
	 * count in status finds the reason in the log. */
	if (ret)
		moem_warn("budgets: %s = %s from sysfs refused: %s", moem_budget_name(k), val,
			  moem_strerror(ret));
	pthread_mutex_lock(&d->kstats_lock);
	d->kstats.last_wake_ns = wake_ns;
	d->kstats.last_set_ns = moem_now_ns();
	snprintf(d->kstats.last_knob, sizeof(d->kstats.last_knob), "%s", moem_budget_name(k));
	if (ret)
		d->kstats.sysfs_refused++;
	else
		d->kstats.sysfs_changes++;
	pthread_mutex_unlock(&d->kstats_lock);
	if (ret)
		return;
	ret = moem_engine_apply_knobs(d->e);
	if (ret)
		moem_warn("budgets: %s = %s from sysfs refused: %s", moem_budget_name(k), val,
			  moem_strerror(ret));
	else
		moem_info("budgets: %s = %s from sysfs%s", moem_budget_name(k), val, why);
	if (!ret)
		moemd_serve_budget_changed(d);
}

void moemd_sysfs_adopt(struct moemd *d)
{
	struct moemd_sysfs *s = d->sysfs;

	if (!s)
		return;
	for (int k = 0; k < MOEM_BUDGET_NR; k++)
		if (!is_default((enum moem_budget_knob)k, s->seen[k]))
			apply(d, (enum moem_budget_knob)k, s->seen[k], moem_now_ns(),
			      " (set before moemd started: overrides the config)");
}

/* Re-read knob k; apply it if it changed, or if written (notified). */
static void check(struct moemd *d, enum moem_budget_knob k, uint64_t wake_ns, bool notified)
{
	struct moemd_sysfs *s = d->sysfs;
	uint64_t v;
	int ret;

	if (s->fd[k] < 0)
		return;
	ret = read_value(s->fd[k], k, &v);
	if (ret) {
		moem_warn("budgets: %s", moem_strerror(ret));
		return;
	}
	if (v == s->seen[k] && !notified)
		return;
	s->seen[k] = v;
	apply(d, k, v, wake_ns, "");
}

static void *watch_main(void *arg)
{
	struct moemd *d = arg;
	struct moemd_sysfs *s = d->sysfs;
	struct pollfd p[MOEM_BUDGET_NR + 1];

	/* Changes made while the engine was opening. */
	for (int k = 0; k < MOEM_BUDGET_NR; k++)
		check(d, (enum moem_budget_knob)k, moem_now_ns(), false);
	for (int k = 0; k < MOEM_BUDGET_NR; k++)
		p[k] = (struct pollfd){.fd = s->fd[k], .events = POLLPRI | POLLERR};
	p[MOEM_BUDGET_NR] = (struct pollfd){.fd = s->stop_efd, .events = POLLIN};
	for (;;) {
		int n = poll(p, MOEM_BUDGET_NR + 1, -1);
		uint64_t now = moem_now_ns();

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			moem_err("budgets: poll: %s: no longer following sysfs", strerror(errno));
			break;
		}
		if (p[MOEM_BUDGET_NR].revents)
			break;
		for (int k = 0; k < MOEM_BUDGET_NR; k++)
			if (p[k].revents)
				check(d, (enum moem_budget_knob)k, now, true);
	}
	return NULL;
}

int moemd_sysfs_start(struct moemd *d)
{
	if (!d->sysfs)
		return 0;
	if (pthread_create(&d->sysfs->thr, NULL, watch_main, d))
		return moem_errf(EAGAIN, "cannot start the sysfs watcher");
	d->sysfs->started = true;
	return 0;
}

void moemd_sysfs_close(struct moemd *d)
{
	struct moemd_sysfs *s = d->sysfs;
	uint64_t one = 1;

	if (!s)
		return;
	if (s->started) {
		if (write(s->stop_efd, &one, sizeof(one)) != sizeof(one))
			moem_err("budgets: cannot stop the watcher");
		pthread_join(s->thr, NULL);
	}
	for (int k = 0; k < MOEM_BUDGET_NR; k++)
		if (s->fd[k] >= 0)
			close(s->fd[k]);
	close(s->stop_efd);
	free(s);
	d->sysfs = NULL;
}

/* A fresh open per read: the watcher's descriptors must not be read here. */
static int read_file_u64(const char *path, uint64_t *v)
{
	char buf[64];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = 0;
	*v = strtoull(buf, NULL, 10);
	return 0;
}

bool moemd_sysfs_read(struct moemd *d, uint64_t knob[MOEM_BUDGET_NR], uint64_t *seq)
{
	char path[128];

	for (int k = 0; k < MOEM_BUDGET_NR; k++) {
		char buf[64];
		int fd;
		ssize_t n;

		knob_path((enum moem_budget_knob)k, path, sizeof(path));
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT && k) {
			knob[k] = MOEMD_KNOB_ABSENT; /* an older moem.ko without this knob */
			continue;
		}
		if (fd < 0)
			return false;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			return false;
		buf[n] = 0;
		if (buf[n - 1] == '\n')
			buf[n - 1] = 0;
		if (moem_budget_parse((enum moem_budget_knob)k, buf, &knob[k]))
			return false;
	}
	snprintf(path, sizeof(path), "%s/budgets/seq", MOEM_SYSFS_ROOT);
	return read_file_u64(path, seq) == 0;
}
