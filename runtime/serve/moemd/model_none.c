// SPDX-License-Identifier: GPL-2.0-only
/*
 * No model behind the HTTP API: this tree lacks the full decoder (issue
 * 19, include/moem/decode.h) or the tokenizer (issue 20,
 * include/moem/tokenizer.h), which model.c needs. moemd_model_open()
 * refuses with a message that says so, the generation endpoints answer
 * 503 with it, and /health stays 503. Everything around the model (HTTP,
 * checking, queueing, streaming, metrics) is in place and tested.
 */
#include <errno.h>
#include <stdlib.h>

#include <moem/error.h>

#include "moemd.h"
#include "serve.h"

#ifndef MOEMD_HAVE_MODEL

#if __has_include(<moem/decode.h>)
#define MOEMD_MISSING "it has no tokenizer (issue 20)"
#elif __has_include(<moem/tokenizer.h>)
#define MOEMD_MISSING "it has no full decoder (issue 19)"
#else
#define MOEMD_MISSING "it has no full decoder (issue 19) and no tokenizer (issue 20)"
#endif

int moemd_model_open(struct moemd *d, struct moemd_model **out)
{
	(void)d;
	*out = NULL;
	return moem_errf(ENOSYS,
			 "this moemd cannot generate text yet: %s: it serves the "
			 "control socket only",
			 MOEMD_MISSING);
}

void moemd_model_close(struct moemd_model *m)
{
	(void)m;
}

int moemd_model_prompt(struct moemd_model *m, const struct moem_oai_request *rq, int32_t **ids,
		       uint32_t *n, struct moem_oai_error *e)
{
	(void)m;
	(void)rq;
	(void)ids;
	(void)n;
	return moem_oai_errorf(e, 503, "server_error", NULL, "no model");
}

int moemd_model_detok_new(struct moemd_model *m, void **out)
{
	(void)m;
	*out = NULL;
	return -ENOSYS;
}

void moemd_model_detok_free(struct moemd_model *m, void *dt)
{
	(void)m;
	(void)dt;
}

int moemd_model_detok_push(struct moemd_model *m, void *dt, int32_t id, const char **text,
			   size_t *len)
{
	(void)m;
	(void)dt;
	(void)id;
	*text = "";
	*len = 0;
	return -ENOSYS;
}

int moemd_model_detok_flush(struct moemd_model *m, void *dt, const char **text, size_t *len)
{
	(void)m;
	(void)dt;
	*text = "";
	*len = 0;
	return 0;
}

const char *moemd_model_token_text(struct moemd_model *m, int32_t id, size_t *len)
{
	(void)m;
	(void)id;
	*len = 0;
	return "";
}

bool moemd_model_is_eos(struct moemd_model *m, int32_t id)
{
	(void)m;
	(void)id;
	return false;
}

bool moemd_model_kv(struct moemd_model *m, uint64_t *used, uint64_t *budget, uint64_t *seqs)
{
	(void)m;
	*used = *budget = *seqs = 0;
	return false;
}

static int no_start(void *be, void *req, uint32_t prompt_len, uint64_t *seq)
{
	return -ENOSYS;
}

static int no_step(void *be, const struct moem_sched_item *items, uint32_t n,
		   struct moem_sched_out *out)
{
	return -ENOSYS;
}

static void no_end(void *be, uint64_t seq)
{
}

const struct moem_sched_ops moemd_model_ops = {
	.start = no_start,
	.step = no_step,
	.end = no_end,
};

#endif /* !MOEMD_HAVE_MODEL */
