// SPDX-License-Identifier: GPL-2.0-only
/*
 * Mapping a region: struct-page mappings inserted by the fault handler
 * (vm_insert_pages), never remap_pfn_range, so get_user_pages can pin the
 * pages for the long term: CUDA's host registration, io_uring fixed
 * buffers, RDMA and AF_XDP need that, O_DIRECT needs it for the short term.
 *
 * Two things keep those long-term pins possible on every kernel from 6.1
 * on. The VMA never needs dirty tracking (mm's vma_needs_dirty_tracking(),
 * which since 6.5 makes GUP refuse FOLL_LONGTERM|FOLL_WRITE pins): there
 * is no ->page_mkwrite or ->pfn_mkwrite, and the region's inode lives on a
 * pseudo file system whose backing device cannot write back. And the VMA
 * always has a file, so nothing in mm meets a shared mapping without one.
 *
 * That file is not the fd the caller mapped but the region's map file,
 * which exists while any mapping of the region does: each VMA holds it
 * (vma_set_file; mm takes and drops the references), it holds the region
 * and, through its fops owner, the module. So closing a region fd really
 * closes it, a mapping outliving its fd still keeps the memory and the
 * module, and the final module_put happens in __fput, outside this module.
 *
 * Page tables grow with use, not with mapping size: a fault inserts the
 * 2 MiB piece of the VMA around the address (one page of PTEs), so a big
 * region mapped many times costs page tables only where it is touched.
 */
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/pagemap.h>

#include "compat.h"
#include "internal.h"
#include "trace.h"

/* Pages handed to one vm_insert_pages() call from the fault handler. */
#define MOEM_FAULT_BATCH 32

static void moem_vma_open(struct vm_area_struct *vma)
{
	/* A split or a copy (fork after MADV_DOFORK): mm took the file reference. */
	atomic_inc(&((struct moem_region *)vma->vm_private_data)->nr_maps);
}

static void moem_vma_close(struct vm_area_struct *vma)
{
	/* The page table entries are gone; mm drops the map file after this. */
	moem_region_unmap(vma->vm_private_data);
}

/* Insert pages [pgoff, end) of the VMA, skipping entries already present. */
static int moem_vma_insert(struct vm_area_struct *vma, struct moem_region *r, pgoff_t pgoff,
			   pgoff_t end)
{
	struct page *pages[MOEM_FAULT_BATCH];

	while (pgoff < end) {
		unsigned long n = min_t(unsigned long, end - pgoff, MOEM_FAULT_BATCH);
		unsigned long addr = vma->vm_start + ((pgoff - vma->vm_pgoff) << PAGE_SHIFT);
		unsigned long i, left = n;
		int ret;

		for (i = 0; i < n; i++)
			pages[i] = moem_region_page(r, pgoff + i);
		ret = vm_insert_pages(vma, addr, pages, &left);
		/* left: pages not inserted; the first of them failed. */
		pgoff += n - left;
		if (ret == -EBUSY)
			pgoff++; /* present already (a racing fault): keep it */
		else if (ret)
			return ret;
	}
	return 0;
}

static vm_fault_t moem_vma_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct moem_region *r = vma->vm_private_data;
	pgoff_t chunk, start, end;
	int ret;

	if (vmf->pgoff >= moem_region_pages(r))
		return VM_FAULT_SIGBUS;
	/* The chunk around the fault, clipped to the VMA. */
	chunk = round_down(vmf->pgoff, MOEM_CHUNK_PAGES);
	start = max_t(pgoff_t, chunk, vma->vm_pgoff);
	end = min_t(pgoff_t, chunk + MOEM_CHUNK_PAGES, vma->vm_pgoff + vma_pages(vma));
	ret = moem_vma_insert(vma, r, start, end);
	if (!ret)
		return VM_FAULT_NOPAGE;
	/* Out of memory for page tables, or else: at least the faulting page. */
	return vmf_insert_page(vma, vmf->address, moem_region_page(r, vmf->pgoff));
}

static const struct vm_operations_struct moem_vm_ops = {
	.open = moem_vma_open,
	.close = moem_vma_close,
	.fault = moem_vma_fault,
};

int moem_region_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct moem_region *r = file->private_data;
	unsigned long npages = vma_pages(vma), nr_pages = moem_region_pages(r);
	struct file *map;

	/* VM_MAYSHARE: MAP_SHARED (VM_SHARED is dropped for read-only fds). */
	if (!(vma->vm_flags & VM_MAYSHARE))
		return -EINVAL;
	if (vma->vm_pgoff >= nr_pages || npages > nr_pages - vma->vm_pgoff)
		return -EINVAL;
	map = moem_region_map(r);
	if (IS_ERR(map))
		return PTR_ERR(map);
	/*
	 * Never grown by mremap, not in core dumps, not inherited by fork
	 * unless MADV_DOFORK asks (then the child's VMA counts like any);
	 * VM_MIXEDMAP: pages are inserted at fault time.
	 */
	moem_vm_flags_set(vma, VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP | VM_MIXEDMAP);
	vma->vm_ops = &moem_vm_ops;
	vma->vm_private_data = r;
	/* The VMA holds the map file now; moem_region_map()'s reference goes. */
	vma_set_file(vma, map);
	fput(map);
	trace_moem_mmap(r->name, r->id, vma->vm_start, vma->vm_pgoff, vma->vm_end - vma->vm_start,
			vma->vm_flags & VM_WRITE);
	return 0;
}

/*
 * The map file: what every VMA of the region holds. mmap works on it too
 * (remap_file_pages() maps a VMA's own file again), nothing else does;
 * no fd ever refers to it and /proc/PID/map_files cannot open it.
 */
static int moem_map_file_release(struct inode *inode, struct file *file)
{
	moem_region_put(file->private_data);
	return 0;
}

static const struct file_operations moem_map_fops = {
	.owner = THIS_MODULE,
	.release = moem_map_file_release,
	.mmap = moem_region_mmap,
	.get_unmapped_area = thp_get_unmapped_area,
	.fsync = noop_fsync,
	.llseek = noop_llseek,
};

struct file *moem_region_map(struct moem_region *r)
{
	struct file *map;

	mutex_lock(&r->map_lock);
	if (!r->map_file) {
		/* Its region reference lasts until its final fput. */
		moem_region_get(r);
		map = moem_fs_file(r->inode, r->file_name, O_RDWR, &moem_map_fops, r);
		if (IS_ERR(map)) {
			mutex_unlock(&r->map_lock);
			moem_region_put(r);
			return map;
		}
		r->map_file = map;
	}
	map = get_file(r->map_file);
	atomic_inc(&r->nr_maps);
	mutex_unlock(&r->map_lock);
	return map;
}

void moem_region_unmap(struct moem_region *r)
{
	struct file *map = NULL;

	mutex_lock(&r->map_lock);
	/* The last mapping: the region lets go of its map file. */
	if (atomic_dec_and_test(&r->nr_maps)) {
		map = r->map_file;
		r->map_file = NULL;
	}
	mutex_unlock(&r->map_lock);
	if (map)
		fput(map);
}
