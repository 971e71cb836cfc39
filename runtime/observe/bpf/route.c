// SPDX-License-Identifier: GPL-2.0-only
/*
 * The route tracer (bpf.h): bpf/moem_route.bpf.c attached to libmoem's
 * USDT probes in one process or in every process running a binary; its
 * ring buffer of route records and its moem_hot map.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moem/error.h>

#include "bpf_int.h"

#ifdef MOEM_NO_BPF
static int not_built(void)
{
	return moem_errf(EOPNOTSUPP, "moem was built without BPF tracing (no clang, bpftool, "
				     "libbpf or kernel BTF at build time; see mk/bpf.mk)");
}

int moem_bpf_route_open(const struct moem_bpf_route_opts *o, struct moem_bpf_route **out)
{
	return not_built();
}

void moem_bpf_route_close(struct moem_bpf_route *r)
{
}

int moem_bpf_route_fd(const struct moem_bpf_route *r)
{
	return -EOPNOTSUPP;
}

int moem_bpf_route_poll(struct moem_bpf_route *r, int timeout_ms, moem_bpf_route_fn fn, void *arg)
{
	return not_built();
}

int moem_bpf_route_stats(const struct moem_bpf_route *r, struct moem_bpf_route_stats *st)
{
	return not_built();
}

int moem_bpf_hot_read(struct moem_bpf_route *r, struct moem_hot_entry **out, size_t *n)
{
	return not_built();
}

int moem_bpf_hot_read_dense(struct moem_bpf_route *r, uint32_t n_layers, uint32_t n_experts,
			    uint64_t *counts)
{
	return not_built();
}
#else
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/types.h>

#include "moem_route.h"
#include "moem_route.skel.h"

_Static_assert(MOEM_HOT_MAX_LAYERS == MOEM_BPF_HOT_LAYERS &&
		       MOEM_HOT_MAX_EXPERTS == MOEM_BPF_HOT_EXPERTS,
	       "bpf.h and moem_route.h disagree on moem_hot's bounds");

#define DEFAULT_RING (8u << 20)
#define BATCH	     4096u

struct moem_bpf_route {
	struct moem_route_bpf *skel;
	struct bpf_link *links[5];
	unsigned int n_links;
	struct ring_buffer *rb;
	moem_bpf_route_fn fn;
	void *arg;
	int cb_ret;
	/* Batched moem_hot reads. */
	struct moem_hot_key *keys;
	__u64 *vals;
	bool no_batch; /* the kernel lacks BPF_MAP_LOOKUP_BATCH for hash maps */
};

static const char *const probe_names[] = {"route", "fetch", "stall", "promote", "demote"};

static int sample(void *ctx, void *data, size_t size)
{
	struct moem_bpf_route *r = ctx;
	const struct moem_route_ev *h = data;
	struct moem_bpf_route_rec rec;
	size_t n;

	if (r->cb_ret || size < sizeof(*h))
		return 0;
	n = (size_t)h->tokens * h->k;
	if (size < sizeof(*h) + 8 * n)
		return 0; /* cannot happen: the program sizes records */
	rec.step = h->step;
	rec.ts_ns = h->ts_ns;
	rec.pid = h->pid;
	rec.tid = h->tid;
	rec.layer = h->layer;
	rec.tokens = h->tokens;
	rec.k = h->k;
	rec.n_layers = h->n_layers;
	rec.n_experts = h->n_experts;
	rec.flags = h->flags;
	rec.ids = (const int32_t *)(h + 1);
	/* The record is ids[n] then w[n] (moem_route.h). */
	rec.w = (const float *)((const void *)((const char *)(h + 1) + 4 * n));
	if (r->fn)
		r->cb_ret = r->fn(r->arg, &rec);
	return r->cb_ret ? -ECANCELED : 0;
}

static int attach(struct moem_bpf_route *r, struct bpf_program *p, pid_t pid, const char *bin,
		  const char *name, bool required)
{
	struct bpf_link *l;

	moem_bpf_libbpf_msg_reset();
	l = bpf_program__attach_usdt(p, pid, bin, "moem", name, NULL);
	if (!l) {
		int err = errno;

		if (!required)
			return 0; /* a binary without the engine has no fetch probes */
		if (err == ENOENT || err == ESRCH)
			return moem_errf(ENOENT,
					 "%s has no moem:%s probe (is libmoem linked into it? "
					 "name the file that holds it with --binary)",
					 bin, name);
		return moem_bpf_load_error(err, "attaching to the moem:route probe");
	}
	r->links[r->n_links++] = l;
	return 0;
}

int moem_bpf_route_open(const struct moem_bpf_route_opts *o, struct moem_bpf_route **out)
{
	uint32_t ring = o->ring_bytes ? o->ring_bytes : DEFAULT_RING;
	struct bpf_program *progs[5];
	struct moem_bpf_route *r;
	char exe[64];
	const char *bin = o->binary;
	int ret;

	ret = moem_bpf_check_perm();
	if (ret)
		return ret;
	if (ring < 4096 || (ring & (ring - 1)))
		return moem_errf(EINVAL, "ring buffer of %u bytes: want a power of two >= 4096",
				 ring);
	if (o->pid == 0 || o->pid < -1)
		return moem_errf(EINVAL, "pid %d: want a process id or -1 (every process)", o->pid);
	if (o->pid > 0 && kill(o->pid, 0) && errno == ESRCH)
		return moem_errf(ESRCH, "no process %d", o->pid);
	if (!bin) {
		if (o->pid < 0)
			return moem_errf(EINVAL, "tracing every process needs the binary to watch");
		snprintf(exe, sizeof(exe), "/proc/%d/exe", (int)o->pid);
		bin = exe;
	}
	if (access(bin, R_OK))
		return moem_errf(errno == EACCES ? EPERM : ENOENT, "%s: %s", bin, strerror(errno));

	moem_bpf_quiet_libbpf();
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	moem_bpf_libbpf_msg_reset();
	r->skel = moem_route_bpf__open();
	if (!r->skel) {
		ret = moem_bpf_load_error(errno, "opening the route program");
		goto err;
	}
	r->skel->rodata->emit_records = o->records;
	/* Without records the ring buffer only has to exist. */
	bpf_map__set_max_entries(r->skel->maps.moem_routes, o->records ? ring : 4096);
	progs[0] = r->skel->progs.moem_route;
	progs[1] = r->skel->progs.moem_fetch;
	progs[2] = r->skel->progs.moem_stall;
	progs[3] = r->skel->progs.moem_promote;
	progs[4] = r->skel->progs.moem_demote;
	for (unsigned int i = 1; i < MOEM_ARRAY_SIZE(progs); i++)
		bpf_program__set_autoload(progs[i], o->io);
	moem_bpf_libbpf_msg_reset();
	ret = moem_route_bpf__load(r->skel);
	if (ret) {
		ret = moem_bpf_load_error(ret, "loading the route program");
		goto err;
	}
	for (unsigned int i = 0; i < (o->io ? MOEM_ARRAY_SIZE(progs) : 1) && !ret; i++)
		ret = attach(r, progs[i], o->pid, bin, probe_names[i], i == 0);
	if (ret)
		goto err;
	if (o->records) {
		r->rb = ring_buffer__new(bpf_map__fd(r->skel->maps.moem_routes), sample, r, NULL);
		if (!r->rb) {
			ret = moem_bpf_load_error(errno, "opening the route ring buffer");
			goto err;
		}
	}
	*out = r;
	return 0;
err:
	moem_bpf_route_close(r);
	return ret;
}

void moem_bpf_route_close(struct moem_bpf_route *r)
{
	if (!r)
		return;
	ring_buffer__free(r->rb);
	for (unsigned int i = 0; i < r->n_links; i++)
		bpf_link__destroy(r->links[i]);
	moem_route_bpf__destroy(r->skel);
	free(r->keys);
	free(r->vals);
	free(r);
}

int moem_bpf_route_fd(const struct moem_bpf_route *r)
{
	return r->rb ? ring_buffer__epoll_fd(r->rb) : -EINVAL;
}

int moem_bpf_route_poll(struct moem_bpf_route *r, int timeout_ms, moem_bpf_route_fn fn, void *arg)
{
	int ret;

	if (!r->rb)
		return moem_errf(EINVAL, "this tracer was opened without records");
	r->fn = fn;
	r->arg = arg;
	r->cb_ret = 0;
	ret = timeout_ms ? ring_buffer__poll(r->rb, timeout_ms) : ring_buffer__consume(r->rb);
	if (r->cb_ret)
		return r->cb_ret;
	if (ret < 0 && ret != -EINTR)
		return moem_errf(-ret, "reading the route ring buffer: %s", strerror(-ret));
	return ret;
}

int moem_bpf_route_stats(const struct moem_bpf_route *r, struct moem_bpf_route_stats *st)
{
	uint64_t v[MOEM_ST_NR];
	int ret = moem_bpf_percpu_sum(bpf_map__fd(r->skel->maps.moem_stats), MOEM_ST_NR, v);

	if (ret)
		return ret;
	memset(st, 0, sizeof(*st));
	st->routes = v[MOEM_ST_ROUTES];
	st->records = v[MOEM_ST_RECORDS];
	st->dropped_ring = v[MOEM_ST_DROP_RING];
	st->dropped_big = v[MOEM_ST_DROP_BIG];
	st->read_fail = v[MOEM_ST_READ_FAIL];
	st->hot_fail = v[MOEM_ST_HOT_FAIL];
	st->hot_range = v[MOEM_ST_HOT_RANGE];
	st->fetches = v[MOEM_ST_FETCH];
	st->fetch_nvme_bytes = v[MOEM_ST_FETCH_NVME_BYTES];
	st->fetch_hbm_bytes = v[MOEM_ST_FETCH_HBM_BYTES];
	st->fetch_ns = v[MOEM_ST_FETCH_NS];
	st->stalls = v[MOEM_ST_STALL];
	st->stall_ns = v[MOEM_ST_STALL_NS];
	st->promotes = v[MOEM_ST_PROMOTE];
	st->demotes = v[MOEM_ST_DEMOTE];
	return 0;
}

/*
 * Visit every moem_hot entry: batched lookups (one syscall per 4096
 * entries) where the kernel has them, else key by key.
 */
static int hot_each(struct moem_bpf_route *r,
		    void (*fn)(void *arg, const struct moem_hot_key *k, uint64_t v), void *arg)
{
	int fd = bpf_map__fd(r->skel->maps.moem_hot);
	struct moem_hot_key key, next;
	__u64 batch = 0;
	bool first = true;
	int ret;

	if (!r->keys) {
		r->keys = calloc(BATCH, sizeof(*r->keys));
		r->vals = calloc(BATCH, sizeof(*r->vals));
		if (!r->keys || !r->vals)
			return -ENOMEM;
	}
	while (!r->no_batch) {
		__u32 count = BATCH;

		ret = bpf_map_lookup_batch(fd, first ? NULL : &batch, &batch, r->keys, r->vals,
					   &count, NULL);
		if (ret && ret != -ENOENT) {
			if (first && (ret == -EINVAL || ret == -ENOTSUP || ret == -EOPNOTSUPP)) {
				r->no_batch = true;
				break;
			}
			return moem_errf(-ret, "reading moem_hot: %s", strerror(-ret));
		}
		for (__u32 i = 0; i < count; i++)
			fn(arg, &r->keys[i], r->vals[i]);
		if (ret == -ENOENT)
			return 0;
		first = false;
	}
	ret = bpf_map_get_next_key(fd, NULL, &key);
	while (!ret) {
		__u64 v;

		if (!bpf_map_lookup_elem(fd, &key, &v))
			fn(arg, &key, v);
		ret = bpf_map_get_next_key(fd, &key, &next);
		key = next;
	}
	return ret == -ENOENT ? 0 : moem_errf(-ret, "reading moem_hot: %s", strerror(-ret));
}

struct list {
	struct moem_hot_entry *e;
	size_t n, cap;
	int err;
};

static void add_entry(void *arg, const struct moem_hot_key *k, uint64_t v)
{
	struct list *l = arg;

	if (l->err)
		return;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 1024;
		struct moem_hot_entry *e = realloc(l->e, cap * sizeof(*e));

		if (!e) {
			l->err = -ENOMEM;
			return;
		}
		l->e = e;
		l->cap = cap;
	}
	l->e[l->n++] = (struct moem_hot_entry){k->layer, k->expert, v};
}

static int cmp_entry(const void *a, const void *b)
{
	const struct moem_hot_entry *x = a, *y = b;

	if (x->layer != y->layer)
		return x->layer < y->layer ? -1 : 1;
	return x->expert < y->expert ? -1 : x->expert > y->expert;
}

int moem_bpf_hot_read(struct moem_bpf_route *r, struct moem_hot_entry **out, size_t *n)
{
	struct list l = {0};
	int ret = hot_each(r, add_entry, &l);

	if (!ret)
		ret = l.err;
	if (ret) {
		free(l.e);
		return ret;
	}
	if (l.n)
		qsort(l.e, l.n, sizeof(*l.e), cmp_entry);
	*out = l.e;
	*n = l.n;
	return 0;
}

struct dense {
	uint32_t L, N;
	uint64_t *c;
};

static void put_dense(void *arg, const struct moem_hot_key *k, uint64_t v)
{
	struct dense *d = arg;

	if (k->layer < d->L && k->expert < d->N)
		d->c[(size_t)k->layer * d->N + k->expert] = v;
}

int moem_bpf_hot_read_dense(struct moem_bpf_route *r, uint32_t n_layers, uint32_t n_experts,
			    uint64_t *counts)
{
	struct dense d = {n_layers, n_experts, counts};

	memset(counts, 0, sizeof(*counts) * n_layers * n_experts);
	return hot_each(r, put_dense, &d);
}
#endif /* MOEM_NO_BPF */
