// SPDX-License-Identifier: GPL-2.0-only
/*
 * moem eval: what the run's lossy choices (budgets with lo-precision
 * fallback, LYNX/OEA/piggyback routing, q8/q4/q2 experts, DynaExq) do to
 * the model's output. Every sequence of --tokens-file is run teacher-
 * forced twice: once as the reference (all experts resident, bf16, plain
 * top-k routing, no prefetch, paging or precision policy) and once with
 * the options given; at every position it compares the next-token
 * distributions: top-1 agreement, mean KL(reference || run), and the
 * perplexity of the sequences under each. The sequences are fed
 * together, one token of each per step (--prefill-chunk 1 unless given):
 * every step is a decode-shaped batch, so batch-level routing (LYNX, OEA,
 * piggyback) acts on it as it does in decode. On a generated model the
 * figures are synthetic and the report says so.
 *
 * The reference's log-probabilities are kept in an unlinked temporary
 * file (vocab floats per position), not in memory.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/pack.h>
#include <moem/util.h>

#include "cmd.h"
#include "decode_util.h"

/* Options the reference run takes from the command line; the rest it sets. */
static const char *const neutral[] = {
	"pack",		 "backend",	   "threads",	"pool",	       "loader",
	"no-verify",	 "no-cuda-graphs", "kv-bytes",	"kv-block",    "max-seqs",
	"prefill-chunk", "no-warmup",	   "link-gbps", "cpu-threads", "dram-nodes",
};

static const struct option eval_opts[] = {
	{"pack", required_argument, NULL, 0},
	{"tokens-file", required_argument, NULL, 0},
	{"hbm", required_argument, NULL, 0},
	{"dram", required_argument, NULL, 0},
	{"precisions", required_argument, NULL, 0},
	{"fallback", no_argument, NULL, 0},
	{"route", required_argument, NULL, 0},
	{"evict", required_argument, NULL, 0},
	{"prefetch", required_argument, NULL, 0},
	{"precision", required_argument, NULL, 0},
	{"paging", required_argument, NULL, 0},
	{"backend", required_argument, NULL, 0},
	{"threads", required_argument, NULL, 0},
	{"pool", required_argument, NULL, 0},
	{"link-gbps", required_argument, NULL, 0},
	{"dram-nodes", required_argument, NULL, 0},
	{"exec", required_argument, NULL, 0},
	{"cpu-moe-layers", required_argument, NULL, 0},
	{"cpu-gbps", required_argument, NULL, 0},
	{"cpu-token-ns", required_argument, NULL, 0},
	{"cpu-call-ns", required_argument, NULL, 0},
	{"place", required_argument, NULL, 0},
	{"calibration", required_argument, NULL, 0},
	{"cpu-threads", required_argument, NULL, 0},
	{"loader", required_argument, NULL, 0},
	{"no-verify", no_argument, NULL, 0},
	{"no-cuda-graphs", no_argument, NULL, 0},
	{"kv-bytes", required_argument, NULL, 0},
	{"kv-block", required_argument, NULL, 0},
	{"max-seqs", required_argument, NULL, 0},
	{"prefill-chunk", required_argument, NULL, 0},
	{"no-warmup", no_argument, NULL, 0},
	{"dense-prec", required_argument, NULL, 0},
	{"json", no_argument, NULL, 0},
	{"help", no_argument, NULL, 'h'},
	{0},
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: moem eval --pack FILE --tokens-file FILE [--json]\n"
		"                 [budgets and policies as moem decode: --hbm --dram --precisions\n"
		"                  --fallback --route --evict --prefetch --precision --paging\n"
		"                  --exec gpu|hybrid --cpu-moe-layers N --place RULE ...]\n"
		"                 [--dense-prec bf16|q8|q4|q2]\n"
		"Runs every sequence of the file (one per line: token ids separated by commas\n"
		"or blanks; # starts a comment) teacher-forced, once as the reference (all\n"
		"resident, bf16, plain top-k) and once with the options given, and reports\n"
		"top-1 agreement, mean KL(reference || run) and perplexity.\n");
}

struct eval_seq {
	uint64_t first; /* position index of its first row in the store */
	uint32_t n;
};

struct eval {
	struct moem_dec_run *run; /* the run whose logits are coming in */
	const struct eval_seq *seqs;
	uint32_t n_seqs, vocab;
	int32_t *const *toks;
	FILE *store; /* reference log-probs [position][vocab] */
	float *lp;   /* vocab scratch */
	float *ref;  /* vocab scratch */
	bool is_ref;
	int err;
	/* per run */
	double nll_ref, nll_run, kl;
	uint64_t n_nll, n_pos, agree;
};

/* log-softmax of l into out (double sums); the argmax. */
static uint32_t log_softmax(const float *l, uint32_t V, float *out)
{
	uint32_t best = 0;
	double sum = 0, mx;

	for (uint32_t i = 1; i < V; i++)
		if (l[i] > l[best])
			best = i;
	mx = l[best];
	for (uint32_t i = 0; i < V; i++)
		sum += exp((double)l[i] - mx);
	for (uint32_t i = 0; i < V; i++)
		out[i] = (float)((double)l[i] - mx - log(sum));
	return best;
}

static void on_logits(void *arg, uint64_t id, uint32_t pos, const float *l, uint32_t V)
{
	struct eval *ev = arg;
	const struct moem_dec_run *r = ev->run;
	uint32_t s = UINT32_MAX, top;
	off_t off;

	for (uint32_t i = 0; i < r->n_seqs; i++)
		if (r->seqs[i].added && r->seqs[i].id == id)
			s = i;
	/* the generated token's position has no teacher token to score */
	if (ev->err || s == UINT32_MAX || pos >= ev->seqs[s].n || V != ev->vocab)
		return;
	off = (off_t)((ev->seqs[s].first + pos) * (uint64_t)V * sizeof(float));
	top = log_softmax(l, V, ev->lp);
	if (ev->is_ref) {
		if (pwrite(fileno(ev->store), ev->lp, sizeof(float) * V, off) !=
		    (ssize_t)(sizeof(float) * V))
			ev->err =
				moem_errf(EIO, "eval: writing the reference: %s", strerror(errno));
		if (pos + 1 < ev->seqs[s].n) {
			ev->nll_ref -= ev->lp[ev->toks[s][pos + 1]];
			ev->n_nll++;
		}
		return;
	}
	if (pread(fileno(ev->store), ev->ref, sizeof(float) * V, off) !=
	    (ssize_t)(sizeof(float) * V)) {
		ev->err = moem_errf(EIO, "eval: reading the reference back: %s", strerror(errno));
		return;
	}
	{
		uint32_t rtop = 0;
		double kl = 0;

		for (uint32_t i = 0; i < V; i++) {
			if (ev->ref[i] > ev->ref[rtop])
				rtop = i;
			kl += exp((double)ev->ref[i]) * ((double)ev->ref[i] - ev->lp[i]);
		}
		ev->kl += kl > 0 ? kl : 0; /* rounding can dip below 0 by ~1e-7 */
		ev->agree += rtop == top;
		ev->n_pos++;
	}
	if (pos + 1 < ev->seqs[s].n)
		ev->nll_run -= ev->lp[ev->toks[s][pos + 1]];
}

/* Read the tokens file: one sequence a line, of at most EVAL_LINE_MAX bytes. */
#define EVAL_LINE_MAX (64ul << 20)
static int read_tokens(const char *path, struct moem_dec_run *r)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	uint32_t lineno = 0;
	int ret = 0;

	if (!f)
		return moem_errf(errno, "%s: %s", path, strerror(errno));
	while (!ret) {
		ssize_t len = moem_getline(&line, &cap, f, path, EVAL_LINE_MAX);
		char *p, *q = line;
		int32_t *ids;
		uint32_t n;

		if (len < 0) {
			ret = len == -ENODATA ? 0 : (int)len;
			break;
		}
		lineno++;
		if (strchr(line, '#'))
			*strchr(line, '#') = 0;
		/* blanks and commas alike, runs of them one comma, none at the ends
		 * (in one pass: a line may hold millions) */
		for (p = line; *p; p++) {
			char ch = *p == ' ' || *p == '\t' ? ',' : *p;

			if (ch == '\n' || ch == '\r' || (ch == ',' && (q == line || q[-1] == ',')))
				continue;
			*q++ = ch;
		}
		if (q > line && q[-1] == ',')
			q--;
		*q = 0;
		if (!line[0])
			continue;
		ret = moem_parse_ids(line, &ids, &n);
		if (ret) {
			moem_err_prefix(-ret, "%s:%u", path, lineno);
			break;
		}
		if (n < 2)
			ret = moem_errf(EINVAL, "%s:%u: a sequence needs 2 or more tokens", path,
					lineno);
		else
			ret = moem_dec_run_add_prompt(r, ids, n);
		free(ids);
	}
	free(line);
	fclose(f);
	if (!ret && !r->n_seqs)
		ret = moem_errf(EINVAL, "%s: no sequences", path);
	return ret;
}

static int eval_run(struct moem_dec_run *r, struct eval *ev, bool is_ref)
{
	int ret;

	ev->run = r;
	ev->is_ref = is_ref;
	if (!r->chunk_set) /* one token per sequence per step: decode batches */
		r->chunk = 1;
	r->json = true; /* quiet logs; eval prints its own report */
	r->sp.max_new_tokens = 1;
	r->sp.model_eos = false;
	r->logits_fn = on_logits;
	r->logits_arg = ev;
	ret = moem_dec_run_open(r);
	if (!ret)
		ret = moem_dec_run_all(r);
	return ret ? ret : ev->err;
}

static bool is_neutral(const char *name)
{
	for (size_t i = 0; i < sizeof(neutral) / sizeof(neutral[0]); i++)
		if (!strcmp(name, neutral[i]))
			return true;
	return false;
}

static void report(const struct eval *ev, const struct moem_dec_run *run, bool synthetic, bool json)
{
	const double ppl_ref = exp(ev->nll_ref / (double)ev->n_nll);
	const double ppl_run = exp(ev->nll_run / (double)ev->n_nll);
	const double agree = (double)ev->agree / (double)ev->n_pos;
	const double kl = ev->kl / (double)ev->n_pos;
	const struct moem_engine_opts *o = &run->ea.o;

	if (json) {
		struct json_object *j = json_object_new_object();

		json_object_object_add(j, "synthetic", json_object_new_boolean(synthetic));
		json_object_object_add(j, "sequences", json_object_new_uint64(run->n_seqs));
		json_object_object_add(j, "positions", json_object_new_uint64(ev->n_pos));
		json_object_object_add(j, "top1_agreement", json_object_new_double(agree));
		json_object_object_add(j, "mean_kl", json_object_new_double(kl));
		json_object_object_add(j, "perplexity", json_object_new_double(ppl_run));
		json_object_object_add(j, "reference_perplexity", json_object_new_double(ppl_ref));
		json_object_object_add(j, "hbm_budget", json_object_new_uint64(o->hbm_budget));
		json_object_object_add(j, "fallbacks", json_object_new_uint64(run->st.fallbacks));
		printf("%s\n", json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN));
		json_object_put(j);
		return;
	}
	printf("moem eval%s: %u sequences, %llu positions, against all-resident bf16 top-k\n",
	       synthetic ? " (synthetic model: these figures are synthetic)" : "", run->n_seqs,
	       (unsigned long long)ev->n_pos);
	printf("  top-1 agreement  %.4f\n", agree);
	printf("  mean KL          %.6g nats\n", kl);
	printf("  perplexity       %.4f (reference %.4f)\n", ppl_run, ppl_ref);
	printf("  fallbacks        %llu\n", (unsigned long long)run->st.fallbacks);
}

static int cmd_eval(int argc, char **argv)
{
	struct moem_dec_run ref, run;
	struct eval ev = {0};
	struct eval_seq *seqs = NULL;
	int32_t **toks = NULL;
	const char *file = NULL;
	bool json = false, synthetic = false;
	int c, idx, ret = 0, rc = 1;

	moem_dec_run_init(&ref);
	moem_dec_run_init(&run);
	while ((c = getopt_long(argc, argv, "h", eval_opts, &idx)) != -1) {
		const char *name = c == 0 ? eval_opts[idx].name : NULL;
		const char *v = optarg ? optarg : "";

		if (c == 'h') {
			usage(stdout);
			rc = 0;
			goto out;
		}
		if (c != 0) {
			usage(stderr);
			rc = 2;
			goto out;
		}
		if (!strcmp(name, "tokens-file")) {
			file = optarg;
			continue;
		}
		if (!strcmp(name, "json")) {
			json = true;
			continue;
		}
		ret = moem_dec_run_set(&run, name, v);
		if (!ret && is_neutral(name))
			ret = moem_dec_run_set(&ref, name, v);
		if (ret)
			goto fail;
	}
	if (optind != argc || !run.ea.o.pack_path || !file) {
		fprintf(stderr, "moem eval: %s\n",
			optind != argc	      ? "unexpected argument"
			: !run.ea.o.pack_path ? "--pack is required"
					      : "--tokens-file is required");
		usage(stderr);
		rc = 2;
		goto out;
	}
	/* the reference: everything resident, bf16, plain top-k, no policies */
	{
		static const char *const set[][2] = {
			{"hbm", "100%"},    {"dram", "100%"},	  {"precisions", "bf16"},
			{"route", "none"},  {"prefetch", "none"}, {"precision", "none"},
			{"paging", "none"},
		};

		for (size_t i = 0; !ret && i < sizeof(set) / sizeof(set[0]); i++)
			ret = moem_dec_run_set(&ref, set[i][0], set[i][1]);
	}
	if (!ret)
		ret = read_tokens(file, &ref);
	if (!ret)
		ret = read_tokens(file, &run);
	if (ret)
		goto fail;
	{
		struct moem_pack *pk;
		struct moem_synth_params sp;

		ret = moem_pack_open(run.ea.o.pack_path, &pk);
		if (ret)
			goto fail;
		ev.vocab = moem_pack_config(pk)->vocab;
		synthetic = moem_pack_synth(pk, &sp) == 0;
		moem_pack_close(pk);
	}
	seqs = calloc(ref.n_seqs, sizeof(*seqs));
	toks = calloc(ref.n_seqs, sizeof(*toks));
	ev.lp = malloc(sizeof(float) * ev.vocab);
	ev.ref = malloc(sizeof(float) * ev.vocab);
	ev.store = tmpfile();
	if (!seqs || !toks || !ev.lp || !ev.ref || !ev.store) {
		ret = ev.store ? -ENOMEM
			       : moem_errf(errno, "eval: temporary file: %s", strerror(errno));
		goto fail;
	}
	for (uint32_t i = 0, at = 0; i < ref.n_seqs; i++) {
		seqs[i] = (struct eval_seq){at, ref.seqs[i].n_prompt};
		toks[i] = run.seqs[i].prompt; /* run outlives ref */
		at += ref.seqs[i].n_prompt;
	}
	ev.seqs = seqs;
	ev.n_seqs = ref.n_seqs;
	ev.toks = toks;
	ret = eval_run(&ref, &ev, true);
	if (ret) {
		moem_err_prefix(-ret, "the reference run");
		goto fail;
	}
	/* one engine at a time: the reference's memory is back before the run opens */
	moem_dec_run_free(&ref);
	moem_dec_run_init(&ref);
	ret = eval_run(&run, &ev, false);
	if (ret)
		goto fail;
	if (!ev.n_pos || !ev.n_nll) {
		ret = moem_errf(EIO, "eval: no positions were scored");
		goto fail;
	}
	report(&ev, &run, synthetic, json);
	rc = 0;
	goto out;
fail:
	moem_tool_fail("eval", ret, NULL);
out:
	if (ev.store)
		fclose(ev.store);
	free(ev.lp);
	free(ev.ref);
	free(seqs);
	free(toks);
	moem_dec_run_free(&ref);
	moem_dec_run_free(&run);
	return rc;
}

MOEM_CMD(eval_cmd, "eval",
	 "quality of a run's lossy choices against all-resident bf16 top-k (KL, top-1, "
	 "perplexity)",
	 cmd_eval);
