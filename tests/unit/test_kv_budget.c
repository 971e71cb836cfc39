// SPDX-License-Identifier: GPL-2.0-only
/*
 * The kv_bytes knob on the CPU backend (kv_budget_cases.h): KV pool and
 * experts are separate host memory there; tests/gpu/test_gpu_kv.c runs
 * the same cases where the pool is taken out of the HBM budget.
 */
static const char *kv_backend(void)
{
	return "cpu";
}

#include "kv_budget_cases.h"

TEST_HARNESS_MAIN
