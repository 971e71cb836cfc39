// SPDX-License-Identifier: GPL-2.0-only
/*
 * No named lossless policy is below plain LRU, and the best reaches a
 * stated fraction of Belady's MIN: the simulator matrix of issue 17
 * (batch 1/8/32 x HBM 25/50%) in small, on short generated traces of a
 * 16-layer, 64-expert, top-6 model with the pre-gate (2 layers ahead) the
 * engine records. Hit rates are deterministic (modelled time, fixed seeds);
 * nothing here asserts on time.
 *
 * The tolerance: the LRU duel (runtime/placement/policy/driver.c) replays
 * the accesses on a shadow of each and needs some of them to notice that
 * LRU would do better; a policy may trail LRU by that much, no more.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/sim.h>
#include <moem/trace.h>

#include "kselftest_harness.h"

#define LRU_SLACK 0.002 /* hit rate a policy may trail LRU by (the duel's learning) */

/*
 * The fraction of MIN the best lossless policy must reach at 25% HBM: the
 * issue's target, 0.9, at batch 1; at batch 8 what is reached on this
 * matrix, less a little (a policy change that loses more fails here).
 * Measured when set: 1.014 at batch 1 (FluxMoE's window; prefetching can
 * beat MIN, which bounds demand paging), 0.919 at batch 8 and 1.010 at
 * batch 32; pred, demand paging alone, 0.932, 0.879 and 0.953. On the
 * 48-layer shape batch 8 is about 0.8 of MIN, and the restricted oracles
 * say why (Documentation/policies.md).
 */
#define MIN_FRAC_B1	 0.90
#define MIN_FRAC_B8	 0.915
#define MIN_FRAC_B32	 0.95
#define PRED_MIN_FRAC_B8 0.87

static const char *const lossless[] = {"lru2",	     "lfu",  "pred",   "prefetch-fixed",
				       "expertflow", "moem", "fluxmoe"};

static char dir[64];

static void __attribute__((constructor)) setup_dir(void)
{
	strcpy(dir, "/tmp/moem-simlru-XXXXXX");
	if (!mkdtemp(dir))
		abort();
}

static int gen(const char *path, uint32_t B, uint64_t steps, uint64_t seed)
{
	struct moem_trace_gen_opts o = {.batch = B, .steps = steps, .pregate = 2};
	struct moem_trace_writer *w;
	struct moem_trace_info in;
	int ret;

	moem_synth_defaults(&o.synth, 16, 64, 6, seed);
	moem_trace_gen_info(&o, &in);
	ret = moem_trace_writer_open(path, &in, &w);
	if (ret)
		return ret;
	ret = moem_trace_gen(&o, w, NULL, NULL);
	return moem_trace_writer_close(w) ?: ret;
}

static int run(const char *tr, const char *spec, double pct, struct moem_sim_result *r)
{
	struct moem_sim_opts o = {0};
	struct moem_sim_policy p;
	struct moem_sim_cost c;
	int ret;

	moem_sim_cost_default(&c);
	c.hidden = 256;
	c.inter = 256;
	moem_sim_cost_finish(&c);
	c.hbm_bytes = (uint64_t)(pct / 100 * 16 * 64 * c.expert_bytes[MOEM_PREC_BF16]);
	ret = moem_sim_policy_parse(spec, &p);
	return ret ? ret : moem_sim_run(tr, &c, &p, &o, r);
}

/* One trace: every lossless policy at both budgets; returns the best fraction of MIN at 25%. */
static double row(struct __test_metadata *_metadata, uint32_t B, uint64_t steps, uint64_t seed,
		  double *pred_frac)
{
	static const double budgets[] = {25, 50};
	char path[128];
	double best25 = 0, pred25 = 0;

	snprintf(path, sizeof(path), "%s/b%u-%llu.trace", dir, B, (unsigned long long)seed);
	EXPECT_EQ(0, gen(path, B, steps, seed)) TH_LOG("%s", moem_last_error());
	for (size_t b = 0; b < MOEM_ARRAY_SIZE(budgets); b++) {
		struct moem_sim_result lru, r;

		ASSERT_EQ(0, run(path, "lru", budgets[b], &lru)) TH_LOG("%s", moem_last_error());
		for (size_t i = 0; i < MOEM_ARRAY_SIZE(lossless); i++) {
			ASSERT_EQ(0, run(path, lossless[i], budgets[b], &r))
			TH_LOG("%s", moem_last_error());
			EXPECT_GE(r.hit_rate, lru.hit_rate - LRU_SLACK)
			TH_LOG("batch %u seed %llu HBM %.0f%%: %s hits %.4f, LRU %.4f", B,
			       (unsigned long long)seed, budgets[b], lossless[i], r.hit_rate,
			       lru.hit_rate);
			if (budgets[b] != 25 || !(r.belady_hit_rate > 0))
				continue;
			if (r.hit_rate / r.belady_hit_rate > best25)
				best25 = r.hit_rate / r.belady_hit_rate;
			if (!strcmp(lossless[i], "pred"))
				pred25 = r.hit_rate / r.belady_hit_rate;
		}
	}
	printf("# batch %u seed %llu, 25%% HBM: best lossless policy %.3f of MIN, pred (demand "
	       "paging) %.3f\n",
	       B, (unsigned long long)seed, best25, pred25);
	fflush(stdout);
	if (pred_frac)
		*pred_frac = pred25;
	return best25;
}

TEST(batch1)
{
	double f = row(_metadata, 1, 150, 11, NULL);

	EXPECT_GE(f, MIN_FRAC_B1) TH_LOG("best lossless at 25%%, batch 1: %.3f of MIN", f);
}

TEST(batch8)
{
	double pred, f = row(_metadata, 8, 80, 18, &pred);

	EXPECT_GE(f, MIN_FRAC_B8) TH_LOG("best lossless at 25%%, batch 8: %.3f of MIN", f);
	EXPECT_GE(pred, PRED_MIN_FRAC_B8) TH_LOG("pred at 25%%, batch 8: %.3f of MIN", pred);
}

TEST(batch32)
{
	double f = row(_metadata, 32, 40, 32, NULL);

	EXPECT_GE(f, MIN_FRAC_B32) TH_LOG("best lossless at 25%%, batch 32: %.3f of MIN", f);
}

TEST(cleanup)
{
	char cmd[96];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	EXPECT_EQ(0, system(cmd));
}

TEST_HARNESS_MAIN
