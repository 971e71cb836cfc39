// SPDX-License-Identifier: GPL-2.0-only
/*
 * The chunk pool: order-9 compound pages (2 MiB) from the buddy allocator
 * on one NUMA node (or any), handed to regions zeroed.
 *
 * Accounting, all in chunks and under moem_lock:
 *   total    chunks the pool holds (on the free list or in a region);
 *   free     held chunks in no region (the free list);
 *   pending  chunks being allocated for a create in flight;
 *   floor    chunks carved at load (prealloc_mb), kept even when unused;
 *   max      the ceiling (max_pool_mb): total + pending never exceeds it.
 * A chunk a region gives back goes to the free list while total <= floor,
 * else back to the buddy allocator, so once every region is gone total
 * and free return exactly to the floor. A chunk that someone still holds
 * a reference to when its region dies (io_uring fixed buffers, an O_DIRECT
 * read in flight, any get_user_pages pin) is never reused: it leaves the
 * pool and returns to the kernel when the last reference drops.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/gfp.h>
#include <linux/highmem.h>
#include <linux/list.h>
#include <linux/mm.h>
#include <linux/sched/signal.h>

#include "internal.h"
#include "trace.h"

static struct {
	struct list_head free_list; /* head pages, linked by page->lru */
	unsigned long total, free, pending, floor, max;
	int node;
} pool;

static gfp_t moem_pool_gfp(void)
{
	/* Fail cleanly under pressure instead of waking the OOM killer. */
	gfp_t gfp = GFP_KERNEL | __GFP_COMP | __GFP_NOWARN | __GFP_RETRY_MAYFAIL;

	if (pool.node != NUMA_NO_NODE)
		gfp |= __GFP_THISNODE;
	return gfp;
}

static void moem_chunk_zero(struct page *head)
{
	unsigned long i;

	for (i = 0; i < MOEM_CHUNK_PAGES; i++)
		clear_highpage(nth_page(head, i));
}

/* Give one chunk back to the kernel; why is enum moem_chunk_free_why. */
static void moem_chunk_release_locked(struct page *head, u64 id, int why)
{
	lockdep_assert_held(&moem_lock);
	trace_moem_chunk_free(id, page_to_pfn(head), page_to_nid(head), why);
	pool.total--;
	__free_pages(head, MOEM_CHUNK_ORDER);
}

void moem_pool_put_locked(struct page **chunks, unsigned long nr, u64 id)
{
	unsigned long i;

	lockdep_assert_held(&moem_lock);
	for (i = 0; i < nr; i++) {
		struct page *head = chunks[i];

		/*
		 * Only our own allocation reference may remain: no mapping
		 * exists any more, so any other reference is a pin whose
		 * holder may still write to the chunk.
		 */
		if (page_count(head) != 1) {
			moem_chunk_release_locked(head, id, MOEM_CHUNK_FREE_PINNED);
		} else if (pool.total > pool.floor) {
			moem_chunk_release_locked(head, id, MOEM_CHUNK_FREE_KERNEL);
		} else {
			trace_moem_chunk_free(id, page_to_pfn(head), page_to_nid(head),
					      MOEM_CHUNK_FREE_POOL);
			list_add(&head->lru, &pool.free_list);
			pool.free++;
		}
	}
}

static struct page *moem_chunk_alloc(void)
{
	return alloc_pages_node(pool.node, moem_pool_gfp(), MOEM_CHUNK_ORDER);
}

int moem_pool_get(struct page **chunks, unsigned long nr, u64 id)
{
	unsigned long i, reused, grow, grown = 0;
	int ret = 0;

	mutex_lock(&moem_lock);
	if (nr > pool.free + (pool.max - pool.total - pool.pending)) {
		mutex_unlock(&moem_lock);
		return -ENOSPC;
	}
	/* LIFO: a freed chunk is the first reused, so tests see reuse. */
	reused = min(nr, pool.free);
	for (i = 0; i < reused; i++) {
		chunks[i] = list_first_entry(&pool.free_list, struct page, lru);
		list_del(&chunks[i]->lru);
		trace_moem_chunk_alloc(id, page_to_pfn(chunks[i]), page_to_nid(chunks[i]), false);
	}
	pool.free -= reused;
	grow = nr - reused;
	pool.pending += grow;
	mutex_unlock(&moem_lock);

	/* Allocate and zero outside the lock: a large region takes a while. */
	for (; grown < grow; grown++) {
		struct page *head;

		if (fatal_signal_pending(current)) {
			ret = -EINTR;
			break;
		}
		head = moem_chunk_alloc();
		if (!head) {
			ret = -ENOMEM;
			break;
		}
		chunks[reused + grown] = head;
		trace_moem_chunk_alloc(id, page_to_pfn(head), page_to_nid(head), true);
		cond_resched();
	}

	mutex_lock(&moem_lock);
	pool.pending -= grow;
	pool.total += grown;
	mutex_unlock(&moem_lock);
	if (ret)
		goto err_put;

	/* Every hand-out is zeroed, not only the first: no data crosses regions. */
	for (i = 0; i < nr; i++) {
		if (fatal_signal_pending(current)) {
			ret = -EINTR;
			goto err_put;
		}
		moem_chunk_zero(chunks[i]);
		cond_resched();
	}
	return 0;

err_put:
	mutex_lock(&moem_lock);
	moem_pool_put_locked(chunks, reused + grown, id);
	mutex_unlock(&moem_lock);
	return ret;
}

void moem_pool_stats(struct moem_pool_stats *st)
{
	mutex_lock(&moem_lock);
	st->total_bytes = (u64)pool.total << MOEM_CHUNK_SHIFT;
	st->free_bytes = (u64)pool.free << MOEM_CHUNK_SHIFT;
	st->max_bytes = (u64)pool.max << MOEM_CHUNK_SHIFT;
	st->chunk_bytes = MOEM_CHUNK_SIZE;
	st->node = pool.node == NUMA_NO_NODE ? 0xffffffffU : (u32)pool.node;
	mutex_unlock(&moem_lock);
}

u64 moem_pool_max_bytes(void)
{
	return (u64)pool.max << MOEM_CHUNK_SHIFT;
}

int moem_pool_init(unsigned long max_chunks, unsigned long floor_chunks, int node)
{
	unsigned long i;

	INIT_LIST_HEAD(&pool.free_list);
	pool.max = max_chunks;
	pool.floor = floor_chunks;
	pool.node = node;
	pool.total = 0;
	pool.free = 0;
	pool.pending = 0;
	for (i = 0; i < floor_chunks; i++) {
		struct page *head = moem_chunk_alloc();

		if (!head) {
			pr_err("could not preallocate %lu MiB: only %lu MiB available\n",
			       floor_chunks << (MOEM_CHUNK_SHIFT - 20),
			       i << (MOEM_CHUNK_SHIFT - 20));
			moem_pool_exit();
			return -ENOMEM;
		}
		trace_moem_chunk_alloc(0, page_to_pfn(head), page_to_nid(head), true);
		mutex_lock(&moem_lock);
		list_add(&head->lru, &pool.free_list);
		pool.total++;
		pool.free++;
		mutex_unlock(&moem_lock);
		cond_resched();
	}
	return 0;
}

void moem_pool_exit(void)
{
	struct page *head, *tmp;

	mutex_lock(&moem_lock);
	/* Every region is gone by now: what is left is the free list. */
	WARN_ON(pool.total != pool.free || pool.pending);
	list_for_each_entry_safe(head, tmp, &pool.free_list, lru) {
		list_del(&head->lru);
		pool.free--;
		moem_chunk_release_locked(head, 0, MOEM_CHUNK_FREE_KERNEL);
	}
	mutex_unlock(&moem_lock);
}
