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
};

/* Each provider maps opts->size bytes (already 2 MiB aligned) into pool. */
int moem_pool_kmod_open(const struct moem_pool_opts *opts, struct moem_pool *pool);
int moem_pool_hugetlb_open(const struct moem_pool_opts *opts, struct moem_pool *pool);
int moem_pool_thp_open(const struct moem_pool_opts *opts, struct moem_pool *pool);

/* Free 2 MiB huge pages the kernel has reserved, from sysfs. */
uint64_t moem_hugetlb_free_pages(void);

#endif /* MOEM_POOL_INT_H */
