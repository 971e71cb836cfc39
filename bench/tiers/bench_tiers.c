// SPDX-License-Identifier: GPL-2.0-only
/*
 * bench_tiers: the transfer engine against the raw copy it is built on,
 * in the same run, from the same pinned memory into the same arena.
 *
 *  staging:   many expert-sized requests through the transfer engine
 *             (8 MiB pieces, two on the engine, completion tracking) vs
 *             the device's raw copy of the same bytes (on CUDA one
 *             cuMemcpyHtoDAsync per request on one stream, timed by
 *             wall clock around the stream's completion);
 *  readiness: the latency of one expert-sized miss submitted behind a
 *             backlog of prefetches, against bytes / measured bandwidth.
 *
 * On a machine without a GPU the device is the emulated one (a modelled
 * link): the numbers then say how much the engine itself costs, not what
 * PCIe does, and are labelled "emulated".
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/backend.h>
#include <moem/cuda_api.h>
#include <moem/error.h>
#include <moem/pool.h>
#include <moem/tierdev.h>
#include <moem/util.h>
#include <moem/xfer.h>

struct done_ctr {
	pthread_mutex_t lock;
	uint64_t done, t_last;
};

struct req {
	struct moem_xfer_req r;
	struct done_ctr *c;
	uint64_t t_done;
};

static void on_done(struct moem_xfer_req *r, int status)
{
	struct req *q = (struct req *)r;

	q->t_done = moem_now_ns();
	pthread_mutex_lock(&q->c->lock);
	q->c->done++;
	q->c->t_last = q->t_done;
	pthread_mutex_unlock(&q->c->lock);
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof(double), cmp_dbl);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Raw: the device's copy of every request, back to back, one wait at the end. */
static double raw_gbps(struct moem_tierdev *d, moem_dptr dst, const uint8_t *src, uint64_t total,
		       uint64_t req_bytes)
{
	uint64_t seq = 0, t0 = moem_now_ns();

	for (uint64_t off = 0; off + req_bytes <= total; off += req_bytes)
		if (d->ops->copy(d, dst + off, src + off, req_bytes, 0, &seq))
			return -1;
	d->ops->copy_wait(d, seq);
	return (double)(total / req_bytes * req_bytes) / (double)(moem_now_ns() - t0);
}

static double engine_gbps(struct moem_xfer *x, moem_dptr dst, const uint8_t *src, uint64_t total,
			  uint64_t req_bytes, struct req *reqs)
{
	struct done_ctr c = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
	uint64_t n = total / req_bytes, t0 = moem_now_ns();

	for (uint64_t i = 0; i < n; i++) {
		memset(&reqs[i], 0, sizeof(reqs[i]));
		reqs[i].c = &c;
		reqs[i].r.dst = dst + i * req_bytes;
		reqs[i].r.src = src + i * req_bytes;
		reqs[i].r.bytes = req_bytes;
		reqs[i].r.prio = MOEM_PRIO_PREFETCH;
		reqs[i].r.done = on_done;
		if (moem_xfer_submit(x, &reqs[i].r))
			return -1;
	}
	moem_xfer_drain(x);
	return (double)(n * req_bytes) / (double)(c.t_last - t0);
}

/* One miss behind `backlog` queued prefetches: its submit-to-done time. */
static double miss_latency_us(struct moem_xfer *x, moem_dptr dst, const uint8_t *src,
			      uint64_t req_bytes, uint32_t backlog, struct req *reqs)
{
	struct done_ctr c = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
	struct req *miss = &reqs[backlog];
	uint64_t t0;

	for (uint32_t i = 0; i <= backlog; i++) {
		memset(&reqs[i], 0, sizeof(reqs[i]));
		reqs[i].c = &c;
		reqs[i].r.dst = dst + (uint64_t)i * req_bytes;
		reqs[i].r.src = src + (uint64_t)i * req_bytes;
		reqs[i].r.bytes = req_bytes;
		reqs[i].r.prio = i == backlog ? MOEM_PRIO_MISS : MOEM_PRIO_PREFETCH;
		reqs[i].r.done = on_done;
	}
	for (uint32_t i = 0; i < backlog; i++)
		moem_xfer_submit(x, &reqs[i].r);
	t0 = moem_now_ns();
	moem_xfer_submit(x, &miss->r);
	moem_xfer_drain(x);
	return (double)(miss->t_done - t0) / 1e3;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"backend", required_argument, NULL, 'b'},
		{"mib", required_argument, NULL, 'm'},
		{"reps", required_argument, NULL, 'r'},
		{"expert", required_argument, NULL, 'e'},
		{"link-gbps", required_argument, NULL, 'l'},
		{0},
	};
	const char *backend = "auto";
	uint64_t mib = 0, req_bytes = 9437184; /* one Qwen3-30B-A3B bf16 expert */
	double link = 25, eng[16], raw[16], lat0, lat;
	struct moem_pool_opts po = {.provider = MOEM_POOL_AUTO, .dev_path = "/nonexistent"};
	struct moem_backend *be = NULL;
	struct moem_tierdev *dev = NULL;
	struct moem_xfer *x = NULL;
	struct moem_pool *pool = NULL;
	struct moem_xfer_opts xo = {0};
	struct req *reqs = NULL;
	moem_dptr base = 0;
	int c, reps = 5, ret;
	bool cuda;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'b':
			backend = optarg;
			break;
		case 'm':
			mib = strtoull(optarg, NULL, 0);
			break;
		case 'r':
			reps = atoi(optarg);
			break;
		case 'e':
			req_bytes = strtoull(optarg, NULL, 0);
			break;
		case 'l':
			link = atof(optarg);
			break;
		default:
			fprintf(stderr, "usage: bench_tiers [--backend auto|cpu|cuda] [--mib N] "
					"[--reps R] [--expert BYTES] [--link-gbps X]\n");
			return 2;
		}
	}
	if (reps < 1 || reps > 16 || !req_bytes || req_bytes % 4096) {
		fprintf(stderr, "bench_tiers: reps 1..16, expert bytes a 4 KiB multiple\n");
		return 2;
	}
	ret = moem_backend_open(backend, NULL, &be);
	if (ret)
		goto fail;
	cuda = moem_backend_kind(be) == MOEM_BACKEND_CUDA;
	if (!mib)
		mib = cuda ? 2048 : 256;
	if (cuda) {
		ret = moem_tierdev_cuda_create(be, &dev);
	} else {
		struct moem_emu_opts eo = {.link_gbps = link, .link_lat_us = 10};

		ret = moem_tierdev_emu_create(&eo, &dev);
	}
	if (ret)
		goto fail;
	po.size = mib << 20;
	ret = moem_pool_open(&po, &pool);
	if (ret)
		goto fail;
	memset(moem_pool_base(pool), 0x5a, po.size);
	ret = dev->ops->host_register(dev, moem_pool_base(pool), moem_pool_size(pool));
	if (!ret)
		ret = dev->ops->reserve(dev, moem_pool_size(pool), &base);
	if (!ret)
		ret = dev->ops->map(dev, base, moem_pool_size(pool));
	if (!ret)
		ret = moem_xfer_create(dev, &xo, &x);
	if (ret)
		goto fail;
	reqs = calloc(moem_pool_size(pool) / req_bytes + 1, sizeof(*reqs));
	{
		struct moem_pool_info pi;

		moem_pool_get_info(pool, &pi);
		printf("bench_tiers: %s device, %llu MiB pinned (%s pool), %llu-byte experts, %d "
		       "reps%s\n",
		       cuda ? "cuda" : "emulated", (unsigned long long)mib,
		       moem_pool_provider_name(pi.provider), (unsigned long long)req_bytes, reps,
		       cuda ? "" : " (modelled link: the ratio is the engine's own overhead)");
	}
	/* warm both paths once, then interleave */
	raw_gbps(dev, base, moem_pool_base(pool), moem_pool_size(pool), req_bytes);
	engine_gbps(x, base, moem_pool_base(pool), moem_pool_size(pool), req_bytes, reqs);
	for (int r = 0; r < reps; r++) {
		raw[r] = raw_gbps(dev, base, moem_pool_base(pool), moem_pool_size(pool), req_bytes);
		eng[r] = engine_gbps(x, base, moem_pool_base(pool), moem_pool_size(pool), req_bytes,
				     reqs);
		printf("  rep %d: engine %.2f GB/s, raw %.2f GB/s\n", r, eng[r], raw[r]);
	}
	lat0 = miss_latency_us(x, base, moem_pool_base(pool), req_bytes, 0, reqs);
	lat = miss_latency_us(x, base, moem_pool_base(pool), req_bytes,
			      (uint32_t)moem_min(16, moem_pool_size(pool) / req_bytes - 1), reqs);
	{
		double e = median(eng, reps), w = median(raw, reps);
		double ideal_us = (double)req_bytes / (w * 1e3);

		printf("expert ready: %.0f us alone, %.0f us behind 16 queued prefetches; "
		       "bytes/bandwidth = %.0f us\n",
		       lat0, lat, ideal_us);
		printf("RESULT staging_vs_raw ratio=%.3f engine_gbps=%.2f raw_gbps=%.2f "
		       "device=%s\n",
		       e / w, e, w, cuda ? "cuda" : "emulated");
		printf("RESULT expert_ready ratio=%.2f alone_us=%.0f backlog_us=%.0f ideal_us=%.0f "
		       "device=%s\n",
		       lat / ideal_us, lat0, lat, ideal_us, cuda ? "cuda" : "emulated");
	}
	moem_xfer_destroy(x);
	dev->ops->unmap(dev, base, moem_pool_size(pool));
	dev->ops->unreserve(dev, base, moem_pool_size(pool));
	dev->ops->host_unregister(dev, moem_pool_base(pool));
	dev->ops->destroy(dev);
	moem_pool_close(pool);
	moem_backend_close(be);
	free(reqs);
	return 0;
fail:
	fprintf(stderr, "bench_tiers: %s\n", moem_strerror(ret));
	return 1;
}
