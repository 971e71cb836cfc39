// SPDX-License-Identifier: GPL-2.0-only
/* Size parsing, budget knob parsing/validation, error messages. */
#include <errno.h>
#include <string.h>

#include <moem/dev.h>
#include <moem/error.h>
#include <moem/util.h>

#include "kselftest_harness.h"

TEST(parse_size)
{
	uint64_t v, base = 1000;

	ASSERT_EQ(0, moem_parse_size("4096", NULL, &v));
	EXPECT_EQ(4096u, v);
	ASSERT_EQ(0, moem_parse_size("12M", NULL, &v));
	EXPECT_EQ(12 * MOEM_MiB, v);
	ASSERT_EQ(0, moem_parse_size("1.5G", NULL, &v));
	EXPECT_EQ(3 * MOEM_GiB / 2, v);
	ASSERT_EQ(0, moem_parse_size("2GiB", NULL, &v));
	EXPECT_EQ(2 * MOEM_GiB, v);
	ASSERT_EQ(0, moem_parse_size("25%", &base, &v));
	EXPECT_EQ(250u, v);
	EXPECT_EQ(-EINVAL, moem_parse_size("25%", NULL, &v));
	EXPECT_EQ(-EINVAL, moem_parse_size("-1", NULL, &v));
	EXPECT_EQ(-EINVAL, moem_parse_size("12Q", NULL, &v));
	EXPECT_NE(NULL, strstr(moem_last_error(), "unknown suffix"));
	EXPECT_EQ(-EINVAL, moem_parse_size("", NULL, &v));
	EXPECT_EQ(-EINVAL, moem_parse_size("0.5", NULL, &v));
	EXPECT_EQ(-ERANGE, moem_parse_size("99999999T", NULL, &v));
	EXPECT_EQ(-EINVAL, moem_parse_size("nan", NULL, &v));
}

TEST(budget_rules)
{
	enum moem_budget_knob k;
	uint64_t v;
	char buf[32];

	ASSERT_EQ(0, moem_budget_lookup("hbm_bytes", &k));
	ASSERT_EQ(0, moem_budget_parse(k, "16G", &v));
	EXPECT_EQ(16 * MOEM_GiB, v);
	EXPECT_EQ(-ERANGE, moem_budget_parse(k, "2048T", &v));
	EXPECT_EQ(0, moem_budget_validate(k, MOEM_BUDGET_BYTES_MAX));
	EXPECT_EQ(-ERANGE, moem_budget_validate(k, MOEM_BUDGET_BYTES_MAX + 1));
	ASSERT_EQ(0, moem_budget_lookup("hi_precision_permille", &k));
	EXPECT_EQ(0, moem_budget_parse(k, "1000", &v));
	EXPECT_EQ(-ERANGE, moem_budget_parse(k, "1001", &v));
	EXPECT_EQ(-EINVAL, moem_budget_parse(k, "-1", &v));
	EXPECT_EQ(-EINVAL, moem_budget_parse(k, "12x", &v));
	ASSERT_EQ(0, moem_budget_lookup("prefetch_depth", &k));
	EXPECT_EQ(0, moem_budget_parse(k, "64", &v));
	EXPECT_EQ(-ERANGE, moem_budget_parse(k, "65", &v));
	ASSERT_EQ(0, moem_budget_lookup("reroute", &k));
	ASSERT_EQ(0, moem_budget_parse(k, "cache-aware", &v));
	EXPECT_EQ(MOEM_REROUTE_CACHE_AWARE, v);
	moem_budget_format(k, v, buf, sizeof(buf));
	EXPECT_STREQ("cache-aware", buf);
	EXPECT_EQ(-EINVAL, moem_budget_parse(k, "random", &v));
	EXPECT_EQ(-EINVAL, moem_budget_lookup("vram", &k));
}

TEST(error_messages)
{
	moem_clear_error();
	EXPECT_EQ(-ENOENT, moem_errf(ENOENT, "tensor %s missing", "w1"));
	EXPECT_STREQ("tensor w1 missing", moem_last_error());
	EXPECT_EQ(-ENOENT, moem_err_prefix(ENOENT, "shard %d", 2));
	EXPECT_STREQ("shard 2: tensor w1 missing", moem_last_error());
	moem_clear_error();
	EXPECT_STREQ(strerror(EIO), moem_strerror(-EIO));
}

TEST_HARNESS_MAIN
