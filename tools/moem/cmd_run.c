// SPDX-License-Identifier: GPL-2.0-only
/*
 * moem run: decode a workload on a pack under HBM and DRAM budgets and
 * report what moved, how often the GPU waited, and a digest of the final
 * hidden states (two runs agree iff their digests do).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include <moem/bpf.h>
#include <moem/settings.h>
#include <moem/engine.h>
#include <moem/engine_args.h>
#include <moem/error.h>
#include <moem/log.h>
#include <moem/progress.h>
#include <moem/util.h>

#include "cmd.h"

struct run_args {
	struct moem_engine_args ea;
	char *counts_out;
	bool json, no_warmup, quiet;
	struct moem_progress prog;
	int ready_fd; /* "step N" lines as steps complete (scripts wait on them) */
	int until_fd; /* run until this reads EOF */
	int eof;      /* it did (atomic) */
	struct moem_engine *e;
};

static const struct option run_opts[] = {
	{"pack", required_argument, NULL, 0},
	{"hbm", required_argument, NULL, 0},
	{"dram", required_argument, NULL, 0},
	{"batch", required_argument, NULL, 0},
	{"steps", required_argument, NULL, 0},
	{"workload", required_argument, NULL, 0},
	{"mix", required_argument, NULL, 0},
	{"seed", required_argument, NULL, 0},
	{"precisions", required_argument, NULL, 0},
	{"fallback", no_argument, NULL, 0},
	{"route", required_argument, NULL, 0},
	{"evict", required_argument, NULL, 0},
	{"dram-evict", required_argument, NULL, 0},
	{"prefetch", required_argument, NULL, 0},
	{"precision", required_argument, NULL, 0},
	{"paging", required_argument, NULL, 0},
	{"backend", required_argument, NULL, 0},
	{"threads", required_argument, NULL, 0},
	{"cpu-threads", required_argument, NULL, 0},
	{"cpu-isa", required_argument, NULL, 0},
	{"pool", required_argument, NULL, 0},
	{"region", required_argument, NULL, 0},
	{"persistent", no_argument, NULL, 0},
	{"link-gbps", required_argument, NULL, 0},
	{"exec", required_argument, NULL, 0},
	{"cpu-moe-layers", required_argument, NULL, 0},
	{"cpu-gbps", required_argument, NULL, 0},
	{"cpu-token-ns", required_argument, NULL, 0},
	{"cpu-call-ns", required_argument, NULL, 0},
	{"place", required_argument, NULL, 0},
	{"calibration", required_argument, NULL, 0},
	{"loader", required_argument, NULL, 0},
	{"no-verify", no_argument, NULL, 0},
	{"trace-out", required_argument, NULL, 0},
	{"trace-logits", no_argument, NULL, 0},
	{"hotness", required_argument, NULL, 0},
	{"pregate", required_argument, NULL, 0},
	{"hbm-mode", required_argument, NULL, 0},
	{"mem-reserve", required_argument, NULL, 0},
	{"dram-nodes", required_argument, NULL, 0},
	{"require-pinned", no_argument, NULL, 0},
	{"counts-out", required_argument, NULL, 0},
	{"ready-fd", required_argument, NULL, 0},
	{"until-eof", required_argument, NULL, 0},
	{"no-warmup", no_argument, NULL, 0},
	{"config", required_argument, NULL, 0},
	{"json", no_argument, NULL, 0},
	{"quiet", no_argument, NULL, 0},
	{"help", no_argument, NULL, 'h'},
	{0},
};

static void run_usage(FILE *f)
{
	fprintf(f,
		"usage: moem run --pack FILE [--hbm SIZE|PCT%%] [--dram SIZE|PCT%%] [--batch B]\n"
		"                [--steps N] [--workload synth|hidden:FILE|trace:FILE] [--mix "
		"W:x,..]\n"
		"                [--seed S] [--precisions HI[,LO]] [--fallback]\n"
		"                [--route none|lynx|oea|cache-aware|piggyback[:k=v,..]]\n"
		"                [--evict lru|lru2|lfu|pred] [--prefetch none|adaptive|fixed:S=N]\n"
		"                [--dram-evict lru|policy|hbm-first]\n"
		"                [--precision none|dynaexq] [--paging none|fluxmoe]\n"
		"                [--backend auto|cpu|cuda] [--cpu-threads N]\n"
		"                [--cpu-isa auto|scalar|avx2|avx512] [--pool "
		"auto|kmod|hugetlb|thp]\n"
		"                [--region NAME] [--persistent] [--link-gbps X] [--loader MODE]\n"
		"                [--trace-out FILE [--trace-logits]] [--no-warmup] [--no-verify]\n"
		"                [--hotness engine|bpf] [--pregate D] [--counts-out FILE]\n"
		"                [--hbm-mode vmm|uvm]\n"
		"                [--exec gpu|hybrid] [--cpu-moe-layers N] [--cpu-gbps X]\n"
		"                [--cpu-token-ns NS] [--cpu-call-ns NS] [--place RULE]...\n"
		"                [--calibration FILE|none]\n"
		"                [--mem-reserve SIZE|PCT%%] [--require-pinned]\n"
		"                [--dram-nodes all|LIST]\n"
		"                [--ready-fd FD] [--until-eof FD]\n"
		"                [--config FILE] [--json] [--quiet]\n"
		"Sizes take K/M/G/T suffixes, or a percentage of the pack's expert bytes.\n"
		"--pregate D: the next D layers' routers on each MoE layer's input guide\n"
		"prefetch, paging and pred (default 2, 0 none).\n"
		"A config file holds the same settings as 'name = value' lines.\n"
		"--exec hybrid computes each expert not in HBM on the CPU, from DRAM, when\n"
		"the cost model says it is cheaper than loading it; --cpu-moe-layers N puts\n"
		"the experts of the first N MoE layers on the CPU always; --cpu-gbps X gives\n"
		"the CPU kernels' throughput instead of measuring it at start or reading it\n"
		"from moem calibrate's cache (--calibration: another file, or none).\n"
		"--place [layers=LIST][,experts=LIST]:cpu|gpu|auto places experts by MoE\n"
		"layer and expert (LIST: N, N-M, * separated by commas), repeatable: the\n"
		"first matching rule wins, --cpu-moe-layers N is layers=0-(N-1):cpu after\n"
		"them; cpu: always on the CPU, never in HBM; gpu: never on the CPU.\n"
		"--ready-fd FD writes \"step N\" to FD as each step completes; --until-eof FD\n"
		"ends the run (after its current step) when FD reads end-of-file, so that a\n"
		"script decides how long it lasts (with --steps as the upper bound).\n");
}

static int apply(struct run_args *a, const char *name, const char *v)
{
	int ret = moem_engine_args_set(&a->ea, name, v);

	if (ret != -ENOENT)
		return ret;
	if (!strcmp(name, "counts-out")) {
		char *s = strdup(v);

		if (!s)
			return -ENOMEM;
		free(a->counts_out);
		a->counts_out = s;
		return 0;
	}
	if (!strcmp(name, "ready-fd") || !strcmp(name, "until-eof")) {
		char *end;
		long fd = strtol(v, &end, 10);

		if (!*v || *end || fd < 0 || fd > 1023 || fcntl((int)fd, F_GETFD) < 0)
			return moem_errf(EBADF, "--%s %s: not an open file descriptor", name, v);
		*(name[0] == 'r' ? &a->ready_fd : &a->until_fd) = (int)fd;
		return 0;
	}
	if (!strcmp(name, "no-warmup"))
		return moem_arg_bool(name, v, &a->no_warmup);
	if (!strcmp(name, "json"))
		return moem_arg_bool(name, v, &a->json);
	if (!strcmp(name, "quiet"))
		return moem_arg_bool(name, v, &a->quiet);
	return moem_errf(EINVAL, "unknown setting '%s'", name);
}

static int config_entry(void *arg, const char *section, const char *key, const char *value)
{
	if (!strcmp(key, "config"))
		return moem_errf(EINVAL, "a config file cannot include another");
	return apply(arg, key, value);
}

static int on_step(void *arg, const struct moem_step_stats *s)
{
	struct run_args *a = arg;

	moem_progress_set(&a->prog, s->step + 1);
	/* An EOF seen before the run began is not lost to its reset. */
	if (__atomic_load_n(&a->eof, __ATOMIC_ACQUIRE))
		moem_engine_stop(a->e);
	if (a->ready_fd >= 0) {
		char line[32];
		int n = snprintf(line, sizeof(line), "step %llu\n",
				 (unsigned long long)s->step + 1);

		/* Non-blocking: a reader that stopped reading never stalls the
		 * run; one that went away stops the notes. */
		if (write(a->ready_fd, line, (size_t)n) < 0 && errno != EAGAIN)
			a->ready_fd = -1;
	}
	return 0;
}

/* --until-eof: block on the descriptor; end-of-file (or an error) stops
 * the run after its current step. Cancelled when the run ends first. */
static void *until_eof(void *arg)
{
	struct run_args *a = arg;
	char buf[256];

	for (;;) {
		ssize_t n = read(a->until_fd, buf, sizeof(buf));

		if (n > 0 || (n < 0 && errno == EINTR))
			continue;
		break;
	}
	__atomic_store_n(&a->eof, 1, __ATOMIC_RELEASE);
	moem_engine_stop(a->e);
	return NULL;
}

static void print_json(const struct run_args *a, const struct moem_run_stats *rs,
		       const struct moem_engine_status *st)
{
	struct json_object *o = json_object_new_object();

#define J_U64(k, v) json_object_object_add(o, k, json_object_new_uint64(v))
#define J_DBL(k, v) json_object_object_add(o, k, json_object_new_double(v))
#define J_STR(k, v) json_object_object_add(o, k, json_object_new_string(v))
	J_STR("pack", a->ea.o.pack_path);
	J_STR("backend", st->backend);
	J_STR("pool", st->pool_provider);
	json_object_object_add(o, "pool_pinned", json_object_new_boolean(st->pool_pinned));
	J_U64("pool_pinned_bytes", st->pool_pinned_bytes);
	J_STR("route", st->route);
	J_STR("evict", st->evict);
	J_STR("prefetch", st->prefetch);
	J_STR("precision", st->precision);
	J_STR("paging", st->paging);
	J_STR("hotness", st->hotness);
	J_STR("hbm_mode", st->hbm_mode);
	J_U64("uvm_prefetches", st->uvm_prefetches);
	J_U64("uvm_prefetch_bytes", st->uvm_prefetch_bytes);
	J_U64("hbm_budget", st->hbm_budget);
	J_U64("dram_budget", st->dram_budget);
	moem_engine_dram_nodes_json(o, st);
	J_U64("batch", a->ea.w.batch);
	J_U64("steps", rs->total.step);
	J_U64("tokens", rs->total.tokens);
	J_U64("moe_layers", rs->moe_layers);
	J_DBL("mean_T", rs->mean_T);
	J_U64("hits", rs->total.hits);
	J_U64("misses", rs->total.misses);
	J_U64("fallbacks", rs->total.fallbacks);
	J_DBL("hit_rate", rs->hit_rate);
	J_U64("stall_ns", rs->total.stall_ns);
	J_DBL("stall_share", rs->stall_share);
	J_U64("bytes_nvme", rs->total.bytes_nvme);
	J_U64("bytes_d2h", rs->total.bytes_d2h);
	J_U64("bytes_h2d", rs->total.bytes_h2d);
	J_U64("step_ns", rs->total.step_ns);
	J_STR("exec", st->exec);
	J_U64("cpu_moe_layers", st->cpu_moe_layers);
	J_STR("place", st->place);
	J_U64("cpu_placed", st->cpu_placed);
	J_DBL("cpu_gbps", st->cpu_gbps);
	J_STR("cpu_from", st->cpu_from);
	J_U64("cpu_token_ns", st->cpu_token_ns);
	J_U64("cpu_call_ns", st->cpu_call_ns);
	J_U64("cpu_experts", rs->total.cpu_experts);
	J_U64("cpu_ns", rs->total.cpu_ns);
	moem_engine_phases_json(o, "phase_ns", rs->total.phase_ns);
	J_DBL("tokens_per_s", rs->tokens_per_s);
	J_STR("digest", rs->digest_hex);
	json_object_object_add(o, "stopped", json_object_new_boolean(rs->stopped));
	printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
}

/*
 * The engine thread's time in MoE layers per step, by phase (engine.h
 * moem_phase), the ones over 1% of the step; the rest of the step last.
 */
static void print_phases(const struct moem_run_stats *rs)
{
	const double n = rs->total.step ? (double)rs->total.step : 1.0;
	uint64_t sum = 0;

	if (!rs->total.step_ns)
		return;
	printf("  layers       ms per step:");
	for (int p = 0; p < MOEM_PHASE_NR; p++) {
		sum += rs->total.phase_ns[p];
		if (rs->total.phase_ns[p] * 100 >= rs->total.step_ns)
			printf(" %s %.3f,", moem_phase_name(p), rs->total.phase_ns[p] / n / 1e6);
	}
	printf(" rest of the step %.3f\n",
	       (rs->total.step_ns - moem_min(sum, rs->total.step_ns)) / n / 1e6);
}

static void print_human(const struct run_args *a, const struct moem_run_stats *rs,
			const struct moem_engine_status *st)
{
	char b1[32], b2[32], b3[32];

	printf("moem run: %llu steps x %u tokens on %s (%s), pool %s\n",
	       (unsigned long long)rs->total.step, a->ea.w.batch, st->backend,
	       *st->backend_note ? st->backend_note : "as asked", st->pool_provider);
	printf("  budgets      HBM %s (%s), DRAM %s\n",
	       moem_fmt_bytes(st->hbm_budget, b1, sizeof(b1)),
	       strcmp(st->hbm_mode, "uvm") ? "VMM staging" : "UVM, paged by the driver",
	       moem_fmt_bytes(st->dram_budget, b2, sizeof(b2)));
	printf("  policies     route %s, evict %s, prefetch %s, precision %s, paging %s\n",
	       st->route, st->evict, st->prefetch, st->precision, st->paging);
	printf("  experts      mean T %.1f per layer; hits %llu, misses %llu, fallbacks %llu "
	       "(hit rate %.3f)\n",
	       rs->mean_T, (unsigned long long)rs->total.hits, (unsigned long long)rs->total.misses,
	       (unsigned long long)rs->total.fallbacks, rs->hit_rate);
	if (st->cpu_gbps > 0)
		printf("  cpu          exec %s, cpu-moe-layers %u, CPU at %.2f GB/s, %llu ns a "
		       "call "
		       "(%s): %llu experts on the CPU (%.1f per step), %.1f ms\n",
		       st->exec, st->cpu_moe_layers, st->cpu_gbps,
		       (unsigned long long)st->cpu_call_ns, st->cpu_from,
		       (unsigned long long)rs->total.cpu_experts,
		       rs->total.step ? (double)rs->total.cpu_experts / rs->total.step : 0.0,
		       (double)rs->total.cpu_ns / 1e6);
	if (st->place[0])
		printf("  place        %s (%llu experts always on the CPU)\n", st->place,
		       (unsigned long long)st->cpu_placed);
	printf("  moved        NVMe->DRAM %s, DRAM->HBM %s, HBM->DRAM (copied back) %s; stalls "
	       "%.1f ms (%.1f%% of time)\n",
	       moem_fmt_bytes(rs->total.bytes_nvme, b1, sizeof(b1)),
	       moem_fmt_bytes(rs->total.bytes_h2d, b2, sizeof(b2)),
	       moem_fmt_bytes(rs->total.bytes_d2h, b3, sizeof(b3)),
	       (double)rs->total.stall_ns / 1e6, rs->stall_share * 100);
	print_phases(rs);
	printf("  speed        %.1f tokens/s, %.1f ms per step\n", rs->tokens_per_s,
	       rs->total.step ? (double)rs->total.step_ns / rs->total.step / 1e6 : 0.0);
	printf("  digest       %s%s\n", rs->digest_hex, rs->stopped ? " (stopped early)" : "");
}

static int cmd_run(int argc, char **argv)
{
	struct run_args a = {.ready_fd = -1, .until_fd = -1};
	struct moem_engine_status st;
	struct moem_engine *e = NULL;
	struct moem_run_stats rs;
	pthread_t until_tid;
	bool until_started = false;
	int c, idx, ret, rc = 1;

	moem_engine_args_init(&a.ea);
	while ((c = getopt_long(argc, argv, "h", run_opts, &idx)) != -1) {
		if (c == 'h') {
			run_usage(stdout);
			rc = 0;
			goto out;
		}
		if (c != 0) {
			run_usage(stderr);
			rc = 2;
			goto out;
		}
		if (!strcmp(run_opts[idx].name, "config"))
			ret = moem_settings_load(optarg, config_entry, &a);
		else
			ret = apply(&a, run_opts[idx].name, optarg ? optarg : "");
		if (ret) {
			moem_tool_fail("run", ret, NULL);
			goto out;
		}
	}
	if (optind != argc || !a.ea.o.pack_path) {
		fprintf(stderr, "moem run: %s\n",
			optind != argc ? "unexpected argument" : "--pack is required");
		run_usage(stderr);
		rc = 2;
		goto out;
	}
	ret = moem_engine_args_resolve(&a.ea);
	/* what the run writes must be none of what it reads, nor a device */
	{
		const char *in[] = {a.ea.o.pack_path, a.ea.w.path};

		if (!ret && a.ea.o.trace_out)
			ret = moem_check_out_path("--trace-out", a.ea.o.trace_out, in, 2);
		if (!ret && a.counts_out)
			ret = moem_check_out_path("--counts-out", a.counts_out, in, 2);
	}
	if (ret) {
		moem_tool_fail("run", ret, NULL);
		goto out;
	}
	if (a.quiet || a.json)
		moem_log_set_level(MOEM_LOG_WARN);
	ret = moem_engine_open(&a.ea.o, &e);
	if (ret) {
		moem_tool_fail("run", ret, a.ea.o.pack_path);
		goto out;
	}
	if (!a.no_warmup) {
		struct moem_progress p;

		ret = moem_engine_warmup(e, a.json ? NULL : &p);
		if (ret) {
			moem_tool_fail("run", ret, "warm-up");
			goto out;
		}
	}
	if (a.ready_fd >= 0) {
		signal(SIGPIPE, SIG_IGN);
		fcntl(a.ready_fd, F_SETFL, fcntl(a.ready_fd, F_GETFL) | O_NONBLOCK);
	}
	if (a.until_fd >= 0) {
		a.e = e;
		if (pthread_create(&until_tid, NULL, until_eof, &a)) {
			moem_tool_fail("run", -EAGAIN, "--until-eof");
			goto out;
		}
		until_started = true;
	}
	if (!a.json)
		moem_progress_start(&a.prog, "decoding", a.ea.w.steps, false);
	ret = moem_engine_run(e, &a.ea.w, on_step, &a, &rs);
	if (!a.json)
		moem_progress_finish(&a.prog);
	if (until_started) {
		pthread_cancel(until_tid);
		pthread_join(until_tid, NULL);
		until_started = false;
	}
	if (ret) {
		moem_tool_fail("run", ret, NULL);
		goto out;
	}
	if (a.counts_out) {
		uint32_t L, N;
		uint64_t *cnt;

		moem_engine_moe_shape(e, &L, &N);
		cnt = calloc((size_t)L * N, sizeof(*cnt));
		ret = cnt ? 0 : -ENOMEM;
		if (cnt) {
			moem_engine_expert_counts(e, cnt);
			ret = moem_expert_counts_write(a.counts_out, cnt, L, N);
			free(cnt);
		}
		if (ret) {
			moem_tool_fail("run", ret, "--counts-out");
			goto out;
		}
	}
	moem_engine_get_status(e, &st);
	if (a.json)
		print_json(&a, &rs, &st);
	else
		print_human(&a, &rs, &st);
	rc = 0;
out:
	if (until_started) {
		pthread_cancel(until_tid);
		pthread_join(until_tid, NULL);
	}
	moem_engine_close(e);
	moem_engine_args_free(&a.ea);
	free(a.counts_out);
	return rc;
}

MOEM_CMD(run_cmd, "run", "decode a workload on a pack under HBM and DRAM budgets", cmd_run);
