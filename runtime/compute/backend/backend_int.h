/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Inside the backend layer: the ops table each implementation fills in and
 * the common header of its handles. backend.c checks every argument
 * before it calls through the table, so implementations may assume valid
 * sizes, non-zero required pointers and a non-NULL stream.
 */
#ifndef MOEM_BACKEND_INT_H
#define MOEM_BACKEND_INT_H

#include <stdatomic.h>

#include <moem/backend.h>

struct moem_backend_ops {
	const char *name;
	void (*close)(struct moem_backend *be);

	int (*alloc)(struct moem_backend *be, uint64_t bytes, moem_dptr *out);
	void (*free)(struct moem_backend *be, moem_dptr p);
	int (*mem_info)(struct moem_backend *be, uint64_t *free_bytes, uint64_t *total);
	int (*memset)(struct moem_backend *be, moem_dptr p, int v, uint64_t bytes,
		      struct moem_stream *s);
	int (*htod)(struct moem_backend *be, moem_dptr dst, const void *src, uint64_t bytes,
		    struct moem_stream *s);
	int (*dtoh)(struct moem_backend *be, void *dst, moem_dptr src, uint64_t bytes,
		    struct moem_stream *s);
	int (*dtod)(struct moem_backend *be, moem_dptr dst, moem_dptr src, uint64_t bytes,
		    struct moem_stream *s);
	int (*host_register)(struct moem_backend *be, void *p, uint64_t bytes);
	int (*host_unregister)(struct moem_backend *be, void *p);
	void (*wake)(struct moem_backend *be); /* optional: moem_be_wake() */

	int (*stream_create)(struct moem_backend *be, struct moem_stream **out);
	void (*stream_destroy)(struct moem_backend *be, struct moem_stream *s);
	int (*stream_sync)(struct moem_backend *be, struct moem_stream *s);
	int (*stream_wait)(struct moem_backend *be, struct moem_stream *s, struct moem_event *ev);
	int (*sync)(struct moem_backend *be);
	int (*event_create)(struct moem_backend *be, struct moem_event **out);
	void (*event_destroy)(struct moem_backend *be, struct moem_event *ev);
	int (*event_record)(struct moem_backend *be, struct moem_event *ev, struct moem_stream *s);
	int (*event_query)(struct moem_backend *be, struct moem_event *ev);
	int (*event_sync)(struct moem_backend *be, struct moem_event *ev);
	int (*event_elapsed)(struct moem_backend *be, struct moem_event *a, struct moem_event *b,
			     float *ms);
	/* optional, all or none (moem_be_has_graphs) */
	int (*capture_begin)(struct moem_backend *be, struct moem_stream *s);
	int (*capture_end)(struct moem_backend *be, struct moem_stream *s, struct moem_graph **out);
	int (*graph_launch)(struct moem_backend *be, struct moem_graph *g, struct moem_stream *s);
	void (*graph_destroy)(struct moem_backend *be, struct moem_graph *g);
	uint64_t (*graph_epoch)(struct moem_backend *be);

	int (*rmsnorm)(struct moem_backend *be, struct moem_stream *s,
		       const struct moem_rmsnorm_args *a);
	int (*router)(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_router_args *a);
	int (*route)(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_route_args *a);
	/* a->experts all have a valid prec and layout; assignments are unique. */
	int (*ffn)(struct moem_backend *be, struct moem_stream *s, const struct moem_ffn_args *a);
	/* optional (NULL: -EOPNOTSUPP) */
	int (*ffn_routed)(struct moem_backend *be, struct moem_stream *s,
			  const struct moem_ffn_routed_args *a);
	int (*combine)(struct moem_backend *be, struct moem_stream *s,
		       const struct moem_combine_args *a);
	int (*quantize)(struct moem_backend *be, struct moem_stream *s,
			const struct moem_quantize_args *a);
	int (*histogram)(struct moem_backend *be, struct moem_stream *s,
			 const struct moem_hist_args *a);
	/* Full decode; NULL where the backend has no kernel yet (-EOPNOTSUPP). */
	int (*embed)(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_embed_args *a);
	int (*matmul)(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_matmul_args *a);
	int (*rownorm)(struct moem_backend *be, struct moem_stream *s,
		       const struct moem_rownorm_args *a);
	int (*convert)(struct moem_backend *be, struct moem_stream *s,
		       const struct moem_convert_args *a);
	int (*rope)(struct moem_backend *be, struct moem_stream *s, const struct moem_rope_args *a);
	int (*head_matmul)(struct moem_backend *be, struct moem_stream *s,
			   const struct moem_head_matmul_args *a);
	int (*kv_store)(struct moem_backend *be, struct moem_stream *s,
			const struct moem_kv_store_args *a);
	int (*attention)(struct moem_backend *be, struct moem_stream *s,
			 const struct moem_attn_args *a);
};

/* Embedded first in every implementation's backend struct. */
struct moem_backend {
	const struct moem_backend_ops *ops;
	enum moem_backend_kind kind;
	struct moem_stream *dflt; /* the NULL stream */
	atomic_bool fatal;
	char fatal_msg[256];
	char note[256];
	struct moem_backend_info info;
};

/* Embedded first in every implementation's stream and event. */
struct moem_stream {
	struct moem_backend *be;
};

struct moem_event {
	struct moem_backend *be;
};

/* Implementations' constructors: fill *out (with ops, kind, dflt, info). */
int moem_cpu_backend_open(const struct moem_backend_opts *opts, struct moem_backend **out);
/*
 * CUDA: on failure return -ENODEV with the reason in the thread's error
 * message ("no CUDA device: ..."), which "auto" turns into its note.
 */
int moem_cuda_backend_open(const struct moem_backend_opts *opts, struct moem_backend **out);

/* Record a sticky error: moem_backend_fatal() is true from now on. */
void moem_backend_set_fatal(struct moem_backend *be, const char *msg);

static inline void *moem_dptr_host(moem_dptr p)
{
	return (void *)(uintptr_t)p;
}

#endif /* MOEM_BACKEND_INT_H */
