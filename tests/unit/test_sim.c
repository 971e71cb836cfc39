// SPDX-License-Identifier: GPL-2.0-only
/*
 * The simulator: same trace and seed give the same numbers; the Belady
 * preset reaches exactly the offline MIN bound and no demand-paging
 * policy beats it; HBM use never exceeds the budget; DynaExq never
 * stalls; cache-aware order never adds stall; E[T] on uniform routing;
 * OEA T equals pruned top-k0 T; the stall floor (MIN's loads at the
 * link's rate less compute) on a trace worked out by hand; exclusive
 * DRAM's copy-back rule; clear errors
 * for what cannot run.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/route.h>
#include <moem/sim.h>
#include <moem/trace.h>

#include "kselftest_harness.h"

static char dir[64];

static void __attribute__((constructor)) setup_dir(void)
{
	strcpy(dir, "/tmp/moem-sim-XXXXXX");
	if (!mkdtemp(dir))
		abort();
}

/* A small synthetic trace (8 MoE layers, 32 experts, top-4) with logits. */
static const char *trace(struct __test_metadata *_metadata, const char *name, uint32_t B,
			 uint64_t steps, bool uniform)
{
	static char path[8][128];
	static int i;
	struct moem_trace_gen_opts o = {.batch = B, .steps = steps, .logits = true};
	struct moem_trace_writer *w;
	struct moem_trace_info in;

	i = (i + 1) % 8;
	snprintf(path[i], sizeof(path[i]), "%s/%s", dir, name);
	if (access(path[i], F_OK) == 0)
		return path[i];
	moem_synth_defaults(&o.synth, 8, 32, 4, 77);
	if (uniform) {
		o.synth.zipf_s = 0;
		o.synth.layer_corr = 0;
		o.synth.persist = 0;
		o.synth.drift = 0;
	}
	moem_trace_gen_info(&o, &in);
	EXPECT_EQ(0, moem_trace_writer_open(path[i], &in, &w));
	EXPECT_EQ(0, moem_trace_gen(&o, w, NULL, NULL));
	EXPECT_EQ(0, moem_trace_writer_close(w));
	return path[i];
}

static void cost(struct moem_sim_cost *c, double pct)
{
	moem_sim_cost_default(c);
	c->hidden = 256; /* small experts: quick runs, same model */
	c->inter = 128;
	moem_sim_cost_finish(c);
	c->hbm_bytes = (uint64_t)(pct / 100 * 8 * 32 * c->expert_bytes[MOEM_PREC_BF16]);
}

static int run(const char *tr, const char *spec, const struct moem_sim_cost *c,
	       const struct moem_sim_opts *o, struct moem_sim_result *r)
{
	struct moem_sim_policy p;
	int ret = moem_sim_policy_parse(spec, &p);

	return ret ? ret : moem_sim_run(tr, c, &p, o, r);
}

TEST(policy_parse)
{
	struct moem_sim_policy p;

	ASSERT_EQ(0, moem_sim_policy_parse("expertflow", &p));
	EXPECT_EQ(MOEM_SIM_CACHE, p.mode);
	EXPECT_EQ(MOEM_EVICT_LRU2, p.evict.kind);
	EXPECT_TRUE(p.prefetch);
	EXPECT_TRUE(p.pf.adaptive);
	EXPECT_TRUE(p.ordered);
	ASSERT_EQ(0, moem_sim_policy_parse("prefetch-fixed:S=7,evict=lru", &p));
	EXPECT_FALSE(p.pf.adaptive);
	EXPECT_EQ(7u, p.pf.S);
	EXPECT_EQ(MOEM_EVICT_LRU, p.evict.kind);
	ASSERT_EQ(0, moem_sim_policy_parse("lru:route=lynx,alpha=1,beta=2", &p));
	EXPECT_STREQ("lynx:alpha=1,beta=2", p.route);
	ASSERT_EQ(0, moem_sim_policy_parse("moem", &p));
	EXPECT_EQ(0.3, p.pf.q_min);
	ASSERT_EQ(0, moem_sim_policy_parse("moem:prefetch=none", &p));
	EXPECT_FALSE(p.prefetch);
	ASSERT_EQ(0, moem_sim_policy_parse("dynaexq:hi=q4,lo=q2,n_hi=3", &p));
	EXPECT_EQ(MOEM_SIM_DYNAEXQ, p.mode);
	EXPECT_TRUE(p.dx_pair_given);
	EXPECT_TRUE(p.dx_n_hi_given);
	ASSERT_EQ(0, moem_sim_policy_parse("fluxmoe:theta=0.8", &p));
	EXPECT_EQ(0.8, p.pg.theta);
	EXPECT_EQ(-EINVAL, moem_sim_policy_parse("lru:S=4", &p)); /* no prefetch key on lru */
	EXPECT_NE(NULL, strstr(moem_last_error(), "no parameters"));
	EXPECT_EQ(-EINVAL, moem_sim_policy_parse("dynaexq:W=2", &p));
	EXPECT_EQ(-EINVAL, moem_sim_policy_parse("belady:route=piggyback", &p));
	EXPECT_EQ(-EINVAL, moem_sim_policy_parse("lru:route=lynx:alpha=1", &p));
	EXPECT_EQ(-EINVAL, moem_sim_policy_parse("mru", &p));
	ASSERT_EQ(0, moem_sim_policy_parse("belady:look=16,fb=pred,gran=step", &p));
	EXPECT_EQ(MOEM_SIM_BELADY, p.mode);
	EXPECT_EQ(16u, p.oracle_look);
	EXPECT_EQ(MOEM_SIM_FB_PRED, p.oracle_fb);
	EXPECT_TRUE(p.oracle_step);
	EXPECT_EQ(-EINVAL, moem_sim_policy_parse("belady:fb=mru", &p));
	EXPECT_NE(NULL, strstr(moem_last_error(), "fb=mru"));
	EXPECT_EQ(-EINVAL, moem_sim_policy_parse("belady:gran=layer", &p));
	EXPECT_EQ(-EINVAL, moem_sim_policy_parse("lru:look=4", &p)); /* an oracle's key */
}

TEST(deterministic)
{
	const char *tr = trace(_metadata, "det.trace", 4, 60, false);
	struct moem_sim_opts o = {.seed = 1};
	struct moem_sim_result a, b;
	struct moem_sim_cost c;
	const char *pols[] = {"lru", "moem", "expertflow", "dynaexq", "fluxmoe", "belady"};

	cost(&c, 25);
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(pols); i++) {
		ASSERT_EQ(0, run(tr, pols[i], &c, &o, &a))
		TH_LOG("%s: %s", pols[i], moem_last_error());
		ASSERT_EQ(0, run(tr, pols[i], &c, &o, &b));
		ASSERT_EQ(0, memcmp(&a, &b, sizeof(a))) TH_LOG("%s differs", pols[i]);
	}
	/* jitter draws from the seed: another seed, other numbers; same seed, same */
	c.jitter = 0.3;
	ASSERT_EQ(0, run(tr, "lru", &c, &o, &a));
	ASSERT_EQ(0, run(tr, "lru", &c, &o, &b));
	EXPECT_EQ(0, memcmp(&a, &b, sizeof(a)));
	o.seed = 2;
	ASSERT_EQ(0, run(tr, "lru", &c, &o, &b));
	EXPECT_NE(a.stall_ns, b.stall_ns);
	EXPECT_EQ(a.hits, b.hits); /* timing only: the same decisions */
}

/* Belady preset == MIN bound; demand policies never above it; budgets hold. */
TEST(belady_bound_and_budgets)
{
	const char *tr = trace(_metadata, "bound.trace", 4, 80, false);
	struct moem_sim_opts o = {.warmup_steps = 5};
	const double pcts[] = {10, 25, 50};
	struct moem_sim_result r;
	struct moem_sim_cost c;

	for (size_t b = 0; b < MOEM_ARRAY_SIZE(pcts); b++) {
		const char *pols[] = {"lru", "lru2", "lfu", "pred", "lru:order=cache-aware"};

		cost(&c, pcts[b]);
		ASSERT_EQ(0, run(tr, "belady", &c, &o, &r));
		EXPECT_EQ(r.hit_rate, r.belady_hit_rate);
		EXPECT_LE(r.hbm_peak, c.hbm_bytes);
		TH_LOG("%.0f%%: Belady %.4f", pcts[b], r.belady_hit_rate);
		for (size_t i = 0; i < MOEM_ARRAY_SIZE(pols); i++) {
			ASSERT_EQ(0, run(tr, pols[i], &c, &o, &r));
			EXPECT_LE(r.hit_rate, r.belady_hit_rate + 1e-12) TH_LOG("%s", pols[i]);
			EXPECT_LE(r.hbm_peak, c.hbm_bytes) TH_LOG("%s", pols[i]);
			EXPECT_EQ(r.accesses, r.hits + (r.accesses - r.hits));
			TH_LOG("  %s %.4f", pols[i], r.hit_rate);
		}
		for (const char *p = "expertflow"; p; p = strcmp(p, "moem") ? "moem" : NULL) {
			ASSERT_EQ(0, run(tr, p, &c, &o, &r));
			EXPECT_LE(r.hbm_peak, c.hbm_bytes) TH_LOG("%s", p);
			EXPECT_GT(r.belady_hit_rate, 0);
		}
	}
}

/*
 * The restricted oracles (what a policy with that much of the future can
 * reach): a lookahead past the trace's end is MIN itself, decision for
 * decision; any restriction is still demand paging, so never above MIN.
 */
TEST(restricted_oracles)
{
	const char *tr = trace(_metadata, "bound.trace", 4, 80, false);
	struct moem_sim_opts o = {.warmup_steps = 5};
	const char *pols[] = {
		"belady:look=1",    "belady:look=8,fb=lfu",	"belady:look=8,fb=pred",
		"belady:gran=step", "belady:gran=step,fb=pred", "belady:look=1,fb=pred"};
	struct moem_sim_result r, min;
	struct moem_sim_cost c;

	cost(&c, 25);
	ASSERT_EQ(0, run(tr, "belady", &c, &o, &min));
	ASSERT_EQ(0, run(tr, "belady:look=100000", &c, &o, &r));
	EXPECT_EQ(min.hits, r.hits);
	ASSERT_EQ(0, run(tr, "belady:look=100000,fb=pred", &c, &o, &r));
	EXPECT_EQ(min.hits, r.hits);
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(pols); i++) {
		ASSERT_EQ(0, run(tr, pols[i], &c, &o, &r))
		TH_LOG("%s: %s", pols[i], moem_last_error());
		EXPECT_LE(r.hit_rate, r.belady_hit_rate + 1e-12) TH_LOG("%s", pols[i]);
		EXPECT_EQ(min.belady_hit_rate, r.belady_hit_rate);
		EXPECT_LE(r.hbm_peak, c.hbm_bytes) TH_LOG("%s", pols[i]);
		TH_LOG("%s %.4f (MIN %.4f)", pols[i], r.hit_rate, min.hit_rate);
	}
}

TEST(cache_aware_order_never_adds_stall)
{
	const char *tr = trace(_metadata, "order.trace", 8, 60, false);
	struct moem_sim_opts o = {0};
	struct moem_sim_result a, b;
	struct moem_sim_cost c;

	cost(&c, 20);
	ASSERT_EQ(0, run(tr, "lru", &c, &o, &a));
	ASSERT_EQ(0, run(tr, "lru:order=cache-aware", &c, &o, &b));
	EXPECT_EQ(a.hits, b.hits);
	EXPECT_EQ(a.bytes_pcie, b.bytes_pcie);
	EXPECT_LE(b.stall_ns, a.stall_ns);
	EXPECT_LT(b.stall_ns, a.stall_ns); /* resident experts ran while misses landed */
	EXPECT_EQ(a.compute_ns, b.compute_ns);
}

TEST(full_budget_no_stall_after_warmup)
{
	const char *tr = trace(_metadata, "det.trace", 4, 60, false);
	struct moem_sim_opts o = {.warmup_steps = 59};
	struct moem_sim_result r;
	struct moem_sim_cost c;

	cost(&c, 100);
	/* by the last step everything used before is resident: few misses */
	ASSERT_EQ(0, run(tr, "lru", &c, &o, &r));
	EXPECT_EQ(1u, r.steps);
	EXPECT_GT(r.hit_rate, 0.8);
	EXPECT_EQ(r.hit_rate, r.belady_hit_rate);
}

TEST(dynaexq_never_stalls)
{
	const char *tr = trace(_metadata, "det.trace", 4, 60, false);
	struct moem_sim_opts o = {0};
	struct moem_sim_result r;
	struct moem_sim_cost c;

	cost(&c, 40);
	ASSERT_EQ(0, run(tr, "dynaexq:interval_ms=0.05", &c, &o, &r))
	TH_LOG("%s", moem_last_error());
	EXPECT_EQ(0u, r.stall_ns);
	EXPECT_EQ(r.accesses, r.hits);
	EXPECT_GT(r.hi_frac, 0.1); /* 3 of 32 experts per layer, the hot ones */
	EXPECT_LE(r.hbm_peak, c.hbm_bytes);
	EXPECT_GT(r.bytes_other, 0u); /* promotions moved */
	TH_LOG("%s: hi %.3f", r.detail, r.hi_frac);
	/* too small for every expert in q2: refused with a reason */
	cost(&c, 10);
	EXPECT_EQ(-ENOSPC, run(tr, "dynaexq", &c, &o, &r));
	EXPECT_NE(NULL, strstr(moem_last_error(), "low precision"));
}

TEST(fluxmoe_window)
{
	const char *tr = trace(_metadata, "det.trace", 4, 60, false);
	struct moem_sim_opts o = {0};
	struct moem_sim_result r;
	struct moem_sim_cost c;

	cost(&c, 50);
	ASSERT_EQ(0, run(tr, "fluxmoe", &c, &o, &r));
	EXPECT_LE(r.hbm_peak, c.hbm_bytes);
	EXPECT_GT(r.hit_rate, 0);
	TH_LOG("%s: hit %.3f", r.detail, r.hit_rate);
	/* below two layers' window it still runs: the window only sizes the
	 * resident set, and what is left is a cache (issue 17: never refused
	 * for lack of a window, never below LRU) */
	cost(&c, 5);
	ASSERT_EQ(0, run(tr, "fluxmoe", &c, &o, &r)) TH_LOG("%s", moem_last_error());
	EXPECT_LE(r.hbm_peak, c.hbm_bytes);
}

TEST(routing_policies_in_sim)
{
	const char *tr = trace(_metadata, "route.trace", 16, 40, false);
	struct moem_sim_opts o = {0};
	struct moem_sim_result r, v;
	struct moem_sim_cost c;
	double last = 1e9;

	cost(&c, 25);
	ASSERT_EQ(0, run(tr, "lru", &c, &o, &v));
	for (uint32_t k0 = 4; k0 >= 1; k0--) {
		char a[64], b[64];

		snprintf(a, sizeof(a), "lru:route=oea,k0=%u", k0);
		snprintf(b, sizeof(b), "lru:route=prune,k0=%u", k0);
		ASSERT_EQ(0, run(tr, a, &c, &o, &r));
		ASSERT_EQ(0, run(tr, b, &c, &o, &v));
		EXPECT_EQ(r.mean_T, v.mean_T) TH_LOG("k0 %u", k0);
		EXPECT_LE(r.mean_T, last);
		last = r.mean_T;
	}
	ASSERT_EQ(0, run(tr, "lru:route=lynx", &c, &o, &r));
	ASSERT_EQ(0, run(tr, "lru", &c, &o, &v));
	EXPECT_LT(r.mean_T, v.mean_T);
}

/*
 * A model that routes within expert groups (DeepSeek-V2): its trace says
 * so, and the simulator's re-routing keeps every token to its groups, as
 * the engine does: the mean T of "route=oea,k0=k" (each token's own top-k)
 * equals group-limited top-k's computed here from the trace's logits, and
 * differs from the same trace routed without groups.
 */
TEST(routing_within_groups_in_sim)
{
	struct moem_trace_gen_opts g = {.batch = 8, .steps = 30, .logits = true};
	const struct moem_route_cfg rc = {32, 4, true, 1.0f, 0, 8, 2};
	struct moem_sim_opts o = {0};
	struct moem_trace_writer *w;
	struct moem_trace_reader *rd;
	struct moem_trace_info in;
	struct moem_trace_rec rec;
	struct moem_sim_result r, flat;
	struct moem_sim_cost c;
	char path[128], plain[128];
	double want = 0;
	uint64_t n = 0;
	int ret;

	moem_synth_defaults(&g.synth, 8, 32, 4, 78);
	moem_trace_gen_info(&g, &in);
	snprintf(plain, sizeof(plain), "%s/plain.trace", dir);
	ASSERT_EQ(0, moem_trace_writer_open(plain, &in, &w));
	ASSERT_EQ(0, moem_trace_gen(&g, w, NULL, NULL));
	ASSERT_EQ(0, moem_trace_writer_close(w));
	in.n_group = 8;
	in.topk_group = 2;
	snprintf(path, sizeof(path), "%s/groups.trace", dir);
	ASSERT_EQ(0, moem_trace_writer_open(path, &in, &w));
	ASSERT_EQ(0, moem_trace_gen(&g, w, NULL, NULL));
	ASSERT_EQ(0, moem_trace_writer_close(w));

	ASSERT_EQ(0, moem_trace_open(path, &rd));
	EXPECT_EQ(8u, moem_trace_reader_info(rd)->n_group);
	EXPECT_EQ(2u, moem_trace_reader_info(rd)->topk_group);
	while ((ret = moem_trace_next(rd, &rec)) > 0) {
		int32_t ids[8 * 4];
		float wt[8 * 4];
		uint32_t cnt[8];
		struct moem_route_out out = {ids, wt, cnt};

		ASSERT_EQ(0, moem_route_topk(&rc, rec.tokens, rec.logits, NULL, &out));
		want += moem_route_active(&rc, rec.tokens, &out, NULL);
		n++;
	}
	ASSERT_EQ(0, ret);
	moem_trace_close(rd);
	cost(&c, 25);
	ASSERT_EQ(0, run(path, "lru:route=oea,k0=4", &c, &o, &r)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, run(plain, "lru:route=oea,k0=4", &c, &o, &flat));
	TH_LOG("mean T: groups %.4f (here %.4f), without %.4f", r.mean_T, want / n, flat.mean_T);
	EXPECT_LT(fabs(r.mean_T - want / n), 1e-9);
	EXPECT_NE(r.mean_T, flat.mean_T);
	/* a header whose groups cannot route is refused */
	in.topk_group = 9;
	snprintf(path, sizeof(path), "%s/badgroups.trace", dir);
	EXPECT_EQ(-EINVAL, moem_trace_writer_open(path, &in, &w));
	EXPECT_NE(NULL, strstr(moem_last_error(), "topk_group 9"));
}

TEST(uniform_expected_t)
{
	const char *tr = trace(_metadata, "uni.trace", 8, 200, true);
	struct moem_sim_opts o = {0};
	struct moem_sim_result r;
	struct moem_sim_cost c;
	double want = 32 * (1 - pow(1 - 4.0 / 32, 8));

	cost(&c, 25);
	ASSERT_EQ(0, run(tr, "lru", &c, &o, &r));
	TH_LOG("E[T] %.3f, simulated mean T %.3f", want, r.mean_T);
	EXPECT_LT(fabs(r.mean_T - want) / want, 0.02);
}

TEST(errors)
{
	const char *tr = trace(_metadata, "det.trace", 4, 60, false);
	struct moem_trace_gen_opts g = {.batch = 2, .steps = 5, .logits = false};
	struct moem_trace_writer *w;
	struct moem_trace_info in;
	struct moem_sim_opts o = {0};
	struct moem_sim_result r;
	struct moem_sim_cost c;
	char nolog[128], bad[128];
	FILE *f;

	cost(&c, 25);
	/* re-routing needs logits */
	snprintf(nolog, sizeof(nolog), "%s/nolog.trace", dir);
	moem_synth_defaults(&g.synth, 8, 32, 4, 1);
	moem_trace_gen_info(&g, &in);
	ASSERT_EQ(0, moem_trace_writer_open(nolog, &in, &w));
	ASSERT_EQ(0, moem_trace_gen(&g, w, NULL, NULL));
	ASSERT_EQ(0, moem_trace_writer_close(w));
	EXPECT_EQ(-EINVAL, run(nolog, "oea", &c, &o, &r));
	EXPECT_NE(NULL, strstr(moem_last_error(), "logits"));
	EXPECT_EQ(0, run(nolog, "lru", &c, &o, &r));
	/* one expert runs, as in the engine (what ran gives its slot up);
	 * less is refused with the smallest budget that runs */
	c.hbm_bytes = c.expert_bytes[MOEM_PREC_BF16];
	EXPECT_EQ(0, run(tr, "lru", &c, &o, &r)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(0, run(tr, "moem", &c, &o, &r)) TH_LOG("%s", moem_last_error());
	c.hbm_bytes--;
	EXPECT_EQ(-ENOSPC, run(tr, "lru", &c, &o, &r));
	EXPECT_NE(NULL, strstr(moem_last_error(), "smallest"));
	/* a corrupt trace is a trace error, not a crash */
	snprintf(bad, sizeof(bad), "%s/bad.trace", dir);
	f = fopen(bad, "wb");
	ASSERT_NE(NULL, f);
	{
		FILE *src = fopen(tr, "rb");
		char buf[4096];
		size_t n = fread(buf, 1, sizeof(buf), src);

		buf[n / 2] ^= 1;
		fwrite(buf, 1, n, f);
		fclose(src);
	}
	fclose(f);
	cost(&c, 25);
	EXPECT_EQ(-EBADMSG, run(bad, "lru", &c, &o, &r));
	EXPECT_EQ(-ENOENT, run("/nonexistent/x.trace", "lru", &c, &o, &r));
	/* a warm-up that takes every step is an error, not all-zero results */
	o.warmup_steps = 60;
	EXPECT_EQ(-ERANGE, run(tr, "lru", &c, &o, &r));
	EXPECT_NE(NULL, strstr(moem_last_error(), "only 60 steps"));
	o.max_steps = 10;
	o.warmup_steps = 10;
	EXPECT_EQ(-ERANGE, run(tr, "moem", &c, &o, &r));
	EXPECT_NE(NULL, strstr(moem_last_error(), "within --steps"));
	o.warmup_steps = 9;
	EXPECT_EQ(0, run(tr, "lru", &c, &o, &r)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(1u, r.steps);
}

/*
 * The stall floor on a trace small enough to work out by hand: 2 MoE
 * layers of 2 experts, top-1, one token, 4 steps; the token takes expert
 * 0 of both layers on even steps and expert 1 on odd ones. Keys in tick
 * order: a b c d a b c d (a = L0E0, b = L1E0, c = L0E1, d = L1E1). With 2
 * slots Belady MIN misses a, b, c (evicts b: used at tick 5, a at 4), d
 * (evicts c: used at 6), hits a, misses b (evicts a: never used again),
 * misses c (evicts b), hits d: 6 loads. The floor is 6 expert loads at
 * the link's rate less the run's compute, 8 layers of layer_ns + one
 * expert read from HBM + one (token, expert) pair.
 */
TEST(stall_bound_by_hand)
{
	struct moem_trace_info in = {
		.flags = 0, .n_layers = 2, .n_experts = 2, .top_k = 1, .max_tokens = 1};
	const char *pols[] = {"lru", "lru2", "lfu", "pred", "belady", "moem", "prefetch-fixed"};
	struct moem_sim_opts o = {0};
	struct moem_trace_writer *w;
	struct moem_sim_result r;
	struct moem_sim_cost c;
	char path[128];
	uint64_t size, compute, bound;
	double load;

	snprintf(path, sizeof(path), "%s/hand.trace", dir);
	ASSERT_EQ(0, moem_trace_writer_open(path, &in, &w));
	for (uint64_t st = 0; st < 4; st++)
		for (uint32_t l = 0; l < 2; l++) {
			int32_t id = (int32_t)(st % 2);
			float wt = 1.0f;
			struct moem_trace_rec rec = {
				.step = st, .layer = l, .tokens = 1, .ids = &id, .w = &wt};

			ASSERT_EQ(0, moem_trace_write(w, &rec)) TH_LOG("%s", moem_last_error());
		}
	ASSERT_EQ(0, moem_trace_writer_close(w));

	moem_sim_cost_default(&c);
	c.hidden = 256;
	c.inter = 128;
	c.cost.link_gbps = 1; /* 1 byte per ns: a load costs its size in ns */
	c.cost.layer_ns = 1000;
	c.cost.token_ns = 20;
	ASSERT_EQ(0, moem_sim_cost_finish(&c));
	size = c.expert_bytes[MOEM_PREC_BF16];
	c.hbm_bytes = 2 * size;
	load = (double)size / c.cost.link_gbps;
	compute = 8 * (1000 + (uint64_t)((double)size / c.cost.hbm_gbps + 0.5) + 20);
	ASSERT_GT(6 * load, (double)compute); /* the link, not compute, is the limit */
	bound = (uint64_t)(6 * load - (double)compute + 0.5);
	EXPECT_EQ(bound, moem_cost_stall_bound_ns(&c.cost, 6 * size, compute));

	ASSERT_EQ(0, run(path, "belady", &c, &o, &r)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(2u, r.hits);
	EXPECT_EQ(8u, r.accesses);
	EXPECT_EQ(6 * size, r.min_bytes);
	EXPECT_EQ(compute, r.compute_ns);
	EXPECT_EQ(bound, r.stall_bound_ns);
	/* every policy, MIN's own schedule included, stalls at least the floor */
	for (size_t i = 0; i < sizeof(pols) / sizeof(pols[0]); i++) {
		ASSERT_EQ(0, run(path, pols[i], &c, &o, &r)) TH_LOG("%s", moem_last_error());
		EXPECT_EQ(bound, r.stall_bound_ns) TH_LOG("%s", pols[i]);
		EXPECT_GE(r.stall_ns, r.stall_bound_ns) TH_LOG("%s", pols[i]);
		EXPECT_EQ((double)r.stall_ns / (double)bound, r.stall_x_bound)
		TH_LOG("%s", pols[i]);
	}
	/* LRU on this cycle misses every use: 8 loads on a link that has to
	 * finish each before its layer runs */
	ASSERT_EQ(0, run(path, "lru", &c, &o, &r));
	EXPECT_EQ(0u, r.hits);
	EXPECT_GT(r.stall_x_bound, 1.2);
	/* a link fast enough for compute to hide MIN's loads: no floor, no ratio */
	c.cost.link_gbps = 6.0 * (double)size / (double)compute * 2;
	ASSERT_EQ(0, run(path, "belady", &c, &o, &r));
	EXPECT_EQ(0u, r.stall_bound_ns);
	EXPECT_EQ(0, r.stall_x_bound);
	EXPECT_EQ(0u, moem_cost_stall_bound_ns(&c.cost, 6 * size, compute));
}

/*
 * Exclusive DRAM's rule (cost.h): copy back when reuse_p times the NVMe
 * read it saves exceeds the write-back. At link 25 and NVMe 7 GB/s a
 * read from NVMe costs bytes/7 against bytes/25 from DRAM, a saving of
 * 18/175 ns per byte, and the write-back bytes/25: worth it above
 * reuse_p = 7/18 = 0.3889.
 */
TEST(copy_back_rule)
{
	const uint64_t b = 9u << 20;
	struct moem_cost c;

	moem_cost_default(&c);
	EXPECT_FALSE(moem_cost_copy_back(&c, b, 0));
	EXPECT_FALSE(moem_cost_copy_back(&c, b, 0.38));
	EXPECT_TRUE(moem_cost_copy_back(&c, b, 0.40));
	EXPECT_TRUE(moem_cost_copy_back(&c, b, 1));
	/* a slower device -> host direction raises the bar: 2 x 7/18 */
	c.d2h_gbps = 12.5;
	EXPECT_FALSE(moem_cost_copy_back(&c, b, 0.77));
	EXPECT_TRUE(moem_cost_copy_back(&c, b, 0.79));
	/* NVMe as fast as the link saves nothing: never */
	c.d2h_gbps = 0;
	c.nvme_gbps = c.link_gbps;
	EXPECT_FALSE(moem_cost_copy_back(&c, b, 1));
}

/*
 * Hybrid execution's call cost: the layer's first CPU expert pays
 * cpu_call_ns, the later ones share its call. Link 25 GB/s and a CPU at
 * 50 GB/s: a 25 MB expert is 1 ms on the link (+8.3 us on the GPU), 0.5
 * ms on the CPU, 1.5 ms with a 1 ms call.
 */
TEST(exec_call_cost)
{
	const uint64_t b = 25000000;
	struct moem_exec_queue q = {0};
	struct moem_cost c;

	moem_cost_default(&c);
	c.cpu_gbps = 50;
	c.cpu_token_ns = 10;
	/* no call cost: the CPU at once */
	EXPECT_EQ(MOEM_EXEC_CPU, moem_cost_exec(&c, b, 1, false, true, 0));
	EXPECT_EQ(MOEM_EXEC_CPU, moem_cost_exec_next(&c, &q, b, 1, false, true, 0, false));
	c.cpu_call_ns = 1000000;
	EXPECT_EQ(MOEM_EXEC_GPU, moem_cost_exec(&c, b, 1, false, true, 0));
	q = (struct moem_exec_queue){0};
	/* 1.5 ms against 1.008: the link; then 1.5 against 2.008: the CPU */
	EXPECT_EQ(MOEM_EXEC_GPU, moem_cost_exec_next(&c, &q, b, 1, false, true, 0, false));
	EXPECT_EQ(1000000u, q.link_ns);
	EXPECT_EQ(MOEM_EXEC_CPU, moem_cost_exec_next(&c, &q, b, 1, false, true, 0, false));
	EXPECT_EQ(1500000u, q.cpu_ns);
	EXPECT_EQ(1u, q.cpu_n);
	/* the call is made: 2.0 against 2.008, the CPU again, for its reads alone */
	EXPECT_EQ(MOEM_EXEC_CPU, moem_cost_exec_next(&c, &q, b, 1, false, true, 0, false));
	EXPECT_EQ(2000000u, q.cpu_ns);
	/* forced onto the CPU: counted in the queue, call included if first */
	q = (struct moem_exec_queue){0};
	EXPECT_EQ(MOEM_EXEC_CPU, moem_cost_exec_next(&c, &q, b, 1, false, true, 0, true));
	EXPECT_EQ(1500000u, q.cpu_ns);
	c.cpu_call_ns = 1000000001; /* above a second */
	EXPECT_EQ(-EINVAL, moem_cost_check(&c));
}

/*
 * Hybrid execution with a CPU far faster than the link: every miss is
 * computed on the CPU, and an expert computed there is brought into HBM
 * behind its layer while the link is idle (moem_driver_exec_keep()). Before
 * that, HBM stayed as empty as it started (no hits at all), and a faster
 * CPU gave a longer step than a slower one.
 */
TEST(hybrid_cpu_experts_enter_hbm_behind_the_layer)
{
	const char *tr = trace(_metadata, "hyb.trace", 1, 80, false);
	struct moem_sim_opts o = {.warmup_steps = 40};
	struct moem_sim_result r;
	struct moem_sim_cost c;

	cost(&c, 25);
	c.exec_hybrid = true;
	c.cost.cpu_gbps = 5000; /* 200 x the link: the CPU wins every miss */
	c.cost.cpu_token_ns = 1;
	ASSERT_EQ(0, run(tr, "lru", &c, &o, &r)) TH_LOG("%s", moem_last_error());
	TH_LOG("hit rate %.3f, %llu on the CPU, %llu bytes to HBM, %llu brought behind", r.hit_rate,
	       (unsigned long long)r.cpu_experts, (unsigned long long)r.bytes_pcie,
	       (unsigned long long)r.pf_issued);
	EXPECT_GT(r.cpu_experts, 0u);
	EXPECT_GT(r.bytes_pcie, 0u);
	EXPECT_GT(r.pf_issued, 0u);
	EXPECT_GT(r.hits, 0u);
	EXPECT_GT(r.hit_rate, 0.5);
}

TEST(cleanup)
{
	char cmd[96];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ASSERT_EQ(0, system(cmd));
}

TEST_HARNESS_MAIN
