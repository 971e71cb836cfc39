// SPDX-License-Identifier: GPL-2.0-only
/* Text generation behind moem generate and moem chat (gen_util.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/pack.h>
#include <moem/synth.h>
#include <moem/util.h>

#include "gen_util.h"

static const char *const opt_names[MOEM_GEN_N_OPTS] = {
	"pack",
	"hbm",
	"dram",
	"precisions",
	"fallback",
	"route",
	"evict",
	"prefetch",
	"precision",
	"paging",
	"backend",
	"threads",
	"pool",
	"dram-nodes",
	"link-gbps",
	"exec",
	"cpu-moe-layers",
	"cpu-gbps",
	"cpu-token-ns",
	"cpu-call-ns",
	"place",
	"calibration",
	"cpu-threads",
	"loader",
	"no-verify",
	"no-cuda-graphs",
	"max-new",
	"temperature",
	"top-k",
	"top-p",
	"min-p",
	"seed",
	"repetition-penalty",
	"presence-penalty",
	"frequency-penalty",
	"stop",
	"stop-ids",
	"eos",
	"no-model-eos",
	"logprobs",
	"kv-bytes",
	"kv-block",
	"dense-prec",
	"prefill-chunk",
	"no-warmup",
	"special",
	"json",
	"json-stream",
	"quiet",
};

/* Options without an argument. */
static bool is_flag(const char *name)
{
	static const char *const flags[] = {"fallback",	    "no-verify",   "no-cuda-graphs",
					    "no-model-eos", "no-warmup",   "special",
					    "json",	    "json-stream", "quiet"};

	for (size_t i = 0; i < MOEM_ARRAY_SIZE(flags); i++)
		if (!strcmp(name, flags[i]))
			return true;
	return false;
}

void moem_gen_options(struct option *out)
{
	for (size_t i = 0; i < MOEM_GEN_N_OPTS; i++)
		out[i] = (struct option){opt_names[i],
					 is_flag(opt_names[i]) ? no_argument : required_argument,
					 NULL, 0};
}

void moem_gen_init(struct moem_gen *g)
{
	memset(g, 0, sizeof(*g));
	moem_dec_run_init(&g->r);
	g->r.sp.max_new_tokens = 128;
}

void moem_gen_free(struct moem_gen *g)
{
	moem_dec_run_free(&g->r);
	moem_tok_free(g->tok);
	moem_pack_close(g->pk);
	for (uint32_t i = 0; i < g->n_stops; i++)
		free(g->stops[i]);
	memset(g, 0, sizeof(*g));
}

int moem_gen_set(struct moem_gen *g, const char *name, const char *v)
{
	if (!strcmp(name, "stop")) {
		if (g->n_stops == MOEM_TEXT_STOP_MAX)
			return moem_errf(EINVAL, "at most %d --stop strings", MOEM_TEXT_STOP_MAX);
		if (!*v)
			return moem_errf(EINVAL, "--stop: the string is empty");
		g->stops[g->n_stops] = strdup(v);
		if (!g->stops[g->n_stops])
			return -ENOMEM;
		g->n_stops++;
		return 0;
	}
	if (!strcmp(name, "stop-ids"))
		return moem_dec_run_set(&g->r, "stop", v);
	if (!strcmp(name, "special")) {
		g->special = true;
		return 0;
	}
	if (!strcmp(name, "json-stream")) {
		g->json_stream = true;
		return moem_dec_run_set(&g->r, "json", v);
	}
	return moem_dec_run_set(&g->r, name, v);
}

/* The tokenizer's end-of-turn ids (eos_token and generation_config's) join --eos. */
static void add_tok_eos(struct moem_gen *g)
{
	struct moem_seq_params *sp = &g->r.sp;
	uint32_t id;
	bool special;

	for (size_t i = 0;; i++) {
		int64_t cand;
		bool have = false;

		if (i == 0) {
			cand = g->ti.eos_id;
		} else {
			if (!moem_tok_added(g->tok, i - 1, &id, &special))
				break;
			if (!special || !moem_tok_is_eos(g->tok, id))
				continue;
			cand = id;
		}
		if (cand < 0 || cand >= g->vocab)
			continue;
		for (uint32_t k = 0; k < sp->n_eos; k++)
			have = have || sp->eos[k] == cand;
		if (!have && sp->n_eos < MOEM_DECODE_MAX_EOS)
			sp->eos[sp->n_eos++] = (int32_t)cand;
	}
}

int moem_gen_open(struct moem_gen *g)
{
	struct moem_synth_params sp;
	int ret;

	if (!g->r.ea.o.pack_path)
		return moem_errf(EINVAL, "--pack is required");
	ret = moem_pack_open(g->r.ea.o.pack_path, &g->pk);
	if (!ret)
		ret = moem_tok_load_pack(&g->tok, g->pk);
	if (ret)
		return ret;
	moem_tok_info(g->tok, &g->ti);
	g->vocab = moem_pack_config(g->pk)->vocab;
	g->synthetic = moem_pack_synth(g->pk, &sp) == 0;
	if (g->ti.vocab_size > g->vocab)
		return moem_errf(EINVAL,
				 "%s: the tokenizer has %u ids but the model only %u: they do not "
				 "belong together",
				 g->r.ea.o.pack_path, g->ti.vocab_size, g->vocab);
	if (g->r.sp.model_eos)
		add_tok_eos(g);
	/* ids past the tokenizer's (a padded vocab_size) have no text: never sampled */
	g->r.sp.n_vocab = g->ti.vocab_size;
	return moem_dec_run_open(&g->r);
}

int moem_gen_encode(struct moem_gen *g, const char *text, size_t len, bool add_special,
		    int32_t **ids, uint32_t *n)
{
	struct moem_tok_ids v = {0};
	bool bos = add_special && g->ti.add_bos && !g->ti.post_bos && g->ti.bos_id >= 0;
	int ret = 0;

	*ids = NULL;
	*n = 0;
	if (bos) {
		v.ids = malloc(sizeof(*v.ids) * 16);
		if (!v.ids)
			return -ENOMEM;
		v.ids[v.n++] = (uint32_t)g->ti.bos_id;
		v.cap = 16;
	}
	if (!ret)
		ret = moem_tok_encode(g->tok, text, len, add_special ? MOEM_TOK_ADD_SPECIAL : 0,
				      &v);
	if (!ret && !v.n)
		ret = moem_errf(EINVAL, "the prompt is empty (it encodes to no tokens)");
	if (!ret && v.n > UINT32_MAX)
		ret = moem_errf(E2BIG, "the prompt has %zu tokens", v.n);
	if (ret) {
		moem_tok_ids_free(&v);
		return ret;
	}
	/* The decoder takes int32 ids; the tokenizer's are below vocab < 2^31. */
	*ids = (int32_t *)v.ids;
	*n = (uint32_t)v.n;
	return 0;
}

void moem_gen_out_free(struct moem_gen_out *o)
{
	free(o->prompt);
	free(o->toks);
	free(o->lp);
	free(o->top_ids);
	free(o->top_lp);
	free(o->text);
	memset(o, 0, sizeof(*o));
}

static int keep_token(struct moem_gen_out *o, const struct moem_token_out *t, uint32_t top)
{
	uint32_t k = top ? top : 1;

	if (o->n == o->cap) {
		uint32_t cap = o->cap ? 2 * o->cap : 64;
		int32_t *a = realloc(o->toks, sizeof(*a) * cap);
		float *b = a ? realloc(o->lp, sizeof(*b) * cap) : NULL;
		int32_t *c = b ? realloc(o->top_ids, sizeof(*c) * cap * k) : NULL;
		float *d = c ? realloc(o->top_lp, sizeof(*d) * cap * k) : NULL;

		if (a)
			o->toks = a;
		if (b)
			o->lp = b;
		if (c)
			o->top_ids = c;
		if (!d)
			return -ENOMEM;
		o->top_lp = d;
		o->cap = cap;
	}
	o->toks[o->n] = t->token;
	o->lp[o->n] = t->logprob;
	for (uint32_t i = 0; i < top; i++) {
		o->top_ids[o->n * top + i] = i < t->n_top ? t->top_ids[i] : -1;
		o->top_lp[o->n * top + i] = i < t->n_top ? t->top_logprobs[i] : 0;
	}
	o->n++;
	return 0;
}

/* Show text: append it to o->text and write it to stream at once. */
static int show(const struct moem_gen *g, struct moem_gen_out *o, FILE *stream, const char *s,
		size_t len)
{
	int bad = 0;

	if (!len)
		return 0;
	if (o->len + len + 1 > o->text_cap) {
		size_t cap = (o->len + len + 1) * 2;
		char *t = realloc(o->text, cap);

		if (!t)
			return -ENOMEM;
		o->text = t;
		o->text_cap = cap;
	}
	memcpy(o->text + o->len, s, len);
	o->len += len;
	o->text[o->len] = 0;
	if (stream && g->json_stream) {
		struct json_object *j = json_object_new_object();

		json_object_object_add(j, "text", json_object_new_string_len(s, (int)len));
		bad = fprintf(stream, "%s\n",
			      json_object_to_json_string_ext(
				      j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)) <
		      0;
		json_object_put(j);
	} else if (stream) {
		bad = fwrite(s, 1, len, stream) != len;
	}
	if (stream && (bad || fflush(stream)))
		return moem_errf(EIO, "writing the text: %s", strerror(errno));
	return 0;
}

/* Text from the streaming decoder goes through the stop matcher; 1 once a stop matched. */
static int pass(const struct moem_gen *g, struct moem_text_stop *sm, struct moem_gen_out *o,
		FILE *stream, const char *s, size_t len)
{
	const char *out;
	size_t olen;
	int m = moem_text_stop_feed(sm, s, len, &out, &olen);
	int ret = m < 0 ? m : show(g, o, stream, out, olen);

	return ret ? ret : m;
}

/* The end of the text: what the streaming decoder and the matcher still hold. */
static int finish_text(const struct moem_gen *g, struct moem_tok_stream *ts,
		       struct moem_text_stop *sm, struct moem_gen_out *o, FILE *stream)
{
	const char *s;
	size_t len;
	int ret = moem_tok_stream_flush(ts, &s, &len);

	if (!ret)
		ret = pass(g, sm, o, stream, s, len);
	if (ret == 1) {
		o->finish = MOEM_FINISH_STOP;
		o->stop = moem_text_stop_matched(sm);
		return 0;
	}
	if (!ret) {
		moem_text_stop_flush(sm, &s, &len);
		ret = show(g, o, stream, s, len);
	}
	return ret;
}

int moem_gen_run(struct moem_gen *g, const int32_t *prompt, uint32_t n, FILE *stream,
		 struct moem_gen_out *o)
{
	struct moem_seq_params p = g->r.sp;
	struct moem_tok_stream *ts = NULL;
	struct moem_text_stop *sm = NULL;
	uint32_t top = p.top_logprobs;
	bool added = false;
	uint64_t id = 0;
	int ret;

	moem_gen_out_free(o);
	o->stop = -1;
	o->n_prompt = n;
	o->prompt = malloc(sizeof(*o->prompt) * (n ? n : 1));
	if (!o->prompt)
		return -ENOMEM;
	memcpy(o->prompt, prompt, sizeof(*prompt) * n);
	p.prompt = prompt;
	p.n_prompt = n;
	ret = moem_tok_stream_new(g->tok, g->special ? 0 : MOEM_TOK_SKIP_SPECIAL, &ts);
	if (!ret)
		ret = moem_text_stop_new((const char *const *)g->stops, NULL, g->n_stops, 0, &sm);
	o->t_start = moem_now_ns();
	if (!ret)
		ret = moem_decoder_add(g->r.d, &p, &id);
	added = !ret;
	while (!ret) {
		struct moem_work w = {.seq = id, .kind = MOEM_WORK_DECODE};
		struct moem_token_out t;
		struct moem_decode_stats st;
		uint32_t left = 0;

		moem_decoder_pending_prompt(g->r.d, id, &left);
		if (left) {
			w.kind = MOEM_WORK_PREFILL;
			w.n_tokens = moem_min(left, g->r.chunk ? g->r.chunk : 512u);
		}
		ret = moem_decoder_step(g->r.d, &w, 1, &t, &st);
		if (ret)
			break;
		moem_decode_stats_add(&o->st, &st);
		if (t.finish)
			added = false; /* the decoder has let it go */
		if (t.token >= 0) {
			if (!o->n)
				o->t_first = moem_now_ns();
			ret = keep_token(o, &t, top);
			/*
			 * An end-of-sequence token is not text; an id the tokenizer
			 * lacks (a model vocabulary padded past it) decodes to
			 * nothing, as in tokenizers.
			 */
			if (!ret && t.finish != MOEM_FINISH_EOS &&
			    moem_tok_id_to_token(g->tok, (uint32_t)t.token, NULL)) {
				const char *s;
				size_t len;

				ret = moem_tok_stream_push(ts, (uint32_t)t.token, &s, &len);
				if (!ret)
					ret = pass(g, sm, o, stream, s, len);
			}
			if (ret == 1) { /* a stop string: the sequence ends here */
				o->finish = MOEM_FINISH_STOP;
				o->stop = moem_text_stop_matched(sm);
				ret = 0;
				break;
			}
		}
		if (!ret && t.finish) {
			o->finish = t.finish;
			ret = finish_text(g, ts, sm, o, stream);
			break;
		}
	}
	if (added)
		moem_decoder_cancel(g->r.d, id);
	o->t_end = moem_now_ns();
	moem_tok_stream_free(ts);
	moem_text_stop_free(sm);
	if (!ret && !o->text) {
		o->text = strdup("");
		ret = o->text ? 0 : -ENOMEM;
	}
	return ret;
}

static double ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

static double decode_tps(const struct moem_gen_out *o)
{
	double s = o->n > 1 ? (double)(o->t_end - o->t_first) / 1e9 : 0;

	return s > 0 ? (double)(o->n - 1) / s : 0;
}

struct json_object *moem_gen_json(const struct moem_gen *g, const struct moem_gen_out *o)
{
	struct json_object *j = json_object_new_object(), *tk = json_object_new_array();
	struct json_object *lp = json_object_new_array(), *t = json_object_new_object();
	uint32_t top = g->r.sp.top_logprobs;
	struct moem_engine_status es;

	json_object_object_add(j, "text", json_object_new_string_len(o->text, (int)o->len));
	json_object_object_add(j, "finish", json_object_new_string(moem_finish_name(o->finish)));
	json_object_object_add(j, "stop",
			       o->stop >= 0 ? json_object_new_string(g->stops[o->stop]) : NULL);
	for (uint32_t i = 0; i < o->n; i++) {
		json_object_array_add(tk, json_object_new_int(o->toks[i]));
		json_object_array_add(lp, json_object_new_double(o->lp[i]));
	}
	json_object_object_add(j, "tokens", tk);
	json_object_object_add(j, "logprobs", lp);
	if (top) {
		struct json_object *tl = json_object_new_array();

		for (uint32_t i = 0; i < o->n; i++) {
			struct json_object *alt = json_object_new_array();

			for (uint32_t k = 0; k < top; k++) {
				struct json_object *pr = json_object_new_array();

				json_object_array_add(pr,
						      json_object_new_int(o->top_ids[i * top + k]));
				json_object_array_add(
					pr, json_object_new_double(o->top_lp[i * top + k]));
				json_object_array_add(alt, pr);
			}
			json_object_array_add(tl, alt);
		}
		json_object_object_add(j, "top_logprobs", tl);
	}
	tk = json_object_new_array();
	for (uint32_t i = 0; i < o->n_prompt; i++)
		json_object_array_add(tk, json_object_new_int(o->prompt[i]));
	json_object_object_add(j, "prompt_ids", tk);
	json_object_object_add(j, "prompt_tokens", json_object_new_uint64(o->n_prompt));
	json_object_object_add(j, "generated_tokens", json_object_new_uint64(o->n));
	json_object_object_add(j, "ttft_ms",
			       json_object_new_double(o->n ? ms(o->t_first - o->t_start) : 0));
	json_object_object_add(j, "decode_tokens_per_s", json_object_new_double(decode_tps(o)));
	json_object_object_add(j, "steps", json_object_new_uint64(o->st.steps));
	json_object_object_add(t, "total_ms", json_object_new_double(ms(o->t_end - o->t_start)));
	json_object_object_add(t, "steps_ms", json_object_new_double(ms(o->st.step_ns)));
	json_object_object_add(t, "attention_ms", json_object_new_double(ms(o->st.attn_ns)));
	json_object_object_add(t, "moe_ms", json_object_new_double(ms(o->st.moe_ns)));
	json_object_object_add(t, "waiting_ms", json_object_new_double(ms(o->st.wait_ns)));
	json_object_object_add(t, "head_ms", json_object_new_double(ms(o->st.head_ns)));
	json_object_object_add(t, "device_ms", json_object_new_double(ms(o->st.device_ns)));
	json_object_object_add(j, "time", t);
	json_object_object_add(j, "hits", json_object_new_uint64(o->st.hits));
	json_object_object_add(j, "misses", json_object_new_uint64(o->st.misses));
	json_object_object_add(j, "fallbacks", json_object_new_uint64(o->st.fallbacks));
	json_object_object_add(j, "cpu_experts", json_object_new_uint64(o->st.cpu_experts));
	json_object_object_add(j, "bytes_nvme", json_object_new_uint64(o->st.bytes_nvme));
	json_object_object_add(j, "bytes_h2d", json_object_new_uint64(o->st.bytes_h2d));
	moem_engine_get_status(g->r.e, &es);
	json_object_object_add(j, "backend", json_object_new_string(es.backend));
	json_object_object_add(j, "synthetic", json_object_new_boolean(g->synthetic));
	return j;
}

void moem_gen_summary(const struct moem_gen *g, const struct moem_gen_out *o, const char *cmd)
{
	fprintf(stderr,
		"moem %s: %u prompt tokens, %u generated (%s); first token after %.1f ms; %.1f "
		"tokens/s decoding%s\n",
		cmd, o->n_prompt, o->n, moem_finish_name(o->finish),
		o->n ? ms(o->t_first - o->t_start) : 0.0, decode_tps(o),
		g->synthetic ? "; synthetic model: the text is gibberish" : "");
}
