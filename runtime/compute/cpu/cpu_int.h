/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The CPU backend's internals: handles, per-stream scratch, and the
 * fixed-order vector kernels every op builds on. These files are compiled
 * with -ffp-contract=off (mk/backend.mk) so that a*b+c is always two
 * roundings on every architecture: results are bitwise reproducible and
 * the combine op matches the CUDA kernel exactly.
 */
#ifndef MOEM_CPU_INT_H
#define MOEM_CPU_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include <moem/half.h>
#include <moem/util.h>

#include "../backend/backend_int.h"
#include "tpool.h"

struct cpu_stream {
	struct moem_stream base;
	void *scratch; /* grown on demand; ops on one stream never overlap */
	size_t cap;
};

struct cpu_event {
	struct moem_event base;
	uint64_t ns;
	int recorded;
};

struct moem_cpu_kern;

/* What CPUID and XGETBV say (isa.c). */
struct moem_cpu_feat {
	bool avx, avx2, fma, f16c;
	bool avx512f, avx512bw, avx512vl, avx512bf16, avx512vnni;
	bool gfni;
	bool amx_tile, amx_bf16, amx_int8;
	bool os_avx, os_avx512, os_amx; /* XCR0: the OS saves that state */
};
void moem_cpu_features(struct moem_cpu_feat *f);

#define MOEM_CPU_MAX_CPUS 1024
#define MOEM_CPU_NODE_ANY 0xffffu

/*
 * The CPUs this process may use, grouped by NUMA node (numa.c). Nodes are
 * numbered densely (0..n_nodes-1, node_id[] the system's numbers);
 * cpu[] lists the CPUs round-robin over the nodes, so the first n of
 * them spread evenly, which is how workers are placed.
 */
struct moem_cpu_topo {
	uint32_t n_nodes, n_cpus;
	int node_id[MOEM_TPOOL_MAX_NODES];
	int cpu[MOEM_CPU_MAX_CPUS];
	uint16_t node[MOEM_CPU_MAX_CPUS];
};
/* From libnuma (one node when it reports none). */
void moem_cpu_topo_detect(struct moem_cpu_topo *t);
/* Dense node index of the page at addr under t, or MOEM_CPU_NODE_ANY. */
uint16_t moem_cpu_topo_node_of(const struct moem_cpu_topo *t, const void *addr);

/*
 * Test hooks (internal): a kernel table instead of the ISA's, a made-up
 * topology (its CPUs are not pinned to) and a made-up page -> node map
 * returning a dense node index. Any may be NULL.
 */
struct moem_cpu_hooks {
	const struct moem_cpu_kern *kern;
	const struct moem_cpu_topo *topo;
	uint16_t (*node_of)(const void *addr, void *arg);
	void *node_arg;
};
int moem_cpu_backend_open_hooks(const struct moem_backend_opts *opts,
				const struct moem_cpu_hooks *hooks, struct moem_backend **out);
/*
 * FFN work items (blocks of rows) run so far by workers of node w on
 * experts whose pages are on node e (e == n_nodes: node unknown).
 */
uint64_t moem_cpu_backend_node_items(struct moem_backend *be, uint32_t w, uint32_t e);

struct cpu_backend {
	struct moem_backend base;
	struct moem_tpool *pool;
	struct cpu_stream dflt;
	const struct moem_cpu_kern *kern;
	struct moem_cpu_topo topo;
	struct moem_cpu_hooks hooks;
	_Atomic uint64_t *node_items; /* [n_nodes][n_nodes + 1] */
};

/* Dense node of an expert blob's pages (hooks, else libnuma). */
uint16_t moem_cpu_node_of(struct cpu_backend *c, const void *addr);

static inline struct cpu_backend *cpu_of(struct moem_backend *be)
{
	return (struct cpu_backend *)be;
}

/*
 * Scratch memory of at least bytes for the op running on s, 64-byte
 * aligned; NULL (and -ENOMEM recorded) if it cannot grow. Valid until the
 * next call on the same stream.
 */
void *moem_cpu_scratch(struct moem_stream *s, size_t bytes);

/* Ops (cpu/<op>.c), called by the ops table after backend.c's checks. */
int moem_cpu_rmsnorm(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_rmsnorm_args *a);
int moem_cpu_router(struct moem_backend *be, struct moem_stream *s,
		    const struct moem_router_args *a);
int moem_cpu_route(struct moem_backend *be, struct moem_stream *s, const struct moem_route_args *a);
int moem_cpu_ffn(struct moem_backend *be, struct moem_stream *s, const struct moem_ffn_args *a);
int moem_cpu_combine(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_combine_args *a);
int moem_cpu_quantize(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_quantize_args *a);
int moem_cpu_histogram(struct moem_backend *be, struct moem_stream *s,
		       const struct moem_hist_args *a);

/* Full decode (decode_ops.c, attention.c). */
int moem_cpu_embed(struct moem_backend *be, struct moem_stream *s, const struct moem_embed_args *a);
int moem_cpu_matmul(struct moem_backend *be, struct moem_stream *s,
		    const struct moem_matmul_args *a);
int moem_cpu_rownorm(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_rownorm_args *a);
int moem_cpu_convert(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_convert_args *a);
int moem_cpu_rope(struct moem_backend *be, struct moem_stream *s, const struct moem_rope_args *a);
int moem_cpu_head_matmul(struct moem_backend *be, struct moem_stream *s,
			 const struct moem_head_matmul_args *a);
int moem_cpu_kv_store(struct moem_backend *be, struct moem_stream *s,
		      const struct moem_kv_store_args *a);
int moem_cpu_attention(struct moem_backend *be, struct moem_stream *s,
		       const struct moem_attn_args *a);

/* xf[t][:] = float(x[t][:]) for t < B, on the pool (router.c). */
void moem_cpu_convert_x(struct moem_tpool *pool, const uint16_t *x, float *xf, uint32_t B,
			uint32_t H);

/* ---- fixed-order vector helpers ------------------------------------------ */

/*
 * Hot row functions get an AVX2 clone on x86-64, picked at load time. The
 * clones run the same operations in the same order (no FMA: the files
 * are built with -ffp-contract=off), so results do not depend on the CPU.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MOEM_CPU_X86_GCC   1
#define MOEM_CPU_CLONES	   __attribute__((target_clones("avx2", "default")))
/* The same with an AVX-512 clone too, for code written 16 floats wide. */
#define MOEM_CPU_CLONES512 __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MOEM_CPU_X86_GCC 0
#define MOEM_CPU_CLONES
#define MOEM_CPU_CLONES512
#endif

typedef float v8f __attribute__((vector_size(32)));

#if MOEM_CPU_X86_GCC
#include <immintrin.h>

/*
 * 8 bf16 values at p (exact) as floats, for the AVX2 forms written with
 * target("avx2") in files built for any x86-64 (router.c, decode_ops.c):
 * one widening load and a shift, where GCC's vector-extension code for
 * the same took four instructions.
 */
__attribute__((target("avx2"))) static inline __m256 moem_cpu_bf16x8_avx2(const uint16_t *p)
{
	return _mm256_castsi256_ps(
		_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
#endif

/* o[i] = silu(g[i]) * u[i] for i < n, the same bits in every build (ffn.c). */
void moem_cpu_swiglu(const float *g, const float *u, float *o, uint32_t n);

/*
 * The activation quantizer's block statistics (ffn.c): amax[j] (the
 * largest |value|, a NaN sticking) and sum[j] (in element order) of the
 * 64-value blocks blk + j of the row at x, j < n <= MOEM_CPU_QSTAT, in
 * form, or the best this CPU has where it lacks form (BEST: the best);
 * returns the form it used. amax and sum hold MOEM_CPU_QSTAT values
 * (those from n on are left undefined). Every form gives the same
 * values (a NaN sum's sign may differ).
 */
#define MOEM_CPU_QSTAT 16
enum moem_cpu_stats_form {
	MOEM_CPU_STATS_PLAIN,
	MOEM_CPU_STATS_AVX2,
	MOEM_CPU_STATS_AVX512,
	MOEM_CPU_STATS_BEST,
};
enum moem_cpu_stats_form moem_cpu_block_stats(const float *x, uint32_t blk, uint32_t n, float *amax,
					      float *sum, enum moem_cpu_stats_form form);

/* Macros, not functions: a 32-byte vector in a function signature changes
 * the ABI between builds with and without AVX (gcc -Wpsabi). */
#define V8_LOAD(v, p) memcpy(&(v), (p), sizeof(v))
/* ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7)): one fixed order. */
#define V8_HSUM(v) \
	((((v)[0] + (v)[1]) + ((v)[2] + (v)[3])) + (((v)[4] + (v)[5]) + ((v)[6] + (v)[7])))

/*
 * Dot product of n floats, n % 8 == 0: lane j of two 8-wide accumulators
 * sums elements i = j (mod 8) alternately, then the accumulators are
 * added and reduced by V8_HSUM(). The order depends only on n.
 */
static inline float dot_f32(const float *a, const float *b, uint32_t n)
{
	v8f acc0 = {0}, acc1 = {0}, x0, y0, x1, y1;
	uint32_t i = 0;

	for (; i + 16 <= n; i += 16) {
		V8_LOAD(x0, a + i);
		V8_LOAD(y0, b + i);
		V8_LOAD(x1, a + i + 8);
		V8_LOAD(y1, b + i + 8);
		acc0 += x0 * y0;
		acc1 += x1 * y1;
	}
	if (i < n) {
		V8_LOAD(x0, a + i);
		V8_LOAD(y0, b + i);
		acc0 += x0 * y0;
	}
	acc0 += acc1;
	return V8_HSUM(acc0);
}

/* out[i] = float(bf16 in[i]): exact. */
static inline void bf16_to_f32_row(const uint16_t *in, float *out, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t u = (uint32_t)in[i] << 16;

		memcpy(&out[i], &u, sizeof(u));
	}
}

#endif /* MOEM_CPU_INT_H */
