// SPDX-License-Identifier: GPL-2.0-only
/*
 * thp provider: anonymous memory aligned to 2 MiB with MADV_HUGEPAGE, then
 * mlock()ed so reclaim cannot take it. Without the privilege to lock
 * (RLIMIT_MEMLOCK) the pool still works, unpinned, and says so.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/util.h>

#include "pool_int.h"

int moem_pool_thp_open(const struct moem_pool_opts *in, struct moem_pool *pool)
{
	struct moem_pool_opts o = *in, *opts = &o;
	uint64_t len;
	struct moem_smaps sm;
	struct rlimit rl;
	uint8_t *raw, *base;
	bool locked = false;
	int lock_err = 0, ret;

	/* Every byte of it is new memory: never more than the machine has. */
	ret = moem_pool_fit(in, pool, 0, UINT64_MAX, NULL, &o.size);
	if (!ret)
		ret = moem_pool_nodes_plan(in, o.size, pool);
	if (!ret)
		ret = moem_pool_nodes_room(pool, false);
	if (ret)
		return ret;
	len = opts->size + MOEM_CHUNK_BYTES;

	raw = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		   -1, 0);
	if (raw == MAP_FAILED)
		return moem_errf(errno, "thp pool of %llu MiB: mmap: %s",
				 (unsigned long long)(opts->size >> 20), strerror(errno));
	/* Trim to a 2 MiB-aligned window so every page can be a huge page. */
	base = (uint8_t *)moem_align_up((uintptr_t)raw, MOEM_CHUNK_BYTES);
	if (base > raw)
		munmap(raw, (size_t)(base - raw));
	if (base + opts->size < raw + len)
		munmap(base + opts->size, (size_t)(raw + len - (base + opts->size)));
	if (madvise(base, opts->size, MADV_HUGEPAGE) < 0) {
		/* THP compiled out or disabled: still a working (4 KiB) pool. */
	}
	/* Each node's range bound before a page is touched (mlock faults them). */
	ret = moem_pool_nodes_bind(pool, base);
	if (ret) {
		munmap(base, opts->size);
		return ret;
	}
	if (!opts->no_lock) {
		if (mlock(base, opts->size) == 0)
			locked = true;
		else
			lock_err = errno;
	}
	if (!locked) {
		/* Touch every page so the pool is resident like the others. */
		if (madvise(base, opts->size, MADV_POPULATE_WRITE) < 0) {
			for (uint64_t off = 0; off < opts->size; off += 4096)
				base[off] = 0;
		}
	}
	pool->base = base;
	pool->size = opts->size;
	pool->info.provider = MOEM_POOL_THP;
	pool->info.page_bytes = 4096;
	if (moem_smaps_read(base, &sm) == 0) {
		pool->info.huge_bytes = sm.huge;
		pool->info.pinned_bytes = sm.locked;
		if (sm.huge == opts->size)
			pool->info.page_bytes = MOEM_CHUNK_BYTES;
	} else if (locked) {
		pool->info.pinned_bytes = opts->size;
	}
	/* Pinned is what the kernel says is locked, not what was asked. */
	pool->info.pinned = locked && pool->info.pinned_bytes >= opts->size;
	snprintf(pool->info.backing, sizeof(pool->info.backing),
		 "smaps: %llu of %llu MiB in transparent huge pages, %s",
		 (unsigned long long)(pool->info.huge_bytes >> 20),
		 (unsigned long long)(opts->size >> 20),
		 locked	    ? "mlock() succeeded"
		 : lock_err ? "NOT locked (mlock refused)"
			    : "not locked");
	if (!locked && lock_err == ENOMEM && !getrlimit(RLIMIT_MEMLOCK, &rl) &&
	    rl.rlim_cur != RLIM_INFINITY)
		snprintf(pool->info.why, sizeof(pool->info.why),
			 "NOT PINNED: mlock of %llu MiB refused: RLIMIT_MEMLOCK is %llu KiB (run "
			 "as root, raise LimitMEMLOCK=, or load moem.ko)",
			 (unsigned long long)(opts->size >> 20),
			 (unsigned long long)(rl.rlim_cur >> 10));
	else if (!locked && lock_err)
		snprintf(pool->info.why, sizeof(pool->info.why),
			 "NOT PINNED: mlock refused (%s): pages may be swapped or reclaimed",
			 strerror(lock_err));
	else if (!locked)
		snprintf(pool->info.why, sizeof(pool->info.why), "NOT PINNED: not locked (asked)");
	else if (!pool->info.pinned)
		/* mlock() said yes, the kernel says otherwise (a sanitizer's
		 * interceptor returns 0 without locking): believe the kernel. */
		snprintf(pool->info.why, sizeof(pool->info.why),
			 "NOT PINNED: mlock returned success but the kernel reports %llu of %llu "
			 "MiB locked",
			 (unsigned long long)(pool->info.pinned_bytes >> 20),
			 (unsigned long long)(opts->size >> 20));
	return 0;
}
