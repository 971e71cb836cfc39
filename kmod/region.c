// SPDX-License-Identifier: GPL-2.0-only
/*
 * Named regions: the namespace, ownership, quota, lifetime and region fds.
 *
 * A region is a run of pool chunks with a name and an inode of its own
 * (fs.c). CREATE and OPEN return a region fd (a file holding a region
 * reference); only region fds can be mmap()ed. Mappings do not hold the
 * fd's file: they hold the region's map file (mmap.c), which exists while
 * any mapping does and holds a region reference of its own, so closing an
 * fd really closes it (nr_files drops) while its mappings live on.
 *
 * A persistent region is also referenced by the namespace, so it outlives
 * every fd and mapping until DESTROY or module unload; a non-persistent
 * region loses its name with its last reference. DESTROY removes the name
 * at once; mappings and fds that still exist keep the memory until they
 * go, then it returns to the pool. If a chunk is still pinned then (an
 * io_uring fixed buffer that was never unregistered, RDMA, a GPU's host
 * registration), the region is held back whole: its memory stays counted
 * in the pool and against its owner's quota, and is returned by the first
 * pool operation, or the reaper that runs every second, after the pin goes.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>

#include "internal.h"
#include "trace.h"

/* Guards the namespace, the held list and the pool counters (internal.h). */
DEFINE_MUTEX(moem_lock);
static LIST_HEAD(moem_regions); /* named regions, oldest first */
static LIST_HEAD(moem_held);	/* released regions with a chunk still pinned */
static u32 moem_nr_named;
static atomic64_t moem_next_id = ATOMIC64_INIT(0);

static void moem_reap_fn(struct work_struct *work);
static DECLARE_DELAYED_WORK(moem_reap_work, moem_reap_fn);

int moem_name_from_user(char *name, u64 uptr)
{
	long len, i;

	len = strncpy_from_user(name, u64_to_user_ptr(uptr), MOEM_NAME_MAX);
	if (len < 0)
		return len;
	if (len == MOEM_NAME_MAX)
		return -ENAMETOOLONG; /* no NUL in the first MOEM_NAME_MAX bytes */
	if (!len || !strcmp(name, ".") || !strcmp(name, ".."))
		return -EINVAL;
	/* The name is a sysfs directory: printable ASCII, no space, no '/'. */
	for (i = 0; i < len; i++) {
		unsigned char c = name[i];

		if (c <= ' ' || c > '~' || c == '/')
			return -EINVAL;
	}
	return 0;
}

int moem_region_check_size(u64 size)
{
	if (!size || !IS_ALIGNED(size, MOEM_CHUNK_SIZE))
		return -EINVAL;
	if (size > moem_pool_max_bytes())
		return -ENOSPC;
	return 0;
}

static struct moem_region *moem_region_find_locked(const char *name)
{
	struct moem_region *r;

	lockdep_assert_held(&moem_lock);
	list_for_each_entry(r, &moem_regions, node) {
		if (!strcmp(r->name, name))
			return r;
	}
	return NULL;
}

static void moem_region_unname_locked(struct moem_region *r)
{
	lockdep_assert_held(&moem_lock);
	list_del_init(&r->node);
	r->named = false;
	moem_nr_named--;
	/* Waits for sysfs readers of regions/<name>; they never take moem_lock. */
	kobject_del(&r->kobj);
}

/* The memory goes back: chunks to the pool, bytes off the owner's quota. */
static void moem_region_return_locked(struct moem_region *r, bool force)
{
	lockdep_assert_held(&moem_lock);
	trace_moem_region_release(r->name, r->id, r->size);
	moem_pool_put_locked(r->chunks, r->nr_chunks, r->nr_floor, r->id, force);
	moem_user_uncharge_locked(r->owner, r->size);
}

/* What is left once the memory went back (or was never taken). */
static void moem_region_free(struct moem_region *r)
{
	mutex_destroy(&r->map_lock);
	kvfree(r->chunks);
	if (r->inode)
		iput(r->inode);
	kobject_put(&r->kobj); /* frees r */
}

/* The node every chunk is on, or MOEM_NODE_ANY: what INFO reports. */
static u32 moem_region_chunks_node(const struct moem_region *r)
{
	int nid = page_to_nid(r->chunks[0]);
	unsigned long i;

	for (i = 1; i < r->nr_chunks; i++) {
		if (page_to_nid(r->chunks[i]) != nid)
			return MOEM_NODE_ANY;
	}
	return nid;
}

int moem_region_new(const char *name, u64 size, u32 flags, u32 mode, u32 node,
		    struct moem_region **out)
{
	struct moem_region *r;
	kuid_t owner = current_euid();
	int ret;

	ret = moem_region_check_size(size);
	if (ret)
		return ret;
	/* Memory a pin held back may be free now: count it before deciding. */
	moem_regions_reap_now();
	ret = moem_user_charge(owner, size);
	if (ret)
		return ret;
	r = kzalloc(sizeof(*r), GFP_KERNEL_ACCOUNT);
	if (!r) {
		ret = -ENOMEM;
		goto err_uncharge;
	}
	kref_init(&r->ref);
	kobject_init(&r->kobj, &moem_region_ktype);
	INIT_LIST_HEAD(&r->node);
	mutex_init(&r->map_lock);
	strscpy(r->name, name, sizeof(r->name));
	snprintf(r->file_name, sizeof(r->file_name), "[moem:%s]", name);
	r->id = atomic64_inc_return(&moem_next_id);
	r->size = size;
	r->nr_chunks = size >> MOEM_CHUNK_SHIFT;
	r->owner = owner;
	r->mode = mode;
	r->flags = flags;
	r->inode = moem_fs_inode();
	if (IS_ERR(r->inode)) {
		ret = PTR_ERR(r->inode);
		r->inode = NULL;
		goto err_free;
	}
	r->chunks = kvcalloc(r->nr_chunks, sizeof(*r->chunks), GFP_KERNEL_ACCOUNT | __GFP_NOWARN);
	if (!r->chunks) {
		ret = -ENOMEM;
		goto err_free;
	}
	ret = moem_pool_get(r->chunks, r->nr_chunks,
			    (flags & MOEM_REGION_NODE) ? (int)node : NUMA_NO_NODE, r->id,
			    &r->nr_floor);
	if (ret)
		goto err_free;
	r->nid = moem_region_chunks_node(r);
	*out = r;
	return 0;

err_free:
	moem_region_free(r);
err_uncharge:
	mutex_lock(&moem_lock);
	moem_user_uncharge_locked(owner, size);
	mutex_unlock(&moem_lock);
	return ret;
}

int moem_region_publish(struct moem_region *r)
{
	int ret;

	mutex_lock(&moem_lock);
	if (moem_region_find_locked(r->name)) {
		ret = -EEXIST;
		goto out_unlock;
	}
	ret = kobject_add(&r->kobj, moem_regions_kobj, "%s", r->name);
	if (ret)
		goto out_unlock;
	list_add_tail(&r->node, &moem_regions);
	r->named = true;
	moem_nr_named++;
	if (r->flags & MOEM_REGION_PERSISTENT)
		kref_get(&r->ref); /* the namespace's reference */
	trace_moem_region_create(r->name, r->id, r->size, r->flags, r->mode,
				 from_kuid(&init_user_ns, r->owner));
out_unlock:
	mutex_unlock(&moem_lock);
	return ret;
}

void moem_region_unpublish(struct moem_region *r)
{
	bool put_ns_ref = false;

	mutex_lock(&moem_lock);
	if (r->named) {
		moem_region_unname_locked(r);
		put_ns_ref = r->flags & MOEM_REGION_PERSISTENT;
	}
	mutex_unlock(&moem_lock);
	if (put_ns_ref)
		moem_region_put(r);
}

struct moem_region *moem_region_lookup(const char *name)
{
	struct moem_region *r;

	mutex_lock(&moem_lock);
	r = moem_region_find_locked(name);
	/* Named implies a count above zero: the last put unnames under the lock. */
	if (r)
		kref_get(&r->ref);
	mutex_unlock(&moem_lock);
	return r ? r : ERR_PTR(-ENOENT);
}

int moem_region_may_open(const struct moem_region *r, u32 flags)
{
	u32 need = (flags & MOEM_OPEN_RDONLY) ? 4 : 6, bits;

	/*
	 * OWNED: the caller trusts what it finds only if nobody else can
	 * have put it there: its own region, writable by no one else. Not
	 * even CAP_SYS_ADMIN passes for another owner's region.
	 */
	if ((flags & MOEM_OPEN_OWNED) &&
	    (!uid_eq(current_euid(), r->owner) || (r->mode & 0022)))
		return -EPERM;
	/* Only owner and other bits: a region has no group. */
	if (uid_eq(current_euid(), r->owner))
		bits = (r->mode >> 6) & 7;
	else
		bits = r->mode & 7;
	if ((bits & need) == need || capable(CAP_SYS_ADMIN))
		return 0;
	return -EACCES;
}

static bool moem_region_may_manage(const struct moem_region *r)
{
	return uid_eq(current_euid(), r->owner) || capable(CAP_SYS_ADMIN);
}

int moem_region_destroy(const char *name)
{
	struct moem_region *r;
	bool put_ns_ref;
	int ret = 0;

	mutex_lock(&moem_lock);
	r = moem_region_find_locked(name);
	if (!r) {
		ret = -ENOENT;
		goto out_unlock;
	}
	if (!moem_region_may_manage(r)) {
		ret = -EACCES;
		goto out_unlock;
	}
	trace_moem_region_destroy(r->name, r->id, atomic_read(&r->nr_maps),
				  atomic_read(&r->nr_files));
	put_ns_ref = r->flags & MOEM_REGION_PERSISTENT;
	moem_region_unname_locked(r);
	mutex_unlock(&moem_lock);
	/*
	 * Unnamed, a region is reachable only through references: the
	 * namespace's is ours to drop, and nobody else drops it.
	 */
	if (put_ns_ref)
		moem_region_put(r);
	return 0;

out_unlock:
	mutex_unlock(&moem_lock);
	return ret;
}

void moem_region_get(struct moem_region *r)
{
	kref_get(&r->ref);
}

/* kref_put_mutex() calls this with moem_lock held; it unlocks it. */
static void moem_region_release(struct kref *ref)
{
	struct moem_region *r = container_of(ref, struct moem_region, ref);

	lockdep_assert_held(&moem_lock);
	if (r->named)
		moem_region_unname_locked(r);
	if (moem_pool_pinned(r->chunks, r->nr_chunks)) {
		/* Not reusable yet, and still counted: held until the pin goes. */
		moem_pool_trace_pinned(r->chunks, r->nr_chunks, r->id);
		list_add_tail(&r->node, &moem_held);
		mutex_unlock(&moem_lock);
		schedule_delayed_work(&moem_reap_work, HZ);
		return;
	}
	moem_region_return_locked(r, false);
	mutex_unlock(&moem_lock);
	moem_region_free(r);
}

void moem_region_put(struct moem_region *r)
{
	lockdep_assert_not_held(&moem_lock);
	kref_put_mutex(&r->ref, moem_region_release, &moem_lock);
}

/*
 * Return every held region whose pins are gone (all of them with force,
 * at unload: still pinned chunks are then the pinner's to free). True if
 * some are still held.
 */
static bool moem_regions_reap(bool force)
{
	struct moem_region *r, *tmp;
	LIST_HEAD(done);
	bool more;

	mutex_lock(&moem_lock);
	list_for_each_entry_safe(r, tmp, &moem_held, node) {
		if (!force && moem_pool_pinned(r->chunks, r->nr_chunks))
			continue;
		list_move_tail(&r->node, &done);
		moem_region_return_locked(r, force);
	}
	more = !list_empty(&moem_held);
	mutex_unlock(&moem_lock);
	list_for_each_entry_safe(r, tmp, &done, node)
		moem_region_free(r);
	return more;
}

static void moem_reap_fn(struct work_struct *work)
{
	if (moem_regions_reap(false))
		schedule_delayed_work(&moem_reap_work, HZ);
}

void moem_regions_reap_now(void)
{
	moem_regions_reap(false);
}

void moem_region_fill_info(const struct moem_region *r, struct moem_region_info *info)
{
	info->size = r->size;
	info->id = r->id;
	info->owner_uid = from_kuid_munged(current_user_ns(), r->owner);
	info->mode = r->mode;
	info->flags = r->flags;
	info->nr_maps = atomic_read(&r->nr_maps);
	info->nr_fds = atomic_read(&r->nr_files);
	info->node = r->nid;
}

int moem_region_info_by_name(const char *name, struct moem_region_info *info)
{
	struct moem_region *r;
	int ret = 0;

	mutex_lock(&moem_lock);
	r = moem_region_find_locked(name);
	if (r)
		moem_region_fill_info(r, info);
	else
		ret = -ENOENT;
	mutex_unlock(&moem_lock);
	return ret;
}

int moem_region_list(u32 buf_len, char **buf, u32 *count, u32 *needed)
{
	struct moem_region *r;
	size_t need = 0, off = 0;
	char *kbuf = NULL;
	int ret = 0;

	mutex_lock(&moem_lock);
	list_for_each_entry(r, &moem_regions, node)
		need += strlen(r->name) + 1;
	if (need > U32_MAX) {
		ret = -EOVERFLOW;
		goto out_unlock;
	}
	*count = moem_nr_named;
	*needed = need;
	if (!need || buf_len < need)
		goto out_unlock;
	kbuf = kvmalloc(need, GFP_KERNEL);
	if (!kbuf) {
		ret = -ENOMEM;
		goto out_unlock;
	}
	list_for_each_entry(r, &moem_regions, node) {
		size_t len = strlen(r->name) + 1;

		memcpy(kbuf + off, r->name, len);
		off += len;
	}
out_unlock:
	mutex_unlock(&moem_lock);
	*buf = kbuf;
	return ret;
}

u32 moem_region_count(void)
{
	u32 n;

	mutex_lock(&moem_lock);
	n = moem_nr_named;
	mutex_unlock(&moem_lock);
	return n;
}

void moem_regions_exit(void)
{
	struct moem_region *r;
	bool persistent;

	/*
	 * The module cannot be unloaded while a region fd or mapping exists
	 * (each holds a module reference), so what is left are persistent
	 * regions nobody uses: the namespace holds their only reference.
	 */
	for (;;) {
		mutex_lock(&moem_lock);
		r = list_first_entry_or_null(&moem_regions, struct moem_region, node);
		if (!r) {
			mutex_unlock(&moem_lock);
			break;
		}
		persistent = r->flags & MOEM_REGION_PERSISTENT;
		trace_moem_region_destroy(r->name, r->id, atomic_read(&r->nr_maps),
					  atomic_read(&r->nr_files));
		moem_region_unname_locked(r);
		mutex_unlock(&moem_lock);
		if (!WARN_ON(!persistent || kref_read(&r->ref) != 1))
			moem_region_put(r);
	}
}

void moem_regions_exit_held(void)
{
	/* After sysfs is gone nothing schedules the reaper again. */
	cancel_delayed_work_sync(&moem_reap_work);
	moem_regions_reap(true);
}

/* Region fds. */

static int moem_region_file_release(struct inode *inode, struct file *file)
{
	struct moem_region *r = file->private_data;

	atomic_dec(&r->nr_files);
	moem_region_put(r);
	return 0;
}

static long moem_region_ioctl_info(struct moem_region *r, struct moem_region_info __user *uarg)
{
	struct moem_region_info info;

	if (copy_from_user(&info, uarg, sizeof(info)))
		return -EFAULT;
	/* node is output only (ABI 1.4): what it held on input does not matter. */
	if (!mem_is_zero(info.reserved, sizeof(info.reserved)))
		return -EINVAL;
	if (info.name_ptr && copy_to_user(u64_to_user_ptr(info.name_ptr), r->name, sizeof(r->name)))
		return -EFAULT;
	moem_region_fill_info(r, &info);
	if (copy_to_user(uarg, &info, sizeof(info)))
		return -EFAULT;
	return 0;
}

static long moem_region_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct moem_region *r = file->private_data;

	switch (cmd) {
	case MOEM_IOC_REGION_FD_INFO:
		return moem_region_ioctl_info(r, (void __user *)arg);
	default:
		return -ENOTTY;
	}
}

const struct file_operations moem_region_fops = {
	.owner = THIS_MODULE,
	.release = moem_region_file_release,
	.mmap = moem_region_mmap,
	/* Chunk-aligned addresses: region offset 0 lands on a 2 MiB boundary. */
	.get_unmapped_area = thp_get_unmapped_area,
	/* msync() has nothing to write back; succeed rather than EINVAL. */
	.fsync = noop_fsync,
	.unlocked_ioctl = moem_region_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = noop_llseek,
};

struct file *moem_region_file(struct moem_region *r, bool rdonly)
{
	struct file *file;

	/* The file's reference; it also pins the module (fops owner). */
	moem_region_get(r);
	file = moem_fs_file(r->inode, r->file_name, rdonly ? O_RDONLY : O_RDWR, &moem_region_fops,
			    r);
	if (IS_ERR(file)) {
		moem_region_put(r);
		return file;
	}
	atomic_inc(&r->nr_files);
	return file;
}
