/* SPDX-License-Identifier: GPL-2.0-only WITH Linux-syscall-note */
/*
 * moem - kernel <-> user ABI of moem.ko, the pinned 2 MiB host-page pool
 * that stages Mixture-of-Experts weights.
 *
 * This header is the only contract between moem.ko and user space.
 * Rules (Documentation/process/botching-up-ioctls.rst):
 *  - only __u32/__u64 fields, explicit padding, pointers passed as __u64;
 *  - every pad and reserved field must be zero on input (else -EINVAL),
 *    so it can gain a meaning later without breaking old binaries;
 *  - unknown flag bits are rejected with -EINVAL;
 *  - a struct never changes size or meaning; new behaviour arrives as a
 *    new ioctl number (a _V2 ioctl), and the minor ABI version grows.
 *
 * Device: /dev/moem (0660). Region fds returned by CREATE/OPEN are the
 * only fds that can be mmap()ed; their mappings must be MAP_SHARED.
 */
#ifndef _UAPI_LINUX_MOEM_H
#define _UAPI_LINUX_MOEM_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define MOEM_ABI_MAJOR		1
#define MOEM_ABI_MINOR		4
#define MOEM_ABI_VERSION	((MOEM_ABI_MAJOR << 16) | MOEM_ABI_MINOR)

/* Oldest libmoem (major << 16 | minor) this module still serves. */
#define MOEM_MIN_LIB_VERSION	((1 << 16) | 0)

/* Pool memory comes in chunks of this size: one order-9 compound page. */
#define MOEM_CHUNK_SHIFT	21
#define MOEM_CHUNK_SIZE		(1ULL << MOEM_CHUNK_SHIFT)

/* A region name is 1..63 bytes plus the terminating NUL. */
#define MOEM_NAME_MAX		64

#define MOEM_IOC_MAGIC		0xE4

/*
 * MOEM_IOC_VERSION: abi_version = MOEM_ABI_VERSION of the running module,
 * min_lib_version = oldest library version it accepts. A library whose
 * major differs from abi_version's major, or which is older than
 * min_lib_version, must refuse to use the device.
 */
struct moem_version {
	__u32 abi_version;	/* out */
	__u32 min_lib_version;	/* out */
	__u64 reserved[2];	/* out: zero */
};

/* Region flags. */
#define MOEM_REGION_PERSISTENT	(1U << 0) /* survives its last fd and mapping */
#define MOEM_REGION_NODE	(1U << 1) /* 1.4: every chunk on NUMA node `node` */
#define MOEM_REGION_FLAGS_ALL	(MOEM_REGION_PERSISTENT | MOEM_REGION_NODE)

/* moem_region_info.node and moem_pool_stats.node: no one node. */
#define MOEM_NODE_ANY		0xffffffffU

/*
 * MOEM_IOC_REGION_CREATE: make a region of size bytes (a non-zero multiple
 * of MOEM_CHUNK_SIZE) from zeroed pool chunks, owned by the caller's euid
 * with permission bits mode (0..0777; only owner and other bits are used).
 * Returns a new O_CLOEXEC region fd in fd. -EEXIST if the name is taken,
 * -ENOSPC if the pool cannot grow to hold it, -EDQUOT if the caller (without
 * CAP_SYS_ADMIN) would own more than the per-user quota
 * (/sys/kernel/moem/pool/user_max_bytes), -ENOMEM on allocation failure or
 * when the caller's memory cgroup cannot be charged for the chunks the pool
 * has to grow by.
 *
 * MOEM_REGION_NODE (ABI 1.4): every chunk comes from NUMA node `node`, its
 * free chunks first, then new ones allocated there and nowhere else:
 * -ENOMEM when the node has no 2 MiB pages left, -EINVAL when `node` is
 * not a node with memory. Without the flag `node` must be zero (it was a
 * pad before 1.4, so old binaries pass zero) and the region's chunks come
 * from the module's node= parameter, or any node. A 1.3 module refuses
 * the flag with -EINVAL.
 */
struct moem_region_create {
	__u64 name_ptr;		/* in: NUL-terminated name, 1..63 bytes */
	__u64 size;		/* in: bytes, multiple of MOEM_CHUNK_SIZE */
	__u32 flags;		/* in: MOEM_REGION_* */
	__u32 mode;		/* in: permission bits, e.g. 0600 */
	__u32 fd;		/* out: region fd */
	__u32 node;		/* in: with MOEM_REGION_NODE, else zero */
	__u64 reserved[4];	/* must be zero */
};

/* Open flags. */
#define MOEM_OPEN_RDONLY	(1U << 0) /* map read-only; needs the r bit only */
#define MOEM_OPEN_OWNED		(1U << 1) /* 1.1: caller's own region, mode & 022 == 0 */
#define MOEM_OPEN_FLAGS_ALL	(MOEM_OPEN_RDONLY | MOEM_OPEN_OWNED)

/*
 * MOEM_IOC_REGION_OPEN: open an existing region by name. Needs rw (or r
 * with MOEM_OPEN_RDONLY) permission from the region's mode, or
 * CAP_SYS_ADMIN. -ENOENT if no such region, -EACCES if not permitted.
 * With MOEM_OPEN_OWNED, -EPERM unless the region's owner is the caller's
 * euid and its mode has no group or other write bit, whoever the caller
 * is: what a daemon opens this way nobody else can have written (a 1.0
 * module refuses the flag with -EINVAL).
 */
struct moem_region_open {
	__u64 name_ptr;		/* in */
	__u32 flags;		/* in: MOEM_OPEN_* */
	__u32 fd;		/* out: region fd */
	__u64 reserved[4];	/* must be zero */
};

/*
 * MOEM_IOC_REGION_INFO: describe a region by name (any caller may ask;
 * names and sizes are visible in sysfs anyway). node (ABI 1.4; a pad that
 * had to be zero before) is output only and ignored on input: the NUMA
 * node every chunk of the region is on, MOEM_NODE_ANY if they are on
 * several. A 1.3 module refuses a non-zero value there with -EINVAL and
 * returns zero: zero it before each call to an older module.
 */
struct moem_region_info {
	__u64 name_ptr;		/* in */
	__u64 size;		/* out: bytes */
	__u64 id;		/* out: unique for the module's lifetime */
	__u32 owner_uid;	/* out */
	__u32 mode;		/* out */
	__u32 flags;		/* out: MOEM_REGION_* */
	__u32 nr_maps;		/* out: live VMAs mapping it */
	__u32 nr_fds;		/* out: open region fds (files: dups share one); */
				/* mappings do not count */
	__u32 node;		/* out: NUMA node of its chunks, or MOEM_NODE_ANY */
	__u64 reserved[4];	/* must be zero */
};

/*
 * MOEM_IOC_REGION_LIST: copy the names of all regions, each NUL-terminated,
 * back to back, into buf_ptr[0..buf_len). count = number of regions,
 * needed = bytes the full list takes. If buf_len < needed nothing is copied
 * and the call still succeeds: retry with a buffer of needed bytes.
 */
struct moem_region_list {
	__u64 buf_ptr;		/* in */
	__u32 buf_len;		/* in */
	__u32 count;		/* out */
	__u32 needed;		/* out */
	__u32 pad;		/* must be zero */
	__u64 reserved[2];	/* must be zero */
};

/*
 * MOEM_IOC_REGION_DESTROY: remove the name (owner or CAP_SYS_ADMIN).
 * The memory returns to the pool when its last fd and mapping go away;
 * a region of the same name can be created at once and reads as zeros.
 */
struct moem_region_destroy {
	__u64 name_ptr;		/* in */
	__u64 reserved[2];	/* must be zero */
};

/* MOEM_IOC_POOL_STATS: the same numbers as /sys/kernel/moem/pool/. */
struct moem_pool_stats {
	__u64 total_bytes;	/* out: chunks the pool holds now */
	__u64 free_bytes;	/* out: held chunks in no region */
	__u64 max_bytes;	/* out: max_pool_mb ceiling */
	__u64 chunk_bytes;	/* out: MOEM_CHUNK_SIZE */
	__u32 node;		/* out: node= parameter, or MOEM_NODE_ANY */
	__u32 nr_regions;	/* out */
	__u64 reserved[4];	/* out: zero */
};

/*
 * Budget knobs (enum moem_budget_knob) and their table, MOEM_KNOBS():
 * the same values as /sys/kernel/moem/budgets/<name>. The kernel only
 * stores and validates them; moemd applies them.
 */
#include <linux/moem_knobs.h>

/*
 * MOEM_IOC_BUDGET_GET / MOEM_IOC_BUDGET_SET: read or write one knob.
 * SET needs CAP_SYS_ADMIN (-EPERM), as writing the sysfs files does,
 * validates like sysfs (-EINVAL, nothing changed) and wakes poll()ers of
 * the knob's sysfs file. seq counts changes of any knob since load.
 */
struct moem_budget {
	__u32 knob;		/* in: enum moem_budget_knob */
	__u32 pad;		/* must be zero */
	__u64 value;		/* in (SET) / out (GET) */
	__u64 seq;		/* out */
	__u64 reserved[2];	/* must be zero */
};

#define MOEM_IOC_VERSION	_IOR(MOEM_IOC_MAGIC, 0x00, struct moem_version)
#define MOEM_IOC_REGION_CREATE	_IOWR(MOEM_IOC_MAGIC, 0x01, struct moem_region_create)
#define MOEM_IOC_REGION_OPEN	_IOWR(MOEM_IOC_MAGIC, 0x02, struct moem_region_open)
#define MOEM_IOC_REGION_INFO	_IOWR(MOEM_IOC_MAGIC, 0x03, struct moem_region_info)
#define MOEM_IOC_REGION_LIST	_IOWR(MOEM_IOC_MAGIC, 0x04, struct moem_region_list)
#define MOEM_IOC_REGION_DESTROY	_IOW(MOEM_IOC_MAGIC, 0x05, struct moem_region_destroy)
#define MOEM_IOC_POOL_STATS	_IOR(MOEM_IOC_MAGIC, 0x06, struct moem_pool_stats)
#define MOEM_IOC_BUDGET_GET	_IOWR(MOEM_IOC_MAGIC, 0x07, struct moem_budget)
#define MOEM_IOC_BUDGET_SET	_IOWR(MOEM_IOC_MAGIC, 0x08, struct moem_budget)

/*
 * Region fd ioctl: MOEM_IOC_REGION_FD_INFO fills struct moem_region_info
 * for the region the fd is bound to (name_ptr may be 0; if non-zero, the
 * name is copied there, MOEM_NAME_MAX bytes).
 */
#define MOEM_IOC_REGION_FD_INFO	_IOWR(MOEM_IOC_MAGIC, 0x10, struct moem_region_info)

#endif /* _UAPI_LINUX_MOEM_H */
