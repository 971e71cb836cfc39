// SPDX-License-Identifier: GPL-2.0-only
/* The traced process and the event loop of `moem trace record|top|pool` (trace_target.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <moem/bpf.h>
#include <moem/error.h>

#include "trace_target.h"

static char *resolve_bin(const char *bin)
{
	const char *path = getenv("PATH");
	char *dirs, *d, *save = NULL, *out = NULL;

	if (strchr(bin, '/'))
		return access(bin, X_OK) ? NULL : strdup(bin);
	dirs = strdup(path ? path : "/usr/local/bin:/usr/bin:/bin");
	for (d = dirs ? strtok_r(dirs, ":", &save) : NULL; d && !out;
	     d = strtok_r(NULL, ":", &save)) {
		if (asprintf(&out, "%s/%s", *d ? d : ".", bin) < 0)
			out = NULL;
		else if (access(out, X_OK)) {
			free(out);
			out = NULL;
		}
	}
	free(dirs);
	return out;
}

/*
 * Fork the program to trace and hold it before exec, so the probes can be
 * attached to its pid first: the uprobes and their semaphores are armed in
 * whatever the pid maps next, so it is traced from its first instruction.
 */
int trace_start_child(struct target *t, bool stdout_taken)
{
	int fds[2];
	char c;

	t->exec_path = resolve_bin(t->exec_argv[0]);
	if (!t->exec_path)
		return moem_errf(ENOENT, "%s: no such program", t->exec_argv[0]);
	if (pipe2(fds, O_CLOEXEC))
		return moem_errf(errno, "pipe: %s", strerror(errno));
	t->child = fork();
	if (t->child < 0) {
		close(fds[0]);
		close(fds[1]);
		return moem_errf(errno, "fork: %s", strerror(errno));
	}
	if (!t->child) {
		close(fds[1]);
		if (read(fds[0], &c, 1) != 1)
			_exit(126); /* the tracer gave up */
		/* The trace goes to stdout: the program's output must not. */
		if (stdout_taken && dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
			_exit(126);
		execv(t->exec_path, t->exec_argv);
		fprintf(stderr, "moem trace: cannot run %s: %s\n", t->exec_path, strerror(errno));
		_exit(127);
	}
	close(fds[0]);
	t->go_fd = fds[1];
	t->pid = t->child;
	return 0;
}

int trace_release_child(struct target *t)
{
	int ret = write(t->go_fd, "g", 1) == 1 ? 0 : -errno;

	close(t->go_fd);
	t->go_fd = -1;
	return ret;
}

int trace_open_pidfd(struct target *t)
{
	if (t->pid < 0)
		return 0;
	t->pidfd = (int)syscall(SYS_pidfd_open, t->pid, 0);
	if (t->pidfd < 0)
		return moem_errf(errno == ESRCH ? ESRCH : errno, "process %d: %s", (int)t->pid,
				 strerror(errno));
	return 0;
}

void trace_target_end(struct target *t, bool kill_child)
{
	if (t->go_fd >= 0) {
		close(t->go_fd); /* never released: it exits without running */
		t->go_fd = -1;
	}
	if (t->child > 0 && !t->exited) {
		if (kill_child)
			kill(t->child, SIGKILL);
		if (waitpid(t->child, &t->status, 0) == t->child)
			t->exited = true;
	}
	if (t->pidfd >= 0)
		close(t->pidfd);
	t->pidfd = -1;
	free(t->exec_path);
	t->exec_path = NULL;
}

void trace_comm_of(pid_t pid, char *buf, size_t n)
{
	char path[64];
	FILE *f;

	snprintf(buf, n, "?");
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	f = fopen(path, "r");
	if (f) {
		if (fgets(buf, (int)n, f))
			buf[strcspn(buf, "\n")] = 0;
		fclose(f);
	}
}

/* ---- the event loop ------------------------------------------------------ */

static int loop_add(struct loop *l, int fd, int tag)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)tag};

	if (fd >= 0 && epoll_ctl(l->ep, EPOLL_CTL_ADD, fd, &ev))
		return moem_errf(errno, "epoll: %s", strerror(errno));
	return 0;
}

/* SIGINT/SIGTERM/SIGHUP end the command cleanly; interval_ms > 0 ticks. */
int trace_loop_open(struct loop *l, int ring_fd, int pidfd, uint64_t interval_ms)
{
	sigset_t set;
	int ret;

	l->ep = l->sfd = l->tfd = -1;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	l->masked = !sigprocmask(SIG_BLOCK, &set, &l->old);
	l->ep = epoll_create1(EPOLL_CLOEXEC);
	l->sfd = signalfd(-1, &set, SFD_CLOEXEC);
	if (l->ep < 0 || l->sfd < 0)
		return moem_errf(errno, "epoll/signalfd: %s", strerror(errno));
	if (interval_ms) {
		struct itimerspec its = {
			.it_interval = {(time_t)(interval_ms / 1000),
					(long)(interval_ms % 1000) * 1000000},
		};

		its.it_value = its.it_interval;
		l->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
		if (l->tfd < 0 || timerfd_settime(l->tfd, 0, &its, NULL))
			return moem_errf(errno, "timerfd: %s", strerror(errno));
	}
	ret = loop_add(l, ring_fd, EV_RING);
	if (!ret)
		ret = loop_add(l, pidfd, EV_EXIT);
	if (!ret)
		ret = loop_add(l, l->sfd, EV_SIGNAL);
	if (!ret)
		ret = loop_add(l, l->tfd, EV_TIMER);
	return ret;
}

void trace_loop_close(struct loop *l)
{
	if (l->ep >= 0)
		close(l->ep);
	if (l->sfd >= 0)
		close(l->sfd);
	if (l->tfd >= 0)
		close(l->tfd);
	if (l->masked)
		sigprocmask(SIG_SETMASK, &l->old, NULL);
	l->masked = false;
}

/* Wait for the next event: EV_* (signal: *sig set), or -errno. */
int trace_loop_wait(struct loop *l, int *sig)
{
	struct epoll_event ev;
	int n;

	do
		n = epoll_wait(l->ep, &ev, 1, -1);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return moem_errf(errno, "epoll_wait: %s", strerror(errno));
	if (ev.data.u32 == EV_SIGNAL) {
		struct signalfd_siginfo si;

		*sig = read(l->sfd, &si, sizeof(si)) == sizeof(si) ? (int)si.ssi_signo : SIGINT;
	} else if (ev.data.u32 == EV_TIMER) {
		uint64_t ticks;

		if (read(l->tfd, &ticks, sizeof(ticks)) < 0)
			ticks = 0;
	}
	return (int)ev.data.u32;
}

int trace_need_perm(void)
{
	int ret = moem_bpf_check_perm();

	if (ret)
		fprintf(stderr, "moem trace: %s\n", moem_strerror(ret));
	return ret;
}

int trace_parse_num(const char *what, const char *s, double lo, double hi, double *v)
{
	char *end;

	*v = strtod(s, &end);
	if (!*s || *end || !(*v >= lo && *v <= hi)) {
		fprintf(stderr, "moem trace: %s '%s': want a number in %g..%g\n", what, s, lo, hi);
		return -1;
	}
	return 0;
}

/* The target options record and top share; returns 0, or an exit status. */
int trace_target_opts_done(struct target *t, int argc, char **argv, const char *cmd)
{
	if (!t->exec_argv && optind < argc)
		t->exec_argv = argv + optind; /* moem trace record -o F -- BIN ARGS */
	/* --binary names the probes' file; alone (top) it is the target */
	bool by_binary = t->pid < 0 && !t->exec_argv && t->binary && !strcmp(cmd, "top");

	if ((t->pid > 0) + (t->exec_argv != NULL) + by_binary != 1) {
		fprintf(stderr, "moem trace %s: give one of --pid P, --exec BIN [ARGS...]%s\n", cmd,
			strcmp(cmd, "top") ? "" : " or --binary PATH (every process running it)");
		return 2;
	}
	return 0;
}
