// SPDX-License-Identifier: GPL-2.0-only
/*
 * The CPU backend: "device" memory is host memory, copies are memcpy, and
 * every call runs to completion before it returns, so streams are
 * trivially ordered and events are always complete (they keep the
 * host-clock time of their record for elapsed()). The tiers layer can
 * emulate HBM and PCIe timing on top of this through the same interface.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/util.h>

#include "cpu_int.h"
#include "kern.h"

void *moem_cpu_scratch(struct moem_stream *s, size_t bytes)
{
	struct cpu_stream *cs = (struct cpu_stream *)s;
	void *p;

	if (bytes <= cs->cap)
		return cs->scratch;
	bytes = moem_align_up(bytes, 4096);
	p = aligned_alloc(64, bytes);
	if (!p) {
		moem_errf(ENOMEM, "cpu backend: cannot allocate %zu bytes of scratch", bytes);
		return NULL;
	}
	free(cs->scratch);
	cs->scratch = p;
	cs->cap = bytes;
	return p;
}

static void cpu_close(struct moem_backend *be)
{
	struct cpu_backend *c = cpu_of(be);

	moem_tpool_destroy(c->pool);
	free(c->dflt.scratch);
	free(c->node_items);
	free(c);
}

static int cpu_alloc(struct moem_backend *be, uint64_t bytes, moem_dptr *out)
{
	uint64_t len;
	void *p;

	if (moem_align_up_overflow(bytes, MOEM_BE_ALIGN, &len) || len > SIZE_MAX)
		return moem_errf(EINVAL, "alloc: %llu bytes", (unsigned long long)bytes);
	p = aligned_alloc(MOEM_BE_ALIGN, len);
	if (!p) {
		char b[32];

		return moem_errf(ENOMEM, "cpu backend: cannot allocate %s",
				 moem_fmt_bytes(bytes, b, sizeof(b)));
	}
	*out = (moem_dptr)(uintptr_t)p;
	return 0;
}

static void cpu_free(struct moem_backend *be, moem_dptr p)
{
	free(moem_dptr_host(p));
}

static int cpu_mem_info(struct moem_backend *be, uint64_t *free_bytes, uint64_t *total)
{
	struct sysinfo si;

	if (sysinfo(&si))
		return -errno;
	*free_bytes = (uint64_t)si.freeram * si.mem_unit;
	*total = (uint64_t)si.totalram * si.mem_unit;
	return 0;
}

static int cpu_memset(struct moem_backend *be, moem_dptr p, int v, uint64_t bytes,
		      struct moem_stream *s)
{
	memset(moem_dptr_host(p), v, bytes);
	return 0;
}

static int cpu_htod(struct moem_backend *be, moem_dptr dst, const void *src, uint64_t bytes,
		    struct moem_stream *s)
{
	memmove(moem_dptr_host(dst), src, bytes);
	return 0;
}

static int cpu_dtoh(struct moem_backend *be, void *dst, moem_dptr src, uint64_t bytes,
		    struct moem_stream *s)
{
	memmove(dst, moem_dptr_host(src), bytes);
	return 0;
}

static int cpu_dtod(struct moem_backend *be, moem_dptr dst, moem_dptr src, uint64_t bytes,
		    struct moem_stream *s)
{
	memmove(moem_dptr_host(dst), moem_dptr_host(src), bytes);
	return 0;
}

static int cpu_host_register(struct moem_backend *be, void *p, uint64_t bytes)
{
	return 0;
}

static int cpu_host_unregister(struct moem_backend *be, void *p)
{
	return 0;
}

static void cpu_wake(struct moem_backend *be)
{
	moem_tpool_wake(cpu_of(be)->pool);
}

static int cpu_stream_create(struct moem_backend *be, struct moem_stream **out)
{
	struct cpu_stream *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->base.be = be;
	*out = &s->base;
	return 0;
}

static void cpu_stream_destroy(struct moem_backend *be, struct moem_stream *s)
{
	struct cpu_stream *cs = (struct cpu_stream *)s;

	free(cs->scratch);
	free(cs);
}

static int cpu_nop_stream(struct moem_backend *be, struct moem_stream *s)
{
	return 0;
}

static int cpu_stream_wait(struct moem_backend *be, struct moem_stream *s, struct moem_event *ev)
{
	return 0;
}

static int cpu_sync(struct moem_backend *be)
{
	return 0;
}

static int cpu_event_create(struct moem_backend *be, struct moem_event **out)
{
	struct cpu_event *e = calloc(1, sizeof(*e));

	if (!e)
		return -ENOMEM;
	e->base.be = be;
	*out = &e->base;
	return 0;
}

static void cpu_event_destroy(struct moem_backend *be, struct moem_event *ev)
{
	free(ev);
}

static int cpu_event_record(struct moem_backend *be, struct moem_event *ev, struct moem_stream *s)
{
	struct cpu_event *e = (struct cpu_event *)ev;

	e->ns = moem_now_ns();
	e->recorded = 1;
	return 0;
}

static int cpu_event_done(struct moem_backend *be, struct moem_event *ev)
{
	return 0;
}

static int cpu_event_elapsed(struct moem_backend *be, struct moem_event *a, struct moem_event *b,
			     float *ms)
{
	struct cpu_event *x = (struct cpu_event *)a, *y = (struct cpu_event *)b;

	if (!x->recorded || !y->recorded)
		return moem_errf(EINVAL, "event elapsed: event was never recorded");
	*ms = (float)(((double)y->ns - (double)x->ns) / 1e6);
	return 0;
}

static const struct moem_backend_ops cpu_ops = {
	.name = "cpu",
	.close = cpu_close,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.mem_info = cpu_mem_info,
	.memset = cpu_memset,
	.htod = cpu_htod,
	.dtoh = cpu_dtoh,
	.dtod = cpu_dtod,
	.host_register = cpu_host_register,
	.wake = cpu_wake,
	.host_unregister = cpu_host_unregister,
	.stream_create = cpu_stream_create,
	.stream_destroy = cpu_stream_destroy,
	.stream_sync = cpu_nop_stream,
	.stream_wait = cpu_stream_wait,
	.sync = cpu_sync,
	.event_create = cpu_event_create,
	.event_destroy = cpu_event_destroy,
	.event_record = cpu_event_record,
	.event_query = cpu_event_done,
	.event_sync = cpu_event_done,
	.event_elapsed = cpu_event_elapsed,
	.rmsnorm = moem_cpu_rmsnorm,
	.router = moem_cpu_router,
	.route = moem_cpu_route,
	.ffn = moem_cpu_ffn,
	.combine = moem_cpu_combine,
	.quantize = moem_cpu_quantize,
	.histogram = moem_cpu_histogram,
	.embed = moem_cpu_embed,
	.matmul = moem_cpu_matmul,
	.rownorm = moem_cpu_rownorm,
	.convert = moem_cpu_convert,
	.rope = moem_cpu_rope,
	.head_matmul = moem_cpu_head_matmul,
	.kv_store = moem_cpu_kv_store,
	.attention = moem_cpu_attention,
};

static const struct moem_cpu_kern *kern_for(enum moem_cpu_isa isa)
{
	switch (isa) {
	case MOEM_CPU_ISA_AMX:
		return &moem_cpu_kern_amx;
	case MOEM_CPU_ISA_AVX512:
		return &moem_cpu_kern_avx512;
	case MOEM_CPU_ISA_AVX2:
		return &moem_cpu_kern_avx2;
	default:
		return &moem_cpu_kern_scalar;
	}
}

int moem_cpu_backend_open_hooks(const struct moem_backend_opts *opts,
				const struct moem_cpu_hooks *hooks, struct moem_backend **out)
{
	static const struct moem_cpu_hooks none;
	int cpu[256];
	uint16_t node[256];
	struct moem_tpool_place place = {.cpu = cpu, .node = node};
	struct cpu_backend *c;
	enum moem_cpu_isa isa;
	uint32_t n = opts->threads, nodes_used = 0;
	bool pin, seen[MOEM_TPOOL_MAX_NODES] = {0};
	uint64_t fr;
	int ret;

	if (!hooks)
		hooks = &none;
	ret = moem_cpu_isa_resolve(opts->isa, &isa);
	if (ret)
		return ret;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->hooks = *hooks;
	c->kern = hooks->kern ? hooks->kern : kern_for(isa);
	if (hooks->topo)
		c->topo = *hooks->topo;
	else
		moem_cpu_topo_detect(&c->topo);
	if (!n)
		n = moem_min(moem_cpu_count(), 256);
	/* a made-up topology names CPUs that may not exist: never pin to them */
	pin = !opts->no_pin && !hooks->topo && n <= c->topo.n_cpus;
	place.n_nodes = c->topo.n_nodes;
	for (uint32_t i = 0; i < n; i++) {
		cpu[i] = pin && i ? c->topo.cpu[i] : -1;
		node[i] = c->topo.node[i % c->topo.n_cpus];
		if (!seen[node[i]]) {
			seen[node[i]] = true;
			nodes_used++;
		}
	}
	c->node_items =
		calloc((size_t)c->topo.n_nodes * (c->topo.n_nodes + 1), sizeof(*c->node_items));
	if (!c->node_items) {
		free(c);
		return -ENOMEM;
	}
	ret = moem_tpool_create(n, &place, &c->pool);
	if (ret) {
		free(c->node_items);
		free(c);
		return ret;
	}
	c->base.ops = &cpu_ops;
	c->base.kind = MOEM_BACKEND_CPU;
	c->dflt.base.be = &c->base;
	c->base.dflt = &c->dflt.base;
	c->base.info.kind = MOEM_BACKEND_CPU;
	c->base.info.threads = n;
	c->base.info.isa = c->kern->isa;
	c->base.info.pinned = pin;
	c->base.info.numa_nodes = nodes_used;
	cpu_mem_info(&c->base, &fr, &c->base.info.mem_total);
	snprintf(c->base.info.device, sizeof(c->base.info.device), "cpu: %u thread%s, %s%s", n,
		 n == 1 ? "" : "s", moem_cpu_isa_name(c->kern->isa), pin ? ", pinned" : "");
	if (nodes_used > 1) {
		size_t len = strlen(c->base.info.device);

		snprintf(c->base.info.device + len, sizeof(c->base.info.device) - len,
			 ", %u NUMA nodes", nodes_used);
	}
	*out = &c->base;
	return 0;
}

int moem_cpu_backend_open(const struct moem_backend_opts *opts, struct moem_backend **out)
{
	return moem_cpu_backend_open_hooks(opts, NULL, out);
}

uint64_t moem_cpu_backend_node_items(struct moem_backend *be, uint32_t w, uint32_t e)
{
	struct cpu_backend *c = cpu_of(be);

	if (w >= c->topo.n_nodes || e > c->topo.n_nodes)
		return 0;
	return atomic_load(&c->node_items[(size_t)w * (c->topo.n_nodes + 1) + e]);
}
