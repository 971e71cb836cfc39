// SPDX-License-Identifier: GPL-2.0-only
/*
 * The kv_bytes knob on the CUDA backend (tests/unit/kv_budget_cases.h):
 * the KV pool lives in HBM, so the experts get hbm_bytes less the pool,
 * and a kv_bytes or hbm_bytes that leaves them less than one expert is
 * refused naming the limit. Skips (exit 4) without a CUDA device; runs on
 * the kernel emulator in make test-gpu-emu.
 */
#include <stdlib.h>

static const char *kv_backend(void)
{
	const char *n = getenv("MOEM_GPU_TEST_BACKEND");

	return n ? n : "cuda";
}

#include "../unit/kv_budget_cases.h"
#include "gpu_main.h"

GPU_TEST_MAIN
