// SPDX-License-Identifier: GPL-2.0-only
/*
 * A stand-in model for testing moemd's server machinery (HTTP, checking,
 * queueing, batching, streaming, disconnects, metrics) before and apart
 * from the real decoder: it replaces runtime/serve/moemd/model.c in a
 * test-only build, build/tests/serve/moemd-fakemodel, which is never
 * installed. Everything else is moemd's own code, engine included.
 *
 * Its "tokenizer" maps each byte to its own id (vocabulary 256; a chat
 * is rendered as "role: content\n" lines and "assistant:"). Its
 * "decoder" writes the text of FAKE_TEXT from the offset (sum of the
 * prompt's bytes) mod its length, one byte a token, so a client can
 * predict every answer (tests/serve/fake.mjs has the same rule). KV is a
 * budget of FAKE_KV_TOKENS tokens, reserved as prompt + max tokens like
 * the real decoder's blocks, so waiting and refusals happen for real.
 * A step with a sequence whose prompt starts with "slow " takes 1 ms of
 * "compute", so that a test can act while such a request surely runs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <moem/error.h>
#include <moem/log.h>
#include <moem/util.h>

#include "moemd.h"
#include "serve.h"

#define FAKE_TEXT      "The quick brown fox jumps over the lazy dog. "
#define FAKE_KV_TOKENS 65536u
#define FAKE_CONTEXT   8192u
#define FAKE_MAX_SEQS  256u

struct fseq {
	bool used;
	uint32_t prompt, max_new, generated, computed;
	uint32_t offset;
	bool slow;
};

struct moemd_model {
	pthread_mutex_t lock; /* kv figures are read by /metrics threads */

	uint64_t kv_used;
	uint32_t seqs;
	struct fseq seq[FAKE_MAX_SEQS];
};

struct fake_req {
	uint32_t offset, max_new;
};

int moemd_model_open(struct moemd *d, struct moemd_model **out)
{
	struct moemd_model *m = calloc(1, sizeof(*m));

	(void)d;
	if (!m)
		return -ENOMEM;
	pthread_mutex_init(&m->lock, NULL);
	moem_warn("serving a FAKE model (tests/serve/fake_model.c): a test build");
	*out = m;
	return 0;
}

void moemd_model_close(struct moemd_model *m)
{
	if (!m)
		return;
	pthread_mutex_destroy(&m->lock);
	free(m);
}

static int append(char **s, size_t *len, const char *a)
{
	size_t n = strlen(a);
	char *t = realloc(*s, *len + n + 1);

	if (!t)
		return -ENOMEM;
	memcpy(t + *len, a, n + 1);
	*s = t;
	*len += n;
	return 0;
}

int moemd_model_prompt(struct moemd_model *m, const struct moem_oai_request *rq, int32_t **ids,
		       uint32_t *n, struct moem_oai_error *e)
{
	char *text = NULL;
	size_t len = 0;
	int ret = 0;

	(void)m;
	if (rq->n_prompt_ids) {
		*ids = malloc(rq->n_prompt_ids * sizeof(**ids));
		if (!*ids)
			return -ENOMEM;
		for (uint32_t i = 0; i < rq->n_prompt_ids; i++) {
			if (rq->prompt_ids[i] > 255) {
				free(*ids);
				*ids = NULL;
				return moem_oai_errorf(e, 400, "invalid_request_error", "prompt",
						       "token id %d is not in the vocabulary (256)",
						       rq->prompt_ids[i]);
			}
			(*ids)[i] = rq->prompt_ids[i];
		}
		*n = rq->n_prompt_ids;
	} else {
		if (rq->prompt) {
			ret = append(&text, &len, rq->prompt);
		} else {
			for (uint32_t i = 0; i < rq->n_messages && !ret; i++) {
				ret = append(&text, &len, rq->messages[i].role);
				ret = ret ? ret : append(&text, &len, ": ");
				ret = ret ? ret : append(&text, &len, rq->messages[i].content);
				ret = ret ? ret : append(&text, &len, "\n");
			}
			ret = ret ? ret : append(&text, &len, "assistant:");
		}
		if (ret) {
			free(text);
			return ret;
		}
		*ids = malloc((len ? len : 1) * sizeof(**ids));
		if (!*ids) {
			free(text);
			return -ENOMEM;
		}
		for (size_t i = 0; i < len; i++)
			(*ids)[i] = (unsigned char)text[i];
		*n = (uint32_t)len;
		free(text);
	}
	if (*n + (rq->max_tokens ? rq->max_tokens : 16) > FAKE_CONTEXT) {
		free(*ids);
		*ids = NULL;
		ret = moem_oai_errorf(
			e, 400, "invalid_request_error", "max_tokens",
			"prompt (%u tokens) + max_tokens (%u) exceed the context (%u)", *n,
			rq->max_tokens ? rq->max_tokens : 16, FAKE_CONTEXT);
		snprintf(e->code, sizeof(e->code), "context_length_exceeded");
	}
	return ret;
}

int moemd_model_detok_new(struct moemd_model *m, void **out)
{
	(void)m;
	*out = calloc(1, 8);
	return *out ? 0 : -ENOMEM;
}

void moemd_model_detok_free(struct moemd_model *m, void *dt)
{
	(void)m;
	free(dt);
}

int moemd_model_detok_push(struct moemd_model *m, void *dt, int32_t id, const char **text,
			   size_t *len)
{
	char *b = dt;

	(void)m;
	b[0] = (char)id;
	*text = b;
	*len = 1;
	return 0;
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
	static char bytes[256];

	(void)m;
	if (!bytes[1])
		for (int i = 0; i < 256; i++)
			bytes[i] = (char)i;
	*len = 1;
	return &bytes[id & 255];
}

bool moemd_model_is_eos(struct moemd_model *m, int32_t id)
{
	(void)m;
	(void)id;
	return false;
}

bool moemd_model_kv(struct moemd_model *m, uint64_t *used, uint64_t *budget, uint64_t *seqs)
{
	pthread_mutex_lock(&m->lock);
	*used = m->kv_used * 1024; /* "bytes": 1 KiB a token */
	*budget = (uint64_t)FAKE_KV_TOKENS * 1024;
	*seqs = m->seqs;
	pthread_mutex_unlock(&m->lock);
	return true;
}

static int f_start(void *be, void *req, uint32_t prompt_len, uint64_t *seq)
{
	struct moemd_model *m = be;
	struct moemd_sreq *r = req;
	uint32_t max_new = r->rq.max_tokens ? r->rq.max_tokens : 16;
	uint64_t need = (uint64_t)prompt_len + max_new, off = 0;
	uint32_t slot = FAKE_MAX_SEQS;

	if (need > FAKE_KV_TOKENS)
		return moem_errf(EFBIG, "prompt + max_tokens (%llu) exceed the KV cache",
				 (unsigned long long)need);
	pthread_mutex_lock(&m->lock);
	for (uint32_t i = 0; i < FAKE_MAX_SEQS && slot == FAKE_MAX_SEQS; i++)
		if (!m->seq[i].used)
			slot = i;
	if (slot == FAKE_MAX_SEQS || m->kv_used + need > FAKE_KV_TOKENS) {
		pthread_mutex_unlock(&m->lock);
		return slot == FAKE_MAX_SEQS ? -EMFILE : -ENOSPC;
	}
	for (uint32_t i = 0; i < r->n_prompt; i++)
		off += (uint32_t)r->prompt[i];
	m->seq[slot] = (struct fseq){
		.used = true,
		.prompt = prompt_len,
		.max_new = max_new,
		.offset = (uint32_t)(off % (sizeof(FAKE_TEXT) - 1)),
		.slow = r->n_prompt >= 5 && !memcmp(r->prompt, (int32_t[]){'s', 'l', 'o', 'w', ' '},
						    5 * sizeof(int32_t))};
	m->kv_used += need;
	m->seqs++;
	pthread_mutex_unlock(&m->lock);
	*seq = slot;
	return 0;
}

static int f_step(void *be, const struct moem_sched_item *it, uint32_t n,
		  struct moem_sched_out *out)
{
	struct moemd_model *m = be;

	for (uint32_t i = 0; i < n; i++) {
		if (it[i].seq < FAKE_MAX_SEQS && m->seq[it[i].seq].used && m->seq[it[i].seq].slow) {
			struct timespec ms = {0, 1000000};

			nanosleep(&ms, NULL);
			break;
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		struct fseq *q;
		uint32_t k;

		if (it[i].seq >= FAKE_MAX_SEQS || !m->seq[it[i].seq].used)
			return -ENOENT;
		q = &m->seq[it[i].seq];
		k = (q->offset + q->generated) % (sizeof(FAKE_TEXT) - 1);
		if (!it[i].decode) {
			if (it[i].first != q->computed || it[i].first + it[i].n > q->prompt)
				return moem_errf(EINVAL, "fake model: chunk out of order");
			q->computed += it[i].n;
		}
		if (!it[i].samples)
			continue;
		out[i].token = (unsigned char)FAKE_TEXT[k];
		out[i].logprob = -0.5f;
		out[i].n_top = 2;
		out[i].top_id[0] = out[i].token;
		out[i].top_logprob[0] = -0.5f;
		out[i].top_id[1] = (unsigned char)FAKE_TEXT[(k + 1) % (sizeof(FAKE_TEXT) - 1)];
		out[i].top_logprob[1] = -1.5f;
		q->generated++;
		if (q->generated >= q->max_new)
			out[i].finish = MOEM_SCHED_LENGTH;
	}
	return 0;
}

static void f_end(void *be, uint64_t seq)
{
	struct moemd_model *m = be;

	pthread_mutex_lock(&m->lock);
	m->kv_used -= (uint64_t)m->seq[seq].prompt + m->seq[seq].max_new;
	m->seqs--;
	m->seq[seq].used = false;
	pthread_mutex_unlock(&m->lock);
}

const struct moem_sched_ops moemd_model_ops = {
	.start = f_start,
	.step = f_step,
	.end = f_end,
};
