/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Helpers for the daemon's integration tests: make a tiny synthetic pack,
 * start moemd as a child process (its log in a file), wait until it
 * serves, call it, kill it, look at its file descriptors.
 *
 * Programs are found through $MOEMD (the daemon binary), else
 * $MOEM_BUILD/bin/moemd, else build/bin/moemd.
 */
#ifndef MOEM_DAEMON_UTIL_H
#define MOEM_DAEMON_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <moem/ctl.h>
#include <moem/error.h>
#include <moem/pack.h>
#include <moem/store.h>
#include <moem/util.h>

struct dmn {
	pid_t pid;
	char dir[256];
	char sock[256];
	char log[256];
	int status; /* wait status once reaped */
	bool reaped;
};

static inline const char *dmn_binary(void)
{
	static char path[512];
	const char *b = getenv("MOEMD");

	if (b)
		return b;
	snprintf(path, sizeof(path), "%s/bin/moemd",
		 getenv("MOEM_BUILD") ? getenv("MOEM_BUILD") : "build");
	return path;
}

static inline char *dmn_tmpdir(void)
{
	char tmpl[] = "/tmp/moemd-test-XXXXXX";
	char *d = mkdtemp(tmpl);

	return d ? strdup(d) : NULL;
}

static int dmn_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static inline void dmn_rm_rf(const char *path)
{
	if (path)
		nftw(path, dmn_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/*
 * A synthetic qwen3_moe pack with layers x experts (top-k topk) of
 * hidden x inter, in bf16 and q4, at path. 0 or -errno.
 */
static inline int dmn_make_pack(const char *dir, const char *path, uint32_t layers,
				uint32_t experts, uint32_t topk, uint32_t hidden, uint32_t inter)
{
	struct moem_mkmodel_opts mo;
	struct moem_pack_opts po = {0};
	char model[512];
	int ret;

	snprintf(model, sizeof(model), "%s/model-%u-%u-%u", dir, layers, experts, hidden);
	moem_mkmodel_defaults(&mo, MOEM_PRESET_QWEN3_30B_A3B);
	mo.cfg.n_layers = layers;
	mo.cfg.n_experts = experts;
	mo.cfg.top_k = topk;
	mo.cfg.hidden = hidden;
	mo.cfg.moe_inter = inter;
	mo.cfg.dense_inter = inter;
	mo.cfg.vocab = 256;
	mo.cfg.n_heads = 4;
	mo.cfg.n_kv_heads = 2;
	mo.cfg.head_dim = 32;
	mo.threads = 2;
	mo.out_dir = model;
	ret = moem_mkmodel(&mo);
	if (ret)
		return ret;
	po.model_dir = model;
	po.out_path = path;
	po.prec_mask = (1u << MOEM_PREC_BF16) | (1u << MOEM_PREC_Q4);
	po.threads = 2;
	ret = moem_pack_write(&po);
	dmn_rm_rf(model);
	return ret;
}

/* Start moemd in dir with the given extra arguments (NULL-terminated);
 * as uid (with RLIMIT_MEMLOCK memlock bytes) when uid is not 0. */
static inline int dmn_start_argv_as(struct dmn *d, const char *dir, uid_t uid, uint64_t memlock,
				    const char *const *extra);

static inline int dmn_start_argv(struct dmn *d, const char *dir, const char *const *extra)
{
	return dmn_start_argv_as(d, dir, 0, 0, extra);
}

static inline int dmn_start_argv_as(struct dmn *d, const char *dir, uid_t uid, uint64_t memlock,
				    const char *const *extra)
{
	const char *argv[64];
	int n = 0;

	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "%s", dir);
	snprintf(d->sock, sizeof(d->sock), "%s/moemd.sock", dir);
	snprintf(d->log, sizeof(d->log), "%s/moemd.log", dir);
	argv[n++] = dmn_binary();
	argv[n++] = "--socket";
	argv[n++] = d->sock;
	for (int i = 0; extra && extra[i] && n < 62; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	d->pid = fork();
	if (d->pid < 0)
		return -errno;
	if (d->pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

		if (fd >= 0) {
			dup2(fd, 2);
			dup2(fd, 1);
		}
		if (uid) {
			struct rlimit rl = {memlock, memlock};

			if (setrlimit(RLIMIT_MEMLOCK, &rl) || setgid(uid) || setuid(uid)) {
				fprintf(stderr, "cannot become uid %u: %s\n", (unsigned int)uid,
					strerror(errno));
				_exit(126);
			}
		}
		execv(argv[0], (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	return 0;
}

/* Start moemd with arguments given as a list. */
static inline int dmn_start(struct dmn *d, const char *dir, ...)
{
	const char *args[48];
	va_list ap;
	int n = 0;

	va_start(ap, dir);
	while (n < 47 && (args[n] = va_arg(ap, const char *)) != NULL)
		n++;
	va_end(ap);
	args[n] = NULL;
	return dmn_start_argv(d, dir, args);
}

/* Reap the daemon if it exited; true once it has. */
static inline bool dmn_exited(struct dmn *d)
{
	if (d->reaped)
		return true;
	if (waitpid(d->pid, &d->status, WNOHANG) == d->pid)
		d->reaped = true;
	return d->reaped;
}

static inline uint64_t dmn_ms(void)
{
	return moem_now_ns() / 1000000;
}

static inline void dmn_sleep_ms(unsigned int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

/* Connect once it listens; -ECHILD if it died first. */
static inline int dmn_connect(struct dmn *d, int timeout_ms, struct moem_ctl **c)
{
	uint64_t end = dmn_ms() + (uint64_t)timeout_ms;

	for (;;) {
		if (moem_ctl_connect(d->sock, c) == 0)
			return 0;
		if (dmn_exited(d))
			return -ECHILD;
		if (dmn_ms() > end)
			return -ETIMEDOUT;
		dmn_sleep_ms(2);
	}
}

/* Call over a fresh connection. */
static inline int dmn_call(struct dmn *d, const char *cmd, struct json_object *args,
			   struct json_object **resp)
{
	struct moem_ctl *c;
	int ret = dmn_connect(d, 5000, &c);

	*resp = NULL;
	if (ret) {
		json_object_put(args);
		return ret;
	}
	ret = moem_ctl_call(c, cmd, args, 60000, resp);
	moem_ctl_close(c);
	return ret;
}

static inline struct json_object *dmn_get(struct json_object *o, const char *path)
{
	char key[64];
	const char *dot;
	struct json_object *v = o;

	while (v && path) {
		dot = strchr(path, '.');
		snprintf(key, sizeof(key), "%.*s", dot ? (int)(dot - path) : (int)strlen(path),
			 path);
		if (!json_object_object_get_ex(v, key, &v))
			return NULL;
		path = dot ? dot + 1 : NULL;
	}
	return v;
}

static inline uint64_t dmn_u64(struct json_object *o, const char *path)
{
	struct json_object *v = dmn_get(o, path);

	return v ? json_object_get_uint64(v) : UINT64_MAX;
}

static inline const char *dmn_str(struct json_object *o, const char *path)
{
	struct json_object *v = dmn_get(o, path);

	return v ? json_object_get_string(v) : "";
}

/* Wait until moemd says it is ready; -ECHILD if it died, -ETIMEDOUT. */
static inline int dmn_wait_ready(struct dmn *d, int timeout_ms)
{
	uint64_t end = dmn_ms() + (uint64_t)timeout_ms;

	for (;;) {
		struct json_object *r = NULL;
		int ret = dmn_call(d, "hello", NULL, &r);
		bool ready = !ret && !strcmp(dmn_str(r, "state"), "ready");

		json_object_put(r);
		if (ready)
			return 0;
		if (dmn_exited(d))
			return -ECHILD;
		if (dmn_ms() > end)
			return -ETIMEDOUT;
		dmn_sleep_ms(5);
	}
}

/* Wait for the exit; the wait status in *status. -ETIMEDOUT. */
static inline int dmn_wait_exit(struct dmn *d, int timeout_ms)
{
	uint64_t end = dmn_ms() + (uint64_t)timeout_ms;

	while (!dmn_exited(d)) {
		if (dmn_ms() > end)
			return -ETIMEDOUT;
		dmn_sleep_ms(2);
	}
	return 0;
}

static inline void dmn_kill(struct dmn *d, int sig)
{
	if (!dmn_exited(d))
		kill(d->pid, sig);
}

/* Kill -9 and reap, whatever state it is in. */
static inline void dmn_stop_hard(struct dmn *d)
{
	if (d->pid <= 0)
		return;
	dmn_kill(d, SIGKILL);
	if (!d->reaped && waitpid(d->pid, &d->status, 0) == d->pid)
		d->reaped = true;
}

static inline int dmn_exit_code(const struct dmn *d)
{
	if (!d->reaped)
		return -1;
	return WIFEXITED(d->status) ? WEXITSTATUS(d->status) : 128 + WTERMSIG(d->status);
}

/* Open file descriptors of a process (-1 if it is gone). */
static inline int dmn_fd_count(pid_t pid)
{
	char path[64];
	struct dirent *e;
	int n = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((e = readdir(dir)))
		if (e->d_name[0] != '.')
			n++;
	closedir(dir);
	return n;
}

/* Does the daemon's log contain needle? */
static inline bool dmn_log_has(const struct dmn *d, const char *needle)
{
	char line[4096];
	bool found = false;
	FILE *f = fopen(d->log, "r");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	fclose(f);
	return found;
}

/* Print the daemon's log (for a failing test). */
static inline void dmn_dump_log(const struct dmn *d)
{
	char line[4096];
	FILE *f = fopen(d->log, "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		fprintf(stderr, "# moemd| %s", line);
	fclose(f);
}

/* A JSON object from a list of "key", "value" string pairs. */
static inline struct json_object *dmn_args(const char *k, ...)
{
	struct json_object *o = json_object_new_object();
	va_list ap;

	va_start(ap, k);
	while (k) {
		const char *v = va_arg(ap, const char *);

		json_object_object_add(o, k, json_object_new_string(v));
		k = va_arg(ap, const char *);
	}
	va_end(ap);
	return o;
}

/* {"workload": {...}} from key/value string pairs. */
static inline struct json_object *dmn_run_args(const char *k, ...)
{
	struct json_object *o = json_object_new_object(), *w = json_object_new_object();
	va_list ap;

	va_start(ap, k);
	while (k) {
		const char *v = va_arg(ap, const char *);

		json_object_object_add(w, k, json_object_new_string(v));
		k = va_arg(ap, const char *);
	}
	va_end(ap);
	json_object_object_add(o, "workload", w);
	return o;
}

#endif /* MOEM_DAEMON_UTIL_H */
