/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * moem.ko tracepoints (trace system "moem"): chunk alloc/free, region
 * create/open/destroy/release, mmap and budget change. Enable them under
 * /sys/kernel/tracing/events/moem/.
 */
/* clang-format off */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM moem

#if !defined(_MOEM_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _MOEM_TRACE_H

#include <linux/tracepoint.h>

#include "compat.h"

/* A chunk handed to region id (0: the pool itself, at load). */
TRACE_EVENT(moem_chunk_alloc,
	TP_PROTO(u64 id, unsigned long pfn, int nid, bool fresh),
	TP_ARGS(id, pfn, nid, fresh),
	TP_STRUCT__entry(
		__field(u64, id)
		__field(unsigned long, pfn)
		__field(int, nid)
		__field(bool, fresh)
	),
	TP_fast_assign(
		__entry->id = id;
		__entry->pfn = pfn;
		__entry->nid = nid;
		__entry->fresh = fresh;
	),
	TP_printk("region=%llu pfn=0x%lx node=%d from=%s", __entry->id, __entry->pfn,
		  __entry->nid, __entry->fresh ? "kernel" : "pool")
);

/*
 * A chunk leaving region id: to the free list, to the kernel, or held
 * back still pinned (a second event follows when the pin is gone).
 */
TRACE_EVENT(moem_chunk_free,
	TP_PROTO(u64 id, unsigned long pfn, int nid, int why),
	TP_ARGS(id, pfn, nid, why),
	TP_STRUCT__entry(
		__field(u64, id)
		__field(unsigned long, pfn)
		__field(int, nid)
		__field(int, why)
	),
	TP_fast_assign(
		__entry->id = id;
		__entry->pfn = pfn;
		__entry->nid = nid;
		__entry->why = why;
	),
	TP_printk("region=%llu pfn=0x%lx node=%d to=%s", __entry->id, __entry->pfn,
		  __entry->nid, __print_symbolic(__entry->why,
						 { 0, "pool" }, { 1, "kernel" }, { 2, "pinned" }))
);

TRACE_EVENT(moem_region_create,
	TP_PROTO(const char *name, u64 id, u64 size, u32 flags, u32 mode, u32 uid),
	TP_ARGS(name, id, size, flags, mode, uid),
	TP_STRUCT__entry(
		__string(name, name)
		__field(u64, id)
		__field(u64, size)
		__field(u32, flags)
		__field(u32, mode)
		__field(u32, uid)
	),
	TP_fast_assign(
		moem_assign_str(name, name);
		__entry->id = id;
		__entry->size = size;
		__entry->flags = flags;
		__entry->mode = mode;
		__entry->uid = uid;
	),
	TP_printk("name=%s id=%llu size=%llu flags=0x%x mode=0%o uid=%u", __get_str(name),
		  __entry->id, __entry->size, __entry->flags, __entry->mode, __entry->uid)
);

TRACE_EVENT(moem_region_open,
	TP_PROTO(const char *name, u64 id, u32 flags, u32 uid),
	TP_ARGS(name, id, flags, uid),
	TP_STRUCT__entry(
		__string(name, name)
		__field(u64, id)
		__field(u32, flags)
		__field(u32, uid)
	),
	TP_fast_assign(
		moem_assign_str(name, name);
		__entry->id = id;
		__entry->flags = flags;
		__entry->uid = uid;
	),
	TP_printk("name=%s id=%llu flags=0x%x uid=%u", __get_str(name), __entry->id,
		  __entry->flags, __entry->uid)
);

/* The name goes; the memory follows when the last fd and mapping go. */
TRACE_EVENT(moem_region_destroy,
	TP_PROTO(const char *name, u64 id, int nr_maps, int nr_files),
	TP_ARGS(name, id, nr_maps, nr_files),
	TP_STRUCT__entry(
		__string(name, name)
		__field(u64, id)
		__field(int, nr_maps)
		__field(int, nr_files)
	),
	TP_fast_assign(
		moem_assign_str(name, name);
		__entry->id = id;
		__entry->nr_maps = nr_maps;
		__entry->nr_files = nr_files;
	),
	TP_printk("name=%s id=%llu maps=%d files=%d", __get_str(name), __entry->id,
		  __entry->nr_maps, __entry->nr_files)
);

/* The last reference went: the chunks return to the pool. */
TRACE_EVENT(moem_region_release,
	TP_PROTO(const char *name, u64 id, u64 size),
	TP_ARGS(name, id, size),
	TP_STRUCT__entry(
		__string(name, name)
		__field(u64, id)
		__field(u64, size)
	),
	TP_fast_assign(
		moem_assign_str(name, name);
		__entry->id = id;
		__entry->size = size;
	),
	TP_printk("name=%s id=%llu size=%llu", __get_str(name), __entry->id, __entry->size)
);

TRACE_EVENT(moem_mmap,
	TP_PROTO(const char *name, u64 id, unsigned long start, unsigned long pgoff,
		 unsigned long len, bool writable),
	TP_ARGS(name, id, start, pgoff, len, writable),
	TP_STRUCT__entry(
		__string(name, name)
		__field(u64, id)
		__field(unsigned long, start)
		__field(unsigned long, pgoff)
		__field(unsigned long, len)
		__field(bool, writable)
	),
	TP_fast_assign(
		moem_assign_str(name, name);
		__entry->id = id;
		__entry->start = start;
		__entry->pgoff = pgoff;
		__entry->len = len;
		__entry->writable = writable;
	),
	TP_printk("name=%s id=%llu start=0x%lx pgoff=%lu len=%lu %s", __get_str(name),
		  __entry->id, __entry->start, __entry->pgoff, __entry->len,
		  __entry->writable ? "rw" : "ro")
);

TRACE_EVENT(moem_budget_change,
	TP_PROTO(const char *knob, u64 old, u64 value, u64 seq),
	TP_ARGS(knob, old, value, seq),
	TP_STRUCT__entry(
		__string(knob, knob)
		__field(u64, old)
		__field(u64, value)
		__field(u64, seq)
	),
	TP_fast_assign(
		moem_assign_str(knob, knob);
		__entry->old = old;
		__entry->value = value;
		__entry->seq = seq;
	),
	TP_printk("knob=%s old=%llu new=%llu seq=%llu", __get_str(knob), __entry->old,
		  __entry->value, __entry->seq)
);

#endif /* _MOEM_TRACE_H */

#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE trace
#include <trace/define_trace.h>
/* clang-format on */
