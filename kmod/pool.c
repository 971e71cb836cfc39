// SPDX-License-Identifier: GPL-2.0-only
/*
 * The chunk pool: order-9 compound pages (2 MiB) from the buddy allocator,
 * handed to regions zeroed. A region takes its chunks from one NUMA node
 * (MOEM_REGION_NODE, or the node= parameter) or, without either, from any.
 *
 * Accounting, all in chunks and under moem_lock:
 *   total    chunks the pool holds (on a free list, in a region, or in a
 *            region held back because a chunk of it is still pinned);
 *   free     chunks on the free lists;
 *   pending  chunks being allocated for a create in flight;
 *   floor    chunks carved at load (prealloc_mb), kept while loaded;
 *   max      the ceiling (max_pool_mb): total + pending never exceeds it,
 *            whichever nodes the chunks are on.
 * total and free are also kept per node (the node a chunk's page is on),
 * and the free chunks sit on one list per node, so a region on node N
 * reuses only node N's. The free lists hold floor chunks only, uncharged:
 * they are the administrator's reserve. A region takes free chunks first
 * and allocates the rest with __GFP_ACCOUNT, charged to the creator's
 * memory cgroup (and, on a node, with __GFP_THISNODE: no fallback to
 * another node); when it dies its floor chunks go back on their node's
 * free list and the others back to the kernel (uncharging them), so once
 * every region is gone total == free == floor exactly, on every node.
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
#include <linux/nodemask.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>

#include "internal.h"
#include "trace.h"

/* One node's share of the pool. */
struct moem_pool_node {
	struct list_head free_list; /* head pages on this node, linked by page->lru */
	unsigned long total, free;
};

static struct {
	struct moem_pool_node *nodes; /* [nr_node_ids] */
	unsigned long total, free, pending, floor, max;
	int node; /* the node= parameter: where regions without a node go */
} pool;

static struct moem_pool_node *moem_chunk_node(struct page *head)
{
	return &pool.nodes[page_to_nid(head)];
}

/* Floor chunks belong to the module; growth is charged to its creator. */
static gfp_t moem_pool_gfp(bool account, int node)
{
	/* Fail cleanly under pressure instead of waking the OOM killer. */
	gfp_t gfp = GFP_KERNEL | __GFP_COMP | __GFP_NOWARN | __GFP_RETRY_MAYFAIL;

	if (account)
		gfp |= __GFP_ACCOUNT;
	if (node != NUMA_NO_NODE)
		gfp |= __GFP_THISNODE;
	return gfp;
}

static struct page *moem_chunk_alloc(bool account, int node)
{
	return alloc_pages_node(node, moem_pool_gfp(account, node), MOEM_CHUNK_ORDER);
}

bool moem_pool_node_valid(u32 node)
{
	return node < nr_node_ids && node_state(node, N_MEMORY);
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
	moem_chunk_node(head)->total--;
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
		list_add(&head->lru, &moem_chunk_node(head)->free_list);
		moem_chunk_node(head)->free++;
		pool.free++;
	}
}

/* Free chunks a region on node (NUMA_NO_NODE: any) may take. */
static unsigned long moem_pool_free_for_locked(int node)
{
	lockdep_assert_held(&moem_lock);
	return node == NUMA_NO_NODE ? pool.free : pool.nodes[node].free;
}

/*
 * The most recently freed chunk a region on node may take (LIFO, so tests
 * see reuse): node's list, or for any node the local node's, then the
 * others in order. The caller knows there is one.
 */
static struct page *moem_pool_take_locked(int node)
{
	struct moem_pool_node *pn;
	struct page *head;
	int nid;

	lockdep_assert_held(&moem_lock);
	if (node == NUMA_NO_NODE) {
		nid = numa_mem_id();
		if (!pool.nodes[nid].free) {
			for_each_node(nid) {
				if (pool.nodes[nid].free)
					break;
			}
		}
		node = nid;
	}
	pn = &pool.nodes[node];
	head = list_first_entry(&pn->free_list, struct page, lru);
	list_del(&head->lru);
	pn->free--;
	pool.free--;
	return head;
}

int moem_pool_get(struct page **chunks, unsigned long nr, int node, u64 id,
		  unsigned long *nr_floor)
{
	unsigned long i, reused, grow, grown = 0, have;
	int ret = 0;

	if (node == NUMA_NO_NODE)
		node = pool.node;
	mutex_lock(&moem_lock);
	/* The ceiling counts every node: spreading over nodes gains nothing. */
	have = moem_pool_free_for_locked(node);
	if (nr > have + (pool.max - pool.total - pool.pending)) {
		mutex_unlock(&moem_lock);
		return -ENOSPC;
	}
	reused = min(nr, have);
	for (i = 0; i < reused; i++) {
		chunks[i] = moem_pool_take_locked(node);
		trace_moem_chunk_alloc(id, page_to_pfn(chunks[i]), page_to_nid(chunks[i]), false);
	}
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
		head = moem_chunk_alloc(true, node);
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
	for (i = reused; i < reused + grown; i++)
		moem_chunk_node(chunks[i])->total++;
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
	st->node = pool.node == NUMA_NO_NODE ? MOEM_NODE_ANY : (u32)pool.node;
	mutex_unlock(&moem_lock);
}

void moem_pool_node_stats(int node, u64 *total_bytes, u64 *free_bytes)
{
	mutex_lock(&moem_lock);
	*total_bytes = (u64)pool.nodes[node].total << MOEM_CHUNK_SHIFT;
	*free_bytes = (u64)pool.nodes[node].free << MOEM_CHUNK_SHIFT;
	mutex_unlock(&moem_lock);
}

u64 moem_pool_max_bytes(void)
{
	return (u64)pool.max << MOEM_CHUNK_SHIFT;
}

int moem_pool_init(unsigned long max_chunks, unsigned long floor_chunks, int node)
{
	unsigned long i;
	int nid;

	pool.nodes = kcalloc(nr_node_ids, sizeof(*pool.nodes), GFP_KERNEL);
	if (!pool.nodes)
		return -ENOMEM;
	for (nid = 0; nid < nr_node_ids; nid++)
		INIT_LIST_HEAD(&pool.nodes[nid].free_list);
	pool.max = max_chunks;
	pool.floor = 0;
	pool.node = node;
	pool.total = 0;
	pool.free = 0;
	pool.pending = 0;
	for (i = 0; i < floor_chunks; i++) {
		/* The reserve is the module's, not the memory cgroup of insmod's. */
		struct page *head = moem_chunk_alloc(false, node);

		if (!head) {
			pr_err("could not preallocate %lu MiB: only %lu MiB available\n",
			       floor_chunks << (MOEM_CHUNK_SHIFT - 20),
			       i << (MOEM_CHUNK_SHIFT - 20));
			moem_pool_exit();
			return -ENOMEM;
		}
		trace_moem_chunk_alloc(0, page_to_pfn(head), page_to_nid(head), true);
		mutex_lock(&moem_lock);
		list_add(&head->lru, &moem_chunk_node(head)->free_list);
		moem_chunk_node(head)->total++;
		moem_chunk_node(head)->free++;
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
	int nid;

	if (!pool.nodes)
		return;
	mutex_lock(&moem_lock);
	/* Every region is gone by now: what is left is the free lists. */
	WARN_ON(pool.total != pool.free || pool.free != pool.floor || pool.pending);
	for (nid = 0; nid < nr_node_ids; nid++) {
		struct moem_pool_node *pn = &pool.nodes[nid];

		list_for_each_entry_safe(head, tmp, &pn->free_list, lru) {
			list_del(&head->lru);
			pn->free--;
			pool.free--;
			pool.floor--;
			moem_chunk_release_locked(head, 0);
		}
		WARN_ON(pn->total || pn->free);
	}
	mutex_unlock(&moem_lock);
	kfree(pool.nodes);
	pool.nodes = NULL;
}
