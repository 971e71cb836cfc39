// SPDX-License-Identifier: GPL-2.0-only
/*
 * The UVM tier device (tierdev.h): the baseline most users try first for a
 * model larger than GPU memory. Experts live in one managed allocation
 * (cuMemAllocManaged, read-mostly advice: decode never writes them) that
 * holds every version; the tiers put each version there once, with a
 * plain host copy, and never evict (the engine gives them a budget of the
 * whole arena). Kernels read experts in place and the driver pages them
 * onto the GPU on first touch, evicting what it chooses when the HBM
 * budget is full: that is the UVM mode's whole residency policy, unless
 * moem's prefetch policy drives cuMemPrefetchAsync ahead of use
 * (moem_tierdev_uvm_prefetch()).
 *
 * The HBM budget is the device memory managed pages may use: a balloon
 * (cuMemAlloc) takes the rest of what is free but MOEM_UVM_HEADROOM (for
 * the backend's later buffers), and is resized when the budget changes;
 * the driver evicts managed pages to make room for it.
 *
 * The compute timeline (marks on the backend's default stream) is the VMM
 * device's, which this one wraps; its arena is never reserved.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/log.h>
#include <moem/tierdev.h>
#include <moem/util.h>

#include "cuda_int.h"

#define UVM_NS_RING 4096

struct uvm_piece {
	moem_dptr dst;
	const void *src;
	uint64_t bytes, seq, wait;
	struct uvm_piece *next;
};

struct uvm_dev {
	struct moem_tierdev dev;
	struct moem_tierdev *vmm; /* the compute timeline */
	struct cuda_backend *cb;
	struct moem_stream *pf_s; /* cuMemPrefetchAsync */
	CUdeviceptr base, balloon;
	uint64_t bytes, balloon_bytes, budget;
	/* the copy thread: host copies into managed memory */
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct uvm_piece *head, *tail;
	uint64_t issued, done, ns[UVM_NS_RING];
	bool stop;
	struct moem_uvm_stats st;
};

static struct uvm_dev *ud(struct moem_tierdev *d)
{
	return (struct uvm_dev *)d;
}

static uint64_t uvm_granularity(struct moem_tierdev *d)
{
	return MOEM_CHUNK_BYTES;
}

static int uvm_reserve(struct moem_tierdev *d, uint64_t bytes, moem_dptr *base)
{
	struct uvm_dev *u = ud(d);
	const struct moem_cuda_api *api = u->cb->api;
	CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, u->cb->dev};
	CUdeviceptr p;
	char what[80];
	int ret = moem_cuda_enter(u->cb);

	if (ret)
		return ret;
	snprintf(what, sizeof(what), "cuMemAllocManaged(%llu)", (unsigned long long)bytes);
	ret = ck(u->cb, api->cuMemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL), what);
	if (ret)
		return ret;
	ret = ck(u->cb, api->cuMemAdvise(p, bytes, CU_MEM_ADVISE_SET_READ_MOSTLY, loc),
		 "cuMemAdvise(read mostly)");
	if (ret) {
		ck_unwind(u->cb, api->cuMemFree(p), "cuMemFree(managed)");
		return ret;
	}
	u->base = p;
	u->bytes = bytes;
	*base = p;
	return 0;
}

static void uvm_unreserve(struct moem_tierdev *d, moem_dptr base, uint64_t bytes)
{
	struct uvm_dev *u = ud(d);

	if (!moem_cuda_enter(u->cb))
		ck(u->cb, u->cb->api->cuMemFree(base), "cuMemFree(managed)");
	u->base = 0;
}

/* Managed memory is always there: the budget is the balloon's business. */
static int uvm_map(struct moem_tierdev *d, moem_dptr addr, uint64_t bytes)
{
	return 0;
}

static int uvm_unmap(struct moem_tierdev *d, moem_dptr addr, uint64_t bytes)
{
	return 0;
}

/* The copies are host copies: the pool needs no registration. */
static int uvm_host_register(struct moem_tierdev *d, void *p, uint64_t bytes)
{
	return 0;
}

static void uvm_host_unregister(struct moem_tierdev *d, void *p)
{
}

static void *uvm_copy_thread(void *arg)
{
	struct uvm_dev *u = arg;

	pthread_mutex_lock(&u->lock);
	for (;;) {
		struct uvm_piece *p;
		uint64_t t0;

		while (!u->head && !u->stop)
			pthread_cond_wait(&u->cond, &u->lock);
		if (!u->head)
			break;
		p = u->head;
		u->head = p->next;
		if (!u->head)
			u->tail = NULL;
		pthread_mutex_unlock(&u->lock);
		/* a recycled slot: after its last reader (the tiers never recycle
		 * here, their budget is the whole arena, but the rule holds) */
		if (p->wait && u->vmm->ops->compute_done(u->vmm) < p->wait)
			u->vmm->ops->compute_wait(u->vmm, p->wait);
		t0 = moem_now_ns();
		/* The host writes the pages: they stay on the host until a kernel
		 * touches them (or a prefetch moves them). */
		memcpy((void *)(uintptr_t)p->dst, p->src, p->bytes);
		pthread_mutex_lock(&u->lock);
		u->ns[p->seq % UVM_NS_RING] = moem_now_ns() - t0;
		u->done = p->seq;
		pthread_cond_broadcast(&u->cond);
		free(p);
	}
	pthread_mutex_unlock(&u->lock);
	return NULL;
}

static int uvm_copy(struct moem_tierdev *d, moem_dptr dst, const void *src, uint64_t bytes,
		    uint64_t wait_compute, uint64_t *seq)
{
	struct uvm_dev *u = ud(d);
	struct uvm_piece *p = calloc(1, sizeof(*p));
	uint64_t s;

	if (!p)
		return -ENOMEM;
	if (moem_backend_fatal(&u->cb->base)) {
		free(p);
		return moem_errf(EIO, "%s", moem_backend_fatal_msg(&u->cb->base));
	}
	p->dst = dst;
	p->src = src;
	p->bytes = bytes;
	p->wait = wait_compute;
	pthread_mutex_lock(&u->lock);
	p->seq = s = ++u->issued;
	if (u->tail)
		u->tail->next = p;
	else
		u->head = p;
	u->tail = p;
	pthread_cond_broadcast(&u->cond);
	pthread_mutex_unlock(&u->lock);
	*seq = s;
	return 0;
}

static uint64_t uvm_copy_done(struct moem_tierdev *d)
{
	struct uvm_dev *u = ud(d);
	uint64_t v;

	pthread_mutex_lock(&u->lock);
	v = u->done;
	pthread_mutex_unlock(&u->lock);
	return v;
}

static int uvm_copy_wait(struct moem_tierdev *d, uint64_t seq)
{
	struct uvm_dev *u = ud(d);

	pthread_mutex_lock(&u->lock);
	while (u->done < seq)
		pthread_cond_wait(&u->cond, &u->lock);
	pthread_mutex_unlock(&u->lock);
	return 0;
}

static uint64_t uvm_copy_ns(struct moem_tierdev *d, uint64_t seq)
{
	struct uvm_dev *u = ud(d);
	uint64_t v;

	pthread_mutex_lock(&u->lock);
	v = seq <= u->done && seq + UVM_NS_RING > u->done ? u->ns[seq % UVM_NS_RING] : 0;
	pthread_mutex_unlock(&u->lock);
	return v;
}

static uint64_t uvm_compute_mark(struct moem_tierdev *d)
{
	return ud(d)->vmm->ops->compute_mark(ud(d)->vmm);
}

static uint64_t uvm_compute_done(struct moem_tierdev *d)
{
	return ud(d)->vmm->ops->compute_done(ud(d)->vmm);
}

static int uvm_compute_wait(struct moem_tierdev *d, uint64_t seq)
{
	return ud(d)->vmm->ops->compute_wait(ud(d)->vmm, seq);
}

/* Reading managed memory from the host would page it back: no view. */
static void *uvm_host_view(struct moem_tierdev *d, moem_dptr addr)
{
	return NULL;
}

static void balloon_free(struct uvm_dev *u)
{
	if (u->balloon)
		ck(u->cb, u->cb->api->cuMemFree(u->balloon), "cuMemFree(balloon)");
	u->balloon = 0;
	u->balloon_bytes = 0;
}

static void uvm_destroy(struct moem_tierdev *d)
{
	struct uvm_dev *u = ud(d);

	pthread_mutex_lock(&u->lock);
	u->stop = true;
	pthread_cond_broadcast(&u->cond);
	pthread_mutex_unlock(&u->lock);
	pthread_join(u->thread, NULL);
	if (!moem_cuda_enter(u->cb)) {
		moem_be_stream_sync(&u->cb->base, u->pf_s);
		balloon_free(u);
	}
	moem_be_stream_destroy(&u->cb->base, u->pf_s);
	u->vmm->ops->destroy(u->vmm);
	pthread_cond_destroy(&u->cond);
	pthread_mutex_destroy(&u->lock);
	free(u);
}

static const struct moem_tierdev_ops uvm_ops = {
	.name = "uvm",
	.granularity = uvm_granularity,
	.reserve = uvm_reserve,
	.unreserve = uvm_unreserve,
	.map = uvm_map,
	.unmap = uvm_unmap,
	.host_register = uvm_host_register,
	.host_unregister = uvm_host_unregister,
	.copy = uvm_copy,
	.copy_done = uvm_copy_done,
	.copy_wait = uvm_copy_wait,
	.copy_ns = uvm_copy_ns,
	.compute_mark = uvm_compute_mark,
	.compute_done = uvm_compute_done,
	.compute_wait = uvm_compute_wait,
	.host_view = uvm_host_view,
	.destroy = uvm_destroy,
};

int moem_tierdev_uvm_create(struct moem_backend *be, struct moem_tierdev **out)
{
	struct cuda_backend *cb;
	struct uvm_dev *u;
	int managed = 0, concurrent = 0, ret;

	if (moem_backend_kind(be) != MOEM_BACKEND_CUDA)
		return moem_errf(EINVAL, "the UVM tier mode needs the CUDA backend (%s open)",
				 moem_backend_name(be));
	cb = cuda_of(be);
	ret = moem_cuda_enter(cb);
	if (!ret)
		ret = ck(cb,
			 cb->api->cuDeviceGetAttribute(&managed, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY,
						       cb->dev),
			 "cuDeviceGetAttribute");
	if (!ret)
		ret = ck(cb,
			 cb->api->cuDeviceGetAttribute(
				 &concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
				 cb->dev),
			 "cuDeviceGetAttribute");
	if (ret)
		return ret;
	/* The copy thread writes managed pages while kernels run. */
	if (!managed || !concurrent)
		return moem_errf(ENODEV,
				 "the UVM tier mode needs managed memory with concurrent access "
				 "(%s: managed %d, concurrent %d)",
				 cb->base.info.device, managed, concurrent);
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->dev.ops = &uvm_ops;
	u->cb = cb;
	ret = moem_tierdev_cuda_create(be, &u->vmm);
	if (ret)
		goto err_free;
	ret = moem_be_stream_create(be, &u->pf_s);
	if (ret)
		goto err_vmm;
	pthread_mutex_init(&u->lock, NULL);
	pthread_cond_init(&u->cond, NULL);
	ret = pthread_create(&u->thread, NULL, uvm_copy_thread, u);
	if (ret) {
		ret = moem_errf(ret, "UVM tier: copy thread: %s", strerror(ret));
		goto err_sync;
	}
	*out = &u->dev;
	return 0;

err_sync:
	pthread_cond_destroy(&u->cond);
	pthread_mutex_destroy(&u->lock);
	moem_be_stream_destroy(be, u->pf_s);
err_vmm:
	u->vmm->ops->destroy(u->vmm);
err_free:
	free(u);
	return ret;
}

int moem_tierdev_uvm_set_budget(struct moem_tierdev *d, uint64_t hbm)
{
	struct uvm_dev *u = ud(d);
	size_t fr = 0, total = 0;
	uint64_t avail, want;
	int ret;

	if (d->ops != &uvm_ops)
		return moem_errf(EINVAL, "not a UVM tier device");
	ret = moem_cuda_enter(u->cb);
	if (!ret)
		ret = ck(u->cb, u->cb->api->cuMemGetInfo(&fr, &total), "cuMemGetInfo");
	if (ret)
		return ret;
	/* What managed pages may have = what is free + the balloon now. */
	avail = fr + u->balloon_bytes;
	want = avail > hbm + MOEM_UVM_HEADROOM
		       ? (avail - hbm - MOEM_UVM_HEADROOM) / MOEM_CHUNK_BYTES * MOEM_CHUNK_BYTES
		       : 0;
	if (want != u->balloon_bytes) {
		balloon_free(u);
		if (want) {
			ret = ck(u->cb, u->cb->api->cuMemAlloc(&u->balloon, want),
				 "cuMemAlloc(UVM budget balloon)");
			if (ret)
				return moem_err_prefix(-ret, "UVM budget %llu bytes",
						       (unsigned long long)hbm);
			u->balloon_bytes = want;
		}
	}
	u->budget = hbm;
	u->st.budget = hbm;
	u->st.balloon = u->balloon_bytes;
	moem_info("UVM: %llu bytes of device memory for managed pages (balloon %llu)",
		  (unsigned long long)(avail - u->balloon_bytes),
		  (unsigned long long)u->balloon_bytes);
	return 0;
}

int moem_tierdev_uvm_prefetch(struct moem_tierdev *d, moem_dptr addr, uint64_t bytes)
{
	struct uvm_dev *u = ud(d);
	CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, u->cb->dev};
	int ret;

	if (d->ops != &uvm_ops)
		return moem_errf(EINVAL, "not a UVM tier device");
	ret = moem_cuda_enter(u->cb);
	if (!ret)
		ret = ck(u->cb,
			 u->cb->api->cuMemPrefetchAsync(addr, bytes, loc, 0,
							cuda_stream_of(u->pf_s)->s),
			 "cuMemPrefetchAsync");
	if (!ret) {
		__atomic_add_fetch(&u->st.prefetches, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&u->st.prefetch_bytes, bytes, __ATOMIC_RELAXED);
	}
	return ret;
}

bool moem_tierdev_is_uvm(const struct moem_tierdev *d)
{
	return d && d->ops == &uvm_ops;
}

void moem_tierdev_uvm_stats(struct moem_tierdev *d, struct moem_uvm_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (moem_tierdev_is_uvm(d)) {
		*st = ud(d)->st;
		st->prefetches = __atomic_load_n(&ud(d)->st.prefetches, __ATOMIC_RELAXED);
		st->prefetch_bytes = __atomic_load_n(&ud(d)->st.prefetch_bytes, __ATOMIC_RELAXED);
	}
}
