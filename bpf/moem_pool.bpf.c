// SPDX-License-Identifier: GPL-2.0-only
/*
 * moem.ko's tracepoints (system "moem", kmod/trace.h) into the ring buffer
 * moem_pool_ev, for `moem trace pool`. Classic tracepoints: the module has
 * no BTF, so the context layouts come from moem_pool.h, which the loader
 * (runtime/observe/bpf/pool.c) checks against tracefs before attaching.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "moem_pool.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} moem_pool_ev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MOEM_PST_NR);
	__type(key, __u32);
	__type(value, __u64);
} moem_pool_st SEC(".maps");

static __always_inline void count(__u32 slot)
{
	__u64 *p = bpf_map_lookup_elem(&moem_pool_st, &slot);

	if (p)
		*p += 1;
}

static __always_inline struct moem_pool_ev *start(__u32 type, __u64 id)
{
	struct moem_pool_ev *e;
	__u64 pt = bpf_get_current_pid_tgid();

	count(type);
	e = bpf_ringbuf_reserve(&moem_pool_ev, sizeof(*e), 0);
	if (!e) {
		count(MOEM_PST_DROPS);
		return NULL;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = bpf_ktime_get_ns();
	e->type = type;
	e->pid = pt >> 32;
	e->tid = (__u32)pt;
	e->id = id;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	return e;
}

/* A __data_loc string: offset from the record start in the low 16 bits. */
static __always_inline void name_of(struct moem_pool_ev *e, const void *ctx, __u32 loc)
{
	bpf_probe_read_kernel_str(e->name, sizeof(e->name), ctx + (loc & 0xffff));
}

SEC("tracepoint/moem/moem_chunk_alloc")
int moem_chunk_alloc(struct moem_tp_chunk_alloc *tp)
{
	struct moem_pool_ev *e = start(MOEM_PEV_CHUNK_ALLOC, tp->id);

	if (!e)
		return 0;
	e->a = tp->pfn;
	e->b = (__u64)(__s64)tp->nid;
	e->c = tp->fresh;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tracepoint/moem/moem_chunk_free")
int moem_chunk_free(struct moem_tp_chunk_free *tp)
{
	struct moem_pool_ev *e = start(MOEM_PEV_CHUNK_FREE, tp->id);

	if (!e)
		return 0;
	e->a = tp->pfn;
	e->b = (__u64)(__s64)tp->nid;
	e->c = (__u64)(__s64)tp->why;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tracepoint/moem/moem_region_create")
int moem_region_create(struct moem_tp_region_create *tp)
{
	struct moem_pool_ev *e = start(MOEM_PEV_REGION_CREATE, tp->id);

	if (!e)
		return 0;
	name_of(e, tp, tp->name);
	e->a = tp->size;
	e->b = tp->flags;
	e->c = tp->mode;
	e->d = tp->uid;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tracepoint/moem/moem_region_open")
int moem_region_open(struct moem_tp_region_open *tp)
{
	struct moem_pool_ev *e = start(MOEM_PEV_REGION_OPEN, tp->id);

	if (!e)
		return 0;
	name_of(e, tp, tp->name);
	e->b = tp->flags;
	e->d = tp->uid;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tracepoint/moem/moem_region_destroy")
int moem_region_destroy(struct moem_tp_region_destroy *tp)
{
	struct moem_pool_ev *e = start(MOEM_PEV_REGION_DESTROY, tp->id);

	if (!e)
		return 0;
	name_of(e, tp, tp->name);
	e->a = (__u64)(__s64)tp->nr_maps;
	e->b = (__u64)(__s64)tp->nr_files;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tracepoint/moem/moem_region_release")
int moem_region_release(struct moem_tp_region_release *tp)
{
	struct moem_pool_ev *e = start(MOEM_PEV_REGION_RELEASE, tp->id);

	if (!e)
		return 0;
	name_of(e, tp, tp->name);
	e->a = tp->size;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tracepoint/moem/moem_mmap")
int moem_mmap(struct moem_tp_mmap *tp)
{
	struct moem_pool_ev *e = start(MOEM_PEV_MMAP, tp->id);

	if (!e)
		return 0;
	name_of(e, tp, tp->name);
	e->a = tp->start;
	e->b = tp->pgoff;
	e->c = tp->len;
	e->d = tp->writable;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tracepoint/moem/moem_budget_change")
int moem_budget_change(struct moem_tp_budget_change *tp)
{
	struct moem_pool_ev *e = start(MOEM_PEV_BUDGET_CHANGE, 0);

	if (!e)
		return 0;
	name_of(e, tp, tp->knob);
	e->a = tp->old;
	e->b = tp->value;
	e->c = tp->seq;
	bpf_ringbuf_submit(e, 0);
	return 0;
}
