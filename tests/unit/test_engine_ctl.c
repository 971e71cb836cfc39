// SPDX-License-Identifier: GPL-2.0-only
/*
 * The engine's entry points for moemd: knobs applied at once when idle
 * (and by a run when set during it), the trace turned on and off between
 * runs, staged experts verified against the pack (and a corrupted one
 * found), a stopped warm-up, one engine-thread role at a time.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <moem/engine.h>
#include <moem/log.h>
#include <moem/pack.h>
#include <moem/trace.h>

#include "kselftest_harness.h"
#include "store_test_util.h"

FIXTURE(ec)
{
	char *dir, *model, *pack;
	struct moem_engine *e;
};

FIXTURE_SETUP(ec)
{
	struct moem_mkmodel_opts mo;
	struct moem_pack_opts po = {0};
	struct moem_engine_opts o = {0};

	moem_log_set_level(MOEM_LOG_WARN);
	self->dir = st_tmpdir();
	self->model = st_path(self->dir, "model");
	self->pack = st_path(self->dir, "m.moem");
	st_tiny_opts(&mo, MOEM_ARCH_QWEN3_MOE, self->model);
	mo.cfg.n_experts = 16;
	mo.cfg.top_k = 4;
	mo.cfg.hidden = 128;
	mo.cfg.moe_inter = 128;
	ASSERT_EQ(0, moem_mkmodel(&mo)) TH_LOG("%s", moem_last_error());
	po.model_dir = self->model;
	po.out_path = self->pack;
	po.prec_mask = (1u << MOEM_PREC_BF16) | (1u << MOEM_PREC_Q4);
	po.threads = 2;
	ASSERT_EQ(0, moem_pack_write(&po)) TH_LOG("%s", moem_last_error());
	o.pack_path = self->pack;
	o.backend = "cpu";
	o.threads = 1;
	o.pool.provider = MOEM_POOL_THP;
	o.hi = MOEM_PREC_BF16;
	o.lo = MOEM_PREC_Q4;
	o.two_prec = true;
	o.hbm_budget = 1 << 20;
	o.dram_budget = 3 << 20;
	ASSERT_EQ(0, moem_engine_open(&o, &self->e)) TH_LOG("%s", moem_last_error());
}

FIXTURE_TEARDOWN(ec)
{
	moem_engine_close(self->e);
	st_rm_rf(self->dir);
	free(self->dir);
	free(self->model);
	free(self->pack);
}

static const struct moem_workload wl = {.kind = MOEM_WL_SYNTH, .batch = 4, .steps = 6};

TEST_F(ec, knobs_apply_when_idle)
{
	struct moem_engine_status st;

	ASSERT_EQ(0, moem_engine_set_knob(self->e, MOEM_BUDGET_HBM_BYTES, 800 << 10));
	moem_engine_get_status(self->e, &st);
	EXPECT_EQ(1u << 20, st.hbm_budget); /* pending until applied */
	EXPECT_EQ(800u << 10, st.knob[MOEM_BUDGET_HBM_BYTES]);
	ASSERT_EQ(0, moem_engine_apply_knobs(self->e));
	moem_engine_get_status(self->e, &st);
	EXPECT_EQ(800u << 10, st.hbm_budget);
	EXPECT_NE(0u, st.knobs_applied_ns);
	/* Refused values change nothing. */
	EXPECT_EQ(-ERANGE, moem_engine_set_knob(self->e, MOEM_BUDGET_HBM_BYTES, 100));
	EXPECT_EQ(-ERANGE, moem_engine_set_knob(self->e, MOEM_BUDGET_REROUTE, 99));
	moem_engine_get_status(self->e, &st);
	EXPECT_EQ(800u << 10, st.knob[MOEM_BUDGET_HBM_BYTES]);
	EXPECT_EQ(0, moem_engine_apply_knobs(self->e)); /* nothing pending */
}

struct setter {
	struct moem_engine *e;
	volatile int go;
};

/* Hammer set + apply from another thread while runs start and end. */
static void *set_loop(void *arg)
{
	struct setter *s = arg;
	uint64_t v[] = {700 << 10, 900 << 10};

	for (int i = 0; s->go; i++) {
		moem_engine_set_knob(s->e, MOEM_BUDGET_HBM_BYTES, v[i & 1]);
		moem_engine_apply_knobs(s->e);
	}
	return NULL;
}

TEST_F(ec, knob_changes_never_fail_a_run)
{
	struct setter s = {self->e, 1};
	struct moem_engine_status st;
	struct moem_run_stats rs;
	pthread_t t;

	ASSERT_EQ(0, pthread_create(&t, NULL, set_loop, &s));
	for (int i = 0; i < 20; i++) {
		ASSERT_EQ(0, moem_engine_run(self->e, &wl, NULL, NULL, &rs))
		TH_LOG("run %d: %s", i, moem_last_error());
	}
	s.go = 0;
	pthread_join(t, NULL);
	/* The last value set is the one in force once everyone is done. */
	moem_engine_get_status(self->e, &st);
	EXPECT_EQ(st.knob[MOEM_BUDGET_HBM_BYTES], st.hbm_budget);
}

TEST_F(ec, trace_on_and_off)
{
	char *path = st_path(self->dir, "t.trace");
	struct moem_engine_status st;
	struct moem_trace_reader *tr;
	struct moem_run_stats rs;

	EXPECT_EQ(-EINVAL, moem_engine_set_trace(self->e, "", false));
	ASSERT_EQ(0, moem_engine_set_trace(self->e, path, false));
	moem_engine_get_status(self->e, &st);
	EXPECT_STREQ(path, st.trace_path);
	ASSERT_EQ(0, moem_engine_run(self->e, &wl, NULL, NULL, &rs));
	ASSERT_EQ(0, moem_trace_open(path, &tr)) TH_LOG("%s", moem_last_error());
	moem_trace_close(tr);
	unlink(path);
	ASSERT_EQ(0, moem_engine_set_trace(self->e, NULL, false));
	ASSERT_EQ(0, moem_engine_run(self->e, &wl, NULL, NULL, &rs));
	EXPECT_NE(0, access(path, F_OK));
	free(path);
}

TEST_F(ec, verify_staged)
{
	struct moem_engine_status st;
	uint64_t checked, bad;

	ASSERT_EQ(0, moem_engine_warmup(self->e, NULL));
	ASSERT_EQ(0, moem_engine_verify_staged(self->e, &checked, &bad))
	TH_LOG("%s", moem_last_error());
	moem_engine_get_status(self->e, &st);
	EXPECT_EQ(st.dram_ready, checked);
	EXPECT_GT(checked, 0u);
	EXPECT_EQ(0u, bad);
	EXPECT_FALSE(moem_engine_fatal(self->e, NULL, 0));
}

TEST_F(ec, stopped_warmup)
{
	uint64_t checked, bad;

	moem_engine_stop(self->e);
	EXPECT_EQ(-ECANCELED, moem_engine_warmup(self->e, NULL));
	/* What it staged before stopping is whole. */
	ASSERT_EQ(0, moem_engine_verify_staged(self->e, &checked, &bad));
	EXPECT_EQ(0u, bad);
}

TEST_HARNESS_MAIN
