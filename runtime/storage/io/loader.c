// SPDX-License-Identifier: GPL-2.0-only
/*
 * The loader's common part (loader.h): options, the file table, the queue
 * of reads, completion and drain. The engines (uring.c, pread.c) take reads
 * from the queue and issue their requests.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/loader.h>
#include <moem/util.h>

#include "loader_int.h"

__thread struct moem_loader *moem_ld_current;

static const char *const mode_names[MOEM_LOADER_MODE_NR] = {
	[MOEM_LOADER_AUTO] = "auto",
	[MOEM_LOADER_URING] = "uring",
	[MOEM_LOADER_PREAD] = "pread",
	[MOEM_LOADER_BUFFERED] = "buffered",
};

const char *moem_loader_mode_name(enum moem_loader_mode m)
{
	return (unsigned int)m < MOEM_LOADER_MODE_NR ? mode_names[m] : "?";
}

int moem_loader_mode_parse(const char *s, enum moem_loader_mode *out)
{
	for (int i = 0; i < MOEM_LOADER_MODE_NR; i++) {
		if (!strcmp(s, mode_names[i])) {
			*out = (enum moem_loader_mode)i;
			return 0;
		}
	}
	return moem_errf(EINVAL, "unknown loader mode '%s' (auto, uring, pread, buffered)", s);
}

void moem_ld_why_add(struct moem_loader *ld, const char *fmt, ...)
{
	size_t n = strlen(ld->why);
	va_list ap;

	if (n && n + 2 < sizeof(ld->why)) {
		memcpy(ld->why + n, "; ", 3);
		n += 2;
	}
	if (n + 1 >= sizeof(ld->why))
		return;
	va_start(ap, fmt);
	vsnprintf(ld->why + n, sizeof(ld->why) - n, fmt, ap);
	va_end(ap);
}

static int check_opts(struct moem_loader_opts *o)
{
	if ((unsigned int)o->mode >= MOEM_LOADER_MODE_NR)
		return moem_errf(EINVAL, "loader: bad mode %d", (int)o->mode);
	if (!o->queue_depth)
		o->queue_depth = MOEM_LOADER_QD_DEFAULT;
	if (!o->req_size)
		o->req_size = MOEM_LOADER_REQ_DEFAULT;
	if (!o->threads)
		o->threads = MOEM_LOADER_THREADS_DEFAULT;
	if (!o->max_files)
		o->max_files = MOEM_LOADER_FILES_DEFAULT;
	if (!o->piece_max)
		o->piece_max = MOEM_LOADER_PIECE_MAX;
	if (o->queue_depth > MOEM_LOADER_QD_MAX)
		return moem_errf(EINVAL, "loader: queue depth %u is above %u", o->queue_depth,
				 MOEM_LOADER_QD_MAX);
	if (o->req_size < MOEM_LOADER_REQ_MIN || o->req_size > MOEM_LOADER_REQ_MAX ||
	    !moem_is_aligned(o->req_size, 4096))
		return moem_errf(EINVAL,
				 "loader: request size %u must be a multiple of 4 KiB "
				 "between 4 KiB and 64 MiB",
				 o->req_size);
	if (o->threads > MOEM_LOADER_THREADS_MAX)
		return moem_errf(EINVAL, "loader: %u pread threads is above %u", o->threads,
				 MOEM_LOADER_THREADS_MAX);
	if (o->max_files > MOEM_LOADER_FILES_MAX)
		return moem_errf(EINVAL, "loader: max_files %u is above %u", o->max_files,
				 MOEM_LOADER_FILES_MAX);
	if (o->piece_max > MOEM_LOADER_PIECE_MAX || !moem_is_aligned(o->piece_max, 4096))
		return moem_errf(EINVAL,
				 "loader: fixed-buffer piece size %llu must be a multiple of "
				 "4 KiB and at most 1 GiB",
				 (unsigned long long)o->piece_max);
	return 0;
}

int moem_loader_create(const struct moem_loader_opts *opts, struct moem_loader **out)
{
	struct moem_loader_opts o = opts ? *opts : (struct moem_loader_opts){0};
	struct moem_loader *ld;
	int ret;

	ret = check_opts(&o);
	if (ret)
		return ret;
	ld = calloc(1, sizeof(*ld));
	if (!ld)
		return -ENOMEM;
	ld->opts = o;
	ld->files = calloc(o.max_files, sizeof(*ld->files));
	if (!ld->files) {
		ret = -ENOMEM;
		goto err_ld;
	}
	pthread_mutex_init(&ld->lock, NULL);
	pthread_cond_init(&ld->idle, NULL);
	ld->eng = &moem_ld_pread_engine;
	if (o.mode == MOEM_LOADER_AUTO || o.mode == MOEM_LOADER_URING) {
		ret = moem_ld_uring_engine.start(ld);
		if (ret == 0)
			ld->eng = &moem_ld_uring_engine;
		else if (o.mode == MOEM_LOADER_URING)
			goto err_sync;
		else
			moem_ld_why_add(ld, "io_uring unavailable (%s): pread pool",
					moem_last_error());
	}
	if (ld->eng == &moem_ld_pread_engine) {
		ret = moem_ld_pread_engine.start(ld);
		if (ret)
			goto err_sync;
	}
	*out = ld;
	return 0;

err_sync:
	pthread_cond_destroy(&ld->idle);
	pthread_mutex_destroy(&ld->lock);
	free(ld->files);
err_ld:
	free(ld);
	return ret;
}

void moem_loader_destroy(struct moem_loader *ld)
{
	if (!ld)
		return;
	pthread_mutex_lock(&ld->lock);
	ld->stopping = true;
	pthread_mutex_unlock(&ld->lock);
	ld->eng->stop(ld);
	for (uint32_t i = 0; i < ld->nr_files; i++)
		moem_ld_file_close(&ld->files[i]);
	free(ld->files);
	free(ld->regions);
	free(ld->fixbufs);
	pthread_cond_destroy(&ld->idle);
	pthread_mutex_destroy(&ld->lock);
	free(ld);
}

int moem_loader_add_file(struct moem_loader *ld, const char *path, uint32_t *idx)
{
	struct ld_file f;
	uint32_t i;
	int ret;

	if (!path || !*path)
		return moem_errf(EINVAL, "loader: empty file path");
	ret = moem_ld_file_open(ld, path, &f);
	if (ret)
		return ret;
	pthread_mutex_lock(&ld->lock);
	i = ld->nr_files;
	if (i == ld->opts.max_files) {
		pthread_mutex_unlock(&ld->lock);
		moem_ld_file_close(&f);
		return moem_errf(ENOSPC,
				 "%s: the loader's file table is full (%u files; raise "
				 "max_files)",
				 path, ld->opts.max_files);
	}
	ld->files[i] = f;
	if (!f.direct && f.why[0])
		moem_ld_why_add(ld, "%s: buffered: %s", path, f.why);
	/* Registration happens before the index is published: no read can
	 * name the file before its slot holds the right fd. */
	ld->eng->add_file(ld, i);
	__atomic_store_n(&ld->nr_files, i + 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ld->lock);
	*idx = i;
	return 0;
}

int moem_loader_file_info(struct moem_loader *ld, uint32_t idx, struct moem_loader_file_info *fi)
{
	const struct ld_file *f;

	if (idx >= __atomic_load_n(&ld->nr_files, __ATOMIC_ACQUIRE))
		return moem_errf(EBADF, "loader: file index %u was not added", idx);
	f = &ld->files[idx];
	memset(fi, 0, sizeof(*fi));
	snprintf(fi->path, sizeof(fi->path), "%s", f->path);
	fi->size = f->size;
	fi->direct = f->direct;
	fi->off_align = f->off_align;
	fi->mem_align = f->mem_align;
	snprintf(fi->why, sizeof(fi->why), "%s", f->why);
	return 0;
}

int moem_loader_read(struct moem_loader *ld, uint32_t idx, uint64_t off, uint64_t len, void *dst,
		     moem_loader_cb cb, void *arg)
{
	uint32_t nr = __atomic_load_n(&ld->nr_files, __ATOMIC_ACQUIRE);
	struct ld_read *rd;
	struct ld_file *f;
	uint64_t end;
	bool kick;

	if (idx >= nr)
		return moem_errf(EBADF, "loader: file index %u was not added (%u file%s)", idx, nr,
				 nr == 1 ? "" : "s");
	f = &ld->files[idx];
	if (!len)
		return moem_errf(EINVAL, "%s: read of 0 bytes at offset %llu", f->path,
				 (unsigned long long)off);
	if (!dst)
		return moem_errf(EINVAL, "%s: read into a NULL destination", f->path);
	if (moem_add_overflow(off, len, &end) || end > INT64_MAX ||
	    moem_add_overflow((uintptr_t)dst, len, &end))
		return moem_errf(EOVERFLOW, "%s: read of %llu bytes at offset %llu into %p wraps",
				 f->path, (unsigned long long)len, (unsigned long long)off, dst);
	if (f->direct &&
	    (!moem_is_aligned(off, f->off_align) || !moem_is_aligned(len, f->off_align) ||
	     !moem_is_aligned((uintptr_t)dst, f->mem_align)))
		return moem_errf(EINVAL,
				 "%s: O_DIRECT read of %llu bytes at offset %llu into %p is not "
				 "aligned (offset and length must be multiples of %u, the "
				 "destination of %u); align the range or use no_direct",
				 f->path, (unsigned long long)len, (unsigned long long)off, dst,
				 f->off_align, f->mem_align);
	rd = calloc(1, sizeof(*rd));
	if (!rd)
		return -ENOMEM;
	rd->file = f;
	rd->off = off;
	rd->len = len;
	rd->dst = dst;
	rd->cb = cb;
	rd->arg = arg;

	pthread_mutex_lock(&ld->lock);
	if (ld->stopping) {
		pthread_mutex_unlock(&ld->lock);
		free(rd);
		return moem_errf(ESHUTDOWN, "%s: the loader is shutting down", f->path);
	}
	if (ld->outstanding++ == 0)
		ld->busy_start = moem_now_ns();
	kick = !ld->head;
	if (ld->tail)
		ld->tail->next = rd;
	else
		ld->head = rd;
	ld->tail = rd;
	pthread_mutex_unlock(&ld->lock);
	/* The engine's own thread picks up the queue on its next turn. */
	if (kick && moem_ld_current != ld)
		ld->eng->kick(ld);
	return 0;
}

int moem_loader_drain(struct moem_loader *ld)
{
	if (moem_ld_current == ld)
		return moem_errf(EDEADLK, "loader: drain called from a completion callback");
	pthread_mutex_lock(&ld->lock);
	while (ld->outstanding)
		pthread_cond_wait(&ld->idle, &ld->lock);
	pthread_mutex_unlock(&ld->lock);
	return 0;
}

void moem_ld_carve(struct moem_loader *ld, struct ld_read *rd, uint64_t *off, uint32_t *len,
		   uint8_t **dst, int *buf)
{
	uint64_t n = moem_min(rd->len - rd->carved, (uint64_t)ld->opts.req_size), room;
	uint8_t *d = rd->dst + rd->carved;

	*buf = ld->nr_fixbufs ? moem_ld_fixbuf_find(ld, (uintptr_t)d, &room) : -1;
	/* Cut at the piece's end so the rest can be READ_FIXED too; room is
	 * a multiple of 4 KiB (pieces are), so O_DIRECT alignment holds. */
	if (*buf >= 0 && room < n)
		n = room;
	*off = rd->off + rd->carved;
	*len = (uint32_t)n;
	*dst = d;
	rd->carved += n;
	rd->inflight++;
}

void moem_ld_read_fail(struct ld_read *rd, int err, const char *fmt, ...)
{
	va_list ap;

	if (rd->err)
		return;
	rd->err = -err;
	rd->msg = malloc(256);
	if (!rd->msg)
		return;
	va_start(ap, fmt);
	vsnprintf(rd->msg, 256, fmt, ap);
	va_end(ap);
}

uint64_t moem_ld_request_result(struct moem_loader *ld, struct ld_read *rd, uint64_t off,
				uint64_t want, int64_t res)
{
	struct ld_file *f = rd->file;
	struct stat st;

	if (res < 0) {
		moem_ld_read_fail(rd, (int)-res, "%s: read of %llu bytes at offset %llu failed: %s",
				  f->path, (unsigned long long)want, (unsigned long long)off,
				  strerror((int)-res));
		return 0;
	}
	__atomic_fetch_add(&ld->st_bytes, (uint64_t)res, __ATOMIC_RELAXED);
	if (f->direct)
		__atomic_fetch_add(&ld->st_direct_bytes, (uint64_t)res, __ATOMIC_RELAXED);
	if ((uint64_t)res == want)
		return 0;
	/* Short: a regular file only does this at its end. Reissue the rest
	 * unless nothing came back or O_DIRECT could not take the remainder. */
	if (res > 0 && moem_is_aligned((uint64_t)res, f->off_align))
		return want - (uint64_t)res;
	moem_ld_read_fail(
		rd, EIO, "%s: short read at offset %llu: %llu of %llu bytes (end of file at %lld)",
		f->path, (unsigned long long)off + (uint64_t)res, (unsigned long long)res,
		(unsigned long long)want, fstat(f->fd, &st) == 0 ? (long long)st.st_size : -1LL);
	return 0;
}

void moem_ld_read_finish(struct moem_loader *ld, struct ld_read *rd)
{
	int err = rd->err;

	if (err) {
		if (err == -ECANCELED)
			__atomic_fetch_add(&ld->st_cancelled, 1, __ATOMIC_RELAXED);
		else
			__atomic_fetch_add(&ld->st_errors, 1, __ATOMIC_RELAXED);
		/* The callback reads the message on this thread. */
		if (rd->msg)
			moem_errf(-err, "%s", rd->msg);
		else
			moem_errf(-err, "%s: read of %llu bytes at offset %llu: %s", rd->file->path,
				  (unsigned long long)rd->len, (unsigned long long)rd->off,
				  strerror(-err));
		if (err != -ECANCELED) {
			pthread_mutex_lock(&ld->lock);
			snprintf(ld->last_error, sizeof(ld->last_error), "%s", moem_last_error());
			pthread_mutex_unlock(&ld->lock);
		}
	}
	__atomic_fetch_add(&ld->st_reads, 1, __ATOMIC_RELAXED);
	if (rd->cb)
		rd->cb(rd->arg, err);
	free(rd->msg);
	free(rd);
	pthread_mutex_lock(&ld->lock);
	if (--ld->outstanding == 0) {
		ld->busy_ns += moem_now_ns() - ld->busy_start;
		pthread_cond_broadcast(&ld->idle);
	}
	pthread_mutex_unlock(&ld->lock);
}
