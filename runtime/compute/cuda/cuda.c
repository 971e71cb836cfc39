// SPDX-License-Identifier: GPL-2.0-only
/*
 * The CUDA backend: device selection, the primary context, memory,
 * streams and events through the driver API (cuda_api.h). Every CUresult
 * goes through moem_cuda_check(), which marks the backend fatal on a
 * sticky error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/quant.h>
#include <moem/util.h>

#include "cuda_int.h"

int moem_cuda_enter(struct cuda_backend *cb)
{
	static __thread CUcontext cur;
	int ret;

	if (moem_likely(cur == cb->ctx))
		return 0;
	ret = ck(cb, cb->api->cuCtxSetCurrent(cb->ctx), "cuCtxSetCurrent");
	if (!ret)
		cur = cb->ctx;
	return ret;
}

#define ENTER(cb)                              \
	do {                                   \
		int __r = moem_cuda_enter(cb); \
		if (__r)                       \
			return __r;            \
	} while (0)

static CUstream cs_of(struct moem_stream *s)
{
	return cuda_stream_of(s)->s;
}

static void stream_release(struct cuda_backend *cb, struct cuda_stream *cs)
{
	if (!cs->s)
		return;
	/* Destroying a stream must not race its work: wait, then free. */
	ck(cb, cb->api->cuStreamSynchronize(cs->s), "cuStreamSynchronize");
	moem_cuda_ring_free(cb, cs);
	if (cs->scratch)
		ck(cb, cb->api->cuMemFree(cs->scratch), "cuMemFree");
	ck(cb, cb->api->cuStreamDestroy(cs->s), "cuStreamDestroy");
	cs->s = NULL;
}

static int stream_init(struct cuda_backend *cb, struct cuda_stream *cs)
{
	memset(cs, 0, sizeof(*cs));
	cs->base.be = &cb->base;
	return ck(cb, cb->api->cuStreamCreate(&cs->s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
}

static void cuda_close(struct moem_backend *be)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!moem_cuda_enter(cb)) {
		stream_release(cb, &cb->dflt);
		moem_cuda_kernels_unload(cb);
	}
	if (cb->ctx)
		ck(cb, cb->api->cuDevicePrimaryCtxRelease(cb->dev), "cuDevicePrimaryCtxRelease");
	free(cb);
}

static int cuda_alloc(struct moem_backend *be, uint64_t bytes, moem_dptr *out)
{
	struct cuda_backend *cb = cuda_of(be);
	CUdeviceptr p;
	char what[64];
	int ret;

	ENTER(cb);
	snprintf(what, sizeof(what), "cuMemAlloc(%llu)", (unsigned long long)bytes);
	ret = ck(cb, cb->api->cuMemAlloc(&p, bytes), what);
	if (!ret)
		*out = p;
	return ret;
}

static void cuda_free(struct moem_backend *be, moem_dptr p)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!moem_cuda_enter(cb))
		ck(cb, cb->api->cuMemFree(p), "cuMemFree");
}

static int cuda_mem_info(struct moem_backend *be, uint64_t *free_bytes, uint64_t *total)
{
	struct cuda_backend *cb = cuda_of(be);
	size_t f, t;
	int ret;

	ENTER(cb);
	ret = ck(cb, cb->api->cuMemGetInfo(&f, &t), "cuMemGetInfo");
	if (!ret) {
		*free_bytes = f;
		*total = t;
	}
	return ret;
}

static int cuda_memset(struct moem_backend *be, moem_dptr p, int v, uint64_t bytes,
		       struct moem_stream *s)
{
	struct cuda_backend *cb = cuda_of(be);

	ENTER(cb);
	return ck(cb, cb->api->cuMemsetD8Async(p, (unsigned char)v, bytes, cs_of(s)),
		  "cuMemsetD8Async");
}

static int cuda_htod(struct moem_backend *be, moem_dptr dst, const void *src, uint64_t bytes,
		     struct moem_stream *s)
{
	struct cuda_backend *cb = cuda_of(be);

	ENTER(cb);
	return ck(cb, cb->api->cuMemcpyHtoDAsync(dst, src, bytes, cs_of(s)), "cuMemcpyHtoDAsync");
}

static int cuda_dtoh(struct moem_backend *be, void *dst, moem_dptr src, uint64_t bytes,
		     struct moem_stream *s)
{
	struct cuda_backend *cb = cuda_of(be);

	ENTER(cb);
	return ck(cb, cb->api->cuMemcpyDtoHAsync(dst, src, bytes, cs_of(s)), "cuMemcpyDtoHAsync");
}

static int cuda_dtod(struct moem_backend *be, moem_dptr dst, moem_dptr src, uint64_t bytes,
		     struct moem_stream *s)
{
	struct cuda_backend *cb = cuda_of(be);

	ENTER(cb);
	return ck(cb, cb->api->cuMemcpyDtoDAsync(dst, src, bytes, cs_of(s)), "cuMemcpyDtoDAsync");
}

static int cuda_host_register(struct moem_backend *be, void *p, uint64_t bytes)
{
	struct cuda_backend *cb = cuda_of(be);

	ENTER(cb);
	/* DEVICEMAP: kernels may read it in place (a step's cold experts). */
	return ck(cb,
		  cb->api->cuMemHostRegister(
			  p, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP),
		  "cuMemHostRegister");
}

static int cuda_host_unregister(struct moem_backend *be, void *p)
{
	struct cuda_backend *cb = cuda_of(be);

	ENTER(cb);
	return ck(cb, cb->api->cuMemHostUnregister(p), "cuMemHostUnregister");
}

static int cuda_stream_create(struct moem_backend *be, struct moem_stream **out)
{
	struct cuda_backend *cb = cuda_of(be);
	struct cuda_stream *cs;
	int ret;

	ENTER(cb);
	cs = malloc(sizeof(*cs));
	if (!cs)
		return -ENOMEM;
	ret = stream_init(cb, cs);
	if (ret) {
		free(cs);
		return ret;
	}
	*out = &cs->base;
	return 0;
}

static void cuda_stream_destroy(struct moem_backend *be, struct moem_stream *s)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!moem_cuda_enter(cb))
		stream_release(cb, cuda_stream_of(s));
	free(s);
}

static int cuda_stream_sync(struct moem_backend *be, struct moem_stream *s)
{
	struct cuda_backend *cb = cuda_of(be);

	ENTER(cb);
	return ck(cb, cb->api->cuStreamSynchronize(cs_of(s)), "cuStreamSynchronize");
}

static int cuda_stream_wait(struct moem_backend *be, struct moem_stream *s, struct moem_event *ev)
{
	struct cuda_backend *cb = cuda_of(be);

	ENTER(cb);
	return ck(cb, cb->api->cuStreamWaitEvent(cs_of(s), ((struct cuda_event *)ev)->e, 0),
		  "cuStreamWaitEvent");
}

static int cuda_sync(struct moem_backend *be)
{
	struct cuda_backend *cb = cuda_of(be);

	ENTER(cb);
	return ck(cb, cb->api->cuCtxSynchronize(), "cuCtxSynchronize");
}

static int cuda_event_create(struct moem_backend *be, struct moem_event **out)
{
	struct cuda_backend *cb = cuda_of(be);
	struct cuda_event *e;
	int ret;

	ENTER(cb);
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->base.be = be;
	/* Blocking sync: a host waiting for a copy or a step sleeps, not spins. */
	ret = ck(cb, cb->api->cuEventCreate(&e->e, CU_EVENT_BLOCKING_SYNC), "cuEventCreate");
	if (ret) {
		free(e);
		return ret;
	}
	*out = &e->base;
	return 0;
}

static void cuda_event_destroy(struct moem_backend *be, struct moem_event *ev)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!moem_cuda_enter(cb))
		ck(cb, cb->api->cuEventDestroy(((struct cuda_event *)ev)->e), "cuEventDestroy");
	free(ev);
}

static int cuda_event_record(struct moem_backend *be, struct moem_event *ev, struct moem_stream *s)
{
	struct cuda_backend *cb = cuda_of(be);

	ENTER(cb);
	return ck(cb, cb->api->cuEventRecord(((struct cuda_event *)ev)->e, cs_of(s)),
		  "cuEventRecord");
}

static int cuda_event_query(struct moem_backend *be, struct moem_event *ev)
{
	struct cuda_backend *cb = cuda_of(be);
	CUresult r;

	ENTER(cb);
	r = cb->api->cuEventQuery(((struct cuda_event *)ev)->e);
	if (r == CUDA_ERROR_NOT_READY)
		return -EAGAIN; /* the normal answer: no message */
	return ck(cb, r, "cuEventQuery");
}

static int cuda_event_sync(struct moem_backend *be, struct moem_event *ev)
{
	struct cuda_backend *cb = cuda_of(be);

	ENTER(cb);
	return ck(cb, cb->api->cuEventSynchronize(((struct cuda_event *)ev)->e),
		  "cuEventSynchronize");
}

static int cuda_event_elapsed(struct moem_backend *be, struct moem_event *a, struct moem_event *b,
			      float *ms)
{
	struct cuda_backend *cb = cuda_of(be);

	ENTER(cb);
	return ck(cb,
		  cb->api->cuEventElapsedTime(ms, ((struct cuda_event *)a)->e,
					      ((struct cuda_event *)b)->e),
		  "cuEventElapsedTime");
}

static const struct moem_backend_ops cuda_ops = {
	.name = "cuda",
	.close = cuda_close,
	.alloc = cuda_alloc,
	.free = cuda_free,
	.mem_info = cuda_mem_info,
	.memset = cuda_memset,
	.htod = cuda_htod,
	.dtoh = cuda_dtoh,
	.dtod = cuda_dtod,
	.host_register = cuda_host_register,
	.host_unregister = cuda_host_unregister,
	.stream_create = cuda_stream_create,
	.stream_destroy = cuda_stream_destroy,
	.stream_sync = cuda_stream_sync,
	.stream_wait = cuda_stream_wait,
	.sync = cuda_sync,
	.event_create = cuda_event_create,
	.event_destroy = cuda_event_destroy,
	.event_record = cuda_event_record,
	.event_query = cuda_event_query,
	.event_sync = cuda_event_sync,
	.event_elapsed = cuda_event_elapsed,
	.capture_begin = moem_cuda_capture_begin,
	.capture_end = moem_cuda_capture_end,
	.graph_launch = moem_cuda_graph_launch,
	.graph_destroy = moem_cuda_graph_destroy,
	.graph_epoch = moem_cuda_graph_epoch,
	.rmsnorm = moem_cuda_rmsnorm,
	.router = moem_cuda_router,
	.route = moem_cuda_route,
	.ffn = moem_cuda_ffn,
	.ffn_routed = moem_cuda_ffn_routed,
	.combine = moem_cuda_combine,
	.quantize = moem_cuda_quantize,
	.histogram = moem_cuda_histogram,
	.embed = moem_cuda_embed,
	.matmul = moem_cuda_matmul,
	.rownorm = moem_cuda_rownorm,
	.convert = moem_cuda_convert,
	.rope = moem_cuda_rope,
	.head_matmul = moem_cuda_head_matmul,
	.kv_store = moem_cuda_kv_store,
	.attention = moem_cuda_attention,
};

/* "no CUDA device: <why>" as the thread's message, -ENODEV. */
static int no_device(const char *why)
{
	return moem_errf(ENODEV, "no CUDA device: %s", why);
}

static int probe(const struct moem_cuda_api *api, const struct moem_backend_opts *opts,
		 CUdevice *dev)
{
	char es[160], why[256];
	CUresult r;
	int n = 0;

	r = api->cuInit(0);
	if (r != CUDA_SUCCESS) {
		snprintf(why, sizeof(why), "cuInit returned %s", moem_cuda_strerror(r, es, 160));
		return no_device(why);
	}
	r = api->cuDeviceGetCount(&n);
	if (r != CUDA_SUCCESS || n == 0) {
		snprintf(why, sizeof(why), "cuDeviceGetCount found %s",
			 r ? moem_cuda_strerror(r, es, 160) : "none");
		return no_device(why);
	}
	if (opts->device >= n) {
		snprintf(why, sizeof(why), "device %d asked for, %d present", opts->device, n);
		return no_device(why);
	}
	r = api->cuDeviceGet(dev, opts->device);
	if (r != CUDA_SUCCESS) {
		snprintf(why, sizeof(why), "cuDeviceGet(%d) returned %s", opts->device,
			 moem_cuda_strerror(r, es, 160));
		return no_device(why);
	}
	return 0;
}

/*
 * FFN row tiling per precision for 1..16 tokens an expert (cuda/ffn.cuh):
 * rows per block / 16, for n-tile classes 0 (B <= 8) and 1 (B <= 16).
 * The fastest of 1, 2 and 4 on the H200 run of 0a65138 (bench_kernels
 * --ffn-rt, Documentation/benchmarks/gpu.md): the fewer weight bytes a
 * row has, the more rows a block's staging of the activations should
 * serve.
 */
static const uint8_t ffn_rt_default[MOEM_PREC_NR][2] = {
	[MOEM_PREC_BF16] = {1, 2},
	[MOEM_PREC_Q8] = {2, 4},
	[MOEM_PREC_Q4] = {4, 4},
	[MOEM_PREC_Q2] = {4, 4},
};

/*
 * The tiling, from the defaults or MOEM_CUDA_FFN_RT: a comma list of R
 * (every precision) or PREC=R, R one of 1, 2, 4 (both classes). For
 * benchmarks (bench_kernels --ffn-rt) and tests of every tiling.
 */
static int ffn_rt_init(struct cuda_backend *cb)
{
	const char *env = getenv("MOEM_CUDA_FFN_RT");
	char buf[128], *save = NULL;

	memcpy(cb->ffn_rt, ffn_rt_default, sizeof(cb->ffn_rt));
	if (!env || !*env)
		return 0;
	if (strlen(env) >= sizeof(buf))
		return moem_errf(EINVAL, "MOEM_CUDA_FFN_RT: too long");
	strcpy(buf, env);
	for (char *it = strtok_r(buf, ",", &save); it; it = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(it, '='), *val = eq ? eq + 1 : it;
		enum moem_prec p = MOEM_PREC_BF16;
		uint32_t first = 0, last = MOEM_PREC_NR - 1;

		if (eq) {
			*eq = 0;
			if (moem_prec_parse(it, &p))
				return moem_errf(EINVAL, "MOEM_CUDA_FFN_RT: no precision '%s'", it);
			first = last = p;
		}
		if (strcmp(val, "1") && strcmp(val, "2") && strcmp(val, "4"))
			return moem_errf(
				EINVAL, "MOEM_CUDA_FFN_RT: '%s' is not 1, 2 or 4 row tiles a block",
				val);
		for (uint32_t q = first; q <= last; q++)
			cb->ffn_rt[q][0] = cb->ffn_rt[q][1] = (uint8_t)(*val - '0');
	}
	return 0;
}

int moem_cuda_backend_open(const struct moem_backend_opts *opts, struct moem_backend **out)
{
	const struct moem_cuda_api *api;
	struct cuda_backend *cb;
	struct moem_backend_info *info;
	char name[96] = "?";
	size_t total = 0;
	int sms = 0, ret;
	CUdevice dev;

	ret = moem_cuda_api_load(&api);
	if (ret)
		return moem_err_prefix(ENODEV, "no CUDA device");
	ret = probe(api, opts, &dev);
	if (ret)
		return ret;
	ret = moem_cuda_check(NULL, api->cuDeviceGetName(name, sizeof(name), dev),
			      "cuDeviceGetName");
	if (ret)
		return moem_err_prefix(ENODEV, "no CUDA device");
	if (!moem_cuda_fatbins[0].name)
		return moem_errf(ENODEV,
				 "CUDA device %s present, but libmoem was built without CUDA "
				 "kernels (no nvcc at build time)",
				 name);
	cb = calloc(1, sizeof(*cb));
	if (!cb)
		return -ENOMEM;
	cb->api = api;
	cb->dev = dev;
	cb->base.ops = &cuda_ops;
	cb->base.kind = MOEM_BACKEND_CUDA;
	info = &cb->base.info;
	info->kind = MOEM_BACKEND_CUDA;
	info->kernels = true;
	if ((ret = ck(cb, api->cuDriverGetVersion(&info->driver_version), "cuDriverGetVersion")) ||
	    (ret = ck(cb,
		      api->cuDeviceGetAttribute(&info->cc_major,
						CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
		      "cuDeviceGetAttribute")) ||
	    (ret = ck(cb,
		      api->cuDeviceGetAttribute(&info->cc_minor,
						CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
		      "cuDeviceGetAttribute")) ||
	    (ret = ck(
		     cb,
		     api->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
		     "cuDeviceGetAttribute")) ||
	    (ret = ck(cb, api->cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem")))
		goto err_free;
	info->sm_count = (uint32_t)sms;
	info->mem_total = total;
	snprintf(info->device, sizeof(info->device), "%s (sm_%d%d, %d SMs)", name, info->cc_major,
		 info->cc_minor, sms);
	if (info->cc_major < 8) {
		ret = moem_errf(ENODEV, "no CUDA device: %s is sm_%d%d; moem's kernels need sm_80+",
				name, info->cc_major, info->cc_minor);
		goto err_free;
	}
	/*
	 * A host thread waiting on the stream (the decode step's one
	 * synchronisation) sleeps instead of spinning a core the CPU experts
	 * and the loader need. A hint: where another user of the process
	 * already set other flags, the context keeps them.
	 */
	(void)api->cuDevicePrimaryCtxSetFlags(dev, CU_CTX_SCHED_BLOCKING_SYNC);
	ret = ck(cb, api->cuDevicePrimaryCtxRetain(&cb->ctx, dev), "cuDevicePrimaryCtxRetain");
	if (ret)
		goto err_free;
	ret = ffn_rt_init(cb);
	if (!ret)
		ret = moem_cuda_enter(cb);
	if (!ret)
		ret = moem_cuda_kernels_load(cb);
	if (ret)
		goto err_ctx;
	ret = stream_init(cb, &cb->dflt);
	if (ret)
		goto err_mods;
	cb->base.dflt = &cb->dflt.base;
	*out = &cb->base;
	return 0;

err_mods:
	moem_cuda_kernels_unload(cb);
err_ctx:
	ck_unwind(NULL, api->cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
err_free:
	free(cb);
	return ret;
}

int moem_cuda_backend_handles(struct moem_backend *be, const struct moem_cuda_api **api,
			      CUdevice *dev, CUcontext *ctx)
{
	struct cuda_backend *cb;

	if (be->kind != MOEM_BACKEND_CUDA)
		return moem_errf(EINVAL, "%s backend has no CUDA handles", be->ops->name);
	cb = cuda_of(be);
	*api = cb->api;
	*dev = cb->dev;
	*ctx = cb->ctx;
	return 0;
}
