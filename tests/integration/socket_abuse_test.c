// SPDX-License-Identifier: GPL-2.0-only
/*
 * moemd's trust boundary, as a hostile socket client meets it
 * (Documentation/admin-guide.md, "Security model"):
 *  - trace destinations: absolute and relative paths, names with '/',
 *    a symlink (to /proc/self/mem and to a precious file), an existing
 *    file, a file that appears after "trace on": all refused, nothing
 *    replaced; a plain name is written, and rewritten by the next run;
 *  - run inputs: paths, a symlink out of workload-dir, a FIFO (refused at
 *    once, not hanging the daemon);
 *  - 70 connections that never send (of root, and of another uid): root's
 *    status still gets in within a deadline; one uid hits its limit;
 *  - the idle timeout closes silent clients, not one waiting for a run;
 *  - a request followed by a half-close (shutdown(SHUT_WR)) gets its
 *    answer, a run's included, then EOF;
 *  - the socket path: a regular file there is refused and kept; a dead
 *    socket is removed.
 */
#include <pwd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <moem/engine.h>
#include <moem/trace.h>

#include "kselftest_harness.h"
#include "daemon_util.h"

FIXTURE(s)
{
	char *dir;
	char pack[512], tdir[512], wdir[512];
	struct dmn m;
};

FIXTURE_SETUP(s)
{
	self->dir = dmn_tmpdir();
	ASSERT_NE(NULL, self->dir);
	/* Other uids reach the socket in the uid tests. */
	ASSERT_EQ(0, chmod(self->dir, 0755));
	snprintf(self->pack, sizeof(self->pack), "%s/tiny.moem", self->dir);
	snprintf(self->tdir, sizeof(self->tdir), "%s/traces", self->dir);
	snprintf(self->wdir, sizeof(self->wdir), "%s/inputs", self->dir);
	ASSERT_EQ(0, mkdir(self->tdir, 0755));
	ASSERT_EQ(0, mkdir(self->wdir, 0755));
	ASSERT_EQ(0, dmn_make_pack(self->dir, self->pack, 2, 16, 4, 128, 128))
	TH_LOG("%s", moem_last_error());
	self->m.pid = 0;
}

FIXTURE_TEARDOWN(s)
{
	if (self->m.pid > 0) {
		if (_metadata->passed == 0)
			dmn_dump_log(&self->m);
		dmn_stop_hard(&self->m);
	}
	dmn_rm_rf(self->dir);
	free(self->dir);
}

static int start(FIXTURE_DATA(s) * self, const char *const *extra)
{
	const char *args[40] = {"--pack",	  self->pack, "--backend",    "cpu",
				"--threads",	  "1",	      "--hbm",	      "30%",
				"--dram",	  "60%",      "--precisions", "bf16,q4",
				"--pool",	  "thp",      "--trace-dir",  self->tdir,
				"--workload-dir", self->wdir, "--log-level",  "debug"};
	int n = 20;

	for (int i = 0; extra && extra[i] && n < 38; i++)
		args[n++] = extra[i];
	args[n] = NULL;
	return dmn_start_argv(&self->m, self->dir, args);
}

#define START_READY(...)                                                     \
	do {                                                                 \
		const char *x_[] = {NULL, ##__VA_ARGS__, NULL};              \
		ASSERT_EQ(0, start(self, x_ + 1));                           \
		if (dmn_wait_ready(&self->m, 30000)) {                       \
			dmn_dump_log(&self->m);                              \
			ASSERT_TRUE(0) TH_LOG("moemd did not become ready"); \
		}                                                            \
	} while (0)

static void shutdown_ok(struct __test_metadata *_metadata, struct dmn *m)
{
	struct json_object *r;

	ASSERT_EQ(0, dmn_call(m, "shutdown", NULL, &r));
	json_object_put(r);
	ASSERT_EQ(0, dmn_wait_exit(m, 10000));
	EXPECT_EQ(0, dmn_exit_code(m));
}

static void write_file(const char *path, const char *body)
{
	FILE *f = fopen(path, "w");

	if (f) {
		fputs(body, f);
		fclose(f);
	}
}

static bool file_is(const char *path, const char *body)
{
	char buf[256] = "";
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	return !strcmp(buf, body);
}

/* "trace on" with one string field; the call's return value. */
static int trace_on(struct dmn *m, const char *key, const char *val, struct json_object **r)
{
	struct json_object *a = json_object_new_object();

	json_object_object_add(a, "on", json_object_new_boolean(1));
	json_object_object_add(a, key, json_object_new_string(val));
	return dmn_call(m, "trace", a, r);
}

static void expect_trace_refused(struct __test_metadata *_metadata, struct dmn *m, const char *key,
				 const char *val, const char *needle)
{
	struct json_object *r;

	EXPECT_NE(0, trace_on(m, key, val, &r)) TH_LOG("trace on %s=%s accepted", key, val);
	EXPECT_NE(NULL, strstr(dmn_str(r, "error"), needle))
	TH_LOG("trace on %s=%s: %s (lacks '%s')", key, val, dmn_str(r, "error"), needle);
	json_object_put(r);
}

TEST_F_TIMEOUT(s, trace_destinations, 120)
{
	char precious[600], link[600], path[600];
	struct json_object *r;
	struct moem_trace_reader *tr;

	snprintf(precious, sizeof(precious), "%s/precious", self->dir);
	write_file(precious, "precious");
	snprintf(link, sizeof(link), "%s/link", self->tdir);
	ASSERT_EQ(0, symlink(precious, link));
	snprintf(path, sizeof(path), "%s/mem", self->tdir);
	ASSERT_EQ(0, symlink("/proc/self/mem", path));
	snprintf(path, sizeof(path), "%s/existing", self->tdir);
	write_file(path, "precious");
	START_READY();

	/* Paths of any kind are refused: only names inside trace-dir. */
	expect_trace_refused(_metadata, &self->m, "path", precious, "no paths");
	expect_trace_refused(_metadata, &self->m, "path", "/proc/self/mem", "no paths");
	expect_trace_refused(_metadata, &self->m, "path", "rel.trace", "no paths");
	expect_trace_refused(_metadata, &self->m, "name", "../precious", "not a path");
	expect_trace_refused(_metadata, &self->m, "name", "a/b", "not a path");
	expect_trace_refused(_metadata, &self->m, "name", "/proc/self/mem", "not a path");
	expect_trace_refused(_metadata, &self->m, "name", ".hidden", "not a path");
	expect_trace_refused(_metadata, &self->m, "name", "", "not a path");
	/* Symlinks and files moemd did not write are never replaced. */
	expect_trace_refused(_metadata, &self->m, "name", "link", "symbolic link");
	expect_trace_refused(_metadata, &self->m, "name", "mem", "symbolic link");
	expect_trace_refused(_metadata, &self->m, "name", "existing", "did not write");
	/* Nothing was turned on by any of that: runs still work. */
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_FALSE(json_object_get_boolean(dmn_get(r, "trace.on")));
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "run", dmn_run_args("steps", "2", NULL), &r))
	TH_LOG("%s", moem_last_error());
	json_object_put(r);

	/* A plain name: written by the next run, rewritten by the one after. */
	ASSERT_EQ(0, trace_on(&self->m, "name", "ok.trace", &r)) TH_LOG("%s", moem_last_error());
	snprintf(path, sizeof(path), "%s/ok.trace", self->tdir);
	EXPECT_STREQ(path, dmn_str(r, "path"));
	json_object_put(r);
	for (int i = 0; i < 2; i++) {
		ASSERT_EQ(0, dmn_call(&self->m, "run", dmn_run_args("steps", "3", NULL), &r))
		TH_LOG("run %d: %s", i, moem_last_error());
		json_object_put(r);
		ASSERT_EQ(0, moem_trace_open(path, &tr)) TH_LOG("%s", moem_last_error());
		moem_trace_close(tr);
	}

	/* A file put there between "trace on" and the run stays as it is:
	 * the run fails with the reason, and later runs are not broken. */
	ASSERT_EQ(0, trace_on(&self->m, "name", "later.trace", &r));
	json_object_put(r);
	snprintf(path, sizeof(path), "%s/later.trace", self->tdir);
	write_file(path, "precious");
	EXPECT_NE(0, dmn_call(&self->m, "run", dmn_run_args("steps", "2", NULL), &r));
	EXPECT_NE(NULL, strstr(dmn_str(r, "error"), "not replacing"))
	TH_LOG("%s", json_object_to_json_string(r));
	json_object_put(r);
	EXPECT_TRUE(file_is(path, "precious"));
	{
		struct json_object *a = json_object_new_object();

		json_object_object_add(a, "on", json_object_new_boolean(0));
		ASSERT_EQ(0, dmn_call(&self->m, "trace", a, &r));
		json_object_put(r);
	}
	ASSERT_EQ(0, dmn_call(&self->m, "run", dmn_run_args("steps", "2", NULL), &r));
	json_object_put(r);
	EXPECT_TRUE(file_is(precious, "precious"));
	snprintf(path, sizeof(path), "%s/existing", self->tdir);
	EXPECT_TRUE(file_is(path, "precious"));
	/* No temporary file was left behind. */
	{
		DIR *dir = opendir(self->tdir);
		struct dirent *e;
		int n = 0;

		ASSERT_NE(NULL, dir);
		while ((e = readdir(dir)))
			if (e->d_name[0] != '.')
				n++;
		closedir(dir);
		EXPECT_EQ(5, n); /* link, mem, existing, ok.trace, later.trace */
	}
	shutdown_ok(_metadata, &self->m);

	/* Without trace-dir, clients may name no trace at all. */
	{
		const char *args[] = {"--pack", self->pack, "--backend", "cpu", "--pool", "thp",
				      "--hbm",	"30%",	    "--dram",	 "60%", NULL};

		ASSERT_EQ(0, dmn_start_argv(&self->m, self->dir, args));
		ASSERT_EQ(0, dmn_wait_ready(&self->m, 30000));
	}
	expect_trace_refused(_metadata, &self->m, "name", "ok.trace", "has no trace-dir");
	shutdown_ok(_metadata, &self->m);
}

static void expect_run_refused(struct __test_metadata *_metadata, struct dmn *m, const char *wl,
			       const char *needle)
{
	struct json_object *r;
	uint64_t t0 = dmn_ms();

	EXPECT_NE(0, dmn_call(m, "run", dmn_run_args("workload", wl, "steps", "2", NULL), &r))
	TH_LOG("workload %s accepted", wl);
	EXPECT_NE(NULL, strstr(dmn_str(r, "error"), needle))
	TH_LOG("workload %s: %s (lacks '%s')", wl, dmn_str(r, "error"), needle);
	EXPECT_LT(dmn_ms() - t0, 1000u)
	TH_LOG("workload %s: refused after %llu ms", wl, (unsigned long long)(dmn_ms() - t0));
	json_object_put(r);
}

TEST_F_TIMEOUT(s, run_inputs, 120)
{
	char path[600];
	struct json_object *r;

	snprintf(path, sizeof(path), "%s/shadow", self->wdir);
	ASSERT_EQ(0, symlink("/etc/shadow", path));
	snprintf(path, sizeof(path), "%s/fifo", self->wdir);
	ASSERT_EQ(0, mkfifo(path, 0644));
	snprintf(path, sizeof(path), "%s/h.bin", self->wdir);
	ASSERT_EQ(0, moem_hidden_write_synth(self->pack, NULL, 0, 2, 2, path))
	TH_LOG("%s", moem_last_error());
	START_READY();
	expect_run_refused(_metadata, &self->m, "hidden:/etc/shadow", "not a path");
	expect_run_refused(_metadata, &self->m, "trace:../tiny.moem", "not a path");
	expect_run_refused(_metadata, &self->m, "hidden:shadow", "symbolic link");
	expect_run_refused(_metadata, &self->m, "hidden:fifo", "not a regular file");
	expect_run_refused(_metadata, &self->m, "hidden:absent", "No such file");
	ASSERT_EQ(0, dmn_call(&self->m, "run",
			      dmn_run_args("workload", "hidden:h.bin", "steps", "2", "batch", "2",
					   NULL),
			      &r))
	TH_LOG("%s", moem_last_error());
	EXPECT_EQ(2u, dmn_u64(r, "steps"));
	json_object_put(r);
	shutdown_ok(_metadata, &self->m);
}

/* n connections as uid that never send, held by a child until it is
 * killed; it writes the number it opened to *ctl's pipe. */
static pid_t idle_clients_as(const char *sock, uid_t uid, int n, int *ctl)
{
	int p[2];
	pid_t pid;

	if (pipe(p))
		return -1;
	pid = fork();
	if (pid)
		goto parent;
	close(p[0]);
	if (uid && setuid(uid))
		_exit(2);
	{
		int got = 0;

		for (int i = 0; i < n; i++) {
			struct sockaddr_un sa = {.sun_family = AF_UNIX};
			int fd = socket(AF_UNIX, SOCK_STREAM, 0);

			snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
			if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
				_exit(3);
			got++;
		}
		/* Report, then hold them until killed. */
		if (write(p[1], &got, sizeof(got)) != sizeof(got))
			_exit(4);
		close(p[1]);
		pause();
		_exit(0);
	}
parent:
	close(p[1]);
	*ctl = p[0];
	return pid;
}

TEST_F_TIMEOUT(s, idle_clients_do_not_lock_root_out, 120)
{
	struct passwd *nobody = getpwnam("nobody");
	struct json_object *r;
	pid_t kid;
	int ctl, got = 0;
	uint64_t t0;

	if (getuid())
		SKIP(return, "needs root (to open connections as another uid)");
	ASSERT_NE(NULL, nobody);
	START_READY("--clients-per-uid", "0");
	ASSERT_EQ(0, chmod(self->m.sock, 0666));
	/* 70 connections of another uid that never send a byte. */
	kid = idle_clients_as(self->m.sock, nobody->pw_uid, 70, &ctl);
	ASSERT_LT(0, kid);
	ASSERT_EQ(sizeof(got), read(ctl, &got, sizeof(got)));
	EXPECT_EQ(70, got);
	/* The daemon took 64 of them (its other replies: "too many"). */
	for (uint64_t end = dmn_ms() + 10000; dmn_ms() < end;) {
		ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
		got = (int)dmn_u64(r, "daemon.clients");
		json_object_put(r);
		if (got >= 64)
			break;
	}
	/* Root still gets in, at once, as many times as it likes. */
	for (int i = 0; i < 5; i++) {
		t0 = dmn_ms();
		ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r))
		TH_LOG("%s", moem_last_error());
		EXPECT_STREQ("ready", dmn_str(r, "daemon.state"));
		json_object_put(r);
		EXPECT_LT(dmn_ms() - t0, 2000u);
	}
	/* Root holding both reserved slots: the next root connection closes
	 * the other uid's idlest connection instead of being refused. */
	{
		struct moem_ctl *a, *b, *x;

		ASSERT_EQ(0, moem_ctl_connect(self->m.sock, &a));
		ASSERT_EQ(0, moem_ctl_connect(self->m.sock, &b));
		ASSERT_EQ(0, moem_ctl_connect(self->m.sock, &x));
		EXPECT_EQ(0, moem_ctl_call(x, "hello", NULL, 5000, &r))
		TH_LOG("%s", moem_last_error());
		json_object_put(r);
		EXPECT_EQ(0, moem_ctl_call(a, "hello", NULL, 5000, &r));
		json_object_put(r);
		moem_ctl_close(a);
		moem_ctl_close(b);
		moem_ctl_close(x);
	}
	EXPECT_TRUE(dmn_log_has(&self->m, "closed to let root in"));
	close(ctl);
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	shutdown_ok(_metadata, &self->m);

	/* One uid may hold clients-per-uid connections; the next is told. */
	START_READY("--clients-per-uid", "4");
	ASSERT_EQ(0, chmod(self->m.sock, 0666));
	kid = idle_clients_as(self->m.sock, nobody->pw_uid, 4, &ctl);
	ASSERT_LT(0, kid);
	ASSERT_EQ(sizeof(got), read(ctl, &got, sizeof(got)));
	for (uint64_t end = dmn_ms() + 10000; dmn_ms() < end;) {
		ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
		got = (int)dmn_u64(r, "daemon.clients");
		json_object_put(r);
		if (got >= 4)
			break;
	}
	EXPECT_GE(got, 4);
	{
		int p[2];
		pid_t k2;

		ASSERT_EQ(0, pipe(p));
		k2 = fork();
		if (!k2) {
			struct moem_ctl *y;
			char *l = NULL;
			int ok;

			close(p[0]);
			if (setuid(nobody->pw_uid) || moem_ctl_connect(self->m.sock, &y))
				_exit(2);
			ok = !moem_ctl_recv_line(y, 5000, &l) && strstr(l, "from uid");
			_exit(ok ? 0 : 1);
		}
		close(p[1]);
		close(p[0]);
		ASSERT_LT(0, k2);
		{
			int st;

			ASSERT_EQ(k2, waitpid(k2, &st, 0));
			EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
			TH_LOG("the 5th connection of one uid was not told about the limit");
		}
	}
	close(ctl);
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	shutdown_ok(_metadata, &self->m);
}

TEST_F_TIMEOUT(s, idle_timeout, 60)
{
	struct json_object *r;
	struct moem_ctl *idle, *busy;
	char *line;
	int64_t id;

	START_READY("--client-idle-timeout", "0.5");
	ASSERT_EQ(0, moem_ctl_connect(self->m.sock, &idle));
	ASSERT_EQ(0, moem_ctl_connect(self->m.sock, &busy));
	/* A run long enough to outlast the timeout: its client waits. */
	ASSERT_EQ(0, moem_ctl_send(busy, "run", dmn_run_args("steps", "10000000", NULL), &id));
	/* The silent one is closed: EOF within a generous deadline. */
	EXPECT_EQ(-ECONNRESET, moem_ctl_recv_line(idle, 20000, &line));
	moem_ctl_close(idle);
	/* The waiting one is not: it gets its (stopped) run. */
	ASSERT_EQ(0, dmn_call(&self->m, "stop-run", NULL, &r));
	json_object_put(r);
	ASSERT_EQ(0, moem_ctl_wait(busy, id, 30000, &r)) TH_LOG("%s", moem_last_error());
	EXPECT_TRUE(json_object_get_boolean(dmn_get(r, "stopped")));
	json_object_put(r);
	moem_ctl_close(busy);
	shutdown_ok(_metadata, &self->m);
}

/* Send lines, shut down our sending side, read every answer until EOF. */
static int half_close(const char *sock, const char *lines, char *out, size_t len)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	size_t have = 0;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		return -errno;
	if (send(fd, lines, strlen(lines), MSG_NOSIGNAL) != (ssize_t)strlen(lines) ||
	    shutdown(fd, SHUT_WR)) {
		close(fd);
		return -EIO;
	}
	for (;;) {
		struct timeval tv = {30, 0};
		ssize_t n;

		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		n = recv(fd, out + have, len - 1 - have, 0);
		if (n <= 0) {
			close(fd);
			out[have] = 0;
			return n == 0 ? 0 : -ETIMEDOUT;
		}
		have += (size_t)n;
		if (have == len - 1) {
			close(fd);
			return -E2BIG;
		}
	}
}

TEST_F_TIMEOUT(s, half_closed_requests_are_answered, 60)
{
	char out[65536];

	START_READY();
	ASSERT_EQ(0, half_close(self->m.sock, "{\"v\":1,\"id\":1,\"cmd\":\"status\"}\n", out,
				sizeof(out)));
	EXPECT_NE(NULL, strstr(out, "\"id\":1,\"ok\":true")) TH_LOG("%.200s", out);
	/* A run answers when it ends: still delivered, then EOF. */
	ASSERT_EQ(0, half_close(self->m.sock,
				"{\"v\":1,\"id\":2,\"cmd\":\"hello\"}\n"
				"{\"v\":1,\"id\":3,\"cmd\":\"run\",\"workload\":{\"steps\":4}}\n",
				out, sizeof(out)));
	EXPECT_NE(NULL, strstr(out, "\"id\":2,\"ok\":true")) TH_LOG("%.300s", out);
	EXPECT_NE(NULL, strstr(out, "\"id\":3,\"ok\":true")) TH_LOG("%.300s", out);
	EXPECT_NE(NULL, strstr(out, "\"steps\":4")) TH_LOG("%.300s", out);
	/* The last line may lack its newline (printf '...' | nc -N). */
	ASSERT_EQ(0, half_close(self->m.sock, "{\"v\":1,\"id\":4,\"cmd\":\"hello\"}", out,
				sizeof(out)));
	EXPECT_NE(NULL, strstr(out, "\"id\":4,\"ok\":true")) TH_LOG("%.200s", out);
	shutdown_ok(_metadata, &self->m);
}

TEST_F_TIMEOUT(s, socket_path, 60)
{
	char sock[600];
	struct dmn other;

	/* A file where the socket should go: refused, and kept. */
	snprintf(sock, sizeof(sock), "%s/moemd.sock", self->dir);
	write_file(sock, "precious");
	ASSERT_EQ(0, start(self, NULL));
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 30000));
	EXPECT_EQ(1, dmn_exit_code(&self->m));
	EXPECT_TRUE(dmn_log_has(&self->m, "not a socket: not removing it"));
	EXPECT_TRUE(file_is(sock, "precious"));
	ASSERT_EQ(0, unlink(sock));

	/* A socket nobody listens on (a killed daemon's): removed, served. */
	{
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);

		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
		ASSERT_EQ(0, bind(fd, (struct sockaddr *)&sa, sizeof(sa)));
		close(fd);
	}
	START_READY();
	EXPECT_TRUE(dmn_log_has(&self->m, "removed the stale socket"));
	/* A second daemon on the same socket: refused, the first serves on. */
	ASSERT_EQ(0, dmn_start(&other, self->dir, "--pack", self->pack, "--backend", "cpu", NULL));
	ASSERT_EQ(0, dmn_wait_exit(&other, 30000));
	EXPECT_EQ(1, dmn_exit_code(&other));
	ASSERT_EQ(0, dmn_wait_ready(&self->m, 5000));
	shutdown_ok(_metadata, &self->m);
}

/*
 * Clients that connect, ask and hang up in a burst (a script's loop) are
 * no longer counted against the next one: their slots are freed when a
 * new connection finds none (before, it was refused "too many control
 * connections (66)" until the poll loop had read their EOFs).
 */
TEST_F_TIMEOUT(s, hung_up_clients_leave_their_slots, 60)
{
	static const char line[] = "{\"v\":1,\"id\":1,\"cmd\":\"status\"}\n";
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct json_object *r;

	START_READY();
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", self->m.sock);
	for (int i = 0; i < 500; i++) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

		ASSERT_LE(0, fd);
		if (!connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
			send(fd, line, sizeof(line) - 1, MSG_NOSIGNAL);
		close(fd);
	}
	ASSERT_EQ(0, dmn_call(&self->m, "hello", NULL, &r)) TH_LOG("%s", moem_last_error());
	json_object_put(r);
	shutdown_ok(_metadata, &self->m);
}

TEST_HARNESS_MAIN
