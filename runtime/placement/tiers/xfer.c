// SPDX-License-Identifier: GPL-2.0-only
/*
 * Transfer engine (xfer.h). One thread: issue pieces from the highest
 * non-empty priority queue while fewer than max_inflight are on the copy
 * engine, then block on the oldest piece. Done callbacks run on this
 * thread without the lock, after the request's last piece completed.
 * A piece that fails (to issue or to complete) makes the engine fail:
 * every request not done yet is finished with that error, never left
 * waiting.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/util.h>
#include <moem/xfer.h>

struct inflight {
	struct moem_xfer_req *req;
	uint64_t seq, bytes;
};

struct moem_xfer {
	struct moem_tierdev *dev;
	struct moem_xfer_opts o;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* work arrived / went idle / stop */
	struct moem_xfer_req *head[MOEM_PRIO_NR], *tail[MOEM_PRIO_NR];
	struct inflight *fl; /* ring of max_inflight */
	uint32_t fl_head, fl_count;
	uint64_t outstanding; /* requests submitted and not done */
	double bw;
	struct moem_xfer_stats st;
	int failed;    /* sticky: a piece failed */
	char why[256]; /* its message (moem_last_error() where it failed) */
	int stop;
};

static void q_remove(struct moem_xfer *x, struct moem_xfer_req *r)
{
	enum moem_prio p = r->prio;

	if (r->prev)
		r->prev->next = r->next;
	else
		x->head[p] = r->next;
	if (r->next)
		r->next->prev = r->prev;
	else
		x->tail[p] = r->prev;
	r->prev = r->next = NULL;
	r->queued = 0;
}

static void q_append(struct moem_xfer *x, struct moem_xfer_req *r)
{
	enum moem_prio p = r->prio;

	r->next = NULL;
	r->prev = x->tail[p];
	if (x->tail[p])
		x->tail[p]->next = r;
	else
		x->head[p] = r;
	x->tail[p] = r;
	r->queued = 1;
}

static struct moem_xfer_req *q_first(struct moem_xfer *x)
{
	for (int p = 0; p < MOEM_PRIO_NR; p++)
		if (x->head[p])
			return x->head[p];
	return NULL;
}

/* The first failure, with its message; lock held. */
static void set_failed(struct moem_xfer *x, int err)
{
	if (!err || x->failed)
		return;
	x->failed = err;
	snprintf(x->why, sizeof(x->why), "%s", moem_last_error());
}

/* Issue pieces while there is room; called with the lock held. */
static int issue(struct moem_xfer *x)
{
	struct moem_xfer_req *r;

	/* After a failed piece nothing more is issued: the thread fails
	 * what is queued once the copy engine is empty. */
	if (x->failed)
		return 0;
	while (x->fl_count < x->o.max_inflight && (r = q_first(x))) {
		uint64_t n = moem_min(x->o.piece_bytes, r->bytes - r->issued), seq;
		struct inflight *f;
		int ret;

		/* Only the first piece waits for the slot's last reader; the
		 * copy engine is FIFO, so later pieces are behind it anyway. */
		ret = x->dev->ops->copy(x->dev, r->dst + r->issued,
					(const char *)r->src + r->issued, n,
					r->issued ? 0 : r->wait_compute, &seq);
		if (ret)
			return ret;
		if (!r->issued) {
			r->t_first_issue = moem_now_ns();
			x->st.queue_ns[r->prio] += r->t_first_issue - r->t_submit;
		}
		r->issued += n;
		if (r->issued == r->bytes)
			q_remove(x, r);
		f = &x->fl[(x->fl_head + x->fl_count) % x->o.max_inflight];
		f->req = r;
		f->seq = seq;
		f->bytes = n;
		x->fl_count++;
		x->st.pieces++;
	}
	return 0;
}

static void *xfer_thread(void *arg)
{
	struct moem_xfer *x = arg;

	pthread_mutex_lock(&x->lock);
	for (;;) {
		struct inflight f;
		uint64_t ns;
		int ret;

		set_failed(x, issue(x));
		if (!x->fl_count) {
			struct moem_xfer_req *r = x->failed ? q_first(x) : NULL;

			/* A failed copy: every request not yet done ends with
			 * the error (none has a piece in flight now), so no
			 * waiter is left waiting for bytes that never come. */
			if (r) {
				int err = x->failed;

				q_remove(x, r);
				pthread_mutex_unlock(&x->lock);
				r->done(r, err);
				pthread_mutex_lock(&x->lock);
				x->outstanding--;
				pthread_cond_broadcast(&x->cond);
				continue;
			}
			if (x->stop && !q_first(x))
				break;
			pthread_cond_broadcast(&x->cond); /* idle: wake drainers */
			pthread_cond_wait(&x->cond, &x->lock);
			continue;
		}
		f = x->fl[x->fl_head];
		pthread_mutex_unlock(&x->lock);
		ret = x->dev->ops->copy_wait(x->dev, f.seq);
		ns = x->dev->ops->copy_ns(x->dev, f.seq);
		pthread_mutex_lock(&x->lock);
		x->fl_head = (x->fl_head + 1) % x->o.max_inflight;
		x->fl_count--;
		set_failed(x, ret);
		if (ns) {
			double sample = (double)f.bytes / ((double)ns * 1e-9);

			x->bw = x->o.ewma_alpha * sample + (1 - x->o.ewma_alpha) * x->bw;
			x->st.busy_ns += ns;
		}
		f.req->completed += f.bytes;
		if (f.req->completed == f.req->bytes) {
			struct moem_xfer_req *r = f.req;

			x->st.bytes[r->prio] += r->bytes;
			x->st.requests[r->prio]++;
			pthread_mutex_unlock(&x->lock);
			r->done(r, ret ? ret : x->failed);
			pthread_mutex_lock(&x->lock);
			x->outstanding--;
			pthread_cond_broadcast(&x->cond);
		}
	}
	pthread_mutex_unlock(&x->lock);
	return NULL;
}

int moem_xfer_create(struct moem_tierdev *dev, const struct moem_xfer_opts *o,
		     struct moem_xfer **out)
{
	struct moem_xfer *x = calloc(1, sizeof(*x));
	int ret;

	if (!x)
		return -ENOMEM;
	x->dev = dev;
	x->o.piece_bytes = o && o->piece_bytes ? o->piece_bytes : 8 * MOEM_MiB;
	x->o.max_inflight = o && o->max_inflight ? o->max_inflight : 2;
	x->o.ewma_alpha = o && o->ewma_alpha > 0 ? o->ewma_alpha : 0.2;
	x->o.initial_bw = o && o->initial_bw > 0 ? o->initial_bw : 16e9;
	if (x->o.max_inflight > 64 || x->o.ewma_alpha > 1 || x->o.piece_bytes < 4096) {
		free(x);
		return moem_errf(EINVAL, "xfer: bad options");
	}
	x->bw = x->o.initial_bw;
	x->fl = calloc(x->o.max_inflight, sizeof(*x->fl));
	if (!x->fl) {
		free(x);
		return -ENOMEM;
	}
	pthread_mutex_init(&x->lock, NULL);
	pthread_cond_init(&x->cond, NULL);
	ret = pthread_create(&x->thread, NULL, xfer_thread, x);
	if (ret) {
		pthread_mutex_destroy(&x->lock);
		pthread_cond_destroy(&x->cond);
		free(x->fl);
		free(x);
		return moem_errf(ret, "xfer: thread: %s", strerror(ret));
	}
	*out = x;
	return 0;
}

void moem_xfer_destroy(struct moem_xfer *x)
{
	if (!x)
		return;
	pthread_mutex_lock(&x->lock);
	x->stop = 1;
	pthread_cond_broadcast(&x->cond);
	pthread_mutex_unlock(&x->lock);
	pthread_join(x->thread, NULL);
	pthread_mutex_destroy(&x->lock);
	pthread_cond_destroy(&x->cond);
	free(x->fl);
	free(x);
}

int moem_xfer_submit(struct moem_xfer *x, struct moem_xfer_req *r)
{
	if (!r->bytes || (unsigned int)r->prio >= MOEM_PRIO_NR || !r->done)
		return -EINVAL;
	r->issued = r->completed = 0;
	r->t_submit = moem_now_ns();
	pthread_mutex_lock(&x->lock);
	if (x->stop) {
		pthread_mutex_unlock(&x->lock);
		return -ESHUTDOWN;
	}
	q_append(x, r);
	x->outstanding++;
	/* Issue right away if the copy engine has room: the thread may be
	 * blocked on an older piece and would leave the link idle. */
	set_failed(x, issue(x));
	pthread_cond_broadcast(&x->cond);
	pthread_mutex_unlock(&x->lock);
	return 0;
}

void moem_xfer_raise(struct moem_xfer *x, struct moem_xfer_req *r, enum moem_prio prio)
{
	pthread_mutex_lock(&x->lock);
	if (r->queued && prio < r->prio) {
		q_remove(x, r);
		r->prio = prio;
		q_append(x, r);
	}
	pthread_mutex_unlock(&x->lock);
}

int moem_xfer_cancel(struct moem_xfer *x, struct moem_xfer_req *r)
{
	int ret = -EBUSY;

	pthread_mutex_lock(&x->lock);
	if (r->queued && !r->issued) {
		q_remove(x, r);
		x->outstanding--;
		pthread_cond_broadcast(&x->cond);
		ret = 0;
	}
	pthread_mutex_unlock(&x->lock);
	return ret;
}

void moem_xfer_drain(struct moem_xfer *x)
{
	pthread_mutex_lock(&x->lock);
	while (x->outstanding)
		pthread_cond_wait(&x->cond, &x->lock);
	pthread_mutex_unlock(&x->lock);
}

int moem_xfer_failure(struct moem_xfer *x, char *why, size_t n)
{
	int ret;

	pthread_mutex_lock(&x->lock);
	ret = x->failed;
	if (n)
		snprintf(why, n, "%s", ret ? x->why : "");
	pthread_mutex_unlock(&x->lock);
	return ret;
}

double moem_xfer_bandwidth(struct moem_xfer *x)
{
	double bw;

	pthread_mutex_lock(&x->lock);
	bw = x->bw;
	pthread_mutex_unlock(&x->lock);
	return bw;
}

void moem_xfer_get_stats(struct moem_xfer *x, struct moem_xfer_stats *s)
{
	pthread_mutex_lock(&x->lock);
	*s = x->st;
	pthread_mutex_unlock(&x->lock);
}
