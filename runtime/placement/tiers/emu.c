// SPDX-License-Identifier: GPL-2.0-only
/*
 * The emulated tier device (tierdev.h): host memory behind the same VMM,
 * copy-engine and timeline interface as the CUDA one, with a modelled
 * PCIe link, so the tier state machine, the transfer engine and every
 * policy run in CI without a GPU. Unmapped chunks are PROT_NONE: a read of
 * an expert slot that is not backed faults, like an illegal address would.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <moem/error.h>
#include <moem/tierdev.h>
#include <moem/util.h>

struct emu_piece {
	moem_dptr dst;
	const void *src;
	uint64_t bytes, seq, wait;
	struct emu_piece *next;
};

struct emu_dev {
	struct moem_tierdev dev;
	struct moem_emu_opts o;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* new piece, or a piece done, or stop */
	struct emu_piece *head, *tail;
	uint64_t copy_issued, copy_completed;
	uint64_t *piece_ns; /* ring of recent piece times */
	uint32_t ns_ring;
	uint64_t compute_seq, compute_fin; /* marked, completed (manual mode) */
	bool stop;
};

#define EMU_NS_RING 4096

static struct emu_dev *to_emu(struct moem_tierdev *d)
{
	return (struct emu_dev *)d;
}

static uint64_t emu_granularity(struct moem_tierdev *d)
{
	return to_emu(d)->o.granularity;
}

static int emu_reserve(struct moem_tierdev *d, uint64_t bytes, moem_dptr *base)
{
	void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
		return moem_errf(errno, "emulated HBM: reserve %llu bytes: %s",
				 (unsigned long long)bytes, strerror(errno));
	*base = (uintptr_t)p;
	return 0;
}

static void emu_unreserve(struct moem_tierdev *d, moem_dptr base, uint64_t bytes)
{
	munmap((void *)(uintptr_t)base, bytes);
}

static int emu_map(struct moem_tierdev *d, moem_dptr addr, uint64_t bytes)
{
	if (mprotect((void *)(uintptr_t)addr, bytes, PROT_READ | PROT_WRITE) < 0)
		return moem_errf(errno, "emulated HBM: map: %s", strerror(errno));
	return 0;
}

static int emu_unmap(struct moem_tierdev *d, moem_dptr addr, uint64_t bytes)
{
	/* Give the memory back and make stale reads fault. */
	madvise((void *)(uintptr_t)addr, bytes, MADV_DONTNEED);
	if (mprotect((void *)(uintptr_t)addr, bytes, PROT_NONE) < 0)
		return moem_errf(errno, "emulated HBM: unmap: %s", strerror(errno));
	return 0;
}

static int emu_host_register(struct moem_tierdev *d, void *p, uint64_t bytes)
{
	return 0;
}

static void emu_host_unregister(struct moem_tierdev *d, void *p)
{
}

static void sleep_until(uint64_t t_ns)
{
	struct timespec ts = {(time_t)(t_ns / 1000000000ULL), (long)(t_ns % 1000000000ULL)};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static void *emu_copy_thread(void *arg)
{
	struct emu_dev *e = arg;

	pthread_mutex_lock(&e->lock);
	for (;;) {
		struct emu_piece *p;
		uint64_t t0, model_ns;

		while (!e->head && !e->stop)
			pthread_cond_wait(&e->cond, &e->lock);
		if (!e->head)
			break;
		p = e->head;
		e->head = p->next;
		if (!e->head)
			e->tail = NULL;
		pthread_mutex_unlock(&e->lock);
		/* The copy engine starts the piece only once the compute timeline
		 * passed the slot's last reader. Marks complete when made (the
		 * CPU backend is synchronous) unless manual_compute is set. */
		pthread_mutex_lock(&e->lock);
		while (e->o.manual_compute && e->compute_fin < p->wait && !e->stop)
			pthread_cond_wait(&e->cond, &e->lock);
		pthread_mutex_unlock(&e->lock);
		t0 = moem_now_ns();
		memcpy((void *)(uintptr_t)p->dst, p->src, p->bytes);
		model_ns = (uint64_t)(e->o.link_lat_us * 1e3 +
				      (double)p->bytes / (e->o.link_gbps * 1e9) * 1e9);
		sleep_until(t0 + model_ns);
		pthread_mutex_lock(&e->lock);
		e->piece_ns[p->seq % e->ns_ring] = moem_now_ns() - t0;
		e->copy_completed = p->seq;
		pthread_cond_broadcast(&e->cond);
		free(p);
	}
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

static int emu_copy(struct moem_tierdev *d, moem_dptr dst, const void *src, uint64_t bytes,
		    uint64_t wait_compute, uint64_t *seq)
{
	struct emu_dev *e = to_emu(d);
	struct emu_piece *p = calloc(1, sizeof(*p));
	uint64_t s;

	if (!p)
		return -ENOMEM;
	p->dst = dst;
	p->src = src;
	p->bytes = bytes;
	p->wait = wait_compute;
	pthread_mutex_lock(&e->lock);
	p->seq = s = ++e->copy_issued;
	if (e->tail)
		e->tail->next = p;
	else
		e->head = p;
	e->tail = p;
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
	*seq = s; /* not p->seq: the copy thread may have done and freed p */
	return 0;
}

static uint64_t emu_copy_done(struct moem_tierdev *d)
{
	struct emu_dev *e = to_emu(d);
	uint64_t v;

	pthread_mutex_lock(&e->lock);
	v = e->copy_completed;
	pthread_mutex_unlock(&e->lock);
	return v;
}

static int emu_copy_wait(struct moem_tierdev *d, uint64_t seq)
{
	struct emu_dev *e = to_emu(d);

	pthread_mutex_lock(&e->lock);
	while (e->copy_completed < seq)
		pthread_cond_wait(&e->cond, &e->lock);
	pthread_mutex_unlock(&e->lock);
	return 0;
}

static uint64_t emu_copy_ns(struct moem_tierdev *d, uint64_t seq)
{
	struct emu_dev *e = to_emu(d);
	uint64_t v;

	pthread_mutex_lock(&e->lock);
	v = e->piece_ns[seq % e->ns_ring];
	pthread_mutex_unlock(&e->lock);
	return v;
}

static uint64_t emu_compute_mark(struct moem_tierdev *d)
{
	struct emu_dev *e = to_emu(d);
	uint64_t seq;

	pthread_mutex_lock(&e->lock);
	seq = ++e->compute_seq;
	if (!e->o.manual_compute)
		e->compute_fin = seq;
	pthread_mutex_unlock(&e->lock);
	return seq;
}

static uint64_t emu_compute_done(struct moem_tierdev *d)
{
	struct emu_dev *e = to_emu(d);
	uint64_t v;

	pthread_mutex_lock(&e->lock);
	v = e->compute_fin;
	pthread_mutex_unlock(&e->lock);
	return v;
}

static int emu_compute_wait(struct moem_tierdev *d, uint64_t seq)
{
	struct emu_dev *e = to_emu(d);

	pthread_mutex_lock(&e->lock);
	while (e->compute_fin < seq && e->compute_fin < e->compute_seq)
		pthread_cond_wait(&e->cond, &e->lock);
	pthread_mutex_unlock(&e->lock);
	return 0;
}

void moem_tierdev_emu_finish(struct moem_tierdev *d, uint64_t seq)
{
	struct emu_dev *e = to_emu(d);

	pthread_mutex_lock(&e->lock);
	if (seq > e->compute_seq)
		seq = e->compute_seq;
	if (seq > e->compute_fin)
		e->compute_fin = seq;
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
}

static void *emu_host_view(struct moem_tierdev *d, moem_dptr addr)
{
	return (void *)(uintptr_t)addr;
}

static void emu_destroy(struct moem_tierdev *d)
{
	struct emu_dev *e = to_emu(d);

	pthread_mutex_lock(&e->lock);
	e->stop = true;
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
	pthread_join(e->thread, NULL);
	pthread_mutex_destroy(&e->lock);
	pthread_cond_destroy(&e->cond);
	free(e->piece_ns);
	free(e);
}

static const struct moem_tierdev_ops emu_ops = {
	.name = "emulated",
	.granularity = emu_granularity,
	.reserve = emu_reserve,
	.unreserve = emu_unreserve,
	.map = emu_map,
	.unmap = emu_unmap,
	.host_register = emu_host_register,
	.host_unregister = emu_host_unregister,
	.copy = emu_copy,
	.copy_done = emu_copy_done,
	.copy_wait = emu_copy_wait,
	.copy_ns = emu_copy_ns,
	.compute_mark = emu_compute_mark,
	.compute_done = emu_compute_done,
	.compute_wait = emu_compute_wait,
	.host_view = emu_host_view,
	.destroy = emu_destroy,
};

int moem_tierdev_emu_create(const struct moem_emu_opts *o, struct moem_tierdev **out)
{
	struct emu_dev *e = calloc(1, sizeof(*e));
	int ret;

	if (!e)
		return -ENOMEM;
	e->dev.ops = &emu_ops;
	e->o.link_gbps = o && o->link_gbps > 0 ? o->link_gbps : 25.0;
	e->o.link_lat_us = o && o->link_lat_us >= 0 ? o->link_lat_us : 10.0;
	e->o.granularity = o && o->granularity ? o->granularity : MOEM_CHUNK_BYTES;
	e->o.manual_compute = o && o->manual_compute;
	if (!(e->o.link_gbps <= 10000) || !moem_is_aligned(e->o.granularity, 4096)) {
		free(e);
		return moem_errf(EINVAL, "emulated HBM: bad link bandwidth or granularity");
	}
	e->ns_ring = EMU_NS_RING;
	e->piece_ns = calloc(e->ns_ring, sizeof(uint64_t));
	if (!e->piece_ns) {
		free(e);
		return -ENOMEM;
	}
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->cond, NULL);
	ret = pthread_create(&e->thread, NULL, emu_copy_thread, e);
	if (ret) {
		pthread_mutex_destroy(&e->lock);
		pthread_cond_destroy(&e->cond);
		free(e->piece_ns);
		free(e);
		return moem_errf(ret, "emulated HBM: copy thread: %s", strerror(ret));
	}
	*out = &e->dev;
	return 0;
}
