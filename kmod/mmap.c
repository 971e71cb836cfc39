// SPDX-License-Identifier: GPL-2.0-only
/*
 * Mapping a region: struct-page mappings (vm_insert_pages at mmap time, a
 * fault handler for what MADV_DONTNEED or a partial unmap zapped), never
 * remap_pfn_range, so the pages can be pinned by get_user_pages: CUDA's
 * host registration, io_uring fixed buffers and O_DIRECT all need that.
 *
 * Each VMA holds a reference to the region file it was made from (taken in
 * ->mmap and ->open, dropped in ->close), and through it to the region and
 * the module. Holding the file rather than a bare module reference means
 * the final module_put happens in __fput, outside this module's text.
 *
 * The VMA never needs dirty tracking: no ->page_mkwrite or ->pfn_mkwrite,
 * and the anon inode's backing device cannot write back. From Linux 6.5
 * on, get_user_pages refuses FOLL_LONGTERM | FOLL_WRITE pins (io_uring
 * fixed buffers, CUDA host registration, RDMA) of any VMA that needs it
 * (mm/gup.c writable_file_mapping_allowed()), so a ->page_mkwrite would
 * break all of them. The VMA always keeps its file: a shared mapping
 * without one oopses remap_file_pages() (what iouring_compat did).
 */
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/pagemap.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>

#include "compat.h"
#include "internal.h"
#include "trace.h"

static struct moem_region *moem_vma_region(struct vm_area_struct *vma)
{
	struct file *file = vma->vm_private_data;

	return file->private_data;
}

static void moem_vma_open(struct vm_area_struct *vma)
{
	/* A split or moved copy of a mapping: it holds its own reference. */
	get_file(vma->vm_private_data);
	atomic_inc(&moem_vma_region(vma)->nr_maps);
}

static void moem_vma_close(struct vm_area_struct *vma)
{
	atomic_dec(&moem_vma_region(vma)->nr_maps);
	/* The page table entries are gone by now; this may free the region. */
	fput(vma->vm_private_data);
}

static vm_fault_t moem_vma_fault(struct vm_fault *vmf)
{
	struct moem_region *r = moem_vma_region(vmf->vma);

	if (vmf->pgoff >= moem_region_pages(r))
		return VM_FAULT_SIGBUS;
	return vmf_insert_page(vmf->vma, vmf->address, moem_region_page(r, vmf->pgoff));
}

static const struct vm_operations_struct moem_vm_ops = {
	.open = moem_vma_open,
	.close = moem_vma_close,
	.fault = moem_vma_fault,
};

/* Insert every page of the VMA, one chunk's worth per call. */
static int moem_vma_populate(struct vm_area_struct *vma, struct moem_region *r)
{
	unsigned long addr = vma->vm_start, pgoff = vma->vm_pgoff;
	struct page **pages;
	int ret = 0;

	pages = kmalloc_array(MOEM_CHUNK_PAGES, sizeof(*pages), GFP_KERNEL);
	if (!pages)
		return -ENOMEM;
	while (addr < vma->vm_end) {
		unsigned long first = pgoff & (MOEM_CHUNK_PAGES - 1);
		unsigned long n = min(MOEM_CHUNK_PAGES - first, (vma->vm_end - addr) >> PAGE_SHIFT);
		unsigned long i, left = n;

		for (i = 0; i < n; i++)
			pages[i] = moem_region_page(r, pgoff + i);
		ret = vm_insert_pages(vma, addr, pages, &left);
		if (ret)
			break;
		addr += n << PAGE_SHIFT;
		pgoff += n;
		if (fatal_signal_pending(current)) {
			ret = -EINTR;
			break;
		}
		cond_resched();
	}
	kfree(pages);
	return ret;
}

int moem_region_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct moem_region *r = file->private_data;
	unsigned long npages = vma_pages(vma), nr_pages = moem_region_pages(r);
	int ret;

	/* VM_MAYSHARE: MAP_SHARED (VM_SHARED is dropped for read-only fds). */
	if (!(vma->vm_flags & VM_MAYSHARE))
		return -EINVAL;
	if (vma->vm_pgoff >= nr_pages || npages > nr_pages - vma->vm_pgoff)
		return -EINVAL;
	/*
	 * Not inherited across fork, never grown by mremap, not in core
	 * dumps; VM_MIXEDMAP so pages can be inserted at fault time too.
	 */
	moem_vm_flags_set(vma, VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP | VM_MIXEDMAP);
	vma->vm_ops = &moem_vm_ops;
	vma->vm_private_data = file;
	/* On error the caller zaps what was inserted and never calls ->close. */
	ret = moem_vma_populate(vma, r);
	if (ret)
		return ret;
	get_file(file);
	atomic_inc(&r->nr_maps);
	trace_moem_mmap(r->name, r->id, vma->vm_start, vma->vm_pgoff, vma->vm_end - vma->vm_start,
			vma->vm_flags & VM_WRITE);
	return 0;
}
