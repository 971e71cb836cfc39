// SPDX-License-Identifier: GPL-2.0-only
/*
 * kill -9 at random points with moem.ko (in the guest): moemd on a
 * persistent kmod region is killed while starting, staging, idle or in
 * the middle of a run, MOEM_KILL9_ITERS times (default 30 here), and
 * restarted. After every kill the pool's total and free bytes and its
 * region list are exactly what they were with one daemon's region (no
 * chunk leaked, pinned or dropped, no stray region), and every staged
 * expert the region's directory lists matches the pack; after every
 * restart the daemon re-attaches (warm), adopts what was staged and
 * serves a run whose digest is the same every time.
 */
#include <moem/rng.h>

#include "kselftest_harness.h"
#include "guest_util.h"

FIXTURE(k)
{
	char *dir;
	char region[64];
	struct dmn m;
};

FIXTURE_SETUP(k)
{
	if (access("/dev/moem", F_OK))
		SKIP(return, "moem.ko is not loaded (these tests run in the guest)");
	if (access(g_pack(), R_OK))
		SKIP(return, "no test pack at %s", g_pack());
	self->dir = dmn_tmpdir();
	ASSERT_NE(NULL, self->dir);
	ASSERT_EQ(0, g_region_of(g_pack(), self->region));
}

FIXTURE_TEARDOWN(k)
{
	if (self->m.pid > 0) {
		if (_metadata->passed == 0)
			dmn_dump_log(&self->m);
		dmn_stop_hard(&self->m);
	}
	dmn_rm_rf(self->dir);
	free(self->dir);
}

static int start(FIXTURE_DATA(k) * self)
{
	const char *args[] = {"--pack", g_pack(), "--backend",	  "cpu",     "--threads", "1",
			      "--pool", "kmod",	  "--precisions", "bf16,q4", "--hbm",	  "25%",
			      "--dram", "50%",	  "--steps",	  "3",	     "--batch",	  "2",
			      NULL};

	return dmn_start_argv(&self->m, self->dir, args);
}

TEST_F_TIMEOUT(k, kill9_loop_kmod_region, 1800)
{
	const char *env = getenv("MOEM_KILL9_ITERS");
	unsigned int iters = env ? (unsigned int)atoi(env) : 30;
	uint64_t seed = (uint64_t)time(NULL), t0 = dmn_ms();
	unsigned int early = 0, mid = 0, idle = 0;
	struct g_pool base, now;
	struct moem_rng rng;
	char digest[65] = "";
	struct json_object *r;

	moem_rng_seed(&rng, seed, 0);
	TH_LOG("%u iterations, seed %llu", iters, (unsigned long long)seed);
	/* The reference: this pack's region alone, after a clean stop. */
	ASSERT_EQ(0, g_region_destroy(self->region));
	ASSERT_EQ(0, start(self));
	ASSERT_EQ(0, dmn_wait_ready(&self->m, 300000));
	ASSERT_EQ(0, dmn_call(&self->m, "run", NULL, &r));
	snprintf(digest, sizeof(digest), "%s", dmn_str(r, "digest"));
	json_object_put(r);
	dmn_kill(&self->m, SIGTERM);
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	ASSERT_EQ(0, g_pool_read(&base));
	EXPECT_STREQ(self->region, base.names);

	for (unsigned int it = 0; it < iters; it++) {
		unsigned int what = (unsigned int)moem_rng_below(&rng, 4);
		unsigned int delay = (unsigned int)moem_rng_below(&rng, 400);
		uint64_t staged, bad;
		struct moem_ctl *c = NULL;

		ASSERT_EQ(0, start(self));
		if (what == 0) {
			dmn_sleep_ms(delay); /* start-up: attach, adopt, warm-up */
			early++;
		} else {
			if (dmn_wait_ready(&self->m, 300000)) {
				dmn_dump_log(&self->m);
				ASSERT_TRUE(0)
				TH_LOG("iteration %u: moemd did not serve again", it);
			}
			ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
			EXPECT_TRUE(json_object_get_boolean(dmn_get(r, "pool.warm")))
			TH_LOG("iteration %u: not a warm restart", it);
			EXPECT_GT(dmn_u64(r, "pool.adopted"), 0u);
			json_object_put(r);
			if (what == 1) {
				ASSERT_EQ(0, dmn_call(&self->m, "run", NULL, &r));
				EXPECT_STREQ(digest, dmn_str(r, "digest"));
				json_object_put(r);
				idle++;
			} else {
				int64_t id;

				ASSERT_EQ(0, dmn_connect(&self->m, 5000, &c));
				ASSERT_EQ(0, moem_ctl_send(c, "run",
							   dmn_run_args("steps", "100000", NULL),
							   &id));
				dmn_sleep_ms(delay);
				mid++;
			}
		}
		dmn_kill(&self->m, SIGKILL);
		ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
		moem_ctl_close(c);
		/* The pool is exactly as one region leaves it. */
		ASSERT_EQ(0, g_pool_read(&now));
		EXPECT_STREQ(base.names, now.names) TH_LOG("iteration %u", it);
		EXPECT_EQ(base.total, now.total) TH_LOG("iteration %u", it);
		EXPECT_EQ(base.free, now.free) TH_LOG("iteration %u", it);
		/* What the directory says is staged is whole. */
		ASSERT_EQ(0, g_verify_region(self->region, g_pack(), &staged, &bad, false));
		EXPECT_EQ(0u, bad)
		TH_LOG("iteration %u: %llu of %llu staged versions corrupt", it,
		       (unsigned long long)bad, (unsigned long long)staged);
		if (!_metadata->passed)
			break;
	}
	TH_LOG("%u kills (%u during start-up, %u after a run, %u mid-run) in %.1f s", iters, early,
	       idle, mid, (double)(dmn_ms() - t0) / 1000);
	printf("MOEM-RESULT kill -9 loop with moem.ko: %u iterations (%u start-up, %u idle, %u "
	       "mid-run), pool and regions unchanged after each\n",
	       iters, early, idle, mid);
	fflush(stdout);
	/* Serves once more, then goes cleanly. */
	ASSERT_EQ(0, start(self));
	ASSERT_EQ(0, dmn_wait_ready(&self->m, 300000));
	ASSERT_EQ(0, dmn_call(&self->m, "run", NULL, &r));
	EXPECT_STREQ(digest, dmn_str(r, "digest"));
	json_object_put(r);
	dmn_kill(&self->m, SIGTERM);
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	EXPECT_EQ(0, dmn_exit_code(&self->m));
}

TEST_HARNESS_MAIN
