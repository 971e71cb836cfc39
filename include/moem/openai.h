/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The OpenAI-compatible API's requests and responses
 * (Documentation/protocol.md, "HTTP API"): parsing and checking a
 * /v1/completions or /v1/chat/completions body, the error object a
 * client library understands, response bodies and server-sent-event
 * chunks, and stop strings over streamed text. No I/O and no model:
 * moemd's HTTP side calls these.
 *
 * A request is checked whole before anything runs: an unknown field, a
 * value of the wrong type or out of range, invalid UTF-8 or a NUL in a
 * string gets a 400 whose error names the field ("param"), the way
 * OpenAI's API answers.
 */
#ifndef MOEM_OPENAI_H
#define MOEM_OPENAI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "json_fsm.h"

#define MOEM_OAI_STOP_MAX     4	   /* stop strings per request (OpenAI's bound) */
#define MOEM_OAI_STOP_LEN     256  /* bytes per stop string */
#define MOEM_OAI_TOP_MAX      20   /* top logprobs per token */
#define MOEM_OAI_MESSAGES_MAX 4096 /* chat messages per request */
#define MOEM_OAI_TOOLS_MAX    128  /* tools per request (OpenAI's bound) */
#define MOEM_OAI_TOOL_NAME    64   /* bytes of a function's name: [A-Za-z0-9_-] */
#define MOEM_OAI_BIAS_MAX     300  /* logit_bias entries (OpenAI's bound) */
#define MOEM_OAI_STOP_IDS_MAX 8	   /* stop_token_ids */
#define MOEM_OAI_N_MAX	      16   /* choices per request (n) */

/* top_k's bound: the sampler's (moem_sampling_check()) */
#define MOEM_OAI_TOP_K_MAX (1 << 24)

enum moem_oai_endpoint {
	MOEM_OAI_COMPLETIONS = 0, /* POST /v1/completions */
	MOEM_OAI_CHAT = 1,	  /* POST /v1/chat/completions */
};

struct moem_oai_message {
	char *role; /* system, developer, user, assistant, tool */
	char *content;
	/* assistant: the calls it made, a JSON array for the chat template
	 * (each function's "arguments" an object where the string parsed as
	 * one, as Hugging Face's templates expect); NULL if none */
	char *tool_calls;
	char *tool_call_id; /* tool: the call this answers; NULL if not given */
};

/* tool_choice */
enum moem_oai_tool_choice {
	MOEM_OAI_TOOL_AUTO = 0,	    /* the model may call the tools given */
	MOEM_OAI_TOOL_NONE = 1,	    /* the tools are not shown to the model */
	MOEM_OAI_TOOL_REQUIRED = 2, /* the answer is one call of one of them (constrained) */
	MOEM_OAI_TOOL_NAMED = 3,    /* the answer is one call of tool_name (constrained) */
};

struct moem_oai_request {
	enum moem_oai_endpoint ep;
	char *model;
	/* completions: the prompt as text, or as token ids (then prompt is NULL) */
	char *prompt;
	int32_t *prompt_ids;
	uint32_t n_prompt_ids;
	/* chat */
	struct moem_oai_message *messages;
	uint32_t n_messages;
	char *tools; /* the tools as a JSON array (the template's "tools"); NULL: none */
	/* chat_template_kwargs (vLLM's): more variables for the template, a JSON object; NULL: none */
	char *template_kwargs;
	uint32_t n_tools;
	enum moem_oai_tool_choice tool_choice;
	char *tool_name;	  /* MOEM_OAI_TOOL_NAMED: the function's name */
	bool parallel_tool_calls; /* default true; false: calls after the first are dropped */
	bool add_generation_prompt; /* default true (vLLM's extension): the template opens the answer */
	bool no_special;     /* not a field: /tokenize's add_special_tokens false (no BOS added) */
	uint32_t max_tokens; /* max_tokens or max_completion_tokens; 0: not given */
	double temperature;  /* 0..2, default 1 (0: greedy) */
	double top_p;	     /* (0, 1], default 1 */
	int32_t top_k;	     /* 0: off (-1 is taken as off) */
	double min_p;	     /* [0, 1], default 0 */
	double presence_penalty, frequency_penalty; /* [-2, 2], default 0 */
	double repetition_penalty;		    /* (0, 2], default 1 (vLLM's extension) */
	bool has_seed;
	uint64_t seed;
	char *stop[MOEM_OAI_STOP_MAX];
	uint32_t n_stop;
	bool logprobs;	       /* completions: "logprobs": N given; chat: "logprobs": true */
	uint32_t top_logprobs; /* alternatives per token, 0..MOEM_OAI_TOP_MAX */
	bool stream, include_usage;
	bool echo;	  /* completions: the answer starts with the prompt (and its logprobs) */
	uint32_t n;	  /* choices, 1..MOEM_OAI_N_MAX: each sampled on its own (default 1) */
	bool json_object; /* response_format json_object or json_schema: the answer is one JSON object */
	/* json_schema, or tool_choice required / named: the schema it follows (else NULL) */
	struct moem_json_schema *json_schema;
	/* logit_bias: token ids (checked against the vocabulary by the server) and -100..100 */
	uint32_t n_bias;
	int32_t bias_id[MOEM_OAI_BIAS_MAX];
	float bias[MOEM_OAI_BIAS_MAX];
	/* vLLM's extensions: no end at the model's end-of-sequence ids; none
	 * before min_tokens; more ids that end the answer */
	bool ignore_eos;
	uint32_t min_tokens;
	uint32_t n_stop_ids;
	int32_t stop_ids[MOEM_OAI_STOP_IDS_MAX];
};

/* An API error: the HTTP status and OpenAI's error object. */
struct moem_oai_error {
	int status;	/* 400, 401, 404, 413, 429, 500, 503 */
	char type[32];	/* invalid_request_error, authentication_error, ... */
	char param[96]; /* the offending field ("" if none) */
	char code[32];	/* "" or e.g. model_not_found, context_length_exceeded */
	char message[512];
};

/* Fill e (message printf-style); returns -EINVAL for tail calls. */
int moem_oai_errorf(struct moem_oai_error *e, int status, const char *type, const char *param,
		    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* {"error":{"message":..,"type":..,"param":..,"code":..}} as a string (malloc()ed). */
char *moem_oai_error_body(const struct moem_oai_error *e, size_t *len);

/*
 * Parse and check a request body. 0 and *rq (free it with
 * moem_oai_request_free()); -EINVAL with *e filled (status 400);
 * -ENOMEM.
 */
int moem_oai_parse(enum moem_oai_endpoint ep, const char *body, size_t len,
		   struct moem_oai_request *rq, struct moem_oai_error *e);
void moem_oai_request_free(struct moem_oai_request *rq);

/* True if s[0..len) is well-formed UTF-8 (no overlongs, surrogates or NULs). */
bool moem_oai_utf8_ok(const char *s, size_t len);

/* ---- responses ---- */

/* One generated token, for logprobs. */
struct moem_oai_token {
	const char *text; /* its bytes (may be part of a UTF-8 character) */
	size_t len;
	bool no_logprob; /* the prompt's first token (echo): null logprob and alternatives */
	float logprob;
	uint32_t n_top;
	struct {
		const char *text;
		size_t len;
		float logprob;
	} top[MOEM_OAI_TOP_MAX];
};

/* A call of one of the request's tools, found in the generated text. */
struct moem_oai_call {
	char *name;
	char *arguments; /* a JSON object, as text */
};

/* What every response and chunk of one request shares. */
struct moem_oai_reply {
	enum moem_oai_endpoint ep;
	const char *id; /* "cmpl-..." or "chatcmpl-..." */
	const char *model;
	int64_t created; /* Unix seconds */
	uint32_t index;	 /* the choice's (n > 1): in its chunks and its calls' ids */
	bool logprobs;	 /* include logprobs */
	uint32_t top_logprobs;
	uint64_t offset; /* completions' text_offset: the tokens' bytes before these */
	/* chat: the tool calls of a whole response (moem_oai_response()) */
	const struct moem_oai_call *calls;
	uint32_t n_calls;
	/* chat with a reasoning parser: the whole response's reasoning_content
	 * (NULL: none found, given as null) */
	bool reasoning;
	const char *reasoning_text;
	size_t reasoning_len;
};

struct moem_oai_usage {
	uint32_t prompt_tokens, completion_tokens;
	/* of prompt_tokens, taken from the prefix cache (prompt_tokens_details.cached_tokens) */
	uint32_t cached_tokens;
};

/* A finish reason beyond enum moem_sched_finish's: the answer called tools. */
#define MOEM_OAI_FINISH_TOOL_CALLS 0x100

/*
 * "stop", "length", "tool_calls", or NULL (still running) for an enum
 * moem_sched_finish or MOEM_OAI_FINISH_TOOL_CALLS.
 */
const char *moem_oai_finish_name(int finish);

/*
 * The whole (non-streaming) response: text (UTF-8; invalid sequences
 * become U+FFFD), its tokens for logprobs (n may be 0), the finish reason
 * and the usage. A JSON string, malloc()ed; NULL on ENOMEM.
 */
char *moem_oai_response(const struct moem_oai_reply *r, const char *text, size_t len,
			const struct moem_oai_token *toks, uint32_t n, int finish,
			const struct moem_oai_usage *u, size_t *out_len);
/* One choice of a whole response with n > 1: its reply (index, calls, reasoning) and answer. */
struct moem_oai_choice {
	const struct moem_oai_reply *r;
	const char *text;
	size_t len;
	const struct moem_oai_token *toks;
	uint32_t n_toks;
	int finish;
};
/* A whole response of n choices, in order (the head's id, model, created: c[0].r's). */
char *moem_oai_response_n(const struct moem_oai_choice *c, uint32_t n,
			  const struct moem_oai_usage *u, size_t *out_len);
/*
 * One server-sent event "data: {...}\n\n" with a chunk: the text and
 * tokens produced since the last chunk, the finish reason when this is
 * the last one (0 otherwise); first adds the chat delta's role. NULL on
 * ENOMEM.
 */
char *moem_oai_chunk(const struct moem_oai_reply *r, bool first, const char *text, size_t len,
		     const struct moem_oai_token *toks, uint32_t n, int finish, size_t *out_len);
/*
 * A chat chunk whose delta carries calls[0..n) (whole: name and all the
 * arguments), numbered from index. The calls' ids are the reply id's.
 */
char *moem_oai_calls_chunk(const struct moem_oai_reply *r, bool first,
			   const struct moem_oai_call *calls, uint32_t index, uint32_t n,
			   size_t *out_len);
/* The usage chunk (stream_options.include_usage): empty choices. */
char *moem_oai_usage_chunk(const struct moem_oai_reply *r, const struct moem_oai_usage *u,
			   size_t *out_len);
/* An error inside a stream: "data: {"error":{...}}\n\n". */
char *moem_oai_error_chunk(const struct moem_oai_error *e, size_t *out_len);
/* The end of a stream. */
#define MOEM_OAI_DONE "data: [DONE]\n\n"

/* POST /tokenize's answer (vLLM's): {"count","max_model_len","tokens","token_strs":null}. */
char *moem_oai_tokenize_body(const int32_t *ids, uint32_t n, uint32_t max_model_len,
			     size_t *out_len);
/* POST /detokenize's answer: {"prompt": text} (invalid UTF-8 as U+FFFD). */
char *moem_oai_detokenize_body(const char *text, size_t len, size_t *out_len);

/* GET /v1/models: the one model this server serves. */
char *moem_oai_models(const char *model, int64_t created, size_t *out_len);

/* ---- stop strings ---- */

/*
 * Text streams out through a stop-string filter: it holds back the end
 * of the text that could be the start of a stop string, and when a stop
 * string appears it lets out only the text before it. What it lets out
 * never contains a stop string, whatever the token boundaries.
 */
struct moem_oai_stop {
	char *const *stops;
	uint32_t n;
	char *buf; /* held-back text */
	size_t len, cap;
	size_t sent; /* bytes at the start of buf let out by the last call */
	bool matched;
};

void moem_oai_stop_init(struct moem_oai_stop *s, char *const *stops, uint32_t n);
void moem_oai_stop_free(struct moem_oai_stop *s);
/*
 * Add text. *out and *out_len: what may be sent now (points into the
 * filter's buffer, valid until the next call). Returns 1 when a stop
 * string matched (the text after it is dropped, later calls add
 * nothing), 0 otherwise, -ENOMEM.
 */
int moem_oai_stop_feed(struct moem_oai_stop *s, const char *text, size_t len, const char **out,
		       size_t *out_len);
/* The end of the text: what is still held back. */
void moem_oai_stop_flush(struct moem_oai_stop *s, const char **out, size_t *out_len);

/* ---- tool calls ---- */

/*
 * The tool-call filter: generated text in, the answer's content and its
 * tool calls out, in the format of Hermes' and Qwen's chat templates
 * (<tool_call>{"name": ..., "arguments": {...}}</tool_call>, as vLLM's
 * hermes parser reads it). It holds back text that could be the start of
 * a call, and a call until its end tag (or the end of the text: a call cut
 * short there is still taken if its JSON is whole). A block whose JSON is
 * not {"name": a non-empty string, "arguments": an object} stays in the
 * content as it was generated; the whitespace next to a call is dropped.
 * Without a call the content is the text, byte for byte. Stream and whole
 * answer run the same filter, so they agree.
 */
struct moem_oai_tools {
	bool parallel;	 /* false: calls after the first are dropped */
	bool in_call;	 /* inside <tool_call>: buf holds the call's text */
	bool after_call; /* drop the whitespace that follows a call */
	char *buf;	 /* held-back text */
	size_t len, cap;
	size_t ws;     /* in_call: the whitespace dropped before the start tag */
	char *ws_text; /* ... its bytes (restored if the block is not a call) */
	char *out;     /* what the last call lets out */
	size_t out_len, out_cap;
	struct moem_oai_call *calls;
	uint32_t n_calls, calls_cap;
	uint32_t dropped; /* calls dropped by parallel = false */
};

void moem_oai_tools_init(struct moem_oai_tools *f, bool parallel);
void moem_oai_tools_free(struct moem_oai_tools *f);
/*
 * Add text: *out and *out_len are the content that may be sent now (valid
 * until the next call); calls found are appended to f->calls. 0 or
 * -ENOMEM.
 */
int moem_oai_tools_feed(struct moem_oai_tools *f, const char *text, size_t len, const char **out,
			size_t *out_len);
/* The end of the text: the content still held back (and a call cut short). */
int moem_oai_tools_flush(struct moem_oai_tools *f, const char **out, size_t *out_len);

/* ---- reasoning ---- */

/*
 * The reasoning filter (vLLM's --reasoning-parser): a thinking model's
 * text split into the reasoning between <think> and </think> and the
 * content after it, as it streams. qwen3: reasoning only when the text
 * starts with <think> (Qwen3's enable_thinking false gives no block);
 * deepseek_r1: reasoning from the start (its template opens the block
 * in the prompt), a leading <think> dropped. The whitespace that starts
 * the content is dropped. A block that never ends is all reasoning.
 */
enum moem_oai_reasoning {
	MOEM_OAI_REASONING_NONE = 0,
	MOEM_OAI_REASONING_QWEN3 = 1,
	MOEM_OAI_REASONING_DEEPSEEK_R1 = 2,
};

struct moem_oai_think {
	enum moem_oai_reasoning mode;
	int state; /* think.c's */
	char *buf; /* held back: a possible tag */
	size_t len, cap;
	char *reason, *content; /* what the last call lets out of each */
	size_t reason_len, content_len, reason_cap, content_cap;
};

/* The parser of this name ("none", "qwen3", "deepseek_r1"), or -EINVAL. */
int moem_oai_reasoning_parse(const char *name, enum moem_oai_reasoning *out);
void moem_oai_think_init(struct moem_oai_think *f, enum moem_oai_reasoning mode);
void moem_oai_think_free(struct moem_oai_think *f);
/*
 * Add text (flush: the end of it): f->reason/reason_len and
 * f->content/content_len are what may be sent now, valid until the next
 * call. 0 or -ENOMEM.
 */
int moem_oai_think_feed(struct moem_oai_think *f, const char *text, size_t len, bool flush);
/*
 * A chat chunk whose delta carries reasoning_content (first: with the
 * role). NULL on ENOMEM.
 */
char *moem_oai_reasoning_chunk(const struct moem_oai_reply *r, bool first, const char *text,
			       size_t len, size_t *out_len);

#endif /* MOEM_OPENAI_H */
