// SPDX-License-Identifier: GPL-2.0-only
/*
 * The io_uring engine: one ring and one thread that owns it. The thread
 * takes queued reads, keeps queue_depth requests in flight (READ_FIXED
 * into registered pieces, registered files), and runs callbacks as reads
 * complete. Callers wake it through an eventfd the ring itself reads, so a
 * single io_uring_submit_and_wait() both issues requests and sleeps until
 * either a request completes or new work arrives.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/util.h>

#include "loader_int.h"

/* The kernel's cap on registered buffers (IORING_MAX_REG_BUFFERS). */
#define UR_MAX_BUFS 16384

struct ur_req {
	struct ur_req *next; /* free list or retry list */
	struct ld_read *rd;
	uint8_t *dst;
	uint64_t off;
	uint32_t len;
	int buf; /* fixed-buffer index or -1 */
};

struct ur {
	struct io_uring ring;
	pthread_t thread;
	int efd;
	uint64_t efd_val; /* the eventfd read's destination */
	bool efd_armed;
	struct ur_req *reqs, *free, *retry, *retry_tail;
	uint32_t inflight;
	struct ld_read *q_head, *q_tail; /* reads taken from ld->head, being carved */
	uint32_t nr_registered;		 /* fixed buffers now registered */
};

static void ur_retry_push(struct ur *ur, struct ur_req *r)
{
	r->next = NULL;
	if (ur->retry_tail)
		ur->retry_tail->next = r;
	else
		ur->retry = r;
	ur->retry_tail = r;
}

static struct ur_req *ur_retry_pop(struct ur *ur)
{
	struct ur_req *r = ur->retry;

	if (r) {
		ur->retry = r->next;
		if (!ur->retry)
			ur->retry_tail = NULL;
	}
	return r;
}

static void ur_prep(struct moem_loader *ld, struct ur *ur, struct ur_req *r)
{
	struct ld_file *f = r->rd->file;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ur->ring);
	int fd = f->registered ? (int)(f - ld->files) : f->fd;

	if (!sqe) {
		/* Not reached: the SQ has room for queue_depth + the eventfd
		 * read and is submitted every turn. Flush and retry anyway. */
		io_uring_submit(&ur->ring);
		sqe = io_uring_get_sqe(&ur->ring);
	}
	if (r->buf >= 0)
		io_uring_prep_read_fixed(sqe, fd, r->dst, r->len, r->off, r->buf);
	else
		io_uring_prep_read(sqe, fd, r->dst, r->len, r->off);
	if (f->registered)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, r);
	ur->inflight++;
	__atomic_fetch_add(&ld->st_requests, 1, __ATOMIC_RELAXED);
	if (r->buf >= 0)
		__atomic_fetch_add(&ld->st_fixed_requests, 1, __ATOMIC_RELAXED);
}

/* Fill the SQ up to queue_depth: retries first, then the queued reads in order. */
static void ur_fill(struct moem_loader *ld, struct ur *ur)
{
	while (ur->inflight < ld->opts.queue_depth) {
		struct ur_req *r = ur_retry_pop(ur);
		struct ld_read *rd;

		if (!r) {
			rd = ur->q_head;
			if (!rd)
				break;
			r = ur->free;
			ur->free = r->next;
			r->rd = rd;
			moem_ld_carve(ld, rd, &r->off, &r->len, &r->dst, &r->buf);
			if (ld_read_carved(rd)) {
				ur->q_head = rd->next;
				if (!ur->q_head)
					ur->q_tail = NULL;
			}
		}
		ur_prep(ld, ur, r);
	}
}

/* A request of rd is over: drop the rest of a failed read, note a finished one. */
static void ur_req_done(struct ur *ur, struct ur_req *r, struct ld_read **done)
{
	struct ld_read *rd = r->rd;

	r->next = ur->free;
	ur->free = r;
	rd->inflight--;
	if (rd->err && !ld_read_carved(rd)) {
		/* Partly carved, so it heads the queue (see loader_int.h). */
		ur->q_head = rd->next;
		if (!ur->q_head)
			ur->q_tail = NULL;
		rd->carved = rd->len;
	}
	if (!rd->inflight && ld_read_carved(rd)) {
		rd->next = *done;
		*done = rd;
	}
}

static void ur_reap(struct moem_loader *ld, struct ur *ur)
{
	struct ld_read *done = NULL, *rd;
	struct io_uring_cqe *cqe;
	unsigned int head, n = 0;

	io_uring_for_each_cqe(&ur->ring, head, cqe)
	{
		struct ur_req *r = io_uring_cqe_get_data(cqe);
		uint64_t rest;

		n++;
		if ((void *)r == &ur->efd_val) {
			ur->efd_armed = false;
			continue;
		}
		ur->inflight--;
		if (cqe->res == -EAGAIN || cqe->res == -EINTR) {
			ur_retry_push(ur, r);
			continue;
		}
		rest = moem_ld_request_result(ld, r->rd, r->off, r->len, cqe->res);
		if (rest) {
			uint32_t got = r->len - (uint32_t)rest;

			r->off += got;
			r->dst += got;
			r->len = (uint32_t)rest;
			ur_retry_push(ur, r);
			continue;
		}
		ur_req_done(ur, r, &done);
	}
	io_uring_cq_advance(&ur->ring, n);
	/* Callbacks after the CQ is advanced: they may queue more reads. */
	while ((rd = done)) {
		done = rd->next;
		moem_ld_read_finish(ld, rd);
	}
}

/* Stopping: nothing more is carved; reads with nothing in flight finish now. */
static void ur_cancel_queued(struct moem_loader *ld, struct ur *ur)
{
	struct ld_read *rd;

	while ((rd = ur->q_head)) {
		ur->q_head = rd->next;
		moem_ld_read_fail(rd, ECANCELED,
				  "%s: read of %llu bytes at offset %llu cancelled: the loader is "
				  "shutting down",
				  rd->file->path, (unsigned long long)rd->len,
				  (unsigned long long)rd->off);
		rd->carved = rd->len;
		if (!rd->inflight)
			moem_ld_read_finish(ld, rd);
	}
	ur->q_tail = NULL;
}

static void *ur_thread(void *arg)
{
	struct moem_loader *ld = arg;
	struct ur *ur = ld->priv;

	moem_ld_current = ld;
	for (;;) {
		struct io_uring_sqe *sqe;
		bool stop;
		int ret;

		pthread_mutex_lock(&ld->lock);
		if (ld->head) {
			if (ur->q_tail)
				ur->q_tail->next = ld->head;
			else
				ur->q_head = ld->head;
			ur->q_tail = ld->tail;
			ld->head = ld->tail = NULL;
		}
		stop = ld->stopping;
		pthread_mutex_unlock(&ld->lock);
		if (stop)
			ur_cancel_queued(ld, ur);
		ur_fill(ld, ur);
		if (stop && !ur->inflight && !ur->retry)
			break;
		if (!ur->efd_armed && !stop) {
			sqe = io_uring_get_sqe(&ur->ring);
			if (sqe) {
				io_uring_prep_read(sqe, ur->efd, &ur->efd_val, sizeof(ur->efd_val),
						   0);
				io_uring_sqe_set_data(sqe, &ur->efd_val);
				ur->efd_armed = true;
			}
		}
		ret = io_uring_submit_and_wait(&ur->ring, 1);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
			pthread_mutex_lock(&ld->lock);
			snprintf(ld->last_error, sizeof(ld->last_error), "io_uring_enter: %s",
				 strerror(-ret));
			pthread_mutex_unlock(&ld->lock);
			usleep(1000); /* do not spin on a persistent error */
		}
		ur_reap(ld, ur);
	}
	return NULL;
}

static int ur_init_error(int err)
{
	const char *hint = "";
	char buf[64] = "";
	FILE *f;
	int v;

	if (err == ENOSYS) {
		hint = " (kernel built without io_uring)";
	} else if (err == EPERM) {
		f = fopen("/proc/sys/kernel/io_uring_disabled", "r");
		if (f && fscanf(f, "%d", &v) == 1 && v) {
			snprintf(buf, sizeof(buf), " (kernel.io_uring_disabled=%d)", v);
			hint = buf;
		} else {
			hint = " (seccomp or container policy)";
		}
		if (f)
			fclose(f);
	}
	return moem_errf(err, "io_uring_queue_init: %s%s", strerror(err), hint);
}

static int ur_start(struct moem_loader *ld)
{
	struct io_uring_probe *probe;
	struct ur *ur;
	int ret;

	ur = calloc(1, sizeof(*ur));
	if (!ur)
		return -ENOMEM;
	ur->reqs = calloc(ld->opts.queue_depth, sizeof(*ur->reqs));
	if (!ur->reqs) {
		ret = -ENOMEM;
		goto err_ur;
	}
	for (uint32_t i = 0; i < ld->opts.queue_depth; i++) {
		ur->reqs[i].next = ur->free;
		ur->free = &ur->reqs[i];
	}
	ur->efd = eventfd(0, EFD_CLOEXEC);
	if (ur->efd < 0) {
		ret = moem_errf(errno, "loader: eventfd: %s", strerror(errno));
		goto err_reqs;
	}
	/* Room for every request plus the eventfd read. */
	ret = io_uring_queue_init(ld->opts.queue_depth + 1, &ur->ring, 0);
	if (ret < 0) {
		ret = ur_init_error(-ret);
		goto err_efd;
	}
	probe = io_uring_get_probe_ring(&ur->ring);
	if (!probe || !io_uring_opcode_supported(probe, IORING_OP_READ) ||
	    !io_uring_opcode_supported(probe, IORING_OP_READ_FIXED)) {
		ret = moem_errf(EOPNOTSUPP, "io_uring without IORING_OP_READ (kernel older "
					    "than 5.6)");
		io_uring_free_probe(probe);
		goto err_ring;
	}
	io_uring_free_probe(probe);
	if (ld->opts.no_registered_files) {
		moem_ld_why_add(ld, "registered files off (no_registered_files)");
	} else {
		ret = io_uring_register_files_sparse(&ur->ring, ld->opts.max_files);
		if (ret < 0)
			moem_ld_why_add(ld, "registered files refused (%s): plain fds",
					strerror(-ret));
		else
			ld->registered_files = true;
	}
	/* No io_uring_register_ring_fd(): the registration is per thread, and
	 * registrations from callers' threads would then miss the ring. */
	ld->priv = ur;
	ret = pthread_create(&ur->thread, NULL, ur_thread, ld);
	if (ret) {
		ret = moem_errf(ret, "loader: cannot start the io_uring thread: %s", strerror(ret));
		ld->priv = NULL;
		ld->registered_files = false;
		goto err_ring;
	}
	return 0;

err_ring:
	io_uring_queue_exit(&ur->ring);
err_efd:
	close(ur->efd);
err_reqs:
	free(ur->reqs);
err_ur:
	free(ur);
	return ret;
}

static void ur_kick(struct moem_loader *ld)
{
	struct ur *ur = ld->priv;
	uint64_t one = 1;

	/* Cannot fail short of a counter overflow; a lost wake would only
	 * matter if the thread were asleep with an empty ring. */
	if (write(ur->efd, &one, sizeof(one)) < 0) {
	}
}

static void ur_stop(struct moem_loader *ld)
{
	struct ur *ur = ld->priv;

	ur_kick(ld);
	pthread_join(ur->thread, NULL);
	/* Ring teardown is asynchronous in the kernel: unregister first so
	 * the files are closed and the pages unpinned when destroy returns
	 * (a pool can then be unmapped, a file system unmounted). */
	if (ld->registered_files)
		io_uring_unregister_files(&ur->ring);
	if (ur->nr_registered)
		io_uring_unregister_buffers(&ur->ring);
	/* Tears down the still-armed eventfd read with the ring. */
	io_uring_queue_exit(&ur->ring);
	close(ur->efd);
	free(ur->reqs);
	free(ur);
	ld->priv = NULL;
}

static void ur_add_file(struct moem_loader *ld, uint32_t idx)
{
	struct ur *ur = ld->priv;
	struct ld_file *f = &ld->files[idx];
	int ret;

	if (!ld->registered_files)
		return;
	ret = io_uring_register_files_update(&ur->ring, idx, &f->fd, 1);
	if (ret == 1)
		f->registered = true;
	else
		moem_ld_why_add(ld, "%s: not a registered file (%s)", f->path,
				strerror(ret < 0 ? -ret : EIO));
}

static int ur_register(struct ur *ur, const struct ld_region *regions, uint32_t nr,
		       uint64_t piece_max, bool with_new, struct iovec **iovp, uint32_t *np)
{
	struct iovec *iov = NULL;
	uint32_t n = 0;
	int ret;

	for (uint32_t i = 0; i < nr; i++) {
		const struct ld_region *r = &regions[i];
		struct iovec *t;

		if (!r->fixed && !with_new)
			continue;
		ret = moem_loader_plan_pieces((void *)r->base, r->len, piece_max, NULL, 0);
		if (ret < 0 || n + (uint32_t)ret > UR_MAX_BUFS) {
			free(iov);
			return -E2BIG;
		}
		t = realloc(iov, (n + (uint32_t)ret) * sizeof(*iov));
		if (!t) {
			free(iov);
			return -ENOMEM;
		}
		iov = t;
		moem_loader_plan_pieces((void *)r->base, r->len, piece_max, iov + n, (unsigned)ret);
		n += (uint32_t)ret;
	}
	if (ur->nr_registered) {
		io_uring_unregister_buffers(&ur->ring);
		ur->nr_registered = 0;
	}
	ret = n ? io_uring_register_buffers(&ur->ring, iov, n) : 0;
	if (ret < 0) {
		free(iov);
		return ret;
	}
	ur->nr_registered = n;
	*iovp = iov;
	*np = n;
	return 0;
}

static const char *ur_refusal_hint(int err)
{
	switch (err) {
	case ENOMEM:
		return ": RLIMIT_MEMLOCK too low, or out of memory";
	case EOPNOTSUPP:
	case EFAULT:
		return ": memory the kernel cannot pin long-term";
	case E2BIG:
		return ": more than 16384 pieces";
	default:
		return "";
	}
}

static void ur_set_memory(struct moem_loader *ld)
{
	struct ur *ur = ld->priv;
	struct iovec *iov = NULL;
	uint32_t n = 0;
	int ret;

	if (ld->opts.no_fixed_buffers) {
		if (!strstr(ld->why, "no_fixed_buffers"))
			moem_ld_why_add(ld, "fixed buffers off (no_fixed_buffers)");
		return;
	}
	ret = ur_register(ur, ld->regions, ld->nr_regions, ld->opts.piece_max, true, &iov, &n);
	if (ret < 0) {
		moem_ld_why_add(ld, "fixed buffers refused (%s%s): plain reads into the new memory",
				strerror(-ret), ur_refusal_hint(-ret));
		/* Put back what was registered before this region came. */
		ret = ur_register(ur, ld->regions, ld->nr_regions, ld->opts.piece_max, false, &iov,
				  &n);
		if (ret < 0) {
			moem_ld_why_add(ld, "fixed buffers lost on re-registration (%s)",
					strerror(-ret));
			n = 0;
		}
	} else {
		for (uint32_t i = 0; i < ld->nr_regions; i++)
			ld->regions[i].fixed = true;
	}
	if (n == 0) {
		for (uint32_t i = 0; i < ld->nr_regions; i++)
			ld->regions[i].fixed = false;
	}
	free(ld->fixbufs);
	ld->fixbufs = NULL;
	ld->nr_fixbufs = 0;
	ld->fixed_bytes = 0;
	if (n) {
		ld->fixbufs = malloc(n * sizeof(*ld->fixbufs));
		if (!ld->fixbufs) {
			/* Registered but not looked up: every read goes plain. */
			moem_ld_why_add(ld, "fixed buffers unused (out of memory for the table)");
			free(iov);
			return;
		}
		for (uint32_t i = 0; i < n; i++) {
			ld->fixbufs[i].base = (uintptr_t)iov[i].iov_base;
			ld->fixbufs[i].len = iov[i].iov_len;
			ld->fixed_bytes += iov[i].iov_len;
		}
		ld->nr_fixbufs = n;
	}
	free(iov);
}

const struct ld_engine moem_ld_uring_engine = {
	.name = "io_uring",
	.start = ur_start,
	.kick = ur_kick,
	.stop = ur_stop,
	.add_file = ur_add_file,
	.set_memory = ur_set_memory,
};
