/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The kernel interfaces moem.ko uses that changed between the releases it
 * supports: Linux 6.1 (Debian 12's kernel) and 6.12 (Debian 12's
 * bookworm-security kernel), and what lies between. Everything else is
 * the same on both.
 */
#ifndef MOEM_KMOD_COMPAT_H
#define MOEM_KMOD_COMPAT_H

#include <linux/mm.h>
#include <linux/version.h>

/* 6.3 made vma->vm_flags read-only: changes go through vm_flags_set(). */
static inline void moem_vm_flags_set(struct vm_area_struct *vma, vm_flags_t flags)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
	vm_flags_set(vma, flags);
#else
	vma->vm_flags |= flags;
#endif
}

/* 6.10: __assign_str() takes the source from __string() and one argument. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 10, 0)
#define moem_assign_str(dst, src) __assign_str(dst)
#else
#define moem_assign_str(dst, src) __assign_str(dst, src)
#endif

#endif /* MOEM_KMOD_COMPAT_H */
