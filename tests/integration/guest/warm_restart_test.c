// SPDX-License-Identifier: GPL-2.0-only
/*
 * Warm restart with moem.ko (in the guest): moemd stages a pack into a
 * persistent region, is killed with SIGKILL in the middle of a run, and
 * the restarted daemon adopts the staged experts instead of reading the
 * pack again (no NVMe bytes), with every adopted blob checked against the
 * pack's checksums from outside the daemon (moem_pack_verify_blob) and
 * by the daemon's own verify. Restart-to-first-step is measured cold
 * (region destroyed, staging from the virtio disk) and warm; the ratio is
 * printed as a MOEM-RESULT line (a measurement, not a pass criterion).
 * A region holding another pack's experts is refused with both pack ids
 * named (exit 78); a corrupted staged byte is found by verify.
 */
#include "kselftest_harness.h"
#include "guest_util.h"

FIXTURE(w)
{
	char *dir;
	char region[64];
	struct dmn m;
};

FIXTURE_SETUP(w)
{
	if (access("/dev/moem", F_OK))
		SKIP(return, "moem.ko is not loaded (these tests run in the guest)");
	if (access(g_pack(), R_OK))
		SKIP(return, "no test pack at %s", g_pack());
	self->dir = dmn_tmpdir();
	ASSERT_NE(NULL, self->dir);
	ASSERT_EQ(0, g_region_of(g_pack(), self->region));
}

FIXTURE_TEARDOWN(w)
{
	if (self->m.pid > 0) {
		if (_metadata->passed == 0)
			dmn_dump_log(&self->m);
		dmn_stop_hard(&self->m);
	}
	dmn_rm_rf(self->dir);
	free(self->dir);
}

#define ARGS(...)                                                                           \
	{                                                                                   \
		"--pack", g_pack(), "--backend", "cpu", "--threads", "1", "--pool", "kmod", \
			"--precisions", "bf16,q4", "--hbm", "25%", "--dram", "100%",        \
			"--log-level", "debug", __VA_ARGS__                                 \
	}

/* One start: exec to first step, and the daemon's own split of it (ms). */
struct start {
	double first, ready, open, fill;
};

static int cmp_start(const void *a, const void *b)
{
	double x = ((const struct start *)a)->first, y = ((const struct start *)b)->first;

	return x < y ? -1 : x > y;
}

TEST_F_TIMEOUT(w, warm_restart_after_kill9, 900)
{
	struct start cold[2] = {{0}}, warm[3] = {{0}};
	uint64_t staged, bad, nvme_cold = 0, adopted = 0;
	struct json_object *r;
	struct moem_ctl *c;
	struct g_pool p0, p1;
	int64_t id;

	/* Cold: no region, everything from the pack on the virtio disk. */
	for (int i = 0; i < 2; i++) {
		const char *args[] = ARGS("--cold", NULL);

		ASSERT_EQ(0, g_start_to_first_step(&self->m, self->dir, args, &cold[i].first))
		TH_LOG("%s", moem_last_error());
		ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
		EXPECT_STREQ("kmod", dmn_str(r, "pool.provider"));
		EXPECT_STREQ(self->region, dmn_str(r, "pool.region"));
		EXPECT_TRUE(json_object_get_boolean(dmn_get(r, "pool.persistent")));
		EXPECT_FALSE(json_object_get_boolean(dmn_get(r, "pool.warm")));
		nvme_cold = dmn_u64(r, "counters.bytes_nvme");
		EXPECT_GT(nvme_cold, 0u);
		cold[i].ready = (double)dmn_u64(r, "daemon.ready_after_ns") / 1e6;
		json_object_put(r);
		if (i == 1)
			break;
		dmn_kill(&self->m, SIGKILL);
		ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	}

	/* Killed in the middle of a run. */
	ASSERT_EQ(0, dmn_connect(&self->m, 5000, &c));
	ASSERT_EQ(0, moem_ctl_send(c, "run", dmn_run_args("steps", "100000", NULL), &id));
	/* Killed once it has taken steps (not after a guessed delay). */
	for (uint64_t end = dmn_ms() + 60000, done = 0; !done && dmn_ms() < end;) {
		struct json_object *st;

		if (dmn_call(&self->m, "status", NULL, &st) == 0)
			done = dmn_u64(st, "run.steps_done") != UINT64_MAX &&
			       dmn_u64(st, "run.steps_done") > 1;
		json_object_put(st);
		if (!done)
			dmn_sleep_ms(5);
	}
	ASSERT_EQ(0, g_pool_read(&p0));
	dmn_kill(&self->m, SIGKILL);
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	moem_ctl_close(c);

	/* The region outlived the daemon, its experts intact. */
	ASSERT_EQ(0, g_pool_read(&p1));
	EXPECT_STREQ(self->region, p1.names);
	EXPECT_EQ(p0.free, p1.free);
	ASSERT_EQ(0, g_verify_region(self->region, g_pack(), &staged, &bad, false));
	EXPECT_GT(staged, 0u);
	EXPECT_EQ(0u, bad);

	/* Warm: adopted, nothing read from the pack, the same experts. */
	for (int i = 0; i < 3; i++) {
		const char *args[] = ARGS(NULL);

		ASSERT_EQ(0, g_start_to_first_step(&self->m, self->dir, args, &warm[i].first))
		TH_LOG("%s", moem_last_error());
		ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
		EXPECT_TRUE(json_object_get_boolean(dmn_get(r, "pool.warm")));
		adopted = dmn_u64(r, "pool.adopted");
		EXPECT_EQ(staged, adopted);
		EXPECT_EQ(0u, dmn_u64(r, "counters.bytes_nvme"));
		warm[i].ready = (double)dmn_u64(r, "daemon.ready_after_ns") / 1e6;
		warm[i].open = (double)dmn_u64(r, "daemon.open_ns") / 1e6;
		warm[i].fill = (double)dmn_u64(r, "daemon.warmup_ns") / 1e6;
		json_object_put(r);
		ASSERT_EQ(0, dmn_call(&self->m, "verify", NULL, &r))
		TH_LOG("%s", moem_last_error());
		EXPECT_EQ(staged, dmn_u64(r, "checked"));
		EXPECT_EQ(0u, dmn_u64(r, "bad"));
		json_object_put(r);
		dmn_kill(&self->m, SIGKILL);
		ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	}
	/* Each figure from the same start: the faster cold one, the median warm one. */
	qsort(cold, 2, sizeof(cold[0]), cmp_start);
	qsort(warm, 3, sizeof(warm[0]), cmp_start);
	printf("MOEM-RESULT restart-to-first-step: cold %.0f ms (ready after %.0f ms, %.1f MiB "
	       "staged from the virtio disk), warm %.0f ms (ready after %.0f ms: engine open and "
	       "adoption of %llu versions %.0f ms, HBM fill %.0f ms; the rest is process start and "
	       "the first step), warm/cold %.3f (synthetic pack, TCG guest, the faster of 2 "
	       "cold and the median of 3 warm)\n",
	       cold[0].first, cold[0].ready, (double)nvme_cold / (1 << 20), warm[1].first,
	       warm[1].ready, (unsigned long long)adopted, warm[1].open, warm[1].fill,
	       warm[1].first / cold[0].first);
	/* The same, one key=value each, for bench/restart/run.sh's page. */
	printf("MOEM-RESULT restart cold_ms=%.0f cold_ready_ms=%.0f staged_mib=%.1f warm_ms=%.0f "
	       "warm_ready_ms=%.0f adopted=%llu open_ms=%.0f fill_ms=%.0f ratio=%.3f\n",
	       cold[0].first, cold[0].ready, (double)nvme_cold / (1 << 20), warm[1].first,
	       warm[1].ready, (unsigned long long)adopted, warm[1].open, warm[1].fill,
	       warm[1].first / cold[0].first);
	fflush(stdout);

	/* Stopped cleanly, the region stays for the next start. */
	{
		const char *args[] = ARGS(NULL);

		ASSERT_EQ(0, dmn_start_argv(&self->m, self->dir, args));
		ASSERT_EQ(0, dmn_wait_ready(&self->m, 60000));
		dmn_kill(&self->m, SIGTERM);
		ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
		EXPECT_EQ(0, dmn_exit_code(&self->m));
		ASSERT_EQ(0, g_pool_read(&p1));
		EXPECT_STREQ(self->region, p1.names);
	}
}

TEST_F_TIMEOUT(w, foreign_region_refused, 600)
{
	const char *args[] = {"--pack",	  g_other_pack(), "--backend", "cpu",	 "--pool",
			      "kmod",	  "--precisions", "bf16,q4",   "--dram", "100%",
			      "--region", self->region,	  NULL};
	struct moem_pack *p;
	struct moem_pack_id id;
	struct g_pool before, after;
	char hex[33];

	if (access(g_other_pack(), R_OK))
		SKIP(return, "no second pack at %s", g_other_pack());
	/* The region holds the first pack's experts (staged by a daemon). */
	{
		const char *a[] = ARGS(NULL);

		ASSERT_EQ(0, dmn_start_argv(&self->m, self->dir, a));
		ASSERT_EQ(0, dmn_wait_ready(&self->m, 300000));
		dmn_kill(&self->m, SIGTERM);
		ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	}
	ASSERT_EQ(0, g_pool_read(&before));
	ASSERT_EQ(0, dmn_start_argv(&self->m, self->dir, args));
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 60000));
	EXPECT_EQ(78, dmn_exit_code(&self->m));
	ASSERT_EQ(0, moem_pack_open(g_other_pack(), &p));
	moem_pack_get_id(p, &id);
	moem_pack_close(p);
	EXPECT_TRUE(dmn_log_has(&self->m, moem_pack_id_str(&id, hex)));
	EXPECT_TRUE(dmn_log_has(&self->m, "holds experts staged for pack"));
	/* Nothing changed: same regions, same memory, experts intact. */
	ASSERT_EQ(0, g_pool_read(&after));
	EXPECT_STREQ(before.names, after.names);
	EXPECT_EQ(before.free, after.free);
	{
		uint64_t staged, bad;

		ASSERT_EQ(0, g_verify_region(self->region, g_pack(), &staged, &bad, false));
		EXPECT_GT(staged, 0u);
		EXPECT_EQ(0u, bad);
	}
}

TEST_F_TIMEOUT(w, corruption_found_by_verify, 600)
{
	struct json_object *r;
	uint64_t staged, bad;
	int ret;

	{
		const char *a[] = ARGS(NULL);

		ASSERT_EQ(0, dmn_start_argv(&self->m, self->dir, a));
		ASSERT_EQ(0, dmn_wait_ready(&self->m, 300000));
		dmn_kill(&self->m, SIGKILL);
		ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	}
	/* One byte flipped in a staged expert while no daemon runs. */
	ASSERT_EQ(0, g_verify_region(self->region, g_pack(), &staged, &bad, true));
	EXPECT_EQ(1u, bad);
	{
		const char *a[] = ARGS(NULL);

		ASSERT_EQ(0, dmn_start_argv(&self->m, self->dir, a));
		ASSERT_EQ(0, dmn_wait_ready(&self->m, 300000));
	}
	ret = dmn_call(&self->m, "verify", NULL, &r);
	EXPECT_EQ(-EBADMSG, ret);
	EXPECT_EQ(1u, dmn_u64(r, "bad"));
	EXPECT_NE(NULL, strstr(dmn_str(r, "error"), "do not match the pack"));
	json_object_put(r);
	/* Start afresh (--cold): the next tests get a clean region. */
	dmn_kill(&self->m, SIGTERM);
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	{
		const char *a[] = ARGS("--cold", NULL);

		ASSERT_EQ(0, dmn_start_argv(&self->m, self->dir, a));
		ASSERT_EQ(0, dmn_wait_ready(&self->m, 300000));
	}
	ASSERT_EQ(0, dmn_call(&self->m, "verify", NULL, &r));
	EXPECT_EQ(0u, dmn_u64(r, "bad"));
	json_object_put(r);
	dmn_kill(&self->m, SIGTERM);
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
}

TEST_HARNESS_MAIN
