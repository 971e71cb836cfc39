/* SPDX-License-Identifier: GPL-2.0-only */
/* Provider interface behind moem_pool (pool.h). */
#ifndef MOEM_POOL_INT_H
#define MOEM_POOL_INT_H

#include <moem/pool.h>

struct moem_pool {
	void *base;
	uint64_t size;
	int dev_fd; /* kmod: /dev/moem, else -1 */
	int fd;	    /* kmod region fd or hugetlb memfd, else -1 */
	struct moem_pool_info info;
	char limit[240]; /* how moem_pool_fit() shrank it, or "" */
	bool bind;	 /* info.nodes are to be bound (nodes.c) */
};

/*
 * Check a pool of *size bytes against what the machine can give: have
 * bytes that need no new memory (moem.ko's free chunks, reserved huge
 * pages), plus new memory up to min(headroom, ceiling) (ceiling_what
 * names the provider's own limit). 0, or -ENOMEM with a message naming
 * the limit; with opts->fit *size is shrunk instead (pool->limit says so).
 */
int moem_pool_fit(const struct moem_pool_opts *o, struct moem_pool *pool, uint64_t have,
		  uint64_t ceiling, const char *ceiling_what, uint64_t *size);
/* moem.ko's free chunk bytes and the room below its ceiling (max_pool_mb),
 * from sysfs; -ENOENT without the module. */
int moem_pool_kmod_room(uint64_t *free_bytes, uint64_t *room);

/* Each provider maps opts->size bytes (already 2 MiB aligned) into pool. */
int moem_pool_kmod_open(const struct moem_pool_opts *opts, struct moem_pool *pool);
int moem_pool_hugetlb_open(const struct moem_pool_opts *opts, struct moem_pool *pool);
int moem_pool_thp_open(const struct moem_pool_opts *opts, struct moem_pool *pool);

/*
 * nodes.c. plan: cut size bytes into info.nodes' ranges, one per node of
 * opts->nodes (pool->bind set when they are to be bound); room: refuse a
 * range its node cannot hold (hugetlb: its free huge pages); bind:
 * mbind each range at base, before its pages are touched; check: after
 * they are, every chunk on its range's node (or, unbound, record the
 * node if all chunks share one).
 */
int moem_pool_nodes_plan(const struct moem_pool_opts *opts, uint64_t size, struct moem_pool *pool);
int moem_pool_nodes_room(struct moem_pool *pool, bool hugetlb);
int moem_pool_nodes_bind(struct moem_pool *pool, void *base);
int moem_pool_nodes_check(struct moem_pool *pool, void *base);

/* Free 2 MiB huge pages the kernel has reserved, from sysfs. */
uint64_t moem_hugetlb_free_pages(void);

#endif /* MOEM_POOL_INT_H */
