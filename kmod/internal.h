/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * moem.ko internals shared by its files: the chunk pool (pool.c), named
 * regions and their fds (region.c), region mappings (mmap.c), the control
 * device (chardev.c), sysfs (sysfs.c) and the budget knobs (budget.c).
 *
 * Locking: one mutex, moem_lock, guards the region namespace and the pool
 * counters. Regions are reference counted (kref); the last put takes
 * moem_lock (kref_put_mutex) so a lookup under the lock never sees a
 * region whose count already reached zero. Never copy to or from user
 * space with moem_lock held: a fault there takes mmap_lock, and VMA close
 * (under mmap_lock) takes moem_lock.
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
 * Pool (pool.c). A chunk is one order-9 compound page; the pool holds at
 * least floor chunks (prealloc_mb) and at most max chunks (max_pool_mb).
 */
/* Where a chunk goes when a region gives it back (trace moem_chunk_free). */
enum moem_chunk_free_why {
	MOEM_CHUNK_FREE_POOL,	/* the free list, for the next region */
	MOEM_CHUNK_FREE_KERNEL, /* the buddy allocator (pool above its floor) */
	MOEM_CHUNK_FREE_PINNED, /* still referenced: dropped, never reused */
};

int moem_pool_init(unsigned long max_chunks, unsigned long floor_chunks, int node);
void moem_pool_exit(void);
/*
 * Fill chunks[0..nr) with zeroed chunks for region id: free chunks first,
 * then new ones up to the ceiling. 0, -ENOSPC (over the ceiling), -ENOMEM,
 * or -EINTR (fatal signal); on error nothing is taken.
 */
int moem_pool_get(struct page **chunks, unsigned long nr, u64 id);
/* Return chunks; a chunk someone still holds is never reused. */
void moem_pool_put_locked(struct page **chunks, unsigned long nr, u64 id);
void moem_pool_stats(struct moem_pool_stats *st);
u64 moem_pool_max_bytes(void);

/*
 * A named region. Lifetime: one reference per region file (each fd from
 * CREATE/OPEN; a mapping keeps the file it was made from), plus one held
 * by the namespace while a persistent region is named. A non-persistent
 * region loses its name when its last reference goes.
 */
struct moem_region {
	struct kref ref;
	struct kobject kobj;   /* regions/<name>; in sysfs while named */
	struct list_head node; /* on moem_regions while named */
	bool named;
	char name[MOEM_NAME_MAX];
	char vma_name[MOEM_NAME_MAX + 8]; /* "[moem:<name>]" */
	u64 id;
	u64 size;
	unsigned long nr_chunks;
	struct page **chunks; /* head pages */
	kuid_t owner;
	u32 mode;
	u32 flags;
	atomic_t nr_maps;  /* live VMAs */
	atomic_t nr_files; /* live region files */
};

/* region.c */
/* Copy and check a user name into name[MOEM_NAME_MAX]: -EFAULT, -ENAMETOOLONG, -EINVAL. */
int moem_name_from_user(char *name, u64 uptr);
/* 0, -EINVAL (zero or not a chunk multiple) or -ENOSPC (above the ceiling). */
int moem_region_check_size(u64 size);
/* An unnamed region with zeroed chunks and one reference (the caller's). */
int moem_region_new(const char *name, u64 size, u32 flags, u32 mode, struct moem_region **out);
/* Name it (namespace + sysfs, a reference if persistent): 0 or -EEXIST. */
int moem_region_publish(struct moem_region *r);
/* Undo publish if the name is still this region's (a failed CREATE). */
void moem_region_unpublish(struct moem_region *r);
/* A new reference to the named region, or ERR_PTR(-ENOENT). */
struct moem_region *moem_region_lookup(const char *name);
/* 0 if the caller may open r (rw, or r only), else -EACCES. */
int moem_region_may_open(const struct moem_region *r, bool rdonly);
/* Remove the name (owner or CAP_SYS_ADMIN): 0, -ENOENT or -EACCES. */
int moem_region_destroy(const char *name);
void moem_region_get(struct moem_region *r);
/* Drop a reference; the last one frees. Never with moem_lock held. */
void moem_region_put(struct moem_region *r);
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
/* At unload: drop every (persistent, unused) region. */
void moem_regions_exit(void);
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

/* chardev.c */
int moem_chardev_init(void);
void moem_chardev_exit(void);

/* sysfs.c */
int moem_sysfs_init(void);
void moem_sysfs_exit(void);
extern struct kobject *moem_kobj;
extern struct kobject *moem_regions_kobj;
extern const struct kobj_type moem_region_ktype;

/* budget.c */
extern const struct attribute_group moem_budget_group;
int moem_budget_get(u32 knob, u64 *value, u64 *seq);
/* Validate and store; -EINVAL if knob or value is out of range. */
int moem_budget_set(u32 knob, u64 value, u64 *seq);

#endif /* MOEM_KMOD_INTERNAL_H */
