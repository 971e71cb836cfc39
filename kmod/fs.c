// SPDX-License-Identifier: GPL-2.0-only
/*
 * moem.ko's own pseudo file system, mounted internally (never visible in
 * the mount table): it gives each region an inode of its own, as DRM and
 * dma-buf do for theirs. The files of a region (its fds and the file its
 * mappings hold, region.c) all point to that inode, so a region's mappings
 * sit in their own i_mmap tree instead of the one anon_inode shared by
 * every eventfd, io_uring, kvm and perf file of the machine, and fstat()
 * tells two regions apart. /proc/PID/maps names a mapping "[moem:NAME]".
 */
#include <linux/dcache.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/fs_context.h>
#include <linux/module.h>
#include <linux/mount.h>
#include <linux/pseudo_fs.h>
#include <linux/string.h>

#include "internal.h"

#define MOEM_FS_MAGIC 0x6d6f656d /* "moem" */

static struct vfsmount *moem_mnt;

/* The dentry is named "[moem:NAME]"; show exactly that, no " (deleted)". */
static char *moem_fs_dname(struct dentry *dentry, char *buf, int buflen)
{
	const char *name = dentry->d_name.name;
	int len = strlen(name) + 1;

	if (len > buflen)
		return ERR_PTR(-ENAMETOOLONG);
	buf += buflen - len;
	memcpy(buf, name, len);
	return buf;
}

static const struct dentry_operations moem_fs_dops = {
	.d_dname = moem_fs_dname,
};

static int moem_fs_init_fs_context(struct fs_context *fc)
{
	struct pseudo_fs_context *ctx = init_pseudo(fc, MOEM_FS_MAGIC);

	if (!ctx)
		return -ENOMEM;
	ctx->dops = &moem_fs_dops;
	return 0;
}

/*
 * No .owner: the internal mount lives as long as the module, and a
 * reference from it would keep the module from ever unloading.
 */
static struct file_system_type moem_fs_type = {
	.name = "moem",
	.init_fs_context = moem_fs_init_fs_context,
	.kill_sb = kill_anon_super,
};

int moem_fs_init(void)
{
	moem_mnt = kern_mount(&moem_fs_type);
	return PTR_ERR_OR_ZERO(moem_mnt);
}

void moem_fs_exit(void)
{
	kern_unmount(moem_mnt);
}

struct inode *moem_fs_inode(void)
{
	return alloc_anon_inode(moem_mnt->mnt_sb);
}

struct file *moem_fs_file(struct inode *inode, const char *name, int flags,
			  const struct file_operations *fops, void *priv)
{
	struct file *file;

	/*
	 * alloc_file_pseudo() neither takes a module reference for fops (the
	 * final fput drops one) nor keeps the caller's inode reference.
	 * Callers run in code that holds the module already.
	 */
	__module_get(fops->owner);
	ihold(inode);
	file = alloc_file_pseudo(inode, moem_mnt, name, flags, fops);
	if (IS_ERR(file)) {
		iput(inode);
		module_put(fops->owner);
		return file;
	}
	file->private_data = priv;
	return file;
}
