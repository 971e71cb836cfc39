/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The host staging pool: one contiguous mapping of pinned memory in 2 MiB
 * pieces, from one of three providers behind one interface:
 *
 *  kmod     a named region of moem.ko (/dev/moem): pinned 2 MiB compound
 *           pages, zeroed, optionally persistent across process restarts;
 *  hugetlb  memfd_create(MFD_HUGETLB | MFD_HUGE_2MB) when enough huge pages
 *           are reserved (vm.nr_hugepages);
 *  thp      anonymous memory with MADV_HUGEPAGE, mlock()ed when allowed.
 *
 * The pool reports which provider served, why, and what the kernel says
 * the backing pages are (moem.ko's chunk size, or /proc/self/smaps).
 */
#ifndef MOEM_POOL_H
#define MOEM_POOL_H

#include <stdbool.h>
#include <stdint.h>

enum moem_pool_provider {
	MOEM_POOL_AUTO = 0, /* kmod, else hugetlb if reserved, else thp */
	MOEM_POOL_KMOD,
	MOEM_POOL_HUGETLB,
	MOEM_POOL_THP,
	MOEM_POOL_NR
};

struct moem_pool_opts {
	enum moem_pool_provider provider;
	uint64_t size;	      /* bytes; rounded up to 2 MiB. 0 with attach: take the
				 * existing region's size */
	const char *name;     /* kmod region name (default "moem") */
	const char *dev_path; /* default "/dev/moem" */
	bool persistent;      /* kmod: region outlives the process */
	bool attach;	      /* kmod: open the named region if it exists */
	uint32_t mode;	      /* kmod: region permission bits (default 0600) */
	bool no_lock;	      /* thp: do not mlock (tests of the unlocked path) */
	/*
	 * Memory left to the rest of the machine: a pool that needs new
	 * memory (thp; kmod beyond moem.ko's free chunks) may take at most
	 * MemAvailable (and its cgroup's headroom) less this. 0: the default,
	 * moem_pool_default_reserve(). hugetlb pools take reserved huge pages
	 * instead and are checked against those.
	 */
	uint64_t mem_reserve;
	bool fit;	     /* more than fits: shrink to what fits (say so in why) */
	bool require_pinned; /* refuse a pool whose pages are not pinned */
	/*
	 * NUMA nodes to place the pool on ("0,1", "0-3"; moem_pool_nodes_parse()).
	 * NULL or "": every node with memory this process may allocate on.
	 * Over several nodes the pool is cut into one contiguous range per
	 * node (2 MiB chunks, as equal as the size allows), each bound there
	 * with mbind(MPOL_BIND) and checked with move_pages(2) before the
	 * pool is handed out; one node (a one-node machine by default) binds
	 * nothing and behaves as before. kmod (moem.ko ABI 1.4) makes one
	 * region per node instead, "<name>@<node>", placed by the module
	 * (MOEM_REGION_NODE) and mapped back to back; by default it does so
	 * only when the module was loaded without node=, and a module older
	 * than 1.4 refuses a list of several (-EOPNOTSUPP, naming its ABI).
	 */
	const char *nodes;
};

#define MOEM_POOL_MAX_NODES   16   /* nodes one pool spans */
#define MOEM_POOL_NODE_ID_MAX 1023 /* highest node number accepted */

/* A contiguous range of the pool whose pages are on one node. */
struct moem_pool_node {
	int32_t node; /* NUMA node, -1: not known (no NUMA, or pages on several) */
	uint64_t off, bytes;
};

/* The DRAM tier's use of one node's range (moem_tiers_stats, moem_engine_status). */
struct moem_dram_node {
	int32_t node;		      /* -1: not known */
	uint64_t bytes, budget, used; /* of the pool there, its share of the budget, in use */
};

struct moem_pool_info {
	enum moem_pool_provider provider;
	uint64_t size;
	uint64_t page_bytes;   /* size of the backing pages: 2 MiB or 4 KiB */
	uint64_t huge_bytes;   /* bytes the kernel reports as backed by 2 MiB pages */
	bool pinned;	       /* every byte cannot be swapped or reclaimed */
	uint64_t pinned_bytes; /* bytes the kernel says are locked or pinned */
	bool attached;	       /* kmod: an existing region was opened */
	bool persistent;
	char region[64];   /* kmod region name */
	char why[320];	   /* why this provider ("kmod not loaded: ..."), and any limit */
	char backing[128]; /* what the kernel says of the pages */
	/* Where the pages are: ranges in offset order covering the pool, one
	 * per node; bound says they were placed with mbind and checked. */
	uint32_t n_nodes;
	bool bound;
	struct moem_pool_node nodes[MOEM_POOL_MAX_NODES];
};

struct moem_pool;

/* What a new pool may take from the machine (moem_pool_headroom()). */
struct moem_pool_mem {
	uint64_t total;	      /* MemTotal */
	uint64_t available;   /* MemAvailable */
	uint64_t cgroup_left; /* memory.max - memory.current, UINT64_MAX: no limit */
	uint64_t reserve;     /* left to the rest of the machine */
	uint64_t headroom;    /* min(available, cgroup_left) - reserve, or 0 */
};
/* The default reserve: 1/16 of MemTotal, at least 256 MiB and at most 4 GiB. */
uint64_t moem_pool_default_reserve(uint64_t mem_total);
/* Read /proc/meminfo and the cgroup's limits; reserve 0: the default. */
int moem_pool_headroom(uint64_t reserve, struct moem_pool_mem *m);

/*
 * Open a pool. Returns 0 and *out, or -errno with a message: -ENODEV (kmod
 * asked for, /dev/moem missing), -EPROTO (module ABI mismatch), -ENOMEM /
 * -ENOSPC (no memory or huge pages), -EEXIST (region exists with another
 * size or attach not requested), -EACCES.
 */
int moem_pool_open(const struct moem_pool_opts *opts, struct moem_pool **out);
/* Unmap and release; a persistent kmod region stays for the next open. */
void moem_pool_close(struct moem_pool *pool);

void *moem_pool_base(const struct moem_pool *pool);
uint64_t moem_pool_size(const struct moem_pool *pool);
void moem_pool_get_info(const struct moem_pool *pool, struct moem_pool_info *info);
/* The region fd of a kmod pool (for info ioctls), else -1. */
int moem_pool_region_fd(const struct moem_pool *pool);
/*
 * Destroy what a kmod pool named name left in moem.ko: the region name and
 * the per-node regions "name@<node>" of a pool over several nodes (owner
 * or CAP_SYS_ADMIN). 0 and *destroyed (0 if there were none), -ENODEV
 * without the module, or the first failure (the others are still tried).
 */
int moem_pool_kmod_destroy(const char *dev_path, const char *name, uint32_t *destroyed);

/*
 * Parse a node list ("0", "0,2", "0-3,6") into ascending unique node
 * numbers and check each exists, has memory and is allowed to this
 * process (its cpuset): 0 and *n, or -EINVAL / -ENODEV with a message
 * naming the node. "" or NULL: every such node.
 */
int moem_pool_nodes_parse(const char *s, int32_t nodes[MOEM_POOL_MAX_NODES], uint32_t *n);

const char *moem_pool_provider_name(enum moem_pool_provider p);
int moem_pool_provider_parse(const char *s, enum moem_pool_provider *out);

/*
 * What /proc/self/smaps says of the mapping that starts at addr: the
 * kernel page size, bytes in 2 MiB pages (AnonHugePages, hugetlb) and
 * locked bytes. -ENOENT if no mapping starts there.
 */
struct moem_smaps {
	uint64_t size, rss, kernel_page, huge, locked;
};
int moem_smaps_read(const void *addr, struct moem_smaps *out);

#endif /* MOEM_POOL_H */
