// SPDX-License-Identifier: GPL-2.0-only
/*
 * Kernel benchmarks at Qwen3-30B-A3B shapes (H 2048, I 768, N 128, k 8),
 * synthetic weights and activations, on one backend:
 *
 *  1. copy: device-to-device copy bandwidth (cuMemcpyDtoD on CUDA; on the
 *     CPU a memcpy split over the backend's thread count), measured in this
 *     run: the peer the FFN is compared with. A copy reads and writes, so
 *     its memory traffic (2 x bytes / s) is what a read-only kernel can
 *     reach.
 *  2. ffn: grouped expert FFN, every expert of a call taking B tokens, for
 *     B = 1, 4, 16, 64 and each precision; weight bytes read per second,
 *     and that as a fraction of the copy traffic. Calls alternate between
 *     two expert sets larger than the last-level cache.
 *  3. layer: rmsnorm -> router -> route (topk, lynx, oea) -> FFN of the
 *     experts chosen -> combine at B = 1, 4, 16, 64, timed per op; the
 *     router + re-routing share of the layer.
 *  4. decode: the full-decode ops (backend.h): lm_head and attention
 *     projections as GEMV/GEMM, split-KV attention decoding B = 1 and 8
 *     sequences at contexts 512, 4096 and (GPU) 32768, GQA and MLA, and
 *     prefill chunks, and the small ops of a decode step; weight and KV bytes read
 *     per second as a fraction of the copy traffic.
 *
 * Prints a table and RESULT key=value lines (also written to --out).
 *   bench_kernels [--backend cpu|cuda] [--threads N] [--isa ISA] [--quick] [--smoke]
 *                 [--out FILE] [--ffn-reps N] [--ffn-prec LIST]
 * --ffn-reps N: each FFN row the median of N timed repetitions (1-64),
 * for ranking two close kernels on a shared, noisy machine.
 * --ffn-prec LIST: the FFN rows of these precisions only ("q8,q2"), also
 * with --quick (which else takes bf16 and q4): to rank one precision's
 * kernels without the whole run.
 * --smoke: a tiny shape (H 256, I 128), two experts, B = 1 and 4, bf16 and
 * q4, no peers and no layer section: proves the program and its output on
 * the kernel emulator, measures nothing.
 * On the CPU also: a read-only streaming peer and register-only peak
 * loops (section 1b), each FFN row as a fraction of both.
 * Exit 4 when the backend is absent (no CUDA device: skip).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/backend.h>
#include <moem/error.h>
#include <moem/util.h>

#include "../../tests/unit/test_backend_util.h"

/* The FFN shape: Qwen3-30B-A3B's, or a tiny one with --smoke. */
static uint32_t ffn_h = 2048, ffn_i = 768;
#define QN 128
#define QK 8

static const uint32_t batches[] = {1, 4, 16, 64};
/* --ffn-rt R: the FFN rows only, B <= 16, keys ffn_<prec>_B<B>_rt<R>_* */
static char rt_tag[16];

/* Run x unless an earlier step failed (ret holds the first error). */
#define STEP(x)                    \
	do {                       \
		if (!ret)          \
			ret = (x); \
	} while (0)
static FILE *out_file;
static int quick, smoke, ffn_reps;
static uint32_t ffn_precs; /* 1 << prec; 0: all (bf16 and q4 if quick) */

static void result(const char *key, double v)
{
	printf("RESULT %s=%.4g\n", key, v);
	if (out_file)
		fprintf(out_file, "%s=%.6g\n", key, v);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Seconds of work between two events (CUDA) or host clock (CPU: ops are synchronous). */
struct timer {
	struct moem_backend *be;
	struct moem_event *a, *b;
	uint64_t t0;
};

static int timer_start(struct timer *t)
{
	t->t0 = moem_now_ns();
	return moem_be_event_record(t->be, t->a, NULL);
}

static int timer_stop(struct timer *t, double *sec)
{
	float ms;
	int ret = moem_be_event_record(t->be, t->b, NULL);

	if (!ret)
		ret = moem_be_event_sync(t->be, t->b);
	if (!ret)
		ret = moem_be_event_elapsed(t->be, t->a, t->b, &ms);
	if (ret)
		return ret;
	*sec = moem_backend_kind(t->be) == MOEM_BACKEND_CUDA ? ms / 1e3
							     : (moem_now_ns() - t->t0) / 1e9;
	return 0;
}

/* ---- 1. copy bandwidth ---------------------------------------------------- */

/* On the CPU backend a device pointer is the host address (backend.h). */
static uint8_t *cpu_ptr(moem_dptr p)
{
	return (uint8_t *)(uintptr_t)p;
}

struct mc_job {
	uint8_t *dst;
	const uint8_t *src;
	size_t n;
};

static void *mc_run(void *v)
{
	struct mc_job *j = v;

	memcpy(j->dst, j->src, j->n);
	return NULL;
}

/* memcpy of bytes split over n threads (the CPU backend's parallelism). */
static double host_copy_seconds(uint8_t *dst, const uint8_t *src, size_t bytes, uint32_t n)
{
	pthread_t th[256];
	struct mc_job jobs[256];
	uint64_t t0 = moem_now_ns();

	for (uint32_t i = 0; i < n; i++) {
		size_t a = bytes * i / n, b = bytes * (i + 1) / n;

		jobs[i] = (struct mc_job){dst + a, src + a, b - a};
		if (i && pthread_create(&th[i], NULL, mc_run, &jobs[i]))
			mc_run(&jobs[i]), th[i] = 0;
	}
	mc_run(&jobs[0]);
	for (uint32_t i = 1; i < n; i++)
		if (th[i])
			pthread_join(th[i], NULL);
	return (moem_now_ns() - t0) / 1e9;
}

static int bench_copy(struct moem_backend *be, struct timer *tm, double *copy, double *traffic)
{
	struct moem_backend_info info;
	uint64_t bytes;
	moem_dptr a, b;
	double s[10], gbps;
	int reps = smoke ? 1 : quick ? 3 : 10, ret;

	moem_backend_get_info(be, &info);
	bytes = smoke				 ? (16ull << 20)
		: info.kind == MOEM_BACKEND_CUDA ? (1ull << 30)
						 : (256ull << 20);
	if ((ret = moem_be_alloc(be, bytes, &a)) || (ret = moem_be_alloc(be, bytes, &b)))
		return ret;
	moem_be_memset(be, a, 1, bytes, NULL);
	moem_be_memset(be, b, 2, bytes, NULL);
	for (int r = 0; r < reps + 1; r++) {
		if (info.kind == MOEM_BACKEND_CUDA) {
			if ((ret = timer_start(tm)) ||
			    (ret = moem_be_dtod(be, b, a, bytes, NULL)) ||
			    (ret = timer_stop(tm, &s[r ? r - 1 : 0])))
				return ret;
		} else {
			s[r ? r - 1 : 0] =
				host_copy_seconds(cpu_ptr(b), cpu_ptr(a), bytes, info.threads);
		}
	}
	gbps = bytes / median(s, reps) / 1e9;
	*copy = gbps;
	*traffic = 2 * gbps;
	printf("copy: %s %.1f GB/s copied, %.1f GB/s traffic (read + write), %u thread%s\n",
	       info.kind == MOEM_BACKEND_CUDA ? "cuMemcpyDtoD" : "memcpy", gbps, *traffic,
	       info.kind == MOEM_BACKEND_CUDA ? 1 : info.threads,
	       info.kind == MOEM_BACKEND_CUDA || info.threads == 1 ? "" : "s");
	result("copy_gbps", gbps);
	result("copy_traffic_gbps", *traffic);
	if (info.kind == MOEM_BACKEND_CPU) {
		double s1[10];

		for (int r = 0; r < reps; r++)
			s1[r] = host_copy_seconds(cpu_ptr(b), cpu_ptr(a), bytes, 1);
		result("copy_1thread_gbps", bytes / median(s1, reps) / 1e9);
	}
	moem_be_free(be, a);
	moem_be_free(be, b);
	return 0;
}

/* ---- 1b. CPU peers: read-only streaming, and register-only peaks ---------- */

/*
 * The peers of the CPU FFN, run on as many threads as the backend has,
 * each pinned to one of the CPUs this process may use (as the backend's
 * workers are):
 *  - read: every thread sums its slice of a buffer far larger than the
 *    last-level cache with the widest loads the ISA has: the memory limit
 *    of a batch-1 GEMV, which reads each weight once;
 *  - peak: register-only loops of the instruction the FFN's inner loop is
 *    built on, 12 independent chains: FMA (fp32, bf16 on AVX2), vdpbf16ps
 *    (bf16 on AVX-512), vpmaddubsw + vpmaddwd (int8 on AVX2), vpdpbusd
 *    (int8 on AVX-512); TDPBF16PS and TDPBUSD into 4 tiles (bf16 and
 *    int8 on amx: its q8/q4/q2 take TDPBUSD from 4 tokens, vpdpbusd
 *    below). Operations count 2 per multiply-add.
 */
struct peer_job {
	int kind; /* 0 read, 1 fma, 2 dpbf16, 3 maddubs, 4 dpbusd, 5 tdpbf16, 6 tdpbusd */
	const uint8_t *p;
	size_t n;
	uint64_t iters;
	int cpu;
	double sink;
};

__attribute__((target("avx2"))) static double read_avx2(const uint8_t *p, size_t n)
{
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;

	for (size_t i = 0; i + 128 <= n; i += 128) {
		a0 = _mm256_add_epi64(a0,
				      _mm256_load_si256((const __m256i *)(const void *)(p + i)));
		a1 = _mm256_add_epi64(
			a1, _mm256_load_si256((const __m256i *)(const void *)(p + i + 32)));
		a2 = _mm256_add_epi64(
			a2, _mm256_load_si256((const __m256i *)(const void *)(p + i + 64)));
		a3 = _mm256_add_epi64(
			a3, _mm256_load_si256((const __m256i *)(const void *)(p + i + 96)));
	}
	a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
	return (double)_mm256_extract_epi64(a0, 0);
}

__attribute__((target("avx512f"))) static double read_avx512(const uint8_t *p, size_t n)
{
	__m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;

	for (size_t i = 0; i + 256 <= n; i += 256) {
		a0 = _mm512_add_epi64(a0, _mm512_load_si512((const void *)(p + i)));
		a1 = _mm512_add_epi64(a1, _mm512_load_si512((const void *)(p + i + 64)));
		a2 = _mm512_add_epi64(a2, _mm512_load_si512((const void *)(p + i + 128)));
		a3 = _mm512_add_epi64(a3, _mm512_load_si512((const void *)(p + i + 192)));
	}
	a0 = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
	return (double)_mm512_reduce_add_epi64(a0);
}

#define CHAINS12(op)           \
	do {                   \
		c0 = op(c0);   \
		c1 = op(c1);   \
		c2 = op(c2);   \
		c3 = op(c3);   \
		c4 = op(c4);   \
		c5 = op(c5);   \
		c6 = op(c6);   \
		c7 = op(c7);   \
		c8 = op(c8);   \
		c9 = op(c9);   \
		c10 = op(c10); \
		c11 = op(c11); \
	} while (0)

/*
 * The chains' registers opaque to the compiler after each round: twelve
 * chains from equal starts under equal operations are one value, and
 * GCC 12 kept one instruction a round of each loop below (a latency-bound
 * chain counted as twelve: every "of peak" column before this was taken
 * against that). The starts differ too.
 */
#define CHAINS12_OPAQUE(con)                                                                \
	__asm__ volatile(""                                                                 \
			 : "+" con(c0), "+" con(c1), "+" con(c2), "+" con(c3), "+" con(c4), \
			   "+" con(c5), "+" con(c6), "+" con(c7), "+" con(c8), "+" con(c9), \
			   "+" con(c10), "+" con(c11))

__attribute__((target("avx2,fma"))) static double peak_fma(uint64_t iters)
{
	__m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-3f);
	__m256 c0 = _mm256_set1_ps(0), c1 = _mm256_set1_ps(1), c2 = _mm256_set1_ps(2),
	       c3 = _mm256_set1_ps(3), c4 = _mm256_set1_ps(4), c5 = _mm256_set1_ps(5),
	       c6 = _mm256_set1_ps(6), c7 = _mm256_set1_ps(7), c8 = _mm256_set1_ps(8),
	       c9 = _mm256_set1_ps(9), c10 = _mm256_set1_ps(10), c11 = _mm256_set1_ps(11);
#define FMA(c) _mm256_fmadd_ps(c, x, y)
	for (uint64_t i = 0; i < iters; i++) {
		CHAINS12(FMA);
		CHAINS12_OPAQUE("x");
	}
#undef FMA
	c0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
			   _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
	c0 = _mm256_add_ps(c0, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
	return _mm256_cvtss_f32(c0);
}

__attribute__((target("avx2"))) static double peak_maddubs(uint64_t iters)
{
	__m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2), one = _mm256_set1_epi16(1);
	__m256i c0 = _mm256_set1_epi32(0), c1 = _mm256_set1_epi32(1), c2 = _mm256_set1_epi32(2),
		c3 = _mm256_set1_epi32(3), c4 = _mm256_set1_epi32(4), c5 = _mm256_set1_epi32(5),
		c6 = _mm256_set1_epi32(6), c7 = _mm256_set1_epi32(7), c8 = _mm256_set1_epi32(8),
		c9 = _mm256_set1_epi32(9), c10 = _mm256_set1_epi32(10), c11 = _mm256_set1_epi32(11);
/* a opaque before each chain's products: one product for all twelve otherwise */
#define DOT(c)                                                                           \
	({                                                                               \
		__asm__ volatile("" : "+x"(a));                                          \
		_mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), one)); \
	})
	for (uint64_t i = 0; i < iters; i++) {
		CHAINS12(DOT);
		CHAINS12_OPAQUE("x");
		__asm__ volatile("" : "+x"(a), "+x"(b)); /* keep the products in the loop */
	}
#undef DOT
	c0 = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)),
			      _mm256_add_epi32(_mm256_add_epi32(c4, c5), _mm256_add_epi32(c6, c7)));
	c0 = _mm256_add_epi32(
		c0, _mm256_add_epi32(_mm256_add_epi32(c8, c9), _mm256_add_epi32(c10, c11)));
	return (double)_mm256_extract_epi32(c0, 0);
}

__attribute__((target("avx512f,avx512bf16"))) static double peak_dpbf16(uint64_t iters)
{
	__m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = a;
	__m512 c0 = _mm512_set1_ps(0), c1 = _mm512_set1_ps(1), c2 = _mm512_set1_ps(2),
	       c3 = _mm512_set1_ps(3), c4 = _mm512_set1_ps(4), c5 = _mm512_set1_ps(5),
	       c6 = _mm512_set1_ps(6), c7 = _mm512_set1_ps(7), c8 = _mm512_set1_ps(8),
	       c9 = _mm512_set1_ps(9), c10 = _mm512_set1_ps(10), c11 = _mm512_set1_ps(11);
#define DP(c) _mm512_dpbf16_ps(c, a, b)
	for (uint64_t i = 0; i < iters; i++) {
		CHAINS12(DP);
		CHAINS12_OPAQUE("v");
	}
#undef DP
	c0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
			   _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
	c0 = _mm512_add_ps(c0, _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
	return _mm512_reduce_add_ps(c0);
}

__attribute__((target("avx512f,avx512vnni"))) static double peak_dpbusd(uint64_t iters)
{
	__m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
	__m512i c0 = _mm512_set1_epi32(0), c1 = _mm512_set1_epi32(1), c2 = _mm512_set1_epi32(2),
		c3 = _mm512_set1_epi32(3), c4 = _mm512_set1_epi32(4), c5 = _mm512_set1_epi32(5),
		c6 = _mm512_set1_epi32(6), c7 = _mm512_set1_epi32(7), c8 = _mm512_set1_epi32(8),
		c9 = _mm512_set1_epi32(9), c10 = _mm512_set1_epi32(10), c11 = _mm512_set1_epi32(11);
#define DP(c) _mm512_dpbusd_epi32(c, a, b)
	for (uint64_t i = 0; i < iters; i++) {
		CHAINS12(DP);
		CHAINS12_OPAQUE("v");
	}
#undef DP
	c0 = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)),
			      _mm512_add_epi32(_mm512_add_epi32(c4, c5), _mm512_add_epi32(c6, c7)));
	c0 = _mm512_add_epi32(
		c0, _mm512_add_epi32(_mm512_add_epi32(c8, c9), _mm512_add_epi32(c10, c11)));
	return (double)_mm512_reduce_add_epi32(c0);
}

/*
 * The amx table's instructions: 4 independent C tiles (16 x 16) each
 * taking A x B per instruction. A peer thread of its own (the process
 * was granted the tile state when the backend opened), so its tile
 * configuration touches no worker's.
 */
struct peak_tilecfg {
	uint8_t palette, start_row, reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};

/*
 * bf16 (int8 false): TDPBF16PS, A 16 x 32 bf16 x B 32 x 16, 16 x 16 x 32
 * multiply-adds; int8: TDPBUSD (kern_amx_q.c from 4 tokens), A 16 x 64
 * bytes x B 64 x 16, 16 x 16 x 64.
 */
__attribute__((target("amx-tile,amx-bf16,amx-int8"))) static double peak_tiles(uint64_t iters,
									       bool int8)
{
	struct peak_tilecfg cfg = {.palette = 1};
	int32_t out[16 * 16];

	for (int t = 0; t < 8; t++) {
		cfg.colsb[t] = 64;
		cfg.rows[t] = 16;
	}
	/* not _tile_loadconfig(): GCC 12's asm names only 8 of its 64 bytes (kern_amx.c) */
	__asm__ volatile("ldtilecfg %0" ::"m"(cfg));
	_tile_zero(0);
	_tile_zero(1);
	_tile_zero(2);
	_tile_zero(3);
	_tile_zero(4);
	_tile_zero(5);
	_tile_zero(6);
	_tile_zero(7);
	for (uint64_t i = 0; int8 && i < iters; i++) {
		_tile_dpbusd(0, 4, 6);
		_tile_dpbusd(1, 4, 7);
		_tile_dpbusd(2, 5, 6);
		_tile_dpbusd(3, 5, 7);
	}
	for (uint64_t i = 0; !int8 && i < iters; i++) {
		_tile_dpbf16ps(0, 4, 6);
		_tile_dpbf16ps(1, 4, 7);
		_tile_dpbf16ps(2, 5, 6);
		_tile_dpbf16ps(3, 5, 7);
	}
	_tile_stored(0, out, 64);
	_tile_release();
	return out[0];
}

static void *peer_run(void *v)
{
	struct peer_job *j = v;

	if (j->cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(j->cpu, &set);
		sched_setaffinity(0, sizeof(set), &set);
	}
	switch (j->kind) {
	case 0:
		j->sink = __builtin_cpu_supports("avx512f") ? read_avx512(j->p, j->n)
							    : read_avx2(j->p, j->n);
		break;
	case 1:
		j->sink = peak_fma(j->iters);
		break;
	case 2:
		j->sink = peak_dpbf16(j->iters);
		break;
	case 3:
		j->sink = peak_maddubs(j->iters);
		break;
	case 5:
		j->sink = peak_tiles(j->iters, false);
		break;
	case 6:
		j->sink = peak_tiles(j->iters, true);
		break;
	default:
		j->sink = peak_dpbusd(j->iters);
		break;
	}
	return NULL;
}

/*
 * The CPUs the process may run on, taken in main() before the backend's
 * first job: the CPU backend's pool takes its workers' CPUs out of a
 * caller's mask when it finds the caller on one (tpool.c), so this
 * thread's mask later may be a single CPU, and peers started from it
 * would share that CPU (a peak measured at half the machine's).
 */
static cpu_set_t peer_cpus;
static int peer_cpus_known;

/* Seconds for kind on n pinned threads (each reads bytes / n, or runs iters). */
static double peer_seconds(int kind, const uint8_t *buf, size_t bytes, uint64_t iters, uint32_t n)
{
	pthread_t th[256];
	struct peer_job jobs[256];
	int cpus[256], nc = 0;
	uint64_t t0;

	if (peer_cpus_known)
		for (int c = 0; c < CPU_SETSIZE && nc < 256; c++)
			if (CPU_ISSET(c, &peer_cpus))
				cpus[nc++] = c;
	t0 = moem_now_ns();
	for (uint32_t i = 0; i < n; i++) {
		size_t a = (bytes / n * i) & ~(size_t)255, b = (bytes / n * (i + 1)) & ~(size_t)255;

		jobs[i] = (struct peer_job){
			kind, buf + a, b - a, iters, n <= (uint32_t)nc ? cpus[i] : -1, 0};
		if (pthread_create(&th[i], NULL, peer_run, &jobs[i]))
			peer_run(&jobs[i]), th[i] = 0;
	}
	for (uint32_t i = 0; i < n; i++)
		if (th[i])
			pthread_join(th[i], NULL);
	return (moem_now_ns() - t0) / 1e9;
}

/*
 * What the CPU FFN of each precision is compared with, per the backend's
 * ISA: measured once for the header, then again right before each FFN
 * row, whose ratios are to the peers of that moment (a machine shared
 * with other work drifts over a run; the range is reported).
 */
static double cpu_peak[MOEM_PREC_NR], cpu_read_gbps;
static double peer_read_lo, peer_read_hi, peer_peak_lo, peer_peak_hi;
static uint8_t *peer_buf;
#define PEER_BYTES (512ull << 20)

/* Gop/s of peer kind's register-only loop: iters iterations of ops on threads, median of reps. */
static double peak_gops(int kind, uint64_t iters, uint32_t threads, int reps, double ops)
{
	double s[10];

	for (int r = 0; r < reps; r++)
		s[r] = peer_seconds(kind, NULL, 0, iters, threads);
	return (double)iters * threads * ops / median(s, reps) / 1e9;
}

/* Measure the peers into cpu_read_gbps and cpu_peak[] (medians of reps). */
static void cpu_peers_measure(const struct moem_backend_info *info, int reps, uint64_t iters)
{
	double s[10];
	int avx512 = info->isa == MOEM_CPU_ISA_AVX512 || info->isa == MOEM_CPU_ISA_AMX;

	for (int r = 0; r < reps; r++)
		s[r] = peer_seconds(0, peer_buf, PEER_BYTES, 0, info->threads);
	cpu_read_gbps = PEER_BYTES / median(s, reps) / 1e9;
	if (info->isa == MOEM_CPU_ISA_SCALAR)
		return; /* no vector peak to hold plain C to */
	/*
	 * The vector loops: 12 chains, an instruction each an iteration; the
	 * tile loops: 4 C tiles of 16 x 16 x (32 bf16 or 64 bytes) multiply-
	 * adds an iteration, a quarter of the iterations. 2 ops a multiply-add.
	 */
	if (info->isa == MOEM_CPU_ISA_AMX) {
		cpu_peak[MOEM_PREC_BF16] =
			peak_gops(5, iters / 4, info->threads, reps, 4.0 * 16 * 16 * 32 * 2);
		cpu_peak[MOEM_PREC_Q8] =
			peak_gops(6, iters / 4, info->threads, reps, 4.0 * 16 * 16 * 64 * 2);
	} else {
		cpu_peak[MOEM_PREC_BF16] = peak_gops(avx512 ? 2 : 1, iters, info->threads, reps,
						     12.0 * (avx512 ? 64 : 16));
		cpu_peak[MOEM_PREC_Q8] = peak_gops(avx512 ? 4 : 3, iters, info->threads, reps,
						   12.0 * (avx512 ? 128 : 64));
	}
	cpu_peak[MOEM_PREC_Q4] = cpu_peak[MOEM_PREC_Q2] = cpu_peak[MOEM_PREC_Q8];
}

static int bench_cpu_peers(struct moem_backend *be)
{
	struct moem_backend_info info;
	const uint64_t iters = quick ? (1u << 22) : (1u << 24);
	int avx512;

	moem_backend_get_info(be, &info);
	peer_buf = aligned_alloc(4096, PEER_BYTES);
	if (!peer_buf)
		return -ENOMEM;
	memset(peer_buf, 1, PEER_BYTES);
	cpu_peers_measure(&info, quick ? 3 : 7, iters);
	printf("read: %.1f GB/s, read-only stream over %llu MiB on %u pinned thread%s\n",
	       cpu_read_gbps, PEER_BYTES >> 20, info.threads, info.threads == 1 ? "" : "s");
	result("read_gbps", cpu_read_gbps);
	if (info.isa == MOEM_CPU_ISA_SCALAR)
		return 0;
	avx512 = info.isa == MOEM_CPU_ISA_AVX512 || info.isa == MOEM_CPU_ISA_AMX;
	printf("peak: %.0f GFLOP/s %s, %.0f Gop/s int8 %s (register-only loops, %u threads)\n",
	       cpu_peak[MOEM_PREC_BF16],
	       info.isa == MOEM_CPU_ISA_AMX ? "tdpbf16ps"
	       : avx512			    ? "vdpbf16ps"
					    : "fp32 FMA",
	       cpu_peak[MOEM_PREC_Q8],
	       info.isa == MOEM_CPU_ISA_AMX ? "tdpbusd"
	       : avx512			    ? "vpdpbusd"
					    : "vpmaddubsw+vpmaddwd",
	       info.threads);
	result("peak_bf16_gflops", cpu_peak[MOEM_PREC_BF16]);
	result("peak_int8_gops", cpu_peak[MOEM_PREC_Q8]);
	return 0;
}

/* The peers again, before an FFN row; their range over the rows. */
static void cpu_peers_again(struct moem_backend *be)
{
	struct moem_backend_info info;

	if (!peer_buf || moem_backend_kind(be) != MOEM_BACKEND_CPU)
		return;
	moem_backend_get_info(be, &info);
	cpu_peers_measure(&info, 3, quick ? (1u << 22) : (1u << 24));
	if (!peer_read_lo || cpu_read_gbps < peer_read_lo)
		peer_read_lo = cpu_read_gbps;
	if (cpu_read_gbps > peer_read_hi)
		peer_read_hi = cpu_read_gbps;
	if (!peer_peak_lo || cpu_peak[MOEM_PREC_BF16] < peer_peak_lo)
		peer_peak_lo = cpu_peak[MOEM_PREC_BF16];
	if (cpu_peak[MOEM_PREC_BF16] > peer_peak_hi)
		peer_peak_hi = cpu_peak[MOEM_PREC_BF16];
}

/* ---- 2. expert FFN bandwidth --------------------------------------------- */

/* n device copies of one expert blob of precision p. */
static int upload_experts(struct moem_backend *be, enum moem_prec p, uint32_t n, moem_dptr *d,
			  uint64_t *bytes)
{
	struct tb_expert ex;
	int ret = tb_expert_make(&ex, p, ffn_h, ffn_i, 7 + p);

	for (uint32_t i = 0; !ret && i < n; i++) {
		d[i] = tb_put(be, ex.blob, ex.l.bytes);
		if (!d[i])
			ret = -ENOMEM;
	}
	*bytes = ex.l.bytes;
	tb_expert_free(&ex);
	return ret;
}

static int bench_ffn(struct moem_backend *be, struct timer *tm, double copy, double traffic)
{
	const int gpu = moem_backend_kind(be) == MOEM_BACKEND_CUDA;
	const uint64_t target = smoke ? 1 : gpu ? (256ull << 20) : (64ull << 20);
	static const enum moem_prec precs[] = {MOEM_PREC_BF16, MOEM_PREC_Q4, MOEM_PREC_Q8,
					       MOEM_PREC_Q2};
	double t_b1[MOEM_PREC_NR] = {0}, bytes_of[MOEM_PREC_NR] = {0};
	uint16_t *x = tb_rand_bf16(3, 64 * ffn_h, 1.0);
	moem_dptr dx = tb_put(be, x, 2 * 64 * ffn_h), dout = 0, *blobs;
	struct moem_ffn_assign *as = malloc(sizeof(*as) * 64 * 256);
	struct moem_ffn_expert *fe = malloc(sizeof(*fe) * 256);
	char key[64];
	int ret = 0;

	blobs = calloc(512, sizeof(*blobs));
	printf("\nffn: expert FFN (SwiGLU), H %u I %u, every expert of a call takes B tokens; "
	       "weight bytes read / s\n",
	       ffn_h, ffn_i);
	printf("  prec     B   experts/call   us/expert     GB/s   of copy   of copy traffic%s\n",
	       cpu_read_gbps > 0 ? "   of read   GFLOP/s   of peak" : "");
	for (unsigned int pi = 0; !ret && pi < sizeof(precs) / sizeof(precs[0]); pi++) {
		enum moem_prec p = precs[pi];
		uint64_t eb;
		uint32_t ne;

		if (ffn_precs ? !(ffn_precs & (1u << p))
			      : (quick || smoke) && p != MOEM_PREC_BF16 && p != MOEM_PREC_Q4)
			continue;
		{
			struct moem_expert_layout l;

			moem_expert_layout(p, ffn_h, ffn_i, &l);
			eb = l.bytes;
		}
		ne = smoke ? 2 : (uint32_t)moem_min((target + eb - 1) / eb, 256);
		ret = upload_experts(be, p, 2 * ne, blobs, &eb);
		if (ret)
			break;
		bytes_of[p] = (double)eb;
		for (unsigned int bi = 0; !ret && bi < (smoke ? 2u : rt_tag[0] ? 3u : 4u); bi++) {
			uint32_t B = batches[bi], na = 0;
			int reps = ffn_reps ? ffn_reps
				   : smoke  ? 1
				   : quick  ? 3
				   : gpu    ? 20
					    : (B >= 16 ? 3 : 5);
			double s[64], sec;
			struct moem_ffn_args a;

			if (!dout && (ret = moem_be_alloc(be, 4ull * 64 * 256 * ffn_h, &dout)))
				break;
			for (uint32_t e = 0; e < ne; e++) {
				fe[e] = (struct moem_ffn_expert){0, p, na, B};
				for (uint32_t t = 0; t < B; t++)
					as[na++] = (struct moem_ffn_assign){(uint16_t)t,
									    (uint16_t)(e % 64)};
			}
			/* one output slot per expert: at most 64 experts per call */
			a = (struct moem_ffn_args){B,  ffn_h, ffn_i, moem_min(ne, 64), dx, dout, 0,
						   fe, na,    as};
			if (!smoke && cpu_read_gbps > 0)
				cpu_peers_again(be);
			for (int r = 0; r < reps + 1 && !ret; r++) {
				for (uint32_t e = 0; e < ne; e++) /* alternate the two sets */
					fe[e].blob = blobs[(r & 1) * ne + e];
				ret = timer_start(tm);
				for (uint32_t e0 = 0; e0 < ne; e0 += 64) {
					a.n_experts = moem_min(64, ne - e0);
					a.experts = fe + e0;
					STEP(moem_op_ffn(be, NULL, &a));
				}
				STEP(timer_stop(tm, &sec));
				if (r)
					s[r - 1] = sec;
			}
			if (ret)
				break;
			sec = median(s, reps);
			{
				/* 2 ops per multiply-add, three H x I matrices, B tokens */
				double gf = 2.0 * B * 3 * ffn_h * ffn_i * ne / sec / 1e9;
				double rr =
					cpu_read_gbps > 0 ? eb * ne / sec / 1e9 / cpu_read_gbps : 0;
				double pr = cpu_peak[p] > 0 ? gf / cpu_peak[p] : 0;

				printf("  %-5s %4u   %12u   %9.2f   %6.1f   %7.2f   %5.2f",
				       moem_prec_name(p), B, ne, sec / ne * 1e6,
				       eb * ne / sec / 1e9, eb * ne / sec / 1e9 / copy,
				       eb * ne / sec / 1e9 / traffic);
				if (cpu_read_gbps > 0)
					printf("   %7.2f   %7.1f   %7.2f", rr, gf, pr);
				printf("\n");
				if (cpu_read_gbps > 0) {
					snprintf(key, sizeof(key), "ffn_%s_B%u_read_ratio",
						 moem_prec_name(p), B);
					result(key, rr);
					snprintf(key, sizeof(key), "ffn_%s_B%u_gflops",
						 moem_prec_name(p), B);
					result(key, gf);
				}
				if (pr > 0) {
					snprintf(key, sizeof(key), "ffn_%s_B%u_peak_ratio",
						 moem_prec_name(p), B);
					result(key, pr);
				}
			}
			snprintf(key, sizeof(key), "ffn_%s_B%u%s_gbps", moem_prec_name(p), B,
				 rt_tag);
			result(key, eb * ne / sec / 1e9);
			snprintf(key, sizeof(key), "ffn_%s_B%u%s_vs_copy", moem_prec_name(p), B,
				 rt_tag);
			result(key, eb * ne / sec / 1e9 / copy);
			snprintf(key, sizeof(key), "ffn_%s_B%u%s_vs_traffic", moem_prec_name(p), B,
				 rt_tag);
			result(key, eb * ne / sec / 1e9 / traffic);
			snprintf(key, sizeof(key), "ffn_%s_B%u%s_us_per_expert", moem_prec_name(p),
				 B, rt_tag);
			result(key, sec / ne * 1e6);
			if (B == 1)
				t_b1[p] = sec / ne;
		}
		for (uint32_t i = 0; i < 2 * ne; i++)
			moem_be_free(be, blobs[i]);
	}
	if (peer_read_hi > 0) {
		printf("  peers before each row: read %.1f..%.1f GB/s, fp32/bf16 peak %.0f..%.0f "
		       "GFLOP/s (each row's ratios are to its own)\n",
		       peer_read_lo, peer_read_hi, peer_peak_lo, peer_peak_hi);
		result("peer_read_gbps_lo", peer_read_lo);
		result("peer_read_gbps_hi", peer_read_hi);
		result("peer_peak_gflops_lo", peer_peak_lo);
		result("peer_peak_gflops_hi", peer_peak_hi);
	}
	if (!ret && t_b1[MOEM_PREC_Q4] > 0 && t_b1[MOEM_PREC_BF16] > 0 && !rt_tag[0]) {
		double sp = t_b1[MOEM_PREC_BF16] / t_b1[MOEM_PREC_Q4];
		double ideal = bytes_of[MOEM_PREC_BF16] / bytes_of[MOEM_PREC_Q4];

		printf("  q4 speedup over bf16 at B=1: %.2fx (bytes ratio, the ideal: %.2fx)\n", sp,
		       ideal);
		result("ffn_q4_speedup_B1", sp);
		result("ffn_q4_speedup_ideal", ideal);
	}
	moem_be_free(be, dx);
	moem_be_free(be, dout);
	free(x);
	free(as);
	free(fe);
	free(blobs);
	return ret;
}

/* ---- 3. the MoE layer and the routing share --------------------------------- */

struct layer {
	moem_dptr h, h0, normw, y, gate, logits, ids, w, cnt, routed;
	moem_dptr blobs[QN];
	uint32_t nblob;
};

static int layer_setup(struct moem_backend *be, struct layer *L)
{
	const int gpu = moem_backend_kind(be) == MOEM_BACKEND_CUDA;
	float *h = tb_rand_f32(11, 64 * ffn_h, 1.0);
	uint16_t *nw = tb_rand_bf16(12, ffn_h, 0.3), *g = tb_rand_bf16(13, QN * ffn_h, 0.05);
	uint64_t eb;
	int ret;

	memset(L, 0, sizeof(*L));
	L->h0 = tb_put(be, h, 4 * 64 * ffn_h);
	L->h = tb_zeros(be, 4 * 64 * ffn_h);
	L->normw = tb_put(be, nw, 2 * ffn_h);
	L->y = tb_zeros(be, 2 * 64 * ffn_h);
	L->gate = tb_put(be, g, 2 * QN * ffn_h);
	L->logits = tb_zeros(be, 4 * 64 * QN);
	L->ids = tb_zeros(be, 4 * 64 * QK);
	L->w = tb_zeros(be, 4 * 64 * QK);
	L->cnt = tb_zeros(be, 4 * 64);
	L->routed = tb_zeros(be, 4ull * 64 * QK * ffn_h);
	/* bf16 experts; on the CPU 16 distinct blobs (> the LLC) shared by id mod 16 */
	L->nblob = gpu ? QN : 16;
	ret = upload_experts(be, MOEM_PREC_BF16, L->nblob, L->blobs, &eb);
	free(h);
	free(nw);
	free(g);
	return ret;
}

static void layer_free(struct moem_backend *be, struct layer *L)
{
	moem_dptr *p[] = {&L->h,      &L->h0,  &L->normw, &L->y,   &L->gate,
			  &L->logits, &L->ids, &L->w,	  &L->cnt, &L->routed};

	for (unsigned int i = 0; i < sizeof(p) / sizeof(p[0]); i++)
		moem_be_free(be, *p[i]);
	for (uint32_t i = 0; i < L->nblob; i++)
		moem_be_free(be, L->blobs[i]);
}

static int bench_layer(struct moem_backend *be, struct timer *tm)
{
	static const char *const mode_names[] = {"topk", "lynx", "oea"};
	struct moem_ffn_expert fe[QN];
	struct moem_ffn_assign as[64 * QK];
	int32_t ids[64 * QK];
	uint32_t cnt[64];
	struct layer L;
	char key[64];
	int ret = layer_setup(be, &L);

	printf("\nlayer: one MoE layer at Qwen3-30B-A3B shapes (N %d, k %d, bf16 experts, "
	       "synthetic router); us of device time\n",
	       QN, QK);
	printf("  mode   B   T(active)   rmsnorm   router    route      ffn  combine    layer   "
	       "router+route share\n");
	for (int m = 0; !ret && m < 3; m++)
		for (unsigned int bi = 0; !ret && bi < 4; bi++) {
			const uint32_t B = batches[bi];
			/* Enough repetitions on the CPU for the router share's spread:
			 * on a shared machine one slow repetition moves a median of 3. */
			int reps = quick ? 2 : moem_backend_kind(be) == MOEM_BACKEND_CUDA ? 20 : 9;
			double t[5][20], share[20], med[5], total = 0, lo = 100, hi = 0;
			uint32_t T = 0;

			for (int r = 0; r < reps + 1 && !ret; r++) {
				struct moem_rmsnorm_args na = {B, ffn_h, 1e-6f, L.h, L.normw, L.y};
				struct moem_router_args ra = {B, ffn_h, QN, L.y, L.gate, L.logits};
				struct moem_route_args ro = {.mode = (enum moem_route_mode)m,
							     .cfg = {QN, QK, true, 1.0f},
							     .B = B,
							     .logits = L.logits,
							     .ids = L.ids,
							     .w = L.w,
							     .cnt = L.cnt};
				struct moem_combine_args ca = {B,   ffn_h, L.h, QK, L.routed,
							       L.w, L.cnt, 0,	0};
				uint32_t ne = 0, na_ = 0;
				double sec[5];

				ret = moem_be_dtod(be, L.h, L.h0, 4ull * B * ffn_h, NULL);
				STEP(timer_start(tm));
				STEP(moem_op_rmsnorm(be, NULL, &na));
				STEP(timer_stop(tm, &sec[0]));
				STEP(timer_start(tm));
				STEP(moem_op_router(be, NULL, &ra));
				STEP(timer_stop(tm, &sec[1]));
				STEP(timer_start(tm));
				STEP(moem_op_route(be, NULL, &ro));
				STEP(timer_stop(tm, &sec[2]));
				/* host: group the (token, slot) pairs by expert */
				STEP(tb_get(be, ids, L.ids, 4ull * B * QK));
				STEP(tb_get(be, cnt, L.cnt, 4ull * B));
				if (ret)
					break;
				for (uint32_t e = 0; e < QN; e++) {
					uint32_t first = na_;

					for (uint32_t tk = 0; tk < B; tk++)
						for (uint32_t j = 0; j < cnt[tk]; j++)
							if (ids[tk * QK + j] == (int32_t)e)
								as[na_++] =
									(struct moem_ffn_assign){
										(uint16_t)tk,
										(uint16_t)j};
					if (na_ > first)
						fe[ne++] = (struct moem_ffn_expert){
							L.blobs[e % L.nblob], MOEM_PREC_BF16, first,
							na_ - first};
				}
				T = ne;
				{
					struct moem_ffn_args fa = {B,	     ffn_h, ffn_i, QK,	L.y,
								   L.routed, ne,    fe,	   na_, as};

					STEP(timer_start(tm));
					STEP(moem_op_ffn(be, NULL, &fa));
					STEP(timer_stop(tm, &sec[3]));
				}
				STEP(timer_start(tm));
				STEP(moem_op_combine(be, NULL, &ca));
				STEP(timer_stop(tm, &sec[4]));
				if (r) {
					double all = 0;

					for (int i = 0; i < 5; i++) {
						t[i][r - 1] = sec[i];
						all += sec[i];
					}
					share[r - 1] = all > 0 ? 100 * (sec[1] + sec[2]) / all : 0;
					lo = share[r - 1] < lo ? share[r - 1] : lo;
					hi = share[r - 1] > hi ? share[r - 1] : hi;
				}
			}
			if (ret)
				break;
			for (int i = 0; i < 5; i++) {
				med[i] = median(t[i], reps) * 1e6;
				total += med[i];
			}
			printf("  %-5s %3u   %9u   %7.1f  %7.1f  %7.1f  %7.1f  %7.1f  %7.1f   "
			       "%6.2f%% (%.2f-%.2f over %d)\n",
			       mode_names[m], B, T, med[0], med[1], med[2], med[3], med[4], total,
			       median(share, reps), lo, hi, reps);
			snprintf(key, sizeof(key), "layer_%s_B%u_T", mode_names[m], B);
			result(key, T);
			snprintf(key, sizeof(key), "layer_%s_B%u_us", mode_names[m], B);
			result(key, total);
			snprintf(key, sizeof(key), "router_B%u_us", B);
			if (m == 0)
				result(key, med[1]);
			snprintf(key, sizeof(key), "route_%s_B%u_us", mode_names[m], B);
			result(key, med[2]);
			/* The share of each repetition, its median and range: the
			 * router's cost and the layer's move together under load. */
			snprintf(key, sizeof(key), "route_share_%s_B%u_pct", mode_names[m], B);
			result(key, median(share, reps));
			snprintf(key, sizeof(key), "route_share_%s_B%u_min_pct", mode_names[m], B);
			result(key, lo);
			snprintf(key, sizeof(key), "route_share_%s_B%u_max_pct", mode_names[m], B);
			result(key, hi);
			snprintf(key, sizeof(key), "layer_%s_B%u_reps", mode_names[m], B);
			result(key, reps);
		}
	layer_free(be, &L);
	return ret;
}

/* ---- 4. the full-decode ops ------------------------------------------------ */

/*
 * Qwen3-30B-A3B's attention (H 2048, 32 heads, 4 kv heads of 128) and
 * DeepSeek-V2-Lite's absorbed MLA (16 heads over one latent kv head of
 * 512 + 64), a paged f32 KV cache of 16-token blocks. Memory-bound ops
 * report the bytes they must read per second as a fraction of this run's
 * copy traffic, like the FFN.
 */
#define DH	 2048
#define DHEADS	 32
#define DKV	 4
#define DHD	 128
#define DBT	 16
#define DVOCAB	 32768 /* lm_head rows (a slice of a real vocabulary) */
#define DMLA_H	 16
#define DMLA_LAT 576
#define DMLA_R	 512

typedef int (*dec_op_fn)(struct moem_backend *be, const void *args);

static int op_matmul(struct moem_backend *be, const void *a)
{
	return moem_op_matmul(be, NULL, a);
}

static int op_attention(struct moem_backend *be, const void *a)
{
	return moem_op_attention(be, NULL, a);
}

static int op_embed(struct moem_backend *be, const void *a)
{
	return moem_op_embed(be, NULL, a);
}

static int op_rownorm(struct moem_backend *be, const void *a)
{
	return moem_op_rownorm(be, NULL, a);
}

static int op_convert(struct moem_backend *be, const void *a)
{
	return moem_op_convert(be, NULL, a);
}

static int op_rope(struct moem_backend *be, const void *a)
{
	return moem_op_rope(be, NULL, a);
}

static int op_head_matmul(struct moem_backend *be, const void *a)
{
	return moem_op_head_matmul(be, NULL, a);
}

static int op_kv_store(struct moem_backend *be, const void *a)
{
	return moem_op_kv_store(be, NULL, a);
}

/* Median microseconds of one call (after one warm-up call). */
static int dec_time(struct moem_backend *be, struct timer *tm, dec_op_fn fn, const void *args,
		    double *us)
{
	const int reps = quick ? 2 : moem_backend_kind(be) == MOEM_BACKEND_CUDA ? 20 : 3;
	double t[20], sec = 0;
	int ret = fn(be, args);

	STEP(moem_be_sync(be));
	for (int r = 0; r < reps && !ret; r++) {
		STEP(timer_start(tm));
		STEP(fn(be, args));
		STEP(timer_stop(tm, &sec));
		t[r] = sec;
	}
	if (!ret)
		*us = median(t, reps) * 1e6;
	return ret;
}

static void dec_row(const char *what, const char *key, double us, double bytes, double traffic)
{
	char k[80];

	if (bytes > 0)
		printf("  %-44s %10.1f us  %7.1f GB/s  %5.2f of copy traffic\n", what, us,
		       bytes / us / 1e3, bytes / us / 1e3 / traffic);
	else
		printf("  %-44s %10.1f us\n", what, us);
	snprintf(k, sizeof(k), "dec_%s_us", key);
	result(k, us);
	if (bytes > 0) {
		snprintf(k, sizeof(k), "dec_%s_frac_copy", key);
		result(k, bytes / us / 1e3 / traffic);
	}
}

/* A KV pool of n_seq sequences of ctx positions, block tables, and per-token pos/tab. */
struct dec_kv {
	moem_dptr pool, tables, pos, tab;
	uint32_t n_blocks, mb;
};

static int dec_kv_make(struct moem_backend *be, struct dec_kv *kv, uint32_t entry, uint32_t n_seq,
		       uint32_t ctx, uint32_t T, const int32_t *pos, const uint32_t *seq)
{
	int32_t *tables;
	uint32_t *tab = malloc(4 * (size_t)T);
	int ret;

	kv->mb = (ctx + DBT - 1) / DBT;
	kv->n_blocks = n_seq * kv->mb;
	tables = malloc(4 * (size_t)kv->n_blocks);
	if (!tables || !tab) {
		free(tables);
		free(tab);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < kv->n_blocks; i++)
		tables[i] = (int32_t)i;
	for (uint32_t t = 0; t < T; t++)
		tab[t] = seq[t] * kv->mb;
	ret = moem_be_alloc(be, (uint64_t)kv->n_blocks * DBT * entry * 4, &kv->pool);
	STEP(moem_be_memset(be, kv->pool, 0, (uint64_t)kv->n_blocks * DBT * entry * 4, NULL));
	if (!ret) {
		kv->tables = tb_put(be, tables, 4ull * kv->n_blocks);
		kv->pos = tb_put(be, pos, 4ull * T);
		kv->tab = tb_put(be, tab, 4ull * T);
		ret = moem_be_sync(be);
	}
	free(tables);
	free(tab);
	return ret;
}

static void dec_kv_free(struct moem_backend *be, struct dec_kv *kv)
{
	moem_be_free(be, kv->pool);
	moem_be_free(be, kv->tables);
	moem_be_free(be, kv->pos);
	moem_be_free(be, kv->tab);
	memset(kv, 0, sizeof(*kv));
}

/*
 * Attention: B sequences at context ctx decoding one token each
 * (prefill = 0), or one sequence's prompt chunk of `prefill` tokens ending
 * at ctx. Bytes: every K/V entry a token reads (decode), the chunk's
 * distinct entries (prefill).
 */
static int dec_attn(struct moem_backend *be, struct timer *tm, double traffic, bool mla, uint32_t B,
		    uint32_t ctx, uint32_t prefill)
{
	const uint32_t nh = mla ? DMLA_H : DHEADS, kvh = mla ? 1 : DKV;
	const uint32_t qk = mla ? DMLA_LAT : DHD, vd = mla ? DMLA_R : DHD;
	const uint32_t entry = mla ? DMLA_LAT : 2 * DKV * DHD, T = prefill ? prefill : B;
	int32_t *pos = malloc(4 * (size_t)T);
	uint32_t *seq = malloc(4 * (size_t)T);
	float *q = tb_rand_f32(40, (size_t)T * nh * qk, 1.0);
	struct dec_kv kv = {0};
	moem_dptr dq = 0, out = 0;
	char what[96], key[64];
	double us = 0, bytes;
	int ret = pos && seq && q ? 0 : -ENOMEM;

	for (uint32_t t = 0; !ret && t < T; t++) {
		pos[t] = (int32_t)(prefill ? ctx - prefill + t : ctx - 1);
		seq[t] = prefill ? 0 : t;
	}
	STEP(dec_kv_make(be, &kv, entry, prefill ? 1 : B, ctx, T, pos, seq));
	if (!ret) {
		dq = tb_put(be, q, 4ull * T * nh * qk);
		out = tb_zeros(be, 4ull * T * nh * vd);
		ret = dq && out ? 0 : -ENOMEM;
	}
	if (!ret) {
		struct moem_attn_args a = {
			.kv = {kv.pool, kv.n_blocks, 1, DBT, entry, 0, kv.tables},
			.T = T,
			.n_heads = nh,
			.n_kv_heads = kvh,
			.qk_dim = qk,
			.v_dim = vd,
			.k_off = 0,
			.v_off = mla ? 0 : kvh * qk,
			.q_stride = nh * qk,
			.scale = 1.0f / sqrtf((float)qk),
			.q = dq,
			.pos = kv.pos,
			.tab = kv.tab,
			.out = out,
		};

		ret = dec_time(be, tm, op_attention, &a, &us);
	}
	if (!ret) {
		bytes = (double)(prefill ? 1 : B) * ctx * entry * 4;
		if (prefill)
			snprintf(what, sizeof(what), "attention %s prefill %u tokens at ctx %u",
				 mla ? "mla" : "gqa", prefill, ctx);
		else
			snprintf(what, sizeof(what), "attention %s decode B %u ctx %u",
				 mla ? "mla" : "gqa", B, ctx);
		snprintf(key, sizeof(key), "attn_%s_%s%u_ctx%u", mla ? "mla" : "gqa",
			 prefill ? "prefill" : "B", prefill ? prefill : B, ctx);
		/* a prefill chunk is compute-bound: time only */
		dec_row(what, key, us, prefill ? 0 : bytes, traffic);
	}
	dec_kv_free(be, &kv);
	moem_be_free(be, dq);
	moem_be_free(be, out);
	free(pos);
	free(seq);
	free(q);
	return ret;
}

/*
 * A dense projection of B tokens: bf16 weights, or one matrix in
 * moem_qmat_layout(p, R, K) (moem decode --dense-prec); the weight bytes
 * a call reads over its time, against the copy traffic.
 */
static int dec_matmul(struct moem_backend *be, struct timer *tm, double traffic, const char *name,
		      uint32_t B, uint32_t K, uint32_t R, enum moem_prec p)
{
	struct moem_qmat_layout l = {.bytes = 2ull * R * K};
	uint16_t *x = tb_rand_bf16(41, (size_t)B * K, 1.0);
	int ret = p == MOEM_PREC_BF16 ? 0 : moem_qmat_layout(p, R, K, &l);
	moem_dptr dx = tb_put(be, x, 2ull * B * K), dw = ret ? 0 : tb_zeros(be, l.bytes);
	moem_dptr dy = tb_zeros(be, 4ull * B * R);
	struct moem_matmul_args a = {B, K, R, dx, dw, dy, p};
	char what[96], key[64];
	double us = 0;

	if (!ret)
		ret = dx && dw && dy ? dec_time(be, tm, op_matmul, &a, &us) : -ENOMEM;
	if (!ret) {
		snprintf(what, sizeof(what), "matmul %s %s B %u (%u x %u)", name, moem_prec_name(p),
			 B, R, K);
		if (p == MOEM_PREC_BF16)
			snprintf(key, sizeof(key), "matmul_%s_B%u", name, B);
		else
			snprintf(key, sizeof(key), "matmul_%s_%s_B%u", name, moem_prec_name(p), B);
		dec_row(what, key, us, (double)l.bytes, traffic);
	}
	moem_be_free(be, dx);
	moem_be_free(be, dw);
	moem_be_free(be, dy);
	free(x);
	return ret;
}

/* The small ops of one decode step of B tokens, time only. */
static int dec_small(struct moem_backend *be, struct timer *tm, uint32_t B)
{
	const uint32_t qw = DHEADS * DHD, kw = 2 * DKV * DHD, ctx = 4096;
	const uint32_t lat = DMLA_LAT, nope = 128, vd = 128; /* nope + vd = 256 rows per head */
	int32_t *ids = malloc(4 * (size_t)B), *pos = malloc(4 * (size_t)B);
	uint32_t *seq = malloc(4 * (size_t)B);
	struct dec_kv kv = {0};
	moem_dptr emb = tb_zeros(be, 2ull * DVOCAB * DH), h = tb_zeros(be, 4ull * B * DH);
	moem_dptr q = tb_zeros(be, 4ull * B * DMLA_H * lat),
		  w = tb_zeros(be, 2ull * DMLA_H * 256 * DMLA_R);
	moem_dptr ol = tb_zeros(be, 4ull * B * DMLA_H * lat), qb = tb_zeros(be, 2ull * B * qw);
	moem_dptr cs = tb_zeros(be, 4ull * ctx * DHD / 2), sn = tb_zeros(be, 4ull * ctx * DHD / 2);
	moem_dptr dids = 0;
	double us = 0;
	char what[96], key[64];
	int ret = ids && pos && seq && emb && h && q && w && ol && qb && cs && sn ? 0 : -ENOMEM;

	for (uint32_t t = 0; !ret && t < B; t++) {
		ids[t] = (int32_t)(t * 977 % DVOCAB);
		pos[t] = (int32_t)(ctx - 1 - t);
		seq[t] = t;
	}
	STEP(dec_kv_make(be, &kv, kw, B, ctx, B, pos, seq));
	if (!ret)
		ret = (dids = tb_put(be, ids, 4ull * B)) ? 0 : -ENOMEM;
	if (!ret) {
		struct moem_embed_args em = {B, DH, DVOCAB, dids, emb, h};
		struct moem_rownorm_args rn = {B * DHEADS, DHD, DHD, DHD, 1e-6f, q, w, q, false};
		struct moem_convert_args cv = {B, qw, qw, qw, 0, q, qb, true};
		struct moem_rope_args ro = {B,	   DHEADS, qw, DHD,    0,  DHD,
					    false, ctx,	   q,  kv.pos, cs, sn};
		struct moem_kv_store_args st = {
			{kv.pool, kv.n_blocks, 1, DBT, kw, 0, kv.tables}, B, kw, h, kv.pos, kv.tab};
		struct moem_head_matmul_args uk = {.T = B,
						   .n_heads = DMLA_H,
						   .in_dim = nope,
						   .out_dim = DMLA_R,
						   .transpose = true,
						   .x = q,
						   .x_tok_stride = DMLA_H * lat,
						   .x_head_stride = lat,
						   .w = w,
						   .w_head_stride = (uint64_t)(nope + vd) * DMLA_R,
						   .w_row_stride = DMLA_R,
						   .y = ol,
						   .y_tok_stride = DMLA_H * lat,
						   .y_head_stride = lat};
		struct moem_head_matmul_args uv = {.T = B,
						   .n_heads = DMLA_H,
						   .in_dim = DMLA_R,
						   .out_dim = vd,
						   .x = ol,
						   .x_tok_stride = DMLA_H * lat,
						   .x_head_stride = lat,
						   .w = w,
						   .w_head_stride = (uint64_t)(nope + vd) * DMLA_R,
						   .w_row_stride = DMLA_R,
						   .y = q,
						   .y_tok_stride = DMLA_H * lat,
						   .y_head_stride = lat};
		const struct {
			const char *name;
			dec_op_fn fn;
			const void *args;
		} ops[] = {
			{"embed", op_embed, &em},
			{"rownorm q_norm", op_rownorm, &rn},
			{"convert attn out to bf16", op_convert, &cv},
			{"rope q", op_rope, &ro},
			{"kv_store", op_kv_store, &st},
			{"head_matmul mla W_UK (transpose)", op_head_matmul, &uk},
			{"head_matmul mla W_UV", op_head_matmul, &uv},
		};

		for (size_t i = 0; !ret && i < sizeof(ops) / sizeof(ops[0]); i++) {
			ret = dec_time(be, tm, ops[i].fn, ops[i].args, &us);
			if (ret)
				break;
			snprintf(what, sizeof(what), "%s B %u", ops[i].name, B);
			snprintf(key, sizeof(key), "%s_B%u", ops[i].name, B);
			for (char *c = key; *c; c++)
				if (*c == ' ' || *c == '(' || *c == ')')
					*c = '_';
			dec_row(what, key, us, 0, 0);
		}
	}
	dec_kv_free(be, &kv);
	{
		moem_dptr p[] = {emb, h, q, w, ol, qb, cs, sn, dids};

		for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++)
			moem_be_free(be, p[i]);
	}
	free(ids);
	free(pos);
	free(seq);
	return ret;
}

static int bench_decode(struct moem_backend *be, struct timer *tm, double traffic)
{
	const int gpu = moem_backend_kind(be) == MOEM_BACKEND_CUDA;
	static const uint32_t ctxs[] = {512, 4096, 32768};
	int ret = 0;

	printf("\ndecode: the full-decode ops at Qwen3-30B-A3B attention shapes (%d heads, %d kv "
	       "heads of %d) and DeepSeek-V2-Lite MLA (%d heads, latent %d + %d); synthetic\n",
	       DHEADS, DKV, DHD, DMLA_H, DMLA_R, DMLA_LAT - DMLA_R);
	STEP(dec_matmul(be, tm, traffic, "lm_head", 1, DH, DVOCAB, MOEM_PREC_BF16));
	STEP(dec_matmul(be, tm, traffic, "qkv", 1, DH, (DHEADS + 2 * DKV) * DHD, MOEM_PREC_BF16));
	STEP(dec_matmul(be, tm, traffic, "qkv", 8, DH, (DHEADS + 2 * DKV) * DHD, MOEM_PREC_BF16));
	STEP(dec_matmul(be, tm, traffic, "qkv", 64, DH, (DHEADS + 2 * DKV) * DHD, MOEM_PREC_BF16));
	/* quantized dense weights (--dense-prec): a batch-1 GEMV reads each byte once */
	for (int p = MOEM_PREC_Q8; p < MOEM_PREC_NR; p++) {
		STEP(dec_matmul(be, tm, traffic, "lm_head", 1, DH, DVOCAB, (enum moem_prec)p));
		STEP(dec_matmul(be, tm, traffic, "qkv", 1, DH, (DHEADS + 2 * DKV) * DHD,
				(enum moem_prec)p));
	}
	STEP(dec_matmul(be, tm, traffic, "qkv", 8, DH, (DHEADS + 2 * DKV) * DHD, MOEM_PREC_Q8));
	/* the CPU reference's attention is one work item per (token, head): the
	 * longest context and the big prefill chunk are for the GPU */
	for (unsigned int c = 0; c < 3; c++) {
		if (ctxs[c] > 4096 && (quick || !gpu))
			break;
		STEP(dec_attn(be, tm, traffic, false, 1, ctxs[c], 0));
		STEP(dec_attn(be, tm, traffic, false, 8, ctxs[c], 0));
		STEP(dec_attn(be, tm, traffic, true, 1, ctxs[c], 0));
		STEP(dec_attn(be, tm, traffic, true, 8, ctxs[c], 0));
	}
	STEP(dec_attn(be, tm, traffic, false, 1, gpu ? 4096 : 512, 64));
	if (gpu)
		STEP(dec_attn(be, tm, traffic, false, 1, 4096, 512));
	STEP(dec_small(be, tm, 1));
	STEP(dec_small(be, tm, 8));
	return ret;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"backend", required_argument, NULL, 'b'},
		{"threads", required_argument, NULL, 't'},
		{"isa", required_argument, NULL, 'i'},
		{"quick", no_argument, NULL, 'q'},
		{"smoke", no_argument, NULL, 's'},
		{"out", required_argument, NULL, 'o'},
		{"ffn-rt", required_argument, NULL, 'r'},
		{"ffn-reps", required_argument, NULL, 'n'},
		{"ffn-prec", required_argument, NULL, 'p'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct moem_backend_opts bo = {0};
	const char *name = "cpu", *out = NULL;
	struct moem_backend_info info;
	struct moem_backend *be;
	struct timer tm;
	double copy = 0, traffic = 0;
	int c, ret;

	while ((c = getopt_long(argc, argv, "b:t:i:qso:r:n:p:h", opts, NULL)) != -1) {
		switch (c) {
		case 'b':
			name = optarg;
			break;
		case 't':
			bo.threads = (uint32_t)atoi(optarg);
			break;
		case 'i':
			if (moem_cpu_isa_parse(optarg, &bo.isa)) {
				fprintf(stderr, "bench_kernels: %s\n", moem_last_error());
				return 2;
			}
			break;
		case 'q':
			quick = 1;
			break;
		case 's':
			smoke = 1;
			ffn_h = 256;
			ffn_i = 128;
			break;
		case 'o':
			out = optarg;
			break;
		case 'n':
			ffn_reps = atoi(optarg);
			if (ffn_reps < 1 || ffn_reps > 64) {
				fprintf(stderr, "bench_kernels: --ffn-reps takes 1 to 64\n");
				return 2;
			}
			break;
		case 'p':
			if (moem_prec_parse_list(optarg, &ffn_precs)) {
				fprintf(stderr, "bench_kernels: %s\n", moem_last_error());
				return 2;
			}
			break;
		case 'r': /* a CUDA row tiling (cuda.c ffn_rt_init()) */
			if (strspn(optarg, "124") != strlen(optarg) || strlen(optarg) != 1) {
				fprintf(stderr, "bench_kernels: --ffn-rt takes 1, 2 or 4\n");
				return 2;
			}
			snprintf(rt_tag, sizeof(rt_tag), "_rt%s", optarg);
			setenv("MOEM_CUDA_FFN_RT", optarg, 1);
			break;
		default:
			fprintf(c == 'h' ? stdout : stderr,
				"usage: bench_kernels [--backend cpu|cuda] [--threads N] "
				"[--isa auto|scalar|avx2|avx512|amx] [--quick] [--smoke] [--out "
				"FILE] [--ffn-rt 1|2|4] [--ffn-reps N] [--ffn-prec LIST]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	peer_cpus_known = !sched_getaffinity(0, sizeof(peer_cpus), &peer_cpus);
	ret = moem_backend_open(name, &bo, &be);
	if (ret == -ENODEV) {
		printf("SKIP %s\n", moem_last_error());
		return 4;
	}
	if (ret) {
		fprintf(stderr, "bench_kernels: %s\n", moem_strerror(ret));
		return 1;
	}
	if (out && !(out_file = fopen(out, "w"))) {
		fprintf(stderr, "bench_kernels: %s: %s\n", out, strerror(errno));
		return 1;
	}
	moem_backend_get_info(be, &info);
	printf("bench_kernels: %s backend, %s%s (synthetic weights and activations)\n",
	       moem_backend_name(be), info.device,
	       smoke   ? ", smoke (tiny shapes: measures nothing)"
	       : quick ? ", quick"
		       : "");
	if (rt_tag[0])
		printf("bench_kernels: FFN rows only, MOEM_CUDA_FFN_RT=%s (keys *%s_*)\n",
		       getenv("MOEM_CUDA_FFN_RT"), rt_tag);
	if (info.kind == MOEM_BACKEND_CPU && out_file)
		fprintf(out_file, "cpu_isa=%s\nthreads=%u\n", moem_cpu_isa_name(info.isa),
			info.threads);
	tm.be = be;
	if ((ret = moem_be_event_create(be, &tm.a)) || (ret = moem_be_event_create(be, &tm.b)))
		goto out;
	ret = bench_copy(be, &tm, &copy, &traffic);
	if (!ret && info.kind == MOEM_BACKEND_CPU && !smoke)
		ret = bench_cpu_peers(be);
	STEP(bench_ffn(be, &tm, copy, traffic));
	free(peer_buf); /* the peers are measured for the FFN rows only */
	peer_buf = NULL;
	if (!smoke && !rt_tag[0]) {
		STEP(bench_layer(be, &tm));
		STEP(bench_decode(be, &tm, traffic));
	}
	moem_be_event_destroy(be, tm.a);
	moem_be_event_destroy(be, tm.b);
out:
	if (ret)
		fprintf(stderr, "bench_kernels: %s\n", moem_strerror(ret));
	if (out_file)
		fclose(out_file);
	moem_backend_close(be);
	return ret ? 1 : 0;
}
