/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the moem.ko tracepoint program (moem_pool.bpf.c) shares with its
 * loader (runtime/observe/bpf/pool.c).
 *
 * moem.ko is built without BTF, so its tracepoints are attached as classic
 * tracepoints whose context is the record tracefs describes in
 * events/moem/<event>/format. The structs below spell those records out
 * (kmod/trace.h's TP_STRUCT__entry after the 8-byte common header, x86-64
 * sizes); the loader compares every field's offset and size with the
 * format file before it attaches, so a module built differently is refused
 * rather than misread.
 */
#ifndef MOEM_BPF_POOL_H
#define MOEM_BPF_POOL_H

enum moem_pool_ev_type {
	MOEM_PEV_CHUNK_ALLOC = 0,
	MOEM_PEV_CHUNK_FREE,
	MOEM_PEV_REGION_CREATE,
	MOEM_PEV_REGION_OPEN,
	MOEM_PEV_REGION_DESTROY,
	MOEM_PEV_REGION_RELEASE,
	MOEM_PEV_MMAP,
	MOEM_PEV_BUDGET_CHANGE,
	MOEM_PEV_NR
};

/* Per-CPU counters (moem_pool_st): one per event type, then drops. */
#define MOEM_PST_DROPS MOEM_PEV_NR
#define MOEM_PST_NR    (MOEM_PEV_NR + 1)

/*
 * One event in the ring buffer moem_pool_ev. name is the region name
 * (budget_change: the knob); a..d by type:
 *   chunk_alloc     a pfn, b node, c fresh (1: from the kernel, 0: pool)
 *   chunk_free      a pfn, b node, c why (0 pool, 1 kernel, 2 pinned)
 *   region_create   a size, b flags, c mode, d uid
 *   region_open     b flags, d uid
 *   region_destroy  a mappings, b files
 *   region_release  a size
 *   mmap            a start, b pgoff, c len, d writable
 *   budget_change   a old, b new, c seq
 */
struct moem_pool_ev {
	__u64 ts_ns;
	__u32 type;
	__u32 pid; /* thread group of the task that hit the tracepoint */
	__u32 tid;
	__u32 reserved;
	char comm[16];
	__u64 id; /* region id (chunk events: 0 = the pool itself) */
	__u64 a, b, c, d;
	char name[64];
};

/* The tracepoint records (offsets checked against tracefs at load). */
struct moem_tp_common {
	__u16 type;
	__u8 flags;
	__u8 preempt_count;
	__s32 pid;
};

struct moem_tp_chunk_alloc {
	struct moem_tp_common c;
	__u64 id;
	__u64 pfn;
	__s32 nid;
	__u8 fresh;
};

struct moem_tp_chunk_free {
	struct moem_tp_common c;
	__u64 id;
	__u64 pfn;
	__s32 nid;
	__s32 why;
};

struct moem_tp_region_create {
	struct moem_tp_common c;
	__u32 name; /* __data_loc: offset | length << 16 */
	__u64 id;
	__u64 size;
	__u32 flags;
	__u32 mode;
	__u32 uid;
};

struct moem_tp_region_open {
	struct moem_tp_common c;
	__u32 name;
	__u64 id;
	__u32 flags;
	__u32 uid;
};

struct moem_tp_region_destroy {
	struct moem_tp_common c;
	__u32 name;
	__u64 id;
	__s32 nr_maps;
	__s32 nr_files;
};

struct moem_tp_region_release {
	struct moem_tp_common c;
	__u32 name;
	__u64 id;
	__u64 size;
};

struct moem_tp_mmap {
	struct moem_tp_common c;
	__u32 name;
	__u64 id;
	__u64 start;
	__u64 pgoff;
	__u64 len;
	__u8 writable;
};

struct moem_tp_budget_change {
	struct moem_tp_common c;
	__u32 knob;
	__u64 old;
	__u64 value;
	__u64 seq;
};

#endif /* MOEM_BPF_POOL_H */
