// SPDX-License-Identifier: GPL-2.0-only
/*
 * Hybrid CPU/GPU execution in the engine, on the CPU backend and the
 * emulated tier (where the "device" side also runs the CPU kernels, so a
 * hybrid run must give the all-resident run's digest bit for bit):
 * --cpu-moe-layers, --place rules and the cost model's choice send
 * experts to the CPU, those never enter HBM, fewer bytes go DRAM->HBM than without, the
 * simulator makes the engine's decisions on the engine's own trace, and
 * bad settings are refused with a message.
 */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include <moem/backend.h>
#include <moem/calib.h>
#include <moem/engine.h>
#include <moem/engine_args.h>
#include <moem/log.h>
#include <moem/pack.h>
#include <moem/sim.h>
#include <moem/trace.h>

#include "kselftest_harness.h"
#include "sim_engine_util.h"
#include "store_test_util.h"

FIXTURE(hyb)
{
	char *dir, *model, *pack;
	uint64_t expert_bytes;
};

FIXTURE_SETUP(hyb)
{
	struct moem_mkmodel_opts mo;
	struct moem_pack_opts po = {0};

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
	ASSERT_EQ(0, moem_engine_pack_bytes(self->pack, MOEM_PREC_BF16, &self->expert_bytes));
}

FIXTURE_TEARDOWN(hyb)
{
	st_rm_rf(self->dir);
	free(self->dir);
	free(self->model);
	free(self->pack);
}

static struct moem_engine_opts base_opts(FIXTURE_DATA(hyb) * self)
{
	struct moem_engine_opts o = {0};

	o.pack_path = self->pack;
	o.backend = "cpu";
	o.threads = 2;
	o.pool.provider = MOEM_POOL_THP;
	o.hi = MOEM_PREC_BF16;
	o.link_gbps = 50;
	return o;
}

static const struct moem_workload wl = {.kind = MOEM_WL_SYNTH, .batch = 8, .steps = 10};

static int run(struct moem_engine_opts *o, const struct moem_workload *w, bool warm,
	       struct moem_run_stats *rs, struct moem_engine_status *st)
{
	struct moem_engine *e;
	int ret = moem_engine_open(o, &e);

	if (ret)
		return ret;
	ret = warm ? moem_engine_warmup(e, NULL) : 0;
	if (!ret)
		ret = moem_engine_run(e, w, NULL, NULL, rs);
	if (!ret && st)
		moem_engine_get_status(e, st);
	moem_engine_close(e);
	return ret;
}

/*
 * Every expert use is a hit, a miss, a fallback or a CPU computation; on
 * the CPU backend the digest is the all-resident run's.
 */
static void check_run(struct __test_metadata *_metadata, const struct moem_run_stats *ref,
		      const struct moem_run_stats *rs, const char *what)
{
	TH_LOG("%s: %llu on the CPU, hits %llu, misses %llu, %llu bytes to HBM, %llu from NVMe",
	       what, (unsigned long long)rs->total.cpu_experts, (unsigned long long)rs->total.hits,
	       (unsigned long long)rs->total.misses, (unsigned long long)rs->total.bytes_h2d,
	       (unsigned long long)rs->total.bytes_nvme);
	EXPECT_STREQ(ref->digest_hex, rs->digest_hex);
	EXPECT_EQ(rs->total.active,
		  rs->total.hits + rs->total.misses + rs->total.fallbacks + rs->total.cpu_experts);
	EXPECT_GT(rs->total.cpu_experts, 0u);
	/* the CPU's time is inside the engine thread's cpu phase (engine.h moem_phase) */
	EXPECT_GE(rs->total.phase_ns[MOEM_PHASE_CPU], rs->total.cpu_ns);
}

TEST_F(hyb, cpu_moe_layers_same_outputs_and_never_in_hbm)
{
	struct moem_engine_opts o = base_opts(self);
	struct moem_run_stats ref, rs, all;
	struct moem_engine_status st;

	ASSERT_EQ(0, run(&o, &wl, true, &ref, NULL)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(0u, ref.total.cpu_experts);
	/* two of the three MoE layers on the CPU, a quarter of the experts in HBM */
	o.cpu_moe_layers = 2;
	o.hbm_budget = self->expert_bytes / 4;
	ASSERT_EQ(0, run(&o, &wl, true, &rs, &st)) TH_LOG("%s", moem_last_error());
	check_run(_metadata, &ref, &rs, "cpu-moe-layers 2, 25% HBM");
	EXPECT_STREQ("gpu", st.exec);
	EXPECT_EQ(2u, st.cpu_moe_layers);
	EXPECT_GT(st.cpu_gbps, 0); /* measured at open */
	/* every layer on the CPU: nothing ever reaches HBM, warm-up included */
	o.cpu_moe_layers = 3;
	o.exec_hybrid = true;
	o.cpu_gbps = 5;
	ASSERT_EQ(0, run(&o, &wl, true, &all, &st)) TH_LOG("%s", moem_last_error());
	check_run(_metadata, &ref, &all, "cpu-moe-layers 3");
	EXPECT_EQ(all.total.active, all.total.cpu_experts);
	EXPECT_EQ(0u, all.total.bytes_h2d);
	EXPECT_EQ(0u, st.bytes_h2d);
	EXPECT_EQ(0u, st.hbm_used);
	EXPECT_EQ(5.0, st.cpu_gbps);
	/* DRAM below the model: CPU experts are read from NVMe into DRAM first */
	o = base_opts(self);
	o.cpu_moe_layers = 2;
	o.cpu_gbps = 5;
	o.hbm_budget = self->expert_bytes / 4;
	o.dram_budget = self->expert_bytes / 3;
	ASSERT_EQ(0, run(&o, &wl, false, &rs, NULL)) TH_LOG("%s", moem_last_error());
	check_run(_metadata, &ref, &rs, "cpu-moe-layers 2, 25% HBM, 33% DRAM, cold");
	EXPECT_GT(rs.total.bytes_nvme, 0u);
}

TEST_F(hyb, cost_model_choice_same_outputs_fewer_bytes)
{
	struct moem_engine_opts o = base_opts(self);
	struct moem_run_stats ref, xfer, rs, slow;
	struct moem_workload w = wl;

	for (uint32_t b = 1; b <= 8; b += 7) {
		w.batch = b;
		ASSERT_EQ(0, run(&o, &w, true, &ref, NULL)) TH_LOG("%s", moem_last_error());
		o = base_opts(self);
		o.hbm_budget = self->expert_bytes / 4;
		ASSERT_EQ(0, run(&o, &w, true, &xfer, NULL)) TH_LOG("%s", moem_last_error());
		EXPECT_STREQ(ref.digest_hex, xfer.digest_hex);
		EXPECT_GT(xfer.total.bytes_h2d, 0u);
		/* a CPU that reads weights faster than the link moves them */
		o.exec_hybrid = true;
		o.cpu_gbps = 1000;
		ASSERT_EQ(0, run(&o, &w, true, &rs, NULL)) TH_LOG("%s", moem_last_error());
		check_run(_metadata, &ref, &rs, b == 1 ? "cost model, batch 1" : "batch 8");
		TH_LOG("transfer-only: %llu bytes to HBM",
		       (unsigned long long)xfer.total.bytes_h2d);
		EXPECT_LT(rs.total.bytes_h2d, xfer.total.bytes_h2d);
		/* and one slower than the link: the same as transfer-only */
		o.cpu_gbps = 0.5;
		ASSERT_EQ(0, run(&o, &w, true, &slow, NULL)) TH_LOG("%s", moem_last_error());
		EXPECT_EQ(0u, slow.total.cpu_experts);
		EXPECT_STREQ(ref.digest_hex, slow.digest_hex);
		o = base_opts(self);
	}
}

/* Prefetch, eviction and precision policies keep working beside the CPU. */
TEST_F(hyb, with_policies)
{
	static const char *const v[][3] = {
		/* route, evict, prefetch */
		{"cache-aware", "lru2", "adaptive"},
		{"none", "pred", "adaptive"},
		{"lynx", "lru", "none"},
	};
	struct moem_engine_opts o = base_opts(self);
	struct moem_run_stats ref, rs;

	for (size_t i = 0; i < MOEM_ARRAY_SIZE(v); i++) {
		o = base_opts(self);
		o.route = v[i][0];
		ASSERT_EQ(0, run(&o, &wl, true, &ref, NULL)) TH_LOG("%s", moem_last_error());
		o.evict = v[i][1];
		o.prefetch = v[i][2];
		o.hbm_budget = self->expert_bytes / 4;
		o.dram_budget = self->expert_bytes / 2;
		o.exec_hybrid = true;
		o.cpu_gbps = 1000;
		o.cpu_token_ns = 40;
		o.cpu_moe_layers = 1;
		ASSERT_EQ(0, run(&o, &wl, false, &rs, NULL)) TH_LOG("%s", moem_last_error());
		check_run(_metadata, &ref, &rs, v[i][1]);
	}
	/* DynaExq: lo versions planned for cold experts are what the CPU computes */
	o = base_opts(self);
	o.two_prec = true;
	o.lo = MOEM_PREC_Q4;
	o.precision = "dynaexq";
	o.hbm_budget = self->expert_bytes / 2;
	o.exec_hybrid = true;
	o.cpu_gbps = 1000;
	ASSERT_EQ(0, run(&o, &wl, true, &rs, NULL)) TH_LOG("%s", moem_last_error());
	EXPECT_GT(rs.total.cpu_experts, 0u);
	EXPECT_EQ(rs.total.active,
		  rs.total.hits + rs.total.misses + rs.total.fallbacks + rs.total.cpu_experts);
}

/*
 * A DRAM budget of one to three experts, exec hybrid and paging: each run
 * gives the all-resident run's digest. Steps failed with "no HBM slot can
 * be freed" here: the CPU's experts held the DRAM room an HBM miss stages
 * through (pinned until the layer's device work was issued), and a
 * prefetch that had landed still counted as in flight, so the one DRAM
 * copy there was could not be evicted; and, on a loaded 2-core machine
 * (make test), copies still moving held that room (now waited for; a 1
 * GB/s link makes them move long enough every time).
 */
TEST_F(hyb, dram_of_a_few_experts)
{
	static const char *const v[][3] = {
		/* exec, prefetch, paging */
		{"hybrid", "none", "none"},    {"hybrid", "fixed", "none"},
		{"hybrid", "none", "fluxmoe"}, {"gpu", "none", "fluxmoe"},
		{"gpu", "adaptive", "none"},
	};
	uint64_t one = self->expert_bytes / (3 * 16);
	struct moem_run_stats ref[2], rs;

	for (uint32_t b = 0; b < 2; b++) {
		struct moem_engine_opts o = base_opts(self);
		struct moem_workload w = wl;

		w.batch = b ? 8 : 1;
		ASSERT_EQ(0, run(&o, &w, true, &ref[b], NULL)) TH_LOG("%s", moem_last_error());
		for (size_t i = 0; i < MOEM_ARRAY_SIZE(v); i++)
			for (uint64_t n = 0; n <= 3; n++) {
				o = base_opts(self);
				/* n 0: one expert's DRAM behind a link slow enough that
				 * copies still move when a miss needs their room (what a
				 * loaded machine did at 50 GB/s) */
				if (!n)
					o.link_gbps = 1;
				o.exec_hybrid = !strcmp(v[i][0], "hybrid");
				o.cpu_gbps = o.exec_hybrid ? 1000 : 0;
				o.cpu_token_ns = 40;
				o.prefetch = v[i][1];
				o.paging = v[i][2];
				o.hbm_budget = self->expert_bytes / 4;
				o.dram_budget = (n ? n : 1) * one + one / 2;
				ASSERT_EQ(0, run(&o, &w, false, &rs, NULL))
				TH_LOG("batch %u, %s %s %s, DRAM %llu experts%s: %s", w.batch,
				       v[i][0], v[i][1], v[i][2], (unsigned long long)(n ? n : 1),
				       n ? "" : ", 1 GB/s link", moem_last_error());
				EXPECT_STREQ(ref[b].digest_hex, rs.digest_hex);
				EXPECT_EQ(rs.total.active, rs.total.hits + rs.total.misses +
								   rs.total.fallbacks +
								   rs.total.cpu_experts);
			}
	}
}

/*
 * `moem sim --exec hybrid` decides as the engine does: on the engine's own
 * trace, at 25% HBM, batch 1 and 8, under LRU the simulator computes the
 * same number of expert uses on the CPU and hits the same number of times
 * in HBM; with a prefetcher within 3% of the uses (a simulated prefetch may
 * still be on its way when a layer starts where the lockstep engine's has
 * landed, the same reason simulator_matches_engine_on_its_trace allows
 * 0.02 of hit rate: such an expert is weighed for the CPU in one and is a
 * hit in the other; 2.2% measured).
 * Both start cold (HBM and DRAM empty, DRAM room for the whole model, so
 * the first use of each expert reads NVMe in both), the engine in
 * lockstep (its link never busy, as the simulator's 10000 GB/s one); both
 * decide with the same cost model (the engine's defaults: NVMe 7 GB/s,
 * HBM 3000 GB/s, 20 ns per token; a 10000 GB/s link; a CPU rated so that
 * a layer's experts split between the two sides). With a cost per call
 * (100 ns) both send fewer uses to the CPU, and still the same ones.
 */
TEST_F(hyb, simulator_makes_the_engines_decisions)
{
	static const char *const pols[][3] = {
		/* engine evict, prefetch; simulator preset */
		{"lru", "none", "lru"},
		{"lru", "fixed:S=2", "lru:prefetch=fixed,S=2"},
		{"lru", "none", "lru"}, /* with a cost per call (cpu_call_ns) */
	};
	char *trace = st_path(self->dir, "hyb.trace");
	uint64_t no_call[9] = {0};

	for (size_t p = 0; p < MOEM_ARRAY_SIZE(pols); p++)
		for (uint32_t b = 1; b <= 8; b += 7) {
			struct moem_engine_opts o = base_opts(self);
			struct moem_workload w = wl;
			struct moem_run_stats rs;
			struct moem_engine_status st;
			struct moem_sim_cost c;
			struct moem_sim_policy sp;
			struct moem_sim_opts so = {0};
			struct moem_sim_result r;
			struct moem_engine *e;

			o.evict = pols[p][0];
			o.prefetch = pols[p][1];
			o.hbm_budget = self->expert_bytes / 4;
			o.trace_out = trace;
			o.lockstep = true;
			o.link_gbps = 10000;
			o.link_lat_us = -1;
			o.exec_hybrid = true;
			o.cpu_gbps = 5000;
			o.cpu_token_ns = 30;
			o.cpu_call_ns = p == 2 ? 100 : 0;
			w.batch = b;
			w.steps = 24;
			ASSERT_EQ(0, moem_engine_open(&o, &e)) TH_LOG("%s", moem_last_error());
			ASSERT_EQ(0, moem_engine_run(e, &w, NULL, NULL, &rs))
			TH_LOG("%s", moem_last_error());
			moem_engine_get_status(e, &st);
			moem_engine_close(e);

			ASSERT_EQ(0, st_sim_cost_for_trace(trace, &c));
			c.cost.link_gbps = 1e4;
			c.cost.cpu_gbps = o.cpu_gbps;
			c.cost.cpu_token_ns = o.cpu_token_ns;
			c.cost.cpu_call_ns = o.cpu_call_ns;
			c.exec_hybrid = true;
			ASSERT_EQ(0, moem_sim_cost_finish(&c));
			st_sim_engine_hbm(&c, st.hbm_budget);
			c.dram_bytes = 48 * c.expert_bytes[MOEM_PREC_BF16]; /* 3 x 16 experts */
			c.dram_cold = true;
			ASSERT_EQ(0, moem_sim_policy_parse(pols[p][2], &sp))
			TH_LOG("%s", moem_last_error());
			ASSERT_EQ(0, moem_sim_run(trace, &c, &sp, &so, &r))
			TH_LOG("%s", moem_last_error());
			TH_LOG("%s batch %u: on the CPU engine %llu sim %llu; hits engine %llu sim "
			       "%llu; misses engine %llu; NVMe bytes engine %llu sim %llu",
			       pols[p][2], b, (unsigned long long)rs.total.cpu_experts,
			       (unsigned long long)r.cpu_experts, (unsigned long long)rs.total.hits,
			       (unsigned long long)r.hits, (unsigned long long)rs.total.misses,
			       (unsigned long long)rs.total.bytes_nvme,
			       (unsigned long long)r.bytes_nvme);
			EXPECT_GT(rs.total.cpu_experts, 0u);
			EXPECT_GT(rs.total.misses, 0u); /* a split, not all on one side */
			if (p == 0)
				no_call[b] = rs.total.cpu_experts;
			if (p == 2) /* a layer pays to use the CPU at all: fewer go there */
				EXPECT_LT(rs.total.cpu_experts, no_call[b]);
			if (p != 1) {
				EXPECT_EQ(rs.total.cpu_experts, r.cpu_experts);
				EXPECT_EQ(rs.total.hits, r.hits);
			} else {
				double n = (double)rs.total.active;

				EXPECT_LE(
					fabs((double)rs.total.cpu_experts - (double)r.cpu_experts),
					0.03 * n);
				EXPECT_LE(fabs((double)rs.total.hits - (double)r.hits), 0.03 * n);
			}
		}
	/* the simulator refuses what it cannot model, with a message */
	{
		struct moem_sim_cost c;
		struct moem_sim_policy sp;
		struct moem_sim_opts so = {0};
		struct moem_sim_result r;

		moem_sim_cost_default(&c);
		c.hidden = c.inter = 128;
		c.hbm_bytes = 1 << 20;
		c.exec_hybrid = true;
		ASSERT_EQ(0, moem_sim_policy_parse("lru", &sp));
		EXPECT_EQ(-EINVAL, moem_sim_run(trace, &c, &sp, &so, &r));
		EXPECT_MSG("needs the CPU's throughput");
		c.cost.cpu_gbps = 10;
		c.cpu_moe_layers = 4;
		EXPECT_EQ(-EINVAL, moem_sim_run(trace, &c, &sp, &so, &r));
		EXPECT_MSG("--cpu-moe-layers 4");
		c.cpu_moe_layers = 3;
		EXPECT_EQ(0, moem_sim_run(trace, &c, &sp, &so, &r)) TH_LOG("%s", moem_last_error());
		EXPECT_EQ(0u, r.bytes_pcie); /* every layer on the CPU */
		EXPECT_EQ(1.0, r.cpu_share);
		ASSERT_EQ(0, moem_sim_policy_parse("fluxmoe", &sp));
		EXPECT_EQ(-EINVAL, moem_sim_run(trace, &c, &sp, &so, &r));
		EXPECT_MSG("not DynaExq or FluxMoE");
	}
	free(trace);
}

/*
 * --place rules: the CPU experts they name are computed on the CPU and
 * never take HBM, the GPU ones never go to the CPU even when the cost
 * model would send them, and the output is the all-resident run's.
 */
TEST_F(hyb, place_rules)
{
	struct moem_engine_opts o = base_opts(self);
	struct moem_run_stats ref, rs, lay, full, half;
	struct moem_engine_status st;

	ASSERT_EQ(0, run(&o, &wl, true, &ref, NULL)) TH_LOG("%s", moem_last_error());
	/* a rule for the first two MoE layers is --cpu-moe-layers 2 */
	o.cpu_moe_layers = 2;
	o.hbm_budget = self->expert_bytes / 4;
	ASSERT_EQ(0, run(&o, &wl, true, &lay, NULL)) TH_LOG("%s", moem_last_error());
	o.cpu_moe_layers = 0;
	ASSERT_EQ(0, moem_place_add(&o.place, "layers=0-1:cpu"));
	ASSERT_EQ(0, run(&o, &wl, true, &rs, &st)) TH_LOG("%s", moem_last_error());
	check_run(_metadata, &ref, &rs, "layers=0-1:cpu");
	EXPECT_EQ(lay.total.cpu_experts, rs.total.cpu_experts);
	EXPECT_EQ(32u, st.cpu_placed);
	EXPECT_STREQ("layers=0-1:cpu", st.place);
	/* half the experts of every layer on the CPU: HBM holds the other half */
	o = base_opts(self);
	ASSERT_EQ(0, run(&o, &wl, true, &full, &st)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(0u, full.total.misses);
	{
		uint64_t used_all = st.hbm_used;

		ASSERT_EQ(0, moem_place_add(&o.place, "experts=0-7:cpu"));
		ASSERT_EQ(0, run(&o, &wl, true, &half, &st)) TH_LOG("%s", moem_last_error());
		check_run(_metadata, &ref, &half, "experts=0-7:cpu, all of HBM");
		EXPECT_LT(half.total.cpu_experts, half.total.active);
		EXPECT_EQ(half.total.active, half.total.hits + half.total.cpu_experts);
		EXPECT_EQ(used_all, 2 * st.hbm_used);
		EXPECT_EQ(24u, st.cpu_placed);
	}
	/* the cost model would send cold experts to the CPU; gpu rules keep them */
	o = base_opts(self);
	o.hbm_budget = self->expert_bytes / 4;
	o.exec_hybrid = true;
	o.cpu_gbps = 1000;
	ASSERT_EQ(0, run(&o, &wl, true, &rs, NULL)) TH_LOG("%s", moem_last_error());
	check_run(_metadata, &ref, &rs, "exec hybrid, no rules");
	ASSERT_EQ(0, moem_place_add(&o.place, "layers=*:gpu"));
	ASSERT_EQ(0, run(&o, &wl, true, &rs, NULL)) TH_LOG("%s", moem_last_error());
	EXPECT_STREQ(ref.digest_hex, rs.digest_hex);
	EXPECT_EQ(0u, rs.total.cpu_experts);
	EXPECT_GT(rs.total.misses, 0u);
	/* every expert on the CPU by rule: nothing reaches HBM */
	o.place.n = 0;
	ASSERT_EQ(0, moem_place_add(&o.place, "layers=1,experts=*:auto"));
	ASSERT_EQ(0, moem_place_add(&o.place, "experts=0-15:cpu"));
	o.exec_hybrid = false;
	ASSERT_EQ(0, run(&o, &wl, true, &rs, &st)) TH_LOG("%s", moem_last_error());
	check_run(_metadata, &ref, &rs, "layers 0 and 2 on the CPU, 1 auto under exec gpu");
	EXPECT_EQ(lay.total.active, rs.total.active);
	EXPECT_LT(rs.total.cpu_experts, rs.total.active);
	o.place.n = 0;
	ASSERT_EQ(0, moem_place_add(&o.place, "experts=0-15:cpu"));
	ASSERT_EQ(0, run(&o, &wl, true, &rs, &st)) TH_LOG("%s", moem_last_error());
	check_run(_metadata, &ref, &rs, "experts=0-15:cpu");
	EXPECT_EQ(rs.total.active, rs.total.cpu_experts);
	EXPECT_EQ(0u, rs.total.bytes_h2d);
	EXPECT_EQ(0u, st.hbm_used);
}

/* The simulator resolves the same rules with the engine's code and decides alike. */
TEST_F(hyb, simulator_honours_place_rules)
{
	static const char *const rules[] = {"layers=0,experts=0-7:cpu", "layers=1,experts=4-11:gpu",
					    "layers=2,experts=15:cpu"};
	char *trace = st_path(self->dir, "place.trace");
	struct moem_engine_opts o = base_opts(self);
	struct moem_workload w = wl;
	struct moem_run_stats rs;
	struct moem_engine_status st;
	struct moem_sim_cost c;
	struct moem_sim_policy sp;
	struct moem_sim_opts so = {0};
	struct moem_sim_result r;
	struct moem_engine *e;

	o.evict = "lru";
	o.prefetch = "none";
	o.hbm_budget = self->expert_bytes / 4;
	o.trace_out = trace;
	o.lockstep = true;
	o.link_gbps = 10000;
	o.link_lat_us = -1;
	o.exec_hybrid = true;
	o.cpu_gbps = 5000;
	o.cpu_token_ns = 30;
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(rules); i++)
		ASSERT_EQ(0, moem_place_add(&o.place, rules[i]));
	w.batch = 4;
	w.steps = 24;
	ASSERT_EQ(0, moem_engine_open(&o, &e)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_engine_run(e, &w, NULL, NULL, &rs)) TH_LOG("%s", moem_last_error());
	moem_engine_get_status(e, &st);
	moem_engine_close(e);

	ASSERT_EQ(0, st_sim_cost_for_trace(trace, &c));
	c.cost.link_gbps = 1e4;
	c.cost.cpu_gbps = o.cpu_gbps;
	c.cost.cpu_token_ns = o.cpu_token_ns;
	c.exec_hybrid = true;
	c.place = o.place;
	ASSERT_EQ(0, moem_sim_cost_finish(&c));
	st_sim_engine_hbm(&c, st.hbm_budget);
	c.dram_bytes = 48 * c.expert_bytes[MOEM_PREC_BF16];
	c.dram_cold = true;
	ASSERT_EQ(0, moem_sim_policy_parse("lru", &sp));
	ASSERT_EQ(0, moem_sim_run(trace, &c, &sp, &so, &r)) TH_LOG("%s", moem_last_error());
	TH_LOG("on the CPU engine %llu sim %llu; hits engine %llu sim %llu",
	       (unsigned long long)rs.total.cpu_experts, (unsigned long long)r.cpu_experts,
	       (unsigned long long)rs.total.hits, (unsigned long long)r.hits);
	EXPECT_GT(rs.total.cpu_experts, 0u);
	EXPECT_GT(rs.total.misses, 0u);
	EXPECT_EQ(rs.total.cpu_experts, r.cpu_experts);
	EXPECT_EQ(rs.total.hits, r.hits);
	/* without the rules the decisions differ: the rules are what both followed */
	c.place.n = 0;
	ASSERT_EQ(0, moem_sim_run(trace, &c, &sp, &so, &r)) TH_LOG("%s", moem_last_error());
	EXPECT_NE(rs.total.cpu_experts, r.cpu_experts);
	/* a rule beyond the trace's model, or one that matches nothing */
	ASSERT_EQ(0, moem_place_add(&c.place, "layers=3:cpu"));
	EXPECT_EQ(-EINVAL, moem_sim_run(trace, &c, &sp, &so, &r));
	EXPECT_MSG("MoE layer 3 is beyond the model's 3");
	c.place.n = 0;
	ASSERT_EQ(0, moem_place_add(&c.place, "layers=*:gpu"));
	ASSERT_EQ(0, moem_place_add(&c.place, "experts=3:cpu"));
	EXPECT_EQ(-EINVAL, moem_sim_run(trace, &c, &sp, &so, &r));
	EXPECT_MSG("'experts=3:cpu' matches nothing");
	/* cpu rules need the CPU's throughput, as --cpu-moe-layers */
	c.place.n = 0;
	ASSERT_EQ(0, moem_place_add(&c.place, "experts=3:cpu"));
	c.exec_hybrid = false;
	c.cost.cpu_gbps = 0;
	EXPECT_EQ(-EINVAL, moem_sim_run(trace, &c, &sp, &so, &r));
	EXPECT_MSG("need the CPU's throughput");
	free(trace);
}

/*
 * The calibration cache: the engine takes the CPU figures from it when it
 * describes this machine (CPU model, threads, ISA) and has the served
 * precision; a corrupt file, another version, another machine or a cache
 * without the precision is ignored (the engine measures, and opens);
 * --cpu-gbps wins over the cache.
 */
TEST_F(hyb, calibration_cache)
{
	struct moem_engine_opts o = base_opts(self);
	struct moem_backend_opts bo = {.threads = o.threads};
	struct moem_backend_info bi;
	struct moem_backend *be;
	struct moem_engine_status st;
	struct moem_run_stats rs;
	struct moem_calib c, other;
	char *path = st_path(self->dir, "cache/calibration.json");
	char *bad = st_path(self->dir, "bad.json");
	FILE *f;

	ASSERT_EQ(0, moem_backend_open("cpu", &bo, &be));
	moem_backend_get_info(be, &bi);
	moem_backend_close(be);
	ASSERT_EQ(0, moem_calib_machine(bi.threads, bi.isa, &c));
	c.hidden = 64; /* the model's experts are 128 x 128: 4x the weights */
	c.inter = 64;
	c.cpu[MOEM_PREC_BF16] = (struct moem_calib_cpu){true, 123.5, 20};
	ASSERT_EQ(0, moem_calib_write(path, &c)) TH_LOG("%s", moem_last_error());
	o.exec_hybrid = true;
	o.hbm_budget = self->expert_bytes / 4;
	o.calibration = path;
	ASSERT_EQ(0, run(&o, &wl, true, &rs, &st)) TH_LOG("%s", moem_last_error());
	EXPECT_STREQ("cache", st.cpu_from);
	EXPECT_EQ(123.5, st.cpu_gbps);
	EXPECT_EQ(80u, st.cpu_token_ns);
	/* --cpu-gbps overrides it */
	o.cpu_gbps = 7;
	ASSERT_EQ(0, run(&o, &wl, false, &rs, &st)) TH_LOG("%s", moem_last_error());
	EXPECT_STREQ("given", st.cpu_from);
	EXPECT_EQ(7.0, st.cpu_gbps);
	o.cpu_gbps = 0;
	/* another machine, a cache without bf16: measured */
	other = c;
	snprintf(other.cpu_model, sizeof(other.cpu_model), "Another CPU");
	ASSERT_EQ(0, moem_calib_write(bad, &other));
	o.calibration = bad;
	ASSERT_EQ(0, run(&o, &wl, false, &rs, &st)) TH_LOG("%s", moem_last_error());
	EXPECT_STREQ("measured", st.cpu_from);
	other = c;
	other.threads++;
	ASSERT_EQ(0, moem_calib_write(bad, &other));
	ASSERT_EQ(0, run(&o, &wl, false, &rs, &st)) TH_LOG("%s", moem_last_error());
	EXPECT_STREQ("measured", st.cpu_from);
	other = c;
	other.cpu[MOEM_PREC_BF16].valid = false;
	other.cpu[MOEM_PREC_Q4] = (struct moem_calib_cpu){true, 50, 10};
	ASSERT_EQ(0, moem_calib_write(bad, &other));
	ASSERT_EQ(0, run(&o, &wl, false, &rs, &st)) TH_LOG("%s", moem_last_error());
	EXPECT_STREQ("measured", st.cpu_from);
	/* corrupt, another version, missing, "none": measured, never an error */
	f = fopen(bad, "w");
	ASSERT_NE(NULL, f);
	fputs("{\"format\":\"moem-calibration\",\"vers", f);
	fclose(f);
	ASSERT_EQ(0, run(&o, &wl, false, &rs, &st)) TH_LOG("%s", moem_last_error());
	EXPECT_STREQ("measured", st.cpu_from);
	f = fopen(bad, "w");
	ASSERT_NE(NULL, f);
	fputs("{\"format\":\"moem-calibration\",\"version\":2}", f);
	fclose(f);
	ASSERT_EQ(0, run(&o, &wl, false, &rs, &st)) TH_LOG("%s", moem_last_error());
	EXPECT_STREQ("measured", st.cpu_from);
	unlink(bad);
	ASSERT_EQ(0, run(&o, &wl, false, &rs, &st)) TH_LOG("%s", moem_last_error());
	EXPECT_STREQ("measured", st.cpu_from);
	o.calibration = "none";
	ASSERT_EQ(0, run(&o, &wl, false, &rs, &st)) TH_LOG("%s", moem_last_error());
	EXPECT_STREQ("measured", st.cpu_from);
	EXPECT_GT(st.cpu_gbps, 0);
	free(path);
	free(bad);
}

/* Live switches from inside a run: the step callback is on the engine thread. */
struct live {
	struct moem_engine *e;
	uint32_t switch_at;
	int set_ret;
	uint64_t cpu[16];
};

static int live_step(void *arg, const struct moem_step_stats *s)
{
	struct live *l = arg;

	if (s->step < 16)
		l->cpu[s->step] = s->cpu_experts;
	if (s->step == l->switch_at)
		l->set_ret = moem_engine_set_hybrid(l->e, true, 0);
	return 0;
}

/*
 * exec and cpu_moe_layers change on an open engine: at once between runs,
 * at the next layer boundary during one; a change that cannot apply is
 * refused with a message and changes nothing.
 */
TEST_F(hyb, live_switches)
{
	struct moem_engine_opts o = base_opts(self);
	struct moem_run_stats ref, rs, lay;
	struct moem_engine_status st;
	struct moem_engine *e;
	struct live l = {0};
	struct moem_workload w = wl;

	ASSERT_EQ(0, run(&o, &wl, true, &ref, NULL)) TH_LOG("%s", moem_last_error());
	o.hbm_budget = self->expert_bytes / 4;
	o.cpu_moe_layers = 2;
	ASSERT_EQ(0, run(&o, &wl, true, &lay, NULL)) TH_LOG("%s", moem_last_error());
	o.cpu_moe_layers = 0;
	o.cpu_gbps = 1000;

	/* no executor at open: exec hybrid opens it between runs */
	ASSERT_EQ(0, moem_engine_open(&o, &e)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_engine_warmup(e, NULL));
	moem_engine_get_status(e, &st);
	EXPECT_STREQ("gpu", st.exec);
	EXPECT_EQ(0, st.cpu_gbps);
	ASSERT_EQ(0, moem_engine_set_hybrid(e, true, 0)) TH_LOG("%s", moem_last_error());
	moem_engine_get_status(e, &st);
	EXPECT_STREQ("hybrid", st.exec);
	EXPECT_EQ(1000.0, st.cpu_gbps);
	ASSERT_EQ(0, moem_engine_run(e, &wl, NULL, NULL, &rs)) TH_LOG("%s", moem_last_error());
	check_run(_metadata, &ref, &rs, "exec hybrid set live");
	/* cpu_moe_layers 2 alone: what opening with it computes on the CPU */
	ASSERT_EQ(0, moem_engine_set_hybrid(e, false, 2)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_engine_run(e, &wl, NULL, NULL, &rs)) TH_LOG("%s", moem_last_error());
	check_run(_metadata, &ref, &rs, "cpu-moe-layers 2 set live");
	EXPECT_EQ(lay.total.cpu_experts, rs.total.cpu_experts);
	moem_engine_get_status(e, &st);
	EXPECT_EQ(2u, st.cpu_moe_layers);
	EXPECT_EQ(32u, st.cpu_placed);
	EXPECT_GT(st.last_cpu_experts, 0u);
	EXPECT_GT(st.last_cpu_ns, 0u);
	/* refused: beyond the model; nothing changes */
	EXPECT_EQ(-EINVAL, moem_engine_set_hybrid(e, true, 4));
	EXPECT_MSG("--cpu-moe-layers 4: the model has 3 MoE layers");
	moem_engine_get_status(e, &st);
	EXPECT_STREQ("gpu", st.exec);
	EXPECT_EQ(2u, st.cpu_moe_layers);
	/* back to the device alone: nothing on the CPU, the same outputs */
	ASSERT_EQ(0, moem_engine_set_hybrid(e, false, 0));
	ASSERT_EQ(0, moem_engine_run(e, &wl, NULL, NULL, &rs)) TH_LOG("%s", moem_last_error());
	EXPECT_STREQ(ref.digest_hex, rs.digest_hex);
	EXPECT_EQ(0u, rs.total.cpu_experts);
	/* during a run: from the step after the change */
	w.steps = 8;
	l.e = e;
	l.switch_at = 3;
	ASSERT_EQ(0, moem_engine_run(e, &w, live_step, &l, &rs)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(0, l.set_ret) TH_LOG("%s", moem_last_error());
	for (uint32_t i = 0; i <= 3; i++) {
		EXPECT_EQ(0u, l.cpu[i]) TH_LOG("step %u", i);
	}
	EXPECT_GT(l.cpu[4] + l.cpu[5] + l.cpu[6] + l.cpu[7], 0u);
	moem_engine_close(e);

	/* an executor that must open while a run holds the engine: refused, the run goes on */
	o.cpu_gbps = 1000;
	ASSERT_EQ(0, moem_engine_open(&o, &e)) TH_LOG("%s", moem_last_error());
	l = (struct live){.e = e, .switch_at = 1};
	ASSERT_EQ(0, moem_engine_run(e, &w, live_step, &l, &rs)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(-EBUSY, l.set_ret);
	EXPECT_EQ(0u, rs.total.cpu_experts);
	EXPECT_EQ(8u, rs.total.step);
	moem_engine_get_status(e, &st);
	EXPECT_STREQ("gpu", st.exec);
	moem_engine_close(e);

	/* more experts on the CPU than DRAM holds a layer of: refused */
	o.dram_budget = self->expert_bytes / 8;
	ASSERT_EQ(0, moem_engine_open(&o, &e)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(-ENOSPC, moem_engine_set_hybrid(e, false, 1));
	EXPECT_MSG("below one layer's experts");
	moem_engine_get_status(e, &st);
	EXPECT_EQ(0u, st.cpu_moe_layers);
	ASSERT_EQ(0, moem_engine_run(e, &wl, NULL, NULL, &rs)) TH_LOG("%s", moem_last_error());
	EXPECT_STREQ(ref.digest_hex, rs.digest_hex);
	moem_engine_close(e);

	/* ... and the other way round: the DRAM budget lowered under placed
	 * experts (accepted before, then every step failed), live and at open */
	o.dram_budget = 0;
	o.cpu_moe_layers = 1;
	ASSERT_EQ(0, moem_engine_open(&o, &e)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(-ENOSPC, moem_engine_set_knob(e, MOEM_BUDGET_DRAM_BYTES, self->expert_bytes / 8));
	EXPECT_MSG("the smallest DRAM budget is one layer's experts");
	ASSERT_EQ(0, moem_engine_run(e, &wl, NULL, NULL, &rs)) TH_LOG("%s", moem_last_error());
	moem_engine_close(e);
	o.dram_budget = self->expert_bytes / 8;
	EXPECT_EQ(-ENOSPC, moem_engine_open(&o, &e));
	o.cpu_moe_layers = 0;
	o.dram_budget = 0;

	/* a --cpu-moe-layers value the rules leave nothing to */
	o = base_opts(self);
	ASSERT_EQ(0, moem_place_add(&o.place, "layers=0:gpu"));
	ASSERT_EQ(0, moem_engine_open(&o, &e)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(-EINVAL, moem_engine_set_hybrid(e, false, 1));
	EXPECT_MSG("--cpu-moe-layers 1 matches nothing");
	moem_engine_close(e);
}

TEST_F(hyb, bad_input)
{
	struct moem_engine_opts o = base_opts(self);
	struct moem_engine_args a;
	struct moem_engine *e;

	o.cpu_moe_layers = 4; /* the model has 3 MoE layers */
	EXPECT_EQ(-EINVAL, moem_engine_open(&o, &e));
	EXPECT_MSG("--cpu-moe-layers 4: the model has 3 MoE layers");
	o.cpu_moe_layers = 0;
	o.exec_hybrid = true;
	o.hbm_mode = "uvm";
	EXPECT_EQ(-EINVAL, moem_engine_open(&o, &e));
	moem_engine_args_init(&a);
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "exec", "cpu"));
	EXPECT_MSG("exec 'cpu': want gpu or hybrid");
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "cpu-moe-layers", "-1"));
	EXPECT_MSG("cpu-moe-layers '-1'");
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "cpu-moe-layers", "2x"));
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "cpu-gbps", "0"));
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "cpu-gbps", "fast"));
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "cpu-token-ns", "-3"));
	EXPECT_FALSE(a.o.exec_hybrid);
	EXPECT_EQ(0u, a.o.cpu_moe_layers);
	EXPECT_EQ(0, moem_engine_args_set(&a, "exec", "hybrid"));
	EXPECT_EQ(0, moem_engine_args_set(&a, "cpu-moe-layers", "3"));
	EXPECT_EQ(0, moem_engine_args_set(&a, "cpu-gbps", "12.5"));
	EXPECT_TRUE(a.o.exec_hybrid);
	EXPECT_EQ(3u, a.o.cpu_moe_layers);
	EXPECT_EQ(12.5, a.o.cpu_gbps);
	/* --place: appended in order; a bad rule changes nothing */
	EXPECT_EQ(0, moem_engine_args_set(&a, "place", "layers=0:cpu"));
	EXPECT_EQ(-EINVAL, moem_engine_args_set(&a, "place", "layers=0"));
	EXPECT_MSG("place 'layers=0': no ':'");
	EXPECT_EQ(0, moem_engine_args_set(&a, "place", "experts=3-4:gpu"));
	EXPECT_EQ(2u, a.o.place.n);
	EXPECT_EQ(MOEM_PLACE_GPU, a.o.place.r[1].where);
	moem_engine_args_free(&a);
	/* rules are checked against the model at open */
	o = base_opts(self);
	ASSERT_EQ(0, moem_place_add(&o.place, "layers=0,experts=16:cpu"));
	EXPECT_EQ(-EINVAL, moem_engine_open(&o, &e));
	EXPECT_MSG("expert 16 is beyond the model's 16 per layer (0-15)");
	o.place.n = 0;
	ASSERT_EQ(0, moem_place_add(&o.place, "layers=0-2:gpu"));
	o.cpu_moe_layers = 1;
	EXPECT_EQ(-EINVAL, moem_engine_open(&o, &e));
	EXPECT_MSG("--cpu-moe-layers 1 matches nothing");
}

TEST_HARNESS_MAIN
