/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Inside the CUDA backend: handles, the kernel table, the per-stream
 * descriptor ring and scratch, and the launch helpers the op launchers
 * (ops.c) share.
 */
#ifndef MOEM_CUDA_INT_H
#define MOEM_CUDA_INT_H

#include <stdio.h>

#include <moem/cuda_api.h>

#include "../backend/backend_int.h"
#include "../../../cuda/kparams.h"
#include "../../../cuda/decode_kparams.h"

/* Fatbins embedded by mk/cuda.mk (an empty table without nvcc). */
struct moem_fatbin {
	const char *name;
	const unsigned char *start, *end;
};
extern const struct moem_fatbin moem_cuda_fatbins[];

enum cuda_kernel {
	K_RMSNORM,
	K_ROUTE,
	K_COMBINE,
	K_HIST,
	K_QUANT_Q8,
	K_QUANT_Q4,
	K_QUANT_Q2,
	K_FFN_PLAN,
	K_ROUTER,		     /* + n-tile class 0..3 */
	K_FFN_GATEUP = K_ROUTER + 4, /* + prec * 4 + n-tile class */
	K_FFN_DOWN = K_FFN_GATEUP + 16,
	/* + pass * 16 + prec * 4 + class * 2 + v: the row tilings of classes
	 * 0 and 1 (kparams.h moem_k_ffn_var_rt) */
	K_FFN_VAR = K_FFN_DOWN + 16,
	K_DECODE = K_FFN_VAR + 32, /* the full-decode kernels (decode_ops.c) */
	K_EMBED = K_DECODE,
	K_MATMUL,
	K_MATMUL_Q8, /* + prec - MOEM_PREC_Q8 (matmul_q.cu) */
	K_MATMUL_Q4,
	K_MATMUL_Q2,
	K_ROWNORM,
	K_CONVERT,
	K_CONVERT_SEQ,
	K_ROPE,
	K_HEAD_MM,
	K_KV_STORE,
	K_ATTN_PART,
	K_ATTN_MERGE,
	K_NR
};

/* Name of kernel k ("moem_ffn_gateup_q4_n2"), into buf. */
const char *moem_cuda_kernel_name(enum cuda_kernel k, char *buf, size_t len);

/*
 * FFN descriptors travel in a ring of pinned host memory mirrored on the
 * device: a call writes its region, copies it with cuMemcpyHtoDAsync on
 * the stream, launches, and records an event; a region is reused only
 * after its event completed (host waits, rarely: the ring holds hundreds
 * of calls).
 */
#define CUDA_RING_BYTES (1u << 20)
#define CUDA_RING_RECS	64

struct cuda_ring_rec {
	uint32_t start, end;
	CUevent ev;
};

/*
 * A graph capture in progress on a stream (graph.c). The ring's host
 * regions are recycled by event, which a capture cannot record and a
 * replay would outlive: descriptors written inside a capture go to the
 * capture's own pinned block instead, which the graph keeps until it is
 * destroyed, so that every replay copies the same bytes.
 */
#define CUDA_GRAPH_DESC_BYTES (256u << 10)

struct cuda_capture {
	uint8_t *desc_h; /* cuMemAllocHost */
	CUdeviceptr desc_d;
	uint32_t used;
	uint64_t epoch; /* cb->graph_epoch at the start */
	int err;	/* the first ring or scratch use the capture could not hold */
};

struct cuda_stream {
	struct moem_stream base;
	CUstream s;
	struct cuda_capture *cap; /* non-NULL while capturing */
	uint8_t *ring_h;	  /* cuMemAllocHost */
	CUdeviceptr ring_d;
	uint32_t ring_head;
	struct cuda_ring_rec recs[CUDA_RING_RECS];
	uint32_t rec_first, rec_n;
	CUdeviceptr scratch; /* FFN activations, grown on demand */
	uint64_t scratch_cap;
};

struct cuda_event {
	struct moem_event base;
	CUevent e;
};

struct cuda_backend {
	struct moem_backend base;
	const struct moem_cuda_api *api;
	CUdevice dev;
	CUcontext ctx;
	CUmodule *mods;
	uint32_t n_mods;
	CUfunction fn[K_NR];
	struct cuda_stream dflt;
	/* FFN rows per block / 16 for n-tile classes 0, 1 (ffn_rt_init()) */
	uint8_t ffn_rt[MOEM_PREC_NR][2];
	uint64_t graph_epoch; /* bumped when a stream's scratch moves (graph.c) */
};

static inline struct cuda_backend *cuda_of(struct moem_backend *be)
{
	return (struct cuda_backend *)be;
}

static inline struct cuda_stream *cuda_stream_of(struct moem_stream *s)
{
	return (struct cuda_stream *)s;
}

/* Check a driver result for this backend (moem_cuda_check). */
static inline int ck(struct cuda_backend *cb, CUresult r, const char *what)
{
	return moem_cuda_check(&cb->base, r, what);
}

/*
 * Check a result on an error-unwinding path: a sticky error still marks
 * the backend fatal, but the thread's message keeps the first error.
 */
static inline void ck_unwind(struct cuda_backend *cb, CUresult r, const char *what)
{
	char es[160], msg[256];

	if (r != CUDA_SUCCESS && moem_cuda_is_sticky(r) && cb) {
		snprintf(msg, sizeof(msg), "%s: %s", what, moem_cuda_strerror(r, es, sizeof(es)));
		moem_backend_set_fatal(&cb->base, msg);
	}
}

/* Make the backend's context current on this thread (cached per thread). */
int moem_cuda_enter(struct cuda_backend *cb);

/* Load every embedded module and resolve the kernel table. */
int moem_cuda_kernels_load(struct cuda_backend *cb);
void moem_cuda_kernels_unload(struct cuda_backend *cb);

/* Launch kernel k with one parameter block (a struct moem_k*_params). */
int moem_cuda_launch(struct cuda_backend *cb, enum cuda_kernel k, uint32_t gx, uint32_t gy,
		     uint32_t block, uint32_t smem, struct cuda_stream *cs, void *params);

/*
 * Reserve len bytes of the stream's descriptor ring: *host to fill,
 * *dev for the kernels, *off for moem_cuda_ring_commit().
 */
int moem_cuda_ring_get(struct cuda_backend *cb, struct cuda_stream *cs, uint32_t len, void **host,
		       CUdeviceptr *dev, uint32_t *off);
/* Copy [off, off + len) to the device and queue it (after the launches). */
int moem_cuda_ring_copy(struct cuda_backend *cb, struct cuda_stream *cs, uint32_t off,
			uint32_t len);
int moem_cuda_ring_commit(struct cuda_backend *cb, struct cuda_stream *cs, uint32_t off,
			  uint32_t len);
void moem_cuda_ring_free(struct cuda_backend *cb, struct cuda_stream *cs);
/* Device scratch of at least bytes for this stream's next op. */
int moem_cuda_scratch(struct cuda_backend *cb, struct cuda_stream *cs, uint64_t bytes,
		      CUdeviceptr *out);

/* Graphs (graph.c): the backend ops. */
int moem_cuda_capture_begin(struct moem_backend *be, struct moem_stream *s);
int moem_cuda_capture_end(struct moem_backend *be, struct moem_stream *s, struct moem_graph **out);
int moem_cuda_graph_launch(struct moem_backend *be, struct moem_graph *g, struct moem_stream *s);
void moem_cuda_graph_destroy(struct moem_backend *be, struct moem_graph *g);
uint64_t moem_cuda_graph_epoch(struct moem_backend *be);

int moem_cuda_rmsnorm(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_rmsnorm_args *a);
int moem_cuda_router(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_router_args *a);
int moem_cuda_route(struct moem_backend *be, struct moem_stream *s,
		    const struct moem_route_args *a);
int moem_cuda_ffn(struct moem_backend *be, struct moem_stream *s, const struct moem_ffn_args *a);
int moem_cuda_ffn_routed(struct moem_backend *be, struct moem_stream *s,
			 const struct moem_ffn_routed_args *a);
int moem_cuda_combine(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_combine_args *a);
int moem_cuda_quantize(struct moem_backend *be, struct moem_stream *s,
		       const struct moem_quantize_args *a);
int moem_cuda_histogram(struct moem_backend *be, struct moem_stream *s,
			const struct moem_hist_args *a);
/* Full decode (decode_ops.c). */
int moem_cuda_embed(struct moem_backend *be, struct moem_stream *s,
		    const struct moem_embed_args *a);
int moem_cuda_matmul(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_matmul_args *a);
int moem_cuda_rownorm(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_rownorm_args *a);
int moem_cuda_convert(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_convert_args *a);
int moem_cuda_rope(struct moem_backend *be, struct moem_stream *s, const struct moem_rope_args *a);
int moem_cuda_head_matmul(struct moem_backend *be, struct moem_stream *s,
			  const struct moem_head_matmul_args *a);
int moem_cuda_kv_store(struct moem_backend *be, struct moem_stream *s,
		       const struct moem_kv_store_args *a);
int moem_cuda_attention(struct moem_backend *be, struct moem_stream *s,
			const struct moem_attn_args *a);

#endif /* MOEM_CUDA_INT_H */
