/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What `moem trace record|top|pool` (cmd_trace_bpf.c) share: the traced
 * process (--pid P, or --exec BIN started held before exec) and an epoll
 * loop over the ring buffer, the process's exit, signals and a timer.
 */
#ifndef MOEM_TOOL_TRACE_TARGET_H
#define MOEM_TOOL_TRACE_TARGET_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Initialise with { .pid = -1, .go_fd = -1, .pidfd = -1 }. */
struct target {
	pid_t pid;	    /* traced process, or -1: every process running binary */
	const char *binary; /* --binary */
	char *exec_path;    /* --exec BIN, resolved like execvp would */
	char **exec_argv;
	pid_t child; /* the started BIN (0: none) */
	int go_fd;   /* releases the child into exec */
	int pidfd;   /* readable when the traced process exits (-1: none) */
	int status;  /* the child's wait status */
	bool exited;
};

/* What trace_loop_wait() returns. */
enum { EV_RING = 1, EV_EXIT, EV_SIGNAL, EV_TIMER };

struct loop {
	int ep, sfd, tfd;
	sigset_t old;
	bool masked; /* old holds the mask to restore */
};

/*
 * Fork t->exec_argv[0] (searched in PATH) and hold it before exec; t->pid
 * becomes its pid. With stdout_taken its stdout goes to stderr.
 */
int trace_start_child(struct target *t, bool stdout_taken);
/* Let the held child exec, once the probes are attached to its pid. */
int trace_release_child(struct target *t);
/* A pidfd for t->pid (none for -1), polled for the process's exit. */
int trace_open_pidfd(struct target *t);
/* Release what t holds; a started child is waited for (killed first if asked). */
void trace_target_end(struct target *t, bool kill_child);
/* /proc/PID/comm, or "?". */
void trace_comm_of(pid_t pid, char *buf, size_t n);
/* After getopt: the remaining arguments are the program (-- BIN ARGS); exactly
 * one target must be given. 0, or the exit status to return. */
int trace_target_opts_done(struct target *t, int argc, char **argv, const char *cmd);

/*
 * Watch ring_fd and pidfd (-1: none), SIGINT/SIGTERM/SIGHUP (blocked and
 * read through a signalfd) and, if interval_ms, a periodic timer.
 * Initialise l with { -1, -1, -1 } so that trace_loop_close() is safe.
 */
int trace_loop_open(struct loop *l, int ring_fd, int pidfd, uint64_t interval_ms);
void trace_loop_close(struct loop *l);
/* The next event (EV_*; for EV_SIGNAL, *sig is the signal) or -errno. */
int trace_loop_wait(struct loop *l, int *sig);

/* moem_bpf_check_perm(), printing "moem trace: <why>" when it fails. */
int trace_need_perm(void);
/* A number in [lo, hi], or -1 after printing what is wrong. */
int trace_parse_num(const char *what, const char *s, double lo, double hi, double *v);

#endif /* MOEM_TOOL_TRACE_TARGET_H */
