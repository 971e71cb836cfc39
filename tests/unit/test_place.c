// SPDX-License-Identifier: GPL-2.0-only
/*
 * --place rules (place.h): the parser on good and bad input, the canonical
 * form, first-match-wins resolution with --cpu-moe-layers as the last
 * rule, and the checks against the model (beyond it, matches nothing).
 */
#include <errno.h>
#include <string.h>

#include <moem/error.h>
#include <moem/place.h>

#include "kselftest_harness.h"

#define EXPECT_MSG(s) \
	EXPECT_NE(NULL, strstr(moem_last_error(), (s))) TH_LOG("message: %s", moem_last_error())

static void canon(struct __test_metadata *_metadata, const char *in, const char *want)
{
	struct moem_place_rule r;
	char buf[256];

	ASSERT_EQ(0, moem_place_parse(in, &r)) TH_LOG("%s: %s", in, moem_last_error());
	EXPECT_EQ((int)strlen(want), moem_place_format(&r, buf, sizeof(buf)));
	EXPECT_STREQ(want, buf) TH_LOG("from '%s'", in);
}

TEST(parse_good)
{
	struct moem_place_rule r;

	canon(_metadata, "layers=0-3:cpu", "layers=0-3:cpu");
	canon(_metadata, "layers=10-20,experts=0-15:gpu", "layers=10-20,experts=0-15:gpu");
	canon(_metadata, " layers = 1 , 4-5 , 9 , experts = 7 : auto ",
	      "layers=1,4-5,9,experts=7:auto");
	canon(_metadata, "experts=3:cpu", "experts=3:cpu");
	canon(_metadata, "experts=2,layers=5:cpu", "layers=5,experts=2:cpu");
	canon(_metadata, "layers=*:cpu", "layers=*:cpu");
	canon(_metadata, "layers=*,experts=*:gpu", "layers=*:gpu");
	canon(_metadata, "layers=3,*:cpu", "layers=*:cpu"); /* * takes the whole key */
	canon(_metadata, "layers=65535:cpu", "layers=65535:cpu");
	ASSERT_EQ(0, moem_place_parse("layers=2-4,7,experts=0-1,6:gpu", &r));
	EXPECT_EQ(MOEM_PLACE_GPU, r.where);
	EXPECT_EQ(2, r.n_layers);
	EXPECT_EQ(2, r.n_experts);
	EXPECT_TRUE(moem_place_matches(&r, 3, 1));
	EXPECT_TRUE(moem_place_matches(&r, 7, 6));
	EXPECT_FALSE(moem_place_matches(&r, 5, 0));
	EXPECT_FALSE(moem_place_matches(&r, 2, 2));
	EXPECT_FALSE(moem_place_matches(&r, 1, 0));
}

TEST(parse_bad)
{
	static const char *const bad[][2] = {
		{"layers=0-3", "no ':'"},
		{"", "no ':'"},
		{"layers=0-3:host", "'host' is not cpu, gpu or auto"},
		{"layers=0-3:", "'' is not cpu, gpu or auto"},
		{":cpu", "before layers= or experts="},
		{"0-3:cpu", "'0-3' before layers= or experts="},
		{"layer=0:cpu", "unknown key 'layer'"},
		{"layers=:cpu", "an empty item in layers="},
		{"layers=1,,2:cpu", "an empty item in layers="},
		{"layers=1,:cpu", "an empty item in layers="},
		{"layers=a:cpu", "'a' is not a number"},
		{"layers=-3:cpu", "'' is not a number"},
		{"layers=3-:cpu", "'' is not a number"},
		{"layers=1x:cpu", "'1x' is not a number"},
		{"layers=+1:cpu", "'+1' is not a number"},
		{"layers=5-3:cpu", "the range 5-3 is empty"},
		{"layers=65536:cpu", "65536 is above 65535"},
		{"layers=99999999999999999999:cpu", "is above 65535"},
		{"layers=1,layers=2:cpu", "layers= given twice"},
		{"layers=0,1,2,3,4,5,6,7,8:cpu", "more than 8 items in layers="},
	};
	struct moem_place_rules p = {0};
	char longr[400];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		EXPECT_EQ(-EINVAL, moem_place_add(&p, bad[i][0])) TH_LOG("'%s'", bad[i][0]);
		EXPECT_MSG(bad[i][1]);
		EXPECT_EQ(0u, p.n); /* nothing appended */
	}
	memset(longr, '1', sizeof(longr) - 1);
	longr[sizeof(longr) - 1] = 0;
	EXPECT_EQ(-EINVAL, moem_place_add(&p, longr));
	EXPECT_MSG("at most 255");
	for (int i = 0; i < MOEM_PLACE_MAX_RULES; i++)
		ASSERT_EQ(0, moem_place_add(&p, "layers=0:cpu"));
	EXPECT_EQ(-E2BIG, moem_place_add(&p, "layers=0:cpu"));
	EXPECT_MSG("at most 16 rules");
	EXPECT_EQ((uint32_t)MOEM_PLACE_MAX_RULES, p.n);
}

TEST(first_match_wins)
{
	struct moem_place_rules p = {0};
	uint8_t map[4 * 8];
	uint64_t n_cpu = 0;
	char buf[256];

	/* layers 0-1 on the CPU, except experts 0-1 of layer 1 */
	ASSERT_EQ(0, moem_place_add(&p, "layers=1,experts=0-1:gpu"));
	ASSERT_EQ(0, moem_place_add(&p, "layers=0-1:cpu"));
	ASSERT_EQ(0, moem_place_add(&p, "layers=3,experts=7:auto"));
	ASSERT_EQ(0, moem_place_map(&p, 0, 4, 8, map, &n_cpu)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(14u, n_cpu);
	for (uint32_t m = 0; m < 4; m++)
		for (uint32_t x = 0; x < 8; x++) {
			uint8_t want = m == 1 && x < 2 ? MOEM_PLACE_GPU
				       : m < 2	       ? MOEM_PLACE_CPU
						       : MOEM_PLACE_AUTO;

			EXPECT_EQ(want, map[m * 8 + x]) TH_LOG("layer %u expert %u", m, x);
		}
	EXPECT_TRUE(moem_place_format_all(&p, buf, sizeof(buf)) > 0);
	EXPECT_STREQ("layers=1,experts=0-1:gpu; layers=0-1:cpu; layers=3,experts=7:auto", buf);
	/* --cpu-moe-layers comes after the rules: layer 2 joins the CPU's */
	ASSERT_EQ(0, moem_place_map(&p, 3, 4, 8, map, &n_cpu)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(22u, n_cpu);
	EXPECT_EQ(MOEM_PLACE_GPU, map[1 * 8 + 0]);
	EXPECT_EQ(MOEM_PLACE_CPU, map[2 * 8 + 5]);
	EXPECT_EQ(MOEM_PLACE_AUTO, map[3 * 8 + 7]);
	/* no rules: every expert auto; --cpu-moe-layers alone is its rule */
	memset(&p, 0, sizeof(p));
	ASSERT_EQ(0, moem_place_map(&p, 0, 4, 8, map, &n_cpu));
	EXPECT_EQ(0u, n_cpu);
	ASSERT_EQ(0, moem_place_map(&p, 2, 4, 8, NULL, &n_cpu));
	EXPECT_EQ(16u, n_cpu);
	/* a truncated format still reports the length it needs, NUL-terminated */
	ASSERT_EQ(0, moem_place_add(&p, "layers=0-3,experts=0-7:cpu"));
	EXPECT_EQ(26, moem_place_format_all(&p, buf, 8));
	EXPECT_STREQ("layers=", buf);
}

TEST(against_the_model)
{
	struct moem_place_rules p = {0};
	struct moem_place_rules q = {0};

	ASSERT_EQ(0, moem_place_add(&p, "layers=2-4:cpu"));
	EXPECT_EQ(-EINVAL, moem_place_map(&p, 0, 4, 8, NULL, NULL));
	EXPECT_MSG("place 'layers=2-4:cpu': MoE layer 4 is beyond the model's 4 (0-3)");
	memset(&p, 0, sizeof(p));
	ASSERT_EQ(0, moem_place_add(&p, "layers=0,experts=3,8:gpu"));
	EXPECT_EQ(-EINVAL, moem_place_map(&p, 0, 4, 8, NULL, NULL));
	EXPECT_MSG("expert 8 is beyond the model's 8 per layer (0-7)");
	/* shadowed by the rule before it: matches nothing */
	memset(&p, 0, sizeof(p));
	ASSERT_EQ(0, moem_place_add(&p, "layers=0-1:cpu"));
	ASSERT_EQ(0, moem_place_add(&p, "layers=1,experts=2-3:gpu"));
	EXPECT_EQ(-EINVAL, moem_place_map(&p, 0, 4, 8, NULL, NULL));
	EXPECT_MSG("place 'layers=1,experts=2-3:gpu' matches nothing");
	/* --cpu-moe-layers whose layers the rules already place */
	memset(&p, 0, sizeof(p));
	ASSERT_EQ(0, moem_place_add(&p, "layers=0-1:gpu"));
	EXPECT_EQ(-EINVAL, moem_place_map(&p, 2, 4, 8, NULL, NULL));
	EXPECT_MSG("--cpu-moe-layers 2 matches nothing");
	EXPECT_EQ(0, moem_place_map(&p, 3, 4, 8, NULL, NULL)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(-EINVAL, moem_place_map(&p, 5, 4, 8, NULL, NULL));
	EXPECT_MSG("--cpu-moe-layers 5: the model has 4 MoE layers");
	/* equality: same rules in the same order */
	ASSERT_EQ(0, moem_place_add(&q, "layers=0-1:gpu"));
	EXPECT_TRUE(moem_place_equal(&p, &q));
	ASSERT_EQ(0, moem_place_add(&q, "experts=1:cpu"));
	EXPECT_FALSE(moem_place_equal(&p, &q));
	ASSERT_EQ(0, moem_place_add(&p, "experts=2:cpu"));
	EXPECT_FALSE(moem_place_equal(&p, &q));
}

TEST_HARNESS_MAIN
