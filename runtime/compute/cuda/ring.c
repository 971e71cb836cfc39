// SPDX-License-Identifier: GPL-2.0-only
/*
 * Per-stream descriptor ring and scratch (cuda_int.h). Regions are handed
 * out in ring order, so the regions a new one overlaps are always the
 * oldest pending ones: wait for those (their event), recycle, go on.
 */
#include <errno.h>
#include <string.h>

#include <moem/error.h>
#include <moem/util.h>

#include "cuda_int.h"

static int ring_init(struct cuda_backend *cb, struct cuda_stream *cs)
{
	void *h;
	int ret;

	ret = ck(cb, cb->api->cuMemAllocHost(&h, CUDA_RING_BYTES), "cuMemAllocHost(ring)");
	if (ret)
		return ret;
	ret = ck(cb, cb->api->cuMemAlloc(&cs->ring_d, CUDA_RING_BYTES), "cuMemAlloc(ring)");
	if (ret) {
		ck_unwind(cb, cb->api->cuMemFreeHost(h), "cuMemFreeHost(ring)");
		return ret;
	}
	cs->ring_h = h;
	cs->ring_head = 0;
	cs->rec_first = cs->rec_n = 0;
	return 0;
}

void moem_cuda_ring_free(struct cuda_backend *cb, struct cuda_stream *cs)
{
	for (uint32_t i = 0; i < CUDA_RING_RECS; i++)
		if (cs->recs[i].ev)
			ck(cb, cb->api->cuEventDestroy(cs->recs[i].ev), "cuEventDestroy(ring)");
	if (cs->ring_d)
		ck(cb, cb->api->cuMemFree(cs->ring_d), "cuMemFree(ring)");
	if (cs->ring_h)
		ck(cb, cb->api->cuMemFreeHost(cs->ring_h), "cuMemFreeHost(ring)");
	memset(cs->recs, 0, sizeof(cs->recs));
	cs->ring_h = NULL;
	cs->ring_d = 0;
}

static int pop_oldest(struct cuda_backend *cb, struct cuda_stream *cs)
{
	struct cuda_ring_rec *r = &cs->recs[cs->rec_first];
	int ret = ck(cb, cb->api->cuEventSynchronize(r->ev), "cuEventSynchronize(ring)");

	if (ret)
		return ret;
	cs->rec_first = (cs->rec_first + 1) % CUDA_RING_RECS;
	cs->rec_n--;
	return 0;
}

int moem_cuda_ring_get(struct cuda_backend *cb, struct cuda_stream *cs, uint32_t len, void **host,
		       CUdeviceptr *dev, uint32_t *off)
{
	uint32_t start;
	int ret;

	len = (uint32_t)moem_align_up(len, 256);
	if (cs->cap) {
		struct cuda_capture *c = cs->cap;

		if (len > CUDA_GRAPH_DESC_BYTES - c->used) {
			c->err = -E2BIG;
			return moem_errf(E2BIG,
					 "cuda backend: a graph capture holds %u bytes of "
					 "descriptors, %u more asked",
					 CUDA_GRAPH_DESC_BYTES, len);
		}
		*host = c->desc_h + c->used;
		*dev = c->desc_d + c->used;
		*off = c->used;
		c->used += len;
		return 0;
	}
	if (len > CUDA_RING_BYTES)
		return moem_errf(E2BIG, "cuda backend: %u bytes of descriptors", len);
	if (!cs->ring_h) {
		ret = ring_init(cb, cs);
		if (ret)
			return ret;
	}
	start = cs->ring_head + len > CUDA_RING_BYTES ? 0 : cs->ring_head;
	for (;;) {
		bool overlap = false;

		for (uint32_t i = 0; i < cs->rec_n; i++) {
			const struct cuda_ring_rec *r =
				&cs->recs[(cs->rec_first + i) % CUDA_RING_RECS];

			overlap |= r->start < start + len && start < r->end;
		}
		if (!overlap && cs->rec_n < CUDA_RING_RECS)
			break;
		ret = pop_oldest(cb, cs);
		if (ret)
			return ret;
	}
	*host = cs->ring_h + start;
	*dev = cs->ring_d + start;
	*off = start;
	cs->ring_head = start + len;
	return 0;
}

int moem_cuda_ring_copy(struct cuda_backend *cb, struct cuda_stream *cs, uint32_t off, uint32_t len)
{
	if (cs->cap) /* recorded: each replay copies the capture's block again */
		return ck(cb,
			  cb->api->cuMemcpyHtoDAsync(cs->cap->desc_d + off, cs->cap->desc_h + off,
						     len, cs->s),
			  "cuMemcpyHtoDAsync(descriptors)");
	return ck(cb, cb->api->cuMemcpyHtoDAsync(cs->ring_d + off, cs->ring_h + off, len, cs->s),
		  "cuMemcpyHtoDAsync(descriptors)");
}

int moem_cuda_ring_commit(struct cuda_backend *cb, struct cuda_stream *cs, uint32_t off,
			  uint32_t len)
{
	struct cuda_ring_rec *r = &cs->recs[(cs->rec_first + cs->rec_n) % CUDA_RING_RECS];
	int ret;

	if (cs->cap) /* the capture's block lives as long as its graph */
		return 0;
	if (!r->ev) {
		ret = ck(cb,
			 cb->api->cuEventCreate(&r->ev,
						CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC),
			 "cuEventCreate(ring)");
		if (ret)
			return ret;
	}
	ret = ck(cb, cb->api->cuEventRecord(r->ev, cs->s), "cuEventRecord(ring)");
	if (ret)
		return ret;
	r->start = off;
	r->end = off + (uint32_t)moem_align_up(len, 256);
	cs->rec_n++;
	return 0;
}

int moem_cuda_scratch(struct cuda_backend *cb, struct cuda_stream *cs, uint64_t bytes,
		      CUdeviceptr *out)
{
	CUdeviceptr p;
	int ret;

	if (bytes > cs->scratch_cap) {
		if (cs->cap) { /* no synchronisation or allocation inside a capture */
			cs->cap->err = -EAGAIN;
			return moem_errf(EAGAIN,
					 "cuda backend: the stream's scratch must grow to %llu "
					 "bytes inside a graph capture",
					 (unsigned long long)bytes);
		}
		bytes = moem_align_up(bytes, 1 << 20);
		/* Earlier work on this stream may still read the old buffer. */
		ret = ck(cb, cb->api->cuStreamSynchronize(cs->s), "cuStreamSynchronize");
		if (ret)
			return ret;
		ret = ck(cb, cb->api->cuMemAlloc(&p, bytes), "cuMemAlloc(scratch)");
		if (ret)
			return ret;
		if (cs->scratch)
			ck(cb, cb->api->cuMemFree(cs->scratch), "cuMemFree(scratch)");
		cs->scratch = p;
		cs->scratch_cap = bytes;
		/* graphs captured with the old buffer must not run again */
		__atomic_add_fetch(&cb->graph_epoch, 1, __ATOMIC_RELEASE);
	}
	*out = cs->scratch;
	return 0;
}
