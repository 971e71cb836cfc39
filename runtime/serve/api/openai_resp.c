// SPDX-License-Identifier: GPL-2.0-only
/*
 * OpenAI response bodies and stream chunks (openai.h), in the shapes the
 * official client libraries parse: text_completion, chat.completion,
 * chat.completion.chunk, the error object, the model list. Text is made
 * valid UTF-8 here (a token may end inside a character), so a client's
 * JSON parser never sees a broken string.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/openai.h>
#include <moem/sched.h>

#define ADD(o, k, v) json_object_object_add(o, k, v)

static const int to_string_flags = JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE;

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t left)
{
	unsigned char c = s[0];
	size_t n;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 1, cp = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef)
		n = 2, cp = c & 0x0f;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 3, cp = c & 0x07;
	else
		return 0;
	if (n >= left)
		return 0;
	for (size_t k = 1; k <= n; k++) {
		if ((s[k] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[k] & 0x3f);
	}
	if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n + 1;
}

/* A JSON string of text with every invalid byte replaced by U+FFFD. */
static struct json_object *utf8_string(const char *text, size_t len)
{
	const unsigned char *s = (const unsigned char *)text;
	struct json_object *o;
	size_t i = 0, k = 0;
	char *buf;

	if (moem_oai_utf8_ok(text, len) || !len)
		return json_object_new_string_len(len ? text : "", (int)len);
	buf = malloc(len * 3 + 1);
	if (!buf)
		return NULL;
	while (i < len) {
		size_t n = s[i] ? utf8_seq(s + i, len - i) : 0;

		if (n) {
			memcpy(buf + k, s + i, n);
			k += n;
			i += n;
		} else {
			memcpy(buf + k, "\xef\xbf\xbd", 3);
			k += 3;
			i++;
		}
	}
	o = json_object_new_string_len(buf, (int)k);
	free(buf);
	return o;
}

static char *dump(struct json_object *o, const char *prefix, const char *suffix, size_t *out_len)
{
	const char *s;
	size_t n, pl = strlen(prefix), sl = strlen(suffix);
	char *r = NULL;

	if (!o)
		return NULL;
	s = json_object_to_json_string_length(o, to_string_flags, &n);
	if (s) {
		r = malloc(pl + n + sl + 1);
		if (r) {
			memcpy(r, prefix, pl);
			memcpy(r + pl, s, n);
			memcpy(r + pl + n, suffix, sl + 1);
			if (out_len)
				*out_len = pl + n + sl;
		}
	}
	json_object_put(o);
	return r;
}

char *moem_oai_error_body(const struct moem_oai_error *e, size_t *len)
{
	struct json_object *o = json_object_new_object(), *err = json_object_new_object();

	if (!o || !err) {
		json_object_put(o);
		json_object_put(err);
		return NULL;
	}
	ADD(err, "message", utf8_string(e->message, strlen(e->message)));
	ADD(err, "type", json_object_new_string(e->type[0] ? e->type : "invalid_request_error"));
	/* a field name cut to fit param may end inside a character */
	ADD(err, "param", e->param[0] ? utf8_string(e->param, strlen(e->param)) : NULL);
	ADD(err, "code", e->code[0] ? json_object_new_string(e->code) : NULL);
	ADD(o, "error", err);
	return dump(o, "", "", len);
}

char *moem_oai_error_chunk(const struct moem_oai_error *e, size_t *out_len)
{
	size_t n;
	char *body = moem_oai_error_body(e, &n), *r;

	if (!body)
		return NULL;
	r = malloc(n + 9);
	if (r) {
		memcpy(r, "data: ", 6);
		memcpy(r + 6, body, n);
		memcpy(r + 6 + n, "\n\n", 3);
		if (out_len)
			*out_len = n + 8;
	}
	free(body);
	return r;
}

const char *moem_oai_finish_name(int finish)
{
	switch (finish) {
	case MOEM_SCHED_STOP:
		return "stop";
	case MOEM_SCHED_LENGTH:
		return "length";
	case MOEM_OAI_FINISH_TOOL_CALLS:
		return "tool_calls";
	default:
		return NULL;
	}
}

static struct json_object *bytes_array(const char *text, size_t len)
{
	struct json_object *a = json_object_new_array_ext((int)len);

	for (size_t i = 0; a && i < len; i++)
		json_object_array_add(a, json_object_new_int((unsigned char)text[i]));
	return a;
}

/* Chat: {"content":[{"token","logprob","bytes","top_logprobs":[...]}]} */
static struct json_object *chat_logprobs(const struct moem_oai_reply *r,
					 const struct moem_oai_token *t, uint32_t n)
{
	struct json_object *o = json_object_new_object(), *a = json_object_new_array_ext((int)n);

	for (uint32_t i = 0; i < n; i++) {
		struct json_object *e = json_object_new_object(), *tops = json_object_new_array();

		ADD(e, "token", utf8_string(t[i].text, t[i].len));
		ADD(e, "logprob", json_object_new_double(t[i].logprob));
		ADD(e, "bytes", bytes_array(t[i].text, t[i].len));
		for (uint32_t k = 0; k < t[i].n_top && k < r->top_logprobs; k++) {
			struct json_object *x;

			/* a token the constraint left out (-inf) is no alternative */
			if (!isfinite(t[i].top[k].logprob))
				break;
			x = json_object_new_object();

			ADD(x, "token", utf8_string(t[i].top[k].text, t[i].top[k].len));
			ADD(x, "logprob", json_object_new_double(t[i].top[k].logprob));
			ADD(x, "bytes", bytes_array(t[i].top[k].text, t[i].top[k].len));
			json_object_array_add(tops, x);
		}
		ADD(e, "top_logprobs", tops);
		json_object_array_add(a, e);
	}
	ADD(o, "content", a);
	return o;
}

/* Completions: {"tokens","token_logprobs","top_logprobs","text_offset"} */
static struct json_object *completion_logprobs(const struct moem_oai_reply *r,
					       const struct moem_oai_token *t, uint32_t n)
{
	struct json_object *o = json_object_new_object(), *toks = json_object_new_array(),
			   *lps = json_object_new_array(), *tops = json_object_new_array(),
			   *offs = json_object_new_array();
	uint64_t off = r->offset;

	for (uint32_t i = 0; i < n; i++) {
		struct json_object *top = json_object_new_object();

		json_object_array_add(toks, utf8_string(t[i].text, t[i].len));
		json_object_array_add(offs, json_object_new_uint64(off));
		off += t[i].len;
		if (t[i].no_logprob) {
			/* the prompt's first token: nothing predicts it */
			json_object_array_add(lps, NULL);
			json_object_array_add(tops, NULL);
			json_object_put(top);
			continue;
		}
		json_object_array_add(lps, json_object_new_double(t[i].logprob));
		for (uint32_t k = 0; k < t[i].n_top && k < r->top_logprobs; k++) {
			struct json_object *key;
			const char *ks;

			if (!isfinite(t[i].top[k].logprob))
				break;
			key = utf8_string(t[i].top[k].text, t[i].top[k].len);
			ks = json_object_get_string(key);

			/* Two alternatives with the same text (bytes that are not
			 * UTF-8 alone read as U+FFFD): the first, likelier, stays. */
			if (ks && !json_object_object_get_ex(top, ks, NULL))
				ADD(top, ks, json_object_new_double(t[i].top[k].logprob));
			json_object_put(key);
		}
		json_object_array_add(tops, top);
	}
	ADD(o, "tokens", toks);
	ADD(o, "token_logprobs", lps);
	ADD(o, "top_logprobs", tops);
	ADD(o, "text_offset", offs);
	return o;
}

static struct json_object *usage_json(const struct moem_oai_usage *u)
{
	struct json_object *o = json_object_new_object(), *det;

	ADD(o, "prompt_tokens", json_object_new_uint64(u->prompt_tokens));
	ADD(o, "completion_tokens", json_object_new_uint64(u->completion_tokens));
	ADD(o, "total_tokens",
	    json_object_new_uint64((uint64_t)u->prompt_tokens + u->completion_tokens));
	det = json_object_new_object();
	ADD(det, "cached_tokens", json_object_new_uint64(u->cached_tokens));
	ADD(o, "prompt_tokens_details", det);
	return o;
}

static struct json_object *head(const struct moem_oai_reply *r, const char *object)
{
	struct json_object *o = json_object_new_object();

	if (!o)
		return NULL;
	ADD(o, "id", json_object_new_string(r->id));
	ADD(o, "object", json_object_new_string(object));
	ADD(o, "created", json_object_new_int64(r->created));
	ADD(o, "model", json_object_new_string(r->model));
	return o;
}

static struct json_object *finish_json(int finish)
{
	const char *f = moem_oai_finish_name(finish);

	return f ? json_object_new_string(f) : NULL;
}

/*
 * tool_calls: [{"id","type":"function","function":{"name","arguments"}}],
 * with "index" in a stream's delta. A call's id is its reply's id with
 * its number (and the choice's index after the first): the same
 * streamed and whole.
 */
static struct json_object *calls_json(const struct moem_oai_reply *r,
				      const struct moem_oai_call *calls, uint32_t index, uint32_t n,
				      bool delta)
{
	const char *tail = strchr(r->id, '-');
	struct json_object *a = json_object_new_array_ext((int)n);

	for (uint32_t i = 0; a && i < n; i++) {
		struct json_object *c = json_object_new_object(), *fn = json_object_new_object();
		char id[96];

		/* choices after the first (n > 1) have their index in their calls' ids */
		if (r->index)
			snprintf(id, sizeof(id), "call_%s_%u_%u", tail ? tail + 1 : r->id, r->index,
				 index + i);
		else
			snprintf(id, sizeof(id), "call_%s_%u", tail ? tail + 1 : r->id, index + i);
		if (delta)
			ADD(c, "index", json_object_new_int((int32_t)(index + i)));
		ADD(c, "id", json_object_new_string(id));
		ADD(c, "type", json_object_new_string("function"));
		ADD(fn, "name", json_object_new_string(calls[i].name));
		ADD(fn, "arguments", json_object_new_string(calls[i].arguments));
		ADD(c, "function", fn);
		json_object_array_add(a, c);
	}
	return a;
}

static struct json_object *logprobs_json(const struct moem_oai_reply *r,
					 const struct moem_oai_token *t, uint32_t n)
{
	if (!r->logprobs)
		return NULL;
	return r->ep == MOEM_OAI_CHAT ? chat_logprobs(r, t, n) : completion_logprobs(r, t, n);
}

static struct json_object *choice_json(const struct moem_oai_choice *ch)
{
	const struct moem_oai_reply *r = ch->r;
	struct json_object *c = json_object_new_object(), *m;

	ADD(c, "index", json_object_new_int((int32_t)r->index));
	if (r->ep == MOEM_OAI_CHAT) {
		m = json_object_new_object();
		ADD(m, "role", json_object_new_string("assistant"));
		/* an answer that is only tool calls has no content, as OpenAI's */
		ADD(m, "content", ch->len || !r->n_calls ? utf8_string(ch->text, ch->len) : NULL);
		if (r->reasoning)
			ADD(m, "reasoning_content",
			    r->reasoning_text ? utf8_string(r->reasoning_text, r->reasoning_len)
					      : NULL);
		if (r->n_calls)
			ADD(m, "tool_calls", calls_json(r, r->calls, 0, r->n_calls, false));
		ADD(c, "message", m);
	} else {
		ADD(c, "text", utf8_string(ch->text, ch->len));
	}
	ADD(c, "logprobs", logprobs_json(r, ch->toks, ch->n_toks));
	ADD(c, "finish_reason", finish_json(ch->finish));
	return c;
}

char *moem_oai_response_n(const struct moem_oai_choice *ch, uint32_t n,
			  const struct moem_oai_usage *u, size_t *out_len)
{
	bool chat = ch[0].r->ep == MOEM_OAI_CHAT;
	struct json_object *o = head(ch[0].r, chat ? "chat.completion" : "text_completion"),
			   *choices;

	if (!o)
		return NULL;
	choices = json_object_new_array();
	for (uint32_t i = 0; i < n; i++)
		json_object_array_add(choices, choice_json(&ch[i]));
	ADD(o, "choices", choices);
	ADD(o, "usage", usage_json(u));
	return dump(o, "", "", out_len);
}

char *moem_oai_response(const struct moem_oai_reply *r, const char *text, size_t len,
			const struct moem_oai_token *toks, uint32_t n, int finish,
			const struct moem_oai_usage *u, size_t *out_len)
{
	struct moem_oai_choice c = {r, text, len, toks, n, finish};

	return moem_oai_response_n(&c, 1, u, out_len);
}

char *moem_oai_chunk(const struct moem_oai_reply *r, bool first, const char *text, size_t len,
		     const struct moem_oai_token *toks, uint32_t n, int finish, size_t *out_len)
{
	bool chat = r->ep == MOEM_OAI_CHAT;
	struct json_object *o = head(r, chat ? "chat.completion.chunk" : "text_completion"),
			   *choices, *c, *d;

	if (!o)
		return NULL;
	choices = json_object_new_array();
	c = json_object_new_object();
	ADD(c, "index", json_object_new_int((int32_t)r->index));
	if (chat) {
		d = json_object_new_object();
		if (first)
			ADD(d, "role", json_object_new_string("assistant"));
		if (len || !finish)
			ADD(d, "content", utf8_string(text, len));
		ADD(c, "delta", d);
	} else {
		ADD(c, "text", utf8_string(text, len));
	}
	ADD(c, "logprobs", logprobs_json(r, toks, n));
	ADD(c, "finish_reason", finish_json(finish));
	json_object_array_add(choices, c);
	ADD(o, "choices", choices);
	return dump(o, "data: ", "\n\n", out_len);
}

/* A chat chunk whose delta carries key: value (first: with the role), no finish yet. */
static char *delta_chunk(const struct moem_oai_reply *r, bool first, const char *key,
			 struct json_object *value, size_t *out_len)
{
	struct json_object *o = head(r, "chat.completion.chunk"), *choices, *c, *d;

	if (!o) {
		json_object_put(value);
		return NULL;
	}
	choices = json_object_new_array();
	c = json_object_new_object();
	d = json_object_new_object();
	ADD(c, "index", json_object_new_int((int32_t)r->index));
	if (first)
		ADD(d, "role", json_object_new_string("assistant"));
	ADD(d, key, value);
	ADD(c, "delta", d);
	ADD(c, "logprobs", NULL);
	ADD(c, "finish_reason", NULL);
	json_object_array_add(choices, c);
	ADD(o, "choices", choices);
	return dump(o, "data: ", "\n\n", out_len);
}

char *moem_oai_calls_chunk(const struct moem_oai_reply *r, bool first,
			   const struct moem_oai_call *calls, uint32_t index, uint32_t n,
			   size_t *out_len)
{
	return delta_chunk(r, first, "tool_calls", calls_json(r, calls, index, n, true), out_len);
}

char *moem_oai_reasoning_chunk(const struct moem_oai_reply *r, bool first, const char *text,
			       size_t len, size_t *out_len)
{
	return delta_chunk(r, first, "reasoning_content", utf8_string(text, len), out_len);
}

char *moem_oai_usage_chunk(const struct moem_oai_reply *r, const struct moem_oai_usage *u,
			   size_t *out_len)
{
	struct json_object *o =
		head(r, r->ep == MOEM_OAI_CHAT ? "chat.completion.chunk" : "text_completion");

	if (!o)
		return NULL;
	ADD(o, "choices", json_object_new_array());
	ADD(o, "usage", usage_json(u));
	return dump(o, "data: ", "\n\n", out_len);
}

char *moem_oai_tokenize_body(const int32_t *ids, uint32_t n, uint32_t max_model_len,
			     size_t *out_len)
{
	struct json_object *o = json_object_new_object(), *a = json_object_new_array_ext((int)n);

	for (uint32_t i = 0; a && i < n; i++)
		json_object_array_add(a, json_object_new_int(ids[i]));
	if (o) {
		ADD(o, "count", json_object_new_int64(n));
		ADD(o, "max_model_len", json_object_new_int64(max_model_len));
		ADD(o, "tokens", a);
		ADD(o, "token_strs", NULL);
	} else {
		json_object_put(a);
	}
	return dump(o, "", "", out_len);
}

char *moem_oai_detokenize_body(const char *text, size_t len, size_t *out_len)
{
	struct json_object *o = json_object_new_object();

	if (o)
		ADD(o, "prompt", utf8_string(text, len));
	return dump(o, "", "", out_len);
}

char *moem_oai_models(const char *model, int64_t created, size_t *out_len)
{
	struct json_object *o = json_object_new_object(), *a, *m;

	if (!o)
		return NULL;
	a = json_object_new_array();
	m = json_object_new_object();
	ADD(m, "id", json_object_new_string(model));
	ADD(m, "object", json_object_new_string("model"));
	ADD(m, "created", json_object_new_int64(created));
	ADD(m, "owned_by", json_object_new_string("moem"));
	json_object_array_add(a, m);
	ADD(o, "object", json_object_new_string("list"));
	ADD(o, "data", a);
	return dump(o, "", "", out_len);
}
