// SPDX-License-Identifier: GPL-2.0-only
/*
 * libmoem's USDT probes (include/moem/usdt.h) as seen by BPF:
 *
 *  - moem:route  counts every routed (token, slot) into moem_hot, a hash
 *                map {MoE layer, expert} -> u64, with atomic adds so the
 *                counts are exact, and (if emit_records) copies the
 *                record (ids and weights) into the ring buffer moem_routes;
 *  - moem:fetch, moem:stall, moem:promote, moem:demote add to moem_stats.
 *
 * The loader is runtime/observe/bpf/route.c; moem_route.h has the shared layouts;
 * Documentation/tracing.md explains how to read the maps with bpftool.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

#include "moem_route.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by the loader before load: stream records, or count only. */
const volatile bool emit_records = true;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MOEM_HOT_ENTRIES);
	/* Allocated as experts appear: a 48 x 128 model holds 6144 entries. */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct moem_hot_key);
	__type(value, __u64);
} moem_hot SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20); /* the loader may resize it */
} moem_routes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MOEM_ST_NR);
	__type(key, __u32);
	__type(value, __u64);
} moem_stats SEC(".maps");

static __always_inline void stat_add(__u32 slot, __u64 v)
{
	__u64 *p = bpf_map_lookup_elem(&moem_stats, &slot);

	if (p)
		*p += v; /* per-CPU: no other writer */
}

static __always_inline void hot_add(__u32 layer, __s32 expert, __u32 n_experts)
{
	struct moem_hot_key key = {layer, (__u32)expert};
	__u64 one = 1, *v;

	if (expert < 0 || (__u32)expert >= n_experts)
		return; /* an unused slot (-1), not a route */
	if (layer >= MOEM_HOT_MAX_LAYERS || (__u32)expert >= MOEM_HOT_MAX_EXPERTS) {
		stat_add(MOEM_ST_HOT_RANGE, 1);
		return;
	}
	v = bpf_map_lookup_elem(&moem_hot, &key);
	if (v) {
		__sync_fetch_and_add(v, 1);
		return;
	}
	if (!bpf_map_update_elem(&moem_hot, &key, &one, BPF_NOEXIST))
		return;
	/* Another CPU created it first (-EEXIST): add to its entry. */
	v = bpf_map_lookup_elem(&moem_hot, &key);
	if (v)
		__sync_fetch_and_add(v, 1);
	else
		stat_add(MOEM_ST_HOT_FAIL, 1);
}

#define CHUNK 16

struct count_ctx {
	const __s32 *ids; /* user memory */
	__u32 n, layer, n_experts;
	long err;
};

/* bpf_loop callback: count ids [16 i, 16 i + 16) of the record. */
static long count_chunk(__u32 i, void *arg)
{
	struct count_ctx *c = arg;
	__s32 buf[CHUNK];
	__u64 first = (__u64)i * CHUNK, m;

	if (first >= c->n)
		return 1;
	m = c->n - first;
	/* The bound the verifier must see is on the register the helper gets. */
	asm volatile("" : "+r"(m));
	if (m > CHUNK)
		m = CHUNK;
	asm volatile("" : "+r"(m));
	if (m > CHUNK)
		return 1;
	c->err = bpf_probe_read_user(buf, m * sizeof(__s32), c->ids + first);
	if (c->err)
		return 1;
	for (__u32 j = 0; j < CHUNK; j++) {
		if (j >= m)
			break;
		hot_add(c->layer, buf[j], c->n_experts);
	}
	return 0;
}

/*
 * Copy the record into a ring buffer slot of a fixed size class (the
 * verifier wants a constant reservation; three classes keep the waste
 * below 8x): header, ids[n], w[n].
 */
static __always_inline long emit(const struct moem_route_ev *h, const void *ids, const void *w,
				 __u32 n, const __u32 cap)
{
	struct moem_route_ev *r;
	__u64 bytes = (__u64)n * 4;
	long err;

	/* Keep the bound check on the register the helpers get. */
	asm volatile("" : "+r"(bytes));
	if (bytes > 4 * cap)
		return -E2BIG;
	r = bpf_ringbuf_reserve(&moem_routes, sizeof(*h) + 8 * cap, 0);
	if (!r)
		return -ENOSPC;
	*r = *h;
	err = bpf_probe_read_user((void *)(r + 1), bytes, ids);
	if (!err)
		err = bpf_probe_read_user((void *)(r + 1) + bytes, bytes, w);
	if (err) {
		bpf_ringbuf_discard(r, 0);
		return err;
	}
	bpf_ringbuf_submit(r, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(moem_route, __u32 layer, __u64 step, __u32 tokens, __u32 k, const __s32 *ids,
	     const float *w, __u32 n_layers, __u32 n_experts, __u32 flags)
{
	struct count_ctx c = {ids, 0, layer, n_experts, 0};
	struct moem_route_ev h;
	__u64 id = bpf_get_current_pid_tgid();
	long err = 0;

	stat_add(MOEM_ST_ROUTES, 1);
	if (!tokens || !k || tokens > MOEM_ROUTE_MAX_IDS || k > MOEM_ROUTE_MAX_IDS ||
	    tokens * k > MOEM_ROUTE_MAX_IDS) {
		stat_add(MOEM_ST_DROP_BIG, 1);
		return 0;
	}
	c.n = tokens * k;
	bpf_loop((c.n + CHUNK - 1) / CHUNK, count_chunk, &c, 0);
	if (c.err) {
		stat_add(MOEM_ST_READ_FAIL, 1);
		return 0;
	}
	if (!emit_records)
		return 0;
	h.step = step;
	h.ts_ns = bpf_ktime_get_ns();
	h.pid = id >> 32;
	h.tid = (__u32)id;
	h.layer = layer;
	h.tokens = tokens;
	h.k = k;
	h.n_layers = n_layers;
	h.n_experts = n_experts;
	h.flags = flags;
	if (c.n <= 64)
		err = emit(&h, ids, w, c.n, 64);
	else if (c.n <= 512)
		err = emit(&h, ids, w, c.n, 512);
	else
		err = emit(&h, ids, w, c.n, MOEM_ROUTE_MAX_IDS);
	if (!err)
		stat_add(MOEM_ST_RECORDS, 1);
	else if (err == -ENOSPC)
		stat_add(MOEM_ST_DROP_RING, 1);
	else
		stat_add(MOEM_ST_READ_FAIL, 1);
	return 0;
}

SEC("usdt")
int BPF_USDT(moem_fetch, __u32 layer, __u32 expert, __u32 prec, __u32 from, __u32 to, __u64 bytes,
	     __u64 ns)
{
	stat_add(MOEM_ST_FETCH, 1);
	stat_add(to == 2 ? MOEM_ST_FETCH_HBM_BYTES : MOEM_ST_FETCH_NVME_BYTES, bytes);
	stat_add(MOEM_ST_FETCH_NS, ns);
	return 0;
}

SEC("usdt")
int BPF_USDT(moem_stall, __u32 layer, __u32 expert, __u64 ns)
{
	stat_add(MOEM_ST_STALL, 1);
	stat_add(MOEM_ST_STALL_NS, ns);
	return 0;
}

SEC("usdt")
int BPF_USDT(moem_promote, __u32 layer, __u32 expert, __u32 from, __u32 to)
{
	stat_add(MOEM_ST_PROMOTE, 1);
	return 0;
}

SEC("usdt")
int BPF_USDT(moem_demote, __u32 layer, __u32 expert, __u32 from, __u32 to)
{
	stat_add(MOEM_ST_DEMOTE, 1);
	return 0;
}
