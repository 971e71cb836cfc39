// SPDX-License-Identifier: GPL-2.0-only
/*
 * The model behind the HTTP API: the pack's tokenizer (tokenizer.h) for
 * prompts and streamed text, and the full decoder (decode.h) on moemd's
 * engine, driven by the scheduler through moemd_model_ops. The decoder
 * reserves a sequence's KV blocks (prompt + max tokens) when it starts,
 * so -ENOSPC there means "wait", and a running sequence never runs out. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/chat.h>
#include <moem/decode.h>
#include <moem/error.h>
#include <moem/json_fsm.h>
#include <moem/log.h>
#include <moem/pack.h>
#include <moem/tokenizer.h>
#include <moem/util.h>

#include "moemd.h"
#include "serve.h"

struct moemd_model {
	struct moem_decoder *dec;
	struct moem_tokenizer *tok;
	struct moem_chat_template *chat; /* NULL: the pack has none */
	char chat_err[160];
	struct moem_tok_info info;
	uint32_t model_vocab; /* the checkpoint's vocab_size (lm_head rows) */
	uint32_t max_context;
	uint32_t max_seqs, max_step_tokens; /* what the decoder was opened for */
	uint32_t block_tokens;		    /* the KV block; 0: no prefix cache */
	uint64_t next_seed;
	/* response_format json_object: each token's bytes (none for special
	 * ones), built at the first such request */
	pthread_mutex_t json_lock;
	bool json_ready;
	uint32_t json_n;
	uint32_t *json_off; /* json_n + 1 offsets into json_bytes */
	char *json_bytes;
	int32_t *json_chars; /* inside a string: the characters each adds (-1: not plain text) */
	uint8_t *json_allow; /* the worker's: which ids may come next */
	uint32_t json_allow_n;
};

/* One step of one token, so that /health says 200 only once the model ran. */
static int first_step(struct moemd_model *m)
{
	struct moem_seq_params p = {0};
	struct moem_token_out out;
	struct moem_work w = {0};
	int32_t id = m->info.bos_id >= 0 ? (int32_t)m->info.bos_id : 0;
	struct moem_err_saved why;
	uint64_t seq;
	int ret;

	p.prompt = &id;
	p.n_prompt = 1;
	moem_sampling_defaults(&p.sampling);
	p.max_new_tokens = 1;
	ret = moem_decoder_add(m->dec, &p, &seq);
	if (ret)
		return ret;
	w.seq = seq;
	w.kind = MOEM_WORK_PREFILL;
	w.n_tokens = 1;
	ret = moem_decoder_step(m->dec, &w, 1, &out, NULL);
	moem_error_save(&why);
	moem_decoder_cancel(m->dec, seq); /* -ENOENT once it finished: fine */
	moem_error_restore(&why);
	return ret;
}

int moemd_model_open(struct moemd *d, struct moemd_model **out)
{
	struct moem_decoder_opts o = {0};
	struct moemd_model *m;
	struct moem_pack *pack = NULL;
	struct moem_kv_usage u;
	int ret;

	*out = NULL;
	if (d->cfg.sched.step_tokens > 4096)
		return moem_errf(EINVAL, "step-tokens %u: the decoder takes at most 4096 a step",
				 d->cfg.sched.step_tokens);
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	pthread_mutex_init(&m->json_lock, NULL);
	ret = moem_pack_open(d->cfg.ea.o.pack_path, &pack);
	if (!ret) {
		m->model_vocab = moem_pack_config(pack)->vocab;
		ret = moem_tok_load_pack(&m->tok, pack);
	}
	if (pack)
		moem_pack_close(pack);
	if (ret) {
		ret = moem_err_prefix(-ret, "the pack's tokenizer");
		goto fail;
	}
	moem_tok_info(m->tok, &m->info);
	if (m->info.chat_template) {
		ret = moem_chat_from_tokenizer(m->tok, &m->chat);
		if (ret) {
			/* Completions still work; chat says why not. */
			snprintf(m->chat_err, sizeof(m->chat_err), "the chat template: %s",
				 moem_strerror(ret));
			moem_warn("serving: %s: /v1/chat/completions will answer 400", m->chat_err);
			m->chat = NULL;
		}
	} else {
		snprintf(m->chat_err, sizeof(m->chat_err), "this model has no chat template");
	}
	o.max_seqs = moem_min(d->cfg.sched.max_running, 1024u);
	o.max_step_tokens = d->cfg.sched.step_tokens;
	o.dense_prec = d->cfg.http.dense_prec;
	o.prefix_cache_off = d->cfg.http.no_prefix_cache;
	ret = moem_decoder_open(d->e, &o, &m->dec);
	if (ret)
		goto fail;
	m->max_seqs = o.max_seqs;
	m->max_step_tokens = o.max_step_tokens;
	moem_decoder_kv_usage(m->dec, &u);
	m->max_context = u.max_context;
	m->block_tokens = o.prefix_cache_off ? 0 : u.block_tokens;
	ret = first_step(m);
	if (ret) {
		ret = moem_err_prefix(-ret, "the first step");
		goto fail;
	}
	moem_info("serving: %s tokenizer (%u tokens%s), context %u, KV %llu blocks of %u tokens",
		  moem_tok_kind_name(m->info.kind), m->info.vocab_size,
		  m->info.chat_template ? ", chat template" : ", no chat template", m->max_context,
		  (unsigned long long)u.blocks_total, u.block_tokens);
	*out = m;
	return 0;
fail:
	moemd_model_close(m);
	return ret;
}

void moemd_model_close(struct moemd_model *m)
{
	if (!m)
		return;
	if (m->dec)
		moem_decoder_close(m->dec);
	if (m->chat)
		moem_chat_free(m->chat);
	if (m->tok)
		moem_tok_free(m->tok);
	pthread_mutex_destroy(&m->json_lock);
	free(m->json_off);
	free(m->json_bytes);
	free(m->json_chars);
	free(m->json_allow);
	free(m);
}

bool moemd_model_tool_calls(const struct moemd_model *m, const struct moem_oai_request *rq)
{
	return rq->ep == MOEM_OAI_CHAT && rq->n_tools && rq->tool_choice != MOEM_OAI_TOOL_NONE &&
	       m->info.chat_template && strstr(m->info.chat_template, "<tool_call>");
}

/* One message for the template: tool calls and ids as Hugging Face's templates read them. */
static int chat_message(const struct moem_oai_message *in, struct json_object **out)
{
	struct json_object *msg = json_object_new_object(), *calls = NULL;
	/* "developer" is OpenAI's newer name for the system turn. */
	const char *role = strcmp(in->role, "developer") ? in->role : "system";

	*out = NULL;
	if (!msg)
		return -ENOMEM;
	json_object_object_add(msg, "role", json_object_new_string(role));
	json_object_object_add(msg, "content", json_object_new_string(in->content));
	if (in->tool_calls) {
		calls = json_tokener_parse(in->tool_calls);
		if (!calls) {
			json_object_put(msg);
			return -ENOMEM; /* moem_oai_parse() wrote it: only memory can fail */
		}
		json_object_object_add(msg, "tool_calls", calls);
	}
	if (in->tool_call_id)
		json_object_object_add(msg, "tool_call_id",
				       json_object_new_string(in->tool_call_id));
	*out = msg;
	return 0;
}

/* The conversation through the pack's chat template, ready to answer. */
static int render_chat(struct moemd_model *m, const struct moem_oai_request *rq, char **text,
		       struct moem_oai_error *e)
{
	struct json_object *a = json_object_new_array();
	struct moem_chat_args ca = {0};
	char *extra = NULL;
	size_t len;
	int ret = 0;

	if (!m->chat) {
		json_object_put(a);
		return moem_oai_errorf(e, 400, "invalid_request_error", "messages",
				       "%s: use /v1/completions", m->chat_err);
	}
	if (!a)
		return -ENOMEM;
	/* Tools the model would answer in a format moem cannot read are refused. */
	if (rq->n_tools && rq->tool_choice != MOEM_OAI_TOOL_NONE &&
	    !moemd_model_tool_calls(m, rq)) {
		json_object_put(a);
		return moem_oai_errorf(e, 400, "invalid_request_error", "tools",
				       "this model's chat template does not ask for tool calls in "
				       "a format this server reads (<tool_call>{...}</tool_call>, "
				       "as Qwen's and Hermes'): send no tools, or \"tool_choice\": "
				       "\"none\"");
	}
	for (uint32_t i = 0; !ret && i < rq->n_messages; i++) {
		struct json_object *msg;

		ret = chat_message(&rq->messages[i], &msg);
		if (!ret)
			json_object_array_add(a, msg);
	}
	if (!ret && (moemd_model_tool_calls(m, rq) || rq->template_kwargs)) {
		/*
		 * {"tools": [...], kwargs...}: the request's JSON, checked by
		 * moem_oai_parse(); kwargs is an object with members ("{...}"),
		 * which follow "tools" inside one object.
		 */
		const char *kw = rq->template_kwargs;
		bool tools = moemd_model_tool_calls(m, rq);

		if (asprintf(&extra, "{%s%s%s%s", tools ? "\"tools\":" : "", tools ? rq->tools : "",
			     tools && kw ? "," : "", kw ? kw + 1 : "}") < 0) {
			extra = NULL;
			ret = -ENOMEM;
		}
		ca.extra_json = extra;
		ca.extra_len = extra ? strlen(extra) : 0;
	}
	if (ret) {
		json_object_put(a);
		return ret;
	}
	ca.messages_json = json_object_to_json_string_ext(a, JSON_C_TO_STRING_PLAIN);
	ca.messages_len = strlen(ca.messages_json);
	ca.bos_token = moem_tok_special_str(m->tok, "bos_token");
	ca.eos_token = moem_tok_special_str(m->tok, "eos_token");
	ca.add_generation_prompt = rq->add_generation_prompt;
	ret = moem_chat_render(m->chat, &ca, text, &len);
	json_object_put(a);
	free(extra);
	if (ret == -ENOMEM)
		return ret;
	if (ret)
		return moem_oai_errorf(e, 400, "invalid_request_error", "messages",
				       "the chat template refused the conversation: %s",
				       moem_strerror(ret));
	return 0;
}

int moemd_model_prompt(struct moemd_model *m, const struct moem_oai_request *rq, int32_t **ids,
		       uint32_t *n, struct moem_oai_error *e)
{
	struct moem_tok_ids t = {0};
	uint32_t max_new, k = 0;
	char *text = NULL;
	bool bos;
	int ret;

	*ids = NULL;
	for (uint32_t i = 0; i < rq->n_stop_ids; i++) {
		char p[48];

		snprintf(p, sizeof(p), "stop_token_ids[%u]", i);
		if ((uint32_t)rq->stop_ids[i] >= m->info.vocab_size)
			return moem_oai_errorf(e, 400, "invalid_request_error", p,
					       "token id %d is not in the vocabulary (%u)",
					       rq->stop_ids[i], m->info.vocab_size);
	}
	for (uint32_t i = 0; i < rq->n_bias; i++) {
		char p[48];

		snprintf(p, sizeof(p), "logit_bias.%d", rq->bias_id[i]);
		if ((uint32_t)rq->bias_id[i] >= m->info.vocab_size)
			return moem_oai_errorf(e, 400, "invalid_request_error", p,
					       "token id %d is not in the vocabulary (%u)",
					       rq->bias_id[i], m->info.vocab_size);
	}
	if (rq->ep == MOEM_OAI_CHAT) {
		ret = render_chat(m, rq, &text, e);
		if (ret)
			return ret;
		/* The template wrote the special tokens (BOS included). */
		ret = moem_tok_encode(m->tok, text, strlen(text), 0, &t);
		free(text);
		if (ret) {
			moem_tok_ids_free(&t);
			return moem_oai_errorf(e, 400, "invalid_request_error", "messages", "%s",
					       moem_strerror(ret));
		}
		*ids = malloc((t.n ? t.n : 1) * sizeof(**ids));
		if (!*ids) {
			moem_tok_ids_free(&t);
			return -ENOMEM;
		}
		for (size_t i = 0; i < t.n; i++)
			(*ids)[k++] = (int32_t)t.ids[i];
		*n = k;
		moem_tok_ids_free(&t);
	} else if (rq->n_prompt_ids) {
		*ids = malloc(rq->n_prompt_ids * sizeof(**ids));
		if (!*ids)
			return -ENOMEM;
		for (uint32_t i = 0; i < rq->n_prompt_ids; i++) {
			if ((uint32_t)rq->prompt_ids[i] >= m->info.vocab_size) {
				free(*ids);
				*ids = NULL;
				return moem_oai_errorf(e, 400, "invalid_request_error", "prompt",
						       "token id %d is not in the vocabulary (%u)",
						       rq->prompt_ids[i], m->info.vocab_size);
			}
			(*ids)[i] = rq->prompt_ids[i];
		}
		*n = rq->n_prompt_ids;
	} else {
		ret = moem_tok_encode(m->tok, rq->prompt, strlen(rq->prompt), 0, &t);
		if (ret) {
			moem_tok_ids_free(&t);
			return moem_oai_errorf(e, 400, "invalid_request_error", "prompt", "%s",
					       moem_strerror(ret));
		}
		/* transformers' add_bos_token: a plain prompt starts with BOS. */
		bos = !rq->no_special && m->info.add_bos && m->info.bos_id >= 0 &&
		      !(t.n && t.ids[0] == (uint32_t)m->info.bos_id);
		*ids = malloc((t.n + 1) * sizeof(**ids));
		if (!*ids) {
			moem_tok_ids_free(&t);
			return -ENOMEM;
		}
		if (bos)
			(*ids)[k++] = (int32_t)m->info.bos_id;
		for (size_t i = 0; i < t.n; i++)
			(*ids)[k++] = (int32_t)t.ids[i];
		*n = k;
		moem_tok_ids_free(&t);
	}
	/* Chat without max_tokens runs to the end of the context. */
	max_new = rq->max_tokens ? rq->max_tokens : 1;
	if (!*n || *n >= m->max_context || max_new > m->max_context - *n) {
		free(*ids);
		*ids = NULL;
		/* the prompt alone too long: the fault is not max_tokens */
		ret = moem_oai_errorf(e, 400, "invalid_request_error",
				      *n && *n < m->max_context ? "max_tokens"
				      : rq->ep == MOEM_OAI_CHAT ? "messages"
								: "prompt",
				      "the prompt (%u tokens) and max_tokens (%u) do not fit the "
				      "context of %u tokens",
				      *n, max_new, m->max_context);
		snprintf(e->code, sizeof(e->code), "context_length_exceeded");
		return ret;
	}
	return 0;
}

int moemd_model_detok_new(struct moemd_model *m, void **out)
{
	return moem_tok_stream_new(m->tok, MOEM_TOK_SKIP_SPECIAL, (struct moem_tok_stream **)out);
}

void moemd_model_detok_free(struct moemd_model *m, void *dt)
{
	(void)m;
	moem_tok_stream_free(dt);
}

int moemd_model_detok_push(struct moemd_model *m, void *dt, int32_t id, const char **text,
			   size_t *len)
{
	(void)m;
	return moem_tok_stream_push(dt, (uint32_t)id, text, len);
}

int moemd_model_detok_flush(struct moemd_model *m, void *dt, const char **text, size_t *len)
{
	(void)m;
	return moem_tok_stream_flush(dt, text, len);
}

uint32_t moemd_model_vocab(const struct moemd_model *m)
{
	return m->info.vocab_size;
}

uint32_t moemd_model_context(const struct moemd_model *m)
{
	return m->max_context;
}

char *moemd_model_decode(struct moemd_model *m, const int32_t *ids, uint32_t n, size_t *len)
{
	uint32_t *u = malloc((n ? n : 1) * sizeof(*u));
	char *buf = NULL;

	*len = 0;
	if (!u)
		return NULL;
	for (uint32_t i = 0; i < n; i++)
		u[i] = (uint32_t)ids[i];
	/* ids the tokenizer lacks were refused with the prompt */
	if (moem_tok_decode(m->tok, u, n, MOEM_TOK_SKIP_SPECIAL, &buf, len)) {
		buf = strdup("");
		*len = 0;
	}
	free(u);
	return buf;
}

char *moemd_model_token_text(struct moemd_model *m, int32_t id, size_t *len)
{
	uint32_t u = (uint32_t)id;
	char *buf = NULL;
	size_t n = 0;

	/* its own bytes: the partial character of a multi-token one too */
	if (moem_tok_decode(m->tok, &u, 1, MOEM_TOK_RAW_BYTES, &buf, &n)) {
		/* An id the tokenizer does not have: no text. */
		*len = 0;
		return strdup("");
	}
	*len = n;
	return buf;
}

bool moemd_model_is_eos(struct moemd_model *m, int32_t id)
{
	return moem_tok_is_eos(m->tok, (uint32_t)id);
}

bool moemd_model_kv(struct moemd_model *m, uint64_t *used, uint64_t *budget, uint64_t *seqs)
{
	struct moem_kv_usage u;

	moem_decoder_kv_usage(m->dec, &u);
	*used = u.used_bytes;
	*budget = u.budget_bytes;
	*seqs = u.seqs;
	return true;
}

void moemd_model_prefix(struct moemd_model *m, uint64_t *hit_tokens, uint64_t *cached_bytes)
{
	struct moem_decode_stats st;
	struct moem_kv_usage u;

	moem_decoder_stats(m->dec, &st);
	moem_decoder_kv_usage(m->dec, &u);
	*hit_tokens = st.prefix_tokens;
	*cached_bytes = u.blocks_cached * u.block_bytes;
}

void moemd_model_limits(struct moemd_model *m, uint32_t *seqs, uint32_t *step_tokens)
{
	*seqs = m->max_seqs;
	*step_tokens = m->max_step_tokens;
}

/*
 * A request without max_tokens (chat's default) runs to the end of the
 * context, or of what the KV budget holds for one sequence if that is
 * less: the decoder reserves a sequence's blocks when it starts, so the
 * whole context would be refused under a small kv budget.
 */
static uint32_t default_max_new(struct moemd_model *m, uint32_t prompt_len)
{
	struct moem_kv_usage u;
	uint64_t room = m->max_context - prompt_len, kv;

	moem_decoder_kv_usage(m->dec, &u);
	kv = u.blocks_total * u.block_tokens;
	if (kv > prompt_len && kv - prompt_len < room)
		room = kv - prompt_len;
	return (uint32_t)room;
}

/* Each token's bytes for response_format json_object: built once, on the first use. */
int moemd_model_json_ready(struct moemd_model *m)
{
	uint32_t n = m->info.vocab_size, *off = NULL;
	size_t len = 0, cap = (size_t)n * 4 + 64;
	int32_t *chars = NULL;
	char *bytes = NULL;
	int ret = 0;

	pthread_mutex_lock(&m->json_lock);
	if (m->json_ready)
		goto out;
	off = malloc(((size_t)n + 1) * sizeof(*off));
	chars = malloc((size_t)n * sizeof(*chars));
	bytes = malloc(cap);
	if (!off || !bytes || !chars)
		ret = -ENOMEM;
	for (uint32_t v = 0; !ret && v < n; v++) {
		char *t = NULL;
		size_t tl = 0;

		off[v] = (uint32_t)len;
		/* a special token has no text in the answer: it cannot be in the JSON */
		if (moem_tok_decode(m->tok, &v, 1, MOEM_TOK_RAW_BYTES | MOEM_TOK_SKIP_SPECIAL, &t,
				    &tl))
			tl = 0;
		if (len + tl > cap || len + tl > UINT32_MAX) {
			char *b = len + tl > UINT32_MAX ? NULL : realloc(bytes, (len + tl) * 2);

			if (!b)
				ret = -ENOMEM;
			else
				bytes = b, cap = (len + tl) * 2;
		}
		if (!ret && tl)
			memcpy(bytes + len, t, tl);
		if (!ret) {
			int64_t c = tl ? moem_json_fsm_text_chars(t, tl) : -1;

			chars[v] = c < 0 || c > INT32_MAX ? -1 : (int32_t)c;
		}
		len += ret ? 0 : tl;
		free(t);
	}
	if (!ret) {
		off[n] = (uint32_t)len;
		m->json_off = off;
		m->json_bytes = bytes;
		m->json_chars = chars;
		m->json_n = n;
		m->json_ready = true;
		off = NULL;
		bytes = NULL;
		chars = NULL;
	}
out:
	pthread_mutex_unlock(&m->json_lock);
	free(off);
	free(bytes);
	free(chars);
	return ret;
}

/* Worker thread: leave only the ids whose bytes can continue r's JSON. */
static void json_mask(void *arg, float *logits, uint32_t vocab)
{
	struct moemd_sreq *r = arg;
	struct moemd_model *m = r->srv->model;
	uint32_t allowed = 0;
	bool first[256];
	int64_t room;

	if (r->json_stuck)
		return;
	if (m->json_allow_n < vocab) {
		uint8_t *a = realloc(m->json_allow, vocab);

		if (!a) {
			r->json_stuck = true;
			return;
		}
		m->json_allow = a;
		m->json_allow_n = vocab;
	}
	/*
	 * Which first bytes can go on at all (most tokens fail at their
	 * first), and, inside a string's text, how many characters may come:
	 * a token of plain text then needs no feeding (json_fsm.h).
	 */
	for (int b = 0; b < 256; b++) {
		struct moem_json_fsm f;
		char c = (char)b;

		moem_json_fsm_copy(&f, &r->json_fsm);
		first[b] = !moem_json_fsm_feed(&f, &c, 1);
	}
	room = moem_json_fsm_text_room(&r->json_fsm);
	for (uint32_t v = 0; v < vocab; v++) {
		struct moem_json_fsm f;
		uint32_t n = v < m->json_n ? m->json_off[v + 1] - m->json_off[v] : 0;

		m->json_allow[v] = 0;
		if (!n || !isfinite(logits[v]) ||
		    !first[(unsigned char)m->json_bytes[m->json_off[v]]])
			continue;
		if (room >= 0 && m->json_chars[v] >= 0) {
			m->json_allow[v] = m->json_chars[v] <= room;
		} else {
			moem_json_fsm_copy(&f, &r->json_fsm);
			m->json_allow[v] =
				!moem_json_fsm_feed(&f, m->json_bytes + m->json_off[v], n);
		}
		allowed += m->json_allow[v];
	}
	if (!allowed) {
		/* No token of this vocabulary goes on: the answer ends here. */
		r->json_stuck = true;
		return;
	}
	for (uint32_t v = 0; v < vocab; v++)
		if (!m->json_allow[v])
			logits[v] = -INFINITY;
}

static void json_accept(void *arg, int32_t id)
{
	struct moemd_sreq *r = arg;
	struct moemd_model *m = r->srv->model;
	uint32_t v = (uint32_t)id;

	if (r->json_stuck)
		return;
	if (v >= m->json_n || moem_json_fsm_feed(&r->json_fsm, m->json_bytes + m->json_off[v],
						 m->json_off[v + 1] - m->json_off[v]))
		r->json_stuck = true;
}

static const struct moem_constraint_ops json_ops = {.mask = json_mask, .accept = json_accept};

static int m_start(void *be, void *req, uint32_t prompt_len, uint64_t *seq, uint32_t *cached)
{
	struct moemd_model *m = be;
	struct moemd_sreq *r = req;
	const struct moem_oai_request *rq = &r->rq;
	struct moem_seq_params p = {0};
	uint32_t left;
	int ret;

	/*
	 * The other choices of an n > 1 request start once the first has
	 * prefilled the prompt they share, and take its whole blocks from the
	 * prefix cache instead of computing the prompt n times (-EAGAIN: not
	 * now, the scheduler retries it first at the next step).
	 */
	if (r->lead && m->block_tokens && prompt_len > m->block_tokens && r->lead->started &&
	    !moem_decoder_pending_prompt(m->dec, r->lead->seq, &left) && left)
		return -EAGAIN;
	p.prompt = r->prompt;
	p.n_prompt = prompt_len;
	moem_sampling_defaults(&p.sampling);
	p.sampling.temperature = (float)rq->temperature;
	p.sampling.top_k = rq->top_k > 0 ? (uint32_t)rq->top_k : 0;
	p.sampling.top_p = (float)rq->top_p;
	p.sampling.min_p = (float)rq->min_p;
	p.sampling.repetition_penalty = (float)rq->repetition_penalty;
	p.sampling.presence_penalty = (float)rq->presence_penalty;
	p.sampling.frequency_penalty = (float)rq->frequency_penalty;
	/* Without a seed each request draws its own. */
	p.sampling.seed = rq->has_seed ? rq->seed : 0x9e3779b97f4a7c15ULL * ++m->next_seed;
	p.max_new_tokens = rq->max_tokens ? rq->max_tokens : default_max_new(m, prompt_len);
	p.model_eos = !rq->ignore_eos;
	/* stop_token_ids end it as an end-of-sequence id would (checked by the prompt) */
	for (uint32_t i = 0; i < rq->n_stop_ids && p.n_eos < MOEM_DECODE_MAX_EOS; i++)
		p.eos[p.n_eos++] = rq->stop_ids[i];
	p.min_new_tokens = moem_min(rq->min_tokens, p.max_new_tokens);
	p.top_logprobs =
		rq->logprobs ? moem_min(rq->top_logprobs, MOEM_DECODE_MAX_TOP_LOGPROBS) : 0;
	p.n_bias = moem_min(rq->n_bias, MOEM_DECODE_MAX_BIAS);
	/* only ids with text: not a padded vocab_size's last rows */
	p.n_vocab = moem_min(m->info.vocab_size, m->model_vocab);
	memcpy(p.bias_id, rq->bias_id, p.n_bias * sizeof(*p.bias_id));
	memcpy(p.bias, rq->bias, p.n_bias * sizeof(*p.bias));
	if (rq->echo && rq->logprobs) {
		/* the prompt's logprobs: every position's logits, as the prefill runs */
		ret = moemd_serve_echo_tokens(r, r->prompt, prompt_len);
		if (ret)
			return ret;
		p.logits_fn = moemd_serve_prompt_logits;
		p.logits_arg = r;
	}
	if (r->json) {
		moem_json_fsm_init(&r->json_fsm, r->rq.json_schema);
		p.constraint = &json_ops;
		p.constraint_arg = r;
	}
	ret = moem_decoder_add(m->dec, &p, seq);
	if (ret == -EFBIG && !rq->max_tokens) {
		/* a kv budget change that call applied: the room it leaves */
		uint32_t room = default_max_new(m, prompt_len);

		if (room < p.max_new_tokens) {
			p.max_new_tokens = room;
			ret = moem_decoder_add(m->dec, &p, seq);
		}
	}
	if (!ret && !moem_decoder_cached_prompt(m->dec, *seq, cached))
		r->n_cached = *cached;
	if (!ret) {
		r->seq = *seq;
		r->started = true;
	}
	return ret;
}

static int m_step(void *be, const struct moem_sched_item *it, uint32_t n,
		  struct moem_sched_out *out)
{
	struct moemd_model *m = be;
	struct moem_token_out *o;
	struct moem_work *w;
	int ret;

	w = calloc(n, sizeof(*w));
	o = calloc(n, sizeof(*o));
	if (!w || !o) {
		free(w);
		free(o);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		w[i].seq = it[i].seq;
		w[i].kind = it[i].decode ? MOEM_WORK_DECODE : MOEM_WORK_PREFILL;
		w[i].n_tokens = it[i].decode ? 1 : it[i].n;
	}
	ret = moem_decoder_step(m->dec, w, n, o, NULL);
	for (uint32_t i = 0; !ret && i < n; i++) {
		out[i].token = o[i].token;
		out[i].logprob = o[i].logprob;
		out[i].n_top = moem_min(o[i].n_top, (uint32_t)MOEM_SCHED_TOP_MAX);
		for (uint32_t k = 0; k < out[i].n_top; k++) {
			out[i].top_id[k] = o[i].top_ids[k];
			out[i].top_logprob[k] = o[i].top_logprobs[k];
		}
		switch (o[i].finish) {
		case MOEM_FINISH_EOS:
		case MOEM_FINISH_STOP:
		case MOEM_FINISH_CANCELLED: /* gone: end it here */
			out[i].finish = MOEM_SCHED_STOP;
			break;
		case MOEM_FINISH_LENGTH:
			out[i].finish = MOEM_SCHED_LENGTH;
			break;
		default:
			out[i].finish = MOEM_SCHED_RUNNING;
			break;
		}
	}
	free(w);
	free(o);
	return ret;
}

static void m_end(void *be, uint64_t seq)
{
	struct moemd_model *m = be;
	struct moem_err_saved why;

	/* A sequence the decoder finished is gone already (-ENOENT): that
	 * must not replace the reason a failed step ends it for. */
	moem_error_save(&why);
	moem_decoder_cancel(m->dec, seq);
	moem_error_restore(&why);
}

const struct moem_sched_ops moemd_model_ops = {
	.start = m_start,
	.step = m_step,
	.end = m_end,
};
