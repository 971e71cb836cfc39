/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * moemd's model server: the OpenAI-compatible HTTP API (http.c, api.c),
 * the serving loop on the worker thread (serve.c), the model behind it
 * (model.c: tokenizer, chat template, decoder) and /metrics (metrics.c).
 * Documentation/protocol.md ("HTTP API") is the contract.
 *
 * Threads: libmicrohttpd's threads parse, check and tokenize requests,
 * submit them to the scheduler and stream what the worker produced; the
 * worker thread (worker.c) runs scheduler steps whenever it has no
 * control-socket job. A request is shared by both sides (a reference
 * each); its lock guards its output. Neither side ever waits for the
 * other: the worker appends output and resumes the connection; an HTTP
 * thread that finds nothing to send suspends it.
 */
#ifndef MOEMD_SERVE_H
#define MOEMD_SERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <moem/json_fsm.h>
#include <moem/openai.h>
#include <moem/quant.h>
#include <moem/sched.h>

struct moemd;
struct MHD_Connection;
struct json_object;

/* HTTP settings (config keys of the same names). */
struct moemd_http_cfg {
	char *listen;		/* "ADDR:PORT", "[v6]:PORT", or "none" */
	bool listen_given;	/* set by the user: failing to bind is fatal */
	char *api_key;		/* from --api-key or --api-key-file */
	char *model_name;	/* the served model id (default: the pack's file name) */
	uint64_t max_body;	/* bytes of a request body (413 above) */
	uint32_t threads;	/* HTTP threads */
	uint32_t max_conns;	/* open connections at most */
	uint32_t timeout_s;	/* an idle or slow connection is closed after this */
	uint64_t stream_buffer; /* bytes a stream may hold unread before it is cancelled */
	/* the decoder's attention projections and untied lm_head (decode.h) */
	enum moem_prec dense_prec;
	bool no_prefix_cache;		   /* --prefix-cache no: every prompt prefilled whole */
	enum moem_oai_reasoning reasoning; /* --reasoning-parser: chat's reasoning_content */
};

#define MOEMD_HTTP_DEFAULT_LISTEN "127.0.0.1:8000"

void moemd_http_cfg_init(struct moemd_http_cfg *c);
void moemd_http_cfg_free(struct moemd_http_cfg *c);
/* A setting of ours: 0, -ENOENT if not ours, -EINVAL with a message. */
int moemd_http_cfg_set(struct moemd_http_cfg *c, struct moem_sched_opts *so, const char *name,
		       const char *value);

/* One generated token kept for logprobs. */
struct moemd_tok {
	char *text;
	size_t len;
	bool no_lp; /* echo: the prompt's first token, or one no logits came for */
	float logprob;
	uint32_t n_top;
	char *top_text[MOEM_OAI_TOP_MAX];
	size_t top_len[MOEM_OAI_TOP_MAX];
	float top_logprob[MOEM_OAI_TOP_MAX];
};

/* One API request in flight. */
struct moemd_sreq {
	pthread_mutex_t lock;
	int refs;
	struct moemd_srv *srv;
	struct MHD_Connection *conn;
	bool suspended; /* the connection waits for output */
	struct moem_oai_request rq;
	struct moem_oai_reply reply;
	char id[48];
	int32_t *prompt;
	uint32_t n_prompt;
	uint32_t n_cached; /* of n_prompt, tokens the prefix cache gave (set when it starts) */
	uint64_t seq;	   /* its decoder sequence once started (model thread) */
	bool started;
	void *detok; /* the model's streaming detokenizer */
	struct moem_oai_stop stop;
	/* chat with tools: the tool-call filter after the stop filter */
	bool use_tools;
	struct moem_oai_tools tools;
	uint32_t calls_sent; /* stream: calls already sent */
	/* chat with a reasoning parser: the filter before the tool calls, the reasoning */
	bool use_think;
	bool reasoning_seen;
	struct moem_oai_think think;
	char *reasoning;
	size_t reasoning_len, reasoning_cap;
	/* echo: the prompt's text, sent before the first generated text */
	char *echo;
	size_t echo_len;
	bool echo_sent;
	uint32_t n_echo_toks; /* echo with logprobs: the prompt's tokens at the head of toks */
	/* response_format json_object: the worker's recognizer of the answer so far */
	bool json;
	bool json_stuck; /* no token could go on (or one was refused): the answer ends */
	struct moem_json_fsm json_fsm;
	/* stream: SSE bytes not yet handed to the connection */
	char *out;
	size_t out_len, out_cap, out_pos;
	/* whole answer: the text, and tokens for logprobs (both modes) */
	char *text;
	size_t text_len, text_cap;
	struct moemd_tok *toks;
	uint32_t n_toks, toks_cap, toks_sent;
	uint32_t generated;
	bool first_sent;
	bool done; /* the scheduler is finished with it */
	bool queued_response;
	bool gone; /* its client left (counted once) */
	enum moem_sched_finish finish;
	int err;
	struct moem_oai_error oerr;
	uint64_t t_arrive, t_first, t_last;
	struct moemd_sreq *prev, *next; /* the server's list of live requests */
	/*
	 * n > 1: each choice is a request of its own to the scheduler; the
	 * first (the lead) has the connection, and the others' (siblings')
	 * stream events go into its out. The lead holds a reference on each
	 * sibling (dropped when it is freed), each sibling one on the lead
	 * (dropped when the scheduler is done with the sibling).
	 */
	struct moemd_sreq *lead;  /* a sibling: its lead */
	uint32_t choice;	  /* the choice's index (the lead's: 0) */
	struct moemd_sreq **sibs; /* the lead: its siblings */
	uint32_t n_sibs;
	uint32_t open;	   /* the lead: choices not yet done (its own included) */
	bool group_failed; /* the lead: a choice ended with an error */
};

/* Metrics: histograms with fixed buckets (seconds). */
#define MOEMD_HIST_BUCKETS 16
struct moemd_hist {
	uint64_t count[MOEMD_HIST_BUCKETS + 1]; /* last: +Inf */
	uint64_t n;
	double sum;
};

/* Requests answered, by endpoint and status. */
enum moemd_ep {
	EP_COMPLETIONS,
	EP_CHAT,
	EP_MODELS,
	EP_HEALTH,
	EP_METRICS,
	EP_TOKENIZE,
	EP_DETOKENIZE,
	EP_OTHER,
	EP_NR
};
#define MOEMD_STATUS_NR 10 /* 200 400 401 404 405 413 429 500 503 other */

struct moemd_srv {
	struct moemd *d;
	struct moemd_http_cfg cfg;
	struct moem_sched_opts sched_opts;
	struct MHD_Daemon *mhd;
	int listen_fd;
	char listen_addr[80]; /* what it is bound to, port resolved */
	struct moem_sched *sched;
	struct moemd_model *model;
	char model_err[256]; /* why there is no model, when there is none */
	bool model_tried;
	int open_ret;	      /* the model's open, when it failed */
	bool retry_open;      /* a budget changed since: the worker tries again */
	bool ready;	      /* the first step has run: /health says 200 */
	bool closing;	      /* no new requests */
	int64_t created;      /* Unix time the server started */
	pthread_mutex_t lock; /* the list of live requests, counters, histograms */
	struct moemd_sreq *live;
	uint32_t n_live;
	uint32_t gen_conns;	   /* connections with a generation request, until completed */
	pthread_cond_t conns_cond; /* gen_conns fell (under lock) */
	uint64_t next_id;
	uint64_t http_status[EP_NR][MOEMD_STATUS_NR];
	uint64_t prompt_tokens, generated_tokens;
	uint64_t disconnects, stop_strings;
	struct moemd_hist ttft, itl, step, e2e;
	uint64_t step_tokens_sum, steps;
	uint64_t last_step_batch;
};

/* http.c */
int moemd_http_start(struct moemd *d);
/* Stop taking requests, end those in flight, stop the threads. */
void moemd_http_stop(struct moemd *d);
void moemd_http_count(struct moemd_srv *s, enum moemd_ep ep, unsigned int status);
/* Wake a suspended connection; its socket (to watch for a hang-up while suspended). */
void moemd_http_resume(struct MHD_Connection *c);
int moemd_http_conn_fd(struct MHD_Connection *c);

/* api.c: the endpoints (called by http.c on an HTTP thread) */
struct moemd_hreq; /* http.c's per-request state */
int moemd_api_health(struct moemd_srv *s, struct MHD_Connection *c);
int moemd_api_metrics(struct moemd_srv *s, struct MHD_Connection *c);
int moemd_api_models(struct moemd_srv *s, struct MHD_Connection *c);
/* POST /tokenize and /detokenize (vLLM's): the body read, answered at once. */
int moemd_api_tokens(struct moemd_srv *s, struct MHD_Connection *c, enum moemd_ep ep,
		     const char *body, size_t len);
/* The body is complete: parse, check, submit; queue an error or suspend. */
int moemd_api_generate(struct moemd_srv *s, struct MHD_Connection *c, enum moem_oai_endpoint ep,
		       const char *body, size_t len, struct moemd_sreq **out);
/* Called again on a resumed connection: queue the answer once it is done. */
int moemd_api_resume(struct moemd_srv *s, struct MHD_Connection *c, struct moemd_sreq *r);
/* The connection ended (normally or not): cancel if still running, drop the ref. */
void moemd_api_closed(struct moemd_srv *s, struct moemd_sreq *r);
int moemd_api_error(struct MHD_Connection *c, const struct moem_oai_error *e);

/* serve.c: requests and the serving loop */
void moemd_sreq_put(struct moemd_sreq *r);
/* Cancel a request and, with n > 1, its siblings (r is a lead or alone). */
void moemd_serve_cancel_group(struct moemd_srv *s, struct moemd_sreq *r);
/* Worker thread: open the model and the scheduler once the engine is ready. */
void moemd_serve_open(struct moemd *d);
/*
 * Any thread, after a budget change took: a model not served for want of
 * room (its open failed with ERANGE or ENOSPC: a KV budget below one
 * block, say) is opened again on the worker thread.
 */
void moemd_serve_budget_changed(struct moemd *d);
/* Worker thread, d->lock held: take the retry asked for (true if there is one). */
bool moemd_serve_take_retry(struct moemd *d);
/* Worker thread: one scheduler step if there is work; true if it ran one. */
bool moemd_serve_step(struct moemd *d);
bool moemd_serve_busy(struct moemd *d);
/* Any thread: API requests between arrival and their last byte. */
uint32_t moemd_serve_live(struct moemd_srv *s);
/*
 * Shutdown (HTTP stop): every request not finished ends now, as an error
 * its client can see: 503 for a whole answer, an error event and [DONE]
 * for a stream. Waiting connections are woken to send it.
 */
void moemd_serve_end_all(struct moemd_srv *s);
/* Worker thread: close the scheduler and the model (before the engine). */
void moemd_serve_close(struct moemd *d);
/* HTTP thread: queue r (429/503 in *e on refusal). */
int moemd_serve_submit(struct moemd_srv *s, struct moemd_sreq *r, struct moem_oai_error *e);
/*
 * Batching settings, live (applied at the next step boundary): checked,
 * and bounded by what the decoder was opened for (-ERANGE beyond).
 */
int moemd_serve_set_opts(struct moemd_srv *s, const struct moem_sched_opts *o);
/* The control socket's get/set of one (max_batch, max_queue, step_tokens,
 * prefill_chunk; value NULL: get): -ENOENT if name is not one of them. */
int moemd_serve_knob(struct moemd_srv *s, const char *name, const char *value, uint32_t *now);
/* Add every batching setting in force to o. */
void moemd_serve_knobs_json(struct moemd_srv *s, struct json_object *o);

/* metrics.c */
/* The "serving" object of the control socket's status. */
struct json_object *moemd_serving_json(struct moemd_srv *s);
void moemd_hist_add(struct moemd_hist *h, double seconds);
/* The Prometheus text of everything (malloc()ed). */
char *moemd_metrics_text(struct moemd *d, size_t *len);

/* model.c: the model behind the API (the pack's tokenizer, the full decoder) */
struct moemd_model;
int moemd_model_open(struct moemd *d, struct moemd_model **out);
void moemd_model_close(struct moemd_model *m);
/* HTTP thread: the prompt's token ids (chat template for chat), or a 400. */
int moemd_model_prompt(struct moemd_model *m, const struct moem_oai_request *rq, int32_t **ids,
		       uint32_t *n, struct moem_oai_error *e);
/* HTTP thread: each token's bytes ready for response_format json_object (0, -ENOMEM). */
int moemd_model_json_ready(struct moemd_model *m);
/* Whether rq's answer is read for tool calls (tools given, the template asks for them). */
bool moemd_model_tool_calls(const struct moemd_model *m, const struct moem_oai_request *rq);
/* The tokenizer's vocabulary size; the context the decoder was opened for. */
uint32_t moemd_model_vocab(const struct moemd_model *m);
uint32_t moemd_model_context(const struct moemd_model *m);
/* The text of ids (special tokens left out), malloc()ed; NULL: no memory. */
char *moemd_model_decode(struct moemd_model *m, const int32_t *ids, uint32_t n, size_t *len);
/*
 * Worker thread (echo with logprobs): the prompt's tokens at the head of
 * r->toks, their logprobs filled by moemd_serve_prompt_logits() (a
 * decoder logits_fn) as the prefill computes them.
 */
int moemd_serve_echo_tokens(struct moemd_sreq *r, const int32_t *ids, uint32_t n);
void moemd_serve_prompt_logits(void *arg, uint64_t seq, uint32_t pos, const float *logits,
			       uint32_t vocab);
/* HTTP thread: a streaming detokenizer for r. */
int moemd_model_detok_new(struct moemd_model *m, void **out);
void moemd_model_detok_free(struct moemd_model *m, void *dt);
/* Worker thread: text that token id completes (valid until the next call). */
int moemd_model_detok_push(struct moemd_model *m, void *dt, int32_t id, const char **text,
			   size_t *len);
int moemd_model_detok_flush(struct moemd_model *m, void *dt, const char **text, size_t *len);
/* A token's own bytes, for logprobs: malloc'ed, the caller's to free (NULL: no memory). */
char *moemd_model_token_text(struct moemd_model *m, int32_t id, size_t *len);
bool moemd_model_is_eos(struct moemd_model *m, int32_t id);
extern const struct moem_sched_ops moemd_model_ops;
/* KV usage for metrics and status: bytes used, budget; false without a decoder. */
bool moemd_model_kv(struct moemd_model *m, uint64_t *used, uint64_t *budget, uint64_t *seqs);
/* The prefix cache: prompt tokens it gave since start, bytes of KV it keeps for later prompts. */
void moemd_model_prefix(struct moemd_model *m, uint64_t *hit_tokens, uint64_t *cached_bytes);
/* What the decoder was opened for: sequences at once, tokens a step. */
void moemd_model_limits(struct moemd_model *m, uint32_t *seqs, uint32_t *step_tokens);

#endif /* MOEMD_SERVE_H */
