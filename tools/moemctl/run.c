// SPDX-License-Identifier: GPL-2.0-only
/*
 * `moemctl run`: submit a workload to moemd and show its result. On a
 * terminal a second connection polls status for a progress bar.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/progress.h>
#include <moem/util.h>

#include "moemctl.h"

void print_run(struct json_object *r)
{
	static const char *const ints[] = {"run_id", "steps", "batch"};
	char a[32], b[32];
	uint64_t steps = ju64(r, "steps");

	for (size_t i = 0; i < MOEM_ARRAY_SIZE(ints); i++)
		if (!janswer(r, "run", ints[i], JT(int)))
			return;
	if (!janswer(r, "run", "digest", JT(string)))
		return;

	printf("run %llu: %llu steps x %llu tokens%s\n", (unsigned long long)ju64(r, "run_id"),
	       (unsigned long long)steps, (unsigned long long)ju64(r, "batch"),
	       jbool(r, "stopped") ? " (stopped early)" : "");
	printf("  experts      mean T %.1f per layer; hits %llu, misses %llu, fallbacks %llu (hit "
	       "rate %.3f)\n",
	       jdbl(r, "mean_T"), (unsigned long long)ju64(r, "hits"),
	       (unsigned long long)ju64(r, "misses"), (unsigned long long)ju64(r, "fallbacks"),
	       jdbl(r, "hit_rate"));
	printf("  moved        NVMe->DRAM %s, DRAM->HBM %s; stalls %.1f ms (%.1f%% of time)\n",
	       moem_fmt_bytes(ju64(r, "bytes_nvme"), a, sizeof(a)),
	       moem_fmt_bytes(ju64(r, "bytes_h2d"), b, sizeof(b)),
	       (double)ju64(r, "stall_ns") / 1e6, jdbl(r, "stall_share") * 100);
	printf("  speed        %.1f tokens/s, %.1f ms per step; first step after %.1f ms\n",
	       jdbl(r, "tokens_per_s"),
	       steps ? (double)ju64(r, "step_ns") / (double)steps / 1e6 : 0.0,
	       (double)ju64(r, "first_step_ns") / 1e6);
	printf("  digest       %s\n", jstr(r, "digest"));
}

static const struct option run_opts[] = {
	{"workload", required_argument, NULL, 0},
	{"batch", required_argument, NULL, 0},
	{"steps", required_argument, NULL, 0},
	{"mix", required_argument, NULL, 0},
	{"seed", required_argument, NULL, 0},
	{"help", no_argument, NULL, 'h'},
	{0},
};

static void run_usage(FILE *f)
{
	fprintf(f, "usage: moemctl run [--workload synth|hidden:NAME|trace:NAME] [--batch B]\n"
		   "                   [--steps N] [--mix W:x,..] [--seed S]\n"
		   "Settings not given take moemd's defaults (its config). NAME is a file in\n"
		   "moemd's workload-dir (its configuration), read by moemd.\n");
}

/* Wait for the run's response; show progress from status meanwhile. */
static int wait_run(struct moem_ctl *c, int64_t id, struct json_object **resp)
{
	struct moem_progress prog = {0};
	struct moem_ctl *sc = NULL;
	bool bar = isatty(STDERR_FILENO) && !g.json;
	int ret;

	if (bar && moem_ctl_connect(g.socket, &sc))
		bar = false;
	for (;;) {
		struct json_object *st, *run;

		ret = moem_ctl_wait(c, id, bar ? 250 : -1, resp);
		if (ret != -ETIMEDOUT)
			break;
		if (moem_ctl_call(sc, "status", NULL, 2000, &st) == 0) {
			run = jobj(st, "run");
			if (jbool(run, "active")) {
				if (!prog.total && ju64(run, "steps"))
					moem_progress_start(&prog, "decoding", ju64(run, "steps"),
							    false);
				moem_progress_set(&prog, ju64(run, "steps_done"));
			}
		}
		json_object_put(st);
	}
	if (prog.total)
		moem_progress_finish(&prog);
	moem_ctl_close(sc);
	return ret;
}

int cmd_run(int argc, char **argv)
{
	struct json_object *args, *wl = json_object_new_object(), *r = NULL;
	struct moem_ctl *c;
	int ch, idx, ret;
	int64_t id;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", run_opts, &idx)) != -1) {
		if (ch == 'h') {
			run_usage(stdout);
			json_object_put(wl);
			return 0;
		}
		if (ch != 0) {
			run_usage(stderr);
			json_object_put(wl);
			return 2;
		}
		json_object_object_add(wl, run_opts[idx].name, json_object_new_string(optarg));
	}
	if (optind != argc) {
		run_usage(stderr);
		json_object_put(wl);
		return 2;
	}
	args = json_object_new_object();
	json_object_object_add(args, "workload", wl);
	c = ctl_connect();
	if (!c) {
		json_object_put(args);
		return 1;
	}
	ret = moem_ctl_send(c, "run", args, &id);
	if (!ret)
		ret = wait_run(c, id, &r);
	moem_ctl_close(c);
	if (g.json && r)
		print_json(r);
	if (ret) {
		json_object_put(r);
		return fail("run", ret);
	}
	if (!g.json)
		print_run(r);
	json_object_put(r);
	return g.bad_answer;
}
