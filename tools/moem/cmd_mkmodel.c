// SPDX-License-Identifier: GPL-2.0-only
/* moem mkmodel: write a synthetic MoE checkpoint in the Hugging Face layout. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/store.h>
#include <moem/tokenizer.h>
#include <moem/util.h>

#include "cmd.h"

static void mk_usage(FILE *f)
{
	fprintf(f, "usage: moem mkmodel --out DIR [--arch NAME | --preset NAME] [options]\n"
		   "Write a synthetic MoE checkpoint (config.json, safetensors, moem_synth.json)\n"
		   "with real tensor names and shapes and a structured router.\n\n"
		   "model (defaults: the architecture's preset, 4 layers, vocab 4096):\n"
		   "  --arch NAME              qwen3_moe (default), mixtral, olmoe, deepseek_v2\n"
		   "  --preset NAME            qwen3-30b-a3b, mixtral-8x7b, olmoe-1b-7b,\n"
		   "                           deepseek-v2-lite, deepseek-v2\n"
		   "  --layers L --experts E --top-k K --hidden H --moe-intermediate I\n"
		   "  --intermediate N         dense-layer MLP width\n"
		   "  --shared-experts N       deepseek_v2 shared experts\n"
		   "  --n-group G --topk-group T  deepseek_v2 group-limited routing: each token\n"
		   "                           chooses within its T best of G expert groups\n"
		   "  --first-dense N          deepseek_v2 first_k_dense_replace\n"
		   "  --heads N --kv-heads N --head-dim N --vocab N\n"
		   "  --tokenizer FILE|DIR     a Hugging Face tokenizer.json: the vocabulary is\n"
		   "                           sized to it (--vocab may only make it larger), its\n"
		   "                           files are copied in for moem pack, and config.json\n"
		   "                           takes its end-of-sequence id\n"
		   "  --dtype bf16|f16|f32     tensor dtype (default bf16)\n"
		   "  --shards N               split into N safetensors files + index\n"
		   "routing structure (Documentation/synthetic-models.md):\n"
		   "  --seed S --workloads text,math,code --zipf S --overlap X --reshuffle X\n"
		   "  --layer-corr X --persist X --drift X --seq-len N --boost X --noise X\n"
		   "  --moe-scale X            expert output RMS over the residual's (0.03)\n"
		   "  --threads N              worker threads (default: online CPUs)\n");
}

enum {
	O_ARCH = 256,
	O_PRESET,
	O_LAYERS,
	O_EXPERTS,
	O_TOPK,
	O_HIDDEN,
	O_MOE_INTER,
	O_INTER,
	O_SHARED,
	O_NGROUP,
	O_TOPKGROUP,
	O_FIRST_DENSE,
	O_HEADS,
	O_KV_HEADS,
	O_HEAD_DIM,
	O_VOCAB,
	O_DTYPE,
	O_SHARDS,
	O_SEED,
	O_WORKLOADS,
	O_ZIPF,
	O_OVERLAP,
	O_RESHUFFLE,
	O_LCORR,
	O_PERSIST,
	O_DRIFT,
	O_SEQLEN,
	O_BOOST,
	O_NOISE,
	O_MOE_SCALE,
	O_THREADS,
	O_OUT,
	O_TOKENIZER,
	O_QUIET,
	O_HELP,
};

static const struct option mk_opts[] = {
	{"arch", required_argument, NULL, O_ARCH},
	{"preset", required_argument, NULL, O_PRESET},
	{"layers", required_argument, NULL, O_LAYERS},
	{"experts", required_argument, NULL, O_EXPERTS},
	{"top-k", required_argument, NULL, O_TOPK},
	{"topk", required_argument, NULL, O_TOPK}, /* the older spelling */
	{"hidden", required_argument, NULL, O_HIDDEN},
	{"moe-intermediate", required_argument, NULL, O_MOE_INTER},
	{"intermediate", required_argument, NULL, O_INTER},
	{"shared-experts", required_argument, NULL, O_SHARED},
	{"n-group", required_argument, NULL, O_NGROUP},
	{"topk-group", required_argument, NULL, O_TOPKGROUP},
	{"first-dense", required_argument, NULL, O_FIRST_DENSE},
	{"heads", required_argument, NULL, O_HEADS},
	{"kv-heads", required_argument, NULL, O_KV_HEADS},
	{"head-dim", required_argument, NULL, O_HEAD_DIM},
	{"vocab", required_argument, NULL, O_VOCAB},
	{"dtype", required_argument, NULL, O_DTYPE},
	{"shards", required_argument, NULL, O_SHARDS},
	{"seed", required_argument, NULL, O_SEED},
	{"workloads", required_argument, NULL, O_WORKLOADS},
	{"zipf", required_argument, NULL, O_ZIPF},
	{"overlap", required_argument, NULL, O_OVERLAP},
	{"reshuffle", required_argument, NULL, O_RESHUFFLE},
	{"layer-corr", required_argument, NULL, O_LCORR},
	{"persist", required_argument, NULL, O_PERSIST},
	{"drift", required_argument, NULL, O_DRIFT},
	{"seq-len", required_argument, NULL, O_SEQLEN},
	{"boost", required_argument, NULL, O_BOOST},
	{"noise", required_argument, NULL, O_NOISE},
	{"moe-scale", required_argument, NULL, O_MOE_SCALE},
	{"threads", required_argument, NULL, O_THREADS},
	{"out", required_argument, NULL, O_OUT},
	{"tokenizer", required_argument, NULL, O_TOKENIZER},
	{"quiet", no_argument, NULL, O_QUIET},
	{"help", no_argument, NULL, O_HELP},
	{0},
};

static int parse_u64(const char *opt, const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (!*s || *end || errno || v > max || s[0] == '-') {
		fprintf(stderr, "moem mkmodel: --%s: '%s' is not an integer in 0..%llu\n", opt, s,
			(unsigned long long)max);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_f64(const char *opt, const char *s, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	if (!*s || *end || errno || !isfinite(*out)) {
		fprintf(stderr, "moem mkmodel: --%s: '%s' is not a number\n", opt, s);
		return -1;
	}
	return 0;
}

static int parse_workloads(const char *s, struct moem_synth_params *p)
{
	char buf[256], *save = NULL, *tok;
	uint32_t n = 0;

	if (strlen(s) >= sizeof(buf))
		goto bad;
	strcpy(buf, s);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (n == MOEM_SYNTH_MAX_WORKLOADS || strlen(tok) >= MOEM_SYNTH_NAME_MAX)
			goto bad;
		strcpy(p->workload[n++], tok);
	}
	if (!n)
		goto bad;
	p->n_workloads = n;
	return 0;
bad:
	fprintf(stderr,
		"moem mkmodel: --workloads: want 1..%d comma-separated names of at most %d "
		"characters\n",
		MOEM_SYNTH_MAX_WORKLOADS, MOEM_SYNTH_NAME_MAX - 1);
	return -1;
}

static const char *opt_name(int c)
{
	for (const struct option *o = mk_opts; o->name; o++)
		if (o->val == c)
			return o->name;
	return "?";
}

/* Apply one model/workload option to o; -1 after printing a message. */
static int apply(struct moem_mkmodel_opts *o, int c, const char *arg)
{
	struct moem_model_config *m = &o->cfg;
	const char *name = opt_name(c);
	uint64_t v = 0;
	double d = 0;

	switch (c) {
	case O_LAYERS:
	case O_EXPERTS:
	case O_TOPK:
	case O_HIDDEN:
	case O_MOE_INTER:
	case O_INTER:
	case O_SHARED:
	case O_NGROUP:
	case O_TOPKGROUP:
	case O_FIRST_DENSE:
	case O_HEADS:
	case O_KV_HEADS:
	case O_HEAD_DIM:
	case O_VOCAB:
	case O_SHARDS:
	case O_THREADS:
		if (parse_u64(name, arg, UINT32_MAX, &v))
			return -1;
		break;
	case O_SEED:
		if (parse_u64(name, arg, UINT64_MAX, &v))
			return -1;
		break;
	case O_ZIPF:
	case O_OVERLAP:
	case O_RESHUFFLE:
	case O_LCORR:
	case O_PERSIST:
	case O_DRIFT:
	case O_SEQLEN:
	case O_BOOST:
	case O_NOISE:
	case O_MOE_SCALE:
		if (parse_f64(name, arg, &d))
			return -1;
		break;
	default:
		break;
	}
	switch (c) {
	case O_LAYERS:
		m->n_layers = (uint32_t)v;
		break;
	case O_EXPERTS:
		m->n_experts = (uint32_t)v;
		break;
	case O_TOPK:
		m->top_k = (uint32_t)v;
		break;
	case O_HIDDEN:
		m->hidden = (uint32_t)v;
		break;
	case O_MOE_INTER:
		m->moe_inter = (uint32_t)v;
		if (m->n_shared)
			m->shared_inter = (uint32_t)v;
		break;
	case O_INTER:
		m->dense_inter = (uint32_t)v;
		break;
	case O_SHARED:
		m->n_shared = (uint32_t)v;
		m->shared_inter = v ? m->moe_inter : 0;
		break;
	case O_NGROUP:
		m->n_group = (uint32_t)v;
		break;
	case O_TOPKGROUP:
		m->topk_group = (uint32_t)v;
		break;
	case O_FIRST_DENSE:
		m->first_dense = (uint32_t)v;
		break;
	case O_HEADS:
		m->n_heads = (uint32_t)v;
		break;
	case O_KV_HEADS:
		m->n_kv_heads = (uint32_t)v;
		break;
	case O_HEAD_DIM:
		m->head_dim = (uint32_t)v;
		break;
	case O_VOCAB:
		m->vocab = (uint32_t)v;
		break;
	case O_SHARDS:
		o->shards = (uint32_t)v;
		break;
	case O_THREADS:
		o->threads = (uint32_t)v;
		break;
	case O_SEED:
		o->synth.seed = v;
		break;
	case O_ZIPF:
		o->synth.zipf_s = d;
		break;
	case O_OVERLAP:
		o->synth.overlap = d;
		break;
	case O_RESHUFFLE:
		o->synth.reshuffle = d;
		break;
	case O_LCORR:
		o->synth.layer_corr = d;
		break;
	case O_PERSIST:
		o->synth.persist = d;
		break;
	case O_DRIFT:
		o->synth.drift = d;
		break;
	case O_SEQLEN:
		o->synth.mean_seq_len = d;
		break;
	case O_BOOST:
		o->synth.boost = d;
		break;
	case O_NOISE:
		o->synth.noise = d;
		break;
	case O_MOE_SCALE:
		o->moe_scale = d;
		break;
	case O_WORKLOADS:
		return parse_workloads(arg, &o->synth);
	case O_DTYPE:
		if (!strcmp(arg, "bf16"))
			m->dtype = MOEM_DTYPE_BF16;
		else if (!strcmp(arg, "f16"))
			m->dtype = MOEM_DTYPE_F16;
		else if (!strcmp(arg, "f32"))
			m->dtype = MOEM_DTYPE_F32;
		else {
			fprintf(stderr, "moem mkmodel: --dtype: '%s' (bf16, f16, f32)\n", arg);
			return -1;
		}
		break;
	default:
		break;
	}
	return 0;
}

/*
 * --tokenizer: load it (an unsupported tokenizer is refused before any
 * weights are written), size the vocabulary to it, take its end of
 * sequence, and have moem_mkmodel() copy its files.
 */
static int size_to_tokenizer(struct moem_mkmodel_opts *o, const char *path, bool vocab_set)
{
	struct moem_tokenizer *t;
	struct moem_tok_info ti;
	int ret = moem_tok_load_path(&t, path);

	if (ret)
		return moem_tool_fail("mkmodel", ret, "--tokenizer");
	moem_tok_info(t, &ti);
	moem_tok_free(t);
	if (vocab_set && o->cfg.vocab < ti.vocab_size) {
		fprintf(stderr,
			"moem mkmodel: --vocab %u is smaller than the tokenizer's vocabulary (%u "
			"ids)\n",
			o->cfg.vocab, ti.vocab_size);
		return -1;
	}
	if (!vocab_set)
		o->cfg.vocab = ti.vocab_size;
	o->cfg.n_eos = 0;
	if (ti.eos_id >= 0 && ti.eos_id < o->cfg.vocab) {
		o->cfg.eos[0] = (int32_t)ti.eos_id;
		o->cfg.n_eos = 1;
	}
	o->tokenizer = path;
	return 0;
}

static int cmd_mkmodel(int argc, char **argv)
{
	struct {
		int c;
		const char *arg;
	} seen[64];
	enum moem_mkmodel_preset preset = MOEM_PRESET_QWEN3_30B_A3B;
	struct moem_mkmodel_opts o;
	struct moem_progress prog;
	const char *out = NULL, *tok = NULL;
	int c, ret, n_seen = 0, quiet = 0;
	uint64_t t0;
	char b[32];

	while ((c = getopt_long(argc, argv, "h", mk_opts, NULL)) != -1) {
		switch (c) {
		case O_ARCH: {
			enum moem_arch a;

			ret = moem_arch_parse(optarg, &a);
			if (ret)
				return moem_tool_fail("mkmodel", ret, "--arch");
			preset = moem_preset_of_arch(a);
			break;
		}
		case O_PRESET:
			ret = moem_preset_parse(optarg, &preset);
			if (ret)
				return moem_tool_fail("mkmodel", ret, NULL);
			break;
		case O_OUT:
			out = optarg;
			break;
		case O_TOKENIZER:
			tok = optarg;
			break;
		case O_QUIET:
			quiet = 1;
			break;
		case 'h':
		case O_HELP:
			mk_usage(stdout);
			return 0;
		case '?':
			mk_usage(stderr);
			return 2;
		default:
			if (n_seen == (int)MOEM_ARRAY_SIZE(seen)) {
				fprintf(stderr, "moem mkmodel: too many options\n");
				return 2;
			}
			seen[n_seen].c = c;
			seen[n_seen++].arg = optarg;
			break;
		}
	}
	if (optind != argc || !out) {
		fprintf(stderr, "moem mkmodel: %s\n",
			out ? "unexpected argument" : "--out DIR is required");
		mk_usage(stderr);
		return 2;
	}
	/* The preset first, then every override in command-line order. */
	moem_mkmodel_defaults(&o, preset);
	for (int i = 0; i < n_seen; i++)
		if (apply(&o, seen[i].c, seen[i].arg))
			return 2;
	if (tok) {
		bool vocab_set = false;

		for (int i = 0; i < n_seen; i++)
			vocab_set = vocab_set || seen[i].c == O_VOCAB;
		if (size_to_tokenizer(&o, tok, vocab_set))
			return 1;
	}
	o.out_dir = out;
	o.progress = quiet ? NULL : &prog;
	t0 = moem_now_ns();
	ret = moem_mkmodel(&o);
	if (ret)
		return moem_tool_fail("mkmodel", ret, NULL);
	if (!quiet) {
		struct moem_model_config *m = &o.cfg;

		printf("synthetic %s model in %s: %u layers (%u MoE) x %u experts, top-%u, "
		       "hidden %u, expert width %u, vocab %u%s, %s, %s in %.1f s\n",
		       moem_arch_name(m->arch), out, m->n_layers, moem_n_moe_layers(m),
		       m->n_experts, m->top_k, m->hidden, m->moe_inter, m->vocab,
		       tok ? " (the tokenizer's)" : "", moem_dtype_name(m->dtype),
		       moem_fmt_bytes(prog.total, b, sizeof(b)),
		       (double)(moem_now_ns() - t0) / 1e9);
	}
	return 0;
}

MOEM_CMD(mkmodel_cmd, "mkmodel", "write a synthetic MoE checkpoint (HF layout)", cmd_mkmodel);
