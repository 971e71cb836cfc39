// SPDX-License-Identifier: GPL-2.0-only
/*
 * libFuzzer harness: the OpenAI request parser (runtime/serve/api/) on
 * untrusted HTTP bodies, for both endpoints. An accepted request must
 * hold what the parser promises (valid UTF-8 strings, bounds), and its
 * answer, chunks and error bodies must be built without a crash or leak;
 * stop strings from the body are run over the body's own text, and the
 * tool-call filter over its messages (without a call found, what comes
 * out is the text as it went in), and the JSON recognizer of
 * response_format json_object or json_schema (a message it takes as a
 * whole object, json-c reads as one; a schema's walk never stops short).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <moem/json_fsm.h>
#include <moem/openai.h>

#include "json_walk.h"

static void tools_over(const struct moem_oai_reply *r, const char *text)
{
	struct moem_oai_tools f;
	size_t n = strlen(text), got_len = 0, len;
	char *got = malloc(n + 1), *s;
	const char *out;

	if (!got)
		return;
	moem_oai_tools_init(&f, n & 1);
	for (size_t i = 0; i < n; i += 5) {
		if (moem_oai_tools_feed(&f, text + i, n - i < 5 ? n - i : 5, &out, &len))
			goto out;
		if (got_len + len > n)
			abort(); /* more out than in */
		memcpy(got + got_len, out, len);
		got_len += len;
	}
	if (moem_oai_tools_flush(&f, &out, &len))
		goto out;
	if (got_len + len > n)
		abort();
	memcpy(got + got_len, out, len);
	got_len += len;
	if (!f.n_calls && (got_len != n || memcmp(got, text, n)))
		abort();
	if (f.n_calls) {
		struct moem_oai_reply rc = *r;
		struct moem_oai_usage u = {1, 2};

		rc.calls = f.calls;
		rc.n_calls = f.n_calls;
		s = moem_oai_response(&rc, got, got_len, NULL, 0, MOEM_OAI_FINISH_TOOL_CALLS, &u,
				      &len);
		free(s);
		s = moem_oai_calls_chunk(&rc, false, f.calls, 0, f.n_calls, &len);
		free(s);
	}
out:
	moem_oai_tools_free(&f);
	free(got);
}

static void json_over(const char *text, const struct moem_json_schema *schema, bool call)
{
	static const char pre[] = "<tool_call>\n", post[] = "\n</tool_call>";
	size_t n = strlen(text);
	struct moem_json_fsm f;
	struct json_tokener *tok;
	struct json_object *o;

	moem_json_fsm_init(&f, schema);
	if (moem_json_fsm_feed(&f, text, n) || !moem_json_fsm_done(&f))
		return;
	/* a tool call (tool_choice required or named): the object between its tags */
	if (call) {
		while (n && strchr(" \t\r\n", text[n - 1]))
			n--;
		if (n < sizeof(pre) + sizeof(post) - 2 || memcmp(text, pre, sizeof(pre) - 1) ||
		    memcmp(text + n - (sizeof(post) - 1), post, sizeof(post) - 1))
			abort();
		text += sizeof(pre) - 1;
		n -= sizeof(pre) + sizeof(post) - 2;
	}
	tok = json_tokener_new_ex(MOEM_JSON_FSM_DEPTH + 2);
	if (!tok)
		return;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, text, (int)n);
	if (!json_object_is_type(o, json_type_object))
		abort();
	json_object_put(o);
	json_tokener_free(tok);
}

/*
 * A request's schema walked from the start, a byte at a time (closers
 * first, so that it ends): some byte always goes on until the object is
 * whole, and what it wrote json-c reads as one object.
 */
static void schema_walk(const struct moem_json_schema *schema, bool call)
{
	struct moem_json_fsm f;
	char doc[512];
	size_t n = 0;

	moem_json_fsm_init(&f, schema);
	while (!moem_json_fsm_done(&f) && n + 1 < sizeof(doc)) {
		int pick = json_walk_next(&f);

		if (pick < 0)
			abort(); /* a state with no way on */
		doc[n] = (char)pick;
		if (moem_json_fsm_feed(&f, doc + n++, 1))
			abort();
	}
	doc[n] = 0;
	if (moem_json_fsm_done(&f))
		json_over(doc, schema, call);
}

/* The reasoning filter in each mode, fed in pieces: nothing is lost or made up in length. */
static void think_over(const char *text)
{
	size_t n = strlen(text);

	for (int mode = MOEM_OAI_REASONING_NONE; mode <= MOEM_OAI_REASONING_DEEPSEEK_R1; mode++) {
		struct moem_oai_think f;
		size_t out = 0;

		moem_oai_think_init(&f, (enum moem_oai_reasoning)mode);
		for (size_t i = 0; i <= n; i += 7) {
			bool last = i + 7 >= n;

			if (moem_oai_think_feed(&f, text + i, last ? n - i : 7, last))
				break;
			out += f.reason_len + f.content_len;
			if (mode == MOEM_OAI_REASONING_NONE && f.reason_len)
				abort();
			if (last)
				break;
		}
		/* the tags and the whitespace after the block are all it drops */
		if (out > n || (mode == MOEM_OAI_REASONING_NONE && out != n))
			abort();
		moem_oai_think_free(&f);
	}
}

static void check(const struct moem_oai_request *rq)
{
	struct moem_oai_reply r = {.ep = rq->ep, .id = "x", .model = rq->model, .logprobs = true};
	struct moem_oai_usage u = {1, 2};
	struct moem_oai_stop st;
	const char *out;
	size_t len, n;
	char *s;

	if (!rq->model || !moem_oai_utf8_ok(rq->model, strlen(rq->model)))
		abort();
	if (rq->prompt && !moem_oai_utf8_ok(rq->prompt, strlen(rq->prompt)))
		abort();
	if (rq->n_stop > MOEM_OAI_STOP_MAX || rq->top_logprobs > MOEM_OAI_TOP_MAX)
		abort();
	for (uint32_t i = 0; i < rq->n_messages; i++)
		if (!rq->messages[i].content ||
		    !moem_oai_utf8_ok(rq->messages[i].content, strlen(rq->messages[i].content)))
			abort();
	if (rq->json_schema)
		schema_walk(rq->json_schema, rq->tool_choice >= MOEM_OAI_TOOL_REQUIRED);
	for (uint32_t i = 0; i < rq->n_messages; i++) {
		tools_over(&r, rq->messages[i].content);
		json_over(rq->messages[i].content, rq->json_schema,
			  rq->tool_choice >= MOEM_OAI_TOOL_REQUIRED);
		think_over(rq->messages[i].content);
	}
	s = moem_oai_response(&r, rq->model, strlen(rq->model), NULL, 0, 1, &u, &n);
	free(s);
	s = moem_oai_chunk(&r, true, rq->model, strlen(rq->model), NULL, 0, 0, &n);
	free(s);
	if (rq->prompt) {
		moem_oai_stop_init(&st, rq->stop, rq->n_stop);
		for (size_t i = 0; i < strlen(rq->prompt); i += 3)
			if (moem_oai_stop_feed(&st, rq->prompt + i,
					       strlen(rq->prompt + i) < 3 ? strlen(rq->prompt + i)
									  : 3,
					       &out, &len))
				break;
		moem_oai_stop_flush(&st, &out, &len);
		moem_oai_stop_free(&st);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	for (int ep = MOEM_OAI_COMPLETIONS; ep <= MOEM_OAI_CHAT; ep++) {
		struct moem_oai_request rq;
		struct moem_oai_error e;
		size_t n;
		char *s;

		if (moem_oai_parse((enum moem_oai_endpoint)ep, (const char *)data, size, &rq, &e)) {
			if (e.status != 400 && e.status != 413 && e.status != 0)
				abort();
			s = moem_oai_error_body(&e, &n);
			free(s);
			continue;
		}
		check(&rq);
		moem_oai_request_free(&rq);
	}
	return 0;
}
