// SPDX-License-Identifier: GPL-2.0-only
/*
 * What the driver does around moem's kernels, which the kernel emulator
 * must do too for its tests to mean anything: on a GPU these check the
 * driver, on the emulator (make test-gpu-emu) that the emulator behaves
 * like it.
 *  - a misaligned vector load faults (CUDA_ERROR_MISALIGNED_ADDRESS, sticky);
 *  - a launch beyond the kernel's __launch_bounds__ or above 48 KiB of
 *    dynamic shared memory without opting in is refused, and nothing runs;
 *  - a copy to pinned memory is asynchronous: the host sees the old bytes
 *    until it waits (the stream is held by cuStreamWaitValue32);
 *  - a captured graph replays its copies, reading memory when it runs, and
 *    a synchronisation during capture invalidates it;
 *  - during a thread-local capture the capturing thread may not allocate
 *    (the capture is invalidated), another thread may, and only the
 *    capturing thread may end it;
 *  - managed memory written by the host is read right by a kernel, before
 *    and after cuMemPrefetchAsync (the emulator also counts its faults).
 * Kernels come from libmoem's embedded modules; the driver is called
 * directly, past the backend's own argument checks.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <moem/backend.h>
#include <moem/cuda_api.h>
#include <moem/error.h>
#include <moem/half.h>

#include "kselftest_harness.h"
#include "../unit/test_backend_util.h"
#include "../../cuda/kparams.h"
#include "gpu_main.h"

struct moem_fatbin {
	const char *name;
	const unsigned char *start, *end;
};
extern const struct moem_fatbin moem_cuda_fatbins[];

FIXTURE(drv)
{
	struct moem_backend *be;
	const struct moem_cuda_api *api;
	CUdevice dev;
	CUcontext ctx;
	CUmodule mods[64];
	int n_mods;
	CUfunction router;
	CUstream s;
};

FIXTURE_SETUP(drv)
{
	const char *name = getenv("MOEM_GPU_TEST_BACKEND");

	memset(self, 0, sizeof(*self));
	if (name && strcmp(name, "cuda"))
		SKIP(return, "driver behaviour needs the CUDA backend (MOEM_GPU_TEST_BACKEND=%s)",
			   name);
	ASSERT_EQ(0, moem_backend_open("cuda", NULL, &self->be));
	ASSERT_EQ(0, moem_cuda_backend_handles(self->be, &self->api, &self->dev, &self->ctx));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuCtxSetCurrent(self->ctx));
	for (int i = 0; moem_cuda_fatbins[i].name && self->n_mods < 64; i++)
		ASSERT_EQ(CUDA_SUCCESS, self->api->cuModuleLoadData(&self->mods[self->n_mods++],
								    moem_cuda_fatbins[i].start));
	for (int i = 0; i < self->n_mods && !self->router; i++)
		if (self->api->cuModuleGetFunction(&self->router, self->mods[i], "moem_router_n1"))
			self->router = NULL;
	ASSERT_NE(NULL, self->router);
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuStreamCreate(&self->s, CU_STREAM_NON_BLOCKING));
}

FIXTURE_TEARDOWN(drv)
{
	if (!self->be)
		return;
	if (self->s)
		self->api->cuStreamDestroy(self->s);
	for (int i = 0; i < self->n_mods; i++)
		self->api->cuModuleUnload(self->mods[i]);
	moem_backend_close(self->be);
}

/* out[r] = w[r] . x for rows x K bf16 w, one token: the router kernel. */
static CUresult router(FIXTURE_DATA(drv) * self, CUdeviceptr w, CUdeviceptr x, CUdeviceptr out,
		       uint32_t rows, uint32_t K, uint32_t block, uint32_t smem)
{
	struct moem_kgemm_params p = {w, x, out, rows, K, 1, rows};
	void *args[1] = {&p};

	return self->api->cuLaunchKernel(self->router, (rows + 15) / 16, 1, 1, block, 1, 1, smem,
					 self->s, args, NULL);
}

static CUdeviceptr dalloc(FIXTURE_DATA(drv) * self, size_t n, int v)
{
	CUdeviceptr p = 0;

	if (self->api->cuMemAlloc(&p, n) == CUDA_SUCCESS)
		self->api->cuMemsetD8Async(p, (unsigned char)v, n, self->s);
	return p;
}

TEST_F(drv, misaligned_vector_load_is_fatal)
{
	const uint32_t rows = 16, K = 256;
	CUdeviceptr w = dalloc(self, rows * K * 2, 0), x = dalloc(self, K * 2 + 64, 0);
	CUdeviceptr out = dalloc(self, rows * 4, 0);
	CUresult r;

	ASSERT_TRUE(w && x && out);
	/* x + 8 bytes: the staging reads x 16 bytes at a time */
	ASSERT_EQ(CUDA_SUCCESS,
		  router(self, w, x + 8, out, rows, K, MOEM_K_THREADS, moem_k_smem(0, 1, 0)));
	r = self->api->cuStreamSynchronize(self->s);
	EXPECT_EQ(CUDA_ERROR_MISALIGNED_ADDRESS, r);
	EXPECT_TRUE(moem_cuda_is_sticky(r));
	EXPECT_EQ(-EIO, moem_cuda_check(self->be, r, "cuStreamSynchronize"));
	EXPECT_TRUE(moem_backend_fatal(self->be));
	EXPECT_NE(CUDA_SUCCESS, self->api->cuMemsetD8Async(out, 0, 4, self->s));
}

TEST_F(drv, launch_limits_are_enforced)
{
	const uint32_t rows = 16, K = 256;
	CUdeviceptr w = dalloc(self, rows * K * 2, 0), x = dalloc(self, K * 2, 0);
	CUdeviceptr out = dalloc(self, rows * 4, 0x7f);
	uint16_t hw[16 * 256], hx[256];
	float got[16];
	CUresult r;

	ASSERT_TRUE(w && x && out);
	for (uint32_t i = 0; i < rows * K; i++)
		hw[i] = moem_f32_to_bf16((float)(i % 7) - 3.0f);
	for (uint32_t k = 0; k < K; k++)
		hx[k] = moem_f32_to_bf16(k % 3 ? 0.5f : -1.0f);
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemcpyHtoDAsync(w, hw, sizeof(hw), self->s));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemcpyHtoDAsync(x, hx, sizeof(hx), self->s));
	/* 256 threads for a kernel bounded at 128 */
	r = router(self, w, x, out, rows, K, 2 * MOEM_K_THREADS, moem_k_smem(0, 1, 0));
	EXPECT_NE(CUDA_SUCCESS, r);
	EXPECT_FALSE(moem_cuda_is_sticky(r));
	/* 64 KiB of dynamic shared memory without cuFuncSetAttribute */
	r = router(self, w, x, out, rows, K, MOEM_K_THREADS, 64 << 10);
	EXPECT_NE(CUDA_SUCCESS, r);
	EXPECT_FALSE(moem_cuda_is_sticky(r));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuStreamSynchronize(self->s));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemcpyDtoHAsync(got, out, sizeof(got), self->s));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuStreamSynchronize(self->s));
	for (uint32_t i = 0; i < rows; i++) {
		EXPECT_EQ(0x7f7f7f7fu, moem_f32_bits(got[i])) TH_LOG("row %u was written", i);
	}
	/* after opting in, 64 KiB is fine; and the result is right */
	ASSERT_EQ(CUDA_SUCCESS,
		  self->api->cuFuncSetAttribute(
			  self->router, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 << 10));
	ASSERT_EQ(CUDA_SUCCESS, router(self, w, x, out, rows, K, MOEM_K_THREADS, 64 << 10));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemcpyDtoHAsync(got, out, sizeof(got), self->s));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuStreamSynchronize(self->s));
	for (uint32_t i = 0; i < rows; i++) {
		double want = 0;

		for (uint32_t k = 0; k < K; k++)
			want += (double)moem_bf16_to_f32(hw[i * K + k]) * moem_bf16_to_f32(hx[k]);
		EXPECT_EQ((float)want, got[i]) TH_LOG("row %u: %g, want %g", i, got[i], want);
	}
}

typedef CUresult (*wait_value_fn)(CUstream s, CUdeviceptr addr, uint32_t value, unsigned int flags);

TEST_F(drv, copies_to_pinned_memory_are_asynchronous)
{
	const size_t n = 1 << 20;
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	wait_value_fn wait_value = lib ? (wait_value_fn)dlsym(lib, "cuStreamWaitValue32_v2") : NULL;
	CUdeviceptr d = dalloc(self, n, 0x5a), flag_d;
	uint32_t *flag;
	uint8_t *h;

	if (!wait_value)
		SKIP(return, "the driver has no cuStreamWaitValue32_v2");
	ASSERT_TRUE(d);
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemAllocHost((void **)&h, n));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemAllocHost((void **)&flag, 4096));
	memset(h, 0, n);
	*flag = 0;
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemHostGetDevicePointer(&flag_d, flag, 0));
	/* hold the stream until the host says so, then copy */
	ASSERT_EQ(CUDA_SUCCESS, wait_value(self->s, flag_d, 1, 0 /* GEQ */));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemcpyDtoHAsync(h, d, n, self->s));
	EXPECT_EQ(CUDA_ERROR_NOT_READY, self->api->cuStreamQuery(self->s));
	/* without a wait the host sees the old bytes */
	EXPECT_EQ(0, h[0]);
	EXPECT_EQ(0, h[n - 1]);
	__atomic_store_n(flag, 1, __ATOMIC_RELEASE);
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuStreamSynchronize(self->s));
	EXPECT_EQ(0x5a, h[0]);
	EXPECT_EQ(0x5a, h[n - 1]);
	self->api->cuMemFreeHost(h);
	self->api->cuMemFreeHost(flag);
}

TEST_F(drv, graphs_replay_captured_copies)
{
	const size_t n = 4096;
	CUdeviceptr a = dalloc(self, n, 1), b = dalloc(self, n, 2);
	CUgraph g = NULL;
	CUgraphExec e = NULL;
	uint8_t *h;

	ASSERT_TRUE(a && b);
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuStreamSynchronize(self->s));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemAllocHost((void **)&h, n));
	memset(h, 0, n);
	ASSERT_EQ(CUDA_SUCCESS,
		  self->api->cuStreamBeginCapture(self->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemcpyDtoDAsync(b, a, n / 2, self->s));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemcpyDtoHAsync(h, b, n, self->s));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuStreamEndCapture(self->s, &g));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuGraphInstantiate(&e, g, 0));
	/* captured, not run */
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuStreamSynchronize(self->s));
	EXPECT_EQ(0, h[0]);
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuGraphLaunch(e, self->s));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuStreamSynchronize(self->s));
	EXPECT_EQ(1, h[0]);
	EXPECT_EQ(2, h[n - 1]);
	/* a replay reads memory as it is then */
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemsetD8Async(a, 9, n, self->s));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuGraphLaunch(e, self->s));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuStreamSynchronize(self->s));
	EXPECT_EQ(9, h[0]);
	EXPECT_EQ(2, h[n - 1]);
	self->api->cuGraphExecDestroy(e);
	self->api->cuGraphDestroy(g);
	/* a synchronisation inside a capture is refused and spoils it */
	ASSERT_EQ(CUDA_SUCCESS,
		  self->api->cuStreamBeginCapture(self->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemcpyDtoDAsync(b, a, n, self->s));
	EXPECT_NE(CUDA_SUCCESS, self->api->cuStreamSynchronize(self->s));
	g = NULL;
	EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
		  self->api->cuStreamEndCapture(self->s, &g));
	EXPECT_EQ(NULL, g);
	self->api->cuMemFreeHost(h);
}

struct other_thread {
	FIXTURE_DATA(drv) * self;
	CUresult alloc, end;
};

/* Another thread: allocate and free, then try to end the capture. */
static void *other_thread(void *arg)
{
	struct other_thread *o = arg;
	const struct moem_cuda_api *api = o->self->api;
	CUdeviceptr p = 0;
	CUgraph g = NULL;

	o->alloc = api->cuCtxSetCurrent(o->self->ctx);
	if (o->alloc == CUDA_SUCCESS)
		o->alloc = api->cuMemAlloc(&p, 4096);
	if (o->alloc == CUDA_SUCCESS)
		o->alloc = api->cuMemFree(p);
	o->end = api->cuStreamEndCapture(o->self->s, &g);
	return NULL;
}

TEST_F(drv, thread_local_capture_refuses_the_capturing_threads_unsafe_calls)
{
	struct other_thread o = {self, CUDA_ERROR_UNKNOWN, CUDA_ERROR_UNKNOWN};
	CUdeviceptr a = dalloc(self, 4096, 1), b = dalloc(self, 4096, 2), p = 0;
	CUgraph g = NULL;
	pthread_t th;

	ASSERT_TRUE(a && b);
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuStreamSynchronize(self->s));
	/* another thread allocates freely; it may not end this thread's capture */
	ASSERT_EQ(CUDA_SUCCESS,
		  self->api->cuStreamBeginCapture(self->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemcpyDtoDAsync(b, a, 4096, self->s));
	ASSERT_EQ(0, pthread_create(&th, NULL, other_thread, &o));
	pthread_join(th, NULL);
	EXPECT_EQ(CUDA_SUCCESS, o.alloc);
	EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, o.end);
	/* ... and its try ends the capture (as a real driver does: H200 run) */
	EXPECT_EQ(CUDA_ERROR_ILLEGAL_STATE, self->api->cuStreamEndCapture(self->s, &g));
	EXPECT_EQ(NULL, g);
	/* the stream is an ordinary stream again */
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemcpyDtoDAsync(b, a, 4096, self->s));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuStreamSynchronize(self->s));
	/* a capture of the capturing thread alone ends with its graph */
	ASSERT_EQ(CUDA_SUCCESS,
		  self->api->cuStreamBeginCapture(self->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemcpyDtoDAsync(b, a, 4096, self->s));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuStreamEndCapture(self->s, &g));
	ASSERT_NE(NULL, g);
	self->api->cuGraphDestroy(g);
	/* the capturing thread may not: the capture is spoilt */
	ASSERT_EQ(CUDA_SUCCESS,
		  self->api->cuStreamBeginCapture(self->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemcpyDtoDAsync(b, a, 4096, self->s));
	EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, self->api->cuMemAlloc(&p, 4096));
	g = NULL;
	EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
		  self->api->cuStreamEndCapture(self->s, &g));
	EXPECT_EQ(NULL, g);
	self->api->cuMemFree(a);
	self->api->cuMemFree(b);
}

typedef void (*uvm_counters_fn)(uint64_t out[5]);

TEST_F(drv, managed_memory_is_read_right_before_and_after_prefetch)
{
	const uint32_t rows = 256, K = 512;
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	uvm_counters_fn counters = lib ? (uvm_counters_fn)dlsym(lib, "moemEmuUvmCounters") : NULL;
	CUdeviceptr x = dalloc(self, K * 2, 0), out = dalloc(self, rows * 4, 0), w;
	CUmemLocation dev = {CU_MEM_LOCATION_TYPE_DEVICE, self->dev};
	uint64_t c0[5] = {0}, c1[5] = {0}, c2[5] = {0};
	uint16_t *hw, hx[512];
	float got[256];
	int ok = 0;

	ASSERT_EQ(CUDA_SUCCESS, self->api->cuDeviceGetAttribute(
					&ok, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, self->dev));
	if (!ok)
		SKIP(return, "the device has no managed memory");
	ASSERT_TRUE(x && out);
	ASSERT_EQ(CUDA_SUCCESS,
		  self->api->cuMemAllocManaged(&w, rows * K * 2, CU_MEM_ATTACH_GLOBAL));
	hw = (uint16_t *)(uintptr_t)w; /* the host writes managed memory in place */
	for (uint32_t i = 0; i < rows * K; i++)
		hw[i] = moem_f32_to_bf16((float)((i * 7) % 13) - 6.0f);
	for (uint32_t k = 0; k < K; k++)
		hx[k] = moem_f32_to_bf16(k % 5 ? 0.25f : -0.5f);
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuMemcpyHtoDAsync(x, hx, sizeof(hx), self->s));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuStreamSynchronize(self->s));
	if (counters)
		counters(c0);
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1) {
			/* back to the host, then ahead to the device before the kernel */
			CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};

			ASSERT_EQ(CUDA_SUCCESS,
				  self->api->cuMemPrefetchAsync(w, rows * K * 2, host, 0, self->s));
			ASSERT_EQ(CUDA_SUCCESS,
				  self->api->cuMemAdvise(w, rows * K * 2,
							 CU_MEM_ADVISE_SET_READ_MOSTLY, dev));
			ASSERT_EQ(CUDA_SUCCESS,
				  self->api->cuMemPrefetchAsync(w, rows * K * 2, dev, 0, self->s));
			ASSERT_EQ(CUDA_SUCCESS, self->api->cuStreamSynchronize(self->s));
			if (counters)
				counters(c1);
		}
		memset(got, 0, sizeof(got));
		ASSERT_EQ(CUDA_SUCCESS,
			  router(self, w, x, out, rows, K, MOEM_K_THREADS, moem_k_smem(0, 1, 0)));
		ASSERT_EQ(CUDA_SUCCESS,
			  self->api->cuMemcpyDtoHAsync(got, out, sizeof(got), self->s));
		ASSERT_EQ(CUDA_SUCCESS, self->api->cuStreamSynchronize(self->s));
		for (uint32_t i = 0; i < rows; i++) {
			double want = 0;

			for (uint32_t k = 0; k < K; k++)
				want += (double)moem_bf16_to_f32(hw[i * K + k]) *
					moem_bf16_to_f32(hx[k]);
			EXPECT_EQ((float)want, got[i])
			TH_LOG("pass %d row %u: %g, want %g", pass, i, got[i], want);
		}
	}
	if (counters) {
		counters(c2);
		TH_LOG("emulated UVM: %llu faults on first touch, %llu after the prefetch "
		       "(%llu bytes prefetched)",
		       (unsigned long long)(c1[0] - c0[0]), (unsigned long long)(c2[0] - c1[0]),
		       (unsigned long long)(c2[4] - c0[4]));
		EXPECT_GT(c1[0] - c0[0], 0);		/* the kernel faulted its pages in */
		EXPECT_EQ(0, c2[0] - c1[0]);		/* prefetched: no fault */
		EXPECT_GE(c2[4] - c0[4], rows * K * 2); /* all of it prefetched */
	}
	self->api->cuMemFree(w);
}

GPU_TEST_MAIN
