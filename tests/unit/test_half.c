// SPDX-License-Identifier: GPL-2.0-only
/*
 * bf16/fp16 conversions against the x86 F16C instructions (IEEE
 * round-to-nearest-even in hardware), exhaustively for fp16 -> fp32 and on
 * every 2^32/65521-th float plus all rounding boundaries for fp32 -> fp16.
 */
#include <immintrin.h>
#include <math.h>

#include <moem/half.h>
#include <moem/rng.h>

#include "kselftest_harness.h"

__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f)
{
	return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h)
{
	return _cvtsh_ss(h);
}

static int have_f16c(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("f16c");
}

TEST(f16_to_f32_exhaustive)
{
	if (!have_f16c())
		SKIP(return, "CPU lacks F16C");
	for (uint32_t h = 0; h < 65536; h++) {
		float a = moem_f16_to_f32((uint16_t)h), b = hw_f16_to_f32((uint16_t)h);

		if (isnan(b)) {
			ASSERT_TRUE(isnan(a));
		} else {
			ASSERT_EQ(moem_f32_bits(a), moem_f32_bits(b)) TH_LOG("h=%#x", h);
		}
	}
}

TEST(f32_to_f16_matches_hardware)
{
	if (!have_f16c())
		SKIP(return, "CPU lacks F16C");
	/* A stride through all float bit patterns ... */
	for (uint64_t u = 0; u < (1ULL << 32); u += 65521) {
		float f = moem_bits_f32((uint32_t)u);

		if (isnan(f))
			continue;
		ASSERT_EQ(moem_f32_to_f16(f), hw_f32_to_f16(f))
		TH_LOG("u=%#llx", (unsigned long long)u);
	}
	/* ... and every fp16 value's neighbours and halfway points. */
	for (uint32_t h = 0; h < 0x7c00; h++) {
		float lo = moem_f16_to_f32((uint16_t)h), hi = moem_f16_to_f32((uint16_t)(h + 1));
		float mid = (float)(((double)lo + hi) / 2);
		float probes[] = {lo, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY), -mid};

		for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
			ASSERT_EQ(moem_f32_to_f16(probes[i]), hw_f32_to_f16(probes[i]))
			TH_LOG("h=%#x probe %zu", h, i);
		}
	}
	ASSERT_EQ(moem_f32_to_f16(INFINITY), 0x7c00);
	ASSERT_EQ(moem_f32_to_f16(70000.0f), 0x7c00);
	ASSERT_EQ(moem_f32_to_f16(-0.0f), 0x8000);
}

TEST(bf16_round_to_nearest_even)
{
	struct moem_rng r;

	ASSERT_EQ(moem_f32_to_bf16(1.0f), 0x3f80);
	/* 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: even is 1.0 */
	ASSERT_EQ(moem_f32_to_bf16(1.00390625f), 0x3f80);
	ASSERT_EQ(moem_f32_to_bf16(1.01171875f), 0x3f82);
	ASSERT_TRUE(isnan(moem_bf16_to_f32(moem_f32_to_bf16(NAN))));
	moem_rng_seed(&r, 1, 0);
	for (int i = 0; i < 100000; i++) {
		float f = (float)(moem_rng_normal(&r) * 100);
		uint16_t b = moem_f32_to_bf16(f);
		float back = moem_bf16_to_f32(b);
		float up = moem_bf16_to_f32((uint16_t)(b + 1)),
		      dn = moem_bf16_to_f32((uint16_t)(b - 1));

		/* nearest: no neighbour is strictly closer */
		ASSERT_LE(fabsf(back - f), fabsf(up - f));
		ASSERT_LE(fabsf(back - f), fabsf(dn - f));
	}
}

TEST_HARNESS_MAIN
