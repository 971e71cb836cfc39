/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A small fork-join thread pool for the CPU backend. Items are handed out
 * dynamically (an atomic counter), so which thread runs an item varies;
 * callers make each item write its own outputs with a fixed internal
 * order, which keeps results bitwise independent of the thread count.
 */
#ifndef MOEM_CPU_TPOOL_H
#define MOEM_CPU_TPOOL_H

#include <stdint.h>

struct moem_tpool;

/* fn(arg, item, worker): worker in [0, moem_tpool_size()), for scratch. */
typedef void (*moem_tpool_fn)(void *arg, uint32_t item, uint32_t worker);

/* n workers in all (the caller is worker 0, so n - 1 threads). */
int moem_tpool_create(uint32_t n, struct moem_tpool **out);
void moem_tpool_destroy(struct moem_tpool *p);
uint32_t moem_tpool_size(const struct moem_tpool *p);
/*
 * Run fn over items [0, n_items) and return when all are done. Calls from
 * several threads are serialised.
 */
void moem_tpool_run(struct moem_tpool *p, uint32_t n_items, moem_tpool_fn fn, void *arg);

#endif /* MOEM_CPU_TPOOL_H */
