// SPDX-License-Identifier: GPL-2.0-only
/*
 * Chat templates whose expressions fail at render time: the error comes
 * back as a negative errno with a message, whatever operator the failing
 * expression sits under (not, and/or, a test, a filter, a condition), and
 * nothing reads the value the failed expression never produced. The fuzzer
 * once found `not` reading such a value (a stale stack slot that pointed
 * into the previous render's freed arena); valgrind runs this program
 * (make test-valgrind), which sees an uninitialised read even where the
 * stale slot happens to hold something harmless.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/chat.h>
#include <moem/error.h>

#include "kselftest_harness.h"

static const char msgs[] = "[{\"role\":\"user\",\"content\":\"Hi\"}]";

/* Render src; return moem_chat_render's result, the output in *out. */
static int render(const char *src, char **out)
{
	struct moem_chat_args a = {.messages_json = msgs, .messages_len = sizeof(msgs) - 1};
	struct moem_chat_template *t;
	int ret;

	*out = NULL;
	ret = moem_chat_parse(src, strlen(src), &t);
	if (ret)
		return ret;
	/* Twice, so the second render runs over the first one's freed arena. */
	for (int i = 0; i < 2; i++) {
		free(*out);
		*out = NULL;
		ret = moem_chat_render(t, &a, out, NULL);
		if (ret)
			break;
	}
	moem_chat_free(t);
	return ret;
}

TEST(good_templates_render)
{
	static const struct {
		const char *src, *want;
	} c[] = {
		{"{{ not messages }}", "False"},
		{"{{ not nothing }}", "True"},
		{"{{ messages and 1 }}", "1"},
		{"{{ 0 or messages|length }}", "1"},
		{"{{ messages is defined }}", "True"},
		{"{% for m in messages if not m.x %}{{ m.content }}{% endfor %}", "Hi"},
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		char *out;

		ASSERT_EQ(0, render(c[i].src, &out)) TH_LOG("%s: %s", c[i].src, moem_last_error());
		EXPECT_STREQ(c[i].want, out) TH_LOG("%s", c[i].src);
		free(out);
	}
}

TEST(failing_operands_fail_the_render)
{
	/* Each fails inside the operand: attribute of an undefined value. */
	static const char *const src[] = {
		"{% for m in messages %}{{ m }}{% endfor %}{{ not x.y }}",
		"{% if not x.y %}a{% endif %}",
		"{{ not not x.y }}",
		"{{ x.y and 1 }}",
		"{{ 1 and x.y }}",
		"{{ x.y or 1 }}",
		"{{ 0 or x.y }}",
		"{{ x.y is defined }}",
		"{{ not x.y is defined }}",
		"{{ messages|selectattr('content')|list + [not x.y] }}",
		"{{ 1 if not x.y else 2 }}",
		"{% for m in messages if not x.y %}{{ m }}{% endfor %}",
		"{{ (not x.y)|string }}",
	};

	for (size_t i = 0; i < sizeof(src) / sizeof(src[0]); i++) {
		char *out;
		int ret = render(src[i], &out);

		EXPECT_EQ(-EINVAL, ret) TH_LOG("%s rendered '%s'", src[i], out ? out : "");
		EXPECT_EQ(NULL, out);
		if (ret) {
			const char *e = moem_last_error();

			EXPECT_NE(NULL, strstr(e, "undefined")) TH_LOG("%s: %s", src[i], e);
		}
		free(out);
	}
}

/*
 * 64-bit integers out of range fail the render with a message (a pack's
 * template could trap: INT64_MIN // -1 is SIGFPE, the rest undefined
 * behaviour); found by the CLI's adversarial pass on a UBSan build. In
 * range, Python's answers.
 */
TEST(integers_out_of_range_fail_the_render)
{
	static const char *const bad[] = {
		"{{ (-9223372036854775807-1) // -1 }}",
		"{{ (-9223372036854775807-1) | abs }}",
		"{{ 9223372036854775807 + 1 }}",
		"{{ 9223372036854775807 * 2 }}",
		"{{ -9223372036854775807 - 2 }}",
		"{{ 9223372036854775807|float|int }}",
		"{{ range(-9223372036854775807-1, 9223372036854775807)|length }}",
	};
	static const struct {
		const char *src, *want;
	} good[] = {
		{"{{ (-9223372036854775807-1) % -1 }}", "0"},
		{"{{ -7 // 2 }} {{ -7 % 2 }} {{ 7 // -2 }} {{ 7 % -2 }}", "-4 1 -4 -1"},
		{"{{ range(0,-10,-9223372036854775807-1)|list }}", "[0]"},
		{"{{ range(9223372036854775800, 9223372036854775807, 5)|list }}",
		 "[9223372036854775800, 9223372036854775805]"},
		{"{{ range(5, 0, -2)|list }}", "[5, 3, 1]"},
		{"{{ \"abc\"[1::9223372036854775807] }}", "b"},
		{"{{ \"abcdef\"[::-9223372036854775807] }}", "f"},
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *out = NULL;
		int ret = render(bad[i], &out);

		EXPECT_NE(0, ret) TH_LOG("%s rendered '%s'", bad[i], out ? out : "");
		free(out);
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		char *out = NULL;

		ASSERT_EQ(0, render(good[i].src, &out))
		TH_LOG("%s: %s", good[i].src, moem_last_error());
		EXPECT_STREQ(good[i].want, out) TH_LOG("%s", good[i].src);
		free(out);
	}
}

/*
 * A namespace that holds itself (set ns.a = ns) cannot be printed: the
 * render fails with a message instead of recursing without end (found
 * by fuzz_chat as a stack overflow).
 */
TEST(a_value_holding_itself_fails_the_render)
{
	static const char *const src[] = {
		"{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}",
		"{% set ns = namespace(a=1) %}{% set ns.a = [ns] %}{{ ns.a }}",
	};

	for (size_t i = 0; i < sizeof(src) / sizeof(src[0]); i++) {
		char *out = NULL;
		int ret = render(src[i], &out);

		EXPECT_NE(0, ret) TH_LOG("%s rendered '%.40s'", src[i], out ? out : "");
		if (ret)
			EXPECT_NE(NULL, strstr(moem_last_error(), "nested more than 64 deep"))
		TH_LOG("%s", moem_last_error());
		free(out);
	}
}

TEST_HARNESS_MAIN
