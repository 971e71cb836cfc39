// SPDX-License-Identifier: GPL-2.0-only
/*
 * kmod provider: a named region of moem.ko. With attach, an existing region
 * of the name is opened (a restarted daemon finds its staged experts);
 * otherwise a new one is created, persistent if asked. What attach opens
 * is trusted (staged bytes are served as they are), so it must be this
 * uid's own region and writable by nobody else: another user who created
 * the name first is refused with a message, never used.
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

int moem_pool_kmod_open(const struct moem_pool_opts *opts, struct moem_pool *pool)
{
	struct moem_region_info ri;
	int dev_fd, fd = -1, ret;
	bool attached = false;
	void *base;

	ret = moem_dev_open(opts->dev_path, &dev_fd);
	if (ret)
		return ret;
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
		ret = moem_dev_region_create(dev_fd, opts->name, size,
					     opts->persistent ? MOEM_REGION_PERSISTENT : 0,
					     opts->mode, &fd);
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
	pool->info.provider = MOEM_POOL_KMOD;
	pool->info.page_bytes = MOEM_CHUNK_SIZE;
	pool->info.huge_bytes = ri.size;
	pool->info.pinned = true;
	pool->info.pinned_bytes = ri.size;
	pool->info.attached = attached;
	pool->info.persistent = ri.flags & MOEM_REGION_PERSISTENT;
	snprintf(pool->info.region, sizeof(pool->info.region), "%s", opts->name);
	snprintf(pool->info.why, sizeof(pool->info.why), "%s: %s region '%s'",
		 opts->dev_path ? opts->dev_path : MOEM_DEV_PATH,
		 attached ? "attached existing" : "created", opts->name);
	snprintf(pool->info.backing, sizeof(pool->info.backing),
		 "moem.ko: %llu pinned 2 MiB compound pages (mapped with 4 KiB PTEs)",
		 (unsigned long long)(ri.size / MOEM_CHUNK_SIZE));
	return 0;

err_fd:
	close(fd);
err_dev:
	close(dev_fd);
	return ret;
}
