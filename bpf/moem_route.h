/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the USDT router program (moem_route.bpf.c) shares with its loader
 * (runtime/observe/bpf/route.c): the moem_hot key, the ring buffer's route record
 * and the counter slots. Plain __u32/__u64 fields, no holes, so the BPF
 * program (vmlinux.h types) and user space (<linux/types.h>) agree.
 */
#ifndef MOEM_BPF_ROUTE_H
#define MOEM_BPF_ROUTE_H

/* moem_hot: a hash map {layer, expert} -> u64 route count, sized for the
 * trace format's bounds (256 MoE layers x 1024 experts). */
#define MOEM_HOT_MAX_LAYERS  256
#define MOEM_HOT_MAX_EXPERTS 1024
#define MOEM_HOT_ENTRIES     (MOEM_HOT_MAX_LAYERS * MOEM_HOT_MAX_EXPERTS)

/* A route record carries at most 64 tokens x 64 slots (the engine's batch
 * and the trace format's top-k bounds); larger ones are counted as dropped. */
#define MOEM_ROUTE_MAX_IDS 4096

struct moem_hot_key {
	__u32 layer;  /* MoE-layer index */
	__u32 expert; /* expert index in that layer */
};

/*
 * One route record in the ring buffer: this header, then ids[tokens * k]
 * (__s32, -1 for an unused slot), then w[tokens * k] (IEEE binary32), so
 * the record is sizeof(header) + 8 * tokens * k bytes.
 */
struct moem_route_ev {
	__u64 step;
	__u64 ts_ns; /* bpf_ktime_get_ns() at the probe */
	__u32 pid;   /* thread group (process) */
	__u32 tid;
	__u32 layer;
	__u32 tokens;
	__u32 k;
	__u32 n_layers;	 /* the model's MoE layers */
	__u32 n_experts; /* experts per MoE layer */
	__u32 flags;	 /* trace.h MOEM_TRACE_F_* header flags */
};

/* Slots of the per-CPU counter array moem_stats. */
enum moem_route_stat {
	MOEM_ST_ROUTES = 0,	  /* route probes seen */
	MOEM_ST_RECORDS,	  /* records put in the ring buffer */
	MOEM_ST_DROP_RING,	  /* records lost: ring buffer full */
	MOEM_ST_DROP_BIG,	  /* records lost: more than MOEM_ROUTE_MAX_IDS ids */
	MOEM_ST_READ_FAIL,	  /* ids/weights unreadable: record and counts lost */
	MOEM_ST_HOT_FAIL,	  /* moem_hot update failed (map full, no memory) */
	MOEM_ST_HOT_RANGE,	  /* ids outside moem_hot's bounds, not counted */
	MOEM_ST_FETCH,		  /* moem:fetch probes */
	MOEM_ST_FETCH_NVME_BYTES, /* bytes fetched NVMe -> DRAM */
	MOEM_ST_FETCH_HBM_BYTES,  /* bytes fetched DRAM -> HBM */
	MOEM_ST_FETCH_NS,	  /* sum of fetch latencies */
	MOEM_ST_STALL,		  /* moem:stall probes */
	MOEM_ST_STALL_NS,	  /* sum of stall times */
	MOEM_ST_PROMOTE,	  /* moem:promote probes */
	MOEM_ST_DEMOTE,		  /* moem:demote probes */
	MOEM_ST_NR
};

#endif /* MOEM_BPF_ROUTE_H */
