// SPDX-License-Identifier: GPL-2.0-only
/*
 * moem trace: make and inspect routing traces.
 *   gen     synthetic trace from the structured workload (synth.h)
 *   info    header and per-trace statistics
 *   dump    JSON lines (one header line, one line per record)
 *   import  JSON lines -> binary trace (how an engine run or any other
 *           router log becomes a trace)
 *   record, top, pool: eBPF tracing (cmd_trace_bpf.c)
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/error.h>
#include <moem/progress.h>
#include <moem/route.h>
#include <moem/trace.h>

#include "cmd.h"
#include "cmd_trace_bpf.h"

static void trace_usage(FILE *f)
{
	fprintf(f, "usage: moem trace gen --seed S --out FILE [options]\n"
		   "       moem trace info FILE [--json]\n"
		   "       moem trace dump FILE            (JSON lines on stdout)\n"
		   "       moem trace import --out FILE [IN.jsonl|-]\n"
		   "       moem trace record -o FILE (--pid P | --exec BIN [ARGS...])  (eBPF)\n"
		   "       moem trace top (--pid P | --exec BIN [ARGS...] | --binary PATH)\n"
		   "       moem trace pool                 (moem.ko events)\n"
		   "\n"
		   "gen options (defaults: Qwen3-30B-A3B shape and synth.h defaults):\n"
		   "  --layers L (48)  --experts N (128)  --top-k K (8)  --batch B (1)\n"
		   "  --steps S (1000) --mix text:0.5,math:0.3,code:0.2 (uniform)\n"
		   "  --workloads a,b,c  --zipf S (1.7)  --overlap X (0.8) --reshuffle X (0.1)\n"
		   "  --layer-corr X (0.6) --persist X (0.5) --drift X (0.02) --seq-len X (256)\n"
		   "  --boost X (4.5) --noise X (0.5)\n"
		   "  --pregate D (2)  pre-gate picks of the D layers ahead in every record\n"
		   "  --hidden H --inter I (2048, 768)  expert shape the header records\n"
		   "  --uniform        uniform routing: zipf 0, no layer correlation,\n"
		   "                   persistence or drift (E[T] = N(1-(1-k/N)^B))\n"
		   "  --model DIR      take the workload and expert shape of a synthetic model\n"
		   "                   (DIR/moem_synth.json, DIR/config.json)\n"
		   "  --logits         store router logits (needed to re-route: lynx, oea, "
		   "piggyback)\n");
}

static int parse_u64(const char *s, const char *what, uint64_t lo, uint64_t hi, uint64_t *v)
{
	char *end;
	unsigned long long x;

	errno = 0;
	x = strtoull(s, &end, 0);
	if (!*s || *end || errno || s[0] == '-' || x < lo || x > hi) {
		fprintf(stderr,
			"moem trace: %s: '%s' is not an integer in %" PRIu64 "..%" PRIu64 "\n",
			what, s, lo, hi);
		return -1;
	}
	*v = x;
	return 0;
}

static int parse_dbl(const char *s, const char *what, double *v)
{
	char *end;

	*v = strtod(s, &end);
	if (!*s || *end) {
		fprintf(stderr, "moem trace: %s: '%s' is not a number\n", what, s);
		return -1;
	}
	return 0;
}

static int load_model_synth(const char *dir, struct moem_synth_params *p)
{
	char path[4096];
	struct json_object *o;
	int ret;

	snprintf(path, sizeof(path), "%s/moem_synth.json", dir);
	o = json_object_from_file(path);
	if (!o)
		return moem_errf(ENOENT, "%s: cannot read or parse", path);
	ret = moem_synth_from_json(o, p);
	json_object_put(o);
	return ret;
}

/* The expert shape of a model directory's config.json (0 where it says none). */
static void load_model_shape(const char *dir, uint32_t *hidden, uint32_t *inter)
{
	char path[4096];
	struct json_object *o, *v;

	snprintf(path, sizeof(path), "%s/config.json", dir);
	o = json_object_from_file(path);
	if (!o)
		return;
	if (json_object_object_get_ex(o, "hidden_size", &v))
		*hidden = (uint32_t)json_object_get_int(v);
	if (json_object_object_get_ex(o, "moe_intermediate_size", &v) ||
	    json_object_object_get_ex(o, "intermediate_size", &v))
		*inter = (uint32_t)json_object_get_int(v);
	json_object_put(o);
}

static void gen_progress(void *arg, uint64_t step)
{
	moem_progress_set(arg, step);
}

enum {
	O_LAYERS = 256,
	O_EXPERTS,
	O_TOPK,
	O_BATCH,
	O_STEPS,
	O_MIX,
	O_WORKLOADS,
	O_ZIPF,
	O_OVERLAP,
	O_RESHUFFLE,
	O_CORR,
	O_PERSIST,
	O_DRIFT,
	O_SEQLEN,
	O_BOOST,
	O_NOISE,
	O_UNIFORM,
	O_MODEL,
	O_LOGITS,
	O_SEED,
	O_OUT,
	O_PREGATE,
	O_HIDDEN,
	O_INTER,
};

static int trace_gen(int argc, char **argv)
{
	static const struct option opts[] = {
		{"layers", required_argument, NULL, O_LAYERS},
		{"experts", required_argument, NULL, O_EXPERTS},
		{"top-k", required_argument, NULL, O_TOPK},
		{"topk", required_argument, NULL, O_TOPK}, /* as mkmodel once spelt it */
		{"batch", required_argument, NULL, O_BATCH},
		{"steps", required_argument, NULL, O_STEPS},
		{"mix", required_argument, NULL, O_MIX},
		{"workloads", required_argument, NULL, O_WORKLOADS},
		{"zipf", required_argument, NULL, O_ZIPF},
		{"overlap", required_argument, NULL, O_OVERLAP},
		{"reshuffle", required_argument, NULL, O_RESHUFFLE},
		{"layer-corr", required_argument, NULL, O_CORR},
		{"persist", required_argument, NULL, O_PERSIST},
		{"drift", required_argument, NULL, O_DRIFT},
		{"seq-len", required_argument, NULL, O_SEQLEN},
		{"boost", required_argument, NULL, O_BOOST},
		{"noise", required_argument, NULL, O_NOISE},
		{"uniform", no_argument, NULL, O_UNIFORM},
		{"model", required_argument, NULL, O_MODEL},
		{"logits", no_argument, NULL, O_LOGITS},
		{"seed", required_argument, NULL, O_SEED},
		{"out", required_argument, NULL, O_OUT},
		{"help", no_argument, NULL, 'h'},
		{"pregate", required_argument, NULL, O_PREGATE},
		{"hidden", required_argument, NULL, O_HIDDEN},
		{"inter", required_argument, NULL, O_INTER},
		{0},
	};
	/* Shape and scalar overrides are applied after --model, in this order. */
	uint64_t L = 48, N = 128, K = 8, B = 1, steps = 1000, seed = 0, D = 2, H = 0, I = 0;
	double d[9];
	bool set_d[9] = {false}, have_seed = false, uniform = false, shape_set = false;
	const char *mix = NULL, *workloads = NULL, *model = NULL, *out = NULL;
	struct moem_trace_gen_opts o = {0};
	struct moem_trace_writer *w;
	struct moem_trace_info info;
	struct moem_progress prog;
	double mixv[MOEM_SYNTH_MAX_WORKLOADS];
	int c, ret;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_LAYERS:
			shape_set = true;
			if (parse_u64(optarg, "--layers", 1, MOEM_TRACE_MAX_LAYERS, &L))
				return 2;
			break;
		case O_EXPERTS:
			shape_set = true;
			if (parse_u64(optarg, "--experts", 2, MOEM_TRACE_MAX_EXPERTS, &N))
				return 2;
			break;
		case O_TOPK:
			shape_set = true;
			if (parse_u64(optarg, "--top-k", 1, MOEM_TRACE_MAX_TOPK, &K))
				return 2;
			break;
		case O_PREGATE:
			if (parse_u64(optarg, "--pregate", 0, MOEM_TRACE_MAX_PREGATE, &D))
				return 2;
			break;
		case O_HIDDEN:
			if (parse_u64(optarg, "--hidden", 1, 65536, &H))
				return 2;
			break;
		case O_INTER:
			if (parse_u64(optarg, "--inter", 1, 65536, &I))
				return 2;
			break;
		case O_BATCH:
			if (parse_u64(optarg, "--batch", 1, MOEM_TRACE_MAX_TOKENS, &B))
				return 2;
			break;
		case O_STEPS:
			if (parse_u64(optarg, "--steps", 1, 1ull << 40, &steps))
				return 2;
			break;
		case O_SEED:
			if (parse_u64(optarg, "--seed", 0, UINT64_MAX, &seed))
				return 2;
			have_seed = true;
			break;
		case O_MIX:
			mix = optarg;
			break;
		case O_WORKLOADS:
			workloads = optarg;
			break;
		case O_MODEL:
			model = optarg;
			break;
		case O_OUT:
			out = optarg;
			break;
		case O_UNIFORM:
			uniform = true;
			break;
		case O_LOGITS:
			o.logits = true;
			break;
		case O_ZIPF ... O_NOISE:
			if (parse_dbl(optarg, opts[c - O_LAYERS].name, &d[c - O_ZIPF]))
				return 2;
			set_d[c - O_ZIPF] = true;
			break;
		case 'h':
			trace_usage(stdout);
			return 0;
		default:
			trace_usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !out || !have_seed) {
		fprintf(stderr, "moem trace gen: %s\n",
			optind != argc ? "unexpected argument"
			: !out	       ? "--out FILE is required"
				       : "--seed S is required");
		return 2;
	}
	if (model) {
		if (shape_set) {
			fprintf(stderr, "moem trace gen: --model fixes the shape; drop --layers/"
					"--experts/--top-k\n");
			return 2;
		}
		ret = load_model_synth(model, &o.synth);
		if (ret)
			return moem_tool_fail("trace gen", ret, "--model");
		o.synth.seed = seed;
	} else {
		moem_synth_defaults(&o.synth, (uint32_t)L, (uint32_t)N, (uint32_t)K, seed);
	}
	if (workloads) {
		char buf[256], *save = NULL, *tok;
		uint32_t n = 0;

		snprintf(buf, sizeof(buf), "%s", workloads);
		for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			if (n == MOEM_SYNTH_MAX_WORKLOADS || strlen(tok) >= MOEM_SYNTH_NAME_MAX) {
				fprintf(stderr,
					"moem trace gen: --workloads: at most %d names of "
					"< %d characters\n",
					MOEM_SYNTH_MAX_WORKLOADS, MOEM_SYNTH_NAME_MAX);
				return 2;
			}
			strcpy(o.synth.workload[n++], tok);
		}
		o.synth.n_workloads = n;
	}
	if (uniform) {
		o.synth.zipf_s = 0;
		o.synth.layer_corr = 0;
		o.synth.persist = 0;
		o.synth.drift = 0;
	}
	{
		double *dst[9] = {&o.synth.zipf_s,	 &o.synth.overlap, &o.synth.reshuffle,
				  &o.synth.layer_corr,	 &o.synth.persist, &o.synth.drift,
				  &o.synth.mean_seq_len, &o.synth.boost,   &o.synth.noise};

		for (int i = 0; i < 9; i++)
			if (set_d[i])
				*dst[i] = d[i];
	}
	ret = moem_synth_validate(&o.synth);
	if (!ret)
		ret = moem_synth_parse_mix(&o.synth, mix, mixv);
	if (ret)
		return moem_tool_fail("trace gen", ret, NULL);
	o.mix = mixv;
	o.batch = (uint32_t)B;
	o.steps = steps;
	o.pregate = (uint32_t)D;
	o.hidden = 2048; /* Qwen3-30B-A3B experts, the default shape */
	o.moe_inter = 768;
	if (model)
		load_model_shape(model, &o.hidden, &o.moe_inter);
	if (H)
		o.hidden = (uint32_t)H;
	if (I)
		o.moe_inter = (uint32_t)I;
	moem_trace_gen_info(&o, &info);
	ret = moem_trace_writer_open(out, &info, &w);
	if (ret)
		return moem_tool_fail("trace gen", ret, NULL);
	moem_progress_start(&prog, "trace gen", steps, false);
	ret = moem_trace_gen(&o, w, gen_progress, &prog);
	moem_progress_finish(&prog);
	if (ret) {
		moem_trace_writer_abort(w);
		return moem_tool_fail("trace gen", ret, NULL);
	}
	ret = moem_trace_writer_close(w);
	if (ret)
		return moem_tool_fail("trace gen", ret, NULL);
	fprintf(stderr, "moem trace gen: %s: %" PRIu64 " steps x %u layers, batch %u (synthetic)\n",
		out, steps, o.synth.n_layers, o.batch);
	return 0;
}

static int trace_info(int argc, char **argv)
{
	struct moem_route_cfg rc;
	struct moem_trace_reader *r;
	const struct moem_trace_info *in;
	struct moem_trace_rec rec;
	uint64_t recs = 0, tokens = 0, tsum = 0, steps = 0, last = UINT64_MAX;
	bool json = false;
	const char *path = NULL;
	int ret;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!path && argv[i][0] != '-')
			path = argv[i];
		else {
			trace_usage(stderr);
			return 2;
		}
	}
	if (!path) {
		trace_usage(stderr);
		return 2;
	}
	ret = moem_trace_open(path, &r);
	if (ret)
		return moem_tool_fail("trace info", ret, NULL);
	in = moem_trace_reader_info(r);
	rc = (struct moem_route_cfg){in->n_experts, in->top_k, true, 1.0f};
	while ((ret = moem_trace_next(r, &rec)) > 0) {
		struct moem_route_out o = {(int32_t *)rec.ids, (float *)rec.w, (uint32_t *)rec.cnt};

		recs++;
		tokens += rec.tokens;
		tsum += moem_route_active(&rc, rec.tokens, &o, NULL);
		if (rec.step != last) {
			steps++;
			last = rec.step;
		}
	}
	if (ret < 0) {
		moem_trace_close(r);
		return moem_tool_fail("trace info", ret, NULL);
	}
	if (json) {
		printf("{\"version\":\"%u.%u\",\"source\":\"%s\",\"synthetic\":%s,\"logits\":%s,"
		       "\"n_layers\":%u,\"n_experts\":%u,\"top_k\":%u,\"max_tokens\":%u,"
		       "\"hidden\":%u,\"moe_inter\":%u,\"pregate_depth\":%u,"
		       "\"n_group\":%u,\"topk_group\":%u,"
		       "\"seed\":%" PRIu64 ",\"records\":%" PRIu64 ",\"steps\":%" PRIu64
		       ",\"mean_tokens\":%.3f,\"mean_T\":%.4f}\n",
		       in->version_major, in->version_minor, moem_trace_source_name(in->source),
		       in->flags & MOEM_TRACE_F_SYNTHETIC ? "true" : "false",
		       in->flags & MOEM_TRACE_F_LOGITS ? "true" : "false", in->n_layers,
		       in->n_experts, in->top_k, in->max_tokens, in->hidden, in->moe_inter,
		       in->pregate_depth, in->n_group, in->topk_group, in->seed, recs, steps,
		       recs ? (double)tokens / recs : 0.0, recs ? (double)tsum / recs : 0.0);
	} else {
		printf("trace %s (format %u.%u)\n", path, in->version_major, in->version_minor);
		printf("  source:     %s%s\n", moem_trace_source_name(in->source),
		       in->flags & MOEM_TRACE_F_SYNTHETIC ? " (synthetic)" : "");
		printf("  desc:       %s\n", in->desc);
		printf("  shape:      %u MoE layers, %u experts, top-%u\n", in->n_layers,
		       in->n_experts, in->top_k);
		printf("  logits:     %s\n", in->flags & MOEM_TRACE_F_LOGITS ? "yes" : "no");
		if (in->n_group)
			printf("  routing:    within the best %u of %u expert groups\n",
			       in->topk_group, in->n_group);
		if (in->hidden)
			printf("  experts:    hidden %u, width %u\n", in->hidden, in->moe_inter);
		printf("  pre-gate:   %s%.0u\n", in->pregate_depth ? "layers ahead: " : "none",
		       in->pregate_depth);
		printf("  records:    %" PRIu64 " (%" PRIu64 " steps), max batch %u\n", recs, steps,
		       in->max_tokens);
		printf("  mean batch: %.2f tokens; mean T %.2f experts per layer-step\n",
		       recs ? (double)tokens / recs : 0.0, recs ? (double)tsum / recs : 0.0);
	}
	moem_trace_close(r);
	return 0;
}

static int trace_dump(int argc, char **argv)
{
	struct moem_trace_reader *r;
	int64_t n;
	int ret;

	if (argc != 2 || argv[1][0] == '-') {
		trace_usage(stderr);
		return 2;
	}
	ret = moem_trace_open(argv[1], &r);
	if (ret)
		return moem_tool_fail("trace dump", ret, NULL);
	n = moem_trace_dump_json(r, stdout);
	moem_trace_close(r);
	if (n < 0)
		return moem_tool_fail("trace dump", (int)n, NULL);
	return 0;
}

static int trace_import(int argc, char **argv)
{
	const char *out = NULL, *in = "-";
	uint64_t n = 0;
	FILE *f = stdin;
	int ret;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--out") && i + 1 < argc)
			out = argv[++i];
		else if (!strcmp(argv[i], "-") || argv[i][0] != '-')
			in = argv[i];
		else {
			trace_usage(stderr);
			return 2;
		}
	}
	if (!out) {
		fprintf(stderr, "moem trace import: --out FILE is required\n");
		return 2;
	}
	if (strcmp(in, "-")) {
		f = fopen(in, "r");
		if (!f) {
			fprintf(stderr, "moem trace import: %s: %s\n", in, strerror(errno));
			return 1;
		}
	}
	ret = moem_trace_import_json(f, strcmp(in, "-") ? in : "(stdin)", out, &n);
	if (f != stdin)
		fclose(f);
	if (ret)
		return moem_tool_fail("trace import", ret, NULL);
	fprintf(stderr, "moem trace import: %s: %" PRIu64 " records\n", out, n);
	return 0;
}

static int cmd_trace(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		trace_usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "gen"))
		return trace_gen(argc - 1, argv + 1);
	if (!strcmp(argv[1], "info"))
		return trace_info(argc - 1, argv + 1);
	if (!strcmp(argv[1], "dump"))
		return trace_dump(argc - 1, argv + 1);
	if (!strcmp(argv[1], "import"))
		return trace_import(argc - 1, argv + 1);
	if (!strcmp(argv[1], "record"))
		return cmd_trace_record(argc - 1, argv + 1);
	if (!strcmp(argv[1], "top"))
		return cmd_trace_top(argc - 1, argv + 1);
	if (!strcmp(argv[1], "pool"))
		return cmd_trace_pool(argc - 1, argv + 1);
	fprintf(stderr, "moem trace: unknown subcommand '%s'\n", argv[1]);
	trace_usage(stderr);
	return 2;
}

MOEM_CMD(trace_cmd, "trace", "generate, inspect, dump, import and record routing traces",
	 cmd_trace);
