// SPDX-License-Identifier: GPL-2.0-only
/*
 * The CUDA tier devices (tierdev.h):
 *  - a staging pool larger than 64 GiB is registered whole, in 1 GiB
 *    pieces (the kernel emulator only: registering 100 GiB needs 100 GiB
 *    of pinnable memory on a GPU machine; here it is an address range);
 *  - a copy whose source crosses from one 1 GiB registration piece into
 *    the next lands whole (on an H200 such a copy, issued as one
 *    cuMemcpyHtoDAsync, never completed; the emulator refuses it);
 *  - the UVM device: weights copied into its managed arena are read right
 *    by a kernel under an HBM budget a quarter of their size, and again
 *    after a partial prefetch; on the emulator its paging counters show
 *    the budget held (evictions) and the prefetch saving faults.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <moem/backend.h>
#include <moem/cuda_api.h>
#include <moem/error.h>
#include <moem/half.h>
#include <moem/tierdev.h>

#include "kselftest_harness.h"
#include "../unit/test_backend_util.h"
#include "gpu_main.h"

FIXTURE(cu)
{
	struct moem_backend *be;
	const struct moem_cuda_api *api;
	CUdevice dev;
	CUcontext ctx;
};

FIXTURE_SETUP(cu)
{
	const char *name = getenv("MOEM_GPU_TEST_BACKEND");

	memset(self, 0, sizeof(*self));
	if (name && strcmp(name, "cuda"))
		SKIP(return, "the CUDA tier device needs the CUDA backend");
	ASSERT_EQ(0, moem_backend_open("cuda", NULL, &self->be));
	ASSERT_EQ(0, moem_cuda_backend_handles(self->be, &self->api, &self->dev, &self->ctx));
	ASSERT_EQ(CUDA_SUCCESS, self->api->cuCtxSetCurrent(self->ctx));
}

FIXTURE_TEARDOWN(cu)
{
	if (self->be)
		moem_backend_close(self->be);
}

TEST_F(cu, pool_beyond_64_gib_is_registered_whole)
{
	const uint64_t bytes = 100ull << 30;
	struct moem_tierdev *d;
	CUdeviceptr dp;
	char *p;

	if (!getenv("MOEM_GPU_EMU"))
		SKIP(return, "registers 100 GiB of host memory: the kernel emulator only");
	p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, moem_tierdev_cuda_create(self->be, &d));
	ASSERT_EQ(0, d->ops->host_register(d, p, bytes)) TH_LOG("%s", moem_last_error());
	/* every piece is pinned, the last byte included */
	EXPECT_EQ(CUDA_SUCCESS, self->api->cuMemHostGetDevicePointer(&dp, p, 0));
	EXPECT_EQ(CUDA_SUCCESS, self->api->cuMemHostGetDevicePointer(&dp, p + bytes - 1, 0));
	EXPECT_EQ((CUdeviceptr)(uintptr_t)(p + bytes - 1), dp);
	d->ops->host_unregister(d, p);
	EXPECT_NE(CUDA_SUCCESS, self->api->cuMemHostGetDevicePointer(&dp, p + bytes - 1, 0));
	/* and again, after an unregister */
	ASSERT_EQ(0, d->ops->host_register(d, p, bytes));
	d->ops->destroy(d);
	EXPECT_NE(CUDA_SUCCESS, self->api->cuMemHostGetDevicePointer(&dp, p, 0));
	munmap(p, bytes);
}

TEST_F(cu, copy_across_registration_pieces)
{
	const uint64_t bytes = (1ull << 30) + (8ull << 20), len = 8ull << 20;
	const uint64_t off = (1ull << 30) - (5ull << 20); /* 5 MiB before, 3 after */
	struct moem_tierdev *d;
	uint8_t *p, *back;
	moem_dptr base;
	uint64_t seq;

	/* Untouched pages cost nothing on the emulator; a GPU pins 1 GiB. */
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		 -1, 0);
	ASSERT_NE(MAP_FAILED, p);
	back = malloc(len);
	ASSERT_NE(NULL, back);
	for (uint64_t i = 0; i < len; i++)
		p[off + i] = (uint8_t)(i * 13 + (i >> 12));
	ASSERT_EQ(0, moem_tierdev_cuda_create(self->be, &d));
	ASSERT_EQ(0, d->ops->host_register(d, p, bytes)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, d->ops->reserve(d, 16ull << 20, &base));
	ASSERT_EQ(0, d->ops->map(d, base, 16ull << 20));
	ASSERT_EQ(0, d->ops->copy(d, base + 4096, p + off, len, 0, &seq))
	TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, d->ops->copy_wait(d, seq)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_be_dtoh(self->be, back, base + 4096, len, NULL));
	ASSERT_EQ(0, moem_be_sync(self->be));
	EXPECT_EQ(0, memcmp(back, p + off, len));
	d->ops->unmap(d, base, 16ull << 20);
	d->ops->unreserve(d, base, 16ull << 20);
	d->ops->destroy(d);
	free(back);
	munmap(p, bytes);
}

typedef void (*uvm_counters_fn)(uint64_t out[5]);

TEST_F(cu, uvm_arena_under_a_budget)
{
	const uint32_t N = 1024, H = 32768; /* 64 MiB of bf16 router weights */
	const uint64_t bytes = (uint64_t)N * H * 2, budget = bytes / 4;
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	uvm_counters_fn counters = lib ? (uvm_counters_fn)dlsym(lib, "moemEmuUvmCounters") : NULL;
	uint64_t c[3][5] = {{0}}, seq = 0;
	struct moem_uvm_stats us;
	struct moem_tierdev *d;
	uint16_t *w = malloc(bytes), *x = malloc(2 * H);
	float *got = malloc(4 * N);
	moem_dptr base, dx, dl;
	int ret;

	ASSERT_TRUE(w && x && got);
	for (uint64_t i = 0; i < (uint64_t)N * H; i++)
		w[i] = moem_f32_to_bf16((float)((i * 2654435761u >> 7) % 9) - 4.0f);
	for (uint32_t k = 0; k < H; k++)
		x[k] = moem_f32_to_bf16(k % 3 ? 0.5f : -0.25f);
	ret = moem_tierdev_uvm_create(self->be, &d);
	if (ret == -ENODEV)
		SKIP(return, "%s", moem_last_error());
	ASSERT_EQ(0, ret) TH_LOG("%s", moem_last_error());
	ASSERT_TRUE(moem_tierdev_is_uvm(d));
	ASSERT_EQ(0, d->ops->reserve(d, bytes, &base)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, d->ops->map(d, base, bytes));
	/* the tiers' way in: copies in pieces, then the last one waited for */
	for (uint64_t off = 0; off < bytes; off += 8 << 20)
		ASSERT_EQ(0, d->ops->copy(d, base + off, (uint8_t *)w + off, 8 << 20, 0, &seq));
	ASSERT_EQ(0, d->ops->copy_wait(d, seq));
	EXPECT_EQ(seq, d->ops->copy_done(d));
	ASSERT_EQ(0, moem_tierdev_uvm_set_budget(d, budget)) TH_LOG("%s", moem_last_error());
	moem_tierdev_uvm_stats(d, &us);
	EXPECT_EQ(budget, us.budget);
	dx = tb_put(self->be, x, 2 * H);
	dl = tb_zeros(self->be, 4 * N);
	if (counters)
		counters(c[0]);
	for (int pass = 0; pass < 2; pass++) {
		struct moem_router_args ra = {1, H, N, dx, base, dl};

		if (pass == 1) /* the first eighth ahead of the kernel */
			ASSERT_EQ(0, moem_tierdev_uvm_prefetch(d, base, bytes / 8));
		ASSERT_EQ(0, moem_op_router(self->be, NULL, &ra)) TH_LOG("%s", moem_last_error());
		ASSERT_EQ(0, tb_get(self->be, got, dl, 4 * N));
		for (uint32_t r = 0; r < N; r++) {
			double want = 0;

			for (uint32_t k = 0; k < H; k++)
				want += (double)moem_bf16_to_f32(w[(size_t)r * H + k]) *
					moem_bf16_to_f32(x[k]);
			ASSERT_EQ((float)want, got[r]) TH_LOG("pass %d row %u", pass, r);
		}
		if (counters)
			counters(c[pass + 1]);
	}
	moem_tierdev_uvm_stats(d, &us);
	EXPECT_EQ(1, us.prefetches);
	EXPECT_EQ(bytes / 8, us.prefetch_bytes);
	if (counters) {
		TH_LOG("emulated UVM, %llu MiB under a %llu MiB budget: %llu and %llu faults, "
		       "%llu evictions",
		       (unsigned long long)(bytes >> 20), (unsigned long long)(budget >> 20),
		       (unsigned long long)(c[1][0] - c[0][0]),
		       (unsigned long long)(c[2][0] - c[1][0]),
		       (unsigned long long)(c[2][3] - c[0][3]));
		/* every page faulted in once at least */
		EXPECT_GE((c[1][1] - c[0][1]), bytes);
		/* the budget held: pages were evicted to stay within it */
		EXPECT_GE(c[1][3] - c[0][3], (bytes - budget - MOEM_UVM_HEADROOM) / (64 << 10));
		/* the prefetched eighth did not fault */
		EXPECT_LT(c[2][0] - c[1][0], c[1][0] - c[0][0]);
	}
	moem_be_free(self->be, dx);
	moem_be_free(self->be, dl);
	d->ops->unreserve(d, base, bytes);
	d->ops->destroy(d);
	free(w);
	free(x);
	free(got);
}

GPU_TEST_MAIN
