// SPDX-License-Identifier: GPL-2.0-only
/*
 * kmod provider: a named region of moem.ko. With attach, an existing region
 * of the name is opened (a restarted daemon finds its staged experts);
 * otherwise a new one is created, persistent if asked. What attach opens
 * is trusted (staged bytes are served as they are), so it must be this
 * uid's own region and writable by nobody else: another user who created
 * the name first is refused with a message, never used.
 *
 * Over several NUMA nodes (a list of two or more, or by default every
 * node when the module was loaded without node=), the pool is one region
 * per node, "<name>@<node>", each created with MOEM_REGION_NODE (ABI 1.4)
 * and mapped back to back in node order into one reserved address range:
 * the pool's ranges are the regions, and the node of every chunk is the
 * one the module put its region on. Attach reopens the same set, all of
 * it or none (part of a set is refused, never half used); a pool of one
 * node keeps the single region "<name>" it always had, so a one-node
 * restart reattaches exactly as before.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <moem/dev.h>
#include <moem/error.h>
#include <moem/util.h>

#include "pool_int.h"

/* The first ABI whose module takes MOEM_REGION_NODE. */
#define NODE_ABI_MINOR 4

/* The refusal, with whose region it is. */
static int not_ours(int dev_fd, const char *name, const struct moem_region_info *known)
{
	struct moem_region_info ri;

	if (known)
		ri = *known;
	else if (moem_dev_region_info(dev_fd, name, &ri))
		return moem_errf(
			EPERM, "region '%s' is not this user's own, or others may write it", name);
	return moem_errf(EPERM,
			 "region '%s' is owned by uid %u with mode %04o: not this user's (uid %u) "
			 "or writable by others, so its contents cannot be trusted; refusing it "
			 "(destroy it as root, e.g. moemd --cold, or choose another region name)",
			 name, ri.owner_uid, ri.mode, (unsigned int)geteuid());
}

/*
 * Open an existing region to reattach to it: with MOEM_OPEN_OWNED where
 * the module has it (ABI 1.1), else by checking the opened fd's owner and
 * mode (they never change, so the check cannot race). -ENOENT if there is
 * none, -EPERM if it is not ours to trust.
 */
static int attach_owned(int dev_fd, const char *name, int *fd)
{
	struct moem_region_info ri;
	struct moem_version v;
	bool flag;
	int ret;

	flag = !moem_dev_version(dev_fd, &v) && (v.abi_version & 0xffff) >= 1;
	ret = moem_dev_region_open(dev_fd, name, flag ? MOEM_OPEN_OWNED : 0, fd);
	if (ret == -EPERM && flag)
		return not_ours(dev_fd, name, NULL);
	if (ret || flag)
		return ret;
	ret = moem_dev_region_fd_info(*fd, &ri, NULL);
	if (!ret && (ri.owner_uid != (uint32_t)geteuid() || (ri.mode & 0022)))
		ret = not_ours(dev_fd, name, &ri);
	if (ret)
		close(*fd);
	return ret;
}

/* What every kmod pool says of itself. */
static void fill_info(const struct moem_pool_opts *opts, struct moem_pool *pool, bool attached,
		      bool persistent, const char *what)
{
	pool->info.provider = MOEM_POOL_KMOD;
	pool->info.page_bytes = MOEM_CHUNK_SIZE;
	pool->info.huge_bytes = pool->size;
	pool->info.pinned = true;
	pool->info.pinned_bytes = pool->size;
	pool->info.attached = attached;
	pool->info.persistent = persistent;
	snprintf(pool->info.region, sizeof(pool->info.region), "%s", opts->name);
	snprintf(pool->info.why, sizeof(pool->info.why), "%s: %s %s",
		 opts->dev_path ? opts->dev_path : MOEM_DEV_PATH,
		 attached ? "attached existing" : "created", what);
	snprintf(pool->info.backing, sizeof(pool->info.backing),
		 "moem.ko: %llu pinned 2 MiB compound pages (mapped with 4 KiB PTEs)",
		 (unsigned long long)(pool->size / MOEM_CHUNK_SIZE));
}

/*
 * One region: "<name>", on node (-1: where the module's node= says).
 * The pool's one range is on the node the module reports, if it does.
 */
static int open_one(const struct moem_pool_opts *opts, struct moem_pool *pool, int dev_fd, int node,
		    bool has_node)
{
	struct moem_region_info ri;
	int fd = -1, ret;
	bool attached = false;
	char what[96];
	void *base;

	if (opts->attach) {
		ret = attach_owned(dev_fd, opts->name, &fd);
		if (ret == 0)
			attached = true;
		else if (ret != -ENOENT)
			goto err_dev;
	}
	if (!attached) {
		uint64_t size = opts->size, free_bytes, room;

		if (!opts->size) {
			ret = moem_errf(ENOENT, "region '%s' does not exist and no size was given",
					opts->name);
			goto err_dev;
		}
		/* moem.ko's free chunks, then new ones up to its ceiling and
		 * to what the machine can give. */
		if (moem_pool_kmod_room(&free_bytes, &room) == 0) {
			ret = moem_pool_fit(opts, pool, free_bytes, room,
					    "moem.ko's ceiling (max_pool_mb)", &size);
			if (ret)
				goto err_dev;
		}
		ret = moem_dev_region_create_on(dev_fd, opts->name, size,
						opts->persistent ? MOEM_REGION_PERSISTENT : 0,
						opts->mode, node, &fd);
		if (ret)
			goto err_dev;
	}
	ret = moem_dev_region_fd_info(fd, &ri, NULL);
	if (ret)
		goto err_fd;
	if (attached && opts->size && ri.size != opts->size) {
		ret = moem_errf(EEXIST, "region '%s' exists with %llu bytes, %llu wanted",
				opts->name, (unsigned long long)ri.size,
				(unsigned long long)opts->size);
		goto err_fd;
	}
	base = mmap(NULL, ri.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		ret = moem_errf(errno, "mmap region '%s': %s", opts->name, strerror(errno));
		goto err_fd;
	}
	pool->base = base;
	pool->size = ri.size;
	pool->fd = fd;
	pool->dev_fd = dev_fd;
	/* A 1.4 module says where the chunks are (a 1.3 one leaves node 0:
	 * then nodes.c looks, as before); placed there on request, they are
	 * as bound as mbind would have made them. */
	if (has_node) {
		pool->info.n_nodes = 1;
		pool->info.nodes[0] = (struct moem_pool_node){
			.node = ri.node == MOEM_NODE_ANY ? -1 : (int32_t)ri.node, .bytes = ri.size};
		pool->info.bound = (ri.flags & MOEM_REGION_NODE) && ri.node != MOEM_NODE_ANY;
	}
	snprintf(what, sizeof(what), "region '%s'", opts->name);
	fill_info(opts, pool, attached, ri.flags & MOEM_REGION_PERSISTENT, what);
	return 0;

err_fd:
	close(fd);
err_dev:
	close(dev_fd);
	return ret;
}

/* "<name>@<node>": one node's region of a pool over several. */
static int node_region_name(const char *name, int node, char out[MOEM_NAME_MAX])
{
	int n = snprintf(out, MOEM_NAME_MAX, "%s@%d", name, node);

	if (n < 0 || n >= MOEM_NAME_MAX)
		return moem_errf(ENAMETOOLONG,
				 "region name '%s' is too long for a pool over NUMA nodes: "
				 "'%s@%d' must fit in %d bytes",
				 name, name, node, MOEM_NAME_MAX - 1);
	return 0;
}

/*
 * Undo what open_set made: destroy what it created (before closing its
 * fd, so that a non-persistent region is still there to be named), then
 * close every fd.
 */
static void drop_set(int dev_fd, const char *name, const int32_t *nodes, const int *fds, uint32_t n,
		     bool created)
{
	char rname[MOEM_NAME_MAX];

	for (uint32_t k = 0; k < n; k++) {
		if (fds[k] < 0)
			continue;
		if (created && !node_region_name(name, nodes[k], rname))
			moem_dev_region_destroy(dev_fd, rname);
		close(fds[k]);
	}
}

/*
 * Reopen an existing set: 0 with every fd, 1 if none of its regions
 * exists, -errno with a message otherwise (-ENOENT: part of a set; a
 * region that is not ours or not on its node).
 */
static int attach_set(int dev_fd, const char *name, const int32_t *nodes, uint32_t n, int *fds,
		      struct moem_region_info *ri)
{
	char rname[MOEM_NAME_MAX], missing[MOEM_NAME_MAX] = "", found[MOEM_NAME_MAX] = "";
	int ret = 0;

	for (uint32_t k = 0; k < n; k++) {
		int r;

		fds[k] = -1;
		r = node_region_name(name, nodes[k], rname);
		if (!r)
			r = attach_owned(dev_fd, rname, &fds[k]);
		if (r == -ENOENT) {
			snprintf(missing, sizeof(missing), "%s", rname);
			continue;
		}
		if (!r)
			r = moem_dev_region_fd_info(fds[k], &ri[k], NULL);
		if (!r && ri[k].node != (uint32_t)nodes[k])
			r = moem_errf(EXDEV, "region '%s' is on NUMA node %d, not on node %d",
				      rname, ri[k].node == MOEM_NODE_ANY ? -1 : (int)ri[k].node,
				      nodes[k]);
		if (r) {
			ret = r;
			break;
		}
		snprintf(found, sizeof(found), "%s", rname);
	}
	if (!ret && !found[0])
		return 1;
	if (!ret && missing[0])
		ret = moem_errf(ENOENT,
				"the pool over NUMA nodes is incomplete: region '%s' exists but "
				"'%s' does not; destroy the rest of the set (moemd --cold) or "
				"name the nodes it was made for",
				found, missing);
	if (ret)
		drop_set(dev_fd, name, nodes, fds, n, false);
	return ret;
}

/*
 * Map the regions back to back at one 2 MiB-aligned address, in node
 * order: a PROT_NONE reservation first, then each region MAP_FIXED over
 * its part of it, so nothing else can land in between.
 */
static int map_set(struct moem_pool *pool, const int *fds, uint32_t n)
{
	uint64_t total = 0, slack;
	uint8_t *raw, *base;

	for (uint32_t k = 0; k < n; k++)
		total += pool->info.nodes[k].bytes;
	raw = mmap(NULL, total + MOEM_CHUNK_SIZE, PROT_NONE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (raw == MAP_FAILED)
		return moem_errf(errno, "reserve %llu bytes of address space: %s",
				 (unsigned long long)total, strerror(errno));
	base = (uint8_t *)(((uintptr_t)raw + MOEM_CHUNK_SIZE - 1) &
			   ~(uintptr_t)(MOEM_CHUNK_SIZE - 1));
	if (base > raw)
		munmap(raw, (size_t)(base - raw));
	slack = (uint64_t)(raw + total + MOEM_CHUNK_SIZE - (base + total));
	if (slack)
		munmap(base + total, slack);
	for (uint32_t k = 0; k < n; k++) {
		const struct moem_pool_node *r = &pool->info.nodes[k];

		if (mmap(base + r->off, r->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
			 fds[k], 0) == MAP_FAILED) {
			int err = errno;

			munmap(base, total);
			return moem_errf(err, "mmap region of NUMA node %d: %s", r->node,
					 strerror(err));
		}
	}
	pool->base = base;
	pool->size = total;
	return 0;
}

/* One region per node of nodes[0..n), n >= 2, on a 1.4 module. */
static int open_set(const struct moem_pool_opts *opts, struct moem_pool *pool, int dev_fd,
		    const int32_t *nodes, uint32_t n)
{
	struct moem_region_info ri[MOEM_POOL_MAX_NODES];
	int fds[MOEM_POOL_MAX_NODES];
	char rname[MOEM_NAME_MAX], what[160];
	bool attached = false, persistent;
	uint64_t off = 0;
	uint32_t k;
	int ret;

	for (k = 0; k < n; k++) {
		fds[k] = -1;
		ret = node_region_name(opts->name, nodes[k], rname);
		if (ret)
			return ret;
	}
	if (opts->attach) {
		struct moem_region_info one;

		ret = attach_set(dev_fd, opts->name, nodes, n, fds, ri);
		if (ret == 0)
			attached = true;
		else if (ret < 0)
			return ret;
		else if (!moem_dev_region_info(dev_fd, opts->name, &one))
			/* A one-region pool of the same name: another layout. */
			return moem_errf(
				EEXIST,
				"region '%s' holds a pool of one region, but a pool over "
				"%u NUMA nodes is made of regions '%s@<node>': destroy it "
				"(moemd --cold) or choose the nodes or name it was made with",
				opts->name, n, opts->name);
	}
	if (attached) {
		for (k = 0; k < n; k++) {
			pool->info.nodes[k] = (struct moem_pool_node){
				.node = nodes[k], .off = off, .bytes = ri[k].size};
			off += ri[k].size;
		}
		pool->info.n_nodes = n;
		if (opts->size && off != opts->size) {
			drop_set(dev_fd, opts->name, nodes, fds, n, false);
			return moem_errf(EEXIST,
					 "the regions '%s@<node>' exist with %llu bytes, %llu "
					 "wanted",
					 opts->name, (unsigned long long)off,
					 (unsigned long long)opts->size);
		}
		persistent = ri[0].flags & MOEM_REGION_PERSISTENT;
	} else {
		uint64_t size = opts->size, free_bytes, room;

		if (!opts->size)
			return moem_errf(ENOENT,
					 "regions '%s@<node>' do not exist and no size was given",
					 opts->name);
		if (moem_pool_kmod_room(&free_bytes, &room) == 0) {
			ret = moem_pool_fit(opts, pool, free_bytes, room,
					    "moem.ko's ceiling (max_pool_mb)", &size);
			if (ret)
				return ret;
		}
		/* The same cut as thp and hugetlb: equal shares, in node order. */
		ret = moem_pool_nodes_plan(opts, size, pool);
		if (ret)
			return ret;
		if (pool->info.n_nodes != n)
			return moem_errf(ENOSPC,
					 "a pool of %llu bytes is too small to span %u NUMA nodes "
					 "(one 2 MiB chunk each at least)",
					 (unsigned long long)size, n);
		for (k = 0; k < n; k++) {
			const struct moem_pool_node *r = &pool->info.nodes[k];

			node_region_name(opts->name, r->node, rname);
			ret = moem_dev_region_create_on(dev_fd, rname, r->bytes,
							opts->persistent ? MOEM_REGION_PERSISTENT
									 : 0,
							opts->mode, r->node, &fds[k]);
			if (ret) {
				drop_set(dev_fd, opts->name, nodes, fds, k, true);
				return ret;
			}
		}
		persistent = opts->persistent;
	}
	ret = map_set(pool, fds, n);
	if (ret) {
		drop_set(dev_fd, opts->name, nodes, fds, n, !attached);
		return ret;
	}
	/* Each mapping holds its region: the first fd serves info ioctls. */
	pool->fd = fds[0];
	for (k = 1; k < n; k++)
		close(fds[k]);
	pool->dev_fd = dev_fd;
	pool->bind = false; /* placed by the module, not by mbind */
	pool->info.bound = true;
	{
		int len = snprintf(what, sizeof(what), "regions '%s@<node>' on NUMA nodes",
				   opts->name);

		for (k = 0; k < n && len > 0 && (size_t)len < sizeof(what); k++)
			len += snprintf(what + len, sizeof(what) - (size_t)len, "%s%d",
					k ? "," : " ", nodes[k]);
	}
	fill_info(opts, pool, attached, persistent, what);
	return 0;
}

/* The module's ABI minor, or -1 if it cannot say. */
static int abi_minor(int dev_fd)
{
	struct moem_version v;

	return moem_dev_version(dev_fd, &v) ? -1 : (int)(v.abi_version & 0xffff);
}

int moem_pool_kmod_open(const struct moem_pool_opts *opts, struct moem_pool *pool)
{
	int32_t nodes[MOEM_POOL_MAX_NODES];
	bool named = opts->nodes && *opts->nodes, has_node;
	struct moem_region_info ri;
	struct moem_pool_stats st;
	uint32_t n = 1;
	int dev_fd, minor, ret;

	ret = moem_dev_open(opts->dev_path, &dev_fd);
	if (ret)
		return ret;
	minor = abi_minor(dev_fd);
	has_node = minor >= NODE_ABI_MINOR;
	/*
	 * Which nodes: the ones named; else every node with memory, unless
	 * the administrator loaded the module with node= (then its node, as
	 * before) or the module cannot place regions (one region, as before).
	 */
	if (named || (has_node && !moem_dev_pool_stats(dev_fd, &st) && st.node == MOEM_NODE_ANY)) {
		ret = moem_pool_nodes_parse(named ? opts->nodes : NULL, nodes, &n);
		if (ret)
			goto err_dev;
	}
	if (n > 1 && !has_node) {
		ret = moem_errf(EOPNOTSUPP,
				"a kmod pool over NUMA nodes %s needs moem.ko ABI 1.%d or later "
				"(regions on a chosen node); the loaded module is ABI 1.%d: "
				"update it, or use the thp or hugetlb provider",
				opts->nodes, NODE_ABI_MINOR, minor);
		goto err_dev;
	}
	/*
	 * A restart with the default nodes finds the one region it made
	 * before (a module without per-node regions, or a one-node pool):
	 * reattach that, as a one-node restart always did.
	 */
	if (n > 1 && !named && opts->attach && moem_dev_region_info(dev_fd, opts->name, &ri) == 0)
		n = 1;
	/* Fewer chunks than nodes: the first nodes, as nodes.c cuts it. */
	if (opts->size && opts->size / MOEM_CHUNK_SIZE < n)
		n = (uint32_t)(opts->size / MOEM_CHUNK_SIZE);
	if (n > 1) {
		ret = open_set(opts, pool, dev_fd, nodes, n);
		if (ret)
			goto err_dev;
		return 0;
	}
	/* One node named: there, if the module can (else nodes.c checks). */
	return open_one(opts, pool, dev_fd, named && has_node ? nodes[0] : -1, has_node);

err_dev:
	close(dev_fd);
	return ret;
}

/* "<name>" itself, or "<name>@<digits>". */
static bool of_pool(const char *region, const char *name)
{
	size_t len = strlen(name);
	const char *p;

	if (strncmp(region, name, len))
		return false;
	if (!region[len])
		return true;
	if (region[len] != '@' || !region[len + 1])
		return false;
	for (p = region + len + 1; *p; p++) {
		if (*p < '0' || *p > '9')
			return false;
	}
	return true;
}

int moem_pool_kmod_destroy(const char *dev_path, const char *name, uint32_t *destroyed)
{
	char **names = NULL;
	uint32_t count = 0;
	int dev_fd, ret, first = 0;

	*destroyed = 0;
	ret = moem_dev_open(dev_path, &dev_fd);
	if (ret)
		return ret;
	ret = moem_dev_region_list(dev_fd, &names, &count);
	if (ret)
		goto out_dev;
	for (uint32_t i = 0; i < count; i++) {
		if (!of_pool(names[i], name))
			continue;
		ret = moem_dev_region_destroy(dev_fd, names[i]);
		if (!ret)
			(*destroyed)++;
		else if (ret != -ENOENT && !first)
			first = moem_err_prefix(-ret, "destroy region '%s'", names[i]);
	}
	moem_dev_names_free(names, count);
	ret = first;
out_dev:
	close(dev_fd);
	return ret;
}
