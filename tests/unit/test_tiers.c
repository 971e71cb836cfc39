// SPDX-License-Identifier: GPL-2.0-only
/*
 * The tier state machine on the emulated device: every acquired version
 * holds exactly its own bytes (never a partial copy), budgets hold, the
 * write-after-read rule for recycled slots, shrink and grow at any time,
 * load failures, and a randomized stress with loads completing in random
 * order and budgets changing from another thread, checking all invariants
 * after every layer.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/rng.h>
#include <moem/tiers.h>
#include <moem/util.h>

#include "kselftest_harness.h"

/* ---- a stager that completes in random order from its own thread -------- */

struct job {
	uint32_t l, e, pi;
	uint8_t *dst;
	uint64_t bytes;
	void (*done)(void *, int);
	void *arg;
	struct job *next;
};

struct rstager {
	struct moem_stager s;
	pthread_t th;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct job *jobs;
	uint32_t n;
	int stop;
	int fail_layer; /* loads of this layer fail with -EIO (-1: none) */
	struct moem_rng rng;
	uint64_t loads;
};

static uint8_t pattern(uint32_t l, uint32_t e, uint32_t pi, uint64_t i)
{
	return (uint8_t)(l * 131 + e * 31 + pi * 7 + i * 13 + (i >> 9));
}

static void *stager_thread(void *arg)
{
	struct rstager *r = arg;

	pthread_mutex_lock(&r->lock);
	while (!r->stop || r->jobs) {
		struct job **pp, *j;
		uint32_t k;

		if (!r->jobs) {
			pthread_cond_wait(&r->cond, &r->lock);
			continue;
		}
		/* take a random pending job: completions come in any order */
		k = moem_rng_below(&r->rng, r->n);
		for (pp = &r->jobs; k--; pp = &(*pp)->next)
			;
		j = *pp;
		*pp = j->next;
		r->n--;
		pthread_mutex_unlock(&r->lock);
		usleep(moem_rng_below(&r->rng, 200));
		for (uint64_t i = 0; i < j->bytes; i++)
			j->dst[i] = pattern(j->l, j->e, j->pi, i);
		j->done(j->arg, (int)j->l == r->fail_layer ? -EIO : 0);
		free(j);
		pthread_mutex_lock(&r->lock);
		r->loads++;
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

static int stager_read(struct moem_stager *s, uint32_t l, uint32_t e, uint32_t pi, void *dst,
		       uint64_t bytes, void (*done)(void *, int), void *arg)
{
	struct rstager *r = (struct rstager *)s;
	struct job *j = calloc(1, sizeof(*j));

	if (!j)
		return -ENOMEM;
	*j = (struct job){l, e, pi, dst, bytes, done, arg, NULL};
	pthread_mutex_lock(&r->lock);
	j->next = r->jobs;
	r->jobs = j;
	r->n++;
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&r->lock);
	return 0;
}

static void stager_init(struct rstager *r, uint64_t seed)
{
	memset(r, 0, sizeof(*r));
	r->s.read = stager_read;
	r->fail_layer = -1;
	moem_rng_seed(&r->rng, seed, 9);
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	pthread_create(&r->th, NULL, stager_thread, r);
}

static void stager_fini(struct rstager *r)
{
	pthread_mutex_lock(&r->lock);
	r->stop = 1;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->th, NULL);
}

/* ---- fixture ------------------------------------------------------------- */

#define L	 4
#define N	 16
#define HI_BYTES (5 * 65536 + 1234)
#define LO_BYTES (2 * 65536 + 100)

FIXTURE(tiers)
{
	struct moem_tierdev *dev;
	struct rstager st;
	struct moem_evictor *hev, *dev_ev;
	struct moem_tiers *t;
	uint8_t *pool;
	uint64_t pool_bytes;
	/* NUMA nodes the pool is cut into for the tiers (0: one, as before) */
	uint32_t n_nodes;
	uint64_t node_off[2];
};

static int make(struct __test_metadata *_metadata, FIXTURE_DATA(tiers) * self, uint64_t hbm,
		uint64_t dram, bool fallback, bool manual)
{
	struct moem_emu_opts eo = {.link_gbps = 50,
				   .link_lat_us = 2,
				   .granularity = 1 << 20,
				   .manual_compute = manual};
	struct moem_tiers_cfg c = {
		.n_layers = L,
		.n_experts = N,
		.n_prec = 2,
		.bytes = {HI_BYTES, LO_BYTES},
		.hbm_budget = hbm,
		.dram_budget = dram,
		.allow_fallback = fallback,
		.xfer = {.piece_bytes = 128 << 10},
		.n_nodes = self->n_nodes,
		.node_id = {0, 1},
		.node_off = {self->node_off[0], self->node_off[1]},
	};

	ASSERT_EQ(0, moem_tierdev_emu_create(&eo, &self->dev));
	ASSERT_EQ(0, moem_evictor_lru_create(L * N * 2, &self->hev));
	ASSERT_EQ(0, moem_evictor_lru_create(L * N * 2, &self->dev_ev));
	self->pool_bytes = 64 << 20;
	self->pool = aligned_alloc(4096, self->pool_bytes);
	return moem_tiers_create(&c, self->dev, self->pool, self->pool_bytes, &self->st.s,
				 self->hev, self->dev_ev, &self->t);
}

FIXTURE_SETUP(tiers)
{
	stager_init(&self->st, 42);
	self->t = NULL;
}

FIXTURE_TEARDOWN(tiers)
{
	moem_tiers_destroy(self->t);
	stager_fini(&self->st);
	if (self->hev) {
		self->hev->destroy(self->hev);
		self->dev_ev->destroy(self->dev_ev);
		self->dev->ops->destroy(self->dev);
	}
	free(self->pool);
}

static void expect_content(struct __test_metadata *_metadata, struct moem_tiers *t,
			   const struct moem_xref *r)
{
	const uint8_t *p = moem_tiers_host_view(t, r);
	uint64_t n = r->pi ? LO_BYTES : HI_BYTES;

	ASSERT_NE(NULL, p);
	for (uint64_t i = 0; i < n; i++) {
		if (p[i] != pattern(r->layer, r->expert, r->pi, i)) {
			ASSERT_EQ(pattern(r->layer, r->expert, r->pi, i), p[i])
			TH_LOG("(%u,%u,%u) byte %llu", r->layer, r->expert, r->pi,
			       (unsigned long long)i);
		}
	}
}

/* Acquire, wait if needed, check bytes; returns the ACQ result. */
static int get(struct __test_metadata *_metadata, struct moem_tiers *t, uint32_t l, uint32_t e,
	       struct moem_xref *r)
{
	int ret = moem_tiers_acquire(t, l, e, r);

	if (ret == MOEM_ACQ_PENDING) {
		EXPECT_EQ(0, moem_tiers_wait(t, r)) TH_LOG("%s", moem_last_error());
	}
	return ret;
}

TEST_F(tiers, miss_then_hit_and_bytes)
{
	struct moem_xref r;
	struct moem_tiers_stats s;
	uint64_t seq;

	ASSERT_EQ(0, make(_metadata, self, 8 << 20, 16 << 20, false, false));
	EXPECT_EQ(MOEM_ACQ_PENDING, get(_metadata, self->t, 1, 3, &r));
	expect_content(_metadata, self->t, &r);
	seq = self->dev->ops->compute_mark(self->dev);
	moem_tiers_release(self->t, &r, 1, seq);
	EXPECT_EQ(MOEM_ACQ_HIT, get(_metadata, self->t, 1, 3, &r));
	expect_content(_metadata, self->t, &r);
	moem_tiers_release(self->t, &r, 1, self->dev->ops->compute_mark(self->dev));
	moem_tiers_get_stats(self->t, &s);
	EXPECT_EQ(1u, s.hits);
	EXPECT_EQ(1u, s.misses);
	/* The miss found nothing staged: a DRAM miss too. */
	EXPECT_EQ(1u, s.dram_misses);
	EXPECT_EQ(0u, s.dram_hits);
	EXPECT_EQ((uint64_t)HI_BYTES, s.bytes_nvme);
	EXPECT_EQ((uint64_t)HI_BYTES, s.bytes_h2d[MOEM_PRIO_MISS]);
	EXPECT_EQ(0, moem_tiers_check(self->t)) TH_LOG("%s", moem_last_error());
}

TEST_F(tiers, budget_bounds_and_eviction)
{
	struct moem_xref r;
	struct moem_tiers_stats s;
	/* room for 3 hi versions (6 slots of 64 KiB each) */
	uint64_t hbm = 3 * 6 * 65536;

	ASSERT_EQ(0, make(_metadata, self, hbm, 16 << 20, false, false));
	for (uint32_t e = 0; e < N; e++) {
		get(_metadata, self->t, 0, e, &r);
		expect_content(_metadata, self->t, &r);
		moem_tiers_release(self->t, &r, 1, self->dev->ops->compute_mark(self->dev));
		moem_tiers_get_stats(self->t, &s);
		ASSERT_LE(s.hbm_used, hbm);
		ASSERT_EQ(0, moem_tiers_check(self->t)) TH_LOG("%s", moem_last_error());
	}
	moem_tiers_get_stats(self->t, &s);
	EXPECT_EQ(3u, s.hbm_resident[0]);
	EXPECT_EQ((uint64_t)N - 3, s.evict_hbm);
	/* LRU: the last three are resident, the first is not */
	EXPECT_EQ(MOEM_ACQ_HIT, get(_metadata, self->t, 0, N - 1, &r));
	moem_tiers_release(self->t, &r, 1, self->dev->ops->compute_mark(self->dev));
	EXPECT_EQ(MOEM_ACQ_PENDING, get(_metadata, self->t, 0, 0, &r));
	moem_tiers_release(self->t, &r, 1, self->dev->ops->compute_mark(self->dev));
	/* Every first use came from NVMe; the second use of (0, 0) missed
	 * HBM but found it still staged in DRAM. */
	moem_tiers_get_stats(self->t, &s);
	EXPECT_EQ((uint64_t)N, s.dram_misses);
	EXPECT_EQ(1u, s.dram_hits);
	/* one version larger than the budget is refused clearly */
	EXPECT_EQ(-ERANGE, moem_tiers_set_budget(self->t, 65536, 16 << 20));
	EXPECT_EQ(-ERANGE, moem_tiers_set_budget(self->t, 1ULL << 40, 16 << 20));
	EXPECT_EQ(-ERANGE, moem_tiers_set_budget(self->t, hbm, 1ULL << 40));
}

TEST_F(tiers, pinned_versions_block_eviction)
{
	struct moem_xref r[4], x;

	/* room for 3 hi versions; pin 3, a fourth must report -EAGAIN */
	ASSERT_EQ(0, make(_metadata, self, 3 * 6 * 65536, 16 << 20, false, false));
	for (int i = 0; i < 3; i++)
		get(_metadata, self->t, 2, (uint32_t)i, &r[i]);
	EXPECT_EQ(-EAGAIN, moem_tiers_acquire(self->t, 2, 9, &x));
	moem_tiers_release(self->t, r, 3, self->dev->ops->compute_mark(self->dev));
	EXPECT_EQ(MOEM_ACQ_PENDING, get(_metadata, self->t, 2, 9, &x));
	expect_content(_metadata, self->t, &x);
	moem_tiers_release(self->t, &x, 1, self->dev->ops->compute_mark(self->dev));
	EXPECT_EQ(0, moem_tiers_check(self->t)) TH_LOG("%s", moem_last_error());
}

/*
 * WAR: a slot freed while a kernel may still read it is reused only after
 * the compute timeline passed that kernel. With manual compute, the
 * "kernel" keeps running until we finish it: the old bytes must survive.
 */
TEST_F(tiers, recycled_slot_waits_for_last_reader)
{
	struct moem_xref a, b;
	uint64_t seq;
	const uint8_t *pa;
	uint8_t old[64];

	/* exactly one hi slot */
	ASSERT_EQ(0, make(_metadata, self, 6 * 65536, 16 << 20, false, true));
	get(_metadata, self->t, 0, 1, &a);
	expect_content(_metadata, self->t, &a);
	pa = moem_tiers_host_view(self->t, &a);
	memcpy(old, pa, sizeof(old));
	seq = self->dev->ops->compute_mark(self->dev); /* "kernel" reading a */
	moem_tiers_release(self->t, &a, 1, seq);
	/* b evicts a and takes its slot; its copy must wait for seq */
	ASSERT_EQ(MOEM_ACQ_PENDING, moem_tiers_acquire(self->t, 0, 2, &b));
	usleep(20000);
	EXPECT_EQ(0, memcmp(pa, old, sizeof(old))) TH_LOG("slot overwritten under a reader");
	moem_tierdev_emu_finish(self->dev, seq);
	ASSERT_EQ(0, moem_tiers_wait(self->t, &b));
	EXPECT_EQ(a.addr, b.addr); /* it really was the recycled slot */
	expect_content(_metadata, self->t, &b);
	seq = self->dev->ops->compute_mark(self->dev);
	moem_tiers_release(self->t, &b, 1, seq);
	moem_tierdev_emu_finish(self->dev, seq);
}

TEST_F(tiers, plan_fallback_and_promotion)
{
	struct moem_xref r;
	struct moem_tiers_stats s;

	ASSERT_EQ(0, make(_metadata, self, 8 << 20, 16 << 20, true, false));
	ASSERT_EQ(0, moem_tiers_set_plan(self->t, 3, 5, MOEM_TIER_LO));
	EXPECT_EQ(MOEM_ACQ_PENDING, get(_metadata, self->t, 3, 5, &r));
	EXPECT_EQ(MOEM_TIER_LO, r.pi);
	expect_content(_metadata, self->t, &r);
	moem_tiers_release(self->t, &r, 1, self->dev->ops->compute_mark(self->dev));
	/* planned hi, only lo resident: fallback, no wait */
	ASSERT_EQ(0, moem_tiers_set_plan(self->t, 3, 5, MOEM_TIER_HI));
	EXPECT_EQ(MOEM_ACQ_FALLBACK, get(_metadata, self->t, 3, 5, &r));
	EXPECT_EQ(MOEM_TIER_LO, r.pi);
	moem_tiers_release(self->t, &r, 1, self->dev->ops->compute_mark(self->dev));
	/* promotion lands: the handle now resolves to hi */
	ASSERT_EQ(1, moem_tiers_prefetch(self->t, 3, 5, MOEM_PRIO_PROMOTE)); /* started */
	EXPECT_EQ(0, moem_tiers_prefetch(self->t, 3, 5, MOEM_PRIO_PROMOTE)); /* on its way */
	moem_tiers_drain(self->t);
	EXPECT_EQ(MOEM_ACQ_HIT, get(_metadata, self->t, 3, 5, &r));
	EXPECT_EQ(MOEM_TIER_HI, r.pi);
	expect_content(_metadata, self->t, &r);
	moem_tiers_release(self->t, &r, 1, self->dev->ops->compute_mark(self->dev));
	moem_tiers_get_stats(self->t, &s);
	EXPECT_EQ(1u, s.fallbacks);
	EXPECT_EQ((uint64_t)HI_BYTES, s.bytes_h2d[MOEM_PRIO_PROMOTE]);
	EXPECT_EQ(0, moem_tiers_check(self->t)) TH_LOG("%s", moem_last_error());
}

TEST_F(tiers, load_failure_is_reported)
{
	struct moem_xref r;

	ASSERT_EQ(0, make(_metadata, self, 8 << 20, 16 << 20, false, false));
	self->st.fail_layer = 2;
	ASSERT_EQ(MOEM_ACQ_PENDING, moem_tiers_acquire(self->t, 2, 0, &r));
	EXPECT_EQ(-EIO, moem_tiers_wait(self->t, &r));
	EXPECT_NE(NULL, strstr(moem_last_error(), "fetch failed"));
	EXPECT_EQ(0, moem_tiers_check(self->t)) TH_LOG("%s", moem_last_error());
	self->st.fail_layer = -1;
	EXPECT_EQ(MOEM_ACQ_PENDING, get(_metadata, self->t, 2, 0, &r));
	expect_content(_metadata, self->t, &r);
	moem_tiers_release(self->t, &r, 1, self->dev->ops->compute_mark(self->dev));
	EXPECT_EQ(-EINVAL, moem_tiers_acquire(self->t, L, 0, &r));
	EXPECT_EQ(-EINVAL, moem_tiers_set_plan(self->t, 0, N, 0));
}

/*
 * The CPU executor's pins (hybrid execution): a version computed on the
 * CPU is loaded into DRAM (evicting an unpinned one), holds its own bytes,
 * never enters HBM, and is not evicted from DRAM while pinned, not even by
 * a budget shrink; with every staged version pinned a new one gets
 * -EAGAIN; a failed load is reported and leaves no pin behind.
 */
TEST_F(tiers, cpu_pins_hold_dram_versions)
{
	const uint64_t dram = 2 * 6 * 65536; /* two hi versions */
	struct moem_cref c[3];
	struct moem_tiers_stats s;
	int ret;

	ASSERT_EQ(0, make(_metadata, self, 8 << 20, dram, false, false));
	for (uint32_t e = 0; e < 2; e++) {
		ret = moem_tiers_cpu_acquire(self->t, 1, e, &c[e]);
		ASSERT_EQ(MOEM_ACQ_PENDING, ret) TH_LOG("%s", moem_last_error());
		ASSERT_EQ(0, moem_tiers_cpu_wait(self->t, &c[e])) TH_LOG("%s", moem_last_error());
		ASSERT_NE(NULL, c[e].host);
		for (uint64_t i = 0; i < HI_BYTES; i += 997)
			ASSERT_EQ(pattern(1, e, 0, i), ((const uint8_t *)c[e].host)[i]);
	}
	/* both pinned: no room for a third, and a shrink evicts neither */
	EXPECT_EQ(-EAGAIN, moem_tiers_cpu_acquire(self->t, 1, 2, &c[2]));
	EXPECT_EQ(0, moem_tiers_set_budget(self->t, 8 << 20, 6 * 65536));
	moem_tiers_get_stats(self->t, &s);
	EXPECT_EQ(2u, s.dram_ready);
	EXPECT_EQ(0u, s.evict_dram);
	EXPECT_EQ(0u, s.hbm_used);
	EXPECT_EQ(0, moem_tiers_state(self->t, 1, 0)); /* ABSENT in HBM */
	EXPECT_EQ(0, moem_tiers_check(self->t)) TH_LOG("%s", moem_last_error());
	/* released: the shrink takes effect, and a staged one is a hit */
	moem_tiers_cpu_release(self->t, c, 2);
	moem_tiers_get_stats(self->t, &s);
	EXPECT_EQ(1u, s.dram_ready);
	EXPECT_EQ(0, moem_tiers_set_budget(self->t, 8 << 20, dram));
	EXPECT_EQ(0, moem_tiers_check(self->t)) TH_LOG("%s", moem_last_error());
	ret = moem_tiers_staged(self->t, 1, 0, 0) ? 0 : 1;
	EXPECT_TRUE(moem_tiers_staged(self->t, 1, (uint32_t)ret, 0));
	EXPECT_EQ(0, moem_tiers_cpu_acquire(self->t, 1, (uint32_t)ret, &c[0]));
	EXPECT_NE(NULL, c[0].host);
	moem_tiers_cpu_release(self->t, c, 1);
	/* a failed load: an error with a message, no pin left */
	self->st.fail_layer = 3;
	ASSERT_EQ(MOEM_ACQ_PENDING, moem_tiers_cpu_acquire(self->t, 3, 0, &c[0]));
	EXPECT_EQ(-EIO, moem_tiers_cpu_wait(self->t, &c[0]));
	EXPECT_NE(NULL, strstr(moem_last_error(), "load failed"));
	EXPECT_EQ(NULL, c[0].host);
	moem_tiers_cpu_release(self->t, c, 1); /* a no-op for it */
	moem_tiers_drain(self->t);
	EXPECT_EQ(0, moem_tiers_check(self->t)) TH_LOG("%s", moem_last_error());
	moem_tiers_get_stats(self->t, &s);
	EXPECT_EQ(0u, s.hbm_used);
	EXPECT_EQ(-EINVAL, moem_tiers_cpu_acquire(self->t, L, 0, &c[0]));
}

/* Warm-up staging fills free DRAM and stops; it never evicts what is staged. */
TEST_F(tiers, staging_never_evicts)
{
	struct moem_tiers_stats s;
	uint32_t staged = 0;
	int ret = 0;

	/* room for 5 hi versions of 5 * 64 KiB + 1234 bytes */
	ASSERT_EQ(0, make(_metadata, self, 8 << 20, 5 * 6 * 65536, false, false));
	for (uint32_t e = 0; e < N && ret == 0; e++) {
		ret = moem_tiers_stage(self->t, 0, e, MOEM_TIER_HI);
		staged += ret == 0;
	}
	EXPECT_EQ(-EAGAIN, ret);
	moem_tiers_drain(self->t);
	moem_tiers_get_stats(self->t, &s);
	EXPECT_EQ(staged, s.dram_ready);
	EXPECT_EQ(0u, s.evict_dram);
	EXPECT_TRUE(moem_tiers_staged(self->t, 0, 0, MOEM_TIER_HI));
	EXPECT_FALSE(moem_tiers_staged(self->t, 0, N - 1, MOEM_TIER_HI));
	EXPECT_EQ(0, moem_tiers_check(self->t)) TH_LOG("%s", moem_last_error());
}

/* One node: the per-node report is the whole pool, at no known node. */
TEST_F(tiers, one_node_reports_whole_pool)
{
	struct moem_tiers_stats s;
	int32_t node;
	uint64_t off;

	ASSERT_EQ(0, make(_metadata, self, 8 << 20, 16 << 20, false, false));
	ASSERT_EQ(0, moem_tiers_stage(self->t, 1, 2, MOEM_TIER_HI));
	moem_tiers_drain(self->t);
	moem_tiers_get_stats(self->t, &s);
	ASSERT_EQ(1u, s.n_nodes);
	EXPECT_EQ(-1, s.dram_node[0].node);
	EXPECT_EQ(self->pool_bytes, s.dram_node[0].bytes);
	EXPECT_EQ((uint64_t)16 << 20, s.dram_node[0].budget);
	EXPECT_EQ(s.dram_used, s.dram_node[0].used);
	ASSERT_EQ(0, moem_tiers_dram_node(self->t, 1, 2, MOEM_TIER_HI, &node, &off));
	EXPECT_EQ(-1, node);
	EXPECT_EQ(0u, off); /* first fit, as before */
	EXPECT_EQ(-ENOENT, moem_tiers_dram_node(self->t, 1, 3, MOEM_TIER_HI, &node, &off));
	EXPECT_EQ(-EINVAL, moem_tiers_dram_node(self->t, L, 0, MOEM_TIER_HI, &node, &off));
}

/* Check every staged version lies inside its node's range and its bytes are whole. */
static void expect_on_nodes(struct __test_metadata *_metadata, FIXTURE_DATA(tiers) * self,
			    uint32_t *on_node, uint32_t *off_node)
{
	for (uint32_t l = 0; l < L; l++)
		for (uint32_t e = 0; e < N; e++) {
			int32_t node;
			uint64_t off, lo, hi;

			if (moem_tiers_dram_node(self->t, l, e, MOEM_TIER_HI, &node, &off))
				continue;
			ASSERT_TRUE(node == 0 || node == 1);
			lo = self->node_off[node];
			hi = node ? self->pool_bytes : self->node_off[1];
			ASSERT_GE(off, lo);
			ASSERT_LE(off + HI_BYTES, hi)
			TH_LOG("(%u,%u) at %llu on node %d", l, e, (unsigned long long)off, node);
			for (uint64_t i = 0; i < HI_BYTES; i += 997)
				ASSERT_EQ(pattern(l, e, 0, i), self->pool[off + i]);
			if ((uint32_t)node == (l + e) % 2)
				(*on_node)++;
			else
				(*off_node)++;
		}
}

/* Tiers over two equal nodes of the 64 MiB pool, every hi version staged. */
static void stage_all_on_two_nodes(struct __test_metadata *_metadata, FIXTURE_DATA(tiers) * self)
{
	self->n_nodes = 2;
	self->node_off[1] = 32 << 20;
	ASSERT_EQ(0, make(_metadata, self, 8 << 20, 64 << 20, false, false));
	for (uint32_t l = 0; l < L; l++)
		for (uint32_t e = 0; e < N; e++)
			ASSERT_EQ(0, moem_tiers_stage(self->t, l, e, MOEM_TIER_HI));
	moem_tiers_drain(self->t);
}

/* Two nodes: each layer's experts alternate between them. */
TEST_F(tiers, two_nodes_spread_each_layer)
{
	struct moem_tiers_stats s;
	uint32_t on = 0, off = 0;

	stage_all_on_two_nodes(_metadata, self);
	expect_on_nodes(_metadata, self, &on, &off);
	EXPECT_EQ((uint32_t)(L * N), on);
	EXPECT_EQ(0u, off);
	moem_tiers_get_stats(self->t, &s);
	ASSERT_EQ(2u, s.n_nodes);
	EXPECT_EQ(0u, s.dram_node_fallback);
	EXPECT_EQ(s.dram_node[0].used, s.dram_node[1].used);
	EXPECT_EQ(s.dram_used, s.dram_node[0].used + s.dram_node[1].used);
	EXPECT_EQ((uint64_t)32 << 20, s.dram_node[1].bytes);
	EXPECT_EQ(0, moem_tiers_check(self->t)) TH_LOG("%s", moem_last_error());
}

/* A full node sends its experts to the other one, and says so. */
TEST_F(tiers, two_nodes_fall_back_when_full)
{
	struct moem_tiers_stats s;
	uint32_t on = 0, off = 0;

	self->n_nodes = 2;
	self->node_off[1] = 4 * 6 * 65536; /* node 0 holds 4 hi versions */
	ASSERT_EQ(0, make(_metadata, self, 8 << 20, 64 << 20, false, false));
	for (uint32_t e = 0; e < N; e++)
		ASSERT_EQ(0, moem_tiers_stage(self->t, 0, e, MOEM_TIER_HI));
	moem_tiers_drain(self->t);
	expect_on_nodes(_metadata, self, &on, &off);
	EXPECT_EQ((uint32_t)N, on + off);
	EXPECT_EQ(4u + N / 2, on);
	moem_tiers_get_stats(self->t, &s);
	EXPECT_EQ((uint64_t)off, s.dram_node_fallback);
	EXPECT_EQ(0, moem_tiers_check(self->t)) TH_LOG("%s", moem_last_error());
}

/* The DRAM budget is shared by the nodes: shrinking it evicts on both. */
TEST_F(tiers, two_nodes_share_the_budget)
{
	struct moem_tiers_stats s;
	uint32_t on = 0, off = 0;

	stage_all_on_two_nodes(_metadata, self);
	ASSERT_EQ(0, moem_tiers_set_budget(self->t, 8 << 20, 4 << 20));
	moem_tiers_get_stats(self->t, &s);
	EXPECT_LE(s.dram_used, (uint64_t)4 << 20);
	for (int k = 0; k < 2; k++) {
		EXPECT_EQ((uint64_t)2 << 20, s.dram_node[k].budget);
		EXPECT_LE(s.dram_node[k].used, s.dram_node[k].budget);
		EXPECT_GT(s.dram_node[k].used, 0u);
	}
	EXPECT_EQ(0, moem_tiers_check(self->t)) TH_LOG("%s", moem_last_error());
	/* a budget below one version per node still leaves each node one */
	ASSERT_EQ(0, moem_tiers_set_budget(self->t, 8 << 20, HI_BYTES));
	moem_tiers_get_stats(self->t, &s);
	for (int k = 0; k < 2; k++)
		EXPECT_EQ(moem_align_up((uint64_t)HI_BYTES, 4096), s.dram_node[k].budget);
	EXPECT_EQ(0, moem_tiers_check(self->t)) TH_LOG("%s", moem_last_error());
	/* grown back, the versions staged again land on their nodes */
	ASSERT_EQ(0, moem_tiers_set_budget(self->t, 8 << 20, 64 << 20));
	for (uint32_t e = 0; e < N; e++)
		ASSERT_EQ(0, moem_tiers_stage(self->t, 3, e, MOEM_TIER_HI));
	moem_tiers_drain(self->t);
	expect_on_nodes(_metadata, self, &on, &off);
	EXPECT_EQ(0u, off);
	EXPECT_EQ(0, moem_tiers_check(self->t)) TH_LOG("%s", moem_last_error());
}

/* Node ranges that do not cover the pool in order are refused. */
TEST_F(tiers, bad_node_ranges_refused)
{
	self->n_nodes = 2;
	self->node_off[1] = 128 << 20; /* beyond the 64 MiB pool */
	EXPECT_EQ(-EINVAL, make(_metadata, self, 8 << 20, 16 << 20, false, false));
	EXPECT_NE(NULL, strstr(moem_last_error(), "beyond"));
}

struct budget_thread {
	struct moem_tiers *t;
	volatile int stop;
	uint64_t seed, changes;
};

static void *budget_changer(void *arg)
{
	struct budget_thread *b = arg;
	struct moem_rng r;

	moem_rng_seed(&r, b->seed, 5);
	while (!b->stop) {
		uint64_t hbm = (uint64_t)(6 + moem_rng_below(&r, 120)) * 65536;
		uint64_t dram = (uint64_t)(6 + moem_rng_below(&r, 600)) * 65536;

		if (moem_tiers_set_budget(b->t, hbm, dram) == 0)
			b->changes++;
		usleep(500 + moem_rng_below(&r, 3000));
	}
	return NULL;
}

static void stress(struct __test_metadata *_metadata, FIXTURE_DATA(tiers) * self)
{
	struct budget_thread bt = {.seed = 7};
	struct moem_xref refs[N];
	struct moem_tiers_stats s;
	struct moem_rng r;
	pthread_t th;
	int steps = 600;

	ASSERT_EQ(0, make(_metadata, self, 40 * 65536, 200 * 65536, true, false));
	moem_rng_seed(&r, 3, 0);
	bt.t = self->t;
	pthread_create(&th, NULL, budget_changer, &bt);
	for (int step = 0; step < steps; step++) {
		for (uint32_t l = 0; l < L; l++) {
			uint8_t want[N] = {0};
			uint32_t n = 0, T = 1 + moem_rng_below(&r, 6);

			for (uint32_t i = 0; i < T; i++)
				want[moem_rng_below(&r, N)] = 1;
			for (uint32_t e = 0; e < N; e++) {
				int ret;

				if (!want[e])
					continue;
				ret = moem_tiers_acquire(self->t, l, e, &refs[n]);
				if (ret == -EAGAIN) {
					/* run what we hold, release it, retry */
					moem_tiers_release(self->t, refs, n,
							   self->dev->ops->compute_mark(self->dev));
					n = 0;
					ret = moem_tiers_acquire(self->t, l, e, &refs[n]);
				}
				if (ret == -EAGAIN)
					continue; /* everything in flight: skip this expert */
				ASSERT_GE(ret, 0) TH_LOG("%s", moem_last_error());
				if (ret == MOEM_ACQ_PENDING) {
					ASSERT_EQ(0, moem_tiers_wait(self->t, &refs[n]))
					TH_LOG("%s", moem_last_error());
				}
				expect_content(_metadata, self->t, &refs[n]);
				n++;
			}
			/* policy noise: plans and prefetches for the next layer */
			for (int k = 0; k < 3; k++) {
				uint32_t ll = moem_rng_below(&r, L), ee = moem_rng_below(&r, N);

				if (moem_rng_below(&r, 4) == 0)
					moem_tiers_set_plan(self->t, ll, ee, moem_rng_below(&r, 2));
				else
					moem_tiers_prefetch(
						self->t, ll, ee,
						(enum moem_prio)(1 + moem_rng_below(&r, 2)));
			}
			moem_tiers_release(self->t, refs, n,
					   self->dev->ops->compute_mark(self->dev));
			ASSERT_EQ(0, moem_tiers_check(self->t))
			TH_LOG("step %d: %s", step, moem_last_error());
		}
	}
	bt.stop = 1;
	pthread_join(th, NULL);
	moem_tiers_drain(self->t);
	ASSERT_EQ(0, moem_tiers_check(self->t)) TH_LOG("%s", moem_last_error());
	moem_tiers_get_stats(self->t, &s);
	TH_LOG("%llu budget changes; hits %llu misses %llu fallbacks %llu; evictions %llu/%llu",
	       (unsigned long long)bt.changes, (unsigned long long)s.hits,
	       (unsigned long long)s.misses, (unsigned long long)s.fallbacks,
	       (unsigned long long)s.evict_hbm, (unsigned long long)s.evict_dram);
	EXPECT_GT(bt.changes, 50u);
	/* Both paths were exercised; how often each was taken depends on how
	 * many budget changes a step sees, i.e. on the machine's load. */
	EXPECT_GT(s.misses, 100u);
	EXPECT_GT(s.hits, 0u);
	EXPECT_LE(s.hbm_used, s.hbm_budget);
	EXPECT_LE(s.dram_used, s.dram_budget);
}

/* Timing-bound on a busy machine (emulated link sleeps): a generous timeout. */
TEST_F_TIMEOUT(tiers, randomized_stress, 600)
{
	stress(_metadata, self);
}

/* The same over two NUMA nodes: the shared budget moving under the loads. */
TEST_F_TIMEOUT(tiers, randomized_stress_two_nodes, 600)
{
	self->n_nodes = 2;
	self->node_off[1] = 24 << 20; /* unequal ranges */
	stress(_metadata, self);
}

TEST_HARNESS_MAIN
