// SPDX-License-Identifier: GPL-2.0-only
/*
 * libFuzzer harness: the OpenAI request parser (runtime/serve/api/) on
 * untrusted HTTP bodies, for both endpoints. An accepted request must
 * hold what the parser promises (valid UTF-8 strings, bounds), and its
 * answer, chunks and error bodies must be built without a crash or leak;
 * stop strings from the body are run over the body's own text.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <moem/openai.h>

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
