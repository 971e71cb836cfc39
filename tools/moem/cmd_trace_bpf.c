// SPDX-License-Identifier: GPL-2.0-only
/*
 * moem trace record|top|pool: the eBPF side of `moem trace` (bpf.h,
 * Documentation/tracing.md).
 *   record  route records from libmoem's USDT probes -> a trace file
 *   top     the hottest experts per layer, live, from moem_hot
 *   pool    moem.ko's tracepoint events, live
 * All three need CAP_BPF and CAP_PERFMON (or root) and say so up front.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <moem/bpf.h>
#include <moem/error.h>
#include <moem/trace.h>
#include <moem/util.h>

#include "cmd.h"
#include "cmd_trace_bpf.h"
#include "trace_target.h"

/* ---- record -------------------------------------------------------------- */

struct recorder {
	const char *out;
	struct moem_trace_writer *w;
	struct moem_trace_info info;
	uint64_t base, last_step, runs;
	uint32_t last_layer;
	bool any;
	pid_t pid;
};

static int rec_open(struct recorder *rc, const struct moem_bpf_route_rec *r)
{
	char comm[32];
	int ret;

	memset(&rc->info, 0, sizeof(rc->info));
	rc->info.flags = r->flags & MOEM_TRACE_F_SYNTHETIC;
	rc->info.source = MOEM_TRACE_SRC_BPF;
	rc->info.n_layers = r->n_layers;
	rc->info.n_experts = r->n_experts;
	rc->info.top_k = r->k;
	trace_comm_of((pid_t)r->pid, comm, sizeof(comm));
	snprintf(rc->info.desc, sizeof(rc->info.desc), "moem trace record, pid %u (%s)", r->pid,
		 comm);
	if (!strcmp(rc->out, "-"))
		ret = moem_trace_writer_fdopen(STDOUT_FILENO, &rc->info, &rc->w);
	else
		ret = moem_trace_writer_open(rc->out, &rc->info, &rc->w);
	if (ret)
		return moem_err_prefix(-ret, "%s", rc->out);
	rc->pid = (pid_t)r->pid;
	return 0;
}

static int on_route(void *arg, const struct moem_bpf_route_rec *r)
{
	struct recorder *rc = arg;
	struct moem_trace_rec t;
	uint64_t step;
	int ret;

	if (!rc->w) {
		ret = rec_open(rc, r);
		if (ret)
			return ret;
	}
	if (r->n_layers != rc->info.n_layers || r->n_experts != rc->info.n_experts ||
	    r->k != rc->info.top_k || (pid_t)r->pid != rc->pid)
		return moem_errf(EPROTO,
				 "pid %u now routes %u layers x %u experts top-%u (the trace has "
				 "pid %d, %u x %u top-%u): start another recording",
				 r->pid, r->n_layers, r->n_experts, r->k, (int)rc->pid,
				 rc->info.n_layers, rc->info.n_experts, rc->info.top_k);
	step = r->step + rc->base;
	if (rc->any &&
	    (step < rc->last_step || (step == rc->last_step && r->layer <= rc->last_layer))) {
		/* A new run in the same process starts again at step 0: go on after the last. */
		rc->base = rc->last_step + 1 - r->step;
		step = rc->last_step + 1;
		rc->runs++;
	}
	t = (struct moem_trace_rec){step, r->layer, r->tokens, r->ids, r->w, NULL, NULL};
	ret = moem_trace_write(rc->w, &t);
	if (ret)
		return ret;
	rc->any = true;
	rc->last_step = step;
	rc->last_layer = r->layer;
	return 0;
}

static void record_usage(FILE *f)
{
	fprintf(f,
		"usage: moem trace record -o FILE (--pid P | --exec BIN [ARGS...] | -- BIN "
		"[ARGS...])\n"
		"                         [--binary PATH] [--hot-out FILE] [--ring-mb N] "
		"[--quiet]\n"
		"Record the routing of a process running libmoem from its moem:route probes into\n"
		"a trace (Documentation/trace-format.md, source bpf) until it exits or on Ctrl-C.\n"
		"  -o, --out FILE    the trace, written next to FILE and renamed at the end\n"
		"                    (\"-\": stdout; BIN's own stdout then goes to stderr)\n"
		"  -p, --pid P       trace process P (the probes of /proc/P/exe)\n"
		"  -e, --exec BIN    start BIN with the remaining arguments, traced from its "
		"first\n"
		"                    instruction (must come last)\n"
		"  --binary PATH     the file holding libmoem's probes (default: the executable)\n"
		"  --hot-out FILE    at the end, moem_hot as \"layer expert count\" lines\n"
		"  --ring-mb N       ring buffer size in MiB, a power of two (default 8)\n"
		"Needs CAP_BPF and CAP_PERFMON (or root).\n");
}

static int record_finish(struct recorder *rc, struct moem_bpf_route *r, const char *hot_out,
			 bool quiet, int ret)
{
	struct moem_bpf_route_stats st;
	uint64_t lost;

	if (!ret)
		ret = moem_bpf_route_stats(r, &st);
	lost = ret ? 0 : st.dropped_ring + st.dropped_big + st.read_fail;
	if (!ret && !rc->w)
		ret = moem_errf(ENODATA,
				"no route records seen (did the process decode anything?): "
				"no trace written");
	if (!ret && lost) {
		char d[MOEM_TRACE_DESC_MAX];

		snprintf(d, sizeof(d), "%.36s; %" PRIu64 " records DROPPED", rc->info.desc, lost);
		moem_trace_writer_set_desc(rc->w, d);
		fprintf(stderr,
			"moem trace record: %" PRIu64
			" records were lost (ring buffer full %" PRIu64 ", too large %" PRIu64
			", unreadable %" PRIu64 "): the trace lacks them and "
			"says so; try --ring-mb\n",
			lost, st.dropped_ring, st.dropped_big, st.read_fail);
	}
	if (rc->w) {
		uint64_t n = moem_trace_writer_count(rc->w);
		int r2 = ret ? (moem_trace_writer_abort(rc->w), ret)
			     : moem_trace_writer_close(rc->w);

		rc->w = NULL;
		if (!ret && r2)
			ret = r2;
		if (!ret && !quiet)
			fprintf(stderr,
				"moem trace record: %s: %" PRIu64 " records, %u MoE layers x %u "
				"experts, top-%u%s\n"
				"moem trace record: probes: %" PRIu64 " route, %" PRIu64
				" fetch (%" PRIu64 " bytes NVMe->DRAM, %" PRIu64
				" bytes DRAM->HBM), %" PRIu64 " stall, %" PRIu64
				" promote, %" PRIu64 " demote\n",
				rc->out, n, rc->info.n_layers, rc->info.n_experts, rc->info.top_k,
				rc->runs ? " (several runs, steps made consecutive)" : "",
				st.routes, st.fetches, st.fetch_nvme_bytes, st.fetch_hbm_bytes,
				st.stalls, st.promotes, st.demotes);
	}
	if (!ret && hot_out) {
		struct moem_hot_entry *e;
		size_t n;

		ret = moem_bpf_hot_read(r, &e, &n);
		if (!ret) {
			ret = moem_hot_entries_write(hot_out, e, n);
			free(e);
		}
	}
	return ret;
}

int cmd_trace_record(int argc, char **argv)
{
	static const struct option opts[] = {
		{"out", required_argument, NULL, 'o'},
		{"pid", required_argument, NULL, 'p'},
		{"exec", required_argument, NULL, 'e'},
		{"binary", required_argument, NULL, 'b'},
		{"hot-out", required_argument, NULL, 'H'},
		{"ring-mb", required_argument, NULL, 'r'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct target t = {.pid = -1, .go_fd = -1, .pidfd = -1};
	struct moem_bpf_route_opts ro = {.records = true, .io = true};
	struct recorder rc = {0};
	struct moem_bpf_route *r = NULL;
	const char *hot_out = NULL;
	bool quiet = false, stop = false;
	struct loop l = {-1, -1, -1};
	double v;
	int c, ret, sig = 0;

	while (!t.exec_argv && (c = getopt_long(argc, argv, "+o:p:e:q", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			rc.out = optarg;
			break;
		case 'p':
			if (trace_parse_num("--pid", optarg, 1, 4194304, &v))
				return 2;
			t.pid = (pid_t)v;
			break;
		case 'e':
			/* BIN and everything after it: BIN's own arguments. */
			t.exec_argv = argv + optind - 1;
			if (strcmp(t.exec_argv[0], optarg))
				t.exec_argv[0] = optarg; /* --exec=BIN */
			break;
		case 'b':
			t.binary = optarg;
			break;
		case 'H':
			hot_out = optarg;
			break;
		case 'r':
			if (trace_parse_num("--ring-mb", optarg, 1, 1024, &v) ||
			    ((unsigned int)v & ((unsigned int)v - 1))) {
				fprintf(stderr, "moem trace record: --ring-mb: a power of two\n");
				return 2;
			}
			ro.ring_bytes = (uint32_t)v << 20;
			break;
		case 'q':
			quiet = true;
			break;
		case 'h':
			record_usage(stdout);
			return 0;
		default:
			record_usage(stderr);
			return 2;
		}
	}
	if (!rc.out) {
		fprintf(stderr, "moem trace record: -o FILE is required\n");
		record_usage(stderr);
		return 2;
	}
	ret = trace_target_opts_done(&t, argc, argv, "record");
	if (ret)
		return ret;
	if (trace_need_perm())
		return 1;
	signal(SIGPIPE, SIG_IGN);
	ret = t.exec_argv ? trace_start_child(&t, !strcmp(rc.out, "-")) : 0;
	if (!ret) {
		ro.pid = t.pid;
		ro.binary = t.binary ? t.binary : t.exec_path;
		ret = moem_bpf_route_open(&ro, &r);
	}
	if (!ret)
		ret = trace_open_pidfd(&t);
	if (!ret)
		ret = trace_loop_open(&l, moem_bpf_route_fd(r), t.pidfd, 0);
	if (!ret && t.child)
		ret = trace_release_child(&t);
	if (ret) {
		trace_loop_close(&l);
		trace_target_end(&t, true);
		moem_bpf_route_close(r);
		return moem_tool_fail("trace record", ret, NULL);
	}
	if (!quiet)
		fprintf(stderr, "moem trace record: tracing pid %d into %s (Ctrl-C to stop)\n",
			(int)t.pid, rc.out);
	while (!ret && !stop) {
		switch ((ret = trace_loop_wait(&l, &sig))) {
		case EV_RING:
			ret = moem_bpf_route_poll(r, 0, on_route, &rc);
			ret = ret < 0 ? ret : 0;
			break;
		case EV_EXIT:
		case EV_SIGNAL:
			stop = true;
			ret = 0;
			break;
		default:
			break;
		}
	}
	/* Everything the process routed before it ended is in the ring: drain it. */
	while (!ret && (ret = moem_bpf_route_poll(r, 0, on_route, &rc)) > 0)
		;
	ret = ret < 0 ? ret : 0;
	if (sig && t.child)
		kill(t.child, sig);
	ret = record_finish(&rc, r, hot_out, quiet, ret);
	trace_loop_close(&l);
	moem_bpf_route_close(r);
	trace_target_end(&t, false);
	if (ret)
		return moem_tool_fail("trace record", ret, NULL);
	if (t.child && t.exited && !(WIFEXITED(t.status) && WEXITSTATUS(t.status) == 0)) {
		fprintf(stderr, "moem trace record: %s %s %d\n", t.exec_argv[0],
			WIFEXITED(t.status) ? "exited with status" : "was killed by signal",
			WIFEXITED(t.status) ? WEXITSTATUS(t.status) : WTERMSIG(t.status));
		return sig ? 0 : 1;
	}
	return 0;
}

/* ---- top ----------------------------------------------------------------- */

struct top {
	uint64_t *prev; /* [256][1024] counts at the last refresh */
	unsigned int show;
	bool total, tty;
	double interval;
	uint64_t t0, last;
	pid_t pid;
	const char *what;
};

struct cell {
	uint32_t expert;
	uint64_t v;
};

static int cmp_cell(const void *a, const void *b)
{
	const struct cell *x = a, *y = b;

	if (x->v != y->v)
		return x->v > y->v ? -1 : 1;
	return x->expert < y->expert ? -1 : x->expert > y->expert;
}

static void top_layer(const struct top *tp, uint32_t layer, struct cell *c, size_t n, double secs)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += c[i].v;
	qsort(c, n, sizeof(*c), cmp_cell);
	printf("%5u %10.1f ", layer, tp->total ? (double)sum : sum / secs);
	for (size_t i = 0; i < n && i < tp->show && c[i].v; i++)
		printf(" %4u %5.1f%%", c[i].expert, sum ? 100.0 * c[i].v / sum : 0.0);
	printf("\n");
}

static int top_refresh(struct top *tp, struct moem_bpf_route *r)
{
	static struct cell cells[MOEM_BPF_HOT_EXPERTS];
	struct moem_bpf_route_stats st;
	struct moem_hot_entry *e;
	uint64_t now = moem_now_ns();
	double secs = (now - tp->last) / 1e9;
	size_t n, nc = 0;
	char b1[32], b2[32];
	int ret;

	ret = moem_bpf_hot_read(r, &e, &n);
	if (!ret)
		ret = moem_bpf_route_stats(r, &st);
	if (ret)
		return ret;
	if (tp->tty)
		printf("\033[H\033[J");
	printf("moem trace top - %s, %.1f s; %" PRIu64 " route probes, %" PRIu64
	       " fetches (NVMe->DRAM %s, DRAM->HBM %s), %" PRIu64 " stalls (%.1f ms), %" PRIu64
	       " promotions, %" PRIu64 " demotions\n",
	       tp->what, (now - tp->t0) / 1e9, st.routes, st.fetches,
	       moem_fmt_bytes(st.fetch_nvme_bytes, b1, sizeof(b1)),
	       moem_fmt_bytes(st.fetch_hbm_bytes, b2, sizeof(b2)), st.stalls, st.stall_ns / 1e6,
	       st.promotes, st.demotes);
	printf("layer %10s  hottest experts %s: expert, share of the layer's routes\n",
	       tp->total ? "routes" : "routes/s",
	       tp->total ? "since start" : "in the last interval");
	for (size_t i = 0; i <= n; i++) {
		if (i == n || (nc && e[i].layer != e[i - 1].layer)) {
			if (nc)
				top_layer(tp, e[i - 1].layer, cells, nc, secs > 0 ? secs : 1);
			nc = 0;
			if (i == n)
				break;
		}
		if (e[i].layer < MOEM_BPF_HOT_LAYERS && e[i].expert < MOEM_BPF_HOT_EXPERTS) {
			uint64_t *p =
				&tp->prev[(size_t)e[i].layer * MOEM_BPF_HOT_EXPERTS + e[i].expert];

			cells[nc].expert = e[i].expert;
			cells[nc++].v = tp->total ? e[i].count : e[i].count - *p;
			*p = e[i].count;
		}
	}
	if (!n)
		printf("  (no routes yet)\n");
	if (!tp->tty)
		printf("\n");
	fflush(stdout);
	free(e);
	tp->last = now;
	return 0;
}

static void top_usage(FILE *f)
{
	fprintf(f,
		"usage: moem trace top (--pid P | --exec BIN [ARGS...] | --binary PATH)\n"
		"                      [-i SECONDS] [-n EXPERTS] [--count N] [--total]\n"
		"The hottest experts of every MoE layer, refreshed live, from moem_hot.\n"
		"  -p, --pid P        the process to watch\n"
		"  -e, --exec BIN     start BIN with the remaining arguments and watch it (last)\n"
		"  --binary PATH      without --pid/--exec: every process running PATH\n"
		"  -i, --interval S   refresh period (default 1)\n"
		"  -n, --experts N    experts shown per layer (default 8)\n"
		"  --count N          stop after N refreshes\n"
		"  --total            counts since start instead of per interval\n"
		"Ends when the process exits or on Ctrl-C. Needs CAP_BPF and CAP_PERFMON (or "
		"root).\n");
}

int cmd_trace_top(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pid", required_argument, NULL, 'p'},
		{"exec", required_argument, NULL, 'e'},
		{"binary", required_argument, NULL, 'b'},
		{"interval", required_argument, NULL, 'i'},
		{"experts", required_argument, NULL, 'n'},
		{"count", required_argument, NULL, 'c'},
		{"total", no_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct target t = {.pid = -1, .go_fd = -1, .pidfd = -1};
	struct moem_bpf_route_opts ro = {.io = true};
	struct top tp = {.show = 8, .interval = 1};
	struct moem_bpf_route *r = NULL;
	struct loop l = {-1, -1, -1};
	double v, count = 0;
	char what[96], comm[32];
	int c, ret, sig = 0;
	bool stop = false;

	while (!t.exec_argv && (c = getopt_long(argc, argv, "+p:e:i:n:", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (trace_parse_num("--pid", optarg, 1, 4194304, &v))
				return 2;
			t.pid = (pid_t)v;
			break;
		case 'e':
			t.exec_argv = argv + optind - 1;
			if (strcmp(t.exec_argv[0], optarg))
				t.exec_argv[0] = optarg;
			break;
		case 'b':
			t.binary = optarg;
			break;
		case 'i':
			if (trace_parse_num("--interval", optarg, 0.05, 3600, &tp.interval))
				return 2;
			break;
		case 'n':
			if (trace_parse_num("--experts", optarg, 1, MOEM_BPF_HOT_EXPERTS, &v))
				return 2;
			tp.show = (unsigned int)v;
			break;
		case 'c':
			if (trace_parse_num("--count", optarg, 1, 1e12, &count))
				return 2;
			break;
		case 't':
			tp.total = true;
			break;
		case 'h':
			top_usage(stdout);
			return 0;
		default:
			top_usage(stderr);
			return 2;
		}
	}
	ret = trace_target_opts_done(&t, argc, argv, "top");
	if (ret)
		return ret;
	if (trace_need_perm())
		return 1;
	tp.prev = calloc((size_t)MOEM_BPF_HOT_LAYERS * MOEM_BPF_HOT_EXPERTS, sizeof(uint64_t));
	if (!tp.prev)
		return moem_tool_fail("trace top", -ENOMEM, NULL);
	ret = t.exec_argv ? trace_start_child(&t, false) : 0;
	if (!ret) {
		ro.pid = t.pid;
		ro.binary = t.binary ? t.binary : t.exec_path;
		ret = moem_bpf_route_open(&ro, &r);
	}
	if (!ret)
		ret = trace_open_pidfd(&t);
	if (!ret)
		ret = trace_loop_open(&l, -1, t.pidfd, (uint64_t)(tp.interval * 1000));
	if (!ret && t.child)
		ret = trace_release_child(&t);
	if (ret)
		goto out;
	if (t.pid > 0) {
		trace_comm_of(t.pid, comm, sizeof(comm));
		snprintf(what, sizeof(what), "pid %d (%s)", (int)t.pid,
			 t.exec_argv ? t.exec_argv[0] : comm);
	} else {
		snprintf(what, sizeof(what), "every process running %s", t.binary);
	}
	tp.what = what;
	tp.tty = isatty(STDOUT_FILENO);
	tp.t0 = tp.last = moem_now_ns();
	for (uint64_t i = 0; !ret && !stop && (!count || i < (uint64_t)count);) {
		switch (trace_loop_wait(&l, &sig)) {
		case EV_TIMER:
			ret = top_refresh(&tp, r);
			i++;
			break;
		case EV_EXIT:
			ret = top_refresh(&tp, r); /* the final counts */
			stop = true;
			break;
		case EV_SIGNAL:
			stop = true;
			break;
		default:
			ret = -EIO;
			break;
		}
	}
	if (sig && t.child)
		kill(t.child, sig);
out:
	trace_loop_close(&l);
	moem_bpf_route_close(r);
	trace_target_end(&t, ret != 0 && !sig);
	free(tp.prev);
	if (ret)
		return moem_tool_fail("trace top", ret, NULL);
	return 0;
}

/* ---- pool ---------------------------------------------------------------- */

struct pool_print {
	uint64_t t0, seen, limit;
	uint32_t mask; /* event types to print */
};

static int on_pool(void *arg, const struct moem_bpf_pool_ev *e)
{
	struct pool_print *pp = arg;
	char fields[256];

	if (!(pp->mask & (1u << e->type)))
		return 0;
	moem_bpf_pool_format(e, fields, sizeof(fields));
	printf("%12.6f %-16s %7u %-15s %s\n", (double)(e->ts_ns - pp->t0) / 1e9, e->comm, e->pid,
	       moem_bpf_pool_type_name(e->type), fields);
	if (++pp->seen == pp->limit)
		return 1;
	return 0;
}

static int pool_events(const char *s, uint32_t *mask)
{
	char *dup = strdup(s), *tok, *save = NULL;
	int ret = 0;

	*mask = 0;
	for (tok = dup ? strtok_r(dup, ",", &save) : NULL; tok && !ret;
	     tok = strtok_r(NULL, ",", &save)) {
		unsigned int i;

		for (i = 0; i < MOEM_BPF_POOL_NR; i++)
			if (!strcmp(tok, moem_bpf_pool_type_name(i)))
				break;
		if (i == MOEM_BPF_POOL_NR)
			ret = moem_errf(EINVAL,
					"--events: unknown event '%s' (chunk_alloc, "
					"chunk_free, region_create, region_open, "
					"region_destroy, region_release, mmap, budget_change)",
					tok);
		*mask |= 1u << i;
	}
	free(dup);
	return dup ? ret : -ENOMEM;
}

static void pool_usage(FILE *f)
{
	fprintf(f,
		"usage: moem trace pool [--events a,b,..] [--count N] [--duration S]\n"
		"moem.ko's tracepoint events, live: time (s), task, pid, event, fields.\n"
		"  --events LIST   only these (chunk_alloc, chunk_free, region_create, "
		"region_open,\n"
		"                  region_destroy, region_release, mmap, budget_change)\n"
		"  --count N       stop after N events\n"
		"  --duration S    stop after S seconds\n"
		"Ends on Ctrl-C; prints per-event totals on stderr. Needs CAP_BPF and CAP_PERFMON\n"
		"(or root), moem.ko loaded and tracefs mounted.\n");
}

int cmd_trace_pool(int argc, char **argv)
{
	static const struct option opts[] = {
		{"events", required_argument, NULL, 'E'},
		{"count", required_argument, NULL, 'c'},
		{"duration", required_argument, NULL, 'd'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct pool_print pp = {.mask = (1u << MOEM_BPF_POOL_NR) - 1};
	struct moem_bpf_pool_stats st;
	struct moem_bpf_pool *p = NULL;
	struct loop l = {-1, -1, -1};
	double v, duration = 0;
	int c, ret, sig = 0;
	bool stop = false;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'E':
			ret = pool_events(optarg, &pp.mask);
			if (ret)
				return moem_tool_fail("trace pool", ret, NULL);
			break;
		case 'c':
			if (trace_parse_num("--count", optarg, 1, 1e15, &v))
				return 2;
			pp.limit = (uint64_t)v;
			break;
		case 'd':
			if (trace_parse_num("--duration", optarg, 0.01, 1e7, &duration))
				return 2;
			break;
		case 'h':
			pool_usage(stdout);
			return 0;
		default:
			pool_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		pool_usage(stderr);
		return 2;
	}
	if (trace_need_perm())
		return 1;
	ret = moem_bpf_pool_open(&p);
	if (!ret)
		ret = trace_loop_open(&l, moem_bpf_pool_fd(p), -1, (uint64_t)(duration * 1000));
	if (ret)
		goto out;
	pp.t0 = moem_now_ns();
	setvbuf(stdout, NULL, _IOLBF, 0);
	fprintf(stderr, "moem trace pool: watching moem.ko's tracepoints (Ctrl-C to stop)\n");
	while (!ret && !stop) {
		switch (trace_loop_wait(&l, &sig)) {
		case EV_RING:
			ret = moem_bpf_pool_poll(p, 0, on_pool, &pp);
			if (ret == 1)
				stop = true;
			ret = ret < 0 ? ret : 0;
			break;
		case EV_TIMER:
		case EV_SIGNAL:
			stop = true;
			break;
		default:
			ret = -EIO;
			break;
		}
	}
	while (!ret && (!pp.limit || pp.seen < pp.limit) &&
	       (ret = moem_bpf_pool_poll(p, 0, on_pool, &pp)) > 0)
		;
	ret = ret < 0 ? ret : 0;
	if (!ret && !moem_bpf_pool_stats(p, &st)) {
		fprintf(stderr, "moem trace pool:");
		for (unsigned int i = 0; i < MOEM_BPF_POOL_NR; i++)
			fprintf(stderr, " %s %" PRIu64, moem_bpf_pool_type_name(i), st.events[i]);
		fprintf(stderr, "; dropped %" PRIu64 "\n", st.dropped);
	}
out:
	trace_loop_close(&l);
	moem_bpf_pool_close(p);
	if (ret)
		return moem_tool_fail("trace pool", ret, NULL);
	return 0;
}
