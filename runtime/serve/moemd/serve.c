// SPDX-License-Identifier: GPL-2.0-only
/*
 * The serving loop: the scheduler (sched.h) on the worker thread, fed by
 * the HTTP threads, with the model's decoder behind it. The sink turns
 * each token into text (streaming detokenizer, stop strings), appends it
 * to the request's answer or stream and wakes the connection; at every
 * step boundary connections that closed while waiting are found (a
 * suspended connection is not watched by libmicrohttpd) and their
 * sequences cancelled, which frees their KV blocks at that boundary.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <moem/error.h>
#include <moem/log.h>
#include <moem/util.h>

#include "moemd.h"
#include "serve.h"

static void tok_free(struct moemd_tok *t)
{
	free(t->text);
	for (uint32_t k = 0; k < t->n_top; k++)
		free(t->top_text[k]);
}

void moemd_sreq_put(struct moemd_sreq *r)
{
	int refs;

	pthread_mutex_lock(&r->lock);
	refs = --r->refs;
	pthread_mutex_unlock(&r->lock);
	if (refs)
		return;
	if (r->detok && r->srv->model)
		moemd_model_detok_free(r->srv->model, r->detok);
	moem_oai_stop_free(&r->stop);
	moem_oai_tools_free(&r->tools);
	moem_oai_think_free(&r->think);
	free(r->reasoning);
	moem_oai_request_free(&r->rq);
	for (uint32_t i = 0; i < r->n_toks; i++)
		tok_free(&r->toks[i]);
	free(r->toks);
	free(r->prompt);
	free(r->out);
	free(r->text);
	free(r->echo);
	for (uint32_t i = 0; i < r->n_sibs; i++)
		moemd_sreq_put(r->sibs[i]);
	free(r->sibs);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

void moemd_serve_cancel_group(struct moemd_srv *s, struct moemd_sreq *r)
{
	if (!s->sched)
		return;
	moem_sched_cancel(s->sched, r);
	for (uint32_t i = 0; i < r->n_sibs; i++)
		moem_sched_cancel(s->sched, r->sibs[i]);
}

/* Under r->lock: wake a connection that waits for output. */
static void wake_conn(struct moemd_sreq *r)
{
	if (r->suspended && r->conn) {
		r->suspended = false;
		moemd_http_resume(r->conn);
	}
}

static int append(char **buf, size_t *len, size_t *cap, const char *data, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t c = moem_max(*cap * 2, *len + n + 1);
		char *b = realloc(*buf, c);

		if (!b)
			return -ENOMEM;
		*buf = b;
		*cap = c;
	}
	memcpy(*buf + *len, data, n);
	*len += n;
	(*buf)[*len] = 0;
	return 0;
}

/* Under r->lock: append an SSE event (consumed). */
/* Under r->lock, r a lead or alone: an event into the stream of r's connection. */
static int out_append(struct moemd_sreq *r, char *ev, size_t n)
{
	int ret;

	if (!ev)
		return -ENOMEM;
	if (r->out_pos && r->out_pos == r->out_len)
		r->out_pos = r->out_len = 0;
	ret = append(&r->out, &r->out_len, &r->out_cap, ev, n);
	free(ev);
	return ret;
}

/* Under r->lock: an event into the stream (a sibling's into its lead's, which is woken). */
static int push_event(struct moemd_sreq *r, char *ev, size_t n)
{
	struct moemd_sreq *l = r->lead;
	int ret;

	if (!l)
		return out_append(r, ev, n);
	pthread_mutex_lock(&l->lock);
	ret = out_append(l, ev, n);
	wake_conn(l);
	pthread_mutex_unlock(&l->lock);
	return ret;
}

/*
 * Under r->lock, r just done: the last choice of its request to end sends
 * the stream's usage (if asked and no choice failed: every choice's
 * tokens, the prompt once) and [DONE], and wakes the connection.
 */
static void member_done(struct moemd_sreq *r, bool failed)
{
	struct moemd_sreq *l = r->lead ? r->lead : r;

	if (r->lead)
		pthread_mutex_lock(&l->lock);
	l->group_failed |= failed;
	if (!--l->open && l->rq.stream) {
		if (!l->group_failed && l->rq.include_usage) {
			struct moem_oai_usage u = {l->n_prompt, l->generated, l->n_cached};
			size_t n = 0;
			char *ev;

			for (uint32_t i = 0; i < l->n_sibs; i++)
				u.completion_tokens += l->sibs[i]->generated;
			ev = moem_oai_usage_chunk(&l->reply, &u, &n);
			out_append(l, ev, n);
		}
		out_append(l, strdup(MOEM_OAI_DONE), strlen(MOEM_OAI_DONE));
	}
	wake_conn(l);
	if (r->lead)
		pthread_mutex_unlock(&l->lock);
}

static int keep_token(struct moemd_srv *s, struct moemd_sreq *r, const struct moem_sched_out *o)
{
	struct moemd_tok *t;
	size_t len;

	if (r->n_toks == r->toks_cap) {
		uint32_t cap = r->toks_cap ? r->toks_cap * 2 : 16;
		struct moemd_tok *n = realloc(r->toks, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		r->toks = n;
		r->toks_cap = cap;
	}
	t = &r->toks[r->n_toks];
	memset(t, 0, sizeof(*t));
	t->text = moemd_model_token_text(s->model, o->token, &len);
	if (!t->text)
		return -ENOMEM;
	t->len = len;
	t->logprob = o->logprob;
	for (uint32_t k = 0; k < o->n_top && k < r->rq.top_logprobs; k++) {
		t->top_text[k] = moemd_model_token_text(s->model, o->top_id[k], &len);
		if (!t->top_text[k])
			break;
		t->top_len[k] = len;
		t->top_logprob[k] = o->top_logprob[k];
		t->n_top = k + 1;
	}
	r->n_toks++;
	return 0;
}

/* Under r->lock: a stream chunk with text and the tokens not yet sent. */
static int stream_chunk(struct moemd_sreq *r, const char *text, size_t len, int finish)
{
	struct moem_oai_token *t = NULL;
	uint32_t n = r->rq.logprobs ? r->n_toks - r->toks_sent : 0;
	size_t elen;
	char *ev;
	int ret;

	if (!len && !finish && !n && r->first_sent)
		return 0;
	if (r->echo && !r->echo_sent) {
		/* echo: the prompt's text goes first, in the first chunk */
		char *both = malloc(r->echo_len + len + 1);

		if (!both)
			return -ENOMEM;
		memcpy(both, r->echo, r->echo_len);
		if (len)
			memcpy(both + r->echo_len, text, len);
		r->echo_sent = true;
		ret = stream_chunk(r, both, r->echo_len + len, finish);
		free(both);
		return ret;
	}
	if (n) {
		t = calloc(n, sizeof(*t));
		if (!t)
			return -ENOMEM;
		for (uint32_t i = 0; i < n; i++) {
			const struct moemd_tok *k = &r->toks[r->toks_sent + i];

			t[i].text = k->text;
			t[i].len = k->len;
			t[i].logprob = k->logprob;
			t[i].no_logprob = k->no_lp;
			t[i].n_top = k->n_top;
			for (uint32_t j = 0; j < k->n_top; j++) {
				t[i].top[j].text = k->top_text[j];
				t[i].top[j].len = k->top_len[j];
				t[i].top[j].logprob = k->top_logprob[j];
			}
		}
	}
	ev = moem_oai_chunk(&r->reply, !r->first_sent, text, len, t, n, finish, &elen);
	/* text_offset counts the tokens' own bytes, as the whole answer's do:
	 * the text of a chunk can lag them (a character split over tokens) */
	for (uint32_t i = 0; i < n; i++)
		r->reply.offset += t[i].len;
	free(t);
	r->first_sent = true;
	r->toks_sent += n;
	return push_event(r, ev, elen);
}

int moemd_serve_echo_tokens(struct moemd_sreq *r, const int32_t *ids, uint32_t n)
{
	int ret = 0;

	pthread_mutex_lock(&r->lock);
	if (r->toks_cap < n) {
		struct moemd_tok *t = realloc(r->toks, n * sizeof(*t));

		if (!t)
			ret = -ENOMEM;
		else
			r->toks = t, r->toks_cap = n;
	}
	for (uint32_t i = 0; !ret && i < n && !r->n_echo_toks; i++) {
		struct moemd_tok *t = &r->toks[r->n_toks];

		memset(t, 0, sizeof(*t));
		t->text = moemd_model_token_text(r->srv->model, ids[i], &t->len);
		if (!t->text) {
			ret = -ENOMEM;
			break;
		}
		t->no_lp = true;
		r->n_toks++;
	}
	if (!ret)
		r->n_echo_toks = r->n_toks;
	pthread_mutex_unlock(&r->lock);
	return ret;
}

/* The want (<= MOEM_OAI_TOP_MAX) strongest ids into top[], ties to the lower id. */
static uint32_t strongest(const float *l, uint32_t vocab, uint32_t want, int32_t *top)
{
	uint32_t k = 0;

	if (!want)
		return 0;
	for (uint32_t v = 0; v < vocab; v++) {
		uint32_t i;

		if (k < want)
			i = k++;
		else if (l[v] > l[top[want - 1]])
			i = want - 1;
		else
			continue;
		while (i > 0 && l[v] > l[top[i - 1]]) {
			top[i] = top[i - 1];
			i--;
		}
		top[i] = (int32_t)v;
	}
	return k;
}

void moemd_serve_prompt_logits(void *arg, uint64_t seq, uint32_t pos, const float *logits,
			       uint32_t vocab)
{
	struct moemd_sreq *r = arg;
	struct moemd_tok *t;
	double mx = -INFINITY, sum = 0, lse;
	int32_t top[MOEM_OAI_TOP_MAX];
	uint32_t k, want = moem_min(r->rq.top_logprobs, MOEM_OAI_TOP_MAX);

	(void)seq;
	/* position pos predicts token pos + 1; from the prompt's last on, the
	 * sampler's own logprobs are given */
	if (pos + 1 >= r->n_echo_toks)
		return;
	for (uint32_t v = 0; v < vocab; v++)
		mx = fmax(mx, logits[v]);
	for (uint32_t v = 0; v < vocab; v++)
		sum += exp((double)logits[v] - mx);
	lse = mx + log(sum);
	k = strongest(logits, vocab, want, top);
	pthread_mutex_lock(&r->lock);
	t = &r->toks[pos + 1];
	t->logprob = (float)((double)logits[r->prompt[pos + 1]] - lse);
	t->no_lp = false;
	for (uint32_t i = 0; i < k && !t->n_top; i++) {
		size_t len;
		char *s = moemd_model_token_text(r->srv->model, top[i], &len);

		if (!s)
			break;
		t->top_text[i] = s;
		t->top_len[i] = len;
		t->top_logprob[i] = (float)((double)logits[top[i]] - lse);
	}
	for (uint32_t i = 0; i < k && t->top_text[i]; i++)
		t->n_top = i + 1;
	pthread_mutex_unlock(&r->lock);
}

/* Under r->lock: content text (a tool-call filter's output) into the answer and the stream. */
static int content_out(struct moemd_sreq *r, const char *text, size_t len)
{
	int ret = 0;

	if (len)
		ret = append(&r->text, &r->text_len, &r->text_cap, text, len);
	if (ret || !r->rq.stream)
		return ret;
	ret = stream_chunk(r, text, len, 0);
	if (!ret && r->tools.n_calls > r->calls_sent) {
		size_t elen;
		char *ev = moem_oai_calls_chunk(&r->reply, !r->first_sent,
						r->tools.calls + r->calls_sent, r->calls_sent,
						r->tools.n_calls - r->calls_sent, &elen);

		r->first_sent = true;
		r->calls_sent = r->tools.n_calls;
		ret = push_event(r, ev, elen);
	}
	return ret;
}

/* Under r->lock: content through the tool-call filter when it is on (flush: its end too). */
static int content_text(struct moemd_sreq *r, const char *text, size_t len, bool flush)
{
	const char *out;
	size_t olen;
	int ret;

	if (!r->use_tools)
		return content_out(r, text, len);
	ret = moem_oai_tools_feed(&r->tools, text, len, &out, &olen);
	if (!ret)
		ret = content_out(r, out, olen);
	if (!ret && flush) {
		ret = moem_oai_tools_flush(&r->tools, &out, &olen);
		if (!ret)
			ret = content_out(r, out, olen);
	}
	return ret;
}

/*
 * Under r->lock: text the stop filter let out (flush: the end of it),
 * split into reasoning and content when a reasoning parser is on; the
 * reasoning goes into reasoning_content (its own stream chunks), the
 * content through the tool-call filter into the answer and the stream.
 */
static int answer_text(struct moemd_sreq *r, const char *text, size_t len, bool flush)
{
	int ret;

	if (!r->use_think)
		return content_text(r, text, len, flush);
	ret = moem_oai_think_feed(&r->think, text, len, flush);
	if (!ret && r->think.reason_len) {
		r->reasoning_seen = true;
		ret = append(&r->reasoning, &r->reasoning_len, &r->reasoning_cap, r->think.reason,
			     r->think.reason_len);
		if (!ret && r->rq.stream) {
			size_t elen;
			char *ev =
				moem_oai_reasoning_chunk(&r->reply, !r->first_sent, r->think.reason,
							 r->think.reason_len, &elen);

			r->first_sent = true;
			ret = push_event(r, ev, elen);
		}
	}
	if (!ret)
		ret = content_text(r, r->think.content_len ? r->think.content : "",
				   r->think.content_len, flush);
	return ret;
}

/* The token that ended the answer is an end-of-sequence or stop_token_ids id: it has no text. */
static bool ends_answer(struct moemd_srv *s, const struct moemd_sreq *r, int32_t id)
{
	for (uint32_t i = 0; i < r->rq.n_stop_ids; i++)
		if (r->rq.stop_ids[i] == id)
			return true;
	return moemd_model_is_eos(s->model, id);
}

static bool sink_token(void *arg, void *req, const struct moem_sched_out *o)
{
	struct moemd_srv *s = arg;
	struct moemd_sreq *r = req;
	uint64_t now = moem_now_ns();
	const char *txt = NULL, *out = NULL;
	size_t len = 0, olen = 0;
	bool stop = false, overflow = false, json_end = false;
	int ret = 0;

	pthread_mutex_lock(&s->lock);
	s->generated_tokens++;
	if (!r->t_first)
		moemd_hist_add(&s->ttft, (double)(now - r->t_arrive) / 1e9);
	else
		moemd_hist_add(&s->itl, (double)(now - r->t_last) / 1e9);
	pthread_mutex_unlock(&s->lock);

	pthread_mutex_lock(&r->lock);
	if (r->done) {
		/* Ended by shutdown (moemd_serve_end_all()) during this step: its
		 * answer is sent, nothing more goes after it. */
		pthread_mutex_unlock(&r->lock);
		return true;
	}
	if (!r->t_first)
		r->t_first = now;
	r->t_last = now;
	r->generated++;
	if (r->rq.logprobs)
		ret = keep_token(s, r, o);
	/* The end-of-sequence token has no text in the answer. */
	if (!ret && !(o->finish == MOEM_SCHED_STOP && ends_answer(s, r, o->token)))
		ret = moemd_model_detok_push(s->model, r->detok, o->token, &txt, &len);
	if (!ret && len) {
		int m = moem_oai_stop_feed(&r->stop, txt, len, &out, &olen);

		if (m < 0)
			ret = m;
		stop = m == 1;
	}
	if (!ret)
		ret = answer_text(r, out ? out : "", olen, false);
	/* json_object: the object is closed (or cannot go on): the answer is whole */
	json_end = r->json && (r->json_stuck || moem_json_fsm_done(&r->json_fsm));
	if (json_end && r->json_stuck)
		moem_warn("request %s: no token of the vocabulary continues its JSON: ended",
			  r->id);
	if (!ret && r->rq.stream) {
		struct moemd_sreq *l = r->lead ? r->lead : r;

		if (r->lead)
			pthread_mutex_lock(&l->lock);
		overflow = l->out_len - l->out_pos > r->srv->cfg.stream_buffer;
		wake_conn(l);
		if (r->lead)
			pthread_mutex_unlock(&l->lock);
	}
	pthread_mutex_unlock(&r->lock);
	if (stop) {
		pthread_mutex_lock(&s->lock);
		s->stop_strings++;
		pthread_mutex_unlock(&s->lock);
	}
	if (ret || overflow) {
		/* An error of the text path, or a client that does not read its stream. */
		moem_warn("request %s: %s: cancelled", r->id,
			  ret ? moem_strerror(ret) : "the client does not read its stream");
		moemd_serve_cancel_group(s, r->lead ? r->lead : r);
	}
	return stop || json_end;
}

static void fail_status(struct moemd_sreq *r, int err)
{
	switch (-err) {
	case EINVAL:
	case EFBIG:
		moem_oai_errorf(&r->oerr, 400, "invalid_request_error", NULL, "%s",
				r->oerr.message[0] ? r->oerr.message : moem_strerror(err));
		break;
	case ESHUTDOWN:
	case ENOSPC:
	case EMFILE:
		moem_oai_errorf(&r->oerr, 503, "server_error", NULL, "%s",
				r->oerr.message[0] ? r->oerr.message : moem_strerror(err));
		break;
	default:
		moem_oai_errorf(&r->oerr, 500, "server_error", NULL, "the model failed: %s",
				r->oerr.message[0] ? r->oerr.message : moem_strerror(err));
		break;
	}
}

static void sink_done(void *arg, void *req, enum moem_sched_finish why, int err)
{
	struct moemd_srv *s = arg;
	struct moemd_sreq *r = req, *lead;
	uint64_t now = moem_now_ns();
	const char *rest;
	size_t n, len;

	pthread_mutex_lock(&s->lock);
	if (r->prev)
		r->prev->next = r->next;
	else if (s->live == r)
		s->live = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
	s->n_live--;
	if (why == MOEM_SCHED_STOP || why == MOEM_SCHED_LENGTH)
		moemd_hist_add(&s->e2e, (double)(now - r->t_arrive) / 1e9);
	pthread_mutex_unlock(&s->lock);

	pthread_mutex_lock(&r->lock);
	if (!r->done) {
		r->finish = why;
		r->err = err;
		if (why == MOEM_SCHED_ERROR)
			fail_status(r, err);
		else if (why == MOEM_SCHED_CANCEL)
			moem_oai_errorf(&r->oerr, 503, "server_error", NULL,
					"the request was cancelled");
		if (why == MOEM_SCHED_LENGTH || why == MOEM_SCHED_STOP) {
			/* What the detokenizer and the stop filter still hold. */
			if (!moemd_model_detok_flush(s->model, r->detok, &rest, &len) && len) {
				const char *o;
				size_t ol;

				moem_oai_stop_feed(&r->stop, rest, len, &o, &ol);
				answer_text(r, o, ol, false);
			}
			moem_oai_stop_flush(&r->stop, &rest, &len);
			if (r->use_tools || r->use_think) {
				answer_text(r, rest, len, true);
				rest = "";
				len = 0;
			} else if (len) {
				append(&r->text, &r->text_len, &r->text_cap, rest, len);
			}
			if (r->rq.stream)
				stream_chunk(r, rest, len,
					     r->tools.n_calls ? MOEM_OAI_FINISH_TOOL_CALLS
							      : (int)why);
		} else if (r->rq.stream) {
			char *ev = moem_oai_error_chunk(&r->oerr, &n);

			push_event(r, ev, n);
		}
		r->done = true;
		member_done(r, why != MOEM_SCHED_LENGTH && why != MOEM_SCHED_STOP);
	}
	wake_conn(r);
	lead = r->lead;
	pthread_mutex_unlock(&r->lock);
	moemd_sreq_put(r); /* the scheduler's reference */
	if (lead)
		moemd_sreq_put(lead); /* the sibling's, on its lead */
}

static void sink_stepped(void *arg, const struct moem_sched_step_info *info)
{
	struct moemd_srv *s = arg;

	pthread_mutex_lock(&s->lock);
	if (!info->ret)
		moemd_hist_add(&s->step, (double)info->step_ns / 1e9);
	s->steps++;
	s->step_tokens_sum += info->tokens;
	s->last_step_batch = info->running;
	pthread_mutex_unlock(&s->lock);
	if (info->ret)
		moem_warn("serving step failed: %s", moem_strerror(info->ret));
}

static void sink_wake(void *arg)
{
	struct moemd_srv *s = arg;

	pthread_mutex_lock(&s->d->lock);
	pthread_cond_signal(&s->d->cond);
	pthread_mutex_unlock(&s->d->lock);
}

int moemd_serve_submit(struct moemd_srv *s, struct moemd_sreq *r, struct moem_oai_error *e)
{
	uint64_t serial, rnd;
	int ret;

	if (s->closing || moemd_state_get(s->d) == MOEMD_DRAINING)
		return moem_oai_errorf(e, 503, "server_error", NULL, "the server is shutting down");
	if (!s->sched || !s->ready) {
		moem_oai_errorf(e, 503, "server_error", NULL, "the model is not being served: %s",
				s->model_err[0] ? s->model_err : "it is still starting");
		return -EAGAIN;
	}
	/* OpenAI's default for completions; chat runs to the end of the context. */
	if (!r->rq.max_tokens && r->rq.ep == MOEM_OAI_COMPLETIONS)
		r->rq.max_tokens = 16;
	if (r->lead) {
		/* a choice of the lead's answer: the same body, so the prompt the lead
		 * rendered and checked (the chat template runs once per request) */
		r->prompt = malloc(r->lead->n_prompt * sizeof(*r->prompt));
		if (!r->prompt)
			return -ENOMEM;
		memcpy(r->prompt, r->lead->prompt, r->lead->n_prompt * sizeof(*r->prompt));
		r->n_prompt = r->lead->n_prompt;
	} else {
		ret = moemd_model_prompt(s->model, &r->rq, &r->prompt, &r->n_prompt, e);
		if (ret)
			return ret;
	}
	ret = moemd_model_detok_new(s->model, &r->detok);
	if (ret)
		return ret;
	moem_oai_stop_init(&r->stop, r->rq.stop, r->rq.n_stop);
	moem_oai_tools_init(&r->tools, r->rq.parallel_tool_calls);
	r->use_tools = moemd_model_tool_calls(s->model, &r->rq);
	r->use_think = r->rq.ep == MOEM_OAI_CHAT && s->cfg.reasoning != MOEM_OAI_REASONING_NONE;
	moem_oai_think_init(&r->think, r->use_think ? s->cfg.reasoning : MOEM_OAI_REASONING_NONE);
	if (r->rq.echo) {
		/* the prompt as given; token ids as their text */
		r->echo = r->rq.prompt ? strdup(r->rq.prompt)
				       : moemd_model_decode(s->model, r->prompt, r->n_prompt,
							    &r->echo_len);
		if (!r->echo)
			return -ENOMEM;
		if (r->rq.prompt)
			r->echo_len = strlen(r->echo);
		ret = append(&r->text, &r->text_len, &r->text_cap, r->echo, r->echo_len);
		if (ret)
			return ret;
	}
	r->json = r->rq.json_object;
	if (r->json) {
		ret = moemd_model_json_ready(s->model);
		if (ret)
			return ret;
	}
	pthread_mutex_lock(&s->lock);
	serial = ++s->next_id;
	pthread_mutex_unlock(&s->lock);
	rnd = serial * 0x9e3779b97f4a7c15ULL ^ (uint64_t)s->created * 0xbf58476d1ce4e5b9ULL;
	snprintf(r->id, sizeof(r->id), "%s-%016" PRIx64 "%04" PRIx64,
		 r->rq.ep == MOEM_OAI_CHAT ? "chatcmpl" : "cmpl", rnd, serial & 0xffff);
	if (r->lead) /* a choice of the lead's answer (n > 1): its id and time */
		snprintf(r->id, sizeof(r->id), "%s", r->lead->id);
	r->reply = (struct moem_oai_reply){
		.ep = r->rq.ep,
		.id = r->id,
		.model = s->cfg.model_name,
		.created = r->lead ? r->lead->reply.created : (int64_t)time(NULL),
		.index = r->choice,
		.logprobs = r->rq.logprobs,
		.top_logprobs = r->rq.top_logprobs,
	};
	/* The scheduler's reference, and a place on the live list. */
	pthread_mutex_lock(&r->lock);
	r->refs++;
	pthread_mutex_unlock(&r->lock);
	pthread_mutex_lock(&s->lock);
	r->next = s->live;
	if (s->live)
		s->live->prev = r;
	s->live = r;
	s->n_live++;
	s->prompt_tokens += r->n_prompt;
	pthread_mutex_unlock(&s->lock);
	ret = moem_sched_submit(s->sched, r, r->n_prompt);
	if (!ret)
		return 0;
	pthread_mutex_lock(&s->lock);
	if (r->prev)
		r->prev->next = r->next;
	else
		s->live = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
	s->n_live--;
	s->prompt_tokens -= r->n_prompt;
	pthread_mutex_unlock(&s->lock);
	pthread_mutex_lock(&r->lock);
	r->refs--;
	pthread_mutex_unlock(&r->lock);
	if (ret == -EAGAIN)
		return moem_oai_errorf(e, 429, "rate_limit_error", NULL,
				       "the server is busy: %s; retry later", moem_last_error());
	return moem_oai_errorf(e, 503, "server_error", NULL, "%s", moem_strerror(ret));
}

/*
 * Cancel the requests whose client closed the connection while it waited:
 * every live one, however many (new requests go to the head of the list,
 * so a fixed number from the head would never see the oldest).
 */
static void reap_disconnected(struct moemd_srv *s)
{
	struct pollfd *p;
	struct moemd_sreq **who;
	uint32_t cap, n = 0;
	int polled;

	pthread_mutex_lock(&s->lock);
	cap = s->n_live;
	pthread_mutex_unlock(&s->lock);
	if (!cap)
		return;
	p = calloc(cap, sizeof(*p));
	who = calloc(cap, sizeof(*who));
	if (!p || !who) {
		/* Next step: the connections are watched again then. */
		free(p);
		free(who);
		return;
	}
	pthread_mutex_lock(&s->lock);
	for (struct moemd_sreq *r = s->live; r && n < cap; r = r->next) {
		int fd;

		pthread_mutex_lock(&r->lock);
		if (r->suspended && r->conn && r->open) {
			fd = moemd_http_conn_fd(r->conn);
			if (fd >= 0) {
				p[n] = (struct pollfd){.fd = fd, .events = POLLRDHUP};
				who[n++] = r;
				r->refs++;
			}
		}
		pthread_mutex_unlock(&r->lock);
	}
	pthread_mutex_unlock(&s->lock);
	polled = n ? poll(p, (nfds_t)n, 0) : 0;
	for (uint32_t i = 0; i < n; i++) {
		if (polled > 0 && (p[i].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
			bool first;

			/* Let libmicrohttpd see the closed socket and finish it. */
			pthread_mutex_lock(&who[i]->lock);
			first = !who[i]->gone;
			who[i]->gone = true;
			wake_conn(who[i]);
			pthread_mutex_unlock(&who[i]->lock);
			if (first) {
				pthread_mutex_lock(&s->lock);
				s->disconnects++;
				pthread_mutex_unlock(&s->lock);
			}
			moemd_serve_cancel_group(s, who[i]);
		}
		moemd_sreq_put(who[i]);
	}
	free(p);
	free(who);
}

void moemd_serve_end_all(struct moemd_srv *s)
{
	pthread_mutex_lock(&s->lock);
	for (struct moemd_sreq *r = s->live; r; r = r->next) {
		pthread_mutex_lock(&r->lock);
		if (!r->done) {
			size_t n;

			r->done = true;
			r->finish = MOEM_SCHED_ERROR;
			r->err = -ESHUTDOWN;
			moem_oai_errorf(&r->oerr, 503, "server_error", NULL,
					"the server is shutting down: the answer was not finished "
					"(%u tokens generated); retry",
					r->generated);
			if (r->rq.stream) {
				char *ev = moem_oai_error_chunk(&r->oerr, &n);

				push_event(r, ev, n);
			}
			member_done(r, true);
		}
		wake_conn(r);
		pthread_mutex_unlock(&r->lock);
	}
	pthread_mutex_unlock(&s->lock);
}

uint32_t moemd_serve_live(struct moemd_srv *s)
{
	uint32_t n;

	if (!s)
		return 0;
	pthread_mutex_lock(&s->lock);
	n = s->n_live;
	pthread_mutex_unlock(&s->lock);
	return n;
}

bool moemd_serve_busy(struct moemd *d)
{
	return d->srv && d->srv->sched && moem_sched_busy(d->srv->sched);
}

bool moemd_serve_step(struct moemd *d)
{
	struct moemd_srv *s = d->srv;
	int ret;

	if (!s || !s->sched)
		return false;
	reap_disconnected(s);
	ret = moem_sched_step(s->sched);
	if (ret < 0 && d->e && moem_engine_fatal(d->e, NULL, 0)) {
		char msg[256];

		moem_engine_fatal(d->e, msg, sizeof(msg));
		moem_err("serving: fatal device error: %s", msg);
	}
	return ret != 0;
}

/*
 * The decoder's KV pool now exists: with no HBM budget, or one in % (--hbm,
 * hbm = in the config), the experts keep all of theirs or that share and
 * the pool comes on top where it is device memory (moem_engine_hbm_on_top()).
 * Unless the budget changed since the engine opened (sysfs, the socket):
 * then it is what was set.
 */
static int pool_on_top(struct moemd *d)
{
	const struct moem_engine_args *a = &d->cfg.ea;
	uint64_t share = d->hbm_at_open, hbm;
	int ret;

	if ((a->hbm && !strchr(a->hbm, '%')) ||
	    moem_engine_get_knob(d->e, MOEM_BUDGET_HBM_BYTES) != share)
		return 0;
	ret = moem_engine_hbm_on_top(d->e, share);
	if (ret == -ENOSPC) {
		/* the pool stays inside the budget: served slower, not refused */
		moem_warn("budgets: %s", moem_last_error());
		return 0;
	}
	hbm = moem_engine_get_knob(d->e, MOEM_BUDGET_HBM_BYTES);
	if (ret || hbm == share)
		return ret;
	/* the warm-up again: what the pool's first charge pushed out comes back */
	if (!d->cfg.no_warmup)
		ret = moem_engine_warmup(d->e, NULL);
	if (!ret)
		moem_info("budgets: hbm_bytes %llu: the experts' %s and the KV pool's %llu",
			  (unsigned long long)hbm, a->hbm ? a->hbm : "whole size",
			  (unsigned long long)(hbm - share));
	return ret;
}

void moemd_serve_open(struct moemd *d)
{
	struct moemd_srv *s = d->srv;
	struct moem_sched_sink sink = {
		.token = sink_token,
		.done = sink_done,
		.stepped = sink_stepped,
		.wake = sink_wake,
		.arg = s,
	};
	struct moemd_model *m = NULL;
	struct moem_sched *sched = NULL;
	int ret;

	if (!s || s->model_tried)
		return;
	s->model_tried = true;
	moem_clear_error();
	ret = moemd_model_open(d, &m);
	if (!ret)
		ret = pool_on_top(d);
	if (!ret)
		ret = moem_sched_create(&s->sched_opts, &moemd_model_ops, m, &sink, &sched);
	if (ret) {
		/* HTTP threads read the reason without the lock: byte 255 stays 0 */
		snprintf(s->model_err, sizeof(s->model_err), "%s", moem_strerror(ret));
		moem_warn("serving: no model to serve: %s", s->model_err);
		moemd_model_close(m);
		s->open_ret = ret;
		return;
	}
	/* published whole: HTTP threads look at sched and ready, metrics at model */
	pthread_mutex_lock(&s->lock);
	s->model = m;
	s->sched = sched;
	s->model_err[0] = 0;
	s->open_ret = 0;
	pthread_mutex_unlock(&s->lock);
	__atomic_store_n(&s->ready, true, __ATOMIC_RELEASE);
	moem_info("serving: '%s' ready (batch %u sequences, %u tokens a step, prefill chunks of "
		  "%u, queue %u)",
		  s->cfg.model_name, s->sched_opts.max_running, s->sched_opts.step_tokens,
		  s->sched_opts.prefill_chunk, s->sched_opts.max_waiting);
}

void moemd_serve_budget_changed(struct moemd *d)
{
	struct moemd_srv *s = d->srv;

	if (!s)
		return;
	pthread_mutex_lock(&d->lock);
	if (s->model_tried && !s->sched && (s->open_ret == -ERANGE || s->open_ret == -ENOSPC)) {
		s->retry_open = true;
		pthread_cond_signal(&d->cond);
	}
	pthread_mutex_unlock(&d->lock);
}

bool moemd_serve_take_retry(struct moemd *d)
{
	struct moemd_srv *s = d->srv;

	if (!s || !s->retry_open)
		return false;
	s->retry_open = false;
	s->model_tried = false;
	return true;
}

void moemd_serve_close(struct moemd *d)
{
	struct moemd_srv *s = d->srv;

	if (!s)
		return;
	s->closing = true;
	if (s->sched) {
		moem_sched_close(s->sched);
		moem_sched_destroy(s->sched); /* every request ends: done() wakes it */
		s->sched = NULL;
	}
	moemd_model_close(s->model);
	s->model = NULL;
}

/* Batching setting names on the control socket (set/get) and their config keys. */
static const struct {
	const char *knob, *key;
} batch_knobs[] = {
	{"max_batch", "max-batch"},
	{"max_queue", "max-queue"},
	{"step_tokens", "step-tokens"},
	{"prefill_chunk", "prefill-chunk"},
};

static uint32_t *opt_field(struct moem_sched_opts *o, unsigned int i)
{
	uint32_t *f[] = {&o->max_running, &o->max_waiting, &o->step_tokens, &o->prefill_chunk};

	return f[i];
}

static int batch_knob(const char *name)
{
	for (unsigned int i = 0; i < MOEM_ARRAY_SIZE(batch_knobs); i++)
		if (!strcmp(name, batch_knobs[i].knob) || !strcmp(name, batch_knobs[i].key))
			return (int)i;
	return -1;
}

int moemd_serve_set_opts(struct moemd_srv *s, const struct moem_sched_opts *o)
{
	uint32_t seqs, tokens;
	int ret = moem_sched_opts_check(o);

	if (ret)
		return ret;
	if (!s->sched)
		return moem_errf(EAGAIN, "batching settings: the model is not being served%s%s",
				 s->model_err[0] ? ": " : "", s->model_err);
	/* The decoder's slots and step buffers are sized when it opens. */
	moemd_model_limits(s->model, &seqs, &tokens);
	if (o->max_running > seqs)
		return moem_errf(ERANGE,
				 "max-batch %u: the decoder was opened for %u sequences (moemd's "
				 "max-batch at start); restart moemd to raise it",
				 o->max_running, seqs);
	if (o->step_tokens > tokens)
		return moem_errf(ERANGE,
				 "step-tokens %u: the decoder was opened for %u tokens a step "
				 "(moemd's step-tokens at start); restart moemd to raise it",
				 o->step_tokens, tokens);
	ret = moem_sched_set_opts(s->sched, o);
	if (ret)
		return ret;
	pthread_mutex_lock(&s->lock);
	s->sched_opts = *o;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int moemd_serve_knob(struct moemd_srv *s, const char *name, const char *value, uint32_t *now)
{
	struct moem_sched_opts o;
	int i = batch_knob(name), ret;

	if (i < 0)
		return -ENOENT;
	if (!s || !s->sched)
		return moem_errf(EAGAIN, "%s: the model is not being served%s%s", name,
				 s && s->model_err[0] ? ": " : "", s ? s->model_err : "");
	moem_sched_get_opts(s->sched, &o);
	if (value) {
		/* The same parser and bounds as the config key. */
		struct moemd_http_cfg scratch;

		moemd_http_cfg_init(&scratch);
		ret = moemd_http_cfg_set(&scratch, &o, batch_knobs[i].key, value);
		moemd_http_cfg_free(&scratch);
		if (!ret)
			ret = moemd_serve_set_opts(s, &o);
		if (ret)
			return ret;
	}
	*now = *opt_field(&o, (unsigned int)i);
	return 0;
}

void moemd_serve_knobs_json(struct moemd_srv *s, struct json_object *o)
{
	struct moem_sched_opts so;

	if (!s || !s->sched)
		return;
	moem_sched_get_opts(s->sched, &so);
	for (unsigned int i = 0; i < MOEM_ARRAY_SIZE(batch_knobs); i++)
		json_object_object_add(o, batch_knobs[i].knob,
				       json_object_new_uint64(*opt_field(&so, i)));
}
