// SPDX-License-Identifier: GPL-2.0-only
/*
 * Extent allocator and transfer engine on the emulated tier device:
 * allocation/limit rules, byte-exact copies split into pieces, priority
 * order (a miss overtakes queued prefetches and waits behind at most the
 * pieces already on the engine), cancel, and the bandwidth estimate.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/extent.h>
#include <moem/rng.h>
#include <moem/util.h>
#include <moem/xfer.h>

#include "kselftest_harness.h"

TEST(extent_basic)
{
	struct moem_extent x;
	uint64_t a, b, c;

	ASSERT_EQ(0, moem_extent_init(&x, 64 * 4096, 64 * 4096, 12));
	ASSERT_EQ(0, moem_extent_alloc(&x, 10 * 4096, &a));
	ASSERT_EQ(0, moem_extent_alloc(&x, 1, &b)); /* rounds up to a granule */
	EXPECT_EQ(11u * 4096, moem_extent_used_bytes(&x));
	EXPECT_EQ(-ENOSPC, moem_extent_alloc(&x, 54 * 4096, &c));
	ASSERT_EQ(0, moem_extent_alloc(&x, 53 * 4096, &c));
	EXPECT_EQ(-ENOSPC, moem_extent_alloc(&x, 1, &c));
	moem_extent_free(&x, a, 10 * 4096);
	EXPECT_EQ(10u * 4096, moem_extent_largest_free(&x));
	EXPECT_EQ(-EINVAL, moem_extent_alloc(&x, 0, &c));
	EXPECT_EQ(-EINVAL, moem_extent_alloc(&x, 65 * 4096, &c));
	moem_extent_fini(&x);
}

TEST(extent_limit)
{
	struct moem_extent x;
	uint64_t a, b;

	ASSERT_EQ(0, moem_extent_init(&x, 100 << 16, 10 << 16, 16));
	EXPECT_EQ(-ENOSPC, moem_extent_alloc(&x, 11 << 16, &a));
	ASSERT_EQ(0, moem_extent_set_limit(&x, 40 << 16));
	ASSERT_EQ(0, moem_extent_alloc(&x, 30 << 16, &a));
	ASSERT_EQ(0, moem_extent_alloc(&x, 5 << 16, &b));
	/* shrinking below a used granule is refused and names it */
	EXPECT_EQ(-EBUSY, moem_extent_set_limit(&x, 32 << 16));
	EXPECT_EQ((int64_t)(32 << 16), moem_extent_first_used(&x, 32 << 16));
	EXPECT_EQ((int64_t)0, moem_extent_first_used(&x, 0));
	moem_extent_free(&x, b, 5 << 16);
	EXPECT_EQ(0, moem_extent_set_limit(&x, 30 << 16));
	EXPECT_EQ(-ENOSPC, moem_extent_alloc(&x, 1, &b));
	moem_extent_fini(&x);
}

TEST(extent_random_no_overlap)
{
	struct moem_extent x;
	struct moem_rng r;
	static uint8_t owner[4096];
	uint64_t off[64] = {0}, len[64] = {0};

	ASSERT_EQ(0, moem_extent_init(&x, 4096ULL << 12, 4096ULL << 12, 12));
	moem_rng_seed(&r, 1, 0);
	for (int it = 0; it < 20000; it++) {
		int i = (int)moem_rng_below(&r, 64);

		if (len[i]) {
			for (uint64_t g = off[i] >> 12; g < (off[i] + len[i]) >> 12; g++) {
				ASSERT_EQ(i + 1, owner[g]);
				owner[g] = 0;
			}
			moem_extent_free(&x, off[i], len[i]);
			len[i] = 0;
		} else {
			uint64_t n = (1 + moem_rng_below(&r, 100)) << 12;

			if (moem_extent_alloc(&x, n, &off[i]) == 0) {
				len[i] = n;
				for (uint64_t g = off[i] >> 12; g < (off[i] + n) >> 12; g++) {
					ASSERT_EQ(0, owner[g]);
					owner[g] = (uint8_t)(i + 1);
				}
			}
		}
	}
	moem_extent_fini(&x);
}

struct done_log {
	pthread_mutex_t lock;
	int order[64];
	int n;
};

struct tagged {
	struct moem_xfer_req req;
	struct done_log *log;
	int tag;
	int status;
};

static void on_done(struct moem_xfer_req *r, int status)
{
	struct tagged *t = (struct tagged *)r;

	pthread_mutex_lock(&t->log->lock);
	t->status = status;
	t->log->order[t->log->n++] = t->tag;
	pthread_mutex_unlock(&t->log->lock);
}

FIXTURE(xfer)
{
	struct moem_tierdev *dev;
	struct moem_xfer *x;
	moem_dptr base;
	uint8_t *src;
	struct done_log log;
};

FIXTURE_SETUP(xfer)
{
	struct moem_emu_opts eo = {.link_gbps = 1, .link_lat_us = 0};
	struct moem_xfer_opts xo = {.piece_bytes = 1 << 20, .max_inflight = 2};

	ASSERT_EQ(0, moem_tierdev_emu_create(&eo, &self->dev));
	ASSERT_EQ(0, self->dev->ops->reserve(self->dev, 64 << 20, &self->base));
	ASSERT_EQ(0, self->dev->ops->map(self->dev, self->base, 64 << 20));
	ASSERT_EQ(0, moem_xfer_create(self->dev, &xo, &self->x));
	self->src = malloc(64 << 20);
	for (size_t i = 0; i < (64 << 20); i++)
		self->src[i] = (uint8_t)(i * 7 + (i >> 20));
	pthread_mutex_init(&self->log.lock, NULL);
	self->log.n = 0;
}

FIXTURE_TEARDOWN(xfer)
{
	moem_xfer_destroy(self->x);
	self->dev->ops->unreserve(self->dev, self->base, 64 << 20);
	self->dev->ops->destroy(self->dev);
	free(self->src);
}

TEST_F(xfer, copies_exact_bytes_in_pieces)
{
	struct tagged t = {.log = &self->log, .tag = 1};
	struct moem_xfer_stats st;

	t.req.dst = self->base + 4096;
	t.req.src = self->src + 12345;
	t.req.bytes = (5 << 20) + 777; /* not a multiple of the piece size */
	t.req.prio = MOEM_PRIO_PREFETCH;
	t.req.done = on_done;
	ASSERT_EQ(0, moem_xfer_submit(self->x, &t.req));
	moem_xfer_drain(self->x);
	ASSERT_EQ(1, self->log.n);
	EXPECT_EQ(0, t.status);
	EXPECT_EQ(0, memcmp((void *)(uintptr_t)t.req.dst, t.req.src, t.req.bytes));
	moem_xfer_get_stats(self->x, &st);
	EXPECT_EQ(6u, st.pieces);
	EXPECT_EQ(t.req.bytes, st.bytes[MOEM_PRIO_PREFETCH]);
	/* 32 more pieces: the estimate is the EWMA (alpha 0.2 from 16 GB/s)
	 * of the device's own piece times, and never above the 1 GB/s link
	 * model (each piece takes at least bytes / bandwidth). */
	t.req.bytes = 32 << 20;
	ASSERT_EQ(0, moem_xfer_submit(self->x, &t.req));
	moem_xfer_drain(self->x);
	{
		double bw = 16e9;

		moem_xfer_get_stats(self->x, &st);
		ASSERT_EQ(38u, st.pieces);
		for (uint64_t seq = 1; seq <= 38; seq++) {
			uint64_t ns = self->dev->ops->copy_ns(self->dev, seq);
			/* piece sizes: five 1 MiB + 777 bytes, then 32 x 1 MiB */
			uint64_t bytes = seq < 6 ? 1 << 20 : seq == 6 ? 777 : 1 << 20;
			bw = 0.2 * ((double)bytes / (ns * 1e-9)) + 0.8 * bw;
		}
		EXPECT_LT(fabs(moem_xfer_bandwidth(self->x) - bw) / bw, 1e-9);
		EXPECT_LT(moem_xfer_bandwidth(self->x), 1.01e9);
	}
}

TEST_F(xfer, miss_overtakes_prefetches)
{
	struct tagged pf[4], miss = {.log = &self->log, .tag = 100};

	for (int i = 0; i < 4; i++) {
		memset(&pf[i], 0, sizeof(pf[i]));
		pf[i].log = &self->log;
		pf[i].tag = i;
		pf[i].req.dst = self->base + ((uint64_t)i << 23);
		pf[i].req.src = self->src + ((uint64_t)i << 23);
		pf[i].req.bytes = 8 << 20; /* 8 pieces each, 8 ms at 1 GB/s */
		pf[i].req.prio = MOEM_PRIO_PREFETCH;
		pf[i].req.done = on_done;
		ASSERT_EQ(0, moem_xfer_submit(self->x, &pf[i].req));
	}
	miss.req.dst = self->base + (40 << 20);
	miss.req.src = self->src + (40 << 20);
	miss.req.bytes = 1 << 20;
	miss.req.prio = MOEM_PRIO_MISS;
	miss.req.done = on_done;
	ASSERT_EQ(0, moem_xfer_submit(self->x, &miss.req));
	moem_xfer_drain(self->x);
	ASSERT_EQ(5, self->log.n);
	/* the miss finished before the first prefetch it was queued behind */
	EXPECT_EQ(100, self->log.order[0]);
	for (int i = 0; i < 4; i++)
		EXPECT_EQ(0, memcmp((void *)(uintptr_t)pf[i].req.dst, pf[i].req.src, 8 << 20));
	EXPECT_EQ(0, memcmp((void *)(uintptr_t)miss.req.dst, miss.req.src, 1 << 20));
}

TEST_F(xfer, raise_and_cancel)
{
	struct tagged a = {.log = &self->log, .tag = 1}, b = {.log = &self->log, .tag = 2};
	struct tagged c = {.log = &self->log, .tag = 3};

	a.req = (struct moem_xfer_req){.dst = self->base,
				       .src = self->src,
				       .bytes = 16 << 20,
				       .prio = MOEM_PRIO_PROMOTE,
				       .done = on_done};
	b.req = (struct moem_xfer_req){.dst = self->base + (16 << 20),
				       .src = self->src,
				       .bytes = 2 << 20,
				       .prio = MOEM_PRIO_PROMOTE,
				       .done = on_done};
	c.req = (struct moem_xfer_req){.dst = self->base + (20 << 20),
				       .src = self->src,
				       .bytes = 2 << 20,
				       .prio = MOEM_PRIO_PROMOTE,
				       .done = on_done};
	ASSERT_EQ(0, moem_xfer_submit(self->x, &a.req));
	ASSERT_EQ(0, moem_xfer_submit(self->x, &b.req));
	ASSERT_EQ(0, moem_xfer_submit(self->x, &c.req));
	EXPECT_EQ(-EBUSY, moem_xfer_cancel(self->x, &a.req)); /* already started */
	EXPECT_EQ(0, moem_xfer_cancel(self->x, &c.req));
	moem_xfer_raise(self->x, &b.req, MOEM_PRIO_MISS);
	moem_xfer_drain(self->x);
	ASSERT_EQ(2, self->log.n);
	EXPECT_EQ(2, self->log.order[0]); /* raised b overtook the rest of a */
	EXPECT_EQ(1, self->log.order[1]);
}

TEST_F(xfer, bad_requests)
{
	struct moem_xfer_req r = {.dst = self->base, .src = self->src, .bytes = 0, .done = on_done};

	EXPECT_EQ(-EINVAL, moem_xfer_submit(self->x, &r));
	r.bytes = 10;
	r.prio = (enum moem_prio)7;
	EXPECT_EQ(-EINVAL, moem_xfer_submit(self->x, &r));
	r.prio = MOEM_PRIO_MISS;
	r.done = NULL;
	EXPECT_EQ(-EINVAL, moem_xfer_submit(self->x, &r));
}

/* A copy engine that refuses every piece from the n-th on. */
static const struct moem_tierdev_ops *real_ops;
static int fail_from, pieces_seen;

static int failing_copy(struct moem_tierdev *d, moem_dptr dst, const void *src, uint64_t bytes,
			uint64_t wait_compute, uint64_t *seq)
{
	if (++pieces_seen >= fail_from)
		return moem_errf(EINVAL, "piece %d refused by the test", pieces_seen);
	return real_ops->copy(d, dst, src, bytes, wait_compute, seq);
}

/*
 * A piece that cannot be issued fails its request and every request
 * behind it, each with the error and the message: nobody waits forever
 * for bytes that will never come (on an H200 a refused copy hung the
 * engine's warm-up this way).
 */
TEST_F(xfer, failed_piece_fails_every_request)
{
	struct moem_tierdev_ops ops = *self->dev->ops;
	struct tagged t[4], late = {.log = &self->log, .tag = 9};
	char why[256];

	real_ops = self->dev->ops;
	ops.copy = failing_copy;
	fail_from = 6; /* the second piece of the second request */
	pieces_seen = 0;
	self->dev->ops = &ops;
	for (int i = 0; i < 4; i++) {
		memset(&t[i], 0, sizeof(t[i]));
		t[i].log = &self->log;
		t[i].tag = i;
		t[i].req.dst = self->base + ((uint64_t)i << 23);
		t[i].req.src = self->src + ((uint64_t)i << 23);
		t[i].req.bytes = 4 << 20; /* 4 pieces */
		t[i].req.prio = MOEM_PRIO_PREFETCH;
		t[i].req.done = on_done;
		t[i].status = 1;
		ASSERT_EQ(0, moem_xfer_submit(self->x, &t[i].req));
	}
	moem_xfer_drain(self->x);
	ASSERT_EQ(4, self->log.n);
	EXPECT_EQ(0, t[0].status);
	EXPECT_EQ(0, memcmp((void *)(uintptr_t)t[0].req.dst, t[0].req.src, 4 << 20));
	for (int i = 1; i < 4; i++)
		EXPECT_EQ(-EINVAL, t[i].status);
	EXPECT_EQ(-EINVAL, moem_xfer_failure(self->x, why, sizeof(why)));
	EXPECT_NE(NULL, strstr(why, "refused by the test"));
	/* and a request submitted afterwards ends with the error too */
	late.req = t[0].req;
	late.status = 1;
	ASSERT_EQ(0, moem_xfer_submit(self->x, &late.req));
	moem_xfer_drain(self->x);
	ASSERT_EQ(5, self->log.n);
	EXPECT_EQ(-EINVAL, late.status);
	self->dev->ops = real_ops;
}

TEST_HARNESS_MAIN
