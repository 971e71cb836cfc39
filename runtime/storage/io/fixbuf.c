// SPDX-License-Identifier: GPL-2.0-only
/*
 * Memory the loader reads into: the regions handed to
 * moem_loader_register_memory() and their split into fixed-buffer pieces
 * (the kernel takes at most 1 GiB per registered buffer).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/loader.h>
#include <moem/util.h>

#include "loader_int.h"

int moem_loader_plan_pieces(const void *base, uint64_t len, uint64_t piece_max, struct iovec *iov,
			    unsigned int max)
{
	uintptr_t b = (uintptr_t)base;
	uint64_t end, n;

	if (!len || !piece_max || moem_add_overflow(b, len, &end) || end > UINTPTR_MAX)
		return moem_errf(EINVAL,
				 "loader: cannot split %llu bytes at %p into pieces of "
				 "%llu",
				 (unsigned long long)len, base, (unsigned long long)piece_max);
	n = len / piece_max + (len % piece_max != 0);
	if (n > INT32_MAX)
		return moem_errf(EINVAL, "loader: %llu bytes need too many pieces of %llu",
				 (unsigned long long)len, (unsigned long long)piece_max);
	for (uint64_t i = 0; i < n && i < max; i++) {
		iov[i].iov_base = (void *)(b + i * piece_max);
		iov[i].iov_len = moem_min(piece_max, len - i * piece_max);
	}
	return (int)n;
}

int moem_ld_fixbuf_find(const struct moem_loader *ld, uintptr_t addr, uint64_t *room)
{
	uint32_t lo = 0, hi = ld->nr_fixbufs;

	/* Last piece whose base is <= addr. */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (ld->fixbufs[mid].base <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return -1;
	lo--;
	if (addr - ld->fixbufs[lo].base >= ld->fixbufs[lo].len)
		return -1;
	*room = ld->fixbufs[lo].len - (addr - ld->fixbufs[lo].base);
	return (int)lo;
}

int moem_loader_register_memory(struct moem_loader *ld, void *base, uint64_t len)
{
	uintptr_t b = (uintptr_t)base;
	struct ld_region *r;
	uint64_t end;
	uint32_t i;

	if (!base || !len || !moem_is_aligned(b, 4096) || !moem_is_aligned(len, 4096))
		return moem_errf(EINVAL,
				 "loader: memory %p + %llu must be non-empty and 4 KiB "
				 "aligned",
				 base, (unsigned long long)len);
	if (moem_add_overflow(b, len, &end) || end > UINTPTR_MAX)
		return moem_errf(EINVAL, "loader: memory %p + %llu wraps", base,
				 (unsigned long long)len);
	pthread_mutex_lock(&ld->lock);
	if (ld->outstanding) {
		pthread_mutex_unlock(&ld->lock);
		return moem_errf(EBUSY,
				 "loader: memory registration while %llu reads are "
				 "outstanding (register before reading, or drain)",
				 (unsigned long long)ld->outstanding);
	}
	for (i = 0; i < ld->nr_regions; i++) {
		r = &ld->regions[i];
		if (b < r->base + r->len && r->base < end) {
			pthread_mutex_unlock(&ld->lock);
			return moem_errf(EEXIST,
					 "loader: memory %p + %llu overlaps a region "
					 "already registered (%p + %llu)",
					 base, (unsigned long long)len, (void *)r->base,
					 (unsigned long long)r->len);
		}
	}
	r = realloc(ld->regions, (ld->nr_regions + 1) * sizeof(*r));
	if (!r) {
		pthread_mutex_unlock(&ld->lock);
		return -ENOMEM;
	}
	ld->regions = r;
	/* Keep regions sorted by address: the piece table built from them is
	 * then sorted too, which moem_ld_fixbuf_find() relies on. */
	for (i = ld->nr_regions; i > 0 && ld->regions[i - 1].base > b; i--)
		ld->regions[i] = ld->regions[i - 1];
	ld->regions[i] = (struct ld_region){.base = b, .len = len};
	ld->nr_regions++;
	ld->eng->set_memory(ld);
	pthread_mutex_unlock(&ld->lock);
	return 0;
}
