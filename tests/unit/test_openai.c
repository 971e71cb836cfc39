// SPDX-License-Identifier: GPL-2.0-only
/*
 * The OpenAI API pieces (openai.h): request checking (every field, its
 * range, unknown fields, malformed bodies, bad UTF-8), the shapes of
 * responses, chunks and errors (parsed back with json-c), and stop
 * strings over text cut at every possible place.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/openai.h>
#include <moem/sched.h>
#include <moem/util.h>

#include "kselftest_harness.h"

static int parse(enum moem_oai_endpoint ep, const char *body, struct moem_oai_request *rq,
		 struct moem_oai_error *e)
{
	return moem_oai_parse(ep, body, strlen(body), rq, e);
}

/* The body must be refused with 400 naming param. */
static void refused(struct __test_metadata *_metadata, enum moem_oai_endpoint ep, const char *body,
		    const char *param)
{
	struct moem_oai_request rq;
	struct moem_oai_error e;
	int ret = parse(ep, body, &rq, &e);

	EXPECT_EQ(-EINVAL, ret) TH_LOG("accepted: %s", body);
	if (ret)
		EXPECT_EQ(400, e.status);
	if (ret && param)
		EXPECT_STREQ(param, e.param) TH_LOG("%s: %s", body, e.message);
	if (!ret)
		moem_oai_request_free(&rq);
}

TEST(completion_defaults_and_fields)
{
	struct moem_oai_request rq;
	struct moem_oai_error e;

	ASSERT_EQ(0,
		  parse(MOEM_OAI_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"Hello\"}", &rq, &e));
	EXPECT_STREQ("m", rq.model);
	EXPECT_STREQ("Hello", rq.prompt);
	EXPECT_EQ(0u, rq.max_tokens);
	EXPECT_EQ(1.0, rq.temperature);
	EXPECT_EQ(1.0, rq.top_p);
	EXPECT_EQ(0, rq.top_k);
	EXPECT_FALSE(rq.stream);
	EXPECT_FALSE(rq.logprobs);
	EXPECT_FALSE(rq.has_seed);
	moem_oai_request_free(&rq);

	ASSERT_EQ(0, parse(MOEM_OAI_COMPLETIONS,
			   "{\"model\":\"m\",\"prompt\":[[1,2,3]],\"max_tokens\":16,"
			   "\"temperature\":0,\"top_p\":0.5,\"top_k\":40,\"min_p\":0.1,"
			   "\"presence_penalty\":-1.5,\"frequency_penalty\":2,\"seed\":-7,"
			   "\"stop\":[\"\\n\\n\",\"END\"],\"n\":1,\"logprobs\":3,\"stream\":true,"
			   "\"stream_options\":{\"include_usage\":true},\"user\":\"u1\","
			   "\"suffix\":null}",
			   &rq, &e))
	{
		TH_LOG("%s", e.message);
	}
	EXPECT_EQ(NULL, rq.prompt);
	ASSERT_EQ(3u, rq.n_prompt_ids);
	EXPECT_EQ(3, rq.prompt_ids[2]);
	EXPECT_EQ(16u, rq.max_tokens);
	EXPECT_EQ(0.0, rq.temperature);
	EXPECT_EQ(40, rq.top_k);
	EXPECT_EQ(-1.5, rq.presence_penalty);
	EXPECT_TRUE(rq.has_seed);
	EXPECT_EQ((uint64_t)-7, rq.seed);
	ASSERT_EQ(2u, rq.n_stop);
	EXPECT_STREQ("END", rq.stop[1]);
	EXPECT_TRUE(rq.logprobs);
	EXPECT_EQ(3u, rq.top_logprobs);
	EXPECT_TRUE(rq.stream);
	EXPECT_TRUE(rq.include_usage);
	moem_oai_request_free(&rq);

	/* One prompt in an array; a JavaScript 5.0 is an integer. */
	ASSERT_EQ(0, parse(MOEM_OAI_COMPLETIONS,
			   "{\"model\":\"m\",\"prompt\":[\"x\"],\"max_tokens\":5.0}", &rq, &e));
	EXPECT_STREQ("x", rq.prompt);
	EXPECT_EQ(5u, rq.max_tokens);
	moem_oai_request_free(&rq);
}

TEST(chat_messages)
{
	struct moem_oai_request rq;
	struct moem_oai_error e;

	ASSERT_EQ(0, parse(MOEM_OAI_CHAT,
			   "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be "
			   "brief.\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
			   "\"Hi \"},{\"type\":\"text\",\"text\":\"there\"}],\"name\":\"bob\"},"
			   "{\"role\":\"assistant\",\"content\":null}],\"max_completion_tokens\":9,"
			   "\"logprobs\":true,\"top_logprobs\":2}",
			   &rq, &e))
	{
		TH_LOG("%s", e.message);
	}
	ASSERT_EQ(3u, rq.n_messages);
	EXPECT_STREQ("system", rq.messages[0].role);
	EXPECT_STREQ("Hi there", rq.messages[1].content);
	EXPECT_STREQ("", rq.messages[2].content);
	EXPECT_EQ(9u, rq.max_tokens);
	EXPECT_TRUE(rq.logprobs);
	EXPECT_EQ(2u, rq.top_logprobs);
	moem_oai_request_free(&rq);
}

TEST(bad_fields_named)
{
	const enum moem_oai_endpoint C = MOEM_OAI_COMPLETIONS, H = MOEM_OAI_CHAT;

	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"best_of\":2}", "best_of");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"messages\":[]}", "messages");
	refused(_metadata, H,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
		"\"prompt\":\"x\"}",
		"prompt");
	refused(_metadata, C, "{\"prompt\":\"x\"}", "model");
	refused(_metadata, C, "{\"model\":\"m\"}", "prompt");
	refused(_metadata, C, "{\"model\":7,\"prompt\":\"x\"}", "model");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"\"}", "prompt");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":[]}", "prompt");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", "prompt");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":[1,-2]}", "prompt[1]");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":[1,2.5]}", "prompt[1]");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"temperature\":2.5}",
		"temperature");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"temperature\":\"hot\"}",
		"temperature");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"top_p\":0}", "top_p");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"top_p\":1.01}", "top_p");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"top_k\":-2}", "top_k");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"min_p\":1.5}", "min_p");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"presence_penalty\":3}",
		"presence_penalty");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"frequency_penalty\":-2.1}",
		"frequency_penalty");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":1e12}",
		"max_tokens");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"n\":17}", "n");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"n\":0}", "n");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"seed\":1.5}", "seed");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"seed\":99999999999999999999}",
		"seed");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"logprobs\":21}", "logprobs");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"logprobs\":true}", "logprobs");
	refused(_metadata, C,
		"{\"model\":\"m\",\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\","
		"\"e\"]}",
		"stop");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"stop\":[\"a\",\"\"]}",
		"stop[1]");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"stop\":5}", "stop");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"stream\":\"yes\"}", "stream");
	refused(_metadata, C,
		"{\"model\":\"m\",\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}",
		"stream_options");
	refused(_metadata, C,
		"{\"model\":\"m\",\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"x\":1}}",
		"stream_options.x");
	refused(_metadata, H, "{\"model\":\"m\",\"messages\":[]}", "messages");
	refused(_metadata, H, "{\"model\":\"m\",\"messages\":{}}", "messages");
	refused(_metadata, H,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}",
		"messages[0].role");
	refused(_metadata, H, "{\"model\":\"m\",\"messages\":[{\"content\":\"x\"}]}",
		"messages[0].role");
	refused(_metadata, H, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}]}",
		"messages[0].content");
	refused(_metadata, H,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_"
		"calls\":"
		"[]}]}",
		"messages[0].tool_calls");
	refused(_metadata, H,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_"
		"url\""
		",\"image_url\":{}}]}]}",
		"messages[0].content[0].image_url");
	refused(_metadata, H,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
		"\"image\"}]"
		"}]}",
		"messages[0].content[0].type");
	refused(_metadata, H,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_"
		"logprobs\""
		":2}",
		"top_logprobs");
	refused(_metadata, H,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
		"\"logprobs\":"
		"3}",
		"logprobs");
}

TEST(malformed_bodies)
{
	const enum moem_oai_endpoint C = MOEM_OAI_COMPLETIONS;
	struct moem_oai_request rq;
	struct moem_oai_error e;
	const char bad_utf8[] = "{\"model\":\"m\",\"prompt\":\"a\xff\xfe\"}";
	const char overlong[] = "{\"model\":\"m\",\"prompt\":\"\xc0\xaf\"}";

	refused(_metadata, C, "", "");
	refused(_metadata, C, "{", "");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\"} trailing", "");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",}", "");
	refused(_metadata, C, "[1,2]", "");
	refused(_metadata, C, "\"x\"", "");
	refused(_metadata, C, "null", "");
	refused(_metadata, C, "{'model':'m'}", "");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"a\\u0000b\"}", "prompt");
	EXPECT_EQ(-EINVAL, moem_oai_parse(C, bad_utf8, sizeof(bad_utf8) - 1, &rq, &e));
	EXPECT_EQ(400, e.status);
	EXPECT_EQ(-EINVAL, moem_oai_parse(C, overlong, sizeof(overlong) - 1, &rq, &e));
	/* A NUL byte inside the body ends nothing early: refused. */
	EXPECT_EQ(-EINVAL, moem_oai_parse(C, "{\"model\":\"m\"}\0{}", 15, &rq, &e));
	/* A lone surrogate escape never becomes a broken string. */
	if (!parse(C, "{\"model\":\"m\",\"prompt\":\"\\ud800x\"}", &rq, &e)) {
		EXPECT_TRUE(moem_oai_utf8_ok(rq.prompt, strlen(rq.prompt)));
		moem_oai_request_free(&rq);
	}
}

TEST(utf8_checker)
{
	EXPECT_TRUE(moem_oai_utf8_ok("", 0));
	EXPECT_TRUE(moem_oai_utf8_ok("h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 12));
	EXPECT_FALSE(moem_oai_utf8_ok("\xc3", 1));	       /* cut short */
	EXPECT_FALSE(moem_oai_utf8_ok("\xe2\x82", 2));	       /* cut short */
	EXPECT_FALSE(moem_oai_utf8_ok("\xed\xa0\x80", 3));     /* surrogate */
	EXPECT_FALSE(moem_oai_utf8_ok("\xe0\x80\xaf", 3));     /* overlong */
	EXPECT_FALSE(moem_oai_utf8_ok("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
	EXPECT_FALSE(moem_oai_utf8_ok("a\0b", 3));
	EXPECT_FALSE(moem_oai_utf8_ok("\x80", 1));
}

static struct json_object *parse_json(const char *s)
{
	return s ? json_tokener_parse(s) : NULL;
}

static const char *jpath(struct json_object *o, const char *a, int idx, const char *b)
{
	struct json_object *x;

	if (!json_object_object_get_ex(o, a, &x))
		return NULL;
	if (idx >= 0)
		x = json_object_array_get_idx(x, (size_t)idx);
	if (b && !json_object_object_get_ex(x, b, &x))
		return NULL;
	return x ? json_object_get_string(x) : NULL;
}

/*
 * What the sampler would refuse later is refused here, before a stream
 * starts (a 200 and then an in-band error otherwise): top_k past its
 * bound, and values > 0 that are 0 as the sampler's float. Types and
 * nesting the API does not have are refused too.
 */
TEST(refused_before_the_sampler)
{
	const enum moem_oai_endpoint C = MOEM_OAI_COMPLETIONS, H = MOEM_OAI_CHAT;
	struct moem_oai_request rq;
	struct moem_oai_error e;

	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"top_k\":16777217}", "top_k");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"top_p\":1e-300}", "top_p");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":\"x\",\"repetition_penalty\":1e-300}",
		"repetition_penalty");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":[[[1,2]]]}", "prompt");
	refused(_metadata, C, "{\"model\":\"m\",\"prompt\":[[\"a\"]]}", "prompt");
	refused(_metadata, H,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":5}]}",
		"messages[0].name");
	/* the bounds themselves pass */
	ASSERT_EQ(0,
		  parse(C, "{\"model\":\"m\",\"prompt\":\"x\",\"top_k\":16777216,\"top_p\":1e-30}",
			&rq, &e))
	TH_LOG("%s", e.message);
	EXPECT_EQ(1 << 24, rq.top_k);
	moem_oai_request_free(&rq);
	ASSERT_EQ(0, parse(H,
			   "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\","
			   "\"name\":\"ann\"}]}",
			   &rq, &e))
	TH_LOG("%s", e.message);
	moem_oai_request_free(&rq);
	/* both lengths (chat): max_completion_tokens, wherever it comes */
	for (int i = 0; i < 2; i++) {
		const char *body[2] = {
			"{\"model\":\"m\",\"max_completion_tokens\":7,\"messages\":[{\"role\":"
			"\"user\",\"content\":\"x\"}],\"max_tokens\":9}",
			"{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":"
			"\"user\",\"content\":\"x\"}],\"max_completion_tokens\":7}",
		};

		ASSERT_EQ(0, parse(H, body[i], &rq, &e));
		EXPECT_EQ(7u, rq.max_tokens);
		moem_oai_request_free(&rq);
	}
}

/* An unknown field's name cut to fit param inside a character: still UTF-8. */
TEST(error_param_is_utf8)
{
	char body[256], name[80] = {0};
	struct moem_oai_request rq;
	struct moem_oai_error e;
	struct json_object *o;
	size_t len;
	char *s;

	memset(name, 'a', 62);
	memcpy(name + 62, "\xc3\xa9", 3); /* é across the cut at 63 bytes */
	snprintf(body, sizeof(body), "{\"model\":\"m\",\"prompt\":\"x\",\"%s\":1}", name);
	ASSERT_EQ(-EINVAL, parse(MOEM_OAI_COMPLETIONS, body, &rq, &e));
	s = moem_oai_error_body(&e, &len);
	ASSERT_NE(NULL, s);
	EXPECT_TRUE(moem_oai_utf8_ok(s, len)) TH_LOG("%s", s);
	o = parse_json(s);
	EXPECT_NE(NULL, o);
	json_object_put(o);
	free(s);
}

/*
 * Completions' top_logprobs is an object keyed by text: two alternatives
 * with the same text (single bytes that are no UTF-8 alone both read
 * U+FFFD) keep the first, likelier one's logprob.
 */
/* A completion's reply header, with logprobs and top alternatives. */
static struct moem_oai_reply cmpl_reply(uint32_t top)
{
	return (struct moem_oai_reply){.ep = MOEM_OAI_COMPLETIONS,
				       .id = "cmpl-1",
				       .model = "tiny",
				       .created = 1700000000,
				       .logprobs = true,
				       .top_logprobs = top};
}

TEST(top_logprobs_same_text_keeps_the_first)
{
	struct moem_oai_reply r = cmpl_reply(3);
	struct moem_oai_token t = {.text = "\xc3", .len = 1, .logprob = -0.5f, .n_top = 3};
	struct moem_oai_usage u = {.prompt_tokens = 1, .completion_tokens = 1};
	const char *alt[3] = {"\xc3", "b", "\xab"};
	struct json_object *o, *x, *top;
	size_t len;
	char *s;

	for (int k = 0; k < 3; k++) {
		t.top[k].text = alt[k];
		t.top[k].len = 1;
		t.top[k].logprob = -0.5f - (float)k;
	}
	s = moem_oai_response(&r, "\xc3", 1, &t, 1, MOEM_SCHED_LENGTH, &u, &len);
	ASSERT_NE(NULL, s);
	o = parse_json(s);
	ASSERT_NE(NULL, o);
	json_object_object_get_ex(
		json_object_array_get_idx(json_object_object_get(o, "choices"), 0), "logprobs", &x);
	top = json_object_array_get_idx(json_object_object_get(x, "top_logprobs"), 0);
	EXPECT_EQ(2, json_object_object_length(top));
	EXPECT_EQ(-0.5, json_object_get_double(json_object_object_get(top, "\xef\xbf\xbd")));
	json_object_put(o);
	free(s);
}

TEST(response_shapes)
{
	struct moem_oai_reply r = cmpl_reply(1);
	struct moem_oai_token t[2] = {{.text = "he", .len = 2, .logprob = -0.25f, .n_top = 1},
				      {.text = "llo\xe2", .len = 4, .logprob = -1.0f}};
	struct moem_oai_usage u = {.prompt_tokens = 5, .completion_tokens = 2};
	struct json_object *o, *x, *usage;
	size_t len;
	char *s;

	t[0].top[0].text = "he";
	t[0].top[0].len = 2;
	t[0].top[0].logprob = -0.25f;
	s = moem_oai_response(&r, "hello\xe2", 6, t, 2, MOEM_SCHED_LENGTH, &u, &len);
	ASSERT_NE(NULL, s);
	EXPECT_EQ(strlen(s), len);
	o = parse_json(s);
	ASSERT_NE(NULL, o);
	EXPECT_STREQ("text_completion", jpath(o, "object", -1, NULL));
	EXPECT_STREQ("hello\xef\xbf\xbd", jpath(o, "choices", 0, "text"));
	EXPECT_STREQ("length", jpath(o, "choices", 0, "finish_reason"));
	ASSERT_TRUE(json_object_object_get_ex(o, "usage", &usage));
	EXPECT_STREQ("7", jpath(usage, "total_tokens", -1, NULL));
	json_object_object_get_ex(
		json_object_array_get_idx(json_object_object_get(o, "choices"), 0), "logprobs", &x);
	EXPECT_STREQ("2", jpath(x, "text_offset", 1, NULL));
	EXPECT_EQ(2, (int)json_object_array_length(json_object_object_get(x, "tokens")));
	json_object_put(o);
	free(s);

	/* Chat: message with role; logprobs with bytes. */
	r.ep = MOEM_OAI_CHAT;
	r.id = "chatcmpl-1";
	s = moem_oai_response(&r, "hi", 2, t, 1, MOEM_SCHED_STOP, &u, &len);
	o = parse_json(s);
	ASSERT_NE(NULL, o);
	EXPECT_STREQ("chat.completion", jpath(o, "object", -1, NULL));
	x = json_object_object_get(
		json_object_array_get_idx(json_object_object_get(o, "choices"), 0), "message");
	EXPECT_STREQ("assistant", jpath(x, "role", -1, NULL));
	EXPECT_STREQ("hi", jpath(x, "content", -1, NULL));
	EXPECT_STREQ("stop", jpath(o, "choices", 0, "finish_reason"));
	x = json_object_object_get(
		json_object_array_get_idx(json_object_object_get(o, "choices"), 0), "logprobs");
	x = json_object_array_get_idx(json_object_object_get(x, "content"), 0);
	EXPECT_STREQ("he", jpath(x, "token", -1, NULL));
	EXPECT_STREQ("104", jpath(x, "bytes", 0, NULL));
	EXPECT_EQ(1, (int)json_object_array_length(json_object_object_get(x, "top_logprobs")));
	json_object_put(o);
	free(s);
}

TEST(chunk_shapes)
{
	struct moem_oai_reply r = {.ep = MOEM_OAI_CHAT, .id = "chatcmpl-2", .model = "tiny"};
	struct moem_oai_usage u = {.prompt_tokens = 3, .completion_tokens = 4};
	struct moem_oai_error e;
	struct json_object *o, *d;
	size_t len;
	char *s;

	s = moem_oai_chunk(&r, true, "Hel", 3, NULL, 0, 0, &len);
	ASSERT_NE(NULL, s);
	ASSERT_EQ(0, strncmp(s, "data: {", 7));
	ASSERT_EQ(0, strcmp(s + len - 2, "\n\n"));
	o = parse_json(s + 6);
	ASSERT_NE(NULL, o);
	EXPECT_STREQ("chat.completion.chunk", jpath(o, "object", -1, NULL));
	d = json_object_object_get(
		json_object_array_get_idx(json_object_object_get(o, "choices"), 0), "delta");
	EXPECT_STREQ("assistant", jpath(d, "role", -1, NULL));
	EXPECT_STREQ("Hel", jpath(d, "content", -1, NULL));
	EXPECT_EQ(NULL, jpath(o, "choices", 0, "finish_reason"));
	json_object_put(o);
	free(s);

	s = moem_oai_chunk(&r, false, "", 0, NULL, 0, MOEM_SCHED_STOP, &len);
	o = parse_json(s + 6);
	ASSERT_NE(NULL, o);
	EXPECT_STREQ("stop", jpath(o, "choices", 0, "finish_reason"));
	json_object_put(o);
	free(s);

	s = moem_oai_usage_chunk(&r, &u, &len);
	o = parse_json(s + 6);
	ASSERT_NE(NULL, o);
	EXPECT_EQ(0, (int)json_object_array_length(json_object_object_get(o, "choices")));
	EXPECT_STREQ("7", jpath(json_object_object_get(o, "usage"), "total_tokens", -1, NULL));
	json_object_put(o);
	free(s);

	moem_oai_errorf(&e, 400, "invalid_request_error", "temperature", "'temperature' is %g",
			3.0);
	s = moem_oai_error_body(&e, &len);
	o = parse_json(s);
	ASSERT_NE(NULL, o);
	d = json_object_object_get(o, "error");
	EXPECT_STREQ("temperature", jpath(d, "param", -1, NULL));
	EXPECT_STREQ("invalid_request_error", jpath(d, "type", -1, NULL));
	EXPECT_STREQ("'temperature' is 3", jpath(d, "message", -1, NULL));
	EXPECT_TRUE(json_object_object_get_ex(d, "code", NULL));
	json_object_put(o);
	free(s);

	s = moem_oai_models("tiny", 5, &len);
	o = parse_json(s);
	ASSERT_NE(NULL, o);
	EXPECT_STREQ("list", jpath(o, "object", -1, NULL));
	EXPECT_STREQ("tiny", jpath(o, "data", 0, "id"));
	json_object_put(o);
	free(s);
}

/* Feed text cut into pieces of every size; the output is the text up to
 * the first stop string, whatever the cuts. */
static void stop_case(struct __test_metadata *_metadata, const char *text, char *const *stops,
		      uint32_t n, const char *want, int want_match)
{
	for (size_t piece = 1; piece <= strlen(text) + 1; piece++) {
		struct moem_oai_stop f;
		char got[512] = "";
		size_t glen = 0, len;
		const char *out;
		int m = 0;

		moem_oai_stop_init(&f, stops, n);
		for (size_t i = 0; i < strlen(text) && !m; i += piece) {
			size_t k = moem_min(piece, strlen(text) - i);

			m = moem_oai_stop_feed(&f, text + i, k, &out, &len);
			ASSERT_GE(m, 0);
			memcpy(got + glen, out, len);
			glen += len;
		}
		if (!m) {
			moem_oai_stop_flush(&f, &out, &len);
			memcpy(got + glen, out, len);
			glen += len;
		}
		got[glen] = 0;
		EXPECT_STREQ(want, got) TH_LOG("pieces of %zu", piece);
		EXPECT_EQ(want_match, m);
		moem_oai_stop_free(&f);
	}
}

TEST(stop_strings)
{
	char *a[] = {"END"}, *b[] = {"\n\n", "stop here", "aab"}, *c[] = {"\xe2\x82\xac"};

	stop_case(_metadata, "hello END world", a, 1, "hello ", 1);
	stop_case(_metadata, "hello EN world EN", a, 1, "hello EN world EN", 0);
	stop_case(_metadata, "ENENDX", a, 1, "EN", 1);
	stop_case(_metadata, "one\ntwo\n\nthree", b, 3, "one\ntwo", 1);
	stop_case(_metadata, "xaaab", b, 3, "xa", 1);
	stop_case(_metadata, "please stop her", b, 3, "please stop her", 0);
	stop_case(_metadata, "cost: 5\xe2\x82\xac!", c, 1, "cost: 5", 1);
	stop_case(_metadata, "no stops", NULL, 0, "no stops", 0);
}

TEST(stop_holds_back_only_what_could_match)
{
	char *a[] = {"STOP"};
	struct moem_oai_stop f;
	const char *out;
	size_t len;

	moem_oai_stop_init(&f, a, 1);
	EXPECT_EQ(0, moem_oai_stop_feed(&f, "abc ST", 6, &out, &len));
	EXPECT_EQ(4u, len); /* "abc " goes, "ST" waits */
	EXPECT_EQ(0, memcmp(out, "abc ", 4));
	EXPECT_EQ(0, moem_oai_stop_feed(&f, "ART", 3, &out, &len));
	EXPECT_EQ(5u, len); /* "START" is not STOP */
	EXPECT_EQ(0, memcmp(out, "START", 5));
	EXPECT_EQ(1, moem_oai_stop_feed(&f, "xSTOPy", 6, &out, &len));
	EXPECT_EQ(1u, len);
	EXPECT_EQ(1, moem_oai_stop_feed(&f, "more", 4, &out, &len));
	EXPECT_EQ(0u, len);
	moem_oai_stop_flush(&f, &out, &len);
	EXPECT_EQ(0u, len);
	moem_oai_stop_free(&f);
}

#define CHAT_USER "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
#define TOOL_W                                                                                  \
	"{\"type\":\"function\",\"function\":{\"name\":\"weather\",\"description\":\"Get it\"," \
	"\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}"

TEST(tools_and_tool_messages)
{
	struct moem_oai_request rq;
	struct moem_oai_error e;
	struct json_object *o, *f;

	ASSERT_EQ(0, parse(MOEM_OAI_CHAT, CHAT_USER ",\"tools\":[" TOOL_W "]}", &rq, &e))
	TH_LOG("%s", e.message);
	EXPECT_EQ(1u, rq.n_tools);
	EXPECT_EQ(MOEM_OAI_TOOL_AUTO, rq.tool_choice);
	EXPECT_TRUE(rq.parallel_tool_calls);
	o = json_tokener_parse(rq.tools);
	ASSERT_NE(NULL, o);
	f = json_object_object_get(json_object_array_get_idx(o, 0), "function");
	EXPECT_STREQ("weather", jpath(f, "name", -1, NULL));
	EXPECT_STREQ("object", jpath(json_object_object_get(f, "parameters"), "type", -1, NULL));
	json_object_put(o);
	moem_oai_request_free(&rq);

	ASSERT_EQ(0, parse(MOEM_OAI_CHAT,
			   CHAT_USER ",\"tools\":[" TOOL_W "],\"tool_choice\":\"none\","
				     "\"parallel_tool_calls\":false}",
			   &rq, &e));
	EXPECT_EQ(MOEM_OAI_TOOL_NONE, rq.tool_choice);
	EXPECT_FALSE(rq.parallel_tool_calls);
	moem_oai_request_free(&rq);
	/* required / named: a call's schema to constrain the answer with */
	ASSERT_EQ(0, parse(MOEM_OAI_CHAT,
			   CHAT_USER ",\"tools\":[" TOOL_W "],\"tool_choice\":{\"type\":"
				     "\"function\",\"function\":{\"name\":\"weather\"}}}",
			   &rq, &e))
	TH_LOG("%s", e.message);
	EXPECT_EQ(MOEM_OAI_TOOL_NAMED, rq.tool_choice);
	EXPECT_STREQ("weather", rq.tool_name);
	EXPECT_NE(NULL, rq.json_schema);
	EXPECT_TRUE(rq.json_object);
	moem_oai_request_free(&rq);

	/* A call and its answer: arguments reach the template as an object. */
	ASSERT_EQ(0, parse(MOEM_OAI_CHAT,
			   "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},"
			   "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
			   "\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"weather\","
			   "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
			   "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"18C\"}]}",
			   &rq, &e))
	TH_LOG("%s", e.message);
	ASSERT_EQ(3u, rq.n_messages);
	EXPECT_STREQ("", rq.messages[1].content);
	o = json_tokener_parse(rq.messages[1].tool_calls);
	ASSERT_NE(NULL, o);
	f = json_object_object_get(json_object_array_get_idx(o, 0), "function");
	EXPECT_STREQ("call_1", jpath(json_object_array_get_idx(o, 0), "id", -1, NULL));
	EXPECT_STREQ("Paris", jpath(json_object_object_get(f, "arguments"), "city", -1, NULL));
	json_object_put(o);
	EXPECT_STREQ("tool", rq.messages[2].role);
	EXPECT_STREQ("call_1", rq.messages[2].tool_call_id);
	EXPECT_STREQ("18C", rq.messages[2].content);
	moem_oai_request_free(&rq);
}

TEST(tools_refused_by_name)
{
	const enum moem_oai_endpoint H = MOEM_OAI_CHAT;

	refused(_metadata, MOEM_OAI_COMPLETIONS,
		"{\"model\":\"m\",\"prompt\":\"x\",\"tools\":[" TOOL_W "]}", "tools");
	refused(_metadata, H, CHAT_USER ",\"tools\":[]}", "tools");
	refused(_metadata, H, CHAT_USER ",\"tools\":{}}", "tools");
	refused(_metadata, H, CHAT_USER ",\"tools\":[7]}", "tools[0]");
	refused(_metadata, H, CHAT_USER ",\"tools\":[{\"type\":\"code\",\"function\":{}}]}",
		"tools[0].type");
	refused(_metadata, H, CHAT_USER ",\"tools\":[{\"type\":\"function\"}]}",
		"tools[0].function");
	refused(_metadata, H,
		CHAT_USER ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}",
		"tools[0].function.name");
	refused(_metadata, H,
		CHAT_USER
		",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
		"\"a12345678901234567890123456789012345678901234567890123456789012345\"}}]}",
		"tools[0].function.name");
	refused(_metadata, H,
		CHAT_USER
		",\"tools\":[{\"type\":\"function\",\"function\":{\"description\":\"d\"}}]}",
		"tools[0].function.name");
	refused(_metadata, H, CHAT_USER ",\"tools\":[" TOOL_W "," TOOL_W "]}",
		"tools[1].function.name");
	refused(_metadata, H,
		CHAT_USER ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
			  "\"parameters\":[]}}]}",
		"tools[0].function.parameters");
	refused(_metadata, H,
		CHAT_USER ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
			  "\"code\":1}}]}",
		"tools[0].function.code");
	refused(_metadata, H, CHAT_USER ",\"tool_choice\":\"required\"}", "tool_choice");
	refused(_metadata, H,
		CHAT_USER ",\"tools\":[" TOOL_W "],\"tool_choice\":{\"type\":\"function\","
			  "\"function\":{\"name\":\"time\"}}}",
		"tool_choice.function.name");
	refused(_metadata, H,
		CHAT_USER ",\"tools\":[" TOOL_W "],\"tool_choice\":{\"type\":\"function\"}}",
		"tool_choice.function");
	refused(_metadata, H,
		CHAT_USER ",\"tools\":[" TOOL_W "],\"tool_choice\":\"required\","
			  "\"response_format\":{\"type\":\"json_object\"}}",
		"response_format");
	refused(_metadata, H, CHAT_USER ",\"tool_choice\":\"sometimes\"}", "tool_choice");
	refused(_metadata, H, CHAT_USER ",\"parallel_tool_calls\":1}", "parallel_tool_calls");
	refused(_metadata, H,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\","
		"\"tool_call_id\":\"c\"}]}",
		"messages[0].tool_call_id");
	refused(_metadata, H, "{\"model\":\"m\",\"messages\":[{\"role\":\"tool\"}]}",
		"messages[0].content");
	refused(_metadata, H,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{"
		"\"function\":{\"name\":\"f\",\"arguments\":{}}}]}]}",
		"messages[0].tool_calls[0].function.arguments");
	refused(_metadata, H,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{"
		"\"type\":\"function\",\"function\":{\"arguments\":\"{}\"}}]}]}",
		"messages[0].tool_calls[0].function.name");
	refused(_metadata, H,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}",
		"messages[0].tool_calls");
}

/*
 * Feed text cut into pieces of every size through the tool-call filter:
 * the content and the calls are the same whatever the cuts.
 */
static void tools_case(struct __test_metadata *_metadata, const char *text, bool parallel,
		       const char *want, uint32_t n_calls, const char *name0, const char *args0)
{
	for (size_t piece = 1; piece <= strlen(text) + 1; piece++) {
		struct moem_oai_tools f;
		char got[1024] = "";
		size_t glen = 0, len;
		const char *out;

		moem_oai_tools_init(&f, parallel);
		for (size_t i = 0; i < strlen(text); i += piece) {
			size_t k = moem_min(piece, strlen(text) - i);

			ASSERT_EQ(0, moem_oai_tools_feed(&f, text + i, k, &out, &len));
			memcpy(got + glen, out, len);
			glen += len;
		}
		ASSERT_EQ(0, moem_oai_tools_flush(&f, &out, &len));
		memcpy(got + glen, out, len);
		glen += len;
		got[glen] = 0;
		EXPECT_STREQ(want, got) TH_LOG("%s: pieces of %zu", text, piece);
		EXPECT_EQ(n_calls, f.n_calls) TH_LOG("%s: pieces of %zu", text, piece);
		if (n_calls && f.n_calls) {
			EXPECT_STREQ(name0, f.calls[0].name);
			EXPECT_STREQ(args0, f.calls[0].arguments);
		}
		moem_oai_tools_free(&f);
	}
}

TEST(tool_calls_in_text)
{
	const char *w = "<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}"
			"\n</tool_call>";
	char two[512], after[512];

	/* No call: the text as it was, byte for byte. */
	tools_case(_metadata, "Hello <tool world <tool_cal\n\n", true,
		   "Hello <tool world <tool_cal\n\n", 0, NULL, NULL);
	tools_case(_metadata, "", true, "", 0, NULL, NULL);
	tools_case(_metadata, w, true, "", 1, "weather", "{\"city\":\"Paris\"}");
	snprintf(two, sizeof(two), "Let me check.\n\n%s\n%s", w, w);
	tools_case(_metadata, two, true, "Let me check.", 2, "weather", "{\"city\":\"Paris\"}");
	tools_case(_metadata, two, false, "Let me check.", 1, "weather", "{\"city\":\"Paris\"}");
	snprintf(after, sizeof(after), "%s\n\nDone.", w);
	tools_case(_metadata, after, true, "Done.", 1, "weather", "{\"city\":\"Paris\"}");
	/* Not a call: stays in the content as generated. */
	tools_case(_metadata, "a \n<tool_call>{not json}</tool_call> b", true,
		   "a \n<tool_call>{not json}</tool_call> b", 0, NULL, NULL);
	tools_case(_metadata, "<tool_call>{\"name\":\"\",\"arguments\":{}}</tool_call>", true,
		   "<tool_call>{\"name\":\"\",\"arguments\":{}}</tool_call>", 0, NULL, NULL);
	tools_case(_metadata, "<tool_call>{\"name\":\"f\",\"arguments\":[1]}</tool_call>", true,
		   "<tool_call>{\"name\":\"f\",\"arguments\":[1]}</tool_call>", 0, NULL, NULL);
	tools_case(_metadata, "x <tool_call>{\"name\":", true, "x <tool_call>{\"name\":", 0, NULL,
		   NULL);
	/* Cut short by the end of the answer, but whole: a call. */
	tools_case(_metadata, "<tool_call>{\"name\":\"f\"}", true, "", 1, "f", "{}");
	/* Arguments given as a string holding an object. */
	tools_case(_metadata,
		   "<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}</tool_call>", true,
		   "", 1, "f", "{\"a\":1}");
}

TEST(tool_call_shapes)
{
	struct moem_oai_call calls[] = {{"weather", "{\"city\":\"Paris\"}"}, {"time", "{}"}};
	struct moem_oai_reply r = {.ep = MOEM_OAI_CHAT,
				   .id = "chatcmpl-00ab",
				   .model = "tiny",
				   .calls = calls,
				   .n_calls = 2};
	struct moem_oai_usage u = {.prompt_tokens = 3, .completion_tokens = 4};
	struct json_object *o, *m, *c;
	size_t len;
	char *s;

	s = moem_oai_response(&r, "", 0, NULL, 0, MOEM_OAI_FINISH_TOOL_CALLS, &u, &len);
	o = parse_json(s);
	ASSERT_NE(NULL, o);
	EXPECT_STREQ("tool_calls", jpath(o, "choices", 0, "finish_reason"));
	m = json_object_object_get(
		json_object_array_get_idx(json_object_object_get(o, "choices"), 0), "message");
	ASSERT_TRUE(json_object_object_get_ex(m, "content", &c));
	EXPECT_EQ(NULL, c); /* null, not "" */
	c = json_object_array_get_idx(json_object_object_get(m, "tool_calls"), 1);
	EXPECT_STREQ("call_00ab_1", jpath(c, "id", -1, NULL));
	EXPECT_STREQ("function", jpath(c, "type", -1, NULL));
	EXPECT_STREQ("time", jpath(json_object_object_get(c, "function"), "name", -1, NULL));
	EXPECT_STREQ("{}", jpath(json_object_object_get(c, "function"), "arguments", -1, NULL));
	json_object_put(o);
	free(s);

	s = moem_oai_calls_chunk(&r, false, calls + 1, 1, 1, &len);
	ASSERT_NE(NULL, s);
	ASSERT_EQ(0, strncmp(s, "data: {", 7));
	o = parse_json(s + 6);
	ASSERT_NE(NULL, o);
	m = json_object_object_get(
		json_object_array_get_idx(json_object_object_get(o, "choices"), 0), "delta");
	EXPECT_FALSE(json_object_object_get_ex(m, "role", NULL));
	c = json_object_array_get_idx(json_object_object_get(m, "tool_calls"), 0);
	EXPECT_STREQ("1", jpath(c, "index", -1, NULL));
	EXPECT_STREQ("call_00ab_1", jpath(c, "id", -1, NULL));
	EXPECT_STREQ("time", jpath(json_object_object_get(c, "function"), "name", -1, NULL));
	json_object_put(o);
	free(s);
}

/* n > 1: the choices in order with their index; a later choice's calls and chunks name it. */
TEST(choices_of_one_answer)
{
	struct moem_oai_call calls[] = {{"time", "{}"}};
	struct moem_oai_reply r0 = {.ep = MOEM_OAI_CHAT, .id = "chatcmpl-00ab", .model = "tiny"};
	struct moem_oai_reply r1 = r0;
	struct moem_oai_usage u = {.prompt_tokens = 3, .completion_tokens = 9};
	struct moem_oai_choice ch[2] = {{&r0, "hi", 2, NULL, 0, MOEM_SCHED_STOP},
					{&r1, "", 0, NULL, 0, MOEM_OAI_FINISH_TOOL_CALLS}};
	struct json_object *o, *c;
	size_t len;
	char *s;

	r1.index = 1;
	r1.calls = calls;
	r1.n_calls = 1;
	s = moem_oai_response_n(ch, 2, &u, &len);
	o = parse_json(s);
	ASSERT_NE(NULL, o);
	EXPECT_EQ(2u, json_object_array_length(json_object_object_get(o, "choices")));
	EXPECT_STREQ("0", jpath(o, "choices", 0, "index"));
	EXPECT_STREQ("1", jpath(o, "choices", 1, "index"));
	EXPECT_STREQ("stop", jpath(o, "choices", 0, "finish_reason"));
	EXPECT_STREQ("tool_calls", jpath(o, "choices", 1, "finish_reason"));
	c = json_object_array_get_idx(
		json_object_object_get(
			json_object_object_get(
				json_object_array_get_idx(json_object_object_get(o, "choices"), 1),
				"message"),
			"tool_calls"),
		0);
	EXPECT_STREQ("call_00ab_1_0", jpath(c, "id", -1, NULL));
	EXPECT_STREQ("9", jpath(json_object_object_get(o, "usage"), "completion_tokens", -1, NULL));
	json_object_put(o);
	free(s);
	s = moem_oai_chunk(&r1, true, "x", 1, NULL, 0, 0, &len);
	ASSERT_NE(NULL, s);
	o = parse_json(s + 6);
	ASSERT_NE(NULL, o);
	EXPECT_STREQ("1", jpath(o, "choices", 0, "index"));
	json_object_put(o);
	free(s);
}

TEST(logit_bias)
{
	struct moem_oai_request rq;
	struct moem_oai_error e;
	char body[8192];
	size_t n;

	ASSERT_EQ(0, parse(MOEM_OAI_COMPLETIONS,
			   "{\"model\":\"m\",\"prompt\":\"x\",\"logit_bias\":{\"65\":100,"
			   "\"7\":-100.0,\"12\":0.5}}",
			   &rq, &e))
	TH_LOG("%s", e.message);
	ASSERT_EQ(3u, rq.n_bias);
	EXPECT_EQ(65, rq.bias_id[0]);
	EXPECT_EQ(100.0f, rq.bias[0]);
	EXPECT_EQ(7, rq.bias_id[1]);
	EXPECT_EQ(-100.0f, rq.bias[1]);
	EXPECT_EQ(0.5f, rq.bias[2]);
	moem_oai_request_free(&rq);

	refused(_metadata, MOEM_OAI_CHAT, CHAT_USER ",\"logit_bias\":[1]}", "logit_bias");
	refused(_metadata, MOEM_OAI_CHAT, CHAT_USER ",\"logit_bias\":{\"abc\":1}}",
		"logit_bias.abc");
	refused(_metadata, MOEM_OAI_CHAT, CHAT_USER ",\"logit_bias\":{\"-1\":1}}", "logit_bias.-1");
	refused(_metadata, MOEM_OAI_CHAT, CHAT_USER ",\"logit_bias\":{\"1.5\":1}}",
		"logit_bias.1.5");
	refused(_metadata, MOEM_OAI_CHAT, CHAT_USER ",\"logit_bias\":{\"9999999999\":1}}",
		"logit_bias.9999999999");
	refused(_metadata, MOEM_OAI_CHAT, CHAT_USER ",\"logit_bias\":{\"5\":100.5}}",
		"logit_bias.5");
	refused(_metadata, MOEM_OAI_CHAT, CHAT_USER ",\"logit_bias\":{\"5\":\"up\"}}",
		"logit_bias.5");
	n = (size_t)snprintf(body, sizeof(body), "%s,\"logit_bias\":{", CHAT_USER);
	for (int i = 0; i <= MOEM_OAI_BIAS_MAX; i++)
		n += (size_t)snprintf(body + n, sizeof(body) - n, "%s\"%d\":1", i ? "," : "", i);
	snprintf(body + n, sizeof(body) - n, "}}");
	refused(_metadata, MOEM_OAI_CHAT, body, "logit_bias");
}

TEST(echo_and_the_prompts_first_token)
{
	struct moem_oai_token t[2] = {{.text = "a", .len = 1, .no_logprob = true},
				      {.text = "b", .len = 1, .logprob = -0.5f, .n_top = 1}};
	struct moem_oai_reply r = {.ep = MOEM_OAI_COMPLETIONS,
				   .id = "cmpl-1",
				   .model = "m",
				   .logprobs = true,
				   .top_logprobs = 1};
	struct moem_oai_usage u = {1, 1};
	struct moem_oai_request rq;
	struct moem_oai_error e;
	struct json_object *o, *lp, *x;
	size_t len;
	char *s;

	ASSERT_EQ(0, parse(MOEM_OAI_COMPLETIONS,
			   "{\"model\":\"m\",\"prompt\":\"x\",\"echo\":true,\"logprobs\":1}", &rq,
			   &e));
	EXPECT_TRUE(rq.echo);
	moem_oai_request_free(&rq);
	refused(_metadata, MOEM_OAI_CHAT, CHAT_USER ",\"echo\":true}", "echo");
	refused(_metadata, MOEM_OAI_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"x\",\"echo\":1}",
		"echo");

	t[1].top[0].text = "b";
	t[1].top[0].len = 1;
	t[1].top[0].logprob = -0.5f;
	s = moem_oai_response(&r, "ab", 2, t, 2, MOEM_SCHED_LENGTH, &u, &len);
	o = parse_json(s);
	ASSERT_NE(NULL, o);
	lp = json_object_object_get(
		json_object_array_get_idx(json_object_object_get(o, "choices"), 0), "logprobs");
	x = json_object_object_get(lp, "token_logprobs");
	EXPECT_EQ(2, json_object_array_length(x));
	EXPECT_EQ(NULL, json_object_array_get_idx(x, 0)); /* null */
	EXPECT_NE(NULL, json_object_array_get_idx(x, 1));
	x = json_object_object_get(lp, "top_logprobs");
	EXPECT_EQ(NULL, json_object_array_get_idx(x, 0));
	EXPECT_NE(NULL, json_object_array_get_idx(x, 1));
	x = json_object_object_get(lp, "text_offset");
	EXPECT_EQ(1, json_object_get_int(json_object_array_get_idx(x, 1)));
	json_object_put(o);
	free(s);
}

TEST(chat_template_kwargs)
{
	struct moem_oai_request rq;
	struct moem_oai_error e;
	struct json_object *o;

	ASSERT_EQ(0, parse(MOEM_OAI_CHAT,
			   CHAT_USER ",\"chat_template_kwargs\":{\"enable_thinking\":false,"
				     "\"x\":[1,{\"y\":null}]}}",
			   &rq, &e))
	TH_LOG("%s", e.message);
	o = json_tokener_parse(rq.template_kwargs);
	ASSERT_NE(NULL, o);
	EXPECT_TRUE(json_object_object_get_ex(o, "enable_thinking", NULL));
	EXPECT_EQ(2, json_object_array_length(json_object_object_get(o, "x")));
	json_object_put(o);
	moem_oai_request_free(&rq);
	ASSERT_EQ(0, parse(MOEM_OAI_CHAT, CHAT_USER ",\"chat_template_kwargs\":{}}", &rq, &e));
	EXPECT_EQ(NULL, rq.template_kwargs);
	moem_oai_request_free(&rq);
	refused(_metadata, MOEM_OAI_CHAT, CHAT_USER ",\"chat_template_kwargs\":[]}",
		"chat_template_kwargs");
	refused(_metadata, MOEM_OAI_CHAT, CHAT_USER ",\"chat_template_kwargs\":{\"messages\":[]}}",
		"chat_template_kwargs.messages");
	refused(_metadata, MOEM_OAI_CHAT, CHAT_USER ",\"chat_template_kwargs\":{\"tools\":[]}}",
		"chat_template_kwargs.tools");
	refused(_metadata, MOEM_OAI_COMPLETIONS,
		"{\"model\":\"m\",\"prompt\":\"x\",\"chat_template_kwargs\":{}}",
		"chat_template_kwargs");
}

TEST(vllm_length_extensions)
{
	struct moem_oai_request rq;
	struct moem_oai_error e;

	ASSERT_EQ(0, parse(MOEM_OAI_COMPLETIONS,
			   "{\"model\":\"m\",\"prompt\":\"x\",\"ignore_eos\":true,\"min_tokens\":3,"
			   "\"max_tokens\":5,\"stop_token_ids\":[7,9]}",
			   &rq, &e))
	TH_LOG("%s", e.message);
	EXPECT_TRUE(rq.ignore_eos);
	EXPECT_EQ(3u, rq.min_tokens);
	ASSERT_EQ(2u, rq.n_stop_ids);
	EXPECT_EQ(9, rq.stop_ids[1]);
	moem_oai_request_free(&rq);
	refused(_metadata, MOEM_OAI_CHAT, CHAT_USER ",\"min_tokens\":6,\"max_tokens\":5}",
		"min_tokens");
	refused(_metadata, MOEM_OAI_CHAT, CHAT_USER ",\"min_tokens\":-1}", "min_tokens");
	refused(_metadata, MOEM_OAI_CHAT, CHAT_USER ",\"ignore_eos\":\"yes\"}", "ignore_eos");
	refused(_metadata, MOEM_OAI_CHAT, CHAT_USER ",\"stop_token_ids\":7}", "stop_token_ids");
	refused(_metadata, MOEM_OAI_CHAT, CHAT_USER ",\"stop_token_ids\":[1,-2]}",
		"stop_token_ids[1]");
	refused(_metadata, MOEM_OAI_CHAT, CHAT_USER ",\"stop_token_ids\":[1,2,3,4,5,6,7,8,9]}",
		"stop_token_ids");
}

/* The reasoning filter over text cut at every size: the same split whatever the cuts. */
static void think_case(struct __test_metadata *_metadata, enum moem_oai_reasoning mode,
		       const char *text, const char *want_r, const char *want_c)
{
	for (size_t piece = 1; piece <= strlen(text) + 1; piece++) {
		struct moem_oai_think f;
		char r[512] = "", c[512] = "";

		moem_oai_think_init(&f, mode);
		for (size_t i = 0; i <= strlen(text); i += piece) {
			size_t k = moem_min(piece, strlen(text) - i);
			bool last = i + k >= strlen(text);

			ASSERT_EQ(0, moem_oai_think_feed(&f, text + i, k, last));
			strncat(r, f.reason ? f.reason : "", f.reason_len);
			strncat(c, f.content ? f.content : "", f.content_len);
			if (last)
				break;
		}
		EXPECT_STREQ(want_r, r) TH_LOG("%s: pieces of %zu", text, piece);
		EXPECT_STREQ(want_c, c) TH_LOG("%s: pieces of %zu", text, piece);
		moem_oai_think_free(&f);
	}
}

TEST(reasoning_split)
{
	const enum moem_oai_reasoning Q = MOEM_OAI_REASONING_QWEN3,
				      D = MOEM_OAI_REASONING_DEEPSEEK_R1;
	enum moem_oai_reasoning m;

	think_case(_metadata, Q, "<think>\nwhy\n</think>\n\nIt is 4.", "\nwhy\n", "It is 4.");
	think_case(_metadata, Q, "It is 4. <think>no</think>", "", "It is 4. <think>no</think>");
	think_case(_metadata, Q, "  <think>a</think>b", "a", "b");
	think_case(_metadata, Q, "<think>cut short", "cut short", "");
	think_case(_metadata, Q, "<thin", "", "<thin");
	think_case(_metadata, Q, "</think>x", "", "</think>x");
	think_case(_metadata, D, "why\n</think>\n\nIt is 4.", "why\n", "It is 4.");
	think_case(_metadata, D, "<think>why</think>x", "why", "x");
	think_case(_metadata, D, "no end", "no end", "");
	think_case(_metadata, MOEM_OAI_REASONING_NONE, "<think>a</think>b", "",
		   "<think>a</think>b");
	ASSERT_EQ(0, moem_oai_reasoning_parse("deepseek_r1", &m));
	EXPECT_EQ(D, m);
	EXPECT_EQ(-EINVAL, moem_oai_reasoning_parse("qwen", &m));
}

TEST_HARNESS_MAIN
