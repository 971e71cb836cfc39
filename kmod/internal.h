/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * moem.ko internals shared by its files: the chunk pool (pool.c), named
 * regions and their fds (region.c), region mappings (mmap.c), the module's
 * pseudo file system (fs.c), per-user quotas (user.c), the control device
 * (chardev.c), sysfs (sysfs.c) and the budget knobs (budget.c).
 *
 * Locking: one mutex, moem_lock, guards the region namespace, the held
 * regions, the quota table and the pool counters. Regions are reference
 * counted (kref); the last put takes moem_lock (kref_put_mutex) so a lookup
 * under the lock never sees a region whose count already reached zero.
 * A region's map_lock guards its map file; it nests inside mmap_lock (VMA
 * open/close, ->mmap) and nothing is taken inside it but allocations.
 * Never copy to or from user space with moem_lock held: a fault there
 * takes mmap_lock, and a region's last reference can be dropped under it.
 */
#ifndef MOEM_KMOD_INTERNAL_H
#define MOEM_KMOD_INTERNAL_H

#include <linux/atomic.h>
#include <linux/bits.h>
#include <linux/kobject.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mm.h>
#include <linux/mutex.h>
#include <linux/types.h>
#include <linux/uidgid.h>

#include <linux/moem.h>

#define MOEM_CHUNK_ORDER (MOEM_CHUNK_SHIFT - PAGE_SHIFT)
#define MOEM_CHUNK_PAGES BIT(MOEM_CHUNK_ORDER)

extern struct mutex moem_lock;

/*
 * Pool (pool.c). A chunk is one order-9 compound page; the pool holds its
 * floor (prealloc_mb, never charged) and grows up to max (max_pool_mb)
 * with chunks charged to the creating task's memory cgroup. Free chunks
 * are kept per NUMA node.
 */
/* What became of a chunk a region gave back (trace moem_chunk_free). */
enum moem_chunk_free_why {
	MOEM_CHUNK_FREE_POOL,	/* the free list, for the next region */
	MOEM_CHUNK_FREE_KERNEL, /* the buddy allocator (not a floor chunk) */
	MOEM_CHUNK_FREE_PINNED, /* still pinned: held, returned once the pin goes */
};

int moem_pool_init(unsigned long max_chunks, unsigned long floor_chunks, int node);
void moem_pool_exit(void);
/*
 * Fill chunks[0..nr) with zeroed chunks for region id, all on node (a
 * node with memory, moem_pool_node_valid()), or for NUMA_NO_NODE where
 * the node= parameter says (any node if it is -1): free (floor) chunks
 * first, *nr_floor of them, then new ones up to the ceiling. 0, -ENOSPC
 * (over the ceiling), -ENOMEM (no memory on the node, or the memory
 * cgroup's limit), or -EINTR (fatal signal); on error nothing is taken.
 */
int moem_pool_get(struct page **chunks, unsigned long nr, int node, u64 id,
		  unsigned long *nr_floor);
/* A node a region may ask for: in range and with memory. */
bool moem_pool_node_valid(u32 node);
/* Bytes the pool holds, and holds free, on node (one with memory). */
void moem_pool_node_stats(int node, u64 *total_bytes, u64 *free_bytes);
/* True if any of the chunks has a reference besides the pool's. */
bool moem_pool_pinned(struct page **chunks, unsigned long nr);
void moem_pool_trace_pinned(struct page **chunks, unsigned long nr, u64 id);
/*
 * Return chunks (none pinned, unless force at unload): the first nr_floor
 * to the free list, the others to the kernel.
 */
void moem_pool_put_locked(struct page **chunks, unsigned long nr, unsigned long nr_floor, u64 id,
			  bool force);
void moem_pool_stats(struct moem_pool_stats *st);
u64 moem_pool_max_bytes(void);

/*
 * A named region. Lifetime: one reference per region file (each fd from
 * CREATE/OPEN), one held by the map file while a mapping exists, plus one
 * held by the namespace while a persistent region is named. A
 * non-persistent region loses its name when its last reference goes.
 */
struct moem_region {
	struct kref ref;
	struct kobject kobj;   /* regions/<name>; in sysfs while named */
	struct list_head node; /* on moem_regions while named, then on the held list */
	bool named;
	char name[MOEM_NAME_MAX];
	char file_name[MOEM_NAME_MAX + 8]; /* "[moem:<name>]": its files' dentry name */
	u64 id;
	u64 size;
	unsigned long nr_chunks;
	unsigned long nr_floor; /* chunks[0..nr_floor) came from the pool's floor */
	struct page **chunks;	/* head pages */
	kuid_t owner;
	u32 mode;
	u32 flags;
	u32 nid;		/* of every chunk, or MOEM_NODE_ANY (info.node) */
	struct inode *inode;	/* the region's own, on moem's pseudo fs */
	struct mutex map_lock;	/* map_file, and nr_maps' moves to and from 0 */
	struct file *map_file;	/* held while nr_maps > 0 */
	atomic_t nr_maps;	/* live VMAs */
	atomic_t nr_files;	/* open region fds' files */
};

/* region.c */
/* Copy and check a user name into name[MOEM_NAME_MAX]: -EFAULT, -ENAMETOOLONG, -EINVAL. */
int moem_name_from_user(char *name, u64 uptr);
/* 0, -EINVAL (zero or not a chunk multiple) or -ENOSPC (above the ceiling). */
int moem_region_check_size(u64 size);
/*
 * An unnamed region with zeroed chunks and one reference (the caller's),
 * owned and charged to the caller's euid: -EDQUOT over its quota. With
 * MOEM_REGION_NODE in flags every chunk is on node (checked by the
 * caller), else node is ignored.
 */
int moem_region_new(const char *name, u64 size, u32 flags, u32 mode, u32 node,
		    struct moem_region **out);
/* Name it (namespace + sysfs, a reference if persistent): 0 or -EEXIST. */
int moem_region_publish(struct moem_region *r);
/* Undo publish if the name is still this region's (a failed CREATE). */
void moem_region_unpublish(struct moem_region *r);
/* A new reference to the named region, or ERR_PTR(-ENOENT). */
struct moem_region *moem_region_lookup(const char *name);
/* 0 if the caller may open r with MOEM_OPEN_* flags, else -EACCES or -EPERM (OWNED). */
int moem_region_may_open(const struct moem_region *r, u32 flags);
/* Remove the name (owner or CAP_SYS_ADMIN): 0, -ENOENT or -EACCES. */
int moem_region_destroy(const char *name);
void moem_region_get(struct moem_region *r);
/* Drop a reference; the last one frees, or holds back a pinned region. */
void moem_region_put(struct moem_region *r);
/* Return held regions whose pins are gone (before counting the pool). */
void moem_regions_reap_now(void);
/* A new region file (its own reference), O_RDONLY if rdonly, or ERR_PTR. */
struct file *moem_region_file(struct moem_region *r, bool rdonly);
void moem_region_fill_info(const struct moem_region *r, struct moem_region_info *info);
int moem_region_info_by_name(const char *name, struct moem_region_info *info);
/*
 * Count the named regions and the bytes their names take; if buf_len is
 * enough, *buf is a kvmalloc()ed copy of them (kvfree it), else NULL.
 */
int moem_region_list(u32 buf_len, char **buf, u32 *count, u32 *needed);
u32 moem_region_count(void);
/* At unload: drop every (persistent, unused) region, then the held ones. */
void moem_regions_exit(void);
void moem_regions_exit_held(void);
extern const struct file_operations moem_region_fops;

static inline struct page *moem_region_page(const struct moem_region *r, pgoff_t pgoff)
{
	return nth_page(r->chunks[pgoff >> MOEM_CHUNK_ORDER], pgoff & (MOEM_CHUNK_PAGES - 1));
}

static inline unsigned long moem_region_pages(const struct moem_region *r)
{
	return r->nr_chunks << MOEM_CHUNK_ORDER;
}

/* mmap.c */
int moem_region_mmap(struct file *file, struct vm_area_struct *vma);
/* The map file with a reference for the caller, one more mapping counted. */
struct file *moem_region_map(struct moem_region *r);
/* One mapping fewer; the last lets go of the map file. */
void moem_region_unmap(struct moem_region *r);

/* fs.c */
int moem_fs_init(void);
void moem_fs_exit(void);
/* A new inode on moem's pseudo fs (ERR_PTR on failure); iput() it. */
struct inode *moem_fs_inode(void);
/* A new file on inode (it takes its own inode and module references). */
struct file *moem_fs_file(struct inode *inode, const char *name, int flags,
			  const struct file_operations *fops, void *priv);

/* user.c: bytes of regions per owner uid, and the limit for non-admins. */
int moem_user_charge(kuid_t uid, u64 bytes);
void moem_user_uncharge_locked(kuid_t uid, u64 bytes);
u64 moem_user_bytes(kuid_t uid);
void moem_user_set_max(u64 bytes);
u64 moem_user_get_max(void);
void moem_users_exit(void);

/* chardev.c */
int moem_chardev_init(void);
void moem_chardev_exit(void);

/* sysfs.c */
int moem_sysfs_init(void);
void moem_sysfs_exit(void);
/*
 * Parse a decimal u64 written to a sysfs file: digits only, at most one
 * trailing newline, no NUL or anything else in the count bytes written.
 */
int moem_sysfs_parse_u64(const char *buf, size_t count, u64 *value);
/* The same rule for a name from a list (sysfs_match_string, but whole). */
int moem_sysfs_match(const char *const *names, size_t n, const char *buf, size_t count);
extern struct kobject *moem_kobj;
extern struct kobject *moem_regions_kobj;
extern const struct kobj_type moem_region_ktype;

/* budget.c */
extern const struct attribute_group moem_budget_group;
int moem_budget_get(u32 knob, u64 *value, u64 *seq);
/* May the caller write knob (its MOEM_KNOBS() "who")? */
bool moem_budget_may_set(u32 knob);
/* Validate and store; -EINVAL if knob or value is out of range. */
int moem_budget_set(u32 knob, u64 value, u64 *seq);

#endif /* MOEM_KMOD_INTERNAL_H */
