// SPDX-License-Identifier: GPL-2.0-only
/*
 * The eBPF route tracer (bpf.h) attached to this very process while the
 * engine runs in it: moem_hot equals the engine's own per-(layer, expert)
 * counts exactly, the ring buffer's records equal the trace the engine
 * writes, a full ring buffer loses records but is counted and leaves
 * moem_hot exact, the engine's hotness "bpf" loads (and falls back when
 * BPF is not permitted), bad options are refused with a message, and
 * without CAP_BPF+CAP_PERFMON everything says so. Tests that load BPF
 * skip where it is not permitted (not root, container, built without).
 */
#include <errno.h>
#include <linux/capability.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <moem/bpf.h>
#include <moem/engine.h>
#include <moem/log.h>
#include <moem/pack.h>
#include <moem/trace.h>

#include "kselftest_harness.h"
#include "store_test_util.h"

#define N_EXPERTS 16
#define TOP_K	  4
#define BATCH	  8
#define STEPS	  12

FIXTURE(bpf)
{
	char *dir, *model, *pack, *trace;
	uint32_t n_moe;
};

FIXTURE_SETUP(bpf)
{
	struct moem_mkmodel_opts mo;
	struct moem_pack_opts po = {0};

	moem_log_set_level(MOEM_LOG_ERR);
	self->dir = st_tmpdir();
	self->model = st_path(self->dir, "model");
	self->pack = st_path(self->dir, "m.moem");
	self->trace = st_path(self->dir, "e.trace");
	st_tiny_opts(&mo, MOEM_ARCH_QWEN3_MOE, self->model);
	mo.cfg.n_experts = N_EXPERTS;
	mo.cfg.top_k = TOP_K;
	mo.cfg.hidden = 128;
	mo.cfg.moe_inter = 128;
	ASSERT_EQ(0, moem_mkmodel(&mo)) TH_LOG("%s", moem_last_error());
	self->n_moe = moem_n_moe_layers(&mo.cfg);
	po.model_dir = self->model;
	po.out_path = self->pack;
	po.prec_mask = (1u << MOEM_PREC_BF16) | (1u << MOEM_PREC_Q4);
	po.threads = 2;
	ASSERT_EQ(0, moem_pack_write(&po)) TH_LOG("%s", moem_last_error());
}

FIXTURE_TEARDOWN(bpf)
{
	st_rm_rf(self->dir);
	free(self->dir);
	free(self->model);
	free(self->pack);
	free(self->trace);
}

static struct moem_engine_opts eng_opts(FIXTURE_DATA(bpf) * self)
{
	struct moem_engine_opts o = {0};

	o.pack_path = self->pack;
	o.backend = "cpu";
	o.threads = 2;
	o.pool.provider = MOEM_POOL_THP;
	o.hi = MOEM_PREC_BF16;
	return o;
}

static const struct moem_workload wl = {.kind = MOEM_WL_SYNTH, .batch = BATCH, .steps = STEPS};

/* Records as the ring buffer delivered them. */
struct got {
	uint64_t step[1024];
	uint32_t layer[1024], tokens[1024], flags[1024];
	int32_t ids[1024][BATCH * TOP_K];
	float w[1024][BATCH * TOP_K];
	uint32_t n;
	bool bad_shape;
};

static int collect(void *arg, const struct moem_bpf_route_rec *r)
{
	struct got *g = arg;

	if (g->n == 1024 || r->k != TOP_K || r->tokens != BATCH || r->n_experts != N_EXPERTS ||
	    r->pid != (uint32_t)getpid()) {
		g->bad_shape = true;
		return 0;
	}
	g->step[g->n] = r->step;
	g->layer[g->n] = r->layer;
	g->tokens[g->n] = r->tokens;
	g->flags[g->n] = r->flags;
	memcpy(g->ids[g->n], r->ids, sizeof(g->ids[0]));
	memcpy(g->w[g->n], r->w, sizeof(g->w[0]));
	g->n++;
	return 0;
}

struct poller {
	struct moem_bpf_route *r;
	struct got *g;
};

/* Drain the ring buffer after every step, as `moem trace record` would. */
static int on_step(void *arg, const struct moem_step_stats *s)
{
	struct poller *p = arg;
	int ret = moem_bpf_route_poll(p->r, 0, collect, p->g);

	return ret < 0 ? ret : 0;
}

/* Open a tracer on this process, or say why the test cannot. */
static int open_self(struct moem_bpf_route_opts *o, struct moem_bpf_route **r)
{
	o->pid = getpid();
	if (!moem_bpf_built() || moem_bpf_check_perm())
		return -EPERM;
	return moem_bpf_route_open(o, r);
}

static const char *why_no_bpf(void)
{
	return moem_bpf_built() ? moem_last_error() : "libmoem was built without BPF";
}

#define SKIP_UNLESS_BPF(ret)                                                      \
	do {                                                                      \
		if ((ret) == -EPERM || (ret) == -EOPNOTSUPP)                      \
			SKIP(return, "BPF not permitted here: %s", why_no_bpf()); \
	} while (0)

static void expect_counts_equal(struct __test_metadata *_metadata, struct moem_engine *e,
				struct moem_bpf_route *r, uint64_t want_total)
{
	uint32_t L, N;
	uint64_t *eng, *hot, total = 0;

	moem_engine_moe_shape(e, &L, &N);
	eng = calloc((size_t)L * N, sizeof(*eng));
	hot = calloc((size_t)L * N, sizeof(*hot));
	ASSERT_TRUE(eng && hot);
	moem_engine_expert_counts(e, eng);
	ASSERT_EQ(0, moem_bpf_hot_read_dense(r, L, N, hot)) TH_LOG("%s", moem_last_error());
	for (size_t i = 0; i < (size_t)L * N; i++) {
		EXPECT_EQ(eng[i], hot[i]) TH_LOG("layer %zu expert %zu", i / N, i % N);
		total += eng[i];
	}
	/* Plain top-k routes every token to k experts in every MoE layer. */
	EXPECT_EQ(want_total, total);
	free(eng);
	free(hot);
}

TEST_F(bpf, self_trace_equals_engine)
{
	struct moem_bpf_route_opts ro = {.records = true, .io = true};
	struct moem_engine_opts o = eng_opts(self);
	struct moem_bpf_route_stats st;
	struct moem_trace_reader *tr;
	struct moem_trace_rec rec;
	struct moem_bpf_route *r = NULL;
	struct moem_engine *e;
	struct got *g = calloc(1, sizeof(*g));
	struct poller p = {NULL, g};
	uint32_t i = 0;
	int ret;

	ASSERT_NE(NULL, g);
	ret = open_self(&ro, &r);
	SKIP_UNLESS_BPF(ret);
	ASSERT_EQ(0, ret) TH_LOG("%s", moem_last_error());
	p.r = r;
	o.trace_out = self->trace;
	ASSERT_EQ(0, moem_engine_open(&o, &e)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_engine_warmup(e, NULL));
	ASSERT_EQ(0, moem_engine_run(e, &wl, on_step, &p, NULL)) TH_LOG("%s", moem_last_error());
	while ((ret = moem_bpf_route_poll(r, 0, collect, g)) > 0)
		;
	ASSERT_EQ(0, ret);
	EXPECT_FALSE(g->bad_shape);
	expect_counts_equal(_metadata, e, r, (uint64_t)STEPS * BATCH * TOP_K * self->n_moe);

	ASSERT_EQ(0, moem_bpf_route_stats(r, &st));
	EXPECT_EQ((uint64_t)STEPS * self->n_moe, st.routes);
	EXPECT_EQ(st.routes, st.records);
	EXPECT_EQ(0, st.dropped_ring + st.dropped_big + st.read_fail + st.hot_fail);
	EXPECT_LT(0, st.fetches); /* warm-up staged every expert */
	EXPECT_EQ(st.records, g->n);

	/* The trace the engine wrote, record by record, bit for bit. */
	ASSERT_EQ(0, moem_trace_open(self->trace, &tr)) TH_LOG("%s", moem_last_error());
	while ((ret = moem_trace_next(tr, &rec)) == 1) {
		ASSERT_LT(i, g->n);
		EXPECT_EQ(rec.step, g->step[i]);
		EXPECT_EQ(rec.layer, g->layer[i]);
		EXPECT_EQ(rec.tokens, g->tokens[i]);
		EXPECT_EQ(0, memcmp(rec.ids, g->ids[i], sizeof(g->ids[0])));
		EXPECT_EQ(0, memcmp(rec.w, g->w[i], sizeof(g->w[0])));
		EXPECT_EQ(MOEM_TRACE_F_SYNTHETIC, g->flags[i]);
		i++;
	}
	EXPECT_EQ(0, ret);
	EXPECT_EQ(g->n, i);
	moem_trace_close(tr);
	moem_engine_close(e);
	moem_bpf_route_close(r);
	free(g);
}

TEST_F(bpf, full_ring_drops_are_counted)
{
	/* One page: 7 records of 64 ids fit; nobody reads during the run. */
	struct moem_bpf_route_opts ro = {.records = true, .ring_bytes = 4096};
	struct moem_engine_opts o = eng_opts(self);
	struct moem_bpf_route_stats st;
	struct moem_bpf_route *r = NULL;
	struct moem_engine *e;
	struct got *g = calloc(1, sizeof(*g));
	int ret;

	ASSERT_NE(NULL, g);
	ret = open_self(&ro, &r);
	SKIP_UNLESS_BPF(ret);
	ASSERT_EQ(0, ret) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_engine_open(&o, &e)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_engine_run(e, &wl, NULL, NULL, NULL)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_bpf_route_stats(r, &st));
	EXPECT_EQ((uint64_t)STEPS * self->n_moe, st.routes);
	EXPECT_LT(0, st.dropped_ring);
	EXPECT_LT(0, st.records);
	EXPECT_EQ(st.routes, st.records + st.dropped_ring);
	while ((ret = moem_bpf_route_poll(r, 0, collect, g)) > 0)
		;
	EXPECT_EQ(st.records, g->n);
	/* Counting never depends on the ring buffer. */
	expect_counts_equal(_metadata, e, r, (uint64_t)STEPS * BATCH * TOP_K * self->n_moe);
	moem_engine_close(e);
	moem_bpf_route_close(r);
	free(g);
}

TEST_F(bpf, engine_hotness_bpf)
{
	struct moem_engine_opts o = eng_opts(self);
	struct moem_engine_status st;
	struct moem_engine *e;

	if (!moem_bpf_built() || moem_bpf_check_perm())
		SKIP(return, "BPF not permitted here: %s", why_no_bpf());
	o.hotness = "bpf";
	o.lo = MOEM_PREC_Q4;
	o.two_prec = true;
	o.precision = "dynaexq";
	ASSERT_EQ(0, moem_engine_open(&o, &e)) TH_LOG("%s", moem_last_error());
	moem_engine_get_status(e, &st);
	if (strcmp(st.hotness, "bpf")) {
		moem_engine_close(e);
		SKIP(return, "BPF not permitted here: hotness %s", st.hotness);
	}
	ASSERT_EQ(0, moem_engine_run(e, &wl, NULL, NULL, NULL)) TH_LOG("%s", moem_last_error());
	moem_engine_get_status(e, &st);
	EXPECT_STREQ("bpf", st.hotness);
	moem_engine_close(e);

	o.hotness = "gpu";
	EXPECT_EQ(-EINVAL, moem_engine_open(&o, &e));
	EXPECT_NE(NULL, strstr(moem_last_error(), "engine or bpf"));
}

/* Drop CAP_SYS_ADMIN, CAP_BPF and CAP_PERFMON from this (forked) test. */
static int drop_caps(void)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];

	if (syscall(SYS_capget, &h, d))
		return -errno;
	d[CAP_SYS_ADMIN >> 5].effective &= ~(1u << (CAP_SYS_ADMIN & 31));
	d[38 >> 5].effective &= ~(1u << (38 & 31)); /* CAP_PERFMON */
	d[39 >> 5].effective &= ~(1u << (39 & 31)); /* CAP_BPF */
	return syscall(SYS_capset, &h, d) ? -errno : 0;
}

TEST_F(bpf, without_privileges)
{
	struct moem_bpf_route_opts ro = {.records = true, .pid = getpid()};
	struct moem_engine_opts o = eng_opts(self);
	struct moem_engine_status st;
	struct moem_bpf_route *r = NULL;
	struct moem_bpf_pool *p = NULL;
	struct moem_engine *e;

	/* Without the programs, that is the first thing to say. */
	const int want = moem_bpf_built() ? -EPERM : -EOPNOTSUPP;

	ASSERT_EQ(0, drop_caps());
	EXPECT_EQ(-EPERM, moem_bpf_check_perm());
	EXPECT_STREQ(MOEM_BPF_PERM_MSG, moem_last_error());
	EXPECT_EQ(want, moem_bpf_route_open(&ro, &r));
	if (want == -EPERM)
		EXPECT_STREQ(MOEM_BPF_PERM_MSG, moem_last_error());
	EXPECT_EQ(want, moem_bpf_pool_open(&p));
	EXPECT_EQ(NULL, r);
	EXPECT_EQ(NULL, p);

	/* The runtime never needs BPF: hotness "bpf" falls back to its own counts. */
	o.hotness = "bpf";
	ASSERT_EQ(0, moem_engine_open(&o, &e)) TH_LOG("%s", moem_last_error());
	moem_engine_get_status(e, &st);
	EXPECT_EQ(0, strncmp(st.hotness, "engine (bpf refused", 19)) TH_LOG("%s", st.hotness);
	EXPECT_EQ(0, moem_engine_run(e, &wl, NULL, NULL, NULL));
	moem_engine_close(e);
}

TEST(bad_options)
{
	struct moem_bpf_route_opts o = {.records = true};
	struct moem_bpf_route *r = NULL;
	pid_t gone;

	if (!moem_bpf_built() || moem_bpf_check_perm())
		SKIP(return, "BPF not permitted here: %s", why_no_bpf());
	o.pid = getpid();
	o.ring_bytes = 5000;
	EXPECT_EQ(-EINVAL, moem_bpf_route_open(&o, &r));
	EXPECT_NE(NULL, strstr(moem_last_error(), "power of two"));
	o.ring_bytes = 0;
	o.pid = 0;
	EXPECT_EQ(-EINVAL, moem_bpf_route_open(&o, &r));
	o.pid = -1;
	EXPECT_EQ(-EINVAL, moem_bpf_route_open(&o, &r)); /* every process, of which binary? */
	gone = fork();
	ASSERT_LE(0, gone);
	if (!gone)
		_exit(0);
	ASSERT_EQ(gone, waitpid(gone, NULL, 0));
	o.pid = gone;
	EXPECT_EQ(-ESRCH, moem_bpf_route_open(&o, &r));
	o.pid = getpid();
	o.binary = "/nonexistent/moem";
	EXPECT_EQ(-ENOENT, moem_bpf_route_open(&o, &r));
	/* A program without libmoem has no moem probes. */
	o.binary = "/bin/sh";
	EXPECT_EQ(-ENOENT, moem_bpf_route_open(&o, &r));
	EXPECT_NE(NULL, strstr(moem_last_error(), "no moem:route probe"))
	TH_LOG("%s", moem_last_error());
	EXPECT_EQ(NULL, r);
}

TEST(pool_needs_the_module)
{
	struct moem_bpf_pool *p = NULL;
	int ret;

	if (!access("/sys/kernel/tracing/events/moem", F_OK) ||
	    !access("/sys/kernel/debug/tracing/events/moem", F_OK))
		SKIP(return, "moem.ko is loaded here (the guest test covers the tracer)");
	if (!moem_bpf_built() || moem_bpf_check_perm())
		SKIP(return, "BPF not permitted here: %s", why_no_bpf());
	ret = moem_bpf_pool_open(&p);
	EXPECT_EQ(-ENOENT, ret);
	EXPECT_TRUE(strstr(moem_last_error(), "moem.ko is not loaded") ||
		    strstr(moem_last_error(), "tracefs is not mounted"))
	TH_LOG("%s", moem_last_error());
	EXPECT_EQ(NULL, p);
}

TEST(pool_event_text)
{
	struct moem_bpf_pool_ev e = {.type = MOEM_BPF_POOL_REGION_CREATE,
				     .id = 3,
				     .a = 4194304,
				     .b = 1,
				     .c = 0600,
				     .d = 0,
				     .name = "w"};
	char buf[256];

	moem_bpf_pool_format(&e, buf, sizeof(buf));
	EXPECT_STREQ("name=w id=3 size=4194304 flags=0x1 mode=0600 uid=0", buf);
	e.type = MOEM_BPF_POOL_CHUNK_FREE;
	e.a = 0x1200;
	e.b = 0;
	e.c = 2;
	moem_bpf_pool_format(&e, buf, sizeof(buf));
	EXPECT_STREQ("region=3 pfn=0x1200 node=0 to=pinned", buf);
	EXPECT_STREQ("budget_change", moem_bpf_pool_type_name(MOEM_BPF_POOL_BUDGET_CHANGE));
	EXPECT_STREQ("?", moem_bpf_pool_type_name(MOEM_BPF_POOL_NR));
}

TEST(counts_text)
{
	const uint64_t dense[2][3] = {{0, 7, 0}, {12345678901ULL, 0, 1}};
	const struct moem_hot_entry ent[] = {
		{0, 1, 7}, {1, 0, 12345678901ULL}, {1, 1, 0}, {1, 2, 1}};
	const char want[] = "# moem expert counts: layer expert count (MoE-layer index, non-zero "
			    "only)\n0 1 7\n1 0 12345678901\n1 2 1\n";
	char *dir = st_tmpdir(), *a = st_path(dir, "a.txt"), *b = st_path(dir, "b.txt");
	size_t la = 0, lb = 0;
	char *ta, *tb;

	ASSERT_EQ(0, moem_expert_counts_write(a, &dense[0][0], 2, 3));
	ASSERT_EQ(0, moem_hot_entries_write(b, ent, 4));
	ta = st_read_file(a, &la);
	tb = st_read_file(b, &lb);
	ASSERT_TRUE(ta && tb);
	EXPECT_EQ(strlen(want), la);
	EXPECT_EQ(0, memcmp(want, ta, la));
	EXPECT_EQ(la, lb);
	EXPECT_EQ(0, memcmp(ta, tb, la));
	/* An unwritable place fails cleanly and leaves nothing behind. */
	EXPECT_EQ(-ENOENT, moem_expert_counts_write("/nonexistent/dir/x", &dense[0][0], 2, 3));
	EXPECT_EQ(2, st_count_entries(dir));
	free(ta);
	free(tb);
	st_rm_rf(dir);
	free(a);
	free(b);
	free(dir);
}

TEST_HARNESS_MAIN
