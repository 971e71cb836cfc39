// SPDX-License-Identifier: GPL-2.0-only
/*
 * moemd on the host (userspace pool, CPU backend, a tiny synthetic pack):
 * start and stop, protocol round trips, bad input of every kind (the
 * daemon keeps serving and leaks no descriptor), budget changes through
 * the socket during a run (reflected in status, the run's digest equal to
 * an undisturbed run's), SIGTERM draining, SIGHUP reloading, trace on/off,
 * verification of staged experts, configuration errors and their exit
 * statuses, and a sticky device error ending the process with status 75
 * (through the CUDA kernel emulator, when it is built).
 */
#include <sys/socket.h>
#include <sys/un.h>

#include <moem/engine.h>
#include <moem/trace.h>

#include "kselftest_harness.h"
#include "daemon_util.h"

/* MOEMD_MAX_CLIENTS in runtime/serve/moemd/moemd.h, and root's
 * MOEMD_ROOT_SLOTS more (without a per-uid limit). */
#define MOEMD_TEST_MAX_CLIENTS (getuid() ? 64 : 66)

/* Wait until the daemon holds n descriptors (closed clients are reaped
 * on its next loop pass); returns the last count. */
static int wait_fds(pid_t pid, int n, int timeout_ms)
{
	uint64_t end = dmn_ms() + (uint64_t)timeout_ms;
	int have;

	while ((have = dmn_fd_count(pid)) != n && dmn_ms() < end)
		dmn_sleep_ms(5);
	return have;
}

FIXTURE(d)
{
	char *dir;
	char pack[512];
	struct dmn m;
};

FIXTURE_SETUP(d)
{
	self->dir = dmn_tmpdir();
	ASSERT_NE(NULL, self->dir);
	snprintf(self->pack, sizeof(self->pack), "%s/tiny.moem", self->dir);
	ASSERT_EQ(0, dmn_make_pack(self->dir, self->pack, 2, 16, 4, 128, 128))
	TH_LOG("%s", moem_last_error());
	self->m.pid = 0;
}

FIXTURE_TEARDOWN(d)
{
	if (self->m.pid > 0) {
		if (_metadata->passed == 0)
			dmn_dump_log(&self->m);
		dmn_stop_hard(&self->m);
	}
	dmn_rm_rf(self->dir);
	free(self->dir);
}

/* Start with the common test settings plus extra (NULL-terminated). */
static int start(FIXTURE_DATA(d) * self, const char *const *extra)
{
	const char *args[40] = {"--pack",      self->pack, "--backend",	   "cpu",
				"--threads",   "1",	   "--hbm",	   "30%",
				"--dram",      "60%",	   "--precisions", "bf16,q4",
				"--log-level", "debug"};
	int n = 14;

	for (int i = 0; extra && extra[i] && n < 38; i++)
		args[n++] = extra[i];
	args[n] = NULL;
	return dmn_start_argv(&self->m, self->dir, args);
}

#define START_READY(...)                                                     \
	do {                                                                 \
		const char *x_[] = {__VA_ARGS__};                            \
		ASSERT_EQ(0, start(self, x_));                               \
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

TEST_F(d, start_stop)
{
	struct json_object *r, *cmds;
	struct moem_pack *p;
	struct moem_pack_id id;
	char hex[33];

	START_READY("--pool", "auto", "--hotness", "engine", NULL);
	ASSERT_EQ(0, moem_pack_open(self->pack, &p));
	moem_pack_get_id(p, &id);
	moem_pack_close(p);
	ASSERT_EQ(0, dmn_call(&self->m, "hello", NULL, &r));
	EXPECT_EQ(1u, dmn_u64(r, "protocol_major"));
	EXPECT_STREQ(moem_pack_id_str(&id, hex), dmn_str(r, "pack_id"));
	EXPECT_EQ((uint64_t)self->m.pid, dmn_u64(r, "pid"));
	cmds = dmn_get(r, "commands");
	ASSERT_NE(NULL, cmds);
	EXPECT_GE(json_object_array_length(cmds), 9u);
	json_object_put(r);

	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_STREQ("ready", dmn_str(r, "daemon.state"));
	EXPECT_STREQ("cpu", dmn_str(r, "backend.name"));
	EXPECT_NE(0, strlen(dmn_str(r, "pool.provider")));
	EXPECT_NE(0, strlen(dmn_str(r, "pool.why")));
	EXPECT_GT(dmn_u64(r, "tiers.hbm_budget"), 0u);
	EXPECT_EQ(dmn_u64(r, "tiers.hbm_budget"), dmn_u64(r, "budgets.hbm_bytes"));
	EXPECT_GT(dmn_u64(r, "tiers.dram_ready"), 0u); /* warm-up staged something */
	{
		/* the DRAM tier per NUMA node adds up to the tier (one node here) */
		struct json_object *nodes = dmn_get(r, "tiers.dram_nodes");
		uint64_t used = 0;

		ASSERT_NE(NULL, nodes);
		ASSERT_GE(json_object_array_length(nodes), 1u);
		for (size_t i = 0; i < json_object_array_length(nodes); i++)
			used += dmn_u64(json_object_array_get_idx(nodes, i), "used");
		EXPECT_EQ(dmn_u64(r, "tiers.dram_used"), used);
		EXPECT_EQ(0u, dmn_u64(r, "tiers.dram_node_fallback"));
	}
	EXPECT_STREQ("none", dmn_str(r, "policies.route"));
	EXPECT_EQ(0, strncmp(dmn_str(r, "policies.hotness"), "engine", 6));
	json_object_put(r);
	EXPECT_TRUE(dmn_log_has(&self->m, "pool:"));
	EXPECT_TRUE(dmn_log_has(&self->m, "ready after"));

	shutdown_ok(_metadata, &self->m);
	EXPECT_NE(0, access(self->m.sock, F_OK)); /* the socket is removed */
}

TEST_F(d, protocol_round_trips)
{
	struct json_object *r;
	char trace[600];
	struct moem_trace_reader *tr;
	char digest[65];

	char tdir[600], wdir[600];

	snprintf(tdir, sizeof(tdir), "%s/traces", self->dir);
	snprintf(wdir, sizeof(wdir), "%s/inputs", self->dir);
	ASSERT_EQ(0, mkdir(tdir, 0755));
	ASSERT_EQ(0, mkdir(wdir, 0755));
	START_READY("--pool", "thp", "--trace-dir", tdir, "--workload-dir", wdir, NULL);
	ASSERT_EQ(0, dmn_call(&self->m, "get", NULL, &r));
	EXPECT_EQ(1000u, dmn_u64(r, "knobs.hi_precision_permille"));
	EXPECT_STREQ("none", dmn_str(r, "knobs.reroute"));
	json_object_put(r);

	ASSERT_EQ(0, dmn_call(&self->m, "set", dmn_args("knob", "hbm_bytes", "value", "600K", NULL),
			      &r));
	EXPECT_EQ(614400u, dmn_u64(r, "value"));
	EXPECT_STREQ("now", dmn_str(r, "applied"));
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "get", dmn_args("knob", "hbm_bytes", NULL), &r));
	EXPECT_EQ(614400u, dmn_u64(r, "value"));
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_EQ(614400u, dmn_u64(r, "tiers.hbm_budget")); /* idle: applied at once */
	json_object_put(r);
	/* A percentage, as on the command line: of the served expert bytes
	 * (here bf16 + q4); 100% is the whole model, as is 0 (no limit). */
	{
		uint64_t bf16, q4, whole, want;

		ASSERT_EQ(0, moem_engine_pack_bytes(self->pack, MOEM_PREC_BF16, &bf16));
		ASSERT_EQ(0, moem_engine_pack_bytes(self->pack, MOEM_PREC_Q4, &q4));
		whole = bf16 + q4;
		ASSERT_EQ(0, moem_parse_size("45%", &whole, &want));
		ASSERT_EQ(0, dmn_call(&self->m, "set",
				      dmn_args("knob", "hbm_bytes", "value", "45%", NULL), &r))
		TH_LOG("%s", moem_last_error());
		EXPECT_EQ(want, dmn_u64(r, "value"));
		json_object_put(r);
		ASSERT_EQ(0, dmn_call(&self->m, "set",
				      dmn_args("knob", "hbm_bytes", "value", "0", NULL), &r));
		json_object_put(r);
		ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
		EXPECT_EQ(whole, dmn_u64(r, "tiers.hbm_budget"));
		json_object_put(r);
		ASSERT_EQ(0, dmn_call(&self->m, "set",
				      dmn_args("knob", "hbm_bytes", "value", "600K", NULL), &r));
		json_object_put(r);
	}
	ASSERT_EQ(0, dmn_call(&self->m, "set",
			      dmn_args("knob", "prefetch_depth", "value", "3", NULL), &r));
	json_object_put(r);
	ASSERT_EQ(0,
		  dmn_call(&self->m, "set", dmn_args("knob", "reroute", "value", "oea", NULL), &r));
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_EQ(0, strncmp(dmn_str(r, "policies.route"), "oea", 3));
	EXPECT_EQ(3u, dmn_u64(r, "budgets.prefetch_depth"));
	json_object_put(r);

	/* Runs: stats and a digest; the same workload twice, the same digest. */
	ASSERT_EQ(0, dmn_call(&self->m, "run", dmn_run_args("steps", "6", "batch", "3", NULL), &r));
	EXPECT_EQ(6u, dmn_u64(r, "steps"));
	EXPECT_EQ(18u, dmn_u64(r, "tokens"));
	EXPECT_EQ(64u, strlen(dmn_str(r, "digest")));
	EXPECT_GT(dmn_u64(r, "hits") + dmn_u64(r, "misses"), 0u);
	snprintf(digest, sizeof(digest), "%s", dmn_str(r, "digest"));
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "run", dmn_run_args("steps", "6", "batch", "3", NULL), &r));
	EXPECT_STREQ(digest, dmn_str(r, "digest"));
	EXPECT_EQ(2u, dmn_u64(r, "run_id"));
	json_object_put(r);

	/* Trace on: the next run writes it; off: the next does not. */
	snprintf(trace, sizeof(trace), "%s/run.trace", tdir);
	{
		struct json_object *a = json_object_new_object();

		json_object_object_add(a, "on", json_object_new_boolean(1));
		json_object_object_add(a, "name", json_object_new_string("run.trace"));
		ASSERT_EQ(0, dmn_call(&self->m, "trace", a, &r));
		json_object_put(r);
	}
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_STREQ(trace, dmn_str(r, "trace.path"));
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "run", dmn_run_args("steps", "4", "batch", "2", NULL), &r));
	snprintf(digest, sizeof(digest), "%s", dmn_str(r, "digest"));
	json_object_put(r);
	ASSERT_EQ(0, moem_trace_open(trace, &tr)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(2u, moem_trace_reader_info(tr)->n_layers);
	moem_trace_close(tr);

	/* The other two workload kinds over the socket: the generator's
	 * hidden states from a file, and the routing trace just written,
	 * replayed; both reproduce the synthetic run's outputs. */
	{
		char hid[600], wl[700];

		{
			struct json_object *a = json_object_new_object();

			json_object_object_add(a, "on", json_object_new_boolean(0));
			ASSERT_EQ(0, dmn_call(&self->m, "trace", a, &r));
			json_object_put(r);
		}
		snprintf(hid, sizeof(hid), "%s/h.bin", wdir);
		ASSERT_EQ(0, moem_hidden_write_synth(self->pack, NULL, 0, 2, 4, hid))
		TH_LOG("%s", moem_last_error());
		snprintf(wl, sizeof(wl), "hidden:h.bin");
		ASSERT_EQ(0,
			  dmn_call(&self->m, "run",
				   dmn_run_args("workload", wl, "steps", "4", "batch", "2", NULL),
				   &r))
		TH_LOG("%s", moem_last_error());
		EXPECT_EQ(4u, dmn_u64(r, "steps"));
		EXPECT_STREQ(digest, dmn_str(r, "digest"));
		json_object_put(r);
		{
			char in[700];

			/* The trace moemd wrote, handed back as an input. */
			snprintf(in, sizeof(in), "%s/replay.trace", wdir);
			ASSERT_EQ(0, link(trace, in));
		}
		snprintf(wl, sizeof(wl), "trace:replay.trace");
		ASSERT_EQ(0,
			  dmn_call(&self->m, "run",
				   dmn_run_args("workload", wl, "steps", "4", "batch", "2", NULL),
				   &r))
		TH_LOG("%s", moem_last_error());
		EXPECT_EQ(4u, dmn_u64(r, "steps"));
		EXPECT_STREQ(digest, dmn_str(r, "digest"));
		json_object_put(r);
		unlink(hid);
	}
	ASSERT_EQ(0, unlink(trace));
	{
		struct json_object *a = json_object_new_object();

		json_object_object_add(a, "on", json_object_new_boolean(0));
		ASSERT_EQ(0, dmn_call(&self->m, "trace", a, &r));
		json_object_put(r);
	}
	ASSERT_EQ(0, dmn_call(&self->m, "run", dmn_run_args("steps", "2", NULL), &r));
	json_object_put(r);
	EXPECT_NE(0, access(trace, F_OK));

	/* Staged experts match the pack; stop-run without a run says so. */
	ASSERT_EQ(0, dmn_call(&self->m, "verify", NULL, &r));
	EXPECT_GT(dmn_u64(r, "checked"), 0u);
	EXPECT_EQ(0u, dmn_u64(r, "bad"));
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "stop-run", NULL, &r));
	EXPECT_FALSE(json_object_get_boolean(dmn_get(r, "stopping")));
	json_object_put(r);
	shutdown_ok(_metadata, &self->m);
}

static uint64_t wait_status(struct dmn *m, const char *path, uint64_t want, int timeout_ms);

/* Send raw bytes on one connection and read one response line. */
static int raw_exchange(struct dmn *m, const void *data, size_t len, char **line)
{
	struct moem_ctl *c;
	int ret = dmn_connect(m, 5000, &c);

	*line = NULL;
	if (ret)
		return ret;
	ret = moem_ctl_send_line(c, data, len);
	if (!ret)
		ret = moem_ctl_recv_line(c, 5000, line);
	moem_ctl_close(c);
	return ret;
}

static void expect_refused(struct __test_metadata *_metadata, struct dmn *m, const char *req,
			   const char *needle)
{
	char *line;

	ASSERT_EQ(0, raw_exchange(m, req, strlen(req), &line)) TH_LOG("request %s", req);
	EXPECT_NE(NULL, strstr(line, "\"ok\":false")) TH_LOG("request %s -> %s", req, line);
	if (!strstr(line, needle))
		TH_LOG("request %s -> %s (lacks '%s')", req, line, needle);
	EXPECT_NE(NULL, strstr(line, needle));
	free(line);
}

TEST_F_TIMEOUT(d, bad_input_keeps_serving, 120)
{
	struct json_object *r;
	struct moem_ctl *c, *many[80];
	char *line, *big;
	int fds0, fds1, n_many = 0, refused = 0;

	START_READY("--pool", "thp", "--clients-per-uid", "0", NULL);
	/* Let the engine's own threads and descriptors settle first. */
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	json_object_put(r);
	do {
		fds0 = dmn_fd_count(self->m.pid);
		dmn_sleep_ms(100);
	} while (fds0 != dmn_fd_count(self->m.pid));
	ASSERT_GT(fds0, 0);

	expect_refused(_metadata, &self->m, "garbage", "malformed request");
	expect_refused(_metadata, &self->m, "{\"v\":1,\"id\":1", "malformed request");
	expect_refused(_metadata, &self->m, "[]", "JSON object");
	expect_refused(_metadata, &self->m, "{\"v\":1,\"cmd\":\"status\"}", "\"id\"");
	expect_refused(_metadata, &self->m, "{\"id\":1,\"cmd\":\"status\"}", "\"v\"");
	expect_refused(_metadata, &self->m, "{\"v\":2,\"id\":1,\"cmd\":\"status\"}",
		       "version 2 is not supported");
	expect_refused(_metadata, &self->m, "{\"v\":1,\"id\":1,\"cmd\":\"reboot\"}",
		       "unknown command 'reboot'");
	expect_refused(_metadata, &self->m,
		       "{\"v\":1,\"id\":1,\"cmd\":\"set\",\"knob\":\"hbm\",\"value\":1}",
		       "unknown knob 'hbm'");
	expect_refused(_metadata, &self->m,
		       "{\"v\":1,\"id\":1,\"cmd\":\"set\",\"knob\":\"hbm_bytes\"}",
		       "no \\\"value\\\"");
	expect_refused(
		_metadata, &self->m,
		"{\"v\":1,\"id\":1,\"cmd\":\"set\",\"knob\":\"hbm_bytes\",\"value\":\"2000T\"}",
		"2^50");
	expect_refused(_metadata, &self->m,
		       "{\"v\":1,\"id\":1,\"cmd\":\"set\",\"knob\":\"hbm_bytes\",\"value\":"
		       "18446744073709551615}",
		       "hbm_bytes");
	expect_refused(_metadata, &self->m,
		       "{\"v\":1,\"id\":1,\"cmd\":\"set\",\"knob\":\"hbm_bytes\",\"value\":-5}",
		       "hbm_bytes");
	expect_refused(_metadata, &self->m,
		       "{\"v\":1,\"id\":1,\"cmd\":\"set\",\"knob\":\"hbm_bytes\",\"value\":1e300}",
		       "string or an integer");
	expect_refused(_metadata, &self->m,
		       "{\"v\":1,\"id\":1,\"cmd\":\"set\",\"knob\":\"hbm_bytes\",\"value\":\"10\"}",
		       "below one expert");
	expect_refused(
		_metadata, &self->m,
		"{\"v\":1,\"id\":1,\"cmd\":\"set\",\"knob\":\"dram_bytes\",\"value\":\"1T\"}",
		"above the");
	expect_refused(_metadata, &self->m,
		       "{\"v\":1,\"id\":1,\"cmd\":\"set\",\"knob\":\"hi_precision_permille\","
		       "\"value\":1001}",
		       "0..1000");
	expect_refused(
		_metadata, &self->m,
		"{\"v\":1,\"id\":1,\"cmd\":\"set\",\"knob\":\"reroute\",\"value\":\"fastest\"}",
		"reroute: unknown value 'fastest'");
	expect_refused(_metadata, &self->m,
		       "{\"v\":1,\"id\":1,\"cmd\":\"run\",\"workload\":{\"batch\":1000}}", "batch");
	expect_refused(_metadata, &self->m,
		       "{\"v\":1,\"id\":1,\"cmd\":\"run\",\"workload\":{\"steps\":1099511627777}}",
		       "steps");
	expect_refused(_metadata, &self->m,
		       "{\"v\":1,\"id\":1,\"cmd\":\"run\",\"workload\":{\"steps\":\"lots\"}}",
		       "steps");
	expect_refused(_metadata, &self->m,
		       "{\"v\":1,\"id\":1,\"cmd\":\"run\",\"workload\":{\"colour\":\"red\"}}",
		       "unknown setting 'colour'");
	expect_refused(_metadata, &self->m, "{\"v\":1,\"id\":1,\"cmd\":\"run\",\"workload\":7}",
		       "must be an object");
	expect_refused(_metadata, &self->m,
		       "{\"v\":1,\"id\":1,\"cmd\":\"run\",\"workload\":{\"workload\":\"hidden:/"
		       "nonexistent/h.bin\"}}",
		       "no workload-dir");
	expect_refused(_metadata, &self->m,
		       "{\"v\":1,\"id\":1,\"cmd\":\"trace\",\"on\":true,\"path\":\"rel.trace\"}",
		       "no paths");
	expect_refused(_metadata, &self->m, "{\"v\":1,\"id\":1,\"cmd\":\"trace\"}", "\\\"on\\\"");
	{
		static const char nul[] = "{\"v\":1,\"id\":1,\"cmd\":\"st\0tus\"}";

		ASSERT_EQ(0, raw_exchange(&self->m, nul, sizeof(nul) - 1, &line));
		EXPECT_NE(NULL, strstr(line, "NUL"));
		free(line);
	}

	/* An over-long line: one error, then the connection is closed. */
	big = malloc(200000);
	ASSERT_NE(NULL, big);
	memset(big, 'x', 200000);
	ASSERT_EQ(0, dmn_connect(&self->m, 5000, &c));
	moem_ctl_send_line(c, big, 199999); /* may fail once the daemon closes */
	ASSERT_EQ(0, moem_ctl_recv_line(c, 5000, &line));
	EXPECT_NE(NULL, strstr(line, "longer than 65536"));
	free(line);
	EXPECT_EQ(-ECONNRESET, moem_ctl_recv_line(c, 5000, &line));
	moem_ctl_close(c);
	free(big);

	/* More clients than the daemon takes: the extra ones are told so. */
	EXPECT_EQ(fds0, wait_fds(self->m.pid, fds0, 5000));
	for (n_many = 0; n_many < 80; n_many++)
		ASSERT_EQ(0, moem_ctl_connect(self->m.sock, &many[n_many]));
	for (int i = 0; i < n_many; i++) {
		struct json_object *h;

		if (i < MOEMD_TEST_MAX_CLIENTS) {
			EXPECT_EQ(0, moem_ctl_call(many[i], "hello", NULL, 5000, &h))
			TH_LOG("client %d: %s", i, moem_last_error());
			json_object_put(h);
			continue;
		}
		/* Accepted in arrival order: these get one line and EOF. */
		ASSERT_EQ(0, moem_ctl_recv_line(many[i], 5000, &line));
		EXPECT_NE(NULL, strstr(line, "too many")) TH_LOG("client %d: %s", i, line);
		refused += strstr(line, "too many") != NULL;
		free(line);
	}
	EXPECT_EQ(80 - MOEMD_TEST_MAX_CLIENTS, refused);
	for (int i = 0; i < n_many; i++)
		moem_ctl_close(many[i]);
	EXPECT_EQ(fds0, wait_fds(self->m.pid, fds0, 5000)); /* their slots are free again */

	/* A client that asks for a run and leaves before the answer. */
	ASSERT_EQ(0, dmn_connect(&self->m, 5000, &c));
	{
		int64_t id;

		ASSERT_EQ(0, moem_ctl_send(c, "run", dmn_run_args("steps", "20", NULL), &id));
	}
	moem_ctl_close(c);

	/* Still serving, every descriptor given back once the run is over. */
	EXPECT_EQ(1u, wait_status(&self->m, "daemon.runs", 1, 30000));
	fds1 = wait_fds(self->m.pid, fds0, 5000);
	EXPECT_EQ(fds0, fds1);
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_GE(dmn_u64(r, "daemon.bad_requests"), 6u);
	EXPECT_EQ(1u, dmn_u64(r, "daemon.runs"));
	EXPECT_EQ(0u, dmn_u64(r, "daemon.runs_failed")); /* bad ones never started */
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "run", dmn_run_args("steps", "3", NULL), &r));
	EXPECT_EQ(3u, dmn_u64(r, "steps"));
	json_object_put(r);
	shutdown_ok(_metadata, &self->m);
}

/* Wait for status's path to equal want (budget changes during a run). */
static uint64_t wait_status(struct dmn *m, const char *path, uint64_t want, int timeout_ms)
{
	uint64_t end = dmn_ms() + (uint64_t)timeout_ms, v = UINT64_MAX;

	while (dmn_ms() < end) {
		struct json_object *r;

		if (dmn_call(m, "status", NULL, &r) == 0)
			v = dmn_u64(r, path);
		json_object_put(r);
		if (v == want)
			break;
		dmn_sleep_ms(2);
	}
	return v;
}

TEST_F_TIMEOUT(d, budgets_change_during_a_run, 180)
{
	static const char *const hbm[] = {"400K", "800K", "300K", "1M"};
	static const char *const dram[] = {"1M", "2M", "700K", "2M"};
	struct json_object *r;
	struct moem_ctl *c;
	char digest[65], steps[32];
	uint64_t want;
	int64_t id;

	START_READY("--pool", "thp", NULL);
	/* A long run; budgets change while it goes; then it is stopped. */
	ASSERT_EQ(0, dmn_connect(&self->m, 5000, &c));
	ASSERT_EQ(0, moem_ctl_send(c, "run", dmn_run_args("steps", "10000000", "batch", "2", NULL),
				   &id));
	for (int i = 0; i < 1000; i++) {
		uint64_t done = 0;

		if (dmn_call(&self->m, "status", NULL, &r) == 0)
			done = dmn_u64(r, "run.steps_done");
		json_object_put(r);
		if (done && done != UINT64_MAX)
			break;
		dmn_sleep_ms(5);
	}
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(hbm); i++) {
		ASSERT_EQ(0, dmn_call(&self->m, "set",
				      dmn_args("knob", "hbm_bytes", "value", hbm[i], NULL), &r));
		json_object_put(r);
		ASSERT_EQ(0, dmn_call(&self->m, "set",
				      dmn_args("knob", "dram_bytes", "value", dram[i], NULL), &r));
		json_object_put(r);
		ASSERT_EQ(0, moem_parse_size(hbm[i], NULL, &want));
		EXPECT_EQ(want, wait_status(&self->m, "tiers.hbm_budget", want, 5000));
		ASSERT_EQ(0, moem_parse_size(dram[i], NULL, &want));
		EXPECT_EQ(want, wait_status(&self->m, "tiers.dram_budget", want, 5000));
		ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
		EXPECT_TRUE(json_object_get_boolean(dmn_get(r, "run.active")));
		EXPECT_EQ(want, dmn_u64(r, "budgets.dram_bytes"));
		json_object_put(r);
		/* Some steps run under each budget. */
		{
			uint64_t s0, s;

			ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
			s0 = s = dmn_u64(r, "run.steps_done");
			json_object_put(r);
			for (uint64_t end = dmn_ms() + 30000; s < s0 + 3 && dmn_ms() < end;
			     dmn_sleep_ms(2)) {
				ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
				s = dmn_u64(r, "run.steps_done");
				json_object_put(r);
			}
		}
	}
	ASSERT_EQ(0, dmn_call(&self->m, "stop-run", NULL, &r));
	EXPECT_TRUE(json_object_get_boolean(dmn_get(r, "stopping")));
	json_object_put(r);
	ASSERT_EQ(0, moem_ctl_wait(c, id, 60000, &r)) TH_LOG("%s", moem_last_error());
	moem_ctl_close(c);
	EXPECT_TRUE(json_object_get_boolean(dmn_get(r, "stopped")));
	EXPECT_GT(dmn_u64(r, "steps"), 0u);
	snprintf(digest, sizeof(digest), "%s", dmn_str(r, "digest"));
	snprintf(steps, sizeof(steps), "%llu", (unsigned long long)dmn_u64(r, "steps"));
	json_object_put(r);
	/* Every step ran, and budgets are lossless: the same steps with the
	 * budgets left alone give the same outputs. */
	ASSERT_EQ(0,
		  dmn_call(&self->m, "run", dmn_run_args("steps", steps, "batch", "2", NULL), &r));
	EXPECT_STREQ(digest, dmn_str(r, "digest"));
	json_object_put(r);
	shutdown_ok(_metadata, &self->m);
}

TEST_F_TIMEOUT(d, sigterm_drains, 60)
{
	struct json_object *r;
	struct moem_ctl *c;
	uint64_t t0, ms;
	int64_t id;

	START_READY("--pool", "thp", NULL);
	ASSERT_EQ(0, dmn_connect(&self->m, 5000, &c));
	ASSERT_EQ(0, moem_ctl_send(c, "run", dmn_run_args("steps", "10000000", NULL), &id));
	/* Some steps done, so that the result shows the run was cut short. */
	for (int i = 0; i < 1000; i++) {
		uint64_t done = 0;

		if (dmn_call(&self->m, "status", NULL, &r) == 0)
			done = dmn_u64(r, "run.steps_done");
		json_object_put(r);
		if (done && done != UINT64_MAX)
			break;
		dmn_sleep_ms(5);
	}
	t0 = dmn_ms();
	dmn_kill(&self->m, SIGTERM);
	/* The run's client gets its (stopped) result before the exit. */
	ASSERT_EQ(0, moem_ctl_wait(c, id, 10000, &r)) TH_LOG("%s", moem_last_error());
	EXPECT_TRUE(json_object_get_boolean(dmn_get(r, "stopped")));
	EXPECT_GT(dmn_u64(r, "steps"), 0u);
	json_object_put(r);
	moem_ctl_close(c);
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	ms = dmn_ms() - t0;
	TH_LOG("SIGTERM to exit: %llu ms", (unsigned long long)ms);
	EXPECT_LT(ms, 10000u);
	EXPECT_EQ(0, dmn_exit_code(&self->m));
	EXPECT_TRUE(dmn_log_has(&self->m, "stopping: SIGTERM"));
	EXPECT_NE(0, access(self->m.sock, F_OK));
}

static void write_conf(const char *path, const char *body)
{
	FILE *f = fopen(path, "w");

	if (f) {
		fputs(body, f);
		fclose(f);
	}
}

TEST_F(d, sighup_reloads)
{
	char conf[600], body[1024];
	struct json_object *r;
	uint64_t hbm0, hbm1, bf16, q4, total, want;

	snprintf(conf, sizeof(conf), "%s/moemd.conf", self->dir);
	snprintf(body, sizeof(body),
		 "# test config\npack = %s\nbackend = cpu\nthreads = 1\npool = thp\nhbm = 30%%\n"
		 "dram = 60%%\nprecisions = bf16,q4\nsteps = 5\ncpu-gbps = 1000\n",
		 self->pack);
	write_conf(conf, body);
	{
		const char *args[] = {"--config", conf, NULL};

		ASSERT_EQ(0, dmn_start_argv(&self->m, self->dir, args));
	}
	ASSERT_EQ(0, dmn_wait_ready(&self->m, 30000));
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	hbm0 = dmn_u64(r, "tiers.hbm_budget");
	json_object_put(r);

	/* Budgets, routing and run defaults change live; evict needs a restart. */
	snprintf(body, sizeof(body),
		 "pack = %s\nbackend = cpu\nthreads = 1\npool = thp\nhbm = 50%%\n"
		 "dram = 60%%\nprecisions = bf16,q4\nsteps = 7\nroute = lynx\nevict = lru2\n"
		 "cpu-gbps = 1000\nexec = hybrid\ncpu-moe-layers = 1\n",
		 self->pack);
	write_conf(conf, body);
	dmn_kill(&self->m, SIGHUP);
	ASSERT_EQ(0, moem_engine_pack_bytes(self->pack, MOEM_PREC_BF16, &bf16));
	ASSERT_EQ(0, moem_engine_pack_bytes(self->pack, MOEM_PREC_Q4, &q4));
	total = bf16 + q4;
	ASSERT_EQ(0, moem_parse_size("50%", &total, &want));
	hbm1 = wait_status(&self->m, "tiers.hbm_budget", want, 5000);
	EXPECT_EQ(want, hbm1);
	EXPECT_GT(hbm1, hbm0);
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_EQ(0, strncmp(dmn_str(r, "policies.route"), "lynx", 4));
	EXPECT_STREQ("lru", dmn_str(r, "policies.evict"));
	/* hybrid execution's switches are live too (the same reload did them) */
	EXPECT_STREQ("hybrid", dmn_str(r, "policies.exec"));
	EXPECT_EQ(1u, dmn_u64(r, "policies.cpu_moe_layers"));
	json_object_put(r);
	EXPECT_TRUE(dmn_log_has(&self->m, "'evict' changed"));
	ASSERT_EQ(0, dmn_call(&self->m, "run", NULL, &r));
	EXPECT_EQ(7u, dmn_u64(r, "steps")); /* the new default */
	json_object_put(r);

	/* A broken file changes nothing and the daemon keeps serving. */
	write_conf(conf, "pack = /nonexistent.moem\nhbm = lots\n");
	dmn_kill(&self->m, SIGHUP);
	for (int i = 0; i < 500 && !dmn_log_has(&self->m, "failed: nothing changed"); i++)
		dmn_sleep_ms(10);
	EXPECT_TRUE(dmn_log_has(&self->m, "failed: nothing changed"));
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_EQ(hbm1, dmn_u64(r, "tiers.hbm_budget"));
	json_object_put(r);
	shutdown_ok(_metadata, &self->m);
}

/*
 * --place rules in the config file and on the command line: the flags'
 * replace the file's, and status shows the rules in force.
 */
TEST_F(d, place_rules)
{
	char conf[600], body[1024];
	struct json_object *r;

	snprintf(conf, sizeof(conf), "%s/moemd.conf", self->dir);
	snprintf(body, sizeof(body),
		 "pack = %s\nbackend = cpu\nthreads = 1\npool = thp\nhbm = 30%%\n"
		 "place = layers=0:cpu\nplace = layers=1,experts=0-3:gpu\n",
		 self->pack);
	write_conf(conf, body);
	{
		const char *args[] = {"--config", conf, NULL};

		ASSERT_EQ(0, dmn_start_argv(&self->m, self->dir, args));
	}
	ASSERT_EQ(0, dmn_wait_ready(&self->m, 30000));
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_STREQ("layers=0:cpu; layers=1,experts=0-3:gpu", dmn_str(r, "policies.place"));
	EXPECT_EQ(16u, dmn_u64(r, "policies.cpu_placed"));
	/* a CPU executor, measured */
	EXPECT_GT(json_object_get_double(dmn_get(r, "policies.cpu_gbps")), 0);
	json_object_put(r);
	shutdown_ok(_metadata, &self->m);
	{
		const char *args[] = {"--config",
				      conf,
				      "--place",
				      "layers=1,experts=2:cpu",
				      "--cpu-gbps",
				      "9",
				      "--cpu-token-ns",
				      "700",
				      "--cpu-call-ns",
				      "4321",
				      NULL};

		ASSERT_EQ(0, dmn_start_argv(&self->m, self->dir, args));
	}
	ASSERT_EQ(0, dmn_wait_ready(&self->m, 30000));
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_STREQ("layers=1,experts=2:cpu", dmn_str(r, "policies.place"));
	EXPECT_EQ(1u, dmn_u64(r, "policies.cpu_placed"));
	/* the CPU's figures as given */
	EXPECT_STREQ("given", dmn_str(r, "policies.cpu_from"));
	EXPECT_EQ(700u, dmn_u64(r, "policies.cpu_token_ns"));
	EXPECT_EQ(4321u, dmn_u64(r, "policies.cpu_call_ns"));
	json_object_put(r);
	shutdown_ok(_metadata, &self->m);
}

/*
 * Hybrid execution's switches live on the socket, as the budget knobs:
 * get and set exec and cpu_moe_layers; status shows experts computed on
 * the CPU per step and their time; a change that cannot apply is refused
 * with a message and the daemon serves on as it was.
 */
TEST_F(d, hybrid_switches_live)
{
	struct json_object *r;

	START_READY("--pool", "thp", "--cpu-gbps", "1000", NULL);
	ASSERT_EQ(0, dmn_call(&self->m, "get", dmn_args("knob", "exec", NULL), &r));
	EXPECT_STREQ("gpu", dmn_str(r, "value"));
	json_object_put(r);
	ASSERT_EQ(0,
		  dmn_call(&self->m, "set", dmn_args("knob", "exec", "value", "hybrid", NULL), &r))
	TH_LOG("%s", moem_last_error());
	EXPECT_STREQ("hybrid", dmn_str(r, "value"));
	EXPECT_STREQ("now", dmn_str(r, "applied"));
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "run", dmn_run_args("steps", "6", "batch", "4", NULL), &r))
	TH_LOG("%s", moem_last_error());
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_STREQ("hybrid", dmn_str(r, "policies.exec"));
	EXPECT_STREQ("given", dmn_str(r, "policies.cpu_from"));
	EXPECT_GT(dmn_u64(r, "counters.cpu_experts"), 0u);
	EXPECT_GT(json_object_get_double(dmn_get(r, "counters.cpu_experts_per_step")), 0);
	EXPECT_GT(json_object_get_double(dmn_get(r, "counters.cpu_ns_per_step")), 0);
	EXPECT_NE(NULL, dmn_get(r, "counters.cpu_experts_last_step"));
	/* where the engine thread's time went, within the steps' */
	EXPECT_GT(dmn_u64(r, "counters.phase_ns.cpu"), 0u);
	EXPECT_GE(dmn_u64(r, "counters.phase_ns.cpu"), dmn_u64(r, "counters.cpu_ns"));
	EXPECT_GT(dmn_u64(r, "counters.step_ns"), dmn_u64(r, "counters.phase_ns.route"));
	json_object_put(r);

	/* refused, with the reason; nothing changes */
	EXPECT_EQ(-EINVAL, dmn_call(&self->m, "set",
				    dmn_args("knob", "cpu_moe_layers", "value", "3", NULL), &r));
	EXPECT_NE(NULL, strstr(moem_last_error(), "the model has 2 MoE layers"))
	TH_LOG("%s", moem_last_error());
	EXPECT_EQ(-EINVAL,
		  dmn_call(&self->m, "set", dmn_args("knob", "exec", "value", "npu", NULL), &r));
	EXPECT_NE(NULL, strstr(moem_last_error(), "unknown value 'npu' (gpu, hybrid)"))
	TH_LOG("%s", moem_last_error());
	EXPECT_EQ(-EINVAL, dmn_call(&self->m, "set",
				    dmn_args("knob", "cpu_moe_layers", "value", "-1", NULL), &r));
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_STREQ("hybrid", dmn_str(r, "policies.exec"));
	EXPECT_EQ(0u, dmn_u64(r, "policies.cpu_moe_layers"));
	json_object_put(r);

	/* the first MoE layer on the CPU, then everything back on the device */
	ASSERT_EQ(0, dmn_call(&self->m, "set",
			      dmn_args("knob", "cpu_moe_layers", "value", "1", NULL), &r))
	TH_LOG("%s", moem_last_error());
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "get", NULL, &r));
	EXPECT_EQ(1u, dmn_u64(r, "knobs.cpu_moe_layers"));
	EXPECT_STREQ("hybrid", dmn_str(r, "knobs.exec"));
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_EQ(16u, dmn_u64(r, "policies.cpu_placed"));
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "set", dmn_args("knob", "exec", "value", "gpu", NULL), &r));
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "set",
			      dmn_args("knob", "cpu_moe_layers", "value", "0", NULL), &r));
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "run", dmn_run_args("steps", "3", "batch", "4", NULL), &r))
	TH_LOG("%s", moem_last_error());
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_EQ(0u, dmn_u64(r, "counters.cpu_experts_last_step"));
	EXPECT_STREQ("gpu", dmn_str(r, "policies.exec"));
	json_object_put(r);
	shutdown_ok(_metadata, &self->m);
}

TEST_F(d, configuration_errors)
{
	char conf[600];
	struct dmn other;

	/* Usage errors: 64; bad settings: 78; the message says which. */
	ASSERT_EQ(0, dmn_start(&self->m, self->dir, "--pack", self->pack, "--frobnicate", NULL));
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	EXPECT_EQ(64, dmn_exit_code(&self->m));
	ASSERT_EQ(0, dmn_start(&self->m, self->dir, "--pack", self->pack, "--batch", "0", NULL));
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	EXPECT_EQ(64, dmn_exit_code(&self->m));
	EXPECT_TRUE(dmn_log_has(&self->m, "batch '0'"));
	ASSERT_EQ(0, dmn_start(&self->m, self->dir, "--pack", self->pack, "--place",
			       "layers=0:nowhere", NULL));
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	EXPECT_EQ(64, dmn_exit_code(&self->m));
	EXPECT_TRUE(dmn_log_has(&self->m, "'nowhere' is not cpu, gpu or auto"));
	/* a client directory that is a file: refused when read, not at its first use */
	ASSERT_EQ(0, dmn_start(&self->m, self->dir, "--pack", self->pack, "--workload-dir",
			       self->pack, NULL));
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	EXPECT_EQ(64, dmn_exit_code(&self->m));
	EXPECT_TRUE(dmn_log_has(&self->m, "not a directory"));
	/* checked against the pack's 2 MoE layers when the engine opens */
	ASSERT_EQ(0, dmn_start(&self->m, self->dir, "--pack", self->pack, "--backend", "cpu",
			       "--place", "layers=2:cpu", NULL));
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 30000));
	EXPECT_NE(0, dmn_exit_code(&self->m));
	EXPECT_TRUE(dmn_log_has(&self->m, "MoE layer 2 is beyond the model's 2"));
	snprintf(conf, sizeof(conf), "%s/bad.conf", self->dir);
	write_conf(conf, "hbm = 12G\nsparkle = yes\n");
	ASSERT_EQ(0, dmn_start(&self->m, self->dir, "--pack", self->pack, "--config", conf, NULL));
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	EXPECT_EQ(78, dmn_exit_code(&self->m));
	EXPECT_TRUE(dmn_log_has(&self->m, "unknown setting 'sparkle'"));
	EXPECT_TRUE(dmn_log_has(&self->m, "line 2"));
	ASSERT_EQ(0, dmn_start(&self->m, self->dir, "--pack", "/nonexistent/x.moem", NULL));
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	EXPECT_EQ(78, dmn_exit_code(&self->m));
	EXPECT_TRUE(dmn_log_has(&self->m, "/nonexistent/x.moem"));

	/* One daemon per socket: a second one refuses, the first serves on. */
	START_READY("--pool", "thp", NULL);
	ASSERT_EQ(0, dmn_start(&other, self->dir, "--pack", self->pack, "--backend", "cpu", NULL));
	ASSERT_EQ(0, dmn_wait_exit(&other, 10000));
	EXPECT_EQ(1, dmn_exit_code(&other));
	EXPECT_TRUE(dmn_log_has(&other, "another moemd serves"));
	ASSERT_EQ(0, dmn_wait_ready(&self->m, 5000));
	shutdown_ok(_metadata, &self->m);
}

/*
 * A daemon that may not lock memory (another uid, RLIMIT_MEMLOCK below the
 * pool) serves, and says loudly that its pool is not pinned: in its log
 * and in status (the bytes the kernel says are locked: none). With
 * --require-pinned it refuses to start (78).
 */
TEST_F_TIMEOUT(d, not_pinned_as_non_root, 90)
{
	const uid_t nobody = 65534;
	char run[600];
	struct json_object *r;

	if (geteuid())
		SKIP(return, "needs root (to start moemd as another uid)");
	snprintf(run, sizeof(run), "%s/run", self->dir);
	ASSERT_EQ(0, mkdir(run, 0755));
	ASSERT_EQ(0, chown(run, nobody, nobody));
	ASSERT_EQ(0, chmod(self->dir, 0755));
	{
		const char *args[] = {"--pack",	      self->pack, "--backend", "cpu",	 "--pool",
				      "thp",	      "--hbm",	  "30%",       "--dram", "60%",
				      "--precisions", "bf16,q4",  NULL};

		ASSERT_EQ(0, dmn_start_argv_as(&self->m, run, nobody, 64 << 10, args));
	}
	if (dmn_wait_ready(&self->m, 30000)) {
		dmn_dump_log(&self->m);
		ASSERT_TRUE(0);
	}
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_FALSE(json_object_get_boolean(dmn_get(r, "pool.pinned")));
	EXPECT_EQ(0u, dmn_u64(r, "pool.pinned_bytes"));
	EXPECT_NE(NULL, strstr(dmn_str(r, "pool.why"), "NOT PINNED"))
	TH_LOG("%s", dmn_str(r, "pool.why"));
	EXPECT_EQ(NULL, strstr(dmn_str(r, "pool.why"), "using THP + mlock"));
	json_object_put(r);
	EXPECT_TRUE(dmn_log_has(&self->m, "is NOT PINNED"));
	/* Runs still work on it. */
	ASSERT_EQ(0, dmn_call(&self->m, "run", dmn_run_args("steps", "2", NULL), &r));
	json_object_put(r);
	shutdown_ok(_metadata, &self->m);
	{
		const char *args[] = {"--pack",		  self->pack, "--backend",    "cpu",
				      "--pool",		  "thp",      "--hbm",	      "30%",
				      "--dram",		  "60%",      "--precisions", "bf16,q4",
				      "--require-pinned", NULL};

		ASSERT_EQ(0, dmn_start_argv_as(&self->m, run, nobody, 64 << 10, args));
	}
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 30000));
	EXPECT_EQ(78, dmn_exit_code(&self->m));
	EXPECT_TRUE(dmn_log_has(&self->m, "require-pinned refuses it"));
}

/* Everything the daemon told systemd on the NOTIFY_SOCKET, appended. */
static void notify_read(int fd, char *buf, size_t len)
{
	size_t have = strlen(buf);

	for (;;) {
		ssize_t n = recv(fd, buf + have, len - 1 - have, MSG_DONTWAIT);

		if (n <= 0 || have + (size_t)n >= len - 1)
			break;
		have += (size_t)n;
		buf[have++] = '\n';
		buf[have] = 0;
	}
}

TEST_F_TIMEOUT(d, systemd_notify_and_watchdog, 60)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char path[300], msgs[8192] = "";
	struct json_object *r;
	int fd, watchdogs = 0;
	const char *p;

	snprintf(path, sizeof(path), "%s/notify", self->dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, bind(fd, (struct sockaddr *)&sa, sizeof(sa)));
	setenv("NOTIFY_SOCKET", path, 1);
	setenv("WATCHDOG_USEC", "200000", 1);
	{
		const char *x[] = {"--pool", "thp", NULL};

		ASSERT_EQ(0, start(self, x));
	}
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	ASSERT_EQ(0, dmn_wait_ready(&self->m, 30000));
	/* Serving: READY=1 once, then WATCHDOG=1 about every 100 ms: wait
	 * for three of them (a generous deadline for a busy machine). */
	for (uint64_t end = dmn_ms() + 20000; watchdogs < 3 && dmn_ms() < end; dmn_sleep_ms(20)) {
		notify_read(fd, msgs, sizeof(msgs));
		watchdogs = 0;
		for (p = msgs; (p = strstr(p, "WATCHDOG=1")); p++)
			watchdogs++;
	}
	EXPECT_NE(NULL, strstr(msgs, "READY=1")) TH_LOG("%s", msgs);
	EXPECT_NE(NULL, strstr(msgs, "STATUS=serving")) TH_LOG("%s", msgs);
	EXPECT_GE(watchdogs, 3) TH_LOG("%s", msgs);
	EXPECT_TRUE(dmn_log_has(&self->m, "systemd watchdog"));
	/* Reload says so; stopping says so. */
	dmn_kill(&self->m, SIGHUP);
	for (uint64_t end = dmn_ms() + 20000; !strstr(msgs, "RELOADING=1") && dmn_ms() < end;
	     dmn_sleep_ms(10))
		notify_read(fd, msgs, sizeof(msgs));
	ASSERT_EQ(0, dmn_call(&self->m, "shutdown", NULL, &r));
	json_object_put(r);
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	EXPECT_EQ(0, dmn_exit_code(&self->m));
	notify_read(fd, msgs, sizeof(msgs));
	EXPECT_NE(NULL, strstr(msgs, "RELOADING=1")) TH_LOG("%s", msgs);
	EXPECT_NE(NULL, strstr(msgs, "STOPPING=1")) TH_LOG("%s", msgs);
	close(fd);
}

/*
 * A sticky device error: the CUDA backend on the kernel emulator's fake
 * libcuda.so.1, told to fault a kernel launch; moemd answers the run with
 * the error and exits 75 for its supervisor.
 */
TEST_F_TIMEOUT(d, fatal_device_error_exits_75, 120)
{
	char emu[512], *old;
	struct json_object *r;
	int ret;

	snprintf(emu, sizeof(emu), "%s/tests/gpu/emu",
		 getenv("MOEM_BUILD") ? getenv("MOEM_BUILD") : "build");
	{
		char lib[600];

		snprintf(lib, sizeof(lib), "%s/libcuda.so.1", emu);
		if (access(lib, R_OK))
			SKIP(return, "the CUDA kernel emulator is not built (%s)", lib);
	}
	old = getenv("LD_LIBRARY_PATH") ? strdup(getenv("LD_LIBRARY_PATH")) : NULL;
	setenv("LD_LIBRARY_PATH", emu, 1);
	setenv("MOEM_EMU_FAULT_LAUNCH", "40", 1);
	{
		const char *x[] = {"--pool", "thp", NULL};
		const char *args[] = {"--pack", self->pack, "--backend", "cuda",	 "--hbm",
				      "30%",	"--dram",   "60%",	 "--precisions", "bf16,q4",
				      x[0],	x[1],	    NULL};

		ret = dmn_start_argv(&self->m, self->dir, args);
	}
	unsetenv("MOEM_EMU_FAULT_LAUNCH");
	if (old)
		setenv("LD_LIBRARY_PATH", old, 1);
	else
		unsetenv("LD_LIBRARY_PATH");
	free(old);
	ASSERT_EQ(0, ret);
	if (dmn_wait_ready(&self->m, 60000)) {
		/* A build without nvcc has no kernels for the emulator to run. */
		if (dmn_log_has(&self->m, "built without CUDA kernels"))
			SKIP(return, "libmoem was built without CUDA kernels (no nvcc)");
		dmn_dump_log(&self->m);
		ASSERT_TRUE(0);
	}
	ret = dmn_call(&self->m, "run", dmn_run_args("steps", "50", NULL), &r);
	EXPECT_NE(0, ret);
	EXPECT_NE(NULL, strstr(dmn_str(r, "error"), "CUDA_ERROR_"))
	TH_LOG("run answered: %s", json_object_to_json_string(r));
	json_object_put(r);
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	EXPECT_EQ(75, dmn_exit_code(&self->m));
	EXPECT_TRUE(dmn_log_has(&self->m, "fatal device error"));
}

TEST_HARNESS_MAIN
