// SPDX-License-Identifier: GPL-2.0-only
/*
 * Stop strings over streamed text (text_stop.h): whatever the chunking,
 * the text let out is the text before the first stop string to complete,
 * nothing is let out that could still become one, and bad strings are
 * refused with a message.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/rng.h>
#include <moem/text_stop.h>

#include "kselftest_harness.h"

/* Feed text in chunks of at most `chunk` bytes; collect what comes out. */
static int run(struct moem_text_stop *s, const char *text, size_t chunk, char *got, size_t *n)
{
	size_t len = strlen(text), at = 0;
	const char *o;
	size_t ol;
	int ret = 0;

	*n = 0;
	while (at < len && ret == 0) {
		size_t c = len - at < chunk ? len - at : chunk;

		ret = moem_text_stop_feed(s, text + at, c, &o, &ol);
		if (ret < 0)
			return ret;
		memcpy(got + *n, o, ol);
		*n += ol;
		at += c;
	}
	if (!ret) {
		moem_text_stop_flush(s, &o, &ol);
		memcpy(got + *n, o, ol);
		*n += ol;
	}
	got[*n] = 0;
	return ret;
}

TEST(no_stops_lets_everything_out)
{
	struct moem_text_stop *s;
	char got[64];
	size_t n;

	ASSERT_EQ(0, moem_text_stop_new(NULL, NULL, 0, 0, &s));
	EXPECT_EQ(0, run(s, "Hello, world", 1, got, &n));
	EXPECT_STREQ("Hello, world", got);
	EXPECT_EQ(-1, moem_text_stop_matched(s));
	moem_text_stop_free(s);
}

TEST(stop_in_every_chunking)
{
	static const char *const stops[] = {"</s>", "\n\nUser:"};
	const char *text = "Hello there.\n\nUser: more</s>";
	struct moem_text_stop *s;
	char got[64];
	size_t n;

	ASSERT_EQ(0, moem_text_stop_new(stops, NULL, 2, 0, &s));
	for (size_t chunk = 1; chunk <= strlen(text); chunk++) {
		moem_text_stop_reset(s);
		EXPECT_EQ(1, run(s, text, chunk, got, &n));
		EXPECT_STREQ("Hello there.", got);
		EXPECT_EQ(1, moem_text_stop_matched(s));
	}
	moem_text_stop_free(s);
}

TEST(holds_back_only_what_could_become_a_stop)
{
	static const char *const stops[] = {"</s>"};
	struct moem_text_stop *s;
	const char *o;
	size_t ol;

	ASSERT_EQ(0, moem_text_stop_new(stops, NULL, 1, 0, &s));
	ASSERT_EQ(0, moem_text_stop_feed(s, "abc<", 4, &o, &ol));
	EXPECT_EQ(3u, ol);
	EXPECT_EQ(0, memcmp(o, "abc", 3));
	ASSERT_EQ(0, moem_text_stop_feed(s, "/s", 2, &o, &ol));
	EXPECT_EQ(0u, ol);
	/* "</sx" cannot end as "</s>": all of it goes out */
	ASSERT_EQ(0, moem_text_stop_feed(s, "x", 1, &o, &ol));
	ASSERT_EQ(4u, ol);
	EXPECT_EQ(0, memcmp(o, "</sx", 4));
	/* the end of the text lets out what was held */
	ASSERT_EQ(0, moem_text_stop_feed(s, "</", 2, &o, &ol));
	EXPECT_EQ(0u, ol);
	moem_text_stop_flush(s, &o, &ol);
	ASSERT_EQ(2u, ol);
	EXPECT_EQ(0, memcmp(o, "</", 2));
	/* after a match, nothing more comes out */
	moem_text_stop_reset(s);
	EXPECT_EQ(1, moem_text_stop_feed(s, "x</s>y", 6, &o, &ol));
	EXPECT_EQ(1u, ol);
	EXPECT_EQ(1, moem_text_stop_feed(s, "more", 4, &o, &ol));
	EXPECT_EQ(0u, ol);
	moem_text_stop_flush(s, &o, &ol);
	EXPECT_EQ(0u, ol);
	moem_text_stop_free(s);
}

TEST(first_completed_wins_and_keep)
{
	static const char *const stops[] = {"abcd", "bc"};
	struct moem_text_stop *s;
	char got[64];
	size_t n;

	ASSERT_EQ(0, moem_text_stop_new(stops, NULL, 2, 0, &s));
	EXPECT_EQ(1, run(s, "xabcd", 1, got, &n));
	EXPECT_STREQ("xa", got);
	EXPECT_EQ(1, moem_text_stop_matched(s));
	moem_text_stop_free(s);

	ASSERT_EQ(0, moem_text_stop_new(stops, NULL, 2, MOEM_TEXT_STOP_KEEP, &s));
	EXPECT_EQ(1, run(s, "xabcdef", 3, got, &n));
	EXPECT_STREQ("xabc", got);
	moem_text_stop_free(s);
}

TEST(overlapping_prefixes)
{
	/* KMP fallback: "aab" inside "aaab", "abab" inside "ababab" */
	static const char *const a[] = {"aab"}, *const b[] = {"abac"};
	struct moem_text_stop *s;
	char got[64];
	size_t n;

	ASSERT_EQ(0, moem_text_stop_new(a, NULL, 1, 0, &s));
	EXPECT_EQ(1, run(s, "zaaab!", 1, got, &n));
	EXPECT_STREQ("za", got);
	moem_text_stop_free(s);
	ASSERT_EQ(0, moem_text_stop_new(b, NULL, 1, 0, &s));
	EXPECT_EQ(1, run(s, "abababac", 2, got, &n));
	EXPECT_STREQ("abab", got);
	moem_text_stop_free(s);
}

TEST(utf8_held_back_whole)
{
	/* "é!" as a stop: "café" holds the é back, then lets it out whole */
	static const char *const stops[] = {"\xc3\xa9!"};
	struct moem_text_stop *s;
	const char *o;
	size_t ol;

	ASSERT_EQ(0, moem_text_stop_new(stops, NULL, 1, 0, &s));
	ASSERT_EQ(0, moem_text_stop_feed(s, "caf\xc3\xa9", 5, &o, &ol));
	EXPECT_EQ(3u, ol);
	ASSERT_EQ(0, moem_text_stop_feed(s, "?", 1, &o, &ol));
	ASSERT_EQ(3u, ol);
	EXPECT_EQ(0, memcmp(o, "\xc3\xa9?", 3));
	moem_text_stop_free(s);
}

/* The earliest end of any stop string in text, or 0; *which its index. */
static size_t first_end(const char *text, const char *const *stops, uint32_t n, int *which)
{
	size_t len = strlen(text);

	for (size_t e = 1; e <= len; e++)
		for (uint32_t i = 0; i < n; i++) {
			size_t sl = strlen(stops[i]);

			if (sl <= e && !memcmp(text + e - sl, stops[i], sl)) {
				*which = (int)i;
				return e;
			}
		}
	return 0;
}

TEST(random_against_brute_force)
{
	struct moem_rng r;
	char text[200], got[256], sbuf[4][8];
	const char *stops[4];

	moem_rng_seed(&r, 7, 0);
	for (int iter = 0; iter < 3000; iter++) {
		uint32_t n = 1 + moem_rng_below(&r, 4), len = moem_rng_below(&r, 120);
		size_t chunk = 1 + moem_rng_below(&r, 9), e, gn;
		struct moem_text_stop *s;
		int which = -1, ret;

		for (uint32_t i = 0; i < n; i++) {
			uint32_t sl = 1 + moem_rng_below(&r, 5);

			for (uint32_t k = 0; k < sl; k++)
				sbuf[i][k] = (char)('a' + moem_rng_below(&r, 3));
			sbuf[i][sl] = 0;
			stops[i] = sbuf[i];
		}
		for (uint32_t k = 0; k < len; k++)
			text[k] = (char)('a' + moem_rng_below(&r, 3));
		text[len] = 0;
		ASSERT_EQ(0, moem_text_stop_new(stops, NULL, n, 0, &s));
		ret = run(s, text, chunk, got, &gn);
		e = first_end(text, stops, n, &which);
		if (e) {
			size_t want = e - strlen(stops[which]);

			ASSERT_EQ(1, ret);
			ASSERT_EQ(want, gn) TH_LOG("text %s chunk %zu", text, chunk);
			ASSERT_EQ(0, memcmp(got, text, want));
			ASSERT_EQ(which, moem_text_stop_matched(s));
		} else {
			ASSERT_EQ(0, ret);
			ASSERT_STREQ(text, got);
		}
		moem_text_stop_free(s);
	}
}

TEST(bad_strings_refused)
{
	static const char *const empty[] = {""}, *const bad[] = {"ok", "\xff"};
	const char *many[MOEM_TEXT_STOP_MAX + 1];
	char *big = malloc(MOEM_TEXT_STOP_MAX_LEN + 2);
	struct moem_text_stop *s = (void *)1;

	ASSERT_NE(NULL, big);
	EXPECT_EQ(-EINVAL, moem_text_stop_new(empty, NULL, 1, 0, &s));
	EXPECT_EQ(NULL, s);
	EXPECT_NE(NULL, strstr(moem_last_error(), "empty"));
	EXPECT_EQ(-EINVAL, moem_text_stop_new(bad, NULL, 2, 0, &s));
	EXPECT_NE(NULL, strstr(moem_last_error(), "UTF-8"));
	memset(big, 'x', MOEM_TEXT_STOP_MAX_LEN + 1);
	big[MOEM_TEXT_STOP_MAX_LEN + 1] = 0;
	many[0] = big;
	EXPECT_EQ(-EINVAL, moem_text_stop_new(many, NULL, 1, 0, &s));
	for (int i = 0; i <= MOEM_TEXT_STOP_MAX; i++)
		many[i] = "x";
	EXPECT_EQ(-EINVAL, moem_text_stop_new(many, NULL, MOEM_TEXT_STOP_MAX + 1, 0, &s));
	EXPECT_EQ(0, moem_text_stop_new(many, NULL, MOEM_TEXT_STOP_MAX, 0, &s));
	moem_text_stop_free(s);
	EXPECT_EQ(-EINVAL, moem_text_stop_new(many, NULL, 1, 1u << 5, &s));
	free(big);
}

TEST_HARNESS_MAIN
