// SPDX-License-Identifier: GPL-2.0-only
/*
 * Bitmap extent allocator (extent.h). Next-fit over a bitmap: simple,
 * bounded memory (1 bit per granule: 80 GiB of 64 KiB granules is 160 KiB),
 * and a scan that skips whole used words.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/extent.h>
#include <moem/util.h>

static inline bool bit_get(const uint64_t *b, uint64_t i)
{
	return (b[i >> 6] >> (i & 63)) & 1;
}

static void bits_set(uint64_t *b, uint64_t start, uint64_t n, bool v)
{
	for (uint64_t i = start; i < start + n; i++) {
		if (v)
			b[i >> 6] |= 1ULL << (i & 63);
		else
			b[i >> 6] &= ~(1ULL << (i & 63));
	}
}

int moem_extent_init(struct moem_extent *x, uint64_t capacity_bytes, uint64_t limit_bytes,
		     uint32_t granule_shift)
{
	uint64_t words;

	memset(x, 0, sizeof(*x));
	if (granule_shift < 12 || granule_shift > 30)
		return moem_errf(EINVAL, "extent: granule 2^%u out of range", granule_shift);
	x->shift = granule_shift;
	x->capacity = capacity_bytes >> granule_shift;
	if (!x->capacity)
		return moem_errf(EINVAL, "extent: capacity below one granule");
	words = (x->capacity + 63) / 64;
	x->bits = calloc(words, sizeof(uint64_t));
	if (!x->bits)
		return -ENOMEM;
	x->limit = limit_bytes >> granule_shift;
	if (x->limit > x->capacity)
		x->limit = x->capacity;
	return 0;
}

void moem_extent_fini(struct moem_extent *x)
{
	free(x->bits);
	x->bits = NULL;
}

/* First free granule in [from, to), skipping full words; to if none. */
static uint64_t next_free(const struct moem_extent *x, uint64_t from, uint64_t to)
{
	while (from < to) {
		if ((from & 63) == 0 && x->bits[from >> 6] == ~0ULL) {
			from += 64;
			continue;
		}
		if (!bit_get(x->bits, from))
			return from;
		from++;
	}
	return to;
}

/* Search [from, to) for a free run of n granules; to if none. */
static uint64_t find_run(const struct moem_extent *x, uint64_t n, uint64_t from, uint64_t to)
{
	uint64_t start = next_free(x, from, to);

	while (start + n <= to) {
		uint64_t i = start;

		while (i < start + n && !bit_get(x->bits, i))
			i++;
		if (i == start + n)
			return start;
		start = next_free(x, i + 1, to);
	}
	return to;
}

int moem_extent_alloc(struct moem_extent *x, uint64_t bytes, uint64_t *off)
{
	uint64_t n, at;

	if (!bytes || bytes > (x->capacity << x->shift))
		return -EINVAL;
	n = (bytes + (1ULL << x->shift) - 1) >> x->shift;
	if (x->used + n > x->limit)
		return -ENOSPC;
	at = find_run(x, n, x->hint < x->limit ? x->hint : 0, x->limit);
	if (at == x->limit)
		at = find_run(x, n, 0, x->limit);
	if (at == x->limit)
		return -ENOSPC;
	bits_set(x->bits, at, n, true);
	x->used += n;
	x->hint = at + n;
	*off = at << x->shift;
	return 0;
}

int moem_extent_alloc_in(struct moem_extent *x, uint64_t bytes, uint64_t lo, uint64_t hi,
			 uint64_t *hint, uint64_t *off)
{
	uint64_t n, at, from, to;

	if (!bytes || bytes > (x->capacity << x->shift))
		return -EINVAL;
	from = lo >> x->shift;
	to = moem_min(hi >> x->shift, x->capacity);
	n = (bytes + (1ULL << x->shift) - 1) >> x->shift;
	if (from >= to || n > to - from)
		return -ENOSPC;
	at = *hint >> x->shift;
	at = find_run(x, n, at >= from && at < to ? at : from, to);
	if (at == to)
		at = find_run(x, n, from, to);
	if (at == to)
		return -ENOSPC;
	bits_set(x->bits, at, n, true);
	x->used += n;
	*hint = (at + n) << x->shift;
	*off = at << x->shift;
	return 0;
}

uint64_t moem_extent_used_in(const struct moem_extent *x, uint64_t lo, uint64_t hi)
{
	uint64_t i = lo >> x->shift, to = moem_min(hi >> x->shift, x->capacity), n = 0;

	for (; i < to && (i & 63); i++)
		n += bit_get(x->bits, i);
	for (; i + 64 <= to; i += 64)
		n += (uint64_t)__builtin_popcountll(x->bits[i >> 6]);
	for (; i < to; i++)
		n += bit_get(x->bits, i);
	return n << x->shift;
}

int moem_extent_reserve(struct moem_extent *x, uint64_t off, uint64_t bytes)
{
	uint64_t at = off >> x->shift, n = (bytes + (1ULL << x->shift) - 1) >> x->shift;

	if (!bytes || (off & ((1ULL << x->shift) - 1)) || at + n > x->limit)
		return -EINVAL;
	for (uint64_t i = at; i < at + n; i++)
		if (bit_get(x->bits, i))
			return -EBUSY;
	bits_set(x->bits, at, n, true);
	x->used += n;
	return 0;
}

void moem_extent_free(struct moem_extent *x, uint64_t off, uint64_t bytes)
{
	uint64_t at = off >> x->shift, n = (bytes + (1ULL << x->shift) - 1) >> x->shift;

	bits_set(x->bits, at, n, false);
	x->used -= n;
}

int64_t moem_extent_first_used(const struct moem_extent *x, uint64_t off)
{
	for (uint64_t i = off >> x->shift; i < x->capacity; i++) {
		if ((i & 63) == 0 && x->bits[i >> 6] == 0) {
			i += 63;
			continue;
		}
		if (bit_get(x->bits, i))
			return (int64_t)(i << x->shift);
	}
	return -1;
}

int moem_extent_set_limit(struct moem_extent *x, uint64_t limit_bytes)
{
	uint64_t lim = limit_bytes >> x->shift;

	if (lim > x->capacity)
		lim = x->capacity;
	if (lim < x->limit && moem_extent_first_used(x, lim << x->shift) >= 0)
		return -EBUSY;
	x->limit = lim;
	if (x->hint > lim)
		x->hint = 0;
	return 0;
}

uint64_t moem_extent_largest_free(const struct moem_extent *x)
{
	uint64_t best = 0, run = 0;

	for (uint64_t i = 0; i < x->limit; i++) {
		run = bit_get(x->bits, i) ? 0 : run + 1;
		if (run > best)
			best = run;
	}
	return best << x->shift;
}
