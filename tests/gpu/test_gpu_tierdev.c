// SPDX-License-Identifier: GPL-2.0-only
/*
 * The CUDA tier devices (tierdev.h) at the sizes real models bring:
 *  - a staging pool larger than 64 GiB is registered whole, in 1 GiB
 *    pieces (the kernel emulator only: registering 100 GiB needs 100 GiB
 *    of pinnable memory on a GPU machine; here it is an address range).
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include <moem/backend.h>
#include <moem/cuda_api.h>
#include <moem/error.h>
#include <moem/tierdev.h>

#include "kselftest_harness.h"
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

GPU_TEST_MAIN
