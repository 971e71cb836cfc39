// SPDX-License-Identifier: GPL-2.0-only
/*
 * moem calibrate: measure this machine's CPU expert kernels (per
 * precision) and host -> device link for hybrid execution's cost model,
 * and cache them where the engine reads them at open (calib.h).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <moem/backend.h>
#include <moem/calib.h>
#include <moem/engine_args.h>
#include <moem/error.h>
#include <moem/util.h>

#include "cmd.h"

static void calibrate_usage(FILE *f)
{
	fprintf(f,
		"usage: moem calibrate [--out FILE] [--cpu-threads N] [--cpu-isa ISA]\n"
		"                      [--precisions LIST] [--hidden H --inter I] [--no-link]\n"
		"                      [--json]\n"
		"       moem calibrate --show [--out FILE] [--cpu-threads N] [--cpu-isa ISA]\n"
		"Measure the CPU expert kernels (GB/s of weights read at batch 1, ns per token\n"
		"at batch %d) for each precision (default bf16,q8,q4,q2) on experts of H x I\n"
		"(default 2048 x 768, Qwen3-30B-A3B) with the engine's worker threads and\n"
		"instruction set, and the host->device link (CUDA backend; none without a\n"
		"GPU). Writes them to FILE (default $XDG_CACHE_HOME/moem/calibration.json,\n"
		"else ~/.cache/moem/calibration.json), which moem run, moem decode and moemd\n"
		"read at open instead of measuring when it matches this machine (CPU model,\n"
		"threads, ISA). --show prints the cache and whether it matches.\n",
		MOEM_CALIB_TOKENS);
}

static void print_cal(const struct moem_calib *c, bool json)
{
	if (json) {
		/* the cache file's own shape, on one line */
		char *text = moem_calib_to_json(c, false);

		printf("%s\n", text ? text : "{}");
		free(text);
		return;
	}
	printf("machine   %s, %u threads, %s\n", c->cpu_model, c->threads,
	       moem_cpu_isa_name(c->isa));
	printf("experts   %u x %u\n", c->hidden, c->inter);
	for (int p = 0; p < MOEM_PREC_NR; p++)
		if (c->cpu[p].valid)
			printf("cpu %-5s %8.2f GB/s at batch 1, %8llu ns per token at batch %d, "
			       "%llu ns per call\n",
			       moem_prec_name((enum moem_prec)p), c->cpu[p].gbps,
			       (unsigned long long)c->cpu[p].token_ns, MOEM_CALIB_TOKENS,
			       (unsigned long long)c->cpu[p].call_ns);
	if (c->link_gbps > 0)
		printf("link      %.2f GB/s host->device\n", c->link_gbps);
	else
		printf("link      none%s%s\n", c->link_note[0] ? ": " : "", c->link_note);
}

static int show(const char *path, const struct moem_calib *here, bool json)
{
	struct moem_calib c;
	char why[512];
	int ret = moem_calib_read(path, &c);

	if (ret == -ENOENT) {
		fprintf(stderr, "moem calibrate: no cache at %s\n", path);
		return 1;
	}
	if (ret)
		return moem_tool_fail("calibrate", ret, NULL);
	print_cal(&c, json);
	if (!json) {
		if (moem_calib_matches(&c, here, why, sizeof(why)))
			printf("%s: matches this machine\n", path);
		else
			printf("%s: not used here: %s\n", path, why);
	}
	return 0;
}

static int cmd_calibrate(int argc, char **argv)
{
	static const struct option opts[] = {
		{"out", required_argument, NULL, 'o'},
		{"cpu-threads", required_argument, NULL, 't'},
		{"cpu-isa", required_argument, NULL, 'i'},
		{"precisions", required_argument, NULL, 'p'},
		{"hidden", required_argument, NULL, 'H'},
		{"inter", required_argument, NULL, 'I'},
		{"no-link", no_argument, NULL, 'L'},
		{"show", no_argument, NULL, 's'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct moem_engine_args ea;
	struct moem_backend_opts bo = {0};
	struct moem_backend_info bi;
	struct moem_backend *be = NULL;
	struct moem_calib c;
	uint32_t mask = 0xf, hidden = 2048, inter = 768;
	bool json = false, no_link = false, do_show = false;
	char path[4096] = "";
	int ch, ret, rc = 1;

	moem_engine_args_init(&ea);
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		char *end;
		unsigned long v;

		switch (ch) {
		case 'o':
			if (snprintf(path, sizeof(path), "%s", optarg) >= (int)sizeof(path)) {
				fprintf(stderr, "moem calibrate: --out: path too long\n");
				goto usage;
			}
			break;
		case 't':
			ret = moem_engine_args_set(&ea, "cpu-threads", optarg);
			if (ret) {
				moem_tool_fail("calibrate", ret, "--cpu-threads");
				goto usage;
			}
			break;
		case 'i':
			ret = moem_engine_args_set(&ea, "cpu-isa", optarg);
			if (ret) {
				moem_tool_fail("calibrate", ret, "--cpu-isa");
				goto usage;
			}
			break;
		case 'p':
			ret = moem_prec_parse_list(optarg, &mask);
			if (ret) {
				moem_tool_fail("calibrate", ret, "--precisions");
				goto usage;
			}
			break;
		case 'H':
		case 'I':
			v = strtoul(optarg, &end, 10);
			if (!*optarg || *end || !v || v > 65536) {
				fprintf(stderr, "moem calibrate: --%s must be 1..65536\n",
					ch == 'H' ? "hidden" : "inter");
				goto usage;
			}
			*(ch == 'H' ? &hidden : &inter) = (uint32_t)v;
			break;
		case 'L':
			no_link = true;
			break;
		case 's':
			do_show = true;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			calibrate_usage(stdout);
			rc = 0;
			goto out;
		default:
			goto usage;
		}
	}
	if (optind != argc)
		goto usage;
	if (!path[0]) {
		ret = moem_calib_default_path(path, sizeof(path));
		if (ret) {
			rc = moem_tool_fail("calibrate", ret, "give --out FILE");
			goto out;
		}
	}
	/* the engine's CPU executor, as it opens it: same threads, same ISA */
	bo.threads = ea.o.threads;
	bo.isa = ea.o.cpu_isa;
	ret = moem_backend_open("cpu", &bo, &be);
	if (ret) {
		rc = moem_tool_fail("calibrate", ret, "the CPU backend");
		goto out;
	}
	moem_backend_get_info(be, &bi);
	moem_calib_machine(bi.threads, bi.isa, &c);
	if (do_show) {
		rc = show(path, &c, json);
		goto out;
	}
	c.hidden = hidden;
	c.inter = inter;
	c.created = (int64_t)time(NULL);
	for (int p = 0; p < MOEM_PREC_NR; p++) {
		if (!(mask & (1u << p)))
			continue;
		if (!json)
			fprintf(stderr, "moem calibrate: %s experts on %u threads (%s)...\n",
				moem_prec_name((enum moem_prec)p), bi.threads,
				moem_cpu_isa_name(bi.isa));
		ret = moem_calib_cpu_measure(be, (enum moem_prec)p, hidden, inter, &c.cpu[p], NULL);
		if (ret) {
			rc = moem_tool_fail("calibrate", ret, moem_prec_name((enum moem_prec)p));
			goto out;
		}
	}
	if (no_link)
		snprintf(c.link_note, sizeof(c.link_note), "not measured (--no-link)");
	else
		moem_calib_link(&c); /* none: the note says why */
	ret = moem_calib_write(path, &c);
	if (ret) {
		rc = moem_tool_fail("calibrate", ret, NULL);
		goto out;
	}
	print_cal(&c, json);
	if (!json)
		printf("written to %s\n", path);
	rc = 0;
	goto out;
usage:
	calibrate_usage(stderr);
	rc = 2;
out:
	moem_backend_close(be);
	moem_engine_args_free(&ea);
	return rc;
}

MOEM_CMD(calibrate_cmd, "calibrate", "measure the CPU expert kernels and the link, and cache them",
	 cmd_calibrate);
