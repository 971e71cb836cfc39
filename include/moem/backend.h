/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Compute backends: the MoE layer's device memory, streams, events and
 * ops behind one opaque handle (ggml-style ops table). Two
 * implementations: "cpu", a multithreaded reference every machine has,
 * and "cuda", kernels run through the CUDA driver API (libcuda.so.1 is
 * dlopen()ed; no cudart, no link-time GPU dependency). See
 * Documentation/backends.md for numerics, tolerances and kernel design.
 *
 * Conventions for everything here:
 *  - Functions return 0 or a negative errno and record a message
 *    (moem_errf) on failure; they never print or exit.
 *  - Device buffers are moem_dptr: a CUdeviceptr on CUDA, a host address
 *    on the CPU backend. Buffers from moem_be_alloc() are aligned to 256
 *    bytes; their contents are undefined until written.
 *  - Work is ordered on streams. A NULL stream is the backend's default
 *    stream (created at open, non-blocking). On the CPU backend every
 *    call runs to completion before it returns and events are always
 *    complete; on CUDA calls only enqueue work, so host buffers passed to
 *    an async copy must stay valid (and unmodified) until the stream has
 *    passed the copy (moem_be_stream_sync() or an event). A stream is
 *    used by one host thread at a time; different streams may be driven
 *    from different threads.
 *  - Op arguments are plain structs; every size is checked (zero,
 *    limits, overflow) and device pointers for non-optional buffers must
 *    be non-zero, before anything is enqueued: bad arguments return
 *    -EINVAL with a message and change nothing.
 *  - After a sticky device error (illegal address, launch failure, ...)
 *    moem_backend_fatal() is true and every later call returns -EIO: the
 *    process should report it and exit so that it is restarted.
 *
 * Numerics (both backends): the residual stream is fp32; the router and
 * FFN input is bf16 (rmsnorm output); intermediate activations fp32;
 * outputs fp32.
 */
#ifndef MOEM_BACKEND_H
#define MOEM_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "quant.h"
#include "route.h"

typedef uint64_t moem_dptr;

struct moem_backend;
struct moem_stream;
struct moem_event;

enum moem_backend_kind {
	MOEM_BACKEND_CPU = 0,
	MOEM_BACKEND_CUDA = 1,
};

/* Limits every backend accepts (checked in the common layer). */
#define MOEM_BE_MAX_TOKENS  64	 /* tokens per FFN call; per router chunk */
#define MOEM_BE_MAX_BATCH   4096 /* tokens per rmsnorm/router/route/combine call */
#define MOEM_BE_MAX_HIDDEN  65536
#define MOEM_BE_MAX_INTER   131072
#define MOEM_BE_MAX_SLOTS   64	 /* rows per token in an FFN output */
#define MOEM_BE_MAX_EXPERTS 1024 /* router outputs N */
#define MOEM_BE_ALIGN	    256u /* moem_be_alloc() alignment; blob alignment */

/*
 * The instruction set the CPU backend's expert FFN kernels use
 * (Documentation/backends.md, "CPU kernels"):
 *  scalar  the reference: plain C, bitwise reproducible on every x86-64
 *          and the oracle the others are tested against;
 *  avx2    AVX2 + FMA + F16C: bf16 weights in fp32 FMA, q8/q4/q2 as int8
 *          dot products (vpmaddubsw) on activations quantized per token;
 *  avx512  AVX-512 F/BW/VL with BF16 (vdpbf16ps) and VNNI (vpdpbusd);
 *  amx     avx512 plus AMX tiles (AMX-TILE, AMX-BF16, the tile state
 *          granted by the OS): bf16 weights with TDPBF16PS, q8/q4/q2 as
 *          avx512.
 * AUTO takes $MOEM_CPU_ISA when it is set, else the best the CPU has. The
 * vector paths give the same bits for any thread count and batch split,
 * but not the same bits as scalar (within the tolerance backends.md
 * derives).
 */
enum moem_cpu_isa {
	MOEM_CPU_ISA_AUTO = 0,
	MOEM_CPU_ISA_SCALAR = 1,
	MOEM_CPU_ISA_AVX2 = 2,
	MOEM_CPU_ISA_AVX512 = 3,
	MOEM_CPU_ISA_AMX = 4,
	MOEM_CPU_ISA_NR
};

/* "auto", "scalar", "avx2", "avx512", "amx". */
const char *moem_cpu_isa_name(enum moem_cpu_isa isa);
/* Parse one of those names; -EINVAL with a message for anything else. */
int moem_cpu_isa_parse(const char *s, enum moem_cpu_isa *out);
/*
 * 0 if this CPU (and the kernel's saved vector state) runs isa, else
 * -ENOTSUP with a message naming the missing features. AUTO is always 0.
 */
int moem_cpu_isa_check(enum moem_cpu_isa isa);
/* The best ISA this CPU runs. */
enum moem_cpu_isa moem_cpu_isa_best(void);
/*
 * Resolve AUTO: $MOEM_CPU_ISA if set (-EINVAL for a bad name, -ENOTSUP
 * for a path the CPU lacks, naming the variable), else the best. Other
 * values are checked as moem_cpu_isa_check() does.
 */
int moem_cpu_isa_resolve(enum moem_cpu_isa want, enum moem_cpu_isa *out);
/* CPUs this process may run on (sched_getaffinity), at least 1. */
uint32_t moem_cpu_count(void);

struct moem_backend_opts {
	uint32_t threads; /* CPU: worker threads, 0 = online CPUs (max 256) */
	int32_t device;	  /* CUDA: device ordinal */
	/* CPU: kernel instruction set (above); a path the CPU lacks fails
	 * the open with -ENOTSUP instead of dying on SIGILL later. */
	enum moem_cpu_isa isa;
	/* CPU: do not pin the workers. They are pinned, one CPU each, spread
	 * over the NUMA nodes, whenever threads <= moem_cpu_count(). */
	bool no_pin;
};

struct moem_backend_info {
	enum moem_backend_kind kind;
	uint32_t threads;	/* CPU worker threads (CUDA: 0) */
	enum moem_cpu_isa isa;	/* CPU: the kernels' instruction set (CUDA: AUTO) */
	bool pinned;		/* CPU: workers pinned to one CPU each */
	uint32_t numa_nodes;	/* CPU: NUMA nodes the workers run on (1 without libnuma) */
	int cc_major, cc_minor; /* CUDA compute capability (CPU: 0) */
	uint32_t sm_count;
	uint64_t mem_total; /* device memory (CPU: physical RAM) */
	int driver_version; /* cuDriverGetVersion(), e.g. 13000 (CPU: 0) */
	bool kernels;	    /* CUDA: kernels embedded (false: built without nvcc) */
	char device
		[128]; /* "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)", "cpu: 16 threads, avx512, pinned" */
};

/*
 * moem_backend_open() - open a backend by name: "cpu", "cuda" or "auto".
 * "auto" takes CUDA when libcuda.so.1 loads, a device exists and the
 * kernels were built in, otherwise the CPU backend; the reason is kept in
 * moem_backend_note() ("no CUDA device: cuInit returned
 * CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected): using the CPU
 * backend"). "cuda" fails with -ENODEV and that reason instead of falling
 * back. opts may be NULL (defaults).
 */
int moem_backend_open(const char *name, const struct moem_backend_opts *opts,
		      struct moem_backend **out);
/* Wait for all work, release everything the backend owns. NULL is a no-op. */
void moem_backend_close(struct moem_backend *be);
/* "cpu" or "cuda". */
const char *moem_backend_name(const struct moem_backend *be);
enum moem_backend_kind moem_backend_kind(const struct moem_backend *be);
/* Why this backend was chosen ("" when it was asked for by name). */
const char *moem_backend_note(const struct moem_backend *be);
void moem_backend_get_info(const struct moem_backend *be, struct moem_backend_info *info);
/* True once a sticky device error was seen; the message says which. */
bool moem_backend_fatal(const struct moem_backend *be);
const char *moem_backend_fatal_msg(const struct moem_backend *be);

/* Device memory. bytes > 0. moem_be_free(be, 0) is a no-op. */
int moem_be_alloc(struct moem_backend *be, uint64_t bytes, moem_dptr *out);
void moem_be_free(struct moem_backend *be, moem_dptr p);
int moem_be_mem_info(struct moem_backend *be, uint64_t *free_bytes, uint64_t *total_bytes);
/*
 * The host address of device memory p when the host can write it in
 * place (the CPU backend's), else NULL: a loader then fills it without a
 * bounce buffer and a copy.
 */
void *moem_be_host_ptr(const struct moem_backend *be, moem_dptr p);
/* Fill bytes with the byte value v (0..255). */
int moem_be_memset(struct moem_backend *be, moem_dptr p, int v, uint64_t bytes,
		   struct moem_stream *s);
int moem_be_htod(struct moem_backend *be, moem_dptr dst, const void *src, uint64_t bytes,
		 struct moem_stream *s);
int moem_be_dtoh(struct moem_backend *be, void *dst, moem_dptr src, uint64_t bytes,
		 struct moem_stream *s);
int moem_be_dtod(struct moem_backend *be, moem_dptr dst, moem_dptr src, uint64_t bytes,
		 struct moem_stream *s);
/*
 * Page-lock host memory so copies from/to it are truly asynchronous
 * (cuMemHostRegister, portable). A no-op that only checks arguments on
 * the CPU backend. Unregister exactly the pointer that was registered.
 */
int moem_be_host_register(struct moem_backend *be, void *p, uint64_t bytes);
int moem_be_host_unregister(struct moem_backend *be, void *p);
/*
 * Work for this backend's host threads is coming soon: the CPU backend's
 * sleeping workers start polling, so that their wake-up overlaps what the
 * caller does before it submits. A hint: nothing on other backends.
 */
void moem_be_wake(struct moem_backend *be);

/* Streams. Destroying a stream waits for its work first. */
int moem_be_stream_create(struct moem_backend *be, struct moem_stream **out);
void moem_be_stream_destroy(struct moem_backend *be, struct moem_stream *s);
int moem_be_stream_sync(struct moem_backend *be, struct moem_stream *s);
/* Later work on s waits until ev has completed (cuStreamWaitEvent). */
int moem_be_stream_wait(struct moem_backend *be, struct moem_stream *s, struct moem_event *ev);
/* Wait for all work on all streams. */
int moem_be_sync(struct moem_backend *be);

/*
 * Graphs: record what is queued on a stream once, replay it many times
 * (CUDA stream capture, cuGraphInstantiate, cuGraphLaunch). Optional:
 * moem_be_has_graphs() is false on the CPU backend.
 *
 * Between capture_begin() and capture_end() the work queued on s from
 * the calling thread is recorded, not run; nothing in that window may
 * synchronise, allocate or free, or read what the work writes. Copies
 * to and from host memory must use registered (pinned) memory; a
 * replay copies whatever that memory holds at the time. Kernel
 * arguments are fixed at capture: anything that changes from one replay
 * to the next must be read by the kernels from device memory.
 * capture_end() ends the capture in every case; on success *out is an
 * instantiated graph, else the capture is dropped and the thread's
 * message says why (an op the capture cannot hold, a backend buffer
 * that had to grow). A graph holds the backend's internal buffers as
 * they were at capture: moem_be_graph_epoch() changes whenever those
 * move, and a graph captured under an older epoch must not be launched.
 */
struct moem_graph;
bool moem_be_has_graphs(const struct moem_backend *be);
int moem_be_capture_begin(struct moem_backend *be, struct moem_stream *s);
int moem_be_capture_end(struct moem_backend *be, struct moem_stream *s, struct moem_graph **out);
int moem_be_graph_launch(struct moem_backend *be, struct moem_graph *g, struct moem_stream *s);
void moem_be_graph_destroy(struct moem_backend *be, struct moem_graph *g);
uint64_t moem_be_graph_epoch(struct moem_backend *be);

/* Events (timing enabled). */
int moem_be_event_create(struct moem_backend *be, struct moem_event **out);
void moem_be_event_destroy(struct moem_backend *be, struct moem_event *ev);
int moem_be_event_record(struct moem_backend *be, struct moem_event *ev, struct moem_stream *s);
/* 0 if everything before the record has completed, -EAGAIN if not yet. */
int moem_be_event_query(struct moem_backend *be, struct moem_event *ev);
int moem_be_event_sync(struct moem_backend *be, struct moem_event *ev);
/* Milliseconds between two completed, recorded events. */
int moem_be_event_elapsed(struct moem_backend *be, struct moem_event *start, struct moem_event *end,
			  float *ms);

/* ---- ops ---------------------------------------------------------------- */

/*
 * RMSNorm: y[t] = bf16((x[t] * r) * w) with r = 1 / sqrtf(ms + eps),
 * ms = (float)(sum_i (double)x[t][i]^2 / H): the sum of squares in double
 * (exact products, so the summation order barely matters), every other
 * step one IEEE float operation. (Hugging Face rounds x*r to bf16 before
 * the weight; moem rounds once.)
 */
struct moem_rmsnorm_args {
	uint32_t B, H;
	float eps;
	moem_dptr x;	  /* f32 [B][H] (the residual stream) */
	moem_dptr weight; /* bf16 [H] */
	moem_dptr y;	  /* bf16 [B][H] */
};
int moem_op_rmsnorm(struct moem_backend *be, struct moem_stream *s,
		    const struct moem_rmsnorm_args *a);

/* Router: logits[t][e] = sum_i x[t][i] * gate[e][i], fp32 accumulation. */
struct moem_router_args {
	uint32_t B, H, N;
	moem_dptr x;	  /* bf16 [B][H] */
	moem_dptr gate;	  /* bf16 [N][H] (mlp.gate.weight) */
	moem_dptr logits; /* f32 [B][N] */
};
int moem_op_router(struct moem_backend *be, struct moem_stream *s,
		   const struct moem_router_args *a);

enum moem_route_mode {
	MOEM_ROUTE_TOPK = 0,	  /* vanilla top-k (route.h moem_route_topk) */
	MOEM_ROUTE_LYNX = 1,	  /* LYNX batch-level reduction */
	MOEM_ROUTE_OEA = 2,	  /* OEA, simplified */
	MOEM_ROUTE_PIGGYBACK = 3, /* OEA with S_base widened by a resident mask */
	MOEM_ROUTE_NR
};

/*
 * Route: choose experts and weights from logits with route.h's rules. The
 * CUDA kernel makes exactly the choices of route.c on the same logits
 * (same float binning, integer votes, fixed-order double batch scores,
 * same tie-breaking, same LYNX fallback); weights agree within 1e-6
 * relative (double exp may differ in the last bit).
 */
struct moem_route_args {
	enum moem_route_mode mode;
	struct moem_route_cfg cfg;    /* N, k, weight rule */
	struct moem_lynx_params lynx; /* LYNX only; {0, 0} = moem default {2, 4} */
	uint32_t k0;		      /* OEA/piggyback; 0 = ceil(k / 2) */
	uint32_t B;
	moem_dptr logits;   /* f32 [B][N] */
	moem_dptr pad;	    /* u8 [B], non-zero = padding token; 0 = none */
	moem_dptr resident; /* u8 [N], piggyback only (required there) */
	moem_dptr ids;	    /* i32 [B][k] out: experts, -1 unused */
	moem_dptr w;	    /* f32 [B][k] out: weights, 0 unused */
	moem_dptr cnt;	    /* u32 [B] out: slots used */
};
int moem_op_route(struct moem_backend *be, struct moem_stream *s, const struct moem_route_args *a);

/*
 * Grouped expert FFN (SwiGLU): for every expert and every (token, slot)
 * assigned to it,
 *   out[token][slot][:] = down( silu(gate x[token]) * (up x[token]) )
 * unscaled by the route weight (combine applies it). Each (token, slot)
 * row is written by exactly one expert and by one thread with a fixed
 * summation order, so the result does not depend on the order of the
 * experts, on how the work is split into calls, or on the thread count.
 * Rows not assigned are left untouched.
 *
 * Shared experts and dense MLPs use the same op: one expert that every
 * token uses, writing slot s of an out buffer with n_slots = n_shared.
 * Expert blobs are in moem_expert_layout(prec, H, I) layout at a 256-byte
 * aligned address; precisions may differ between experts of one call.
 * The experts and assignment arrays are host memory, read before the
 * call returns (the caller may reuse them at once).
 */
struct moem_ffn_assign {
	uint16_t token; /* row of x, < B */
	uint16_t slot;	/* output slot, < n_slots */
};

struct moem_ffn_expert {
	moem_dptr blob;
	enum moem_prec prec;
	uint32_t first; /* index of its first assignment */
	uint32_t n;	/* assignments, 1..MOEM_BE_MAX_TOKENS */
};

struct moem_ffn_args {
	uint32_t B, H, I; /* tokens in x; hidden; expert FFN width; H, I % 32 == 0 */
	uint32_t n_slots; /* rows per token in out (1..MOEM_BE_MAX_SLOTS) */
	moem_dptr x;	  /* bf16 [B][H] */
	moem_dptr out;	  /* f32 [B][n_slots][H] */
	uint32_t n_experts;
	const struct moem_ffn_expert *experts; /* host, [n_experts] */
	uint32_t n_assign;
	const struct moem_ffn_assign *assign; /* host, [n_assign] */
};
int moem_op_ffn(struct moem_backend *be, struct moem_stream *s, const struct moem_ffn_args *a);

/*
 * The grouped FFN of one MoE layer planned on the device, with no host
 * round trip: the experts and their (token, slot) pairs come from the
 * layer's routing where moem_op_route left it (ids, cnt) and from a
 * device-resident residency table, struct moem_res_entry[N]: where each
 * expert's blob is for this step, and its precision. Writes what
 * moem_op_ffn with the host's plan would (out: f32 [B][k][H]). A routed
 * expert whose entry has no blob is not computed: the u32 at status
 * (device memory) becomes 1 + its id if it was 0, for the host to check
 * after it synchronises. prec_mask: bit p set if entries may have
 * precision p. Optional: -EOPNOTSUPP where the backend plans on the host
 * only (moem_be_has_ffn_routed).
 */
struct moem_res_entry {
	moem_dptr blob;
	uint32_t prec; /* enum moem_prec */
	uint32_t pad;
};

struct moem_ffn_routed_args {
	uint32_t B, H, I; /* B <= MOEM_BE_MAX_TOKENS; H, I % 32 == 0 */
	uint32_t k, N;	  /* slots per token (top-k), experts */
	uint32_t prec_mask;
	moem_dptr x;	  /* bf16 [B][H] */
	moem_dptr out;	  /* f32 [B][k][H] */
	moem_dptr ids;	  /* i32 [B][k] */
	moem_dptr cnt;	  /* u32 [B] */
	moem_dptr table;  /* struct moem_res_entry [N] */
	moem_dptr status; /* u32 */
};
int moem_op_ffn_routed(struct moem_backend *be, struct moem_stream *s,
		       const struct moem_ffn_routed_args *a);
bool moem_be_has_ffn_routed(const struct moem_backend *be);

/*
 * Combine: h[t][i] += acc, where acc starts at +0.0f and, in this order,
 * adds w[t][j] * routed[t][j][i] for j < cnt[t] (product rounded, then
 * sum rounded: no FMA), then shared[t][s][i] for s < n_shared. Bitwise
 * identical on both backends. k == 0 skips the routed part (dense layer).
 */
struct moem_combine_args {
	uint32_t B, H;
	moem_dptr h;	  /* f32 [B][H], updated in place */
	uint32_t k;	  /* routed slots per token (0: none) */
	moem_dptr routed; /* f32 [B][k][H] */
	moem_dptr w;	  /* f32 [B][k] route weights */
	moem_dptr cnt;	  /* u32 [B] slots used */
	uint32_t n_shared;
	moem_dptr shared; /* f32 [B][n_shared][H] */
};
int moem_op_combine(struct moem_backend *be, struct moem_stream *s,
		    const struct moem_combine_args *a);

/*
 * Quantize a bf16 matrix [rows][cols] on the device into the quant.h
 * layout of prec (bf16: a copy). Byte-for-byte identical to
 * moem_quantize() (padding zeroed). The op first sets *status (u64 on the
 * device) to MOEM_QSTATUS_OK, then lowers it to the first failing group
 * as ((row_base + row) << 32) | (group << 4) | code, code 1 = non-finite
 * weight, 2 = scale or min overflows fp16. A failed quantization leaves
 * dst unusable (the caller must not publish it). Read it after the
 * stream passed the op; moem_quantize_status_error() turns it into a
 * message.
 */
#define MOEM_QSTATUS_OK	       UINT64_MAX
#define MOEM_QSTATUS_NONFINITE 1u
#define MOEM_QSTATUS_RANGE     2u

struct moem_quantize_args {
	enum moem_prec prec;
	uint32_t rows, cols;
	moem_dptr src; /* bf16 [rows][cols] */
	moem_dptr dst; /* moem_qmat_layout(prec, rows, cols).bytes */
	uint64_t dst_len;
	moem_dptr status;  /* u64 */
	uint32_t row_base; /* added to the row reported in status */
};
int moem_op_quantize(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_quantize_args *a);
/*
 * Quantize a whole bf16 expert blob (moem_expert_layout(BF16, H, I)) into
 * a blob of prec: three moem_op_quantize() calls; status as above, with
 * the row counted over gate, up, down in that order.
 */
int moem_op_quantize_expert(struct moem_backend *be, struct moem_stream *s, enum moem_prec prec,
			    uint32_t H, uint32_t I, moem_dptr src, moem_dptr dst, uint64_t dst_len,
			    moem_dptr status);
/* 0 for MOEM_QSTATUS_OK, else -ERANGE with a message naming row and group. */
int moem_quantize_status_error(uint64_t status);

/*
 * Histogram of router hits: counts[layer][ids[t][j]] += 1 for every token
 * t and slot j < cnt[t] with a valid id. Counts are u32 on the device;
 * read them once per interval (moem_be_dtoh) and clear them
 * (moem_be_memset). Integer atomics: exact on both backends.
 */
struct moem_hist_args {
	uint32_t B, k, N;
	uint32_t layer, n_layers;
	moem_dptr ids;	  /* i32 [B][k] */
	moem_dptr cnt;	  /* u32 [B] */
	moem_dptr counts; /* u32 [n_layers][N] */
};
int moem_op_histogram(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_hist_args *a);

/* ---- full-decode ops (decode.h) ------------------------------------------
 *
 * The attention half of a layer, the embedding and lm_head. Each row
 * (token, or token and head) is computed by one thread in a fixed order,
 * so results do not depend on the batch a row is part of or the thread
 * count: decoding a sequence alone or in a batch gives the same bits.
 * Backends without a kernel for one of these return -EOPNOTSUPP with a
 * message naming the op (Documentation/backends.md lists which exist).
 */

/* h[t][:] = float(table[ids[t]][:]) (bf16 table). ids are checked < V. */
struct moem_embed_args {
	uint32_t B, H, V;
	moem_dptr ids;	 /* i32 [B] */
	moem_dptr table; /* bf16 [V][H] */
	moem_dptr h;	 /* f32 [B][H] */
};
int moem_op_embed(struct moem_backend *be, struct moem_stream *s, const struct moem_embed_args *a);

/*
 * Dense projection: y[t][r] = sum_i x[t][i] * W[r][i], fp32 accumulation
 * (the router's numerics without its size limits): attention
 * projections, MLA's down/up projections, lm_head.
 * prec: W's format. MOEM_PREC_BF16 (0, the default): bf16 [R][K].
 * Otherwise W is one matrix in moem_qmat_layout(prec, R, K) (K a
 * multiple of the group), the same bytes on both backends. The CPU
 * backend quantizes x per token as its expert FFN does (its scalar table:
 * fp32 x); the CUDA backend dequantizes each weight as
 * moem_dequantize_row() does and multiplies it with the bf16 x in fp32.
 */
struct moem_matmul_args {
	uint32_t B, K, R; /* tokens, input width (% 8 == 0), output rows */
	moem_dptr x;	  /* bf16 [B][K] */
	moem_dptr w;	  /* bf16 [R][K], or the quantized matrix */
	moem_dptr y;	  /* f32 [B][R] */
	enum moem_prec prec;
};
int moem_op_matmul(struct moem_backend *be, struct moem_stream *s,
		   const struct moem_matmul_args *a);

/*
 * RMSNorm of rows of a f32 matrix, in place or into bf16:
 * row r = x + r * x_stride (n floats); y = (x * rsqrt(mean(x^2) + eps)) * w,
 * the mean in double as moem_op_rmsnorm. q_norm/k_norm (per head or over
 * the whole projection) and MLA's q_a/kv_a layernorms.
 */
struct moem_rownorm_args {
	uint32_t rows, n;
	uint32_t x_stride, y_stride; /* floats / elements between rows */
	float eps;
	moem_dptr x;	  /* f32 */
	moem_dptr weight; /* bf16 [n] */
	moem_dptr y;	  /* f32 (may be x) or bf16 */
	bool y_bf16;
};
int moem_op_rownorm(struct moem_backend *be, struct moem_stream *s,
		    const struct moem_rownorm_args *a);

/*
 * Convert rows of f32 to bf16 (y_bf16) or copy them as f32, clamping to
 * [-clip, clip] when clip > 0: x row r at x + r * x_stride, y row r at
 * y + r * y_stride, n values each. OLMoE's clip_qkv, attention outputs
 * into o_proj, and MLA's rearrangements.
 */
struct moem_convert_args {
	uint32_t rows, n, x_stride, y_stride;
	float clip;
	moem_dptr x; /* f32 */
	moem_dptr y; /* bf16 or f32; may equal x when both are f32 */
	bool y_bf16;
};
int moem_op_convert(struct moem_backend *be, struct moem_stream *s,
		    const struct moem_convert_args *a);

/*
 * RoPE in place on T tokens x n_heads heads: the dim values at
 * x + t * tok_stride + h * head_stride + off are rotated by the angles
 * of position pos[t]: cos/sin[pos][i] for i < dim / 2. pairs: (x[2i],
 * x[2i+1]) as a complex number (DeepSeek); else (x[i], x[i + dim/2])
 * (rotate_half: Qwen3, Mixtral, OLMoE).
 */
struct moem_rope_args {
	uint32_t T, n_heads, tok_stride, head_stride, off, dim;
	bool pairs;
	uint32_t n_pos;	    /* rows of the tables */
	moem_dptr x;	    /* f32 */
	moem_dptr pos;	    /* i32 [T], each < n_pos */
	moem_dptr cos, sin; /* f32 [n_pos][dim / 2] */
};
int moem_op_rope(struct moem_backend *be, struct moem_stream *s, const struct moem_rope_args *a);

/*
 * Per-head projection (MLA's absorbed kv_b_proj): for token t, head h,
 *   y[t][h][o] = sum_i x[t][h][i] * W_h[o][i]      (!transpose)
 *   y[t][h][o] = sum_i x[t][h][i] * W_h[i][o]      (transpose)
 * W_h = w + h * w_head_stride (bf16 elements, row stride w_row_stride),
 * x[t][h] = x + t * x_tok_stride + h * x_head_stride (f32), y likewise.
 */
struct moem_head_matmul_args {
	uint32_t T, n_heads, in_dim, out_dim;
	bool transpose;
	moem_dptr x;
	uint32_t x_tok_stride, x_head_stride;
	moem_dptr w;
	uint64_t w_head_stride;
	uint32_t w_row_stride;
	moem_dptr y;
	uint32_t y_tok_stride, y_head_stride;
};
int moem_op_head_matmul(struct moem_backend *be, struct moem_stream *s,
			const struct moem_head_matmul_args *a);

/*
 * Paged KV cache, f32: block b of the pool holds, for each of n_layers
 * layers, block_tokens entries of entry floats; token j of a sequence
 * lives in block table[j / block_tokens], slot j % block_tokens. Store
 * writes src row t (entry floats at src + t * src_stride) as the entry
 * of position pos[t] of the sequence whose block table starts at
 * tables + tab[t] (i32 block ids).
 */
struct moem_kv_geom {
	moem_dptr pool;
	uint32_t n_blocks, n_layers, block_tokens, entry;
	uint32_t layer;
	moem_dptr tables; /* i32 block ids */
};

struct moem_kv_store_args {
	struct moem_kv_geom kv;
	uint32_t T, src_stride;
	moem_dptr src; /* f32 */
	moem_dptr pos; /* i32 [T] */
	moem_dptr tab; /* u32 [T] offset of each token's block table in tables */
};
int moem_op_kv_store(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_kv_store_args *a);

/*
 * Attention over the paged cache for T query tokens, each of its own
 * sequence and position: token t, head h (kv head g = h / (n_heads /
 * n_kv_heads)) attends the keys of positions j, lo <= j <= pos[t]
 * (lo = pos - window + 1 with a sliding window, else 0):
 *   s_j = scale * q . K_j,  p = softmax(s),  out = sum_j p_j V_j
 * q head h at q + t * q_stride + h * qk_dim; K_j head g at entry offset
 * k_off + g * qk_dim, V_j at v_off + g * v_dim (MLA: one kv head whose
 * value is the prefix of its key, the compressed latent). Softmax with
 * the max subtracted, sums in fixed key order; on the GPU the keys are
 * split across blocks and merged (flash-decoding).
 */
struct moem_attn_args {
	struct moem_kv_geom kv;
	uint32_t T, n_heads, n_kv_heads, qk_dim, v_dim, k_off, v_off;
	uint32_t q_stride;
	uint32_t window; /* 0: none */
	float scale;
	moem_dptr q;   /* f32 */
	moem_dptr pos; /* i32 [T] */
	moem_dptr tab; /* u32 [T] */
	moem_dptr out; /* f32 [T][n_heads][v_dim] */
};
int moem_op_attention(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_attn_args *a);

#endif /* MOEM_BACKEND_H */
