// SPDX-License-Identifier: GPL-2.0-only
/*
 * Budget knobs through moem.ko (in the guest): writes to
 * /sys/kernel/moem/budgets/* (and MOEM_IOC_BUDGET_SET, and moemctl set
 * --via sysfs|ioctl) while a run is in progress reach moemd through
 * poll() and sysfs_notify and are applied (waited for with a generous
 * deadline; the time from the write to the engine taking the new budget,
 * both on CLOCK_MONOTONIC, is measured and printed, not asserted: a TCG
 * guest on a loaded machine has no latency to promise); moemctl
 * status shows them; a value the kernel accepts but the model cannot
 * (below one expert) is refused by the daemon and changes nothing; a
 * knob set before the daemon starts overrides its config. The latencies
 * are printed as a MOEM-RESULT line. Hybrid execution's switches (exec,
 * cpu_moe_layers, ABI 1.3) follow the same path: hybrid_switches_*.
 */
#include <fcntl.h>

#include "kselftest_harness.h"
#include "guest_util.h"

FIXTURE(s)
{
	char *dir;
	struct dmn m;
};

static int knob_write(const char *knob, const char *value)
{
	char path[128];
	int fd, ret = 0;

	snprintf(path, sizeof(path), "/sys/kernel/moem/budgets/%s", knob);
	fd = open(path, O_WRONLY);
	if (fd < 0)
		return -errno;
	if (write(fd, value, strlen(value)) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

static void knobs_reset(void)
{
	knob_write("hbm_bytes", "0");
	knob_write("dram_bytes", "0");
	knob_write("hi_precision_permille", "0");
	knob_write("prefetch_depth", "0");
	knob_write("reroute", "none");
	knob_write("kv_bytes", "0");
	knob_write("exec", "gpu");
	knob_write("cpu_moe_layers", "0");
}

FIXTURE_SETUP(s)
{
	if (access("/sys/kernel/moem/budgets", F_OK))
		SKIP(return, "moem.ko is not loaded (these tests run in the guest)");
	if (access(g_pack(), R_OK))
		SKIP(return, "no test pack at %s", g_pack());
	knobs_reset();
	self->dir = dmn_tmpdir();
	ASSERT_NE(NULL, self->dir);
}

FIXTURE_TEARDOWN(s)
{
	if (self->m.pid > 0) {
		if (_metadata->passed == 0)
			dmn_dump_log(&self->m);
		dmn_stop_hard(&self->m);
	}
	knobs_reset();
	dmn_rm_rf(self->dir);
	free(self->dir);
}

/* Start moemd on the guest's pack; extra: more arguments, NULL-terminated. */
static int start_with(FIXTURE_DATA(s) * self, const char *const *extra)
{
	const char *args[32] = {"--pack", g_pack(),	 "--backend", "cpu",	      "--threads",
				"1",	  "--pool",	 "kmod",      "--precisions", "bf16,q4",
				"--hbm",  "25%",	 "--dram",    "50%",	      "--batch",
				"1",	  "--log-level", "debug"};
	int n = 18, ret;

	for (int i = 0; extra && extra[i] && n < 31; i++)
		args[n++] = extra[i];
	args[n] = NULL;
	ret = dmn_start_argv(&self->m, self->dir, args);
	return ret ? ret : dmn_wait_ready(&self->m, 300000);
}

static int start(FIXTURE_DATA(s) * self)
{
	return start_with(self, NULL);
}

/* Run moemctl with args; its stdout into out (NUL-terminated). */
static int moemctl(const char *sock, char *out, size_t len, const char *const *args)
{
	const char *argv[16] = {getenv("MOEMCTL") ? getenv("MOEMCTL") : "moemctl", "--socket",
				sock};
	int p[2], n = 3, status;
	size_t got = 0;
	pid_t pid;

	for (int i = 0; args[i] && n < 15; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	if (pipe(p))
		return -errno;
	pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		close(p[0]);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	for (;;) {
		ssize_t r = read(p[0], out + got, len - 1 - got);

		if (r <= 0)
			break;
		got += (size_t)r;
	}
	out[got] = 0;
	close(p[0]);
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Poll status until path == want; the engine's apply time in *applied. */
static int wait_applied(struct dmn *m, const char *path, uint64_t want, uint64_t *applied)
{
	uint64_t end = dmn_ms() + 60000;

	while (dmn_ms() < end) {
		struct json_object *r;
		bool ok = false;

		if (dmn_call(m, "status", NULL, &r) == 0) {
			ok = dmn_u64(r, path) == want;
			*applied = dmn_u64(r, "knobs.applied_ns");
		}
		json_object_put(r);
		if (ok)
			return 0;
		dmn_sleep_ms(1);
	}
	return -ETIMEDOUT;
}

TEST_F_TIMEOUT(s, sysfs_changes_during_a_run, 900)
{
	static const char *const hbm[] = {"8388608", "16777216", "6291456", "25165824", "12582912"};
	uint64_t lat[8], worst = 0, sum = 0, applied;
	struct json_object *r;
	struct moem_ctl *c;
	char out[8192];
	int64_t id;
	int n = 0;

	ASSERT_EQ(0, start(self));
	ASSERT_EQ(0, dmn_connect(&self->m, 5000, &c));
	ASSERT_EQ(0, moem_ctl_send(c, "run", dmn_run_args("steps", "1000000", NULL), &id));
	for (int i = 0; i < 200; i++) {
		bool active = false;

		if (dmn_call(&self->m, "status", NULL, &r) == 0)
			active = dmn_u64(r, "run.steps_done") > 0 &&
				 dmn_u64(r, "run.steps_done") != UINT64_MAX;
		json_object_put(r);
		if (active)
			break;
		dmn_sleep_ms(10);
	}

	/* hbm_bytes through sysfs, during the run: write -> applied. */
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(hbm); i++) {
		uint64_t t0, want = strtoull(hbm[i], NULL, 10);

		t0 = moem_now_ns();
		ASSERT_EQ(0, knob_write("hbm_bytes", hbm[i]));
		ASSERT_EQ(0, wait_applied(&self->m, "tiers.hbm_budget", want, &applied))
		TH_LOG("hbm_bytes %s never applied", hbm[i]);
		lat[n] = applied > t0 ? applied - t0 : 0;
		TH_LOG("hbm_bytes %s applied %.1f ms after the write", hbm[i],
		       (double)lat[n] / 1e6);
		worst = moem_max(worst, lat[n]);
		sum += lat[n++];
	}
	/* dram_bytes and reroute the same way; prefetch_depth lands in budgets. */
	{
		uint64_t t0 = moem_now_ns();

		ASSERT_EQ(0, knob_write("dram_bytes", "41943040"));
		ASSERT_EQ(0, wait_applied(&self->m, "tiers.dram_budget", 41943040, &applied));
		lat[n] = applied - t0;
		worst = moem_max(worst, lat[n]);
		sum += lat[n++];
	}
	ASSERT_EQ(0, knob_write("reroute", "oea"));
	ASSERT_EQ(0, knob_write("prefetch_depth", "2"));
	for (int i = 0; i < 500; i++) {
		bool ok = false;

		if (dmn_call(&self->m, "status", NULL, &r) == 0)
			ok = !strncmp(dmn_str(r, "policies.route"), "oea", 3) &&
			     dmn_u64(r, "budgets.prefetch_depth") == 2;
		json_object_put(r);
		if (ok)
			break;
		dmn_sleep_ms(2);
	}
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_EQ(0, strncmp(dmn_str(r, "policies.route"), "oea", 3));
	EXPECT_EQ(2u, dmn_u64(r, "budgets.prefetch_depth"));
	EXPECT_TRUE(json_object_get_boolean(dmn_get(r, "run.active")));
	EXPECT_GE(dmn_u64(r, "knobs.sysfs_changes"), 8u);
	json_object_put(r);

	/* moemctl status shows what sysfs set (human output). */
	{
		const char *a[] = {"status", NULL};

		EXPECT_EQ(0, moemctl(self->m.sock, out, sizeof(out), a));
		EXPECT_NE(NULL, strstr(out, "hbm_bytes 12.00 MiB")) TH_LOG("%s", out);
		EXPECT_NE(NULL, strstr(out, "dram_bytes 40.00 MiB")) TH_LOG("%s", out);
		EXPECT_NE(NULL, strstr(out, "reroute oea")) TH_LOG("%s", out);
		EXPECT_NE(NULL, strstr(out, "moemd follows its budget knobs")) TH_LOG("%s", out);
	}
	/* moemctl set --via sysfs and --via ioctl: the kernel, then moemd. */
	{
		const char *a[] = {"set", "--via", "sysfs", "hbm_bytes", "10M", NULL};

		EXPECT_EQ(0, moemctl(self->m.sock, out, sizeof(out), a)) TH_LOG("%s", out);
		EXPECT_EQ(0, wait_applied(&self->m, "tiers.hbm_budget", 10 << 20, &applied));
	}
	{
		const char *a[] = {"set", "--via", "ioctl", "hbm_bytes", "14M", NULL};

		EXPECT_EQ(0, moemctl(self->m.sock, out, sizeof(out), a)) TH_LOG("%s", out);
		EXPECT_EQ(0, wait_applied(&self->m, "tiers.hbm_budget", 14 << 20, &applied));
	}
	/* The kernel takes 4096, the model cannot: refused, nothing changes. */
	ASSERT_EQ(0, knob_write("hbm_bytes", "4096"));
	for (int i = 0; i < 500; i++) {
		uint64_t refused = 0;

		if (dmn_call(&self->m, "status", NULL, &r) == 0)
			refused = dmn_u64(r, "knobs.sysfs_refused");
		json_object_put(r);
		if (refused == 1)
			break;
		dmn_sleep_ms(2);
	}
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_EQ(1u, dmn_u64(r, "knobs.sysfs_refused"));
	EXPECT_EQ(14u << 20, dmn_u64(r, "tiers.hbm_budget"));
	EXPECT_TRUE(json_object_get_boolean(dmn_get(r, "run.active")));
	json_object_put(r);
	EXPECT_TRUE(dmn_log_has(&self->m, "below one expert"));

	/* The run never failed a step: stop it, it answers with its stats. */
	ASSERT_EQ(0, dmn_call(&self->m, "stop-run", NULL, &r));
	json_object_put(r);
	ASSERT_EQ(0, moem_ctl_wait(c, id, 60000, &r)) TH_LOG("%s", moem_last_error());
	EXPECT_TRUE(json_object_get_boolean(dmn_get(r, "stopped")));
	EXPECT_GT(dmn_u64(r, "steps"), 0u);
	json_object_put(r);
	moem_ctl_close(c);
	printf("MOEM-RESULT sysfs budget write to applied during a run: mean %.1f ms, worst %.1f "
	       "ms over %d changes (TCG guest; measured, not asserted)\n",
	       (double)sum / n / 1e6, (double)worst / 1e6, n);
	fflush(stdout);
	dmn_kill(&self->m, SIGTERM);
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	EXPECT_EQ(0, dmn_exit_code(&self->m));
}

/* Poll status until path (a string) == want, within a minute. */
static int wait_str(struct dmn *m, const char *path, const char *want)
{
	uint64_t end = dmn_ms() + 60000;

	while (dmn_ms() < end) {
		struct json_object *r;
		bool ok = false;

		if (dmn_call(m, "status", NULL, &r) == 0)
			ok = !strcmp(dmn_str(r, path), want);
		json_object_put(r);
		if (ok)
			return 0;
		dmn_sleep_ms(1);
	}
	return -ETIMEDOUT;
}

/* Poll status until path (a number) == want, within a minute. */
static int wait_u64(struct dmn *m, const char *path, uint64_t want)
{
	uint64_t applied;

	return wait_applied(m, path, want, &applied);
}

/* A short run to its end; its result in *r. */
static int run_steps(struct dmn *m, const char *steps, struct json_object **r)
{
	return dmn_call(m, "run", dmn_run_args("steps", steps, "batch", "4", NULL), r);
}

/*
 * Hybrid execution's switches through moem.ko: an administrator's write
 * to budgets/exec (sysfs) and budgets/cpu_moe_layers (the ioctl, through
 * moemctl set --via ioctl) changes moemd's exec mode as moemctl set does,
 * and moemctl status shows it; a value moem.ko refuses never reaches
 * moemd; one it accepts but the model cannot take (more MoE layers than
 * the pack has) is refused by moemd, counted, and changes nothing; the
 * engine runs on throughout (runs after each change compute experts on
 * the CPU, or not). A socket change is moemd's: status shows it under
 * budgets, moem.ko keeps the administrator's value, and the
 * administrator writing that same value again still applies it.
 */
TEST_F_TIMEOUT(s, hybrid_switches_through_sysfs, 900)
{
	static const char *const extra[] = {"--cpu-gbps", "1000", NULL};
	uint64_t refused;
	struct json_object *r;
	char out[8192];

	ASSERT_EQ(0, start_with(self, extra));
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_STREQ("gpu", dmn_str(r, "policies.exec"));
	EXPECT_STREQ("gpu", dmn_str(r, "kernel.budgets.exec"));
	EXPECT_EQ(0u, dmn_u64(r, "kernel.budgets.cpu_moe_layers"));
	json_object_put(r);

	/* sysfs: exec hybrid; a run then computes experts on the CPU */
	ASSERT_EQ(0, knob_write("exec", "hybrid"));
	ASSERT_EQ(0, wait_str(&self->m, "policies.exec", "hybrid")) TH_LOG("exec never applied");
	ASSERT_EQ(0, run_steps(&self->m, "4", &r)) TH_LOG("%s", moem_last_error());
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_STREQ("hybrid", dmn_str(r, "budgets.exec"));
	EXPECT_STREQ("hybrid", dmn_str(r, "kernel.budgets.exec"));
	EXPECT_GT(dmn_u64(r, "counters.cpu_experts"), 0u);
	json_object_put(r);
	{
		const char *a[] = {"status", NULL};

		EXPECT_EQ(0, moemctl(self->m.sock, out, sizeof(out), a));
		EXPECT_NE(NULL, strstr(out, "exec      hybrid, cpu-moe-layers 0"))
		TH_LOG("%s", out);
		EXPECT_NE(NULL, strstr(out, "exec hybrid, cpu_moe_layers 0")) TH_LOG("%s", out);
	}

	/* the ioctl (moemctl set --via ioctl): the first MoE layer on the CPU */
	{
		const char *a[] = {"set", "--via", "ioctl", "cpu_moe_layers", "1", NULL};

		EXPECT_EQ(0, moemctl(self->m.sock, out, sizeof(out), a)) TH_LOG("%s", out);
		ASSERT_EQ(0, wait_u64(&self->m, "policies.cpu_moe_layers", 1));
	}
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_EQ(16u, dmn_u64(r, "policies.cpu_placed")); /* the pack's 16 experts a layer */
	refused = dmn_u64(r, "knobs.sysfs_refused");
	json_object_put(r);

	/* moem.ko refuses these: moemd sees nothing */
	EXPECT_EQ(-EINVAL, knob_write("exec", "transfer"));
	EXPECT_EQ(-EINVAL, knob_write("exec", "lynx"));
	EXPECT_EQ(-EINVAL, knob_write("cpu_moe_layers", "257"));
	/* moem.ko takes 200, the 4-layer model cannot: moemd refuses it */
	ASSERT_EQ(0, knob_write("cpu_moe_layers", "200"));
	ASSERT_EQ(0, wait_u64(&self->m, "knobs.sysfs_refused", refused + 1));
	EXPECT_TRUE(dmn_log_has(&self->m, "the model has 4 MoE layers"));
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_EQ(1u, dmn_u64(r, "policies.cpu_moe_layers"));
	EXPECT_STREQ("hybrid", dmn_str(r, "policies.exec"));
	EXPECT_EQ(200u, dmn_u64(r, "kernel.budgets.cpu_moe_layers"));
	json_object_put(r);
	/* ... and runs on as it was */
	ASSERT_EQ(0, run_steps(&self->m, "3", &r)) TH_LOG("%s", moem_last_error());
	EXPECT_GT(dmn_u64(r, "steps"), 0u);
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_GT(dmn_u64(r, "counters.cpu_experts_last_step"), 0u);
	json_object_put(r);

	/* back to the device through sysfs */
	ASSERT_EQ(0, knob_write("cpu_moe_layers", "0"));
	ASSERT_EQ(0, wait_u64(&self->m, "policies.cpu_moe_layers", 0));
	ASSERT_EQ(0, knob_write("exec", "gpu"));
	ASSERT_EQ(0, wait_str(&self->m, "policies.exec", "gpu"));
	ASSERT_EQ(0, run_steps(&self->m, "3", &r)) TH_LOG("%s", moem_last_error());
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_EQ(0u, dmn_u64(r, "counters.cpu_experts_last_step"));
	json_object_put(r);

	/* the socket: moemd's value, moem.ko keeps the administrator's */
	ASSERT_EQ(0,
		  dmn_call(&self->m, "set", dmn_args("knob", "exec", "value", "hybrid", NULL), &r))
	TH_LOG("%s", moem_last_error());
	json_object_put(r);
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_STREQ("hybrid", dmn_str(r, "budgets.exec"));
	EXPECT_STREQ("gpu", dmn_str(r, "kernel.budgets.exec"));
	json_object_put(r);
	/* the administrator writes gpu again: a write is meant, it applies */
	ASSERT_EQ(0, knob_write("exec", "gpu"));
	ASSERT_EQ(0, wait_str(&self->m, "policies.exec", "gpu"));

	dmn_kill(&self->m, SIGTERM);
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
	EXPECT_EQ(0, dmn_exit_code(&self->m));
}

/* exec set before moemd starts overrides its config, as the other knobs. */
TEST_F_TIMEOUT(s, hybrid_switch_set_before_start_wins, 600)
{
	static const char *const extra[] = {"--cpu-gbps", "1000", NULL};
	struct json_object *r;

	ASSERT_EQ(0, knob_write("exec", "hybrid"));
	ASSERT_EQ(0, knob_write("cpu_moe_layers", "2"));
	ASSERT_EQ(0, start_with(self, extra));
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_STREQ("hybrid", dmn_str(r, "policies.exec"));
	EXPECT_EQ(2u, dmn_u64(r, "policies.cpu_moe_layers"));
	EXPECT_EQ(32u, dmn_u64(r, "policies.cpu_placed"));
	json_object_put(r);
	EXPECT_TRUE(dmn_log_has(&self->m, "overrides the config"));
	dmn_kill(&self->m, SIGTERM);
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
}

TEST_F_TIMEOUT(s, knob_set_before_start_wins, 600)
{
	struct json_object *r;

	ASSERT_EQ(0, knob_write("hbm_bytes", "9437184"));
	ASSERT_EQ(0, knob_write("reroute", "lynx"));
	ASSERT_EQ(0, start(self));
	ASSERT_EQ(0, dmn_call(&self->m, "status", NULL, &r));
	EXPECT_EQ(9437184u, dmn_u64(r, "tiers.hbm_budget"));
	EXPECT_EQ(0, strncmp(dmn_str(r, "policies.route"), "lynx", 4));
	json_object_put(r);
	EXPECT_TRUE(dmn_log_has(&self->m, "overrides the config"));
	dmn_kill(&self->m, SIGTERM);
	ASSERT_EQ(0, dmn_wait_exit(&self->m, 10000));
}

TEST_HARNESS_MAIN
