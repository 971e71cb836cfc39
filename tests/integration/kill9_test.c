// SPDX-License-Identifier: GPL-2.0-only
/*
 * kill -9 at random points, on the host: moemd (userspace pool, CPU
 * backend, tracing every run) is killed while starting, staging, idle or
 * in the middle of a run, MOEM_KILL9_ITERS times (default 100), and
 * restarted each time. After every kill: no process still holds the dead
 * daemon's pool, no file is left behind in its directory but the socket,
 * its lock, its log, the pack and complete traces (no half-written
 * trace); after every restart it serves again (ready, a run completes
 * with the same digest every time). On the host each restart is cold (the
 * userspace pool dies with the process); the warm version of this loop
 * runs in the guest with moem.ko. At the end the huge-page counters are
 * back where they started.
 */
#include <dirent.h>

#include <moem/rng.h>
#include <moem/trace.h>

#include "kselftest_harness.h"
#include "daemon_util.h"

static uint64_t meminfo(const char *key)
{
	char line[256];
	uint64_t v = 0;
	FILE *f = fopen("/proc/meminfo", "r");
	size_t n = strlen(key);

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':') {
			v = strtoull(line + n + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

/* Files in dir other than the expected ones; each is logged. */
static int unexpected_files(struct __test_metadata *_metadata, const char *dir)
{
	static const char *const ok[] = {"moemd.sock", "moemd.sock.lock", "moemd.log", "tiny.moem",
					 "run.trace"};
	struct dirent *e;
	int bad = 0;
	DIR *d = opendir(dir);

	if (!d)
		return 1;
	while ((e = readdir(d))) {
		bool known = e->d_name[0] == '.';

		for (size_t i = 0; i < MOEM_ARRAY_SIZE(ok) && !known; i++)
			known = !strcmp(e->d_name, ok[i]);
		if (!known) {
			TH_LOG("left behind: %s/%s", dir, e->d_name);
			bad++;
		}
	}
	closedir(d);
	return bad;
}

/* The process is gone, and with it its pool (a memfd or THP mapping). */
static bool pid_alive(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	return access(path, F_OK) == 0;
}

FIXTURE(k)
{
	char *dir;
	char pack[512];
	struct dmn m;
};

FIXTURE_SETUP(k)
{
	self->dir = dmn_tmpdir();
	ASSERT_NE(NULL, self->dir);
	snprintf(self->pack, sizeof(self->pack), "%s/tiny.moem", self->dir);
	ASSERT_EQ(0, dmn_make_pack(self->dir, self->pack, 2, 16, 4, 128, 128))
	TH_LOG("%s", moem_last_error());
}

FIXTURE_TEARDOWN(k)
{
	if (self->m.pid > 0 && !self->m.reaped)
		dmn_stop_hard(&self->m);
	dmn_rm_rf(self->dir);
	free(self->dir);
}

static int start(FIXTURE_DATA(k) * self, const char *trace)
{
	const char *args[] = {
		"--pack",      self->pack, "--backend", "cpu", "--threads",    "1",
		"--hbm",       "30%",	   "--dram",	"60%", "--precisions", "bf16,q4",
		"--trace-out", trace,	   "--steps",	"40",  "--batch",      "4",
		NULL};

	return dmn_start_argv(&self->m, self->dir, args);
}

TEST_F_TIMEOUT(k, kill9_loop, 900)
{
	const char *env = getenv("MOEM_KILL9_ITERS");
	unsigned int iters = env ? (unsigned int)atoi(env) : 100;
	uint64_t huge0 = meminfo("HugePages_Free"), seed = (uint64_t)time(NULL);
	struct moem_rng rng;
	char trace[600], digest[65] = "";
	unsigned int early = 0, mid_run = 0, idle = 0;
	int fds0 = dmn_fd_count(getpid());
	uint64_t t0 = dmn_ms();

	TH_LOG("%u iterations, seed %llu", iters, (unsigned long long)seed);
	moem_rng_seed(&rng, seed, 0);
	snprintf(trace, sizeof(trace), "%s/run.trace", self->dir);
	for (unsigned int it = 0; it < iters; it++) {
		unsigned int what = (unsigned int)moem_rng_below(&rng, 4);
		unsigned int delay = (unsigned int)moem_rng_below(&rng, 60);
		struct json_object *r = NULL;
		struct moem_ctl *c = NULL;
		pid_t pid;

		ASSERT_EQ(0, start(self, trace));
		pid = self->m.pid;
		if (what == 0) {
			/* During start-up (options, socket, engine open, staging). */
			dmn_sleep_ms(delay / 4);
			early++;
		} else {
			/* It must serve after the previous kill. */
			if (dmn_wait_ready(&self->m, 30000)) {
				dmn_dump_log(&self->m);
				ASSERT_TRUE(0)
				TH_LOG("iteration %u: moemd did not serve again", it);
			}
			if (what == 1) {
				/* A complete run: the same digest every time. */
				ASSERT_EQ(0, dmn_call(&self->m, "run", NULL, &r))
				TH_LOG("iteration %u: %s", it, moem_last_error());
				if (!digest[0])
					snprintf(digest, sizeof(digest), "%s",
						 dmn_str(r, "digest"));
				EXPECT_STREQ(digest, dmn_str(r, "digest"));
				json_object_put(r);
				idle++;
			} else {
				int64_t id;

				/* In the middle of a run (and of its trace). */
				ASSERT_EQ(0, dmn_connect(&self->m, 5000, &c));
				ASSERT_EQ(0, moem_ctl_send(c, "run",
							   dmn_run_args("steps", "100000", NULL),
							   &id));
				dmn_sleep_ms(delay);
				mid_run++;
			}
		}
		dmn_kill(&self->m, SIGKILL);
		ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
		EXPECT_EQ(128 + SIGKILL, dmn_exit_code(&self->m));
		moem_ctl_close(c);
		/* Its memory went with it: nothing holds the dead daemon. */
		EXPECT_FALSE(pid_alive(pid));
		EXPECT_EQ(0, unexpected_files(_metadata, self->dir));
		/* A trace that exists is complete (written whole, then renamed). */
		if (access(trace, F_OK) == 0) {
			struct moem_trace_reader *tr;

			EXPECT_EQ(0, moem_trace_open(trace, &tr)) TH_LOG("%s", moem_last_error());
			moem_trace_close(tr);
		}
		if (!_metadata->passed)
			break;
	}
	/* The last restart serves, then leaves cleanly. */
	{
		struct json_object *r;

		ASSERT_EQ(0, start(self, trace));
		ASSERT_EQ(0, dmn_wait_ready(&self->m, 30000));
		ASSERT_EQ(0, dmn_call(&self->m, "shutdown", NULL, &r));
		json_object_put(r);
		ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
		EXPECT_EQ(0, dmn_exit_code(&self->m));
		EXPECT_NE(0, access(self->m.sock, F_OK));
	}
	TH_LOG("%u kills (%u during start-up, %u after a run, %u mid-run) in %.1f s", iters, early,
	       idle, mid_run, (double)(dmn_ms() - t0) / 1000);
	/* This process did not accumulate connections either. */
	EXPECT_EQ(fds0, dmn_fd_count(getpid()));
	/* Huge pages come back (other users may hold some for a moment). */
	for (int i = 0; i < 100 && meminfo("HugePages_Free") < huge0; i++)
		dmn_sleep_ms(100);
	EXPECT_GE(meminfo("HugePages_Free"), huge0)
	TH_LOG("HugePages_Free %llu, %llu before the loop",
	       (unsigned long long)meminfo("HugePages_Free"), (unsigned long long)huge0);
}

TEST_HARNESS_MAIN
