// SPDX-License-Identifier: GPL-2.0-only
/*
 * bench_trace: decode step time with the route tracer attached vs not,
 * same engine, same model, same run (Documentation/tracing.md).
 *
 * One engine is opened and warmed up once; then ROUNDS rounds each decode
 * STEPS steps untraced and STEPS steps traced, in alternating order. The
 * traced half is what `moem trace record` does to a process: the route
 * program attached to this process's probes (moem_hot, ring buffer), a
 * recorder thread draining the ring buffer into a trace file. Attaching
 * and detaching happen between the halves, outside the timed steps.
 * Prints the median step time of each mode and their ratio.
 *
 *   bench_trace --pack FILE [--rounds R] [--steps S] [--batch B]
 *               [--threads N] [--trace-out FILE]
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moem/bpf.h>
#include <moem/engine.h>
#include <moem/error.h>
#include <moem/log.h>
#include <moem/trace.h>

struct samples {
	uint64_t *ns;
	size_t n, cap;
};

static int on_step(void *arg, const struct moem_step_stats *s)
{
	struct samples *x = arg;

	if (x->n < x->cap)
		x->ns[x->n++] = s->step_ns;
	return 0;
}

/* The recorder: a thread draining the ring buffer into a trace. */
struct recorder {
	struct moem_bpf_route *r;
	struct moem_trace_writer *w;
	const char *path;
	uint64_t base, last; /* steps continue across the engine's runs */
	volatile int stop;
	int err;
	uint64_t records, lost;
};

static int write_rec(void *arg, const struct moem_bpf_route_rec *r)
{
	struct recorder *rc = arg;
	struct moem_trace_rec t;
	int ret;

	if (!rc->w) {
		struct moem_trace_info ti = {.source = MOEM_TRACE_SRC_BPF,
					     .flags = r->flags & MOEM_TRACE_F_SYNTHETIC,
					     .n_layers = r->n_layers,
					     .n_experts = r->n_experts,
					     .top_k = r->k};

		snprintf(ti.desc, sizeof(ti.desc), "bench_trace");
		ret = moem_trace_writer_open(rc->path, &ti, &rc->w);
		if (ret)
			return ret;
	}
	t = (struct moem_trace_rec){
		rc->base + r->step, r->layer, r->tokens, r->ids, r->w, NULL, NULL};
	rc->last = t.step;
	rc->records++;
	return moem_trace_write(rc->w, &t);
}

static void *recorder_main(void *arg)
{
	struct recorder *rc = arg;
	int ret = 0;

	while (!rc->stop && ret >= 0)
		ret = moem_bpf_route_poll(rc->r, 50, write_rec, rc);
	while (ret >= 0 && (ret = moem_bpf_route_poll(rc->r, 0, write_rec, rc)) > 0)
		;
	if (ret < 0)
		rc->err = ret;
	return NULL;
}

static int traced_half(struct moem_engine *e, const struct moem_workload *w, struct recorder *rc,
		       struct samples *x)
{
	struct moem_bpf_route_opts o = {.pid = getpid(), .records = true, .io = true};
	struct moem_bpf_route_stats st;
	pthread_t th;
	int ret = moem_bpf_route_open(&o, &rc->r);

	if (ret)
		return ret;
	rc->stop = 0;
	if (pthread_create(&th, NULL, recorder_main, rc)) {
		moem_bpf_route_close(rc->r);
		return -EAGAIN;
	}
	ret = moem_engine_run(e, w, on_step, x, NULL);
	rc->stop = 1;
	pthread_join(th, NULL);
	if (!moem_bpf_route_stats(rc->r, &st))
		rc->lost += st.dropped_ring + st.dropped_big + st.read_fail;
	moem_bpf_route_close(rc->r);
	rc->r = NULL;
	rc->base = rc->last + 1;
	return ret ? ret : rc->err;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double median_ms(struct samples *x)
{
	qsort(x->ns, x->n, sizeof(*x->ns), cmp_u64);
	if (!x->n)
		return 0;
	return (x->n % 2 ? (double)x->ns[x->n / 2]
			 : ((double)x->ns[x->n / 2 - 1] + (double)x->ns[x->n / 2]) / 2) /
	       1e6;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pack", required_argument, NULL, 'p'},
		{"rounds", required_argument, NULL, 'r'},
		{"steps", required_argument, NULL, 's'},
		{"batch", required_argument, NULL, 'b'},
		{"threads", required_argument, NULL, 't'},
		{"trace-out", required_argument, NULL, 'o'},
		{0},
	};
	struct moem_engine_opts o = {
		.backend = "cpu", .hi = MOEM_PREC_BF16, .pool.provider = MOEM_POOL_AUTO};
	struct moem_workload w = {.kind = MOEM_WL_SYNTH, .batch = 1, .steps = 8, .seed = 5};
	struct recorder rc = {.path = "bench_trace.trace"};
	struct samples u = {0}, t = {0};
	unsigned long rounds = 12;
	struct moem_engine *e;
	int c, ret;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			o.pack_path = optarg;
			break;
		case 'r':
			rounds = strtoul(optarg, NULL, 0);
			break;
		case 's':
			w.steps = strtoull(optarg, NULL, 0);
			break;
		case 'b':
			w.batch = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 't':
			o.threads = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'o':
			rc.path = optarg;
			break;
		default:
			return 2;
		}
	}
	if (!o.pack_path || !rounds || rounds > 10000 || !w.steps || w.steps > 100000) {
		fprintf(stderr, "usage: bench_trace --pack FILE [--rounds R] [--steps S] "
				"[--batch B] [--threads N] [--trace-out FILE]\n");
		return 2;
	}
	ret = moem_bpf_check_perm();
	if (ret) {
		printf("bench_trace: skipped: %s\n", moem_strerror(ret));
		return 4;
	}
	u.cap = t.cap = rounds * w.steps;
	u.ns = calloc(u.cap, sizeof(uint64_t));
	t.ns = calloc(t.cap, sizeof(uint64_t));
	if (!u.ns || !t.ns)
		return 1;
	moem_log_set_level(MOEM_LOG_WARN);
	ret = moem_engine_open(&o, &e);
	if (!ret)
		ret = moem_engine_warmup(e, NULL);
	if (ret) {
		fprintf(stderr, "bench_trace: %s\n", moem_strerror(ret));
		return 1;
	}
	/* One untimed half first: caches and the allocator settle. */
	ret = moem_engine_run(e, &w, NULL, NULL, NULL);
	for (unsigned long r = 0; r < rounds && !ret; r++) {
		size_t u0 = u.n, t0 = t.n;

		if (r % 2 == 0) {
			ret = moem_engine_run(e, &w, on_step, &u, NULL);
			if (!ret)
				ret = traced_half(e, &w, &rc, &t);
		} else {
			ret = traced_half(e, &w, &rc, &t);
			if (!ret)
				ret = moem_engine_run(e, &w, on_step, &u, NULL);
		}
		if (!ret) {
			struct samples a = {u.ns + u0, u.n - u0, 0}, b = {t.ns + t0, t.n - t0, 0};
			uint64_t *sa = malloc(a.n * 8), *sb = malloc(b.n * 8);

			/* Per-round medians for the log (on copies: the totals stay unsorted). */
			if (sa && sb) {
				memcpy(sa, a.ns, a.n * 8);
				memcpy(sb, b.ns, b.n * 8);
				a.ns = sa;
				b.ns = sb;
				fprintf(stderr,
					"bench_trace: round %lu: untraced %.3f ms, traced %.3f "
					"ms\n",
					r + 1, median_ms(&a), median_ms(&b));
			}
			free(sa);
			free(sb);
		}
	}
	if (ret) {
		fprintf(stderr, "bench_trace: %s\n", moem_strerror(ret));
		moem_engine_close(e);
		if (rc.w)
			moem_trace_writer_abort(rc.w);
		return ret == -EPERM || ret == -EOPNOTSUPP ? 4 : 1;
	}
	moem_engine_close(e);
	if (rc.w)
		ret = moem_trace_writer_close(rc.w);
	printf("bench_trace: %lu rounds x %llu steps each way, batch %u; %llu records traced to "
	       "%s, "
	       "%llu lost\n",
	       rounds, (unsigned long long)w.steps, w.batch, (unsigned long long)rc.records,
	       rc.path, (unsigned long long)rc.lost);
	printf("step time (median of %zu steps each): untraced %.3f ms, traced %.3f ms\n", u.n,
	       median_ms(&u), median_ms(&t));
	printf("RESULT trace_overhead ratio=%.4f\n", median_ms(&t) / median_ms(&u));
	free(u.ns);
	free(t.ns);
	return ret ? 1 : 0;
}
