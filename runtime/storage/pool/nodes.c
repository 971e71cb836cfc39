// SPDX-License-Identifier: GPL-2.0-only
/*
 * The pool's NUMA placement (pool.h, moem_pool_opts.nodes): which nodes,
 * one contiguous range of 2 MiB chunks per node, bound there with
 * mbind(MPOL_BIND) before a page is touched, and checked afterwards with
 * move_pages(2) in status mode: the pool is handed out only if every
 * chunk is on the node its range names. libnuma only reads the topology
 * here (its parsers print on bad input, and a library must not print).
 */
#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/util.h>

#include "pool_int.h"

#define MASK_WORDS ((MOEM_POOL_NODE_ID_MAX + 1) / 64)

/* A value from /sys/devices/system/node/nodeN/<file> ("Node N Key: V kB" lines). */
static int node_meminfo(int node, const char *key, uint64_t *out)
{
	char path[96], line[160], name[64];
	unsigned long long v;
	FILE *f;
	int ret = -ENOENT, nd;

	snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/meminfo", node);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "Node %d %63[^:]: %llu kB", &nd, name, &v) == 3 && nd == node &&
		    !strcmp(name, key)) {
			*out = (uint64_t)v << 10;
			ret = 0;
			break;
		}
	}
	fclose(f);
	return ret;
}

/* 0 if node may hold the pool, else -errno with a message. */
static int node_usable(int node)
{
	uint64_t total = 0;

	if (numa_available() < 0) {
		if (node == 0)
			return 0;
		return moem_errf(ENODEV,
				 "NUMA node %d: this kernel has no NUMA support "
				 "(only node 0 exists)",
				 node);
	}
	if (node > numa_max_node() || !numa_bitmask_isbitset(numa_nodes_ptr, (unsigned int)node))
		return moem_errf(ENODEV,
				 "NUMA node %d does not exist (this machine has nodes 0-%d)", node,
				 numa_max_node());
	if (node_meminfo(node, "MemTotal", &total) || !total)
		return moem_errf(ENODEV, "NUMA node %d has no memory", node);
	if (!numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned int)node))
		return moem_errf(EPERM,
				 "NUMA node %d is not allowed to this process (cpuset "
				 "mems)",
				 node);
	return 0;
}

static int add_node(int32_t nodes[MOEM_POOL_MAX_NODES], uint32_t *n, long v)
{
	uint32_t i;

	for (i = 0; i < *n && nodes[i] < v; i++)
		;
	if (i < *n && nodes[i] == v)
		return 0;
	if (*n == MOEM_POOL_MAX_NODES)
		return moem_errf(EINVAL, "more than %d NUMA nodes named", MOEM_POOL_MAX_NODES);
	memmove(&nodes[i + 1], &nodes[i], (*n - i) * sizeof(nodes[0]));
	nodes[i] = (int32_t)v;
	(*n)++;
	return 0;
}

static int all_nodes(int32_t nodes[MOEM_POOL_MAX_NODES], uint32_t *n)
{
	*n = 0;
	if (numa_available() < 0) {
		nodes[(*n)++] = 0;
		return 0;
	}
	for (int nd = 0; nd <= numa_max_node() && *n < MOEM_POOL_MAX_NODES; nd++) {
		uint64_t total = 0;

		if (numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned int)nd) &&
		    !node_meminfo(nd, "MemTotal", &total) && total)
			nodes[(*n)++] = nd;
	}
	if (!*n)
		nodes[(*n)++] = 0; /* no node readable: behave as one node */
	return 0;
}

int moem_pool_nodes_parse(const char *s, int32_t nodes[MOEM_POOL_MAX_NODES], uint32_t *n)
{
	const char *p = s;
	int ret;

	if (!s || !*s)
		return all_nodes(nodes, n);
	*n = 0;
	while (*p) {
		char *end;
		long lo, hi;

		if (*p < '0' || *p > '9')
			goto bad;
		lo = strtol(p, &end, 10);
		hi = lo;
		if (*end == '-') {
			if (end[1] < '0' || end[1] > '9')
				goto bad;
			hi = strtol(end + 1, &end, 10);
		}
		if (lo > hi || hi > MOEM_POOL_NODE_ID_MAX)
			return moem_errf(EINVAL,
					 "NUMA node list '%s': %ld-%ld is not a range of "
					 "nodes 0-%d",
					 s, lo, hi, MOEM_POOL_NODE_ID_MAX);
		for (long v = lo; v <= hi; v++) {
			ret = add_node(nodes, n, v);
			if (ret)
				return ret;
		}
		if (*end == ',' && end[1])
			end++;
		else if (*end)
			goto bad;
		p = end;
	}
	for (uint32_t i = 0; i < *n; i++) {
		ret = node_usable(nodes[i]);
		if (ret)
			return moem_err_prefix(-ret, "NUMA node list '%s'", s);
	}
	return 0;
bad:
	return moem_errf(EINVAL, "NUMA node list '%s' does not parse (want e.g. 0,1 or 0-3)", s);
}

int moem_pool_nodes_plan(const struct moem_pool_opts *o, uint64_t size, struct moem_pool *pool)
{
	int32_t nodes[MOEM_POOL_MAX_NODES];
	uint64_t chunks = size / MOEM_CHUNK_BYTES, off = 0;
	uint32_t n;
	int ret;

	ret = moem_pool_nodes_parse(o->nodes, nodes, &n);
	if (ret)
		return ret;
	if (n > chunks)
		n = (uint32_t)chunks; /* fewer chunks than nodes: the first nodes */
	pool->info.n_nodes = n;
	/* One node: bind only if the user named it (a one-node machine's
	 * default pool is the same as before this existed). */
	pool->bind = n > 1 || (o->nodes && *o->nodes && numa_available() >= 0);
	for (uint32_t k = 0; k < n; k++) {
		uint64_t c = chunks / n + (k < chunks % n);

		pool->info.nodes[k].node = pool->bind ? nodes[k] : -1;
		pool->info.nodes[k].off = off;
		pool->info.nodes[k].bytes = c * MOEM_CHUNK_BYTES;
		off += c * MOEM_CHUNK_BYTES;
	}
	return 0;
}

int moem_pool_nodes_room(struct moem_pool *pool, bool hugetlb)
{
	char a[32], b[32];

	for (uint32_t k = 0; pool->bind && k < pool->info.n_nodes; k++) {
		const struct moem_pool_node *r = &pool->info.nodes[k];
		uint64_t room = 0, v = 0;

		if (hugetlb) {
			char path[128];
			unsigned long long pages = 0;
			FILE *f;

			snprintf(path, sizeof(path),
				 "/sys/devices/system/node/node%d/hugepages/hugepages-2048kB/"
				 "free_hugepages",
				 r->node);
			f = fopen(path, "r");
			if (f) {
				if (fscanf(f, "%llu", &pages) != 1)
					pages = 0;
				fclose(f);
			}
			room = pages * MOEM_CHUNK_BYTES;
		} else {
			/* what the node can give without swapping: free and file pages */
			if (!node_meminfo(r->node, "MemFree", &v))
				room += v;
			if (!node_meminfo(r->node, "Active(file)", &v))
				room += v;
			if (!node_meminfo(r->node, "Inactive(file)", &v))
				room += v;
		}
		if (r->bytes > room)
			return moem_errf(ENOSPC,
					 "NUMA node %d: its share of the pool, %s, is more "
					 "than the node has (%s %s)",
					 r->node, moem_fmt_bytes(r->bytes, a, sizeof(a)),
					 moem_fmt_bytes(room, b, sizeof(b)),
					 hugetlb ? "in free huge pages" : "free or in page cache");
	}
	return 0;
}

int moem_pool_nodes_bind(struct moem_pool *pool, void *base)
{
	for (uint32_t k = 0; pool->bind && k < pool->info.n_nodes; k++) {
		const struct moem_pool_node *r = &pool->info.nodes[k];
		unsigned long mask[MASK_WORDS] = {0};

		mask[r->node / 64] |= 1UL << (r->node % 64);
		/* maxnode counts one past the last bit, as libnuma passes it */
		if (mbind((uint8_t *)base + r->off, r->bytes, MPOL_BIND, mask,
			  MOEM_POOL_NODE_ID_MAX + 2, MPOL_MF_STRICT | MPOL_MF_MOVE))
			return moem_errf(errno, "mbind of %llu MiB to NUMA node %d: %s",
					 (unsigned long long)(r->bytes >> 20), r->node,
					 strerror(errno));
	}
	return 0;
}

/*
 * move_pages(2) in status mode: the node of the page at byte at of each
 * chunk in [first, first + count) (at most 512). A chunk in one huge
 * page is all on one node; in 4 KiB pages (THP off) its first and last
 * pages are what stray_chunk() looks at.
 */
static int chunk_nodes(const void *base, int32_t *out, uint64_t first, uint64_t count, uint64_t at)
{
	void *pages[512];
	int status[512];

	for (uint64_t j = 0; j < count; j++)
		pages[j] = (uint8_t *)base + (first + j) * MOEM_CHUNK_BYTES + at;
	if (move_pages(0, (unsigned long)count, pages, NULL, status, 0))
		return -errno;
	for (uint64_t j = 0; j < count; j++)
		out[j] = status[j];
	return 0;
}

/* The first chunk in [first, first + count) not on node, or -1; *where its node. */
static int64_t stray_chunk(const void *base, uint64_t first, uint64_t count, int node,
			   int32_t *where, int *err)
{
	static const uint64_t ends[2] = {0, MOEM_CHUNK_BYTES - 4096};
	int32_t st[512];

	for (uint64_t i = first; i < first + count; i += 512) {
		uint64_t n = moem_min((uint64_t)512, first + count - i);

		for (int e = 0; e < 2; e++) {
			*err = chunk_nodes(base, st, i, n, ends[e]);
			if (*err)
				return (int64_t)i;
			for (uint64_t j = 0; j < n; j++)
				if (st[j] != node) {
					*where = st[j];
					return (int64_t)(i + j);
				}
		}
	}
	return -1;
}

int moem_pool_nodes_check(struct moem_pool *pool, void *base)
{
	if (numa_available() < 0) {
		pool->info.nodes[0].node = 0;
		return 0;
	}
	if (!pool->bind) {
		/* Unbound (one node, or moem.ko's region): say where it is if
		 * every chunk agrees, else -1. */
		int32_t first = -1, where = -1;
		int err = 0;

		/* one memory node: there, faulted in or not (a pool that could
		 * not be locked has no pages yet for move_pages to place) */
		if (numa_max_node() == 0) {
			pool->info.nodes[0].node = 0;
			return 0;
		}
		if (chunk_nodes(base, &first, 0, 1, 0) || first < 0)
			return 0;
		if (stray_chunk(base, 0, pool->size / MOEM_CHUNK_BYTES, first, &where, &err) < 0)
			pool->info.nodes[0].node = first;
		return 0;
	}
	for (uint32_t k = 0; k < pool->info.n_nodes; k++) {
		const struct moem_pool_node *r = &pool->info.nodes[k];
		int32_t where = 0;
		int err = 0;
		int64_t c = stray_chunk(base, r->off / MOEM_CHUNK_BYTES,
					r->bytes / MOEM_CHUNK_BYTES, r->node, &where, &err);

		if (err)
			return moem_errf(-err, "move_pages: %s", strerror(-err));
		if (c >= 0)
			return moem_errf(EIO,
					 "chunk %lld of the pool is on NUMA node %d, not on "
					 "node %d where it was bound (%s)",
					 (long long)c, where, r->node,
					 where < 0 ? strerror(-where) : "mbind did not hold");
	}
	pool->info.bound = true;
	return 0;
}
