// SPDX-License-Identifier: GPL-2.0-only
/*
 * moem decode: token ids in, token ids out. Each --tokens is one
 * sequence; all of them are decoded together (one batch per step,
 * prompts prefilled in chunks), with the sampling, budgets and policies
 * given. A sequence the KV budget cannot hold yet waits for others to
 * finish. --json adds timings: time to first token, decode tokens/s and
 * the split of step time between attention, the MoE half (and within it
 * waiting for experts) and the head.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <moem/decode.h>
#include <moem/engine_args.h>
#include <moem/error.h>
#include <moem/log.h>
#include <moem/util.h>

#include "cmd.h"
#include "decode_util.h"

static const struct option dec_opts[] = {
	{"pack", required_argument, NULL, 0},
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
	{"dram-nodes", required_argument, NULL, 0},
	{"link-gbps", required_argument, NULL, 0},
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
	{"tokens", required_argument, NULL, 0},
	{"max-new", required_argument, NULL, 0},
	{"temperature", required_argument, NULL, 0},
	{"top-k", required_argument, NULL, 0},
	{"top-p", required_argument, NULL, 0},
	{"min-p", required_argument, NULL, 0},
	{"repetition-penalty", required_argument, NULL, 0},
	{"presence-penalty", required_argument, NULL, 0},
	{"frequency-penalty", required_argument, NULL, 0},
	{"seed", required_argument, NULL, 0},
	{"stop", required_argument, NULL, 0},
	{"eos", required_argument, NULL, 0},
	{"no-model-eos", no_argument, NULL, 0},
	{"logprobs", required_argument, NULL, 0},
	{"logits-out", required_argument, NULL, 0},
	{"kv-bytes", required_argument, NULL, 0},
	{"kv-block", required_argument, NULL, 0},
	{"dense-prec", required_argument, NULL, 0},
	{"max-seqs", required_argument, NULL, 0},
	{"no-prefix-cache", no_argument, NULL, 0},
	{"prefill-chunk", required_argument, NULL, 0},
	{"no-warmup", no_argument, NULL, 0},
	{"json", no_argument, NULL, 0},
	{"quiet", no_argument, NULL, 0},
	{"help", no_argument, NULL, 'h'},
	{0},
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: moem decode --pack FILE --tokens ID,ID,.. [--tokens ..] [--max-new N]\n"
		"                   [--temperature T] [--top-k K] [--top-p P] [--min-p P]\n"
		"                   [--repetition-penalty R] [--presence-penalty X]\n"
		"                   [--frequency-penalty X] [--seed S] [--stop ID,..]... [--eos "
		"ID,..]\n"
		"                   [--no-model-eos] [--logprobs N] [--logits-out FILE]\n"
		"                   [--kv-bytes SIZE] [--kv-block TOKENS] [--max-seqs N]\n"
		"                   [--no-prefix-cache]\n"
		"                   [--prefill-chunk N] [--dense-prec bf16|q8|q4|q2] [--json] "
		"[--quiet]\n"
		"                   [budgets and policies as moem run: --hbm --dram --precisions\n"
		"                    --route --evict --prefetch --precision --paging --backend\n"
		"                    --exec gpu|hybrid --cpu-moe-layers N --cpu-gbps X\n"
		"                    --place RULE ... --pool --dram-nodes]\n"
		"Each --tokens is one sequence; all are decoded together as one batch.\n"
		"Greedy (temperature 0) unless --temperature is given.\n"
		"A sequence that starts when another's KV blocks hold the same first\n"
		"tokens takes them (the prefix cache; --no-prefix-cache computes all).\n"
		"--dense-prec quantizes the attention projections and an untied lm_head\n"
		"when loaded (default bf16 as packed). --no-cuda-graphs launches every\n"
		"step's kernels one by one (as MOEM_CUDA_GRAPHS=0; Documentation/engine.md).\n");
}

static int cmd_decode(int argc, char **argv)
{
	struct moem_dec_run r;
	int c, idx, ret, rc = 1;

	moem_dec_run_init(&r);
	while ((c = getopt_long(argc, argv, "h", dec_opts, &idx)) != -1) {
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
		ret = moem_dec_run_set(&r, dec_opts[idx].name, optarg ? optarg : "");
		if (ret) {
			moem_tool_fail("decode", ret, NULL);
			goto out;
		}
	}
	if (optind != argc || !r.ea.o.pack_path || !r.n_seqs) {
		fprintf(stderr, "moem decode: %s\n",
			optind != argc	    ? "unexpected argument"
			: !r.ea.o.pack_path ? "--pack is required"
					    : "--tokens is required");
		usage(stderr);
		rc = 2;
		goto out;
	}
	ret = moem_dec_run_open(&r);
	if (!ret)
		ret = moem_dec_run_all(&r);
	if (!ret)
		ret = moem_dec_run_logits_commit(&r);
	if (ret) {
		moem_tool_fail("decode", ret, NULL);
		goto out;
	}
	moem_dec_run_print(&r, stdout);
	rc = 0;
out:
	moem_dec_run_free(&r);
	return rc;
}

MOEM_CMD(decode_cmd, "decode", "generate token ids from prompts (full transformer decode)",
	 cmd_decode);
