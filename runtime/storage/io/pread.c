// SPDX-License-Identifier: GPL-2.0-only
/*
 * The pread engine: a pool of threads, each taking the next request of
 * the read at the head of the loader's queue and issuing pread(2). Used
 * when io_uring is refused, and for buffered reads on request. The
 * thread that completes a read's last request runs its callback.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/util.h>

#include "loader_int.h"

struct pr {
	pthread_t *threads;
	uint32_t nr_threads;
	pthread_cond_t work; /* the queue got reads, or stopping */
};

/* Read want bytes fully unless the file ends or fails; returns bytes or -errno. */
static int64_t pr_read(int fd, uint8_t *dst, uint64_t want, uint64_t off, bool direct,
		       uint32_t off_align)
{
	uint64_t got = 0;

	while (got < want) {
		ssize_t n = pread(fd, dst + got, want - got, (off_t)(off + got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return got ? (int64_t)got : -errno;
		if (n == 0)
			break;
		got += (uint64_t)n;
		/* O_DIRECT cannot continue from an unaligned point: the file ended. */
		if (direct && !moem_is_aligned(got, off_align))
			break;
	}
	return (int64_t)got;
}

/* Stopping: drop every read not yet handed out (ld->lock held). */
static void pr_cancel_queued(struct moem_loader *ld, struct ld_read **done)
{
	struct ld_read *rd;

	while ((rd = ld->head)) {
		ld->head = rd->next;
		moem_ld_read_fail(rd, ECANCELED,
				  "%s: read of %llu bytes at offset %llu cancelled: the loader is "
				  "shutting down",
				  rd->file->path, (unsigned long long)rd->len,
				  (unsigned long long)rd->off);
		rd->carved = rd->len;
		if (!rd->inflight) {
			rd->next = *done;
			*done = rd;
		}
	}
	ld->tail = NULL;
}

static void *pr_thread(void *arg)
{
	struct moem_loader *ld = arg;
	struct pr *pr = ld->priv;

	moem_ld_current = ld;
	pthread_mutex_lock(&ld->lock);
	for (;;) {
		struct ld_read *rd, *done = NULL;
		uint64_t off, rest;
		uint32_t len;
		uint8_t *dst;
		int64_t res;
		int buf;

		while (!ld->head && !ld->stopping)
			pthread_cond_wait(&pr->work, &ld->lock);
		if (ld->stopping) {
			pr_cancel_queued(ld, &done);
			pthread_mutex_unlock(&ld->lock);
			while ((rd = done)) {
				done = rd->next;
				moem_ld_read_finish(ld, rd);
			}
			return NULL;
		}
		rd = ld->head;
		moem_ld_carve(ld, rd, &off, &len, &dst, &buf);
		if (ld_read_carved(rd)) {
			ld->head = rd->next;
			if (!ld->head)
				ld->tail = NULL;
		}
		/* More work than this thread takes: wake another worker. */
		if (ld->head)
			pthread_cond_signal(&pr->work);
		pthread_mutex_unlock(&ld->lock);

		do {
			__atomic_fetch_add(&ld->st_requests, 1, __ATOMIC_RELAXED);
			res = pr_read(rd->file->fd, dst, len, off, rd->file->direct,
				      rd->file->off_align);
			rest = moem_ld_request_result(ld, rd, off, len, res);
			if (rest) {
				off += len - rest;
				dst += len - rest;
				len = (uint32_t)rest;
			}
		} while (rest);

		pthread_mutex_lock(&ld->lock);
		rd->inflight--;
		if (rd->err && !ld_read_carved(rd)) {
			/* Partly carved, so it heads the queue (see loader_int.h). */
			ld->head = rd->next;
			if (!ld->head)
				ld->tail = NULL;
			rd->carved = rd->len;
		}
		if (!rd->inflight && ld_read_carved(rd)) {
			pthread_mutex_unlock(&ld->lock);
			moem_ld_read_finish(ld, rd);
			pthread_mutex_lock(&ld->lock);
		}
	}
}

static int pr_start(struct moem_loader *ld)
{
	struct pr *pr;
	int ret;

	pr = calloc(1, sizeof(*pr));
	if (!pr)
		return -ENOMEM;
	pr->threads = calloc(ld->opts.threads, sizeof(*pr->threads));
	if (!pr->threads) {
		free(pr);
		return -ENOMEM;
	}
	pthread_cond_init(&pr->work, NULL);
	ld->priv = pr;
	for (uint32_t i = 0; i < ld->opts.threads; i++) {
		ret = pthread_create(&pr->threads[i], NULL, pr_thread, ld);
		if (ret) {
			pthread_mutex_lock(&ld->lock);
			ld->stopping = true;
			pthread_cond_broadcast(&pr->work);
			pthread_mutex_unlock(&ld->lock);
			for (uint32_t j = 0; j < i; j++)
				pthread_join(pr->threads[j], NULL);
			pthread_cond_destroy(&pr->work);
			free(pr->threads);
			free(pr);
			ld->priv = NULL;
			ld->stopping = false;
			return moem_errf(ret, "loader: cannot start pread thread %u: %s", i,
					 strerror(ret));
		}
		pr->nr_threads++;
	}
	return 0;
}

static void pr_kick(struct moem_loader *ld)
{
	struct pr *pr = ld->priv;

	pthread_mutex_lock(&ld->lock);
	pthread_cond_signal(&pr->work);
	pthread_mutex_unlock(&ld->lock);
}

static void pr_stop(struct moem_loader *ld)
{
	struct pr *pr = ld->priv;

	pthread_mutex_lock(&ld->lock);
	pthread_cond_broadcast(&pr->work);
	pthread_mutex_unlock(&ld->lock);
	for (uint32_t i = 0; i < pr->nr_threads; i++)
		pthread_join(pr->threads[i], NULL);
	pthread_cond_destroy(&pr->work);
	free(pr->threads);
	free(pr);
	ld->priv = NULL;
}

static void pr_add_file(struct moem_loader *ld, uint32_t idx)
{
}

static void pr_set_memory(struct moem_loader *ld)
{
}

const struct ld_engine moem_ld_pread_engine = {
	.name = "pread",
	.start = pr_start,
	.kick = pr_kick,
	.stop = pr_stop,
	.add_file = pr_add_file,
	.set_memory = pr_set_memory,
};
