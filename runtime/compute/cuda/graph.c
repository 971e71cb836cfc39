// SPDX-License-Identifier: GPL-2.0-only
/*
 * Graphs on the CUDA backend (backend.h, "Graphs"): stream capture in
 * thread-local mode (the tier device's copy thread may allocate and
 * synchronise meanwhile; this thread may not), instantiation, launch.
 * A capture brings its own pinned block for the descriptors the ring
 * would hold (cuda_int.h, struct cuda_capture); the graph keeps it. A
 * capture fails, and is dropped whole, when an op inside it could not be
 * recorded (the driver refuses it, or the backend's scratch had to grow)
 * or when the scratch moved meanwhile (graph_epoch).
 */
#include <errno.h>
#include <stdlib.h>

#include <moem/error.h>

#include "cuda_int.h"

struct moem_graph {
	CUgraphExec exec;
	uint8_t *desc_h;
	CUdeviceptr desc_d;
};

static void cap_free(struct cuda_backend *cb, struct cuda_capture *c)
{
	if (c->desc_d)
		ck_unwind(cb, cb->api->cuMemFree(c->desc_d), "cuMemFree(graph descriptors)");
	if (c->desc_h)
		ck_unwind(cb, cb->api->cuMemFreeHost(c->desc_h),
			  "cuMemFreeHost(graph descriptors)");
	free(c);
}

int moem_cuda_capture_begin(struct moem_backend *be, struct moem_stream *s)
{
	struct cuda_backend *cb = cuda_of(be);
	struct cuda_stream *cs = cuda_stream_of(s);
	struct cuda_capture *c;
	void *h = NULL;
	int ret;

	if (cs->cap)
		return moem_errf(EBUSY,
				 "cuda backend: a capture is already under way on the stream");
	ret = moem_cuda_enter(cb);
	if (ret)
		return ret;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	ret = ck(cb, cb->api->cuMemAllocHost(&h, CUDA_GRAPH_DESC_BYTES),
		 "cuMemAllocHost(graph descriptors)");
	if (ret)
		goto err_free;
	c->desc_h = h;
	ret = ck(cb, cb->api->cuMemAlloc(&c->desc_d, CUDA_GRAPH_DESC_BYTES),
		 "cuMemAlloc(graph descriptors)");
	if (ret)
		goto err_free;
	c->epoch = __atomic_load_n(&cb->graph_epoch, __ATOMIC_ACQUIRE);
	ret = ck(cb, cb->api->cuStreamBeginCapture(cs->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
		 "cuStreamBeginCapture");
	if (ret)
		goto err_free;
	cs->cap = c;
	return 0;

err_free:
	cap_free(cb, c);
	return ret;
}

int moem_cuda_capture_end(struct moem_backend *be, struct moem_stream *s, struct moem_graph **out)
{
	struct cuda_backend *cb = cuda_of(be);
	struct cuda_stream *cs = cuda_stream_of(s);
	struct cuda_capture *c = cs->cap;
	struct moem_graph *g = NULL;
	CUgraphExec exec = NULL;
	CUgraph graph = NULL;
	int ret;

	*out = NULL;
	if (!c)
		return moem_errf(EINVAL, "cuda backend: no capture under way on the stream");
	cs->cap = NULL;
	ret = moem_cuda_enter(cb);
	if (!ret)
		ret = ck(cb, cb->api->cuStreamEndCapture(cs->s, &graph), "cuStreamEndCapture");
	if (!ret && c->err)
		ret = moem_errf(-c->err, "cuda backend: an op inside the capture could not be "
					 "recorded");
	if (!ret && __atomic_load_n(&cb->graph_epoch, __ATOMIC_ACQUIRE) != c->epoch)
		ret = moem_errf(ESTALE,
				"cuda backend: the stream's scratch moved during the capture");
	if (!ret)
		ret = ck(cb, cb->api->cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
	if (graph)
		ck_unwind(cb, cb->api->cuGraphDestroy(graph), "cuGraphDestroy");
	if (!ret) {
		g = malloc(sizeof(*g));
		if (!g)
			ret = -ENOMEM;
	}
	if (ret) {
		if (exec)
			ck_unwind(cb, cb->api->cuGraphExecDestroy(exec), "cuGraphExecDestroy");
		cap_free(cb, c);
		return ret;
	}
	g->exec = exec;
	g->desc_h = c->desc_h;
	g->desc_d = c->desc_d;
	free(c);
	*out = g;
	return 0;
}

int moem_cuda_graph_launch(struct moem_backend *be, struct moem_graph *g, struct moem_stream *s)
{
	struct cuda_backend *cb = cuda_of(be);
	int ret = moem_cuda_enter(cb);

	return ret ? ret
		   : ck(cb, cb->api->cuGraphLaunch(g->exec, cuda_stream_of(s)->s), "cuGraphLaunch");
}

/* No launch of g may still be pending: its descriptor block goes now. */
void moem_cuda_graph_destroy(struct moem_backend *be, struct moem_graph *g)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!moem_cuda_enter(cb)) {
		ck(cb, cb->api->cuGraphExecDestroy(g->exec), "cuGraphExecDestroy");
		ck(cb, cb->api->cuMemFree(g->desc_d), "cuMemFree(graph descriptors)");
		ck(cb, cb->api->cuMemFreeHost(g->desc_h), "cuMemFreeHost(graph descriptors)");
	}
	free(g);
}

uint64_t moem_cuda_graph_epoch(struct moem_backend *be)
{
	return __atomic_load_n(&cuda_of(be)->graph_epoch, __ATOMIC_ACQUIRE);
}
