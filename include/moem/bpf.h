/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * eBPF tracing of moem (Documentation/tracing.md): loaders for the
 * programs in bpf/, built on libbpf.
 *
 *  - the route tracer attaches to libmoem's USDT probes (usdt.h) in one
 *    process or in every process running a binary; it keeps the moem_hot
 *    map ({MoE layer, expert} -> route count, exact) and streams route
 *    records through a ring buffer (`moem trace record`, `moem trace top`,
 *    the engine's hotness "bpf");
 *  - the pool tracer attaches to moem.ko's tracepoints (`moem trace pool`).
 *
 * Tracing needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN). Nothing in the
 * runtime depends on it: every function here fails cleanly (-EPERM,
 * -EOPNOTSUPP, ... with a message) and callers carry on without.
 *
 * Not thread-safe per object: one thread opens, polls, reads and closes a
 * tracer; different tracers are independent.
 */
#ifndef MOEM_BPF_H
#define MOEM_BPF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The message moem_bpf_check_perm() records: the tools print it as is. */
#define MOEM_BPF_PERM_MSG "needs CAP_BPF and CAP_PERFMON (or root)"

/* False when libmoem was built without the BPF programs (no clang, bpftool,
 * libbpf or kernel BTF at build time); every tracer then returns -EOPNOTSUPP. */
bool moem_bpf_built(void);

/*
 * 0 if the calling thread's effective capabilities allow tracing:
 * CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN. Else -EPERM with the message
 * MOEM_BPF_PERM_MSG. (A kernel or container may still refuse the load;
 * the open functions then return -EPERM with what failed.)
 */
int moem_bpf_check_perm(void);

/* ---- route tracer (USDT) ------------------------------------------------ */

/* moem_hot's bounds: MoE layers and experts per layer it counts. */
#define MOEM_BPF_HOT_LAYERS  256
#define MOEM_BPF_HOT_EXPERTS 1024

/*
 * binary: the file holding the probes: the executable libmoem is linked
 * into (the default, /proc/<pid>/exe) or libmoem.so.
 */
struct moem_bpf_route_opts {
	pid_t pid;	     /* process to trace; -1: every process running binary */
	const char *binary;  /* NULL: /proc/<pid>/exe */
	bool records;	     /* stream route records (else only count moem_hot) */
	bool io;	     /* also count moem:fetch/stall/promote/demote */
	uint32_t ring_bytes; /* ring buffer size, a power of two >= 4096 (0: 8 MiB) */
};

/* One route record as the probe saw it (moem:route's arguments). */
struct moem_bpf_route_rec {
	uint64_t step;
	uint64_t ts_ns; /* CLOCK_MONOTONIC at the probe */
	uint32_t pid, tid;
	uint32_t layer, tokens, k;
	uint32_t n_layers, n_experts;
	uint32_t flags;	    /* trace.h MOEM_TRACE_F_* */
	const int32_t *ids; /* [tokens][k], -1 unused; valid during the callback */
	const float *w;	    /* [tokens][k] */
};

/* Counters kept by the programs since the tracer was opened. */
struct moem_bpf_route_stats {
	uint64_t routes;       /* moem:route probes seen */
	uint64_t records;      /* records put in the ring buffer */
	uint64_t dropped_ring; /* records lost to a full ring buffer */
	uint64_t dropped_big;  /* records over 4096 ids (neither counted nor recorded) */
	uint64_t read_fail;    /* records whose ids or weights could not be read */
	uint64_t hot_fail;     /* moem_hot updates that failed (map full, no memory) */
	uint64_t hot_range;    /* ids outside moem_hot's 256 x 1024 bounds */
	uint64_t fetches, fetch_nvme_bytes, fetch_hbm_bytes, fetch_ns;
	uint64_t stalls, stall_ns;
	uint64_t promotes, demotes;
};

struct moem_bpf_route;

/*
 * Load the route program and attach it. -EPERM (privileges, or the kernel
 * refused the load), -ENOENT (no binary, no process, no moem probes in
 * the binary), -EOPNOTSUPP (built without BPF), each with a message.
 */
int moem_bpf_route_open(const struct moem_bpf_route_opts *o, struct moem_bpf_route **out);
void moem_bpf_route_close(struct moem_bpf_route *r);

/* Callback per record; a non-zero return stops the poll and is returned. */
typedef int (*moem_bpf_route_fn)(void *arg, const struct moem_bpf_route_rec *rec);

/* A descriptor that polls readable when records wait (for epoll/poll). */
int moem_bpf_route_fd(const struct moem_bpf_route *r);
/*
 * Hand every waiting record to fn, waiting up to timeout_ms (-1: forever,
 * 0: not at all) for the first. Returns records handled, fn's non-zero
 * value, or -errno (-EINTR if a signal arrived).
 */
int moem_bpf_route_poll(struct moem_bpf_route *r, int timeout_ms, moem_bpf_route_fn fn, void *arg);
int moem_bpf_route_stats(const struct moem_bpf_route *r, struct moem_bpf_route_stats *st);

/* moem_hot's entries, sorted by (layer, expert). */
struct moem_hot_entry {
	uint32_t layer, expert;
	uint64_t count;
};

/*
 * Read this tracer's moem_hot: *out gets a malloc'd array of *n entries
 * (free() it; NULL and 0 when empty).
 */
int moem_bpf_hot_read(struct moem_bpf_route *r, struct moem_hot_entry **out, size_t *n);
/*
 * Read this tracer's moem_hot into counts[n_layers][n_experts] (every
 * element written; entries outside the shape are ignored). One batched
 * lookup where the kernel has it.
 */
int moem_bpf_hot_read_dense(struct moem_bpf_route *r, uint32_t n_layers, uint32_t n_experts,
			    uint64_t *counts);

/*
 * The expert-count text format shared by `moem run --counts-out` and
 * `moem trace record --hot-out`: a comment line, then one line
 * "layer expert count" per non-zero count in (layer, expert) order, so two
 * files compare with cmp(1). Written to a temporary file and renamed.
 */
int moem_expert_counts_write(const char *path, const uint64_t *counts, uint32_t n_layers,
			     uint32_t n_experts);
/* The same from moem_hot entries (sorted, as moem_bpf_hot_read gives them). */
int moem_hot_entries_write(const char *path, const struct moem_hot_entry *e, size_t n);

/* ---- pool tracer (moem.ko tracepoints) ---------------------------------- */

enum moem_bpf_pool_type {
	MOEM_BPF_POOL_CHUNK_ALLOC = 0,
	MOEM_BPF_POOL_CHUNK_FREE,
	MOEM_BPF_POOL_REGION_CREATE,
	MOEM_BPF_POOL_REGION_OPEN,
	MOEM_BPF_POOL_REGION_DESTROY,
	MOEM_BPF_POOL_REGION_RELEASE,
	MOEM_BPF_POOL_MMAP,
	MOEM_BPF_POOL_BUDGET_CHANGE,
	MOEM_BPF_POOL_NR
};

/*
 * One moem.ko event. name: the region (budget_change: the knob). a..d by
 * type, as the tracepoint has them:
 *   chunk_alloc     a pfn, b node, c fresh (1: from the kernel, 0: pool)
 *   chunk_free      a pfn, b node, c why (0 pool, 1 kernel, 2 pinned)
 *   region_create   a size, b flags, c mode, d uid
 *   region_open     b flags, d uid
 *   region_destroy  a mappings, b files
 *   region_release  a size
 *   mmap            a start, b pgoff, c len, d writable
 *   budget_change   a old, b new, c seq
 */
struct moem_bpf_pool_ev {
	uint64_t ts_ns; /* CLOCK_MONOTONIC */
	enum moem_bpf_pool_type type;
	uint32_t pid, tid;
	char comm[16];
	uint64_t id; /* region id (chunk events: 0 = the pool itself) */
	uint64_t a, b, c, d;
	char name[64];
};

struct moem_bpf_pool_stats {
	uint64_t events[MOEM_BPF_POOL_NR]; /* seen, per type */
	uint64_t dropped;		   /* lost to a full ring buffer */
};

struct moem_bpf_pool;

/*
 * Load the tracepoint program and attach it to every moem.ko tracepoint.
 * -ENOENT with a message when moem.ko is not loaded or tracefs is not
 * mounted; -EPROTO when a tracepoint's record does not have the layout
 * this libmoem was built for (tracefs format files are checked first).
 */
int moem_bpf_pool_open(struct moem_bpf_pool **out);
void moem_bpf_pool_close(struct moem_bpf_pool *p);
typedef int (*moem_bpf_pool_fn)(void *arg, const struct moem_bpf_pool_ev *ev);
int moem_bpf_pool_fd(const struct moem_bpf_pool *p);
/* As moem_bpf_route_poll(). */
int moem_bpf_pool_poll(struct moem_bpf_pool *p, int timeout_ms, moem_bpf_pool_fn fn, void *arg);
int moem_bpf_pool_stats(const struct moem_bpf_pool *p, struct moem_bpf_pool_stats *st);

/* "region_create", ... ("?" out of range). */
const char *moem_bpf_pool_type_name(enum moem_bpf_pool_type t);
/* ev's fields as "name=x id=3 size=4194304 ..." (tracefs's TP_printk wording). */
void moem_bpf_pool_format(const struct moem_bpf_pool_ev *ev, char *buf, size_t n);

#endif /* MOEM_BPF_H */
