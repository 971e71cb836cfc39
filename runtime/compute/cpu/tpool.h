/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A small fork-join thread pool for the CPU backend. Items are handed out
 * dynamically (an atomic counter), so which thread runs an item varies;
 * callers make each item write its own outputs with a fixed internal
 * order, which keeps results bitwise independent of the thread count.
 *
 * Worker 0 is the calling thread; workers 1..n-1 are threads of the pool,
 * each pinned to one CPU when a placement says so. A caller found on a
 * pinned worker's CPU when it runs a job is kept off the workers' CPUs
 * from then on (its affinity narrowed; given back when that thread
 * destroys the pool): sharing a CPU with a worker halves every job.
 * Threads that caller starts meanwhile inherit the narrowed mask; one
 * that must run on the workers' CPUs sets its own (bench_kernels pins
 * its peers to the mask it read before the first job). Every worker
 * belongs to a NUMA node, and moem_tpool_run_nodes() runs each item on
 * a worker of the item's node (the memory it reads is there).
 */
#ifndef MOEM_CPU_TPOOL_H
#define MOEM_CPU_TPOOL_H

#include <stdint.h>

struct moem_tpool;

/* fn(arg, item, worker): worker in [0, moem_tpool_size()), for scratch. */
typedef void (*moem_tpool_fn)(void *arg, uint32_t item, uint32_t worker);

#define MOEM_TPOOL_MAX_NODES 64

/*
 * Where the workers run: cpu[i] (-1: not pinned; cpu[0] is ignored, the
 * caller is never pinned) and node[i] < n_nodes for worker i.
 */
struct moem_tpool_place {
	uint32_t n_nodes;
	const int *cpu;
	const uint16_t *node;
};

/* n workers in all (the caller is worker 0, so n - 1 threads). place may be NULL (one node). */
int moem_tpool_create(uint32_t n, const struct moem_tpool_place *place, struct moem_tpool **out);
void moem_tpool_destroy(struct moem_tpool *p);
uint32_t moem_tpool_size(const struct moem_tpool *p);
uint32_t moem_tpool_nodes(const struct moem_tpool *p);
/* How many workers are pinned. */
uint32_t moem_tpool_pinned(const struct moem_tpool *p);
/*
 * How long a worker polls for the next job, and the caller for the
 * workers to finish one, before either sleeps (tpool.c): the default,
 * and a setter for tests (0: always sleep).
 */
#define MOEM_TPOOL_SPIN_NS 100000u
void moem_tpool_set_spin(struct moem_tpool *p, uint64_t ns);
/*
 * Workers asleep start polling for a job again, for spin_ns, as after a
 * job: a caller that knows a job is coming soon (a layer's CPU experts,
 * decided before the device's work is issued) calls it first, so the
 * wake-up (tens of microseconds through the futex, more in a VM) passes
 * while it does that work instead of inside the job. Returns at once.
 */
void moem_tpool_wake(struct moem_tpool *p);
/* The node worker w belongs to. */
uint32_t moem_tpool_worker_node(const struct moem_tpool *p, uint32_t w);
/*
 * Run fn over items [0, n_items) and return when all are done. Calls from
 * several threads are serialised. A worker claims a run of consecutive
 * items, 1 / (2 workers) of what is left and at least moem_tpool_grain():
 * items that are consecutive row blocks of a matrix then mostly go to one
 * worker in order, and what its kernel prefetches past its rows is its
 * own next item.
 */
void moem_tpool_run(struct moem_tpool *p, uint32_t n_items, moem_tpool_fn fn, void *arg);
/*
 * The least a claim takes from a list of n_items shared by n_workers:
 * n_items / (16 n_workers), at least 1 and at most MOEM_TPOOL_GRAIN_MAX,
 * so the last claims leave a worker at most 1/16 of its share behind the
 * others.
 */
#define MOEM_TPOOL_GRAIN_MAX 4u
uint32_t moem_tpool_grain(uint32_t n_items, uint32_t n_workers);
/*
 * The same, with item i run by a worker of node item_node[i]; items of a
 * node that has no worker (or >= the pool's nodes) run on any worker.
 * Workers of one node do not take another node's items: for a
 * memory-bound expert a remote worker would only add traffic on the
 * interconnect. -ENOMEM (nothing run) if the pool cannot grow its lists.
 */
int moem_tpool_run_nodes(struct moem_tpool *p, uint32_t n_items, moem_tpool_fn fn, void *arg,
			 const uint16_t *item_node);

#endif /* MOEM_CPU_TPOOL_H */
