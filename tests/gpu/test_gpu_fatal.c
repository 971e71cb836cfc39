// SPDX-License-Identifier: GPL-2.0-only
/*
 * A sticky device error is fatal: an FFN over an expert blob at an
 * unmapped device address faults (CUDA_ERROR_ILLEGAL_ADDRESS); the
 * backend reports it, moem_backend_fatal() turns true and every later
 * call is refused with -EIO, so the process can exit and be restarted.
 * (A separate program: the fault poisons the context for the process,
 * and compute-sanitizer must not see it.)
 */
#include <errno.h>
#include <string.h>

#include <moem/backend.h>
#include <moem/cuda_api.h>
#include <moem/error.h>

#include "kselftest_harness.h"
#include "../unit/test_backend_util.h"
#include "gpu_main.h"

TEST(illegal_address_is_fatal)
{
	const char *name = getenv("MOEM_GPU_TEST_BACKEND");
	struct moem_backend *be;
	struct moem_ffn_expert e = {0, MOEM_PREC_BF16, 0, 1};
	struct moem_ffn_assign as = {0, 0};
	const struct moem_cuda_api *api;
	moem_dptr x, out, d;
	CUdeviceptr hole;
	CUcontext ctx;
	CUdevice dev;
	int ret;

	if (name && strcmp(name, "cuda"))
		SKIP(return, "the fault needs a GPU (MOEM_GPU_TEST_BACKEND=%s)", name);
	ASSERT_EQ(0, moem_backend_open("cuda", NULL, &be));
	/*
	 * Reserved and never mapped: no address the device can read. (A
	 * made-up one is not enough: 1 TiB read without a fault on an H200
	 * with driver 580, whose address space the driver lays out itself.)
	 * The range is not freed: the fault poisons the context.
	 */
	ASSERT_EQ(0, moem_cuda_backend_handles(be, &api, &dev, &ctx));
	ASSERT_EQ(CUDA_SUCCESS, api->cuCtxSetCurrent(ctx));
	ASSERT_EQ(CUDA_SUCCESS, api->cuMemAddressReserve(&hole, 64ull << 20, 2ull << 20, 0, 0));
	e.blob = hole + (16ull << 20);
	x = tb_zeros(be, 2 * 256);
	out = tb_zeros(be, 4 * 256);
	{
		struct moem_ffn_args a = {1, 256, 128, 1, x, out, 1, &e, 1, &as};

		/* The launch itself is fine; the fault shows at the next sync. */
		ret = moem_op_ffn(be, NULL, &a);
		if (!ret)
			ret = moem_be_stream_sync(be, NULL);
	}
	EXPECT_EQ(-EIO, ret);
	EXPECT_TRUE(moem_backend_fatal(be));
	TH_LOG("fatal: %s", moem_backend_fatal_msg(be));
	EXPECT_NE(NULL, strstr(moem_backend_fatal_msg(be), "CUDA_ERROR_"));
	EXPECT_EQ(-EIO, moem_be_alloc(be, 256, &d));
	EXPECT_NE(NULL, strstr(moem_last_error(), "unusable after a fatal device error"));
	moem_backend_close(be);
}

GPU_TEST_MAIN
