// SPDX-License-Identifier: GPL-2.0-only
/* hugetlb provider: memfd_create(MFD_HUGETLB | MFD_HUGE_2MB). */
#include <errno.h>
#include <fcntl.h>
#include <linux/memfd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/util.h>

#include "pool_int.h"

#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21U << 26)
#endif

uint64_t moem_hugetlb_free_pages(void)
{
	FILE *f = fopen("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "r");
	unsigned long long n = 0;

	if (!f)
		return 0;
	if (fscanf(f, "%llu", &n) != 1)
		n = 0;
	fclose(f);
	return n;
}

int moem_pool_hugetlb_open(const struct moem_pool_opts *in, struct moem_pool *pool)
{
	struct moem_pool_opts o = *in, *opts = &o;
	struct moem_smaps sm;
	void *base;
	int fd, ret;

	/* Only reserved huge pages serve it (not MemAvailable's memory). */
	ret = moem_pool_fit(in, pool, moem_hugetlb_free_pages() * MOEM_CHUNK_BYTES, 0,
			    "the free huge pages (vm.nr_hugepages)", &o.size);
	if (ret)
		return moem_err_prefix(ENOSPC, "hugetlb");
	ret = moem_pool_nodes_plan(in, o.size, pool);
	if (!ret)
		ret = moem_pool_nodes_room(pool, true);
	if (ret)
		return ret;

	fd = memfd_create("moem-pool", MFD_CLOEXEC | MFD_HUGETLB | MFD_HUGE_2MB);
	if (fd < 0)
		return moem_errf(errno, "memfd_create(MFD_HUGETLB): %s", strerror(errno));
	if (ftruncate(fd, (off_t)opts->size) < 0) {
		ret = moem_errf(errno, "hugetlb pool: ftruncate: %s", strerror(errno));
		goto err_fd;
	}
	/* MAP_POPULATE faults every huge page now: a shortage fails here, not
	 * later with SIGBUS in the middle of a load. Over NUMA nodes the
	 * ranges are bound first, then faulted with MADV_POPULATE_WRITE,
	 * which fails the same way (Linux 5.14). */
	base = mmap(NULL, opts->size, PROT_READ | PROT_WRITE,
		    MAP_SHARED | (pool->bind ? 0 : MAP_POPULATE), fd, 0);
	if (base == MAP_FAILED) {
		ret = moem_errf(errno == ENOMEM ? ENOSPC : errno,
				"hugetlb pool of %llu MiB: %s (reserve more with vm.nr_hugepages)",
				(unsigned long long)(opts->size >> 20), strerror(errno));
		goto err_fd;
	}
	if (pool->bind) {
		ret = moem_pool_nodes_bind(pool, base);
		if (!ret && madvise(base, opts->size, MADV_POPULATE_WRITE))
			ret = moem_errf(errno == ENOMEM || errno == EFAULT ? ENOSPC : errno,
					"hugetlb pool of %llu MiB over %u NUMA nodes: populate: "
					"%s (reserve huge pages on each node: "
					"/sys/devices/system/node/nodeN/hugepages)",
					(unsigned long long)(opts->size >> 20), pool->info.n_nodes,
					strerror(errno));
		if (ret) {
			munmap(base, opts->size);
			goto err_fd;
		}
	}
	pool->base = base;
	pool->size = opts->size;
	pool->fd = fd;
	pool->info.provider = MOEM_POOL_HUGETLB;
	pool->info.pinned = true; /* hugetlb pages are never swapped or reclaimed */
	pool->info.pinned_bytes = opts->size;
	pool->info.page_bytes = 4096;
	if (moem_smaps_read(base, &sm) == 0) {
		pool->info.page_bytes = sm.kernel_page;
		pool->info.huge_bytes = sm.huge;
	}
	snprintf(pool->info.backing, sizeof(pool->info.backing),
		 "smaps: KernelPageSize %llu kB, %llu MiB hugetlb",
		 (unsigned long long)(pool->info.page_bytes >> 10),
		 (unsigned long long)(pool->info.huge_bytes >> 20));
	return 0;

err_fd:
	close(fd);
	return ret;
}
