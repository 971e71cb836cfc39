// SPDX-License-Identifier: GPL-2.0-only
/* moem pack: checkpoint directory -> .moem pack, with a quantization error report. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/pack.h>
#include <moem/util.h>

#include "cmd.h"
#include "qerr_report.h"

static void pack_usage(FILE *f)
{
	fprintf(f, "usage: moem pack --model DIR --out FILE [--precisions bf16,q4[,q2,q8]]\n"
		   "                 [--threads N] [--report-experts N] [--no-report] [--quiet]\n"
		   "Write a .moem pack (Documentation/pack-format.md) from a Hugging Face\n"
		   "checkpoint directory; routed experts in every listed precision (default\n"
		   "bf16,q4), shared experts and dense MLPs in bf16. Then print the expert\n"
		   "FFN output error of each quantized precision against bf16.\n");
}

static int parse_count(const char *opt, const char *s, uint32_t *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (!*s || *end || errno || v > 1000000 || s[0] == '-') {
		fprintf(stderr, "moem pack: --%s: '%s' is not a count\n", opt, s);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

static int cmd_pack(int argc, char **argv)
{
	static const struct option opts[] = {
		{"model", required_argument, NULL, 'm'},
		{"out", required_argument, NULL, 'o'},
		{"precisions", required_argument, NULL, 'p'},
		{"threads", required_argument, NULL, 't'},
		{"report-experts", required_argument, NULL, 'r'},
		{"no-report", no_argument, NULL, 'R'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct moem_pack_opts o = {0};
	struct moem_progress prog;
	const char *precs = "bf16,q4";
	uint32_t report_experts = 8;
	int c, ret, quiet = 0, report = 1;
	struct moem_pack *p;
	struct moem_pack_id id;
	uint64_t t0;
	char b1[32], idbuf[33];

	while ((c = getopt_long(argc, argv, "m:o:p:t:r:Rqh", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			o.model_dir = optarg;
			break;
		case 'o':
			o.out_path = optarg;
			break;
		case 'p':
			precs = optarg;
			break;
		case 't':
			if (parse_count("threads", optarg, &o.threads))
				return 2;
			break;
		case 'r':
			if (parse_count("report-experts", optarg, &report_experts))
				return 2;
			break;
		case 'R':
			report = 0;
			break;
		case 'q':
			quiet = 1;
			break;
		case 'h':
			pack_usage(stdout);
			return 0;
		default:
			pack_usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !o.model_dir || !o.out_path) {
		fprintf(stderr, "moem pack: --model DIR and --out FILE are required\n");
		pack_usage(stderr);
		return 2;
	}
	ret = moem_prec_parse_list(precs, &o.prec_mask);
	if (ret)
		return moem_tool_fail("pack", ret, "--precisions");
	o.progress = quiet ? NULL : &prog;
	t0 = moem_now_ns();
	ret = moem_pack_write(&o);
	if (ret)
		return moem_tool_fail("pack", ret, NULL);
	ret = moem_pack_open(o.out_path, &p);
	if (ret)
		return moem_tool_fail("pack", ret, "reopening the pack");
	moem_pack_get_id(p, &id);
	if (!quiet)
		printf("wrote %s: %s, %u tensors, %u blobs, precisions %s, id %s, in %.1f s\n",
		       o.out_path, moem_fmt_bytes(moem_pack_file_size(p), b1, sizeof(b1)),
		       moem_pack_n_tensors(p), moem_pack_n_blobs(p), precs,
		       moem_pack_id_str(&id, idbuf), (double)(moem_now_ns() - t0) / 1e9);
	if (report && !quiet && report_experts && (o.prec_mask & 1u) && (o.prec_mask & ~1u)) {
		ret = moem_tool_qerr_report(p, report_experts, 4, 1, o.threads);
		if (ret) {
			moem_pack_close(p);
			return moem_tool_fail("pack", ret, "quantization error report");
		}
	}
	moem_pack_close(p);
	return 0;
}

MOEM_CMD(pack_cmd, "pack", "write a .moem pack from a Hugging Face checkpoint", cmd_pack);
