// SPDX-License-Identifier: GPL-2.0-only
/*
 * The chunk pool: order-9 compound pages (2 MiB) from the buddy allocator
 * on one NUMA node (or any), handed to regions zeroed.
 *
 * Accounting, all in chunks and under moem_lock:
 *   total    chunks the pool holds (on the free list, in a region, or in a
 *            region held back because a chunk of it is still pinned);
 *   free     chunks on the free list;
 *   pending  chunks being allocated for a create in flight;
 *   floor    chunks carved at load (prealloc_mb), kept while loaded;
 *   max      the ceiling (max_pool_mb): total + pending never exceeds it.
 * The free list holds floor chunks only, uncharged: they are the
 * administrator's reserve. A region takes free chunks first and allocates
 * the rest with __GFP_ACCOUNT, charged to the creator's memory cgroup;
 * when it dies its floor chunks go back on the free list and the others
 * back to the kernel (uncharging them), so once every region is gone
 * total == free == floor exactly.
 *
 * A chunk someone else holds a reference to (io_uring fixed buffers, an
 * O_DIRECT read in flight, any get_user_pages pin) could still be written
 * by them: its region is never returned while that lasts (region.c holds
 * it back and retries), so the chunk is neither reused nor uncounted.
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

/* Floor chunks belong to the module; growth is charged to its creator. */
static gfp_t moem_pool_gfp(bool account)
{
	/* Fail cleanly under pressure instead of waking the OOM killer. */
	gfp_t gfp = GFP_KERNEL | __GFP_COMP | __GFP_NOWARN | __GFP_RETRY_MAYFAIL;

	if (account)
		gfp |= __GFP_ACCOUNT;
	if (pool.node != NUMA_NO_NODE)
		gfp |= __GFP_THISNODE;
	return gfp;
}

static struct page *moem_chunk_alloc(bool account)
{
	return alloc_pages_node(pool.node, moem_pool_gfp(account), MOEM_CHUNK_ORDER);
}

static void moem_chunk_zero(struct page *head)
{
	unsigned long i;

	for (i = 0; i < MOEM_CHUNK_PAGES; i++)
		clear_highpage(nth_page(head, i));
}

/*
 * Our allocation reference is the only one once no mapping exists: any
 * other is a pin (or a transient get_page) whose holder may still write.
 */
static bool moem_chunk_pinned(struct page *head)
{
	return page_count(head) != 1;
}

bool moem_pool_pinned(struct page **chunks, unsigned long nr)
{
	unsigned long i;

	for (i = 0; i < nr; i++) {
		if (moem_chunk_pinned(chunks[i]))
			return true;
	}
	return false;
}

void moem_pool_trace_pinned(struct page **chunks, unsigned long nr, u64 id)
{
	unsigned long i;

	for (i = 0; i < nr; i++) {
		if (moem_chunk_pinned(chunks[i]))
			trace_moem_chunk_free(id, page_to_pfn(chunks[i]), page_to_nid(chunks[i]),
					      MOEM_CHUNK_FREE_PINNED);
	}
}

/* Give one chunk back to the kernel; a pinner's reference outlives ours. */
static void moem_chunk_release_locked(struct page *head, u64 id)
{
	lockdep_assert_held(&moem_lock);
	trace_moem_chunk_free(id, page_to_pfn(head), page_to_nid(head), MOEM_CHUNK_FREE_KERNEL);
	pool.total--;
	__free_pages(head, MOEM_CHUNK_ORDER);
}

void moem_pool_put_locked(struct page **chunks, unsigned long nr, unsigned long nr_floor, u64 id,
			  bool force)
{
	unsigned long i;

	lockdep_assert_held(&moem_lock);
	for (i = 0; i < nr; i++) {
		struct page *head = chunks[i];

		if (i >= nr_floor || (force && moem_chunk_pinned(head))) {
			/* At unload a pinned floor chunk is the pinner's to free. */
			if (i < nr_floor)
				pool.floor--;
			moem_chunk_release_locked(head, id);
			continue;
		}
		trace_moem_chunk_free(id, page_to_pfn(head), page_to_nid(head),
				      MOEM_CHUNK_FREE_POOL);
		list_add(&head->lru, &pool.free_list);
		pool.free++;
	}
}

int moem_pool_get(struct page **chunks, unsigned long nr, u64 id, unsigned long *nr_floor)
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
		/* The memory cgroup's limit fails this with NULL, not the OOM killer. */
		head = moem_chunk_alloc(true);
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
	*nr_floor = reused;
	return 0;

err_put:
	/* Nobody has seen these chunks: no pins, nothing to hold back. */
	mutex_lock(&moem_lock);
	moem_pool_put_locked(chunks, reused + grown, reused, id, false);
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
	pool.floor = 0;
	pool.node = node;
	pool.total = 0;
	pool.free = 0;
	pool.pending = 0;
	for (i = 0; i < floor_chunks; i++) {
		/* The reserve is the module's, not the memory cgroup of insmod's. */
		struct page *head = moem_chunk_alloc(false);

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
		pool.floor++;
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
	WARN_ON(pool.total != pool.free || pool.free != pool.floor || pool.pending);
	list_for_each_entry_safe(head, tmp, &pool.free_list, lru) {
		list_del(&head->lru);
		pool.free--;
		pool.floor--;
		moem_chunk_release_locked(head, 0);
	}
	mutex_unlock(&moem_lock);
}
