// SPDX-License-Identifier: GPL-2.0-only
/*
 * The endpoints (Documentation/protocol.md, "HTTP API"), on HTTP
 * threads: /health, /metrics, /v1/models, and the two generation
 * endpoints. A generation request is checked whole, turned into token
 * ids and queued; then its connection is suspended. A stream's content
 * callback hands out the server-sent events the worker appended and
 * suspends the connection again when it has sent them all; an answer
 * that is not streamed is queued when the worker resumes the connection
 * for the last time.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <microhttpd.h>

#include <moem/error.h>
#include <moem/log.h>
#include <moem/util.h>

#include "moemd.h"
#include "serve.h"

static int queue_body(struct MHD_Connection *c, unsigned int status, const char *type, char *body,
		      size_t len)
{
	struct MHD_Response *resp;
	int ret;

	if (!body)
		return MHD_NO;
	resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

int moemd_api_health(struct moemd_srv *s, struct MHD_Connection *c)
{
	int state = moemd_state_get(s->d);
	char buf[512];
	bool ok = s->ready && state == MOEMD_READY && !s->closing;
	const char *why = ok					  ? "ready"
			  : state == MOEMD_STARTING		  ? "starting"
			  : state == MOEMD_STAGING		  ? "staging experts"
			  : state == MOEMD_DRAINING || s->closing ? "shutting down"
			  : s->model_err[0]			  ? s->model_err
								  : "waiting for the first step";
	struct json_object *o = json_object_new_object();
	const char *txt;

	json_object_object_add(o, "status", json_object_new_string(ok ? "ok" : "unavailable"));
	json_object_object_add(o, "state", json_object_new_string(why));
	/* It will not serve: say so, so that nobody waits for it. */
	if (!ok && s->model_err[0])
		json_object_object_add(o, "error", json_object_new_string(s->model_err));
	txt = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	snprintf(buf, sizeof(buf), "%s", txt ? txt : "{}");
	json_object_put(o);
	moemd_http_count(s, EP_HEALTH, ok ? 200 : 503);
	return queue_body(c, ok ? 200 : 503, "application/json", strdup(buf), strlen(buf));
}

int moemd_api_metrics(struct moemd_srv *s, struct MHD_Connection *c)
{
	size_t len = 0;
	char *t;

	/* Counted first, so the scrape sees itself. */
	moemd_http_count(s, EP_METRICS, 200);
	t = moemd_metrics_text(s->d, &len);
	return queue_body(c, 200, "text/plain; version=0.0.4; charset=utf-8", t, len);
}

int moemd_api_models(struct moemd_srv *s, struct MHD_Connection *c)
{
	size_t len;
	char *b = moem_oai_models(s->cfg.model_name, s->created, &len);

	moemd_http_count(s, EP_MODELS, 200);
	return queue_body(c, 200, "application/json", b, len);
}

/* /detokenize: {"model"?, "tokens": [ids]} into the text. */
static char *detokenize(struct moemd_srv *s, struct json_object *root, size_t *olen,
			struct moem_oai_error *e)
{
	struct json_object *t = NULL;
	uint32_t vocab = moemd_model_vocab(s->model);
	int32_t *ids;
	size_t n, tl;
	char *text, *out;

	json_object_object_foreach(root, key, val)
	{
		if (!strcmp(key, "tokens")) {
			t = val;
		} else if (strcmp(key, "model")) {
			moem_oai_errorf(e, 400, "invalid_request_error", key,
					"Unrecognized request argument supplied: %.64s", key);
			return NULL;
		}
	}
	if (!json_object_is_type(t, json_type_array)) {
		moem_oai_errorf(e, 400, "invalid_request_error", "tokens",
				"'tokens' must be an array of token ids");
		return NULL;
	}
	n = json_object_array_length(t);
	if (n > (1u << 24)) {
		moem_oai_errorf(e, 400, "invalid_request_error", "tokens", "'tokens': too many");
		return NULL;
	}
	ids = malloc((n ? n : 1) * sizeof(*ids));
	if (!ids)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		struct json_object *x = json_object_array_get_idx(t, i);
		int64_t id = json_object_get_int64(x);
		char p[40];

		snprintf(p, sizeof(p), "tokens[%zu]", i);
		if (!json_object_is_type(x, json_type_int) || id < 0 || id >= vocab) {
			moem_oai_errorf(e, 400, "invalid_request_error", p,
					"'%s' must be a token id of the vocabulary (0..%u)", p,
					vocab - 1);
			free(ids);
			return NULL;
		}
		ids[i] = (int32_t)id;
	}
	text = moemd_model_decode(s->model, ids, (uint32_t)n, &tl);
	free(ids);
	if (!text)
		return NULL;
	out = moem_oai_detokenize_body(text, tl, olen);
	free(text);
	return out;
}

/*
 * /tokenize: a completions prompt or chat messages (with the chat
 * fields) as the generation endpoints would take them, through the same
 * parser and prompt, so the ids are the ones generation would see;
 * add_special_tokens false leaves out the BOS a plain prompt gets.
 */
static char *tokenize(struct moemd_srv *s, struct json_object *root, size_t *olen,
		      struct moem_oai_error *e)
{
	struct moem_oai_request rq;
	struct json_object *v;
	bool add_special = true;
	int32_t *ids = NULL;
	uint32_t n = 0;
	const char *str;
	char *out = NULL;
	int ret;

	if (json_object_object_get_ex(root, "add_special_tokens", &v)) {
		if (!json_object_is_type(v, json_type_boolean)) {
			moem_oai_errorf(e, 400, "invalid_request_error", "add_special_tokens",
					"'add_special_tokens' must be true or false");
			return NULL;
		}
		add_special = json_object_get_boolean(v);
		json_object_object_del(root, "add_special_tokens");
	}
	if (!json_object_object_get_ex(root, "model", NULL))
		json_object_object_add(root, "model", json_object_new_string(s->cfg.model_name));
	str = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
	if (!str)
		return NULL;
	ret = moem_oai_parse(json_object_object_get_ex(root, "messages", NULL)
				     ? MOEM_OAI_CHAT
				     : MOEM_OAI_COMPLETIONS,
			     str, strlen(str), &rq, e);
	if (ret)
		return NULL;
	if (strcmp(rq.model, s->cfg.model_name)) {
		moem_oai_errorf(e, 404, "invalid_request_error", "model",
				"The model '%.128s' does not exist: this server serves '%.128s'",
				rq.model, s->cfg.model_name);
		snprintf(e->code, sizeof(e->code), "model_not_found");
		moem_oai_request_free(&rq);
		return NULL;
	}
	rq.no_special = !add_special;
	ret = moemd_model_prompt(s->model, &rq, &ids, &n, e);
	if (!ret)
		out = moem_oai_tokenize_body(ids, n, moemd_model_context(s->model), olen);
	free(ids);
	moem_oai_request_free(&rq);
	return out;
}

int moemd_api_tokens(struct moemd_srv *s, struct MHD_Connection *c, enum moemd_ep ep,
		     const char *body, size_t len)
{
	struct moem_oai_error e = {0};
	struct json_tokener *tok;
	struct json_object *root = NULL;
	char *out = NULL;
	size_t olen = 0;

	if (!s->sched || !s->ready) {
		moem_oai_errorf(&e, 503, "server_error", NULL, "the model is not being served: %s",
				s->model_err[0] ? s->model_err : "it is still starting");
		goto fail;
	}
	if (len > INT32_MAX) {
		moem_oai_errorf(&e, 413, "invalid_request_error", NULL, "the body is too big");
		goto fail;
	}
	tok = json_tokener_new();
	if (!tok)
		goto nomem;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	root = json_tokener_parse_ex(tok, body, (int)len);
	if (!root || json_tokener_get_error(tok) != json_tokener_success ||
	    json_tokener_get_parse_end(tok) != len ||
	    !json_object_is_type(root, json_type_object)) {
		json_tokener_free(tok);
		moem_oai_errorf(&e, 400, "invalid_request_error", NULL,
				"the body must be one JSON object");
		goto fail;
	}
	json_tokener_free(tok);
	out = ep == EP_DETOKENIZE ? detokenize(s, root, &olen, &e) : tokenize(s, root, &olen, &e);
	if (out) {
		json_object_put(root);
		moemd_http_count(s, ep, 200);
		return queue_body(c, 200, "application/json", out, olen);
	}
	if (e.status)
		goto fail;
nomem:
	moem_oai_errorf(&e, 500, "server_error", NULL, "out of memory");
fail:
	json_object_put(root);
	moemd_http_count(s, ep, (unsigned int)e.status);
	return moemd_api_error(c, &e);
}

/* ---- streams ---- */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct moemd_sreq *r = cls;
	ssize_t n;

	(void)pos;
	pthread_mutex_lock(&r->lock);
	if (r->out_pos < r->out_len) {
		n = (ssize_t)moem_min(max, r->out_len - r->out_pos);
		memcpy(buf, r->out + r->out_pos, (size_t)n);
		r->out_pos += (size_t)n;
		if (r->out_pos == r->out_len)
			r->out_pos = r->out_len = 0;
	} else if (!r->open) {
		/* every choice done (n > 1: siblings write here too) */
		n = MHD_CONTENT_READER_END_OF_STREAM;
	} else {
		/* Nothing yet: wait without a thread; the worker resumes us. */
		r->suspended = true;
		MHD_suspend_connection(r->conn);
		n = 0;
	}
	pthread_mutex_unlock(&r->lock);
	return n;
}

static void stream_free(void *cls)
{
	moemd_sreq_put(cls);
}

static int start_stream(struct moemd_srv *s, struct MHD_Connection *c, struct moemd_sreq *r)
{
	struct MHD_Response *resp;
	int ret;

	/* The response holds a reference until MHD is done with it. */
	pthread_mutex_lock(&r->lock);
	r->refs++;
	pthread_mutex_unlock(&r->lock);
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, r,
						 stream_free);
	if (!resp) {
		moemd_sreq_put(r);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	ret = MHD_queue_response(c, 200, resp);
	MHD_destroy_response(resp);
	moemd_http_count(s, r->rq.ep == MOEM_OAI_CHAT ? EP_CHAT : EP_COMPLETIONS, 200);
	return ret;
}

/* ---- the whole answer ---- */

/* A choice's tokens for its logprobs (NULL: none asked, or -ENOMEM in *err). */
static struct moem_oai_token *tokens_of(const struct moemd_sreq *r, int *err)
{
	struct moem_oai_token *t;

	*err = 0;
	if (!r->rq.logprobs || !r->n_toks)
		return NULL;
	t = calloc(r->n_toks, sizeof(*t));
	if (!t) {
		*err = -ENOMEM;
		return NULL;
	}
	for (uint32_t i = 0; i < r->n_toks; i++) {
		t[i].text = r->toks[i].text;
		t[i].len = r->toks[i].len;
		t[i].logprob = r->toks[i].logprob;
		t[i].no_logprob = r->toks[i].no_lp;
		t[i].n_top = r->toks[i].n_top;
		for (uint32_t k = 0; k < t[i].n_top; k++) {
			t[i].top[k].text = r->toks[i].top_text[k];
			t[i].top[k].len = r->toks[i].top_len[k];
			t[i].top[k].logprob = r->toks[i].top_logprob[k];
		}
	}
	return t;
}

/* Every choice is done: the whole answer (one choice per request of the group), or an error. */
static int queue_answer(struct moemd_srv *s, struct MHD_Connection *c, struct moemd_sreq *r)
{
	enum moemd_ep ep = r->rq.ep == MOEM_OAI_CHAT ? EP_CHAT : EP_COMPLETIONS;
	struct moem_oai_choice ch[MOEM_OAI_N_MAX] = {0};
	struct moem_oai_token *t[MOEM_OAI_N_MAX] = {0};
	struct moem_oai_usage u = {r->n_prompt, 0, r->n_cached};
	uint32_t n = 1 + r->n_sibs;
	int ret = 0;
	size_t len;
	char *body;

	for (uint32_t i = 0; i < n; i++) {
		struct moemd_sreq *m = i ? r->sibs[i - 1] : r;

		if (m->finish == MOEM_SCHED_ERROR || m->finish == MOEM_SCHED_CANCEL) {
			moemd_http_count(s, ep, (unsigned int)m->oerr.status);
			return moemd_api_error(c, &m->oerr);
		}
	}
	for (uint32_t i = 0; !ret && i < n; i++) {
		struct moemd_sreq *m = i ? r->sibs[i - 1] : r;

		t[i] = tokens_of(m, &ret);
		m->reply.calls = m->tools.calls;
		m->reply.n_calls = m->tools.n_calls;
		m->reply.reasoning = m->use_think;
		m->reply.reasoning_text = m->reasoning_seen ? m->reasoning : NULL;
		m->reply.reasoning_len = m->reasoning_len;
		ch[i] = (struct moem_oai_choice){
			&m->reply,
			m->text ? m->text : "",
			m->text_len,
			t[i],
			m->rq.logprobs ? m->n_toks : 0,
			m->tools.n_calls ? MOEM_OAI_FINISH_TOOL_CALLS : (int)m->finish,
		};
		u.completion_tokens += m->generated;
	}
	body = ret ? NULL : moem_oai_response_n(ch, n, &u, &len);
	for (uint32_t i = 0; i < n; i++)
		free(t[i]);
	if (!body)
		return MHD_NO;
	ret = queue_body(c, 200, "application/json", body, len);
	moemd_http_count(s, ep, 200);
	return ret;
}

int moemd_api_resume(struct moemd_srv *s, struct MHD_Connection *c, struct moemd_sreq *r)
{
	int ret = MHD_YES;

	pthread_mutex_lock(&r->lock);
	if (r->rq.stream || r->queued_response) {
		pthread_mutex_unlock(&r->lock);
		return MHD_YES;
	}
	if (r->open) {
		r->suspended = true;
		MHD_suspend_connection(c);
		pthread_mutex_unlock(&r->lock);
		return MHD_YES;
	}
	r->queued_response = true;
	pthread_mutex_unlock(&r->lock);
	ret = queue_answer(s, c, r);
	return ret;
}

/*
 * n > 1: the choices after the first, each a request of its own to the
 * scheduler, parsed from the same body (seed + index when a seed is
 * given), writing into the lead's stream. On a failure the lead and the
 * siblings already submitted are cancelled: the client gets the error.
 */
static int add_siblings(struct moemd_srv *s, struct moemd_sreq *r, enum moem_oai_endpoint ep,
			const char *body, size_t len, struct moem_oai_error *e)
{
	int ret = 0;

	r->sibs = calloc(r->rq.n - 1, sizeof(*r->sibs));
	if (!r->sibs)
		ret = -ENOMEM;
	for (uint32_t i = 1; !ret && i < r->rq.n; i++) {
		struct moemd_sreq *b = calloc(1, sizeof(*b));

		if (!b) {
			ret = -ENOMEM;
			break;
		}
		pthread_mutex_init(&b->lock, NULL);
		b->refs = 1; /* the lead's */
		b->srv = s;
		b->lead = r;
		b->choice = i;
		b->t_arrive = r->t_arrive;
		ret = moem_oai_parse(ep, body, len, &b->rq, e);
		if (ret) {
			moemd_sreq_put(b);
			break;
		}
		if (b->rq.has_seed)
			b->rq.seed += i;
		r->sibs[r->n_sibs++] = b;
		pthread_mutex_lock(&r->lock);
		r->refs++; /* the sibling's, until the scheduler is done with it */
		pthread_mutex_unlock(&r->lock);
		ret = moemd_serve_submit(s, b, e);
		if (ret)
			moemd_sreq_put(r); /* never submitted: no end will drop it */
	}
	if (ret)
		moemd_serve_cancel_group(s, r);
	return ret;
}

int moemd_api_generate(struct moemd_srv *s, struct MHD_Connection *c, enum moem_oai_endpoint ep,
		       const char *body, size_t len, struct moemd_sreq **out)
{
	enum moemd_ep mep = ep == MOEM_OAI_CHAT ? EP_CHAT : EP_COMPLETIONS;
	struct moem_oai_error e = {0};
	struct moemd_sreq *r;
	int ret;

	r = calloc(1, sizeof(*r));
	if (!r)
		return MHD_NO;
	pthread_mutex_init(&r->lock, NULL);
	r->refs = 1; /* the connection's */
	r->srv = s;
	r->conn = c;
	r->t_arrive = moem_now_ns();
	ret = moem_oai_parse(ep, body, len, &r->rq, &e);
	if (!ret && strcmp(r->rq.model, s->cfg.model_name)) {
		ret = moem_oai_errorf(
			&e, 404, "invalid_request_error", "model",
			"The model '%.128s' does not exist: this server serves '%.128s'",
			r->rq.model, s->cfg.model_name);
		snprintf(e.code, sizeof(e.code), "model_not_found");
	}
	if (!ret && r->rq.n > 1) {
		/* the choices wait in the queue side by side: more than it holds never fit */
		uint32_t q;

		pthread_mutex_lock(&s->lock);
		q = s->sched_opts.max_waiting;
		pthread_mutex_unlock(&s->lock);
		if (r->rq.n > q)
			ret = moem_oai_errorf(
				&e, 400, "invalid_request_error", "n",
				"'n' %u: more choices than this server queues at once "
				"(max-queue %u)",
				r->rq.n, q);
	}
	if (!ret) {
		r->open = r->rq.n; /* every choice, before the first can end */
		ret = moemd_serve_submit(s, r, &e);
	}
	if (!ret && r->rq.n > 1)
		ret = add_siblings(s, r, ep, body, len, &e);
	if (ret) {
		if (ret == -ENOMEM && !e.status)
			moem_oai_errorf(&e, 500, "server_error", NULL, "out of memory");
		moemd_http_count(s, mep, (unsigned int)e.status);
		moemd_sreq_put(r);
		return moemd_api_error(c, &e);
	}
	*out = r;
	if (r->rq.stream)
		return start_stream(s, c, r);
	/* Wait for the answer without holding a thread. */
	pthread_mutex_lock(&r->lock);
	if (r->open) {
		r->suspended = true;
		MHD_suspend_connection(c);
		pthread_mutex_unlock(&r->lock);
		return MHD_YES;
	}
	r->queued_response = true;
	pthread_mutex_unlock(&r->lock);
	return queue_answer(s, c, r);
}

void moemd_api_closed(struct moemd_srv *s, struct moemd_sreq *r)
{
	bool running, counted;

	pthread_mutex_lock(&r->lock);
	running = r->open > 0; /* a choice still runs */
	counted = r->gone;
	r->gone = true;
	r->conn = NULL;
	r->suspended = false;
	pthread_mutex_unlock(&r->lock);
	if (running && s->sched) {
		/* The client left: its sequence and KV blocks go at the next step. */
		if (!counted) {
			pthread_mutex_lock(&s->lock);
			s->disconnects++;
			pthread_mutex_unlock(&s->lock);
		}
		moemd_serve_cancel_group(s, r);
	}
	moemd_sreq_put(r);
}
