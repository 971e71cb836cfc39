// SPDX-License-Identifier: GPL-2.0-only
/*
 * The JSON recognizer for constrained decoding (json_fsm.h): documents it
 * must take, whole and a byte at a time; bytes it must refuse where they
 * come; and agreement with json-c's own incremental parser (strict mode)
 * on every prefix of many random byte strings made of JSON's characters:
 * where the recognizer goes on, json-c must too, and where it says the
 * object is complete, json-c must read exactly one object.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/json_fsm.h>
#include <moem/rng.h>

#include "kselftest_harness.h"

static int feed_all(const char *s, struct moem_json_fsm *f)
{
	moem_json_fsm_init(f, NULL);
	return moem_json_fsm_feed(f, s, strlen(s));
}

/* Accepted and complete, whole and a byte at a time. */
static void good(struct __test_metadata *_metadata, const char *s)
{
	struct moem_json_fsm f;

	EXPECT_EQ(0, feed_all(s, &f)) TH_LOG("refused: %s", s);
	EXPECT_TRUE(moem_json_fsm_done(&f)) TH_LOG("not complete: %s", s);
	moem_json_fsm_init(&f, NULL);
	for (size_t i = 0; i < strlen(s); i++) {
		ASSERT_EQ(0, moem_json_fsm_feed(&f, s + i, 1)) TH_LOG("%s: byte %zu", s, i);
	}
	EXPECT_TRUE(moem_json_fsm_done(&f));
}

/* Refused at byte at (and not before). */
static void bad(struct __test_metadata *_metadata, const char *s, size_t at)
{
	struct moem_json_fsm f;

	moem_json_fsm_init(&f, NULL);
	EXPECT_EQ(0, moem_json_fsm_feed(&f, s, at)) TH_LOG("%s: refused before byte %zu", s, at);
	EXPECT_EQ(-EINVAL, moem_json_fsm_feed(&f, s + at, 1)) TH_LOG("%s: byte %zu taken", s, at);
}

TEST(documents_taken)
{
	good(_metadata, "{}");
	good(_metadata, " \n{ }\n");
	good(_metadata, "{\"a\":1}");
	good(_metadata, "{\"a\": [1, -2.5e+3, 0, 0.0, 1E9, true, false, null, \"x\"], \"b\": {}}");
	good(_metadata, "{\"\": [[], [{}], {\"c\": [null]}]}");
	good(_metadata, "{\"esc\": \"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\uFFFF\"}");
	good(_metadata, "{\"utf8\": \"\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xed\x9f\xbf\"}");
	good(_metadata, "{\"n\": -0, \"m\": 10.25E-2}");
}

TEST(bytes_refused_where_they_come)
{
	bad(_metadata, "[1]", 0); /* the top value is an object */
	bad(_metadata, "\"x\"", 0);
	bad(_metadata, "{,}", 1);
	bad(_metadata, "{\"a\"}", 4);
	bad(_metadata, "{\"a\":}", 5);
	bad(_metadata, "{\"a\":1,}", 7); /* no trailing comma */
	bad(_metadata, "{\"a\":01}", 6); /* no leading zero */
	bad(_metadata, "{\"a\":1.}", 7);
	bad(_metadata, "{\"a\":-}", 6);
	bad(_metadata, "{\"a\":1e}", 7);
	bad(_metadata, "{\"a\":+1}", 5);
	bad(_metadata, "{\"a\":tru}", 8);
	bad(_metadata, "{\"a\":nul1}", 8);
	bad(_metadata, "{\"a\":[1}", 7);       /* closer of the other kind */
	bad(_metadata, "{\"a\":\"\x01\"}", 6); /* control character */
	bad(_metadata, "{\"a\":\"\\x\"}", 7);
	bad(_metadata, "{\"a\":\"\\u00g0\"}", 10);
	bad(_metadata, "{\"a\":\"\\ud800\"}", 9);	   /* an escaped surrogate */
	bad(_metadata, "{\"a\":\"\xc0\x80\"}", 6);	   /* overlong */
	bad(_metadata, "{\"a\":\"\xed\xa0\x80\"}", 7);	   /* a surrogate in UTF-8 */
	bad(_metadata, "{\"a\":\"\xf4\x90\x80\x80\"}", 7); /* past U+10FFFF */
	bad(_metadata, "{\"a\":\"\xe2\x82\"}", 8);	   /* cut short */
	bad(_metadata, "{}x", 2);			   /* after the object: whitespace only */
	bad(_metadata, "{} {", 3);
}

TEST(limits)
{
	struct moem_json_fsm f;
	char s[256];
	size_t n = 0;

	/* nesting: MOEM_JSON_FSM_DEPTH containers, not one more */
	s[n++] = '{';
	memcpy(s + n, "\"a\":", 4);
	n += 4;
	for (int i = 1; i < MOEM_JSON_FSM_DEPTH; i++)
		s[n++] = '[';
	moem_json_fsm_init(&f, NULL);
	ASSERT_EQ(0, moem_json_fsm_feed(&f, s, n));
	EXPECT_EQ(-EINVAL, moem_json_fsm_feed(&f, "[", 1));
	/* whitespace: MOEM_JSON_FSM_WS in a row, not one more */
	memset(s, ' ', MOEM_JSON_FSM_WS);
	moem_json_fsm_init(&f, NULL);
	ASSERT_EQ(0, moem_json_fsm_feed(&f, "{", 1));
	ASSERT_EQ(0, moem_json_fsm_feed(&f, s, MOEM_JSON_FSM_WS));
	EXPECT_EQ(-EINVAL, moem_json_fsm_feed(&f, "\n", 1));
	/* ... but in a string, blanks are text */
	moem_json_fsm_init(&f, NULL);
	ASSERT_EQ(0, moem_json_fsm_feed(&f, "{\"", 2));
	for (int i = 0; i < 4; i++)
		ASSERT_EQ(0, moem_json_fsm_feed(&f, s, MOEM_JSON_FSM_WS));
}

static bool numberish(char c)
{
	return c && strchr("0123456789+-.eE", c);
}

/* json-c on a prefix: 1 valid so far, 2 one whole object, 0 not JSON. */
static int jsonc_prefix(const char *s, size_t n)
{
	struct json_tokener *tok = json_tokener_new_ex(MOEM_JSON_FSM_DEPTH + 2);
	struct json_object *o;
	enum json_tokener_error err;
	int ret;

	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, s, (int)n);
	err = json_tokener_get_error(tok);
	if (err == json_tokener_continue)
		ret = 1;
	else if (err == json_tokener_success && json_object_is_type(o, json_type_object) &&
		 json_tokener_get_parse_end(tok) <= n)
		ret = 2;
	else
		ret = 0;
	json_object_put(o);
	json_tokener_free(tok);
	return ret;
}

TEST(agrees_with_json_c)
{
	/* JSON's characters, weighted to make structure often */
	static const char alpha[] = "{{{}}}[[]]\"\"\"\"::,,,,  \nab01-.e9tfnrlu\\\xc3\xa9";
	struct moem_rng rng;
	unsigned int complete = 0, checked = 0;

	moem_rng_seed(&rng, 20261128, 1);
	for (int round = 0; round < 20000; round++) {
		struct moem_json_fsm f;
		char s[48];
		size_t n = 0;

		moem_json_fsm_init(&f, NULL);
		s[n] = '{';
		ASSERT_EQ(0, moem_json_fsm_feed(&f, s, 1));
		for (n = 1; n < sizeof(s) - 1; n++) {
			struct moem_json_fsm g;
			bool taken = false;

			/* draw until a byte goes on, up to 8 tries; every refusal and
			 * every acceptance is checked against json-c */
			for (int tries = 0; tries < 8; tries++) {
				s[n] = alpha[moem_rng_u64(&rng) % (sizeof(alpha) - 1)];
				g = f;
				checked++;
				if (!moem_json_fsm_feed(&g, s + n, 1)) {
					/* (json-c refuses a prefix that ends inside a
					 * character: it checks UTF-8 a chunk at a time) */
					if (!g.cont) {
						ASSERT_NE(0, jsonc_prefix(s, n + 1))
						TH_LOG("taken, json-c refuses: %.*s", (int)n + 1,
						       s);
					}
					taken = true;
					break;
				}
				/* refused: json-c refuses too (escapes aside: an escaped
				 * surrogate is refused here, not by json-c; a raw newline,
				 * which json-c takes inside a string; and numbers, which
				 * it checks only once they end) */
				if (!memchr(s, '\\', n + 1) && s[n] != '\n' && !numberish(s[n]) &&
				    !numberish(s[n - 1])) {
					ASSERT_EQ(0, jsonc_prefix(s, n + 1))
					TH_LOG("refused, json-c goes on: %.*s", (int)n + 1, s);
				}
			}
			if (!taken)
				break;
			f = g;
			if (moem_json_fsm_done(&f)) {
				EXPECT_EQ(2, jsonc_prefix(s, n + 1)) TH_LOG("%.*s", (int)n + 1, s);
				complete++;
				break;
			}
		}
	}
	TH_LOG("%u bytes checked, %u complete objects", checked, complete);
	EXPECT_GT(complete, 100u);
}

TEST_HARNESS_MAIN
