// SPDX-License-Identifier: GPL-2.0-only
/* What the loader did and by which path (moem_loader_get_stats()). */
#include <stdio.h>
#include <string.h>

#include <moem/loader.h>
#include <moem/util.h>

#include "loader_int.h"

/* "O_DIRECT", "buffered", or a mix when files differ; "O_DIRECT" before any file. */
static void io_mode(const struct moem_loader_stats *st, bool want_direct, char *buf, size_t len)
{
	uint32_t buffered = st->files - st->direct_files;

	if (!st->files)
		snprintf(buf, len, "%s", want_direct ? "O_DIRECT" : "buffered");
	else if (!buffered)
		snprintf(buf, len, "O_DIRECT");
	else if (!st->direct_files)
		snprintf(buf, len, "buffered");
	else
		snprintf(buf, len, "O_DIRECT (%u file%s) + buffered (%u file%s)", st->direct_files,
			 st->direct_files == 1 ? "" : "s", buffered, buffered == 1 ? "" : "s");
}

void moem_loader_get_stats(struct moem_loader *ld, struct moem_loader_stats *st)
{
	bool want_direct = !ld->opts.no_direct && ld->opts.mode != MOEM_LOADER_BUFFERED;
	uint32_t nr = __atomic_load_n(&ld->nr_files, __ATOMIC_ACQUIRE), reg = 0;
	char mode[96];

	memset(st, 0, sizeof(*st));
	st->engine = ld->eng == &moem_ld_uring_engine ? MOEM_LOADER_ENGINE_URING
						      : MOEM_LOADER_ENGINE_PREAD;
	st->queue_depth = ld->opts.queue_depth;
	st->req_size = ld->opts.req_size;
	st->threads = ld->opts.threads;
	st->files = nr;
	for (uint32_t i = 0; i < nr; i++) {
		st->direct_files += ld->files[i].direct;
		reg += ld->files[i].registered;
	}
	st->registered_files = ld->registered_files && (reg == nr);
	st->reads = __atomic_load_n(&ld->st_reads, __ATOMIC_RELAXED);
	st->requests = __atomic_load_n(&ld->st_requests, __ATOMIC_RELAXED);
	st->fixed_requests = __atomic_load_n(&ld->st_fixed_requests, __ATOMIC_RELAXED);
	st->bytes = __atomic_load_n(&ld->st_bytes, __ATOMIC_RELAXED);
	st->direct_bytes = __atomic_load_n(&ld->st_direct_bytes, __ATOMIC_RELAXED);
	st->errors = __atomic_load_n(&ld->st_errors, __ATOMIC_RELAXED);
	st->cancelled = __atomic_load_n(&ld->st_cancelled, __ATOMIC_RELAXED);

	pthread_mutex_lock(&ld->lock);
	st->fixed_pieces = ld->nr_fixbufs;
	st->fixed_bytes = ld->fixed_bytes;
	st->fixed_buffers = ld->nr_fixbufs > 0;
	st->busy_ns = ld->busy_ns;
	if (ld->outstanding)
		st->busy_ns += moem_now_ns() - ld->busy_start;
	snprintf(st->why, sizeof(st->why), "%s", ld->why);
	snprintf(st->last_error, sizeof(st->last_error), "%s", ld->last_error);
	pthread_mutex_unlock(&ld->lock);

	io_mode(st, want_direct, mode, sizeof(mode));
	if (st->engine == MOEM_LOADER_ENGINE_URING)
		snprintf(st->path, sizeof(st->path), "io_uring%s%s, %s",
			 st->fixed_buffers ? " + fixed buffers" : "",
			 st->registered_files ? " + registered file" : "", mode);
	else if (st->direct_files || !st->files)
		snprintf(st->path, sizeof(st->path), "pread x%u threads, %s", st->threads, mode);
	else
		snprintf(st->path, sizeof(st->path), "buffered pread x%u threads", st->threads);
}

char *moem_loader_format_stats(const struct moem_loader_stats *st, char *buf, size_t len)
{
	double secs = (double)st->busy_ns / 1e9;
	char b1[32], b2[32], b3[32], b4[32], set[96];
	int n;

	if (st->engine == MOEM_LOADER_ENGINE_URING)
		snprintf(set, sizeof(set), "queue depth %u", st->queue_depth);
	else
		snprintf(set, sizeof(set), "%u threads", st->threads);
	n = snprintf(buf, len,
		     "path:      %s\n"
		     "why:       %s\n"
		     "settings:  %s, requests of %s\n"
		     "fixed:     %u piece%s, %s registered; %llu of %llu requests READ_FIXED\n"
		     "reads:     %llu done (%llu failed, %llu cancelled), %llu requests\n"
		     "bytes:     %s (%s O_DIRECT) in %.3f s busy = %.2f GB/s\n",
		     st->path, st->why[0] ? st->why : "-", set,
		     moem_fmt_bytes(st->req_size, b1, sizeof(b1)), st->fixed_pieces,
		     st->fixed_pieces == 1 ? "" : "s",
		     moem_fmt_bytes(st->fixed_bytes, b2, sizeof(b2)),
		     (unsigned long long)st->fixed_requests, (unsigned long long)st->requests,
		     (unsigned long long)st->reads, (unsigned long long)st->errors,
		     (unsigned long long)st->cancelled, (unsigned long long)st->requests,
		     moem_fmt_bytes(st->bytes, b3, sizeof(b3)),
		     moem_fmt_bytes(st->direct_bytes, b4, sizeof(b4)), secs,
		     secs > 0 ? (double)st->bytes / secs / 1e9 : 0.0);
	if (st->last_error[0] && n >= 0 && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n, "last error: %s\n", st->last_error);
	return buf;
}
