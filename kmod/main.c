// SPDX-License-Identifier: GPL-2.0-only
/*
 * moem.ko: a pool of pinned 2 MiB host pages, carved into named regions
 * that user space maps, for staging Mixture-of-Experts weights. The ABI is
 * include/uapi/linux/moem.h; Documentation/admin-guide.md is the manual.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/mm.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/nodemask.h>
#include <linux/numa.h>

#include "internal.h"

static unsigned int max_pool_mb;
module_param(max_pool_mb, uint, 0444);
MODULE_PARM_DESC(max_pool_mb, "pool ceiling in MiB, a multiple of 2 (default 0: half of RAM)");

static unsigned int prealloc_mb;
module_param(prealloc_mb, uint, 0444);
MODULE_PARM_DESC(prealloc_mb, "MiB carved at load and kept while loaded, a multiple of 2");

static int node = NUMA_NO_NODE;
module_param(node, int, 0444);
MODULE_PARM_DESC(node,
		 "NUMA node of the floor and of regions created without one (-1: any)");

/*
 * Bytes one user without CAP_SYS_ADMIN may own in regions (user.c); -1:
 * a quarter of the ceiling. Live value: /sys/kernel/moem/pool/user_max_bytes.
 */
static int user_max_mb = -1;
module_param(user_max_mb, int, 0444);
MODULE_PARM_DESC(user_max_mb,
		 "MiB of regions one non-admin user may own, a multiple of 2 (-1: max_pool_mb / 4)");

static int __init moem_check_params(unsigned long *max_chunks, unsigned long *floor_chunks,
				    u64 *user_max)
{
	u64 ram_mb = (u64)totalram_pages() >> (20 - PAGE_SHIFT);
	const unsigned int chunk_mb = MOEM_CHUNK_SIZE >> 20;

	if (node != NUMA_NO_NODE &&
	    (node < 0 || node >= MAX_NUMNODES || !node_state(node, N_MEMORY))) {
		pr_err("node=%d is not a NUMA node with memory\n", node);
		return -EINVAL;
	}
	if (!max_pool_mb)
		max_pool_mb = rounddown(ram_mb / 2, chunk_mb);
	if (max_pool_mb % chunk_mb || prealloc_mb % chunk_mb) {
		pr_err("max_pool_mb=%u and prealloc_mb=%u must be multiples of %u\n", max_pool_mb,
		       prealloc_mb, chunk_mb);
		return -EINVAL;
	}
	if (max_pool_mb > ram_mb) {
		pr_err("max_pool_mb=%u is more than the %llu MiB of RAM\n", max_pool_mb, ram_mb);
		return -EINVAL;
	}
	if (prealloc_mb > max_pool_mb) {
		pr_err("prealloc_mb=%u is above max_pool_mb=%u\n", prealloc_mb, max_pool_mb);
		return -EINVAL;
	}
	if (user_max_mb == -1)
		user_max_mb = rounddown(max_pool_mb / 4, chunk_mb);
	if (user_max_mb < 0 || user_max_mb % chunk_mb || (unsigned int)user_max_mb > max_pool_mb) {
		pr_err("user_max_mb=%d must be -1 or a multiple of %u up to max_pool_mb=%u\n",
		       user_max_mb, chunk_mb, max_pool_mb);
		return -EINVAL;
	}
	*max_chunks = max_pool_mb / chunk_mb;
	*floor_chunks = prealloc_mb / chunk_mb;
	*user_max = (u64)user_max_mb << 20;
	return 0;
}

static int __init moem_init(void)
{
	unsigned long max_chunks, floor_chunks;
	u64 user_max;
	int ret;

	ret = moem_check_params(&max_chunks, &floor_chunks, &user_max);
	if (ret)
		return ret;
	moem_user_set_max(user_max);
	ret = moem_fs_init();
	if (ret)
		return ret;
	ret = moem_pool_init(max_chunks, floor_chunks, node);
	if (ret)
		goto err_fs;
	ret = moem_sysfs_init();
	if (ret)
		goto err_pool;
	/* Last: user space can reach the device from here on. */
	ret = moem_chardev_init();
	if (ret)
		goto err_sysfs;
	pr_info("ABI %u.%u, pool %u MiB preallocated, ceiling %u MiB, %d MiB per user, node %d\n",
		MOEM_ABI_MAJOR, MOEM_ABI_MINOR, prealloc_mb, max_pool_mb, user_max_mb, node);
	return 0;

err_sysfs:
	moem_sysfs_exit();
err_pool:
	moem_pool_exit();
err_fs:
	moem_fs_exit();
	return ret;
}

static void __exit moem_exit(void)
{
	moem_chardev_exit();
	moem_regions_exit();
	moem_sysfs_exit();
	/* Pinned memory of dead regions: the pinners free it when they unpin. */
	moem_regions_exit_held();
	moem_pool_exit();
	moem_users_exit();
	moem_fs_exit();
}

module_init(moem_init);
module_exit(moem_exit);

MODULE_DESCRIPTION("Pinned 2 MiB host page pool for Mixture-of-Experts weight staging");
MODULE_AUTHOR("moem developers");
MODULE_LICENSE("GPL");
