// SPDX-License-Identifier: GPL-2.0-only
/*
 * The CUDA tier device (tierdev.h, created by moem_tierdev_cuda_create()): the HBM arena on CUDA virtual memory
 * management and the copy engine on a dedicated stream.
 *
 *  - reserve: one cuMemAddressReserve for the largest budget;
 *  - map: cuMemCreate + cuMemMap per granule-sized chunk and one
 *    cuMemSetAccess over the new range; only when the budget grows (never
 *    per fetch: cuMemSetAccess costs tens of microseconds);
 *  - copies: cuMemcpyHtoDAsync on the copy stream between a pair of
 *    timing events; a copy that must wait for a compute mark makes the
 *    copy stream wait on that mark's event (cuStreamWaitEvent), so the
 *    host never blocks for a write-after-read;
 *  - the compute timeline is events recorded on the backend's default
 *    stream, where the engine issues its kernels.
 * Sequence numbers map to rings of events; an event is reused only after
 * its sequence is known complete, so every incomplete sequence can still
 * be waited on.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <moem/backend.h>
#include <moem/cuda_api.h>
#include <moem/error.h>
#include <moem/tierdev.h>
#include <moem/util.h>

#define RING	  512
#define REG_PIECE (1ULL << 30)

struct cuda_dev {
	struct moem_tierdev dev;
	struct moem_backend *be;
	const struct moem_cuda_api *api;
	CUdevice cudev;
	CUcontext ctx;
	struct moem_stream *copy_s;
	uint64_t gran;
	moem_dptr base;
	uint64_t res_bytes;
	CUmemGenericAllocationHandle *chunk; /* [res_bytes / gran], 0 = unmapped */
	pthread_mutex_t lock;
	struct moem_event *c0[RING], *c1[RING]; /* copy start/end */
	struct moem_event *k[RING];		/* compute marks */
	uint64_t c_issued, c_done, k_marked, k_done;
	uint64_t c_ns[RING];
	void **reg; /* registered host pieces, any number (the pool has no cap) */
	uint64_t n_reg;
	const char *reg_base; /* the registered pool, REG_PIECE per piece */
	uint64_t reg_bytes;
};

static struct cuda_dev *cd(struct moem_tierdev *d)
{
	return (struct cuda_dev *)d;
}

static int ctx_cur(struct cuda_dev *c)
{
	return moem_cuda_check(c->be, c->api->cuCtxSetCurrent(c->ctx), "cuCtxSetCurrent");
}

static uint64_t cu_granularity(struct moem_tierdev *d)
{
	return cd(d)->gran;
}

static int cu_reserve(struct moem_tierdev *d, uint64_t bytes, moem_dptr *base)
{
	struct cuda_dev *c = cd(d);
	CUdeviceptr p;
	int ret = ctx_cur(c);

	if (ret)
		return ret;
	ret = moem_cuda_check(c->be, c->api->cuMemAddressReserve(&p, bytes, c->gran, 0, 0),
			      "cuMemAddressReserve");
	if (ret)
		return ret;
	c->chunk = calloc(bytes / c->gran, sizeof(*c->chunk));
	if (!c->chunk) {
		c->api->cuMemAddressFree(p, bytes);
		return -ENOMEM;
	}
	c->base = p;
	c->res_bytes = bytes;
	*base = p;
	return 0;
}

static void cu_unreserve(struct moem_tierdev *d, moem_dptr base, uint64_t bytes)
{
	struct cuda_dev *c = cd(d);

	if (ctx_cur(c) == 0)
		moem_cuda_check(c->be, c->api->cuMemAddressFree(base, bytes), "cuMemAddressFree");
	free(c->chunk);
	c->chunk = NULL;
}

static int cu_unmap(struct moem_tierdev *d, moem_dptr addr, uint64_t bytes);

static int cu_map(struct moem_tierdev *d, moem_dptr addr, uint64_t bytes)
{
	struct cuda_dev *c = cd(d);
	CUmemAllocationProp prop;
	CUmemAccessDesc acc;
	uint64_t off;
	int ret = ctx_cur(c);

	if (ret)
		return ret;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = c->cudev;
	for (off = 0; off < bytes; off += c->gran) {
		uint64_t i = (addr + off - c->base) / c->gran;
		CUmemGenericAllocationHandle h;

		ret = moem_cuda_check(c->be, c->api->cuMemCreate(&h, c->gran, &prop, 0),
				      "cuMemCreate");
		if (ret)
			goto err;
		ret = moem_cuda_check(c->be, c->api->cuMemMap(addr + off, c->gran, 0, h, 0),
				      "cuMemMap");
		if (ret) {
			c->api->cuMemRelease(h);
			goto err;
		}
		c->chunk[i] = h;
	}
	memset(&acc, 0, sizeof(acc));
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	ret = moem_cuda_check(c->be, c->api->cuMemSetAccess(addr, bytes, &acc, 1),
			      "cuMemSetAccess");
	if (ret)
		goto err;
	return 0;
err:
	if (off)
		cu_unmap(d, addr, off);
	return ret;
}

static int cu_unmap(struct moem_tierdev *d, moem_dptr addr, uint64_t bytes)
{
	struct cuda_dev *c = cd(d);
	int ret = ctx_cur(c), r;

	if (ret)
		return ret;
	for (uint64_t off = 0; off < bytes; off += c->gran) {
		uint64_t i = (addr + off - c->base) / c->gran;

		if (!c->chunk[i])
			continue;
		r = moem_cuda_check(c->be, c->api->cuMemUnmap(addr + off, c->gran), "cuMemUnmap");
		if (!r)
			r = moem_cuda_check(c->be, c->api->cuMemRelease(c->chunk[i]),
					    "cuMemRelease");
		c->chunk[i] = 0;
		if (r && !ret)
			ret = r;
	}
	return ret;
}

static void cu_host_unregister(struct moem_tierdev *d, void *p);

static int cu_host_register(struct moem_tierdev *d, void *p, uint64_t bytes)
{
	struct cuda_dev *c = cd(d);
	uint64_t n = (bytes + REG_PIECE - 1) / REG_PIECE;
	int ret = 0;

	if (c->reg)
		return moem_errf(EBUSY, "the CUDA tier device has a pool registered already");
	c->reg = calloc(n ? n : 1, sizeof(*c->reg));
	if (!c->reg)
		return -ENOMEM;
	/* In pieces: one registration of a huge pool can fail where pieces
	 * succeed, and every piece's result is checked. */
	for (uint64_t off = 0; off < bytes && !ret; off += REG_PIECE) {
		ret = moem_be_host_register(c->be, (char *)p + off,
					    moem_min(REG_PIECE, bytes - off));
		if (!ret)
			c->reg[c->n_reg++] = (char *)p + off;
	}
	if (ret) {
		cu_host_unregister(d, p);
	} else {
		c->reg_base = p;
		c->reg_bytes = bytes;
	}
	return ret;
}

static void cu_host_unregister(struct moem_tierdev *d, void *p)
{
	struct cuda_dev *c = cd(d);

	while (c->n_reg)
		moem_be_host_unregister(c->be, c->reg[--c->n_reg]);
	free(c->reg);
	c->reg = NULL;
	c->reg_base = NULL;
	c->reg_bytes = 0;
}

/* Poll events in order; lock held. */
static void poll_copies(struct cuda_dev *c)
{
	while (c->c_done < c->c_issued &&
	       moem_be_event_query(c->be, c->c1[(c->c_done + 1) % RING]) == 0) {
		uint64_t s = c->c_done + 1;
		float ms = 0;

		if (moem_be_event_elapsed(c->be, c->c0[s % RING], c->c1[s % RING], &ms) == 0)
			c->c_ns[s % RING] = (uint64_t)(ms * 1e6);
		c->c_done = s;
	}
}

static void poll_compute(struct cuda_dev *c)
{
	while (c->k_done < c->k_marked &&
	       moem_be_event_query(c->be, c->k[(c->k_done + 1) % RING]) == 0)
		c->k_done++;
}

static int cu_copy_wait_locked(struct cuda_dev *c, uint64_t seq)
{
	int ret = 0;

	while (c->c_done < seq && !ret) {
		ret = moem_be_event_sync(c->be, c->c1[(c->c_done + 1) % RING]);
		poll_copies(c);
	}
	return ret;
}

static int cu_compute_wait_locked(struct cuda_dev *c, uint64_t seq)
{
	int ret = 0;

	while (c->k_done < seq && !ret) {
		ret = moem_be_event_sync(c->be, c->k[(c->k_done + 1) % RING]);
		poll_compute(c);
	}
	return ret;
}

/*
 * The host -> device copies of one piece, one per registered piece it
 * touches: a source that spans two registrations is, to the driver, not
 * one pinned range. On an H200 (driver 580) such a copy never completed;
 * the kernel emulator refuses it.
 */
static int cu_htod_split(struct cuda_dev *c, moem_dptr dst, const char *src, uint64_t bytes)
{
	int ret = 0;

	const uintptr_t base = (uintptr_t)c->reg_base;

	while (bytes && !ret) {
		const uintptr_t at = (uintptr_t)src;
		uint64_t n = bytes;

		if (at >= base && at - base < c->reg_bytes)
			n = moem_min(n, REG_PIECE - (at - base) % REG_PIECE);
		else if (at < base && base - at < bytes)
			n = base - at;
		ret = moem_be_htod(c->be, dst, src, n, c->copy_s);
		dst += n;
		src += n;
		bytes -= n;
	}
	return ret;
}

static int cu_copy(struct moem_tierdev *d, moem_dptr dst, const void *src, uint64_t bytes,
		   uint64_t wait_compute, uint64_t *seq)
{
	struct cuda_dev *c = cd(d);
	uint64_t s;
	int ret;

	pthread_mutex_lock(&c->lock);
	s = c->c_issued + 1;
	/* the ring slot's previous piece must be done before its events are reused */
	ret = cu_copy_wait_locked(c, s > RING ? s - RING : 0);
	poll_compute(c);
	if (!ret && wait_compute > c->k_done)
		ret = moem_be_stream_wait(c->be, c->copy_s, c->k[wait_compute % RING]);
	if (!ret)
		ret = moem_be_event_record(c->be, c->c0[s % RING], c->copy_s);
	if (!ret)
		ret = cu_htod_split(c, dst, src, bytes);
	if (!ret)
		ret = moem_be_event_record(c->be, c->c1[s % RING], c->copy_s);
	if (!ret) {
		c->c_issued = s;
		*seq = s;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

static uint64_t cu_copy_done(struct moem_tierdev *d)
{
	struct cuda_dev *c = cd(d);
	uint64_t v;

	pthread_mutex_lock(&c->lock);
	poll_copies(c);
	v = c->c_done;
	pthread_mutex_unlock(&c->lock);
	return v;
}

static int cu_copy_wait(struct moem_tierdev *d, uint64_t seq)
{
	struct cuda_dev *c = cd(d);
	struct moem_event *ev;
	int ret = 0;

	/* Block outside the lock: the engine thread marks compute meanwhile. */
	pthread_mutex_lock(&c->lock);
	poll_copies(c);
	ev = c->c_done < seq ? c->c1[seq % RING] : NULL;
	pthread_mutex_unlock(&c->lock);
	if (ev)
		ret = moem_be_event_sync(c->be, ev);
	pthread_mutex_lock(&c->lock);
	poll_copies(c);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

static uint64_t cu_copy_ns(struct moem_tierdev *d, uint64_t seq)
{
	struct cuda_dev *c = cd(d);
	uint64_t v;

	pthread_mutex_lock(&c->lock);
	poll_copies(c);
	v = seq <= c->c_done && seq + RING > c->c_done ? c->c_ns[seq % RING] : 0;
	pthread_mutex_unlock(&c->lock);
	return v;
}

static uint64_t cu_compute_mark(struct moem_tierdev *d)
{
	struct cuda_dev *c = cd(d);
	uint64_t s;

	pthread_mutex_lock(&c->lock);
	s = c->k_marked + 1;
	cu_compute_wait_locked(c, s > RING ? s - RING : 0);
	/* A failed record leaves the mark incomplete forever; the backend is
	 * then fatal and the engine stops at its next call. */
	if (moem_be_event_record(c->be, c->k[s % RING], NULL) == 0)
		c->k_marked = s;
	else
		s = c->k_marked;
	pthread_mutex_unlock(&c->lock);
	return s;
}

static uint64_t cu_compute_done(struct moem_tierdev *d)
{
	struct cuda_dev *c = cd(d);
	uint64_t v;

	pthread_mutex_lock(&c->lock);
	poll_compute(c);
	v = c->k_done;
	pthread_mutex_unlock(&c->lock);
	return v;
}

static int cu_compute_wait(struct moem_tierdev *d, uint64_t seq)
{
	struct cuda_dev *c = cd(d);
	int ret;

	pthread_mutex_lock(&c->lock);
	ret = cu_compute_wait_locked(c, moem_min(seq, c->k_marked));
	pthread_mutex_unlock(&c->lock);
	return ret;
}

static void *cu_host_view(struct moem_tierdev *d, moem_dptr addr)
{
	return NULL;
}

static void cu_destroy(struct moem_tierdev *d)
{
	struct cuda_dev *c = cd(d);

	moem_be_stream_sync(c->be, c->copy_s);
	cu_host_unregister(d, NULL);
	for (int i = 0; i < RING; i++) {
		moem_be_event_destroy(c->be, c->c0[i]);
		moem_be_event_destroy(c->be, c->c1[i]);
		moem_be_event_destroy(c->be, c->k[i]);
	}
	moem_be_stream_destroy(c->be, c->copy_s);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static const struct moem_tierdev_ops cuda_ops = {
	.name = "cuda",
	.granularity = cu_granularity,
	.reserve = cu_reserve,
	.unreserve = cu_unreserve,
	.map = cu_map,
	.unmap = cu_unmap,
	.host_register = cu_host_register,
	.host_unregister = cu_host_unregister,
	.copy = cu_copy,
	.copy_done = cu_copy_done,
	.copy_wait = cu_copy_wait,
	.copy_ns = cu_copy_ns,
	.compute_mark = cu_compute_mark,
	.compute_done = cu_compute_done,
	.compute_wait = cu_compute_wait,
	.host_view = cu_host_view,
	.destroy = cu_destroy,
};

int moem_tierdev_cuda_create(struct moem_backend *be, struct moem_tierdev **out)
{
	struct cuda_dev *c = calloc(1, sizeof(*c));
	CUmemAllocationProp prop;
	size_t g = 0;
	int ret;

	if (!c)
		return -ENOMEM;
	ret = moem_cuda_backend_handles(be, &c->api, &c->cudev, &c->ctx);
	if (ret)
		goto err_free;
	c->be = be;
	c->dev.ops = &cuda_ops;
	pthread_mutex_init(&c->lock, NULL);
	ret = ctx_cur(c);
	if (ret)
		goto err_lock;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = c->cudev;
	ret = moem_cuda_check(be,
			      c->api->cuMemGetAllocationGranularity(
				      &g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
			      "cuMemGetAllocationGranularity");
	if (ret)
		goto err_lock;
	c->gran = g ? g : MOEM_CHUNK_BYTES;
	ret = moem_be_stream_create(be, &c->copy_s);
	if (ret)
		goto err_lock;
	for (int i = 0; i < RING && !ret; i++) {
		ret = moem_be_event_create(be, &c->c0[i]);
		if (!ret)
			ret = moem_be_event_create(be, &c->c1[i]);
		if (!ret)
			ret = moem_be_event_create(be, &c->k[i]);
	}
	if (ret) {
		for (int i = 0; i < RING; i++) {
			moem_be_event_destroy(be, c->c0[i]);
			moem_be_event_destroy(be, c->c1[i]);
			moem_be_event_destroy(be, c->k[i]);
		}
		moem_be_stream_destroy(be, c->copy_s);
		goto err_lock;
	}
	*out = &c->dev;
	return 0;

err_lock:
	pthread_mutex_destroy(&c->lock);
err_free:
	free(c);
	return ret;
}
