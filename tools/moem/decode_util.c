// SPDX-License-Identifier: GPL-2.0-only
/* The decode runner behind moem decode and moem eval (decode_util.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/log.h>
#include <moem/pack.h>
#include <moem/util.h>

#include "decode_util.h"

void moem_dec_run_init(struct moem_dec_run *r)
{
	memset(r, 0, sizeof(*r));
	moem_engine_args_init(&r->ea);
	moem_sampling_defaults(&r->sp.sampling);
	r->sp.max_new_tokens = 16;
	r->sp.model_eos = true;
}

void moem_dec_run_free(struct moem_dec_run *r)
{
	moem_decoder_close(r->d);
	moem_engine_close(r->e);
	for (uint32_t i = 0; i < r->n_seqs; i++) {
		free(r->seqs[i].prompt);
		free(r->seqs[i].toks);
		free(r->seqs[i].lp);
		free(r->seqs[i].top_ids);
		free(r->seqs[i].top_lp);
	}
	free(r->seqs);
	free(r->dec_step_ns);
	if (r->logits_f) {
		/* not committed: the run failed, the old file (if any) stays */
		fclose(r->logits_f);
		unlink(r->logits_tmp);
	}
	free(r->logits_tmp);
	free(r->logits_out);
	moem_engine_args_free(&r->ea);
}

int moem_dec_run_logits_commit(struct moem_dec_run *r)
{
	FILE *f = r->logits_f;
	int ret = 0;

	if (!f)
		return 0;
	r->logits_f = NULL;
	/* every fwrite() of the run is checked here: the stream keeps its error */
	if (fflush(f) || ferror(f) || fsync(fileno(f)))
		ret = moem_errf(errno ? errno : EIO, "--logits-out %s: %s", r->logits_out,
				strerror(errno ? errno : EIO));
	if (fclose(f) && !ret)
		ret = moem_errf(errno, "--logits-out %s: %s", r->logits_out, strerror(errno));
	if (!ret && rename(r->logits_tmp, r->logits_out))
		ret = moem_errf(errno, "--logits-out %s: %s", r->logits_out, strerror(errno));
	if (ret)
		unlink(r->logits_tmp);
	return ret;
}

int moem_parse_ids(const char *s, int32_t **ids, uint32_t *n)
{
	uint32_t cap = 16, k = 0;
	int32_t *v = malloc(sizeof(*v) * cap);
	const char *p = s;

	if (!v)
		return -ENOMEM;
	while (*p) {
		char *end;
		long x = strtol(p, &end, 10);

		if (end == p || x < INT32_MIN || x > INT32_MAX || (*end && *end != ',')) {
			free(v);
			return moem_errf(EINVAL,
					 "token list \"%.40s\": want ids separated by commas", s);
		}
		if (k == cap) {
			int32_t *nv = realloc(v, sizeof(*v) * (cap *= 2));

			if (!nv) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
		}
		v[k++] = (int32_t)x;
		p = *end ? end + 1 : end;
	}
	*ids = v;
	*n = k;
	return 0;
}

int moem_dec_run_add_prompt(struct moem_dec_run *r, const int32_t *ids, uint32_t n)
{
	struct moem_dec_seq_out *ns = realloc(r->seqs, sizeof(*ns) * (r->n_seqs + 1));

	if (!ns)
		return -ENOMEM;
	r->seqs = ns;
	memset(&ns[r->n_seqs], 0, sizeof(*ns));
	ns[r->n_seqs].prompt = malloc(sizeof(int32_t) * (n ? n : 1));
	if (!ns[r->n_seqs].prompt)
		return -ENOMEM;
	memcpy(ns[r->n_seqs].prompt, ids, sizeof(int32_t) * n);
	ns[r->n_seqs].n_prompt = n;
	r->n_seqs++;
	return 0;
}

static int num_f(const char *name, const char *v, float *out)
{
	char *end;
	double x = strtod(v, &end);

	if (end == v || *end)
		return moem_errf(EINVAL, "--%s: \"%s\" is not a number", name, v);
	*out = (float)x;
	return 0;
}

static int num_u(const char *name, const char *v, uint64_t max, uint32_t *out)
{
	char *end;
	unsigned long long x = strtoull(v, &end, 10);

	if (end == v || *end || x > max || *v == '-')
		return moem_errf(EINVAL, "--%s: \"%s\" is not a count 0..%llu", name, v,
				 (unsigned long long)max);
	*out = (uint32_t)x;
	return 0;
}

static int id_list(const char *name, const char *v, int32_t *out, uint32_t max, uint32_t *n)
{
	int32_t *ids;
	uint32_t k;
	int ret = moem_parse_ids(v, &ids, &k);

	if (ret)
		return ret;
	if (!k || k > max) {
		free(ids);
		return moem_errf(EINVAL, "--%s: 1..%u ids", name, max);
	}
	memcpy(out, ids, sizeof(int32_t) * k);
	*n = k;
	free(ids);
	return 0;
}

int moem_dec_run_set(struct moem_dec_run *r, const char *name, const char *v)
{
	struct moem_sampling *s = &r->sp.sampling;
	int ret;

	/* The sampler's seed: the engine arguments' "seed" is moem run's workload. */
	if (!strcmp(name, "seed")) {
		char *end;

		s->seed = strtoull(v, &end, 0);
		return end == v || *end ? moem_errf(EINVAL, "--seed: \"%s\"", v) : 0;
	}
	ret = moem_engine_args_set(&r->ea, name, v);
	if (ret != -ENOENT)
		return ret;
	if (!strcmp(name, "tokens")) {
		int32_t *ids;
		uint32_t n;

		ret = moem_parse_ids(v, &ids, &n);
		if (ret)
			return ret;
		ret = moem_dec_run_add_prompt(r, ids, n);
		free(ids);
		return ret;
	}
	if (!strcmp(name, "max-new")) {
		ret = num_u(name, v, 1u << 24, &r->sp.max_new_tokens);
		if (!ret && !r->sp.max_new_tokens)
			ret = moem_errf(EINVAL, "--max-new 0: at least one token (1..%u)",
					1u << 24);
		return ret;
	}
	if (!strcmp(name, "temperature"))
		return num_f(name, v, &s->temperature);
	if (!strcmp(name, "top-k"))
		return num_u(name, v, 1u << 24, &s->top_k);
	if (!strcmp(name, "top-p"))
		return num_f(name, v, &s->top_p);
	if (!strcmp(name, "min-p"))
		return num_f(name, v, &s->min_p);
	if (!strcmp(name, "repetition-penalty"))
		return num_f(name, v, &s->repetition_penalty);
	if (!strcmp(name, "presence-penalty"))
		return num_f(name, v, &s->presence_penalty);
	if (!strcmp(name, "frequency-penalty"))
		return num_f(name, v, &s->frequency_penalty);
	if (!strcmp(name, "stop")) {
		if (r->sp.n_stop == MOEM_DECODE_MAX_STOP)
			return moem_errf(EINVAL, "at most %d --stop sequences",
					 MOEM_DECODE_MAX_STOP);
		ret = id_list(name, v, r->sp.stop[r->sp.n_stop], MOEM_DECODE_MAX_STOP_LEN,
			      &r->sp.stop_len[r->sp.n_stop]);
		if (!ret)
			r->sp.n_stop++;
		return ret;
	}
	if (!strcmp(name, "eos"))
		return id_list(name, v, r->sp.eos, MOEM_DECODE_MAX_EOS, &r->sp.n_eos);
	if (!strcmp(name, "no-model-eos")) {
		r->sp.model_eos = false;
		return 0;
	}
	if (!strcmp(name, "logprobs"))
		return num_u(name, v, MOEM_DECODE_MAX_TOP_LOGPROBS, &r->sp.top_logprobs);
	if (!strcmp(name, "logits-out")) {
		free(r->logits_out);
		r->logits_out = strdup(v);
		return r->logits_out ? 0 : -ENOMEM;
	}
	if (!strcmp(name, "kv-bytes"))
		return moem_parse_size(v, NULL, &r->dopt.kv_bytes);
	if (!strcmp(name, "kv-block"))
		return num_u(name, v, 1024, &r->dopt.block_tokens);
	if (!strcmp(name, "dense-prec")) {
		ret = moem_prec_parse(v, &r->dopt.dense_prec);
		return ret ? moem_err_prefix(-ret, "--dense-prec") : 0;
	}
	if (!strcmp(name, "max-seqs"))
		return num_u(name, v, 1024, &r->dopt.max_seqs);
	if (!strcmp(name, "no-prefix-cache")) {
		r->dopt.prefix_cache_off = true;
		return 0;
	}
	if (!strcmp(name, "prefill-chunk")) {
		r->chunk_set = true;
		return num_u(name, v, 4096, &r->chunk);
	}
	if (!strcmp(name, "no-warmup")) {
		r->no_warmup = true;
		return 0;
	}
	if (!strcmp(name, "json")) {
		r->json = true;
		return 0;
	}
	if (!strcmp(name, "quiet")) {
		r->quiet = true;
		return 0;
	}
	return moem_errf(EINVAL, "unknown option --%s", name);
}

/* --logits-out: "MOEMLGT1", u32 vocab, then per row u32 seq, u32 pos, f32[vocab]. */
static void write_logits(void *arg, uint64_t seq, uint32_t pos, const float *l, uint32_t V)
{
	struct moem_dec_run *r = arg;
	uint32_t hdr[2] = {0, pos};

	for (uint32_t i = 0; i < r->n_seqs; i++)
		if (r->seqs[i].added && r->seqs[i].id == seq)
			hdr[0] = i;
	fwrite(hdr, sizeof(hdr), 1, r->logits_f);
	fwrite(l, sizeof(float), V, r->logits_f);
}

/*
 * A run whose prompts are all known before the decoder opens (moem decode,
 * moem eval) sizes the KV pool for them unless the user sized it (--kv-bytes,
 * --max-seqs, the engine's kv setting): the decoder's default, 64 sequences
 * of the model's whole context, is a server's, and on the CUDA backend the
 * pool comes out of the HBM budget, so it took up to half the experts' room
 * for blocks no sequence would use.
 */
static int size_for_prompts(struct moem_dec_run *r)
{
	struct moem_pack *pk;
	uint64_t need = 2;
	uint32_t max_pos;
	int ret;

	if (!r->n_seqs || r->dopt.kv_bytes || r->dopt.max_seqs || r->dopt.max_context ||
	    r->ea.o.kv_budget)
		return 0;
	ret = moem_pack_open(r->ea.o.pack_path, &pk);
	if (ret)
		return ret;
	max_pos = moem_pack_config(pk)->max_pos;
	moem_pack_close(pk);
	for (uint32_t i = 0; i < r->n_seqs; i++)
		need = moem_max(need, (uint64_t)r->seqs[i].n_prompt + r->sp.max_new_tokens);
	/* A prompt too long for the model keeps the decoder's own message. */
	r->dopt.max_context = (uint32_t)moem_min(need, (uint64_t)max_pos);
	r->dopt.max_seqs = moem_min(r->n_seqs, 64u);
	return 0;
}

/*
 * --hbm in % is a share of the experts' bytes (moem_engine_args_resolve()),
 * and no --hbm is all of them. Where the KV pool is device memory it comes
 * out of the HBM budget, so either would leave an expert or more out of HBM
 * and every step off the device plan: this run's pool is added on top of
 * the experts' share (share: the knob as the engine opened). A budget in
 * bytes stays as given: it is the device memory to use.
 */
static int pool_on_top(struct moem_dec_run *r, uint64_t share)
{
	int ret;

	if (r->ea.hbm && !strchr(r->ea.hbm, '%'))
		return 0;
	ret = moem_engine_hbm_on_top(r->e, share);
	if (ret == -ENOSPC) {
		/* the pool stays inside the budget: a slower run, not a failed one */
		moem_warn("%s", moem_last_error());
		ret = 0;
	}
	return ret;
}

int moem_dec_run_open(struct moem_dec_run *r)
{
	int ret = moem_engine_args_resolve(&r->ea);
	uint64_t share = 0;

	if (!ret)
		ret = size_for_prompts(r);
	if (ret)
		return ret;
	if (r->quiet || r->json)
		moem_log_set_level(MOEM_LOG_WARN);
	ret = moem_engine_open(&r->ea.o, &r->e);
	if (!ret)
		share = moem_engine_get_knob(r->e, MOEM_BUDGET_HBM_BYTES);
	if (!ret)
		ret = moem_decoder_open(r->e, &r->dopt, &r->d);
	if (!ret)
		ret = pool_on_top(r, share);
	/* After the decoder: the warm-up fills the experts' share it leaves. */
	if (!ret && !r->no_warmup)
		ret = moem_engine_warmup(r->e, NULL);
	if (ret)
		return ret;
	if (r->logits_out && !r->logits_fn) {
		struct moem_pack *pk;
		uint32_t hdr[2] = {0, 0};

		ret = moem_pack_open(r->ea.o.pack_path, &pk);
		if (ret)
			return ret;
		hdr[1] = moem_pack_config(pk)->vocab;
		moem_pack_close(pk);

		const char *in[] = {r->ea.o.pack_path};
		int fd;

		ret = moem_check_out_path("--logits-out", r->logits_out, in, 1);
		if (ret)
			return ret;
		if (asprintf(&r->logits_tmp, "%s.tmp-XXXXXX", r->logits_out) < 0) {
			r->logits_tmp = NULL;
			return -ENOMEM;
		}
		fd = mkostemp(r->logits_tmp, O_CLOEXEC);
		r->logits_f = fd >= 0 ? fdopen(fd, "wb") : NULL;
		if (!r->logits_f) {
			ret = moem_errf(errno, "%s: %s", r->logits_out, strerror(errno));
			if (fd >= 0) {
				close(fd);
				unlink(r->logits_tmp);
			}
			return ret;
		}
		fwrite("MOEMLGT1", 8, 1, r->logits_f);
		fwrite(&hdr[1], 4, 1, r->logits_f);
		r->logits_fn = write_logits;
		r->logits_arg = r;
	}
	return 0;
}

static int keep(struct moem_dec_seq_out *s, const struct moem_token_out *o, uint32_t top)
{
	if (s->n == s->cap) {
		uint32_t cap = s->cap ? 2 * s->cap : 32;
		int32_t *t = realloc(s->toks, sizeof(int32_t) * cap);
		float *l = t ? realloc(s->lp, sizeof(float) * cap) : NULL;
		int32_t *ti =
			l ? realloc(s->top_ids, sizeof(int32_t) * cap * (top ? top : 1)) : NULL;
		float *tl = ti ? realloc(s->top_lp, sizeof(float) * cap * (top ? top : 1)) : NULL;

		if (t)
			s->toks = t;
		if (l)
			s->lp = l;
		if (ti)
			s->top_ids = ti;
		if (!tl)
			return -ENOMEM;
		s->top_lp = tl;
		s->cap = cap;
	}
	s->toks[s->n] = o->token;
	s->lp[s->n] = o->logprob;
	for (uint32_t i = 0; i < top; i++) {
		s->top_ids[s->n * top + i] = i < o->n_top ? o->top_ids[i] : -1;
		s->top_lp[s->n * top + i] = i < o->n_top ? o->top_logprobs[i] : 0;
	}
	s->n++;
	return 0;
}

/* Sort the split by step kind; keep decode steps' times for the median. */
static int note_step(struct moem_dec_run *r, const struct moem_decode_stats *st)
{
	if (st->prefill_tokens) {
		moem_decode_stats_add(&r->pre_st, st);
		return 0;
	}
	moem_decode_stats_add(&r->dec_st, st);
	if (r->n_dec_steps == r->cap_dec_steps) {
		uint32_t cap = r->cap_dec_steps ? 2 * r->cap_dec_steps : 64;
		uint64_t *p = realloc(r->dec_step_ns, sizeof(*p) * cap);

		if (!p)
			return -ENOMEM;
		r->dec_step_ns = p;
		r->cap_dec_steps = cap;
	}
	r->dec_step_ns[r->n_dec_steps++] = st->step_ns;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Median of the decode-only steps, ns (0: none or no memory). */
static double median_step_ns(const struct moem_dec_run *r)
{
	uint32_t n = r->n_dec_steps;
	uint64_t *v = n ? malloc(sizeof(*v) * n) : NULL;
	double m;

	if (!v)
		return 0;
	memcpy(v, r->dec_step_ns, sizeof(*v) * n);
	qsort(v, n, sizeof(*v), cmp_u64);
	m = n % 2 ? (double)v[n / 2] : ((double)v[n / 2 - 1] + (double)v[n / 2]) / 2;
	free(v);
	return m;
}

static struct json_object *split_json(const struct moem_decode_stats *s)
{
	struct json_object *t = json_object_new_object();

	json_object_object_add(t, "steps", json_object_new_uint64(s->steps));
	json_object_object_add(t, "tokens",
			       json_object_new_uint64(s->prefill_tokens + s->decode_tokens));
	json_object_object_add(t, "total_ms", json_object_new_double(s->step_ns / 1e6));
	json_object_object_add(t, "attention_ms", json_object_new_double(s->attn_ns / 1e6));
	json_object_object_add(t, "moe_ms", json_object_new_double(s->moe_ns / 1e6));
	json_object_object_add(t, "waiting_ms", json_object_new_double(s->wait_ns / 1e6));
	json_object_object_add(t, "head_ms", json_object_new_double(s->head_ns / 1e6));
	json_object_object_add(t, "device_ms", json_object_new_double(s->device_ns / 1e6));
	{
		struct json_object *ph = json_object_new_object();

		for (int p = 0; p < MOEM_PHASE_NR; p++)
			json_object_object_add(ph, moem_phase_name(p),
					       json_object_new_double(s->phase_ns[p] / 1e6));
		json_object_object_add(t, "moe_phases_ms", ph);
	}
	return t;
}

int moem_dec_run_all(struct moem_dec_run *r)
{
	struct moem_work *items = calloc(r->n_seqs, sizeof(*items));
	struct moem_token_out *out = calloc(r->n_seqs, sizeof(*out));
	uint32_t *who = calloc(r->n_seqs, sizeof(*who));
	uint32_t done = 0;
	int ret = items && out && who ? 0 : -ENOMEM;

	r->t_start = moem_now_ns();
	while (!ret && done < r->n_seqs) {
		struct moem_kv_usage u;
		uint32_t n = 0, budget;

		/* admit what the KV budget holds now; the rest waits its turn */
		for (uint32_t i = 0; i < r->n_seqs && !ret; i++) {
			struct moem_dec_seq_out *s = &r->seqs[i];
			struct moem_seq_params p = r->sp;

			if (s->added || s->finish)
				continue;
			p.prompt = s->prompt;
			p.n_prompt = s->n_prompt;
			p.logits_fn = r->logits_fn;
			p.logits_arg = r->logits_arg;
			ret = moem_decoder_add(r->d, &p, &s->id);
			if (ret == -ENOSPC) {
				moem_decoder_kv_usage(r->d, &u);
				if (u.seqs) { /* others will free blocks */
					ret = 0;
					r->waits++;
					break;
				}
			}
			if (ret == -EMFILE) {
				ret = 0;
				break;
			}
			if (!ret)
				s->added = true;
		}
		if (ret)
			break;
		budget = 512;
		for (uint32_t i = 0; i < r->n_seqs; i++) {
			struct moem_dec_seq_out *s = &r->seqs[i];
			uint32_t left;

			if (!s->added || s->finish || !budget)
				continue;
			moem_decoder_pending_prompt(r->d, s->id, &left);
			items[n] = (struct moem_work){s->id,
						      left ? MOEM_WORK_PREFILL : MOEM_WORK_DECODE};
			if (left) {
				items[n].n_tokens = moem_min(left, budget);
				if (r->chunk)
					items[n].n_tokens = moem_min(items[n].n_tokens, r->chunk);
			}
			budget -= left ? items[n].n_tokens : 1;
			who[n++] = i;
		}
		if (!n) {
			ret = moem_errf(ENOSPC, "no sequence fits the kv budget");
			break;
		}
		{
			struct moem_decode_stats st = {0};

			ret = moem_decoder_step(r->d, items, n, out, &st);
			if (!ret)
				ret = note_step(r, &st);
		}
		for (uint32_t k = 0; !ret && k < n; k++) {
			struct moem_dec_seq_out *s = &r->seqs[who[k]];

			if (out[k].token >= 0) {
				if (!s->n)
					s->first_ns = moem_now_ns();
				ret = keep(s, &out[k], r->sp.top_logprobs);
			}
			if (out[k].finish) {
				s->finish = out[k].finish;
				s->added = false;
				done++;
			}
		}
	}
	r->t_end = moem_now_ns();
	if (r->d)
		moem_decoder_stats(r->d, &r->st);
	free(items);
	free(out);
	free(who);
	return ret;
}

void moem_dec_run_print(const struct moem_dec_run *r, FILE *f)
{
	uint64_t gen = 0, first = UINT64_MAX, ttft = 0;
	double dec_s, tps;

	for (uint32_t i = 0; i < r->n_seqs; i++) {
		gen += r->seqs[i].n;
		if (r->seqs[i].n) {
			first = moem_min(first, r->seqs[i].first_ns);
			ttft += r->seqs[i].first_ns - r->t_start;
		}
	}
	dec_s = first != UINT64_MAX ? (double)(r->t_end - first) / 1e9 : 0;
	tps = dec_s > 0 && gen > r->n_seqs ? (double)(gen - r->n_seqs) / dec_s : 0;
	if (!r->json) {
		for (uint32_t i = 0; i < r->n_seqs; i++) {
			const struct moem_dec_seq_out *s = &r->seqs[i];

			for (uint32_t k = 0; k < s->n; k++) {
				fprintf(f, "%s%d", k ? "," : "", s->toks[k]);
				if (r->sp.top_logprobs)
					fprintf(f, ":%.4f", (double)s->lp[k]);
			}
			fprintf(f, "%s(%s)\n", s->n ? " " : "", moem_finish_name(s->finish));
		}
		if (!r->quiet)
			fprintf(stderr,
				"moem decode: %llu tokens; first token after %.1f ms; %.1f "
				"tokens/s decoding\n",
				(unsigned long long)gen,
				r->n_seqs ? (double)ttft / r->n_seqs / 1e6 : 0.0, tps);
		return;
	}
	{
		struct json_object *o = json_object_new_object(), *a = json_object_new_array();
		struct json_object *t = json_object_new_object();
		struct moem_engine_status es;
		struct moem_kv_usage ku;

		for (uint32_t i = 0; i < r->n_seqs; i++) {
			const struct moem_dec_seq_out *s = &r->seqs[i];
			struct json_object *so = json_object_new_object();
			struct json_object *tk = json_object_new_array(),
					   *lp = json_object_new_array(),
					   *tl = json_object_new_array();

			for (uint32_t k = 0; k < s->n; k++) {
				json_object_array_add(tk, json_object_new_int(s->toks[k]));
				json_object_array_add(lp, json_object_new_double(s->lp[k]));
				if (r->sp.top_logprobs) {
					struct json_object *alt = json_object_new_array();

					for (uint32_t j = 0; j < r->sp.top_logprobs; j++) {
						struct json_object *pr = json_object_new_array();
						uint32_t at = k * r->sp.top_logprobs + j;

						json_object_array_add(
							pr, json_object_new_int(s->top_ids[at]));
						json_object_array_add(
							pr, json_object_new_double(s->top_lp[at]));
						json_object_array_add(alt, pr);
					}
					json_object_array_add(tl, alt);
				}
			}
			json_object_object_add(so, "tokens", tk);
			json_object_object_add(so, "logprobs", lp);
			if (r->sp.top_logprobs)
				json_object_object_add(so, "top_logprobs", tl);
			else
				json_object_put(tl);
			json_object_object_add(so, "finish",
					       json_object_new_string(moem_finish_name(s->finish)));
			json_object_array_add(a, so);
		}
		json_object_object_add(o, "sequences", a);
		moem_engine_get_status(r->e, &es);
		json_object_object_add(o, "backend", json_object_new_string(es.backend));
		json_object_object_add(o, "device", json_object_new_string(es.backend_device));
		json_object_object_add(o, "threads", json_object_new_uint64(es.backend_threads));
		json_object_object_add(o, "hbm_budget", json_object_new_uint64(es.hbm_budget));
		json_object_object_add(o, "dram_budget", json_object_new_uint64(es.dram_budget));
		moem_engine_dram_nodes_json(o, &es);
		moem_decoder_kv_usage(r->d, &ku);
		json_object_object_add(o, "kv_bytes", json_object_new_uint64(ku.budget_bytes));
		json_object_object_add(o, "kv_max_seqs", json_object_new_uint64(ku.max_seqs));
		json_object_object_add(o, "kv_max_context", json_object_new_uint64(ku.max_context));
		json_object_object_add(
			o, "ttft_ms",
			json_object_new_double(r->n_seqs ? (double)ttft / r->n_seqs / 1e6 : 0));
		json_object_object_add(o, "decode_tokens_per_s", json_object_new_double(tps));
		json_object_object_add(o, "prompt_tokens",
				       json_object_new_uint64(r->st.prefill_tokens));
		/* of the prompts, tokens the prefix cache gave (not in prompt_tokens) */
		json_object_object_add(o, "cached_prompt_tokens",
				       json_object_new_uint64(r->st.prefix_tokens));
		json_object_object_add(o, "generated_tokens", json_object_new_uint64(gen));
		json_object_object_add(o, "steps", json_object_new_uint64(r->st.steps));
		json_object_object_add(o, "kv_waits", json_object_new_uint64(r->waits));
		json_object_object_add(t, "total_ms", json_object_new_double(r->st.step_ns / 1e6));
		json_object_object_add(t, "attention_ms",
				       json_object_new_double(r->st.attn_ns / 1e6));
		json_object_object_add(t, "moe_ms", json_object_new_double(r->st.moe_ns / 1e6));
		json_object_object_add(t, "waiting_ms",
				       json_object_new_double(r->st.wait_ns / 1e6));
		json_object_object_add(t, "head_ms", json_object_new_double(r->st.head_ns / 1e6));
		json_object_object_add(t, "device_ms",
				       json_object_new_double(r->st.device_ns / 1e6));
		json_object_object_add(o, "time", t);
		/* the same split for steps with prefill work and for decode-only steps */
		json_object_object_add(o, "prefill", split_json(&r->pre_st));
		json_object_object_add(o, "decode", split_json(&r->dec_st));
		json_object_object_add(
			o, "prompt_tokens_per_s",
			json_object_new_double(r->pre_st.step_ns ? r->pre_st.prefill_tokens * 1e9 /
									   r->pre_st.step_ns
								 : 0));
		json_object_object_add(o, "median_decode_step_ms",
				       json_object_new_double(median_step_ns(r) / 1e6));
		json_object_object_add(o, "hits", json_object_new_uint64(r->st.hits));
		json_object_object_add(o, "misses", json_object_new_uint64(r->st.misses));
		json_object_object_add(o, "cpu_experts", json_object_new_uint64(r->st.cpu_experts));
		json_object_object_add(o, "bytes_h2d", json_object_new_uint64(r->st.bytes_h2d));
		json_object_object_add(o, "device_steps",
				       json_object_new_uint64(r->st.device_steps));
		json_object_object_add(o, "graph_steps", json_object_new_uint64(r->st.graph_steps));
		json_object_object_add(o, "graph_captures",
				       json_object_new_uint64(r->st.graph_captures));
		json_object_object_add(o, "cpu_experts", json_object_new_uint64(r->st.cpu_experts));
		json_object_object_add(o, "cpu_ms", json_object_new_double(r->st.cpu_ns / 1e6));
		fprintf(f, "%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
		json_object_put(o);
	}
}
