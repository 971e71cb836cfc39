// SPDX-License-Identifier: GPL-2.0-only
/* Size parsing, budget knob parsing/validation, error messages, top-k selection. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/dev.h>
#include <moem/error.h>
#include <moem/rng.h>
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
	/* blanks then a sign: strtod() would take " -5" (an adversarial pass found it) */
	EXPECT_EQ(-EINVAL, moem_parse_size(" -5", NULL, &v));
	EXPECT_EQ(-EINVAL, moem_parse_size(" 5", NULL, &v));
	EXPECT_EQ(-EINVAL, moem_parse_size("+5", NULL, &v));
	/* a share that rounds to no byte is refused, not taken as 0 ("no limit") */
	EXPECT_EQ(-ERANGE, moem_parse_size("0.00001%", &base, &v));
	ASSERT_EQ(0, moem_parse_size("0%", &base, &v));
	EXPECT_EQ(0u, v);
	ASSERT_EQ(0, moem_parse_size("1Mi", NULL, &v));
	EXPECT_EQ(1u << 20, v);
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

static const float *sort_key;

static int by_key(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (sort_key[x] != sort_key[y])
		return sort_key[x] > sort_key[y] ? -1 : 1;
	return x < y ? -1 : 1;
}

/*
 * moem_select_top() against a sort in the same order: the same set in
 * the first k, the rest after, for every k, on keys with many ties,
 * all equal, sorted either way, and from a shuffled start.
 */
TEST(select_top_is_the_sorts_first_k)
{
	enum { N = 67 };
	static float key[N];
	static uint32_t idx[N], ref[N];
	struct moem_rng r;

	moem_rng_seed(&r, 11, 0);
	for (int trial = 0; trial < 400; trial++) {
		uint32_t n = 1 + (uint32_t)moem_rng_below(&r, N),
			 k = (uint32_t)moem_rng_below(&r, n + 1);

		for (uint32_t i = 0; i < n; i++) {
			switch (trial % 4) {
			case 0: /* few distinct values: many ties */
				key[i] = (float)moem_rng_below(&r, 4);
				break;
			case 1:
				key[i] = 1.0f; /* all tied: the lowest indices */
				break;
			case 2:
				key[i] = (float)(trial % 8 < 4 ? i : n - i); /* sorted */
				break;
			default:
				key[i] = (float)moem_rng_below(&r, 1000) / 7.0f;
			}
			idx[i] = ref[i] = i;
		}
		for (uint32_t i = n; i > 1; i--) { /* shuffle idx */
			uint32_t j = (uint32_t)moem_rng_below(&r, i), t = idx[i - 1];

			idx[i - 1] = idx[j];
			idx[j] = t;
		}
		sort_key = key;
		qsort(ref, n, sizeof(ref[0]), by_key);
		moem_select_top(idx, n, k, key);
		qsort(idx, k, sizeof(idx[0]), by_key);
		qsort(idx + k, n - k, sizeof(idx[0]), by_key);
		for (uint32_t i = 0; i < n; i++) {
			ASSERT_EQ(ref[i], idx[i])
			TH_LOG("trial %d, n %u, k %u, at %u", trial, n, k, i);
		}
	}
}

/* A message cut to fit never ends inside a UTF-8 character; a saved one comes back. */
TEST(error_messages_whole_characters_and_saved)
{
	struct moem_err_saved sv;
	char name[400];
	const char *m;
	size_t n;

	for (size_t i = 0; i + 2 < sizeof(name); i += 2)
		memcpy(name + i, "\xc3\xa9", 2);
	name[sizeof(name) - 1] = 0;
	name[sizeof(name) - 2] = 0;
	for (int shift = 0; shift < 4; shift++) {
		moem_errf(EINVAL, "%.*sknob '%s' and '%s'", shift, "xxx", name, name);
		m = moem_last_error();
		n = strlen(m);
		ASSERT_GT(n, 400u);
		/* the end is a whole character: an ASCII byte or a complete é */
		EXPECT_TRUE((unsigned char)m[n - 1] < 0x80 ||
			    ((unsigned char)m[n - 2] == 0xc3 && (unsigned char)m[n - 1] == 0xa9))
		TH_LOG("shift %d ends with %02x %02x", shift, (unsigned char)m[n - 2],
		       (unsigned char)m[n - 1]);
	}
	moem_errf(EIO, "the step failed");
	moem_error_save(&sv);
	moem_errf(ENOENT, "no sequence 3");
	moem_error_restore(&sv);
	EXPECT_STREQ("the step failed", moem_last_error());
}

/* A stream holding s (fmemopen: the bytes as given, NULs included). */
static FILE *stream(const char *s, size_t n)
{
	return fmemopen((void *)s, n, "r");
}

/*
 * Bounded reads: up to max bytes taken, one more refused with EFBIG and a
 * message (not read on into memory); lines as getline() gives them, the
 * last without its newline, then -ENODATA.
 */
TEST(bounded_reads)
{
	char *buf = NULL, *line = NULL;
	size_t len = 0, cap = 0;
	FILE *f;

	f = stream("abcdef", 6);
	ASSERT_EQ(0, moem_read_whole(f, "in", 6, &buf, &len));
	EXPECT_EQ(6u, len);
	EXPECT_STREQ("abcdef", buf);
	free(buf);
	fclose(f);
	f = stream("abcdefg", 7);
	EXPECT_EQ(-EFBIG, moem_read_whole(f, "in", 6, &buf, &len));
	EXPECT_NE(NULL, strstr(moem_last_error(), "in: larger than 6 B"))
	TH_LOG("%s", moem_last_error());
	fclose(f);
	f = stream("", 0);
	ASSERT_EQ(0, moem_read_whole(f, "in", 6, &buf, &len));
	EXPECT_EQ(0u, len);
	EXPECT_STREQ("", buf);
	free(buf);
	fclose(f);

	f = stream("ab\n\ncd", 6);
	EXPECT_EQ(3, moem_getline(&line, &cap, f, "in", 3));
	EXPECT_STREQ("ab\n", line);
	EXPECT_EQ(1, moem_getline(&line, &cap, f, "in", 3));
	EXPECT_STREQ("\n", line);
	EXPECT_EQ(2, moem_getline(&line, &cap, f, "in", 3));
	EXPECT_STREQ("cd", line);
	EXPECT_EQ(-ENODATA, moem_getline(&line, &cap, f, "in", 3));
	fclose(f);
	f = stream("abcd\n", 5);
	EXPECT_EQ(-EFBIG, moem_getline(&line, &cap, f, NULL, 3));
	EXPECT_STREQ("a line longer than 3 B, the most this reads", moem_last_error());
	fclose(f);
	free(line);
}

TEST_HARNESS_MAIN
