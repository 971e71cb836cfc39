/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Small helpers shared by all of libmoem: sizes, alignment, overflow-safe
 * arithmetic, clocks. Header-only.
 */
#ifndef MOEM_UTIL_H
#define MOEM_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#define MOEM_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MOEM_KiB	   (1024ULL)
#define MOEM_MiB	   (1024ULL * 1024)
#define MOEM_GiB	   (1024ULL * 1024 * 1024)
#define MOEM_CHUNK_BYTES   (2ULL * 1024 * 1024)

#define moem_likely(x)	  __builtin_expect(!!(x), 1)
#define moem_unlikely(x)  __builtin_expect(!!(x), 0)
#define MOEM_UNUSED	  __attribute__((unused))
#define MOEM_PRINTF(a, b) __attribute__((format(printf, a, b)))

#define moem_min(a, b)	      ((a) < (b) ? (a) : (b))
#define moem_max(a, b)	      ((a) > (b) ? (a) : (b))
#define moem_clamp(x, lo, hi) moem_min(moem_max((x), (lo)), (hi))

/* Round up to a power-of-two alignment; the caller checks for overflow. */
static inline uint64_t moem_align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) & ~(a - 1);
}

static inline bool moem_is_aligned(uint64_t x, uint64_t a)
{
	return (x & (a - 1)) == 0;
}

/* Overflow-checked arithmetic: return true on overflow. */
static inline bool moem_add_overflow(uint64_t a, uint64_t b, uint64_t *r)
{
	return __builtin_add_overflow(a, b, r);
}

static inline bool moem_mul_overflow(uint64_t a, uint64_t b, uint64_t *r)
{
	return __builtin_mul_overflow(a, b, r);
}

/* Aligned-up with overflow check: true on overflow. */
static inline bool moem_align_up_overflow(uint64_t x, uint64_t a, uint64_t *r)
{
	uint64_t t;

	if (moem_add_overflow(x, a - 1, &t))
		return true;
	*r = t & ~(a - 1);
	return false;
}

static inline uint64_t moem_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/*
 * moem_parse_size() - parse "4096", "64K", "12M", "1.5G", "2T" (binary
 * multiples) into bytes. Returns 0 or -EINVAL / -ERANGE (with a message
 * in moem_last_error()). If pct_of is non-NULL, a value like "25%" is
 * accepted and resolved against *pct_of; otherwise "%" is rejected.
 */
int moem_parse_size(const char *s, const uint64_t *pct_of, uint64_t *out);

/*
 * moem_check_out_path() - may a result be written to path (a new file
 * renamed over it, or opened and truncated)? 0 if path does not exist or
 * is a regular file that is none of inputs[0..n) (NULL entries skipped);
 * -EINVAL with a message naming what it is otherwise: a device, FIFO or
 * directory (a rename would replace the node, a write would not be the
 * file's), or the very file an input is read from (the result would
 * destroy it).
 */
int moem_check_out_path(const char *what, const char *path, const char *const *inputs, size_t n);

/*
 * moem_read_whole() - read f to its end into *buf (malloc'd, NUL-added;
 * *len bytes): -EFBIG with a message naming what if there are more than
 * max bytes (an endless input such as /dev/zero stops there), -errno on
 * a read error. moem_getline() - one line of f as getline() (the newline
 * kept), growing *line up to max bytes: its length, -ENODATA at the end
 * of input, -EFBIG for a longer line, -errno on an error; each with a
 * message (what, if not NULL, first).
 */
int moem_read_whole(FILE *f, const char *what, size_t max, char **buf, size_t *len);
ssize_t moem_getline(char **line, size_t *cap, FILE *f, const char *what, size_t max);

/* Format bytes as "1.50 GiB" into buf (at least 32 bytes); returns buf. */
char *moem_fmt_bytes(uint64_t bytes, char *buf, size_t len);

/*
 * Rearrange idx[0..n) (distinct indices into key) so that its first k
 * entries are the k that rank first by key descending, ties by the lower
 * index (in no particular order among them): the set the first k of a
 * sort by that order hold, in O(n) expected time instead of a sort.
 */
void moem_select_top(uint32_t *idx, uint32_t n, uint32_t k, const float *key);

#endif /* MOEM_UTIL_H */
