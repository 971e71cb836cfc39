/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Helpers for the loader tests: a file whose every byte is a known
 * function of its offset (so a misplaced, missing or stale byte shows),
 * a checker, and a completion counter.
 */
#ifndef MOEM_TEST_LOADER_LIB_H
#define MOEM_TEST_LOADER_LIB_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/loader.h>
#include <moem/pool.h>
#include <moem/rng.h>
#include <moem/util.h>

/* The 8-byte word at offset o (a multiple of 8) of a pattern file. */
static inline uint64_t tl_word(uint64_t seed, uint64_t o)
{
	uint64_t x = seed ^ o;

	return moem_splitmix64(&x);
}

static inline uint8_t tl_byte(uint64_t seed, uint64_t p)
{
	return (uint8_t)(tl_word(seed, p & ~7ULL) >> (8 * (p & 7)));
}

/*
 * Write a pattern file of size bytes in dir (default: $MOEM_TEST_DIR, else
 * /var/tmp, which is disk-backed where /tmp may be tmpfs). Returns 0 and the
 * path in buf, or -errno.
 */
static inline int tl_make_file(const char *dir, uint64_t seed, uint64_t size, char *buf, size_t len)
{
	uint64_t chunk = 1 << 20, *w;
	int fd, ret = 0;

	if (!dir)
		dir = getenv("MOEM_TEST_DIR");
	if (!dir)
		dir = "/var/tmp";
	snprintf(buf, len, "%s/moem-loader-test-XXXXXX", dir);
	fd = mkstemp(buf);
	if (fd < 0)
		return -errno;
	w = malloc(chunk);
	if (!w) {
		close(fd);
		unlink(buf);
		return -ENOMEM;
	}
	for (uint64_t off = 0; off < size && !ret; off += chunk) {
		uint64_t n = moem_min(chunk, size - off);

		for (uint64_t i = 0; i < chunk / 8; i++)
			w[i] = tl_word(seed, off + i * 8);
		if (pwrite(fd, w, n, (off_t)off) != (ssize_t)n)
			ret = -EIO;
	}
	free(w);
	close(fd);
	if (ret)
		unlink(buf);
	return ret;
}

/*
 * Add a test file to the loader and unlink it at once: the loader holds
 * it open, and a test killed by its timeout leaves nothing behind.
 */
static inline int tl_add_unlink(struct moem_loader *ld, const char *path, uint32_t *idx)
{
	int ret = moem_loader_add_file(ld, path, idx);

	unlink(path);
	return ret;
}

/* Index of the first byte of dst that is not the file's byte at off, or -1. */
static inline int64_t tl_check(uint64_t seed, const uint8_t *dst, uint64_t off, uint64_t len)
{
	uint64_t i = 0;

	/* Word-wise where both sides are 8-aligned, byte-wise elsewhere. */
	for (; i < len && ((off + i) & 7); i++)
		if (dst[i] != tl_byte(seed, off + i))
			return (int64_t)i;
	for (; i + 8 <= len; i += 8) {
		uint64_t v;

		memcpy(&v, dst + i, 8);
		if (v != tl_word(seed, off + i))
			break;
	}
	for (; i < len; i++)
		if (dst[i] != tl_byte(seed, off + i))
			return (int64_t)i;
	return -1;
}

/* A completion counter a callback updates: how many ran, with which errors. */
struct tl_done {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	unsigned int calls, ok, eio, ecanceled, other;
	int last_err;
	char msg[512];
};

#define TL_DONE_INIT                                                \
	{                                                           \
		PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER \
	}

static inline void tl_cb(void *arg, int err)
{
	struct tl_done *d = arg;

	pthread_mutex_lock(&d->lock);
	d->calls++;
	d->last_err = err;
	if (!err)
		d->ok++;
	else if (err == -EIO)
		d->eio++;
	else if (err == -ECANCELED)
		d->ecanceled++;
	else
		d->other++;
	if (err)
		snprintf(d->msg, sizeof(d->msg), "%s", moem_last_error());
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->lock);
}

#endif /* MOEM_TEST_LOADER_LIB_H */
