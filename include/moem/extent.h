/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Extent allocator: contiguous runs of fixed-size granules inside a range
 * whose usable end (the limit) can move at run time. The DRAM tier uses it
 * over the pinned pool (4 KiB granules, O_DIRECT alignment), the HBM arena
 * over its mapped VA range (64 KiB granules). Not thread-safe: the tier
 * that owns it holds its lock.
 */
#ifndef MOEM_EXTENT_H
#define MOEM_EXTENT_H

#include <stdbool.h>
#include <stdint.h>

struct moem_extent {
	uint64_t *bits;	   /* 1 = used, over capacity granules */
	uint64_t capacity; /* granules the range can ever hold */
	uint64_t limit;	   /* granules usable now (<= capacity) */
	uint64_t used;	   /* granules allocated */
	uint64_t hint;	   /* where the next search starts (next fit) */
	uint32_t shift;	   /* log2(granule bytes) */
};

/* capacity_bytes and the initial limit are rounded down to granules. */
int moem_extent_init(struct moem_extent *x, uint64_t capacity_bytes, uint64_t limit_bytes,
		     uint32_t granule_shift);
void moem_extent_fini(struct moem_extent *x);

/*
 * Allocate bytes (rounded up to granules) below the limit; the offset in
 * bytes goes to *off. -ENOSPC if no run fits (fragmentation or full),
 * -EINVAL for 0 bytes or more than the capacity.
 */
int moem_extent_alloc(struct moem_extent *x, uint64_t bytes, uint64_t *off);
/*
 * Allocate bytes inside [lo, hi) (bytes, granule aligned), ignoring the
 * limit: the DRAM tier's per-node ranges. *hint (bytes, kept by the
 * caller, one per range) is where the next-fit search starts.
 */
int moem_extent_alloc_in(struct moem_extent *x, uint64_t bytes, uint64_t lo, uint64_t hi,
			 uint64_t *hint, uint64_t *off);
/* Bytes allocated inside [lo, hi) (granule aligned). */
uint64_t moem_extent_used_in(const struct moem_extent *x, uint64_t lo, uint64_t hi);
/* Allocate exactly [off, off + bytes) (granule aligned); -EBUSY if any of
 * it is used, -EINVAL if it is not aligned or crosses the limit. */
int moem_extent_reserve(struct moem_extent *x, uint64_t off, uint64_t bytes);
/* Free a run returned by moem_extent_alloc (same bytes). */
void moem_extent_free(struct moem_extent *x, uint64_t off, uint64_t bytes);

/*
 * Move the limit. Growing always succeeds (up to the capacity). Shrinking
 * succeeds only when nothing is allocated at or above the new limit;
 * otherwise -EBUSY and the caller evicts moem_extent_first_above() first.
 */
int moem_extent_set_limit(struct moem_extent *x, uint64_t limit_bytes);
/* Offset (bytes) of the first used granule at or above off, or -1 if none. */
int64_t moem_extent_first_used(const struct moem_extent *x, uint64_t off);

static inline uint64_t moem_extent_granule(const struct moem_extent *x)
{
	return 1ULL << x->shift;
}

static inline uint64_t moem_extent_used_bytes(const struct moem_extent *x)
{
	return x->used << x->shift;
}

static inline uint64_t moem_extent_limit_bytes(const struct moem_extent *x)
{
	return x->limit << x->shift;
}

/* Largest free run below the limit, in bytes (for reports and tests). */
uint64_t moem_extent_largest_free(const struct moem_extent *x);

#endif /* MOEM_EXTENT_H */
