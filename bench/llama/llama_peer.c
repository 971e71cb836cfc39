// SPDX-License-Identifier: GPL-2.0-only
/*
 * llama-peer: llama.cpp, as shipped prebuilt by the npm package
 * node-llama-cpp, driven through its own C API (llama.h of the same
 * release, taken from the package's source bundle) so that moem's decode
 * can be compared with it on the same GGUF model, the same token ids and
 * the same thread count (bench/llama/run.sh), and so that its logits can
 * serve as a second independent reference (tests/llama/logits.sh).
 *
 *   llama-peer quantize IN.gguf OUT.gguf bf16|q8_0|q4_k_m [THREADS]
 *       llama_model_quantize() from the package's libllama.
 *   llama-peer run --model M.gguf --tokens 1,2,3 [--max-new N] [--threads N]
 *                  [--f32-kv] [--logits-out FILE]
 *       Prefill the prompt in one llama_decode(), then decode greedily
 *       one token per call; print JSON with prompt tokens/s, decode
 *       tokens/s over the whole run and the median decode step, and the
 *       generated ids. Flash attention is always off (the reference
 *       setting; moem's CPU attention is not a flash kernel either).
 *       --f32-kv keeps the KV cache in F32 (default F16, llama.cpp's).
 *       --logits-out writes every position's logits in moem decode's
 *       --logits-out format ("MOEMLGT1", u32 vocab, then per row u32 seq,
 *       u32 pos, f32[vocab]).
 *   llama-peer chat --model M.gguf --tokens T1 --tokens T2 .. [--max-new N]
 *                   [--threads N] [--reuse]
 *       The prompts in turn in one context, each then decoded greedily for
 *       N tokens (the turns of a chat as a client sends them). --reuse
 *       keeps the cache's common beginning with the next prompt and
 *       computes the rest, as the llama.cpp server's cache_prompt does
 *       (llama_memory_seq_rm(); at least the last token is computed);
 *       without it every prompt is computed whole. Prints JSON with each
 *       turn's prompt tokens, tokens computed and prompt time (the
 *       prompt's llama_decode() and its first token), and their sums.
 *
 * The backend libraries (libggml-cpu-<variant>.so) are loaded from the
 * directory of libllama, as node-llama-cpp does; ggml picks the best
 * variant for this CPU.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-backend.h"
#include "llama.h"

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void quiet_log(enum ggml_log_level level, const char *text, void *arg)
{
	(void)arg;
	if (level == GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

static int parse_ids(const char *s, llama_token **out, int *n)
{
	int cap = 16, k = 0;
	llama_token *v = malloc(sizeof(*v) * cap);

	while (v && *s) {
		char *end;
		long x = strtol(s, &end, 10);

		if (end == s || x < 0 || x > 0x7fffffff || (*end && *end != ',')) {
			free(v);
			return -EINVAL;
		}
		if (k == cap) {
			llama_token *nv = realloc(v, sizeof(*v) * (cap *= 2));

			if (!nv) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
		}
		v[k++] = (llama_token)x;
		s = *end ? end + 1 : end;
	}
	if (!v)
		return -ENOMEM;
	if (!k) {
		free(v);
		return -EINVAL;
	}
	*out = v;
	*n = k;
	return 0;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int cmd_quantize(int argc, char **argv)
{
	struct llama_model_quantize_params p = llama_model_quantize_default_params();

	if (argc < 4) {
		fprintf(stderr, "usage: llama-peer quantize IN OUT bf16|q8_0|q4_k_m [THREADS]\n");
		return 2;
	}
	if (!strcmp(argv[3], "bf16"))
		p.ftype = LLAMA_FTYPE_MOSTLY_BF16;
	else if (!strcmp(argv[3], "q8_0"))
		p.ftype = LLAMA_FTYPE_MOSTLY_Q8_0;
	else if (!strcmp(argv[3], "q4_k_m"))
		p.ftype = LLAMA_FTYPE_MOSTLY_Q4_K_M;
	else {
		fprintf(stderr, "llama-peer: unknown type %s\n", argv[3]);
		return 2;
	}
	p.nthread = argc > 4 ? atoi(argv[4]) : 0;
	if (llama_model_quantize(argv[1], argv[2], &p)) {
		fprintf(stderr, "llama-peer: llama_model_quantize %s -> %s failed\n", argv[1],
			argv[2]);
		return 1;
	}
	return 0;
}

struct run_opts {
	const char *model, *logits_out;
	llama_token *prompt;
	int n_prompt, max_new, threads;
	int f32_kv;
};

static int write_rows(FILE *f, struct llama_context *ctx, int first, int n, int pos0, int n_vocab)
{
	for (int i = 0; i < n; i++) {
		const float *l = llama_get_logits_ith(ctx, first + i);
		unsigned int hdr[2] = {0, (unsigned int)(pos0 + i)};

		if (!l || fwrite(hdr, sizeof(hdr), 1, f) != 1 ||
		    fwrite(l, sizeof(float), (size_t)n_vocab, f) != (size_t)n_vocab)
			return -EIO;
	}
	return 0;
}

static llama_token argmax(const float *l, int n)
{
	int best = 0;

	for (int i = 1; i < n; i++)
		if (l[i] > l[best])
			best = i;
	return best;
}

/*
 * The model, all on the CPU and read in now (no page faults in timed
 * steps), and a context for one sequence of n_ctx tokens with flash
 * attention off (the reference setting; moem's CPU attention is not a
 * flash kernel either), warmed up: token w decoded, then the cache
 * emptied, so graph and buffers are allocated before any timing. NULL
 * (said on stderr) if either fails; *model is then freed.
 */
static struct llama_context *open_ctx(const char *path, int n_ctx, int n_batch, int threads,
				      int f32_kv, llama_token w, struct llama_model **model)
{
	struct llama_model_params mp = llama_model_default_params();
	struct llama_context_params cp = llama_context_default_params();
	struct llama_context *ctx;

	mp.n_gpu_layers = 0;
	mp.load_mode = LLAMA_LOAD_MODE_NONE;
	*model = llama_model_load_from_file(path, mp);
	if (!*model) {
		fprintf(stderr, "llama-peer: cannot load %s\n", path);
		return NULL;
	}
	cp.n_ctx = (uint32_t)n_ctx;
	cp.n_batch = cp.n_ubatch = (uint32_t)(n_batch > 512 ? n_batch : 512);
	cp.n_seq_max = 1;
	cp.n_threads = cp.n_threads_batch = threads;
	cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
	cp.no_perf = 1;
	if (f32_kv)
		cp.type_k = cp.type_v = GGML_TYPE_F32;
	ctx = llama_init_from_model(*model, cp);
	if (!ctx) {
		fprintf(stderr, "llama-peer: cannot make a context\n");
	} else if (llama_decode(ctx, llama_batch_get_one(&w, 1))) {
		fprintf(stderr, "llama-peer: warm-up decode failed\n");
		llama_free(ctx);
		ctx = NULL;
	} else {
		llama_memory_clear(llama_get_memory(ctx), true);
		return ctx;
	}
	llama_model_free(*model);
	*model = NULL;
	return NULL;
}

static int run(const struct run_opts *o)
{
	struct llama_model *model;
	struct llama_context *ctx;
	struct llama_batch b;
	FILE *lf = NULL;
	double t0, t_prompt, t_dec = 0, *steps;
	llama_token *out;
	int n_vocab, rc = 1, n_out = 0;

	ctx = open_ctx(o->model, o->n_prompt + o->max_new + 16, o->n_prompt, o->threads, o->f32_kv,
		       o->prompt[0], &model);
	if (!ctx)
		return 1;
	n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
	steps = calloc((size_t)o->max_new + 1, sizeof(*steps));
	out = calloc((size_t)o->max_new + 1, sizeof(*out));
	b = llama_batch_init(o->n_prompt, 0, 1);
	if (!steps || !out) {
		fprintf(stderr, "llama-peer: out of memory\n");
		goto err;
	}
	if (o->logits_out) {
		lf = fopen(o->logits_out, "wb");
		if (!lf || fwrite("MOEMLGT1", 8, 1, lf) != 1 ||
		    fwrite(&n_vocab, sizeof(n_vocab), 1, lf) != 1) {
			fprintf(stderr, "llama-peer: cannot write %s\n", o->logits_out);
			goto err;
		}
	}
	for (int i = 0; i < o->n_prompt; i++) {
		b.token[i] = o->prompt[i];
		b.pos[i] = i;
		b.n_seq_id[i] = 1;
		b.seq_id[i][0] = 0;
		b.logits[i] = lf || i == o->n_prompt - 1;
	}
	b.n_tokens = o->n_prompt;
	t0 = now_ms();
	if (llama_decode(ctx, b)) {
		fprintf(stderr, "llama-peer: prompt decode failed\n");
		goto err;
	}
	out[n_out++] = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
	t_prompt = now_ms() - t0;
	if (lf && write_rows(lf, ctx, 0, o->n_prompt, 0, n_vocab))
		goto err_write;
	for (int k = 1; k < o->max_new; k++) {
		llama_token t = out[n_out - 1];
		double s = now_ms();

		if (llama_decode(ctx, llama_batch_get_one(&t, 1))) {
			fprintf(stderr, "llama-peer: decode step %d failed\n", k);
			goto err;
		}
		out[n_out++] = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
		steps[k - 1] = now_ms() - s;
		t_dec += steps[k - 1];
		if (lf && write_rows(lf, ctx, -1, 1, o->n_prompt + k - 1, n_vocab))
			goto err_write;
	}
	if (lf && fclose(lf)) {
		lf = NULL;
		goto err_write;
	}
	lf = NULL;
	qsort(steps, (size_t)(o->max_new - 1), sizeof(*steps), cmp_d);
	printf("{\"peer\":\"llama.cpp\",\"threads\":%d,\"prompt_tokens\":%d,\"prompt_ms\":%.3f,"
	       "\"prompt_tokens_per_s\":%.3f,\"decode_steps\":%d,\"decode_ms\":%.3f,"
	       "\"decode_tokens_per_s\":%.3f,\"median_decode_step_ms\":%.3f,\"tokens\":[",
	       o->threads, o->n_prompt, t_prompt, o->n_prompt * 1e3 / t_prompt, o->max_new - 1,
	       t_dec, t_dec > 0 ? (o->max_new - 1) * 1e3 / t_dec : 0.0,
	       o->max_new > 1
		       ? (o->max_new - 1) % 2
				 ? steps[(o->max_new - 1) / 2]
				 : (steps[(o->max_new - 1) / 2 - 1] + steps[(o->max_new - 1) / 2]) /
					   2
		       : 0.0);
	for (int i = 0; i < n_out; i++)
		printf("%s%d", i ? "," : "", out[i]);
	printf("]}\n");
	rc = 0;
	goto err;
err_write:
	fprintf(stderr, "llama-peer: writing %s: %s\n", o->logits_out, strerror(errno));
err:
	if (lf) {
		fclose(lf);
		remove(o->logits_out); /* never leave half a file */
	}
	llama_batch_free(b);
	free(steps);
	free(out);
	llama_free(ctx);
	llama_model_free(model);
	return rc;
}

static int cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"model", required_argument, NULL, 'm'},
		{"tokens", required_argument, NULL, 't'},
		{"max-new", required_argument, NULL, 'n'},
		{"threads", required_argument, NULL, 'j'},
		{"f32-kv", no_argument, NULL, 'f'},
		{"logits-out", required_argument, NULL, 'l'},
		{0},
	};
	struct run_opts o = {.max_new = 32, .threads = 1};
	int c, rc;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			o.model = optarg;
			break;
		case 't':
			if (parse_ids(optarg, &o.prompt, &o.n_prompt)) {
				fprintf(stderr, "llama-peer: bad --tokens\n");
				return 2;
			}
			break;
		case 'n':
			o.max_new = atoi(optarg);
			break;
		case 'j':
			o.threads = atoi(optarg);
			break;
		case 'f':
			o.f32_kv = 1;
			break;
		case 'l':
			o.logits_out = optarg;
			break;
		default:
			return 2;
		}
	}
	if (!o.model || !o.prompt || o.max_new < 2 || o.threads < 1) {
		fprintf(stderr, "usage: llama-peer run --model M --tokens IDS [--max-new N>=2] "
				"[--threads N] [--f32-kv] [--logits-out F]\n");
		free(o.prompt);
		return 2;
	}
	rc = run(&o);
	free(o.prompt);
	return rc;
}

/* The chat bench (bench/prefix/run.sh): prompts in turn, one context. */
#define CHAT_MAX 64

struct chat_opts {
	const char *model;
	llama_token *prompt[CHAT_MAX];
	int n_prompt[CHAT_MAX], n_turns, max_new, threads, reuse;
};

static int chat(const struct chat_opts *o)
{
	struct llama_model *model;
	struct llama_context *ctx;
	struct llama_batch b;
	llama_token *kv; /* the tokens whose keys and values the cache holds */
	double ms[CHAT_MAX], total = 0;
	int computed[CHAT_MAX], n_kv = 0, longest = 0, n_vocab, rc = 1, done = 0;

	for (int t = 0; t < o->n_turns; t++)
		longest = o->n_prompt[t] > longest ? o->n_prompt[t] : longest;
	ctx = open_ctx(o->model, longest + o->max_new + 16, longest, o->threads, 0, o->prompt[0][0],
		       &model);
	if (!ctx)
		return 1;
	n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
	kv = calloc((size_t)longest + o->max_new + 1, sizeof(*kv));
	b = llama_batch_init(longest, 0, 1);
	if (!kv) {
		fprintf(stderr, "llama-peer: out of memory\n");
		goto out;
	}
	for (int t = 0; t < o->n_turns; t++) {
		const llama_token *p = o->prompt[t];
		int n = o->n_prompt[t], keep = 0;
		llama_token tok;
		double t0;

		if (o->reuse)
			while (keep < n_kv && keep < n - 1 && kv[keep] == p[keep])
				keep++;
		t0 = now_ms();
		if (!llama_memory_seq_rm(llama_get_memory(ctx), 0, keep, -1)) {
			fprintf(stderr, "llama-peer: cannot drop the cache from %d\n", keep);
			goto out;
		}
		for (int i = keep; i < n; i++) {
			b.token[i - keep] = p[i];
			b.pos[i - keep] = i;
			b.n_seq_id[i - keep] = 1;
			b.seq_id[i - keep][0] = 0;
			b.logits[i - keep] = i == n - 1;
		}
		b.n_tokens = n - keep;
		if (llama_decode(ctx, b)) {
			fprintf(stderr, "llama-peer: prompt %d decode failed\n", t + 1);
			goto out;
		}
		tok = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
		ms[t] = now_ms() - t0;
		total += ms[t];
		computed[t] = n - keep;
		memcpy(kv, p, sizeof(*kv) * (size_t)n);
		n_kv = n;
		for (int k = 1; k < o->max_new; k++) {
			if (llama_decode(ctx, llama_batch_get_one(&tok, 1))) {
				fprintf(stderr, "llama-peer: turn %d step %d failed\n", t + 1, k);
				goto out;
			}
			kv[n_kv++] = tok;
			tok = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
		}
		done++;
	}
	printf("{\"peer\":\"llama.cpp\",\"threads\":%d,\"reuse\":%d,\"turns\":[", o->threads,
	       o->reuse);
	for (int t = 0; t < done; t++)
		printf("%s{\"prompt_tokens\":%d,\"computed\":%d,\"prompt_ms\":%.3f}", t ? "," : "",
		       o->n_prompt[t], computed[t], ms[t]);
	printf("],\"prompt_ms\":%.3f}\n", total);
	rc = 0;
out:
	llama_batch_free(b);
	free(kv);
	llama_free(ctx);
	llama_model_free(model);
	return rc;
}

static int cmd_chat(int argc, char **argv)
{
	static const struct option opts[] = {
		{"model", required_argument, NULL, 'm'},
		{"tokens", required_argument, NULL, 't'},
		{"max-new", required_argument, NULL, 'n'},
		{"threads", required_argument, NULL, 'j'},
		{"reuse", no_argument, NULL, 'r'},
		{0},
	};
	struct chat_opts o = {.max_new = 8, .threads = 1};
	int c, rc = 2;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			o.model = optarg;
			break;
		case 't':
			if (o.n_turns == CHAT_MAX ||
			    parse_ids(optarg, &o.prompt[o.n_turns], &o.n_prompt[o.n_turns])) {
				fprintf(stderr, "llama-peer: bad --tokens (at most %d)\n",
					CHAT_MAX);
				goto out;
			}
			o.n_turns++;
			break;
		case 'n':
			o.max_new = atoi(optarg);
			break;
		case 'j':
			o.threads = atoi(optarg);
			break;
		case 'r':
			o.reuse = 1;
			break;
		default:
			goto out;
		}
	}
	if (!o.model || !o.n_turns || o.max_new < 1 || o.threads < 1) {
		fprintf(stderr, "usage: llama-peer chat --model M --tokens IDS [--tokens IDS].. "
				"[--max-new N] [--threads N] [--reuse]\n");
		goto out;
	}
	rc = chat(&o);
out:
	for (int t = 0; t < o.n_turns; t++)
		free(o.prompt[t]);
	return rc;
}

int main(int argc, char **argv)
{
	const char *dir = getenv("LLAMA_PEER_LIBDIR");
	int rc;

	if (argc < 2) {
		fprintf(stderr, "usage: llama-peer quantize|run|chat ...\n");
		return 2;
	}
	llama_log_set(quiet_log, NULL);
	if (dir)
		ggml_backend_load_all_from_path(dir);
	else
		ggml_backend_load_all();
	llama_backend_init();
	rc = !strcmp(argv[1], "quantize") ? cmd_quantize(argc - 1, argv + 1)
	     : !strcmp(argv[1], "run")	  ? cmd_run(argc - 1, argv + 1)
	     : !strcmp(argv[1], "chat")	  ? cmd_chat(argc - 1, argv + 1)
					  : 2;
	llama_backend_free();
	return rc;
}
