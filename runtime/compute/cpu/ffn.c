// SPDX-License-Identifier: GPL-2.0-only
/*
 * CPU grouped expert FFN (backend.h moem_op_ffn) on the row kernels of
 * the backend's instruction set (kern.h). Passes over the thread pool:
 *   0. prepare the input rows in the forms the call's kernels read
 *      (fp32, bf16, int8 per 64-element block; kern.h);
 *   1. gate/up: items are (expert, block of rows); act[a][i] =
 *      silu(gate . x) * (up . x) for each of the expert's tokens;
 *   2. prepare the act rows the same way;
 *   3. down: items are (expert, block of output rows); out[token][slot][h].
 * With the amx table, bf16 experts read both inputs in VNNI form (kern.h),
 * laid out after passes 0 and 2 with each expert's rows starting a new
 * group of 16 (the kernel loads a group's B tiles in place), so the B
 * tiles are built once per stage, not by each row block's call.
 * Every output element is produced by one item with the kernel's fixed
 * order, so results are bitwise independent of thread count, scheduling,
 * expert order and how tokens share a call. Items of an expert run on
 * the workers of the NUMA node that holds its blob (tpool.h).
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#endif

#include <moem/error.h>

#include "cpu_int.h"
#include "kern.h"

#define GATEUP_ROWS 16
#define DOWN_ROWS   32
/*
 * The AMX table takes four row tiles of 16 at a time (kern_amx.c); its
 * B tiles come laid out (VNNI), so a call of a row block builds none.
 */
#define AMX_ROWS    64
/* The most rows a block of either pass has: what a worker's g/u/y scratch holds. */
#define MAX_ROWS    AMX_ROWS
_Static_assert(GATEUP_ROWS <= MAX_ROWS && DOWN_ROWS <= MAX_ROWS, "MAX_ROWS is the largest");
#define QB MOEM_CPU_QBLOCK
/* The int8 forms (kern.h), rows x K bytes each, made by quantize_row(). */
#define QFMTS                                                                                     \
	((1u << CPU_ACT_QNAT) | (1u << CPU_ACT_QU8) | (1u << CPU_ACT_QEO) | (1u << CPU_ACT_QM4) | \
	 (1u << CPU_ACT_QM4X) | (1u << CPU_ACT_QEO2))

/* One prepared operand (the FFN input, or act). */
struct act_buf {
	struct cpu_act a;
	const float *f32; /* source values, [rows][K] */
	uint32_t rows;
	uint32_t fmts; /* 1 << enum cpu_act_fmt */
	uint32_t ext;  /* formats given, not made here (input: bf16; act: fp32) */
};

struct ffn_job {
	struct cpu_backend *c;
	const struct moem_ffn_args *a;
	const struct moem_cpu_kern *k;
	struct moem_expert_layout lay[MOEM_PREC_NR];
	struct act_buf in, act;
	/*
	 * amx: the input gathered per act row and act laid out once per
	 * stage in groups of 16 of an expert's rows, bf16 experts' in VNNI
	 * form (vin, vact), q8/q4/q2 experts' as QT B tiles (qt_in, qt_act)
	 */
	struct cpu_act vin, vact;
	uint8_t *qt_in, *qt_act;
	bool pack;
	uint32_t *voff;	   /* [n_experts]: first VNNI row of each expert (a multiple of 16) */
	uint32_t *gsrc;	   /* [groups]: the act row of each VNNI group's first row */
	uint8_t *gn;	   /* [groups]: its rows (1..16) */
	uint8_t *gprec;	   /* [groups]: its expert's precision */
	uint32_t groups;   /* VNNI rows / 16 */
	float *actf;	   /* [total][I] */
	uint32_t *act_off; /* [n_experts]: first act row of each expert */
	uint32_t *tok;	   /* [total]: input row (token) of each act row */
	uint32_t *ident;   /* [max(total, VNNI rows)]: 0, 1, ... */
	uint16_t *enode;   /* [n_experts]: node of the blob */
	uint16_t *inode;   /* [items]: node of each item */
	float *wbuf;	   /* [workers][wlen] */
	size_t wlen;
	uint32_t rb1, rb2;	   /* row blocks per expert in pass 1 and 3 */
	uint32_t gu_rows, dn_rows; /* rows of a block in pass 1 and 3 */
};

/* ---- activation preparation ----------------------------------------------- */

/*
 * Block blk (of NB in the row; o its offset) of the forms that deal its
 * 64 values q out G ways (kern.h): element i at (i % G) * st + i / G.
 * Plain (QEO, QM4): within the block, st = 64 / G. Grouped (QEO2, QM4X):
 * a full group of G blocks is dealt out together, block L of the group at
 * L * 64 / G and st = 64; the blocks after the last full group as plain.
 */
static inline void put_interleaved(const void *form, size_t o, uint32_t blk, uint32_t NB,
				   uint32_t G, bool grouped, const int8_t *q)
{
	const uint32_t sub = QB / G;
	const bool full = grouped && blk < NB / G * G;
	const size_t og = full ? o - (size_t)(blk % G) * (QB - sub) : o;
	const uint32_t st = full ? QB : sub;
	int8_t *dst = (int8_t *)form;

	for (uint32_t i = 0; i < QB; i++)
		dst[og + (i % G) * st + i / G] = q[i];
}

#define QSTAT MOEM_CPU_QSTAT

/*
 * amax[j] and sum[j] of blocks blk + j, j < n <= QSTAT, of the row at x:
 * the largest |value| (a NaN sticks: nothing after it replaces it) and
 * the sum in element order, as one block at a time would give them.
 */
static inline void block_stats(const float *x, uint32_t blk, uint32_t n, float *amax, float *sum)
{
	for (uint32_t j = 0; j < QSTAT; j++)
		amax[j] = sum[j] = 0.0f;
	for (uint32_t i = 0; i < QB; i++)
		for (uint32_t j = 0; j < QSTAT; j++) {
			float v, xv;

			if (j >= n)
				break;
			xv = x[(size_t)(blk + j) * QB + i];
			v = fabsf(xv);
			if (!(v <= amax[j]) && !isnan(amax[j]))
				amax[j] = v;
			sum[j] += xv;
		}
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
/*
 * block_stats() with 8 blocks in the lanes of one AVX2 vector, each
 * element gathered: the same comparisons, NaN rule and sums in element
 * order, so the same values; where the CPU has AVX2 but not AVX-512.
 */
__attribute__((target("avx2"))) static void block_stats_avx2(const float *x, uint32_t blk,
							     uint32_t n, float *amax, float *sum)
{
	const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256 am = _mm256_setzero_ps(), sm = _mm256_setzero_ps();
	int32_t off[8];
	__m256i vo;

	for (uint32_t j = 0; j < 8; j++)
		off[j] = (int32_t)((blk + (j < n ? j : n - 1)) * QB);
	vo = _mm256_loadu_si256((const __m256i *)(const void *)off);
	for (uint32_t i = 0; i < QB; i++) {
		const __m256 c = _mm256_i32gather_ps(x + i, vo, 4), v = _mm256_and_ps(c, abs);
		/* !(v <= amax) and amax not NaN */
		const __m256 upd = _mm256_andnot_ps(_mm256_cmp_ps(v, am, _CMP_LE_OQ),
						    _mm256_cmp_ps(am, am, _CMP_EQ_OQ));

		am = _mm256_blendv_ps(am, v, upd);
		sm = _mm256_add_ps(sm, c);
	}
	_mm256_storeu_ps(amax, am);
	_mm256_storeu_ps(sum, sm);
}
#endif

/*
 * The best form this CPU runs: AVX-512 (what the avx512 table needs),
 * AVX2, or plain. isa_check, not isa_best: no AMX tile state requested.
 */
static enum moem_cpu_stats_form stats_best(void)
{
	static _Atomic int best = -1;
	int b = atomic_load_explicit(&best, memory_order_relaxed);

	if (b < 0) {
		b = !moem_cpu_isa_check(MOEM_CPU_ISA_AVX512) ? MOEM_CPU_STATS_AVX512
		    : !moem_cpu_isa_check(MOEM_CPU_ISA_AVX2) ? MOEM_CPU_STATS_AVX2
							     : MOEM_CPU_STATS_PLAIN;
		atomic_store_explicit(&best, b, memory_order_relaxed);
	}
	return (enum moem_cpu_stats_form)b;
}

_Static_assert(QSTAT == 16, "the AVX-512 form fills 16 blocks' lanes, the AVX2 one 2 x 8");

enum moem_cpu_stats_form moem_cpu_block_stats(const float *x, uint32_t blk, uint32_t n, float *amax,
					      float *sum, enum moem_cpu_stats_form form)
{
	const enum moem_cpu_stats_form have = stats_best();

	if (form == MOEM_CPU_STATS_BEST || form > have)
		form = have;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
	if (form == MOEM_CPU_STATS_AVX512) {
		moem_cpu_block_stats_avx512(x, blk, n, amax, sum);
		return form;
	}
	if (form == MOEM_CPU_STATS_AVX2) {
		/* the first call's lanes past n land in amax[n..7]: room the caller gives */
		block_stats_avx2(x, blk, n < 8 ? n : 8, amax, sum);
		if (n > 8)
			block_stats_avx2(x, blk + 8, n - 8, amax + 8, sum + 8);
		return form;
	}
#endif
	block_stats(x, blk, n, amax, sum);
	return MOEM_CPU_STATS_PLAIN;
}

/*
 * Quantize one row of K floats in blocks of 64 (kern.h): sx = amax / 127,
 * q = rne(x / sx); a non-finite block gets sx = NaN so the outputs that
 * read it are NaN, as the fp32 paths would give. Every matmul and FFN
 * input of a decode step passes here: the AVX2 clone divides and rounds
 * 8 values at a time where the default build calls libm's nearbyintf
 * (the same values).
 */
MOEM_CPU_CLONES static void quantize_row(struct act_buf *b, uint32_t row)
{
	const uint32_t K = b->a.K, NB = K / QB;
	const float *x = b->f32 + (size_t)row * K;
	float *qs = (float *)b->a.qs + (size_t)row * NB, *xs = (float *)b->a.xs + (size_t)row * NB;
	float amaxs[QSTAT], sums[QSTAT];

	for (uint32_t blk = 0; blk < NB; blk++) {
		const float *xb = x + (size_t)blk * QB;
		size_t o = (size_t)row * K + (size_t)blk * QB;
		float amax, sum, sx;
		int8_t q[QB];

		/*
		 * Each block's amax and sum (in element order), QSTAT blocks
		 * side by side: a block alone is a chain of QB dependent adds.
		 */
		if (blk % QSTAT == 0)
			moem_cpu_block_stats(x, blk, NB - blk < QSTAT ? NB - blk : QSTAT, amaxs,
					     sums, MOEM_CPU_STATS_BEST);
		amax = amaxs[blk % QSTAT];
		sum = sums[blk % QSTAT];
		sx = amax / 127.0f;
		if (sx > 0.0f && isfinite(sx)) {
			for (uint32_t i = 0; i < QB; i++) {
				float r = nearbyintf(xb[i] / sx);

				q[i] = (int8_t)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
			}
		} else {
			memset(q, 0, sizeof(q));
		}
		qs[blk] = isfinite(sx) ? sx : NAN;
		xs[blk] = sum;
		if (b->fmts & (1u << CPU_ACT_QNAT))
			memcpy((int8_t *)b->a.v[CPU_ACT_QNAT] + o, q, QB);
		if (b->fmts & (1u << CPU_ACT_QU8))
			for (uint32_t i = 0; i < QB; i++)
				((uint8_t *)b->a.v[CPU_ACT_QU8])[o + i] = (uint8_t)(q[i] + 128);
		if (b->fmts & (1u << CPU_ACT_QEO))
			put_interleaved(b->a.v[CPU_ACT_QEO], o, blk, NB, 2, false, q);
		if (b->fmts & (1u << CPU_ACT_QM4))
			put_interleaved(b->a.v[CPU_ACT_QM4], o, blk, NB, 4, false, q);
		if (b->fmts & (1u << CPU_ACT_QEO2))
			put_interleaved(b->a.v[CPU_ACT_QEO2], o, blk, NB, 2, true, q);
		if (b->fmts & (1u << CPU_ACT_QM4X))
			put_interleaved(b->a.v[CPU_ACT_QM4X], o, blk, NB, 4, true, q);
	}
}

static void prep_row(void *arg, uint32_t row, uint32_t worker)
{
	struct act_buf *b = arg;
	const uint32_t K = b->a.K;

	if (b->fmts & ~b->ext & (1u << CPU_ACT_BF16)) {
		uint16_t *o = (uint16_t *)b->a.v[CPU_ACT_BF16] + (size_t)row * K;

		for (uint32_t i = 0; i < K; i++)
			o[i] = moem_f32_to_bf16(b->f32[(size_t)row * K + i]);
	}
	if (b->fmts & QFMTS)
		quantize_row(b, row);
}

/* VNNI group g of an operand's own rows, from its bf16 rows (after prep_row). */
static void pack_rows(void *arg, uint32_t g, uint32_t worker)
{
	struct act_buf *b = arg;

	moem_cpu_amx_pack(b->a.v[CPU_ACT_BF16], NULL, moem_min(16, b->rows - 16 * g), b->a.K,
			  (uint32_t *)b->a.v[CPU_ACT_VNNI], 16 * g);
}

/* The formats made for fmts: VNNI is made from BF16. */
static uint32_t act_fmts(uint32_t fmts)
{
	return fmts & (1u << CPU_ACT_VNNI) ? fmts | (1u << CPU_ACT_BF16) : fmts;
}

/*
 * The FFN's groups: group g of a bf16 expert into dst's VNNI form from
 * the bf16 rows of src, of a q8/q4/q2 expert into qt from src's form for
 * the table's kernel of that precision (a group of MOEM_CPU_AMX_QMIN rows
 * or more: fewer take no tiles); row t from map[gsrc[g] + t].
 */
struct pack_job {
	const struct ffn_job *j;
	const struct cpu_act *src;
	const uint32_t *map;
	struct cpu_act *dst;
	uint8_t *qt;
};

static void pack_groups(void *arg, uint32_t g, uint32_t worker)
{
	struct pack_job *p = arg;
	const enum moem_prec prec = (enum moem_prec)p->j->gprec[g];

	if (prec == MOEM_PREC_BF16)
		moem_cpu_amx_pack(p->src->v[CPU_ACT_BF16], p->map + p->j->gsrc[g], p->j->gn[g],
				  p->dst->K, (uint32_t *)p->dst->v[CPU_ACT_VNNI], 16 * g);
	else if (p->j->gn[g] >= MOEM_CPU_AMX_QMIN) /* fewer: the kernel's VNNI form, no tiles */
		moem_cpu_amxq_pack(prec, p->src->v[p->j->k->fmt[prec]], p->map + p->j->gsrc[g],
				   p->j->gn[g], p->dst->K, p->qt, 16 * g);
}

/* ---- passes ------------------------------------------------------------- */

static void gateup_rows(void *arg, uint32_t item, uint32_t worker)
{
	struct ffn_job *j = arg;
	const struct moem_ffn_args *a = j->a;
	uint32_t e = item / j->rb1, blk = item % j->rb1;
	const struct moem_ffn_expert *ex = &a->experts[e];
	const struct moem_expert_layout *l = &j->lay[ex->prec];
	const uint8_t *blob = moem_dptr_host(ex->blob);
	float *w = j->wbuf + (size_t)worker * j->wlen;
	float *g = w + MOEM_CPU_SCRATCH_FLOATS(moem_max(a->H, a->I)), *u = g + 64 * MAX_ROWS;
	uint32_t r0 = blk * j->gu_rows, r1 = moem_min(r0 + j->gu_rows, a->I), nr = r1 - r0;
	const uint32_t *tok = j->tok + j->act_off[e];
	const struct cpu_act *x = &j->in.a;
	moem_cpu_rows_fn rows = j->k->rows[ex->prec];
	struct cpu_act xq;

	if (j->pack && ex->prec == MOEM_PREC_BF16) {
		x = &j->vin;
		tok = j->ident + j->voff[e];
	} else if (j->pack) { /* the call's own B tiles, its tokens in order */
		xq = *x;
		xq.v[CPU_ACT_QT] = j->qt_in + (size_t)j->voff[e] * a->H;
		x = &xq;
	}
	rows(&l->mat[MOEM_MAT_GATE], blob + l->mat_off[MOEM_MAT_GATE], r0, r1, x, tok, ex->n, g, nr,
	     w);
	rows(&l->mat[MOEM_MAT_UP], blob + l->mat_off[MOEM_MAT_UP], r0, r1, x, tok, ex->n, u, nr, w);
	for (uint32_t t = 0; t < ex->n; t++)
		moem_cpu_swiglu(g + (size_t)t * nr, u + (size_t)t * nr,
				j->actf + ((size_t)j->act_off[e] + t) * a->I + r0, nr);
	if (j->c->topo.n_nodes > 1)
		atomic_fetch_add_explicit(
			&j->c->node_items[moem_tpool_worker_node(j->c->pool, worker) *
						  (j->c->topo.n_nodes + 1) +
					  moem_min(j->enode[e], j->c->topo.n_nodes)],
			1, memory_order_relaxed);
}

static void down_rows(void *arg, uint32_t item, uint32_t worker)
{
	struct ffn_job *j = arg;
	const struct moem_ffn_args *a = j->a;
	uint32_t e = item / j->rb2, blk = item % j->rb2;
	const struct moem_ffn_expert *ex = &a->experts[e];
	const struct moem_expert_layout *l = &j->lay[ex->prec];
	const uint8_t *blob = moem_dptr_host(ex->blob);
	float *out = moem_dptr_host(a->out);
	float *w = j->wbuf + (size_t)worker * j->wlen,
	      *y = w + MOEM_CPU_SCRATCH_FLOATS(moem_max(a->H, a->I));
	uint32_t h0 = blk * j->dn_rows, h1 = moem_min(h0 + j->dn_rows, a->H), nr = h1 - h0;
	const struct cpu_act *x = &j->act.a;
	const uint32_t *tok = j->ident + j->act_off[e];
	struct cpu_act xq;

	if (j->pack && ex->prec == MOEM_PREC_BF16) {
		x = &j->vact;
		tok = j->ident + j->voff[e];
	} else if (j->pack) {
		xq = *x;
		xq.v[CPU_ACT_QT] = j->qt_act + (size_t)j->voff[e] * a->I;
		x = &xq;
	}
	j->k->rows[ex->prec](&l->mat[MOEM_MAT_DOWN], blob + l->mat_off[MOEM_MAT_DOWN], h0, h1, x,
			     tok, ex->n, y, nr, w);
	for (uint32_t t = 0; t < ex->n; t++) {
		const struct moem_ffn_assign *as = &a->assign[ex->first + t];

		memcpy(out + ((size_t)as->token * a->n_slots + as->slot) * a->H + h0, y + t * nr,
		       sizeof(float) * nr);
	}
	if (j->c->topo.n_nodes > 1)
		atomic_fetch_add_explicit(
			&j->c->node_items[moem_tpool_worker_node(j->c->pool, worker) *
						  (j->c->topo.n_nodes + 1) +
					  moem_min(j->enode[e], j->c->topo.n_nodes)],
			1, memory_order_relaxed);
}

/* ---- scratch layout ------------------------------------------------------- */

/* Bump allocator over one scratch block; sizes first, then pointers. */
struct carve {
	uint8_t *base;
	size_t used;
};

static void *carve(struct carve *c, size_t bytes)
{
	void *p = c->base ? c->base + c->used : NULL;

	c->used += (bytes + 63) & ~(size_t)63;
	return p;
}

/* Lay out an operand's formats (sizes only when c->base is NULL). */
static void carve_act(struct carve *c, struct act_buf *b, uint32_t rows, uint32_t K)
{
	const size_t n = (size_t)rows * K, nb = (size_t)rows * (K / QB);
	const bool q = b->fmts & QFMTS;

	b->rows = rows;
	b->a.K = K;
	if (b->fmts & ~b->ext & (1u << CPU_ACT_F32))
		b->a.v[CPU_ACT_F32] = carve(c, 4 * n);
	if (b->fmts & ~b->ext & (1u << CPU_ACT_BF16))
		b->a.v[CPU_ACT_BF16] = carve(c, 2 * n);
	for (int f = 0; f < CPU_ACT_NR; f++)
		if (b->fmts & QFMTS & (1u << f))
			b->a.v[f] = carve(c, n);
	if (b->fmts & (1u << CPU_ACT_VNNI))
		b->a.v[CPU_ACT_VNNI] = carve(c, (size_t)2 * K * ((rows + 15) & ~15u));
	if (q) {
		b->a.qs = carve(c, 4 * nb);
		b->a.xs = carve(c, 4 * nb);
	}
}

static void convert_rows(void *arg, uint32_t t, uint32_t worker)
{
	struct act_buf *b = arg;
	const uint16_t *x = b->a.v[CPU_ACT_BF16];

	bf16_to_f32_row(x + (size_t)t * b->a.K, (float *)b->f32 + (size_t)t * b->a.K, b->a.K);
}

size_t moem_cpu_act_bytes(uint32_t rows, uint32_t K, uint32_t fmts)
{
	struct act_buf b = {.fmts = act_fmts(fmts), .ext = 1u << CPU_ACT_F32};
	struct carve cv = {0};

	carve_act(&cv, &b, rows, K);
	return cv.used;
}

void moem_cpu_prepare_act_in(struct moem_tpool *pool, const float *x, uint32_t rows, uint32_t K,
			     uint32_t fmts, void *mem, struct cpu_act *out)
{
	struct act_buf b = {.f32 = x, .fmts = act_fmts(fmts), .ext = 1u << CPU_ACT_F32};
	struct carve cv = {.base = mem};

	carve_act(&cv, &b, rows, K);
	b.a.v[CPU_ACT_F32] = x;
	if (pool)
		moem_tpool_run(pool, rows, prep_row, &b);
	else
		for (uint32_t r = 0; r < rows; r++)
			prep_row(&b, r, 0);
	if (b.fmts & (1u << CPU_ACT_VNNI)) {
		if (pool)
			moem_tpool_run(pool, (rows + 15) / 16, pack_rows, &b);
		else
			for (uint32_t g = 0; g < (rows + 15) / 16; g++)
				pack_rows(&b, g, 0);
	}
	*out = b.a;
	out->mem = NULL;
}

int moem_cpu_prepare_act(const float *x, uint32_t rows, uint32_t K, uint32_t fmts,
			 struct cpu_act *out)
{
	void *mem = aligned_alloc(64, moem_cpu_act_bytes(rows, K, fmts) + 64);

	if (!mem)
		return -ENOMEM;
	moem_cpu_prepare_act_in(NULL, x, rows, K, fmts, mem, out);
	out->mem = mem;
	return 0;
}

void moem_cpu_free_act(struct cpu_act *a)
{
	free(a->mem);
	a->mem = NULL;
}

int moem_cpu_ffn(struct moem_backend *be, struct moem_stream *s, const struct moem_ffn_args *a)
{
	struct cpu_backend *c = cpu_of(be);
	const uint32_t nw = moem_tpool_size(c->pool);
	struct ffn_job j = {.c = c, .a = a, .k = c->kern};
	struct carve cv = {0};
	uint32_t total = 0, fmts = 0, items, vrows = 0;
	uint32_t vgroups, qgroups;  /* groups the VNNI and QT forms are carved for */
	bool need_f32, lay = false; /* lay: some group is laid out (pack_groups()) */
	int ret = 0;

	for (int p = 0; p < MOEM_PREC_NR; p++)
		if (moem_expert_layout((enum moem_prec)p, a->H, a->I, &j.lay[p]))
			memset(&j.lay[p], 0, sizeof(j.lay[p])); /* checked per expert upstream */
	j.gu_rows = j.k->isa == MOEM_CPU_ISA_AMX ? AMX_ROWS : GATEUP_ROWS;
	j.dn_rows = j.k->isa == MOEM_CPU_ISA_AMX ? AMX_ROWS : DOWN_ROWS;
	for (uint32_t e = 0; e < a->n_experts; e++) {
		total += a->experts[e].n; /* <= 64 * 64: assignments are unique */
		vrows += (a->experts[e].n + 15) & ~15u;
		fmts |= 1u << j.k->fmt[a->experts[e].prec];
	}
	/* the amx table's B tiles: laid out once per stage (kern.h VNNI, QT) */
	j.pack = j.k->isa == MOEM_CPU_ISA_AMX;
	j.groups = j.pack ? vrows / 16 : 0;
	vgroups = fmts & (1u << CPU_ACT_BF16) ? j.groups : 0;
	qgroups = fmts & QFMTS ? j.groups : 0;
	/* fp32 values are the source of every other form */
	need_f32 = fmts & ~(1u << CPU_ACT_BF16);
	j.in.fmts = fmts | (need_f32 ? 1u << CPU_ACT_F32 : 0);
	j.act.fmts = fmts;
	/* the input is bf16 already; act is fp32 already */
	j.in.a.v[CPU_ACT_BF16] = moem_dptr_host(a->x);
	j.in.ext = 1u << CPU_ACT_BF16;
	j.act.ext = 1u << CPU_ACT_F32;
	j.wlen = MOEM_CPU_SCRATCH_FLOATS(moem_max(a->H, a->I)) + 2 * 64 * MAX_ROWS;
	for (int pass = 0; pass < 2; pass++) {
		if (pass) {
			cv.base = moem_cpu_scratch(s, cv.used);
			if (!cv.base)
				return -ENOMEM;
			cv.used = 0;
		}
		carve_act(&cv, &j.in, a->B, a->H);
		j.in.f32 = j.in.a.v[CPU_ACT_F32];
		j.actf = carve(&cv, (size_t)4 * total * a->I);
		j.act.a.v[CPU_ACT_F32] = j.actf;
		j.act.f32 = j.actf;
		carve_act(&cv, &j.act, total, a->I);
		j.act_off = carve(&cv, 4 * (size_t)a->n_experts);
		j.tok = carve(&cv, 4 * (size_t)total);
		j.ident = carve(&cv, 4 * (size_t)moem_max(total, 16 * j.groups));
		j.voff = carve(&cv, 4 * (size_t)a->n_experts);
		j.gsrc = carve(&cv, 4 * (size_t)j.groups);
		j.gn = carve(&cv, j.groups);
		j.gprec = carve(&cv, j.groups);
		/* only the forms some expert reads: bf16 VNNI, q8/q4/q2 QT */
		j.vin.v[CPU_ACT_VNNI] = carve(&cv, (size_t)32 * vgroups * a->H);
		j.vact.v[CPU_ACT_VNNI] = carve(&cv, (size_t)32 * vgroups * a->I);
		j.qt_in = carve(&cv, (size_t)16 * qgroups * a->H);
		j.qt_act = carve(&cv, (size_t)16 * qgroups * a->I);
		j.enode = carve(&cv, 2 * (size_t)a->n_experts);
		items = a->n_experts * moem_max((a->I + j.gu_rows - 1) / j.gu_rows,
						(a->H + j.dn_rows - 1) / j.dn_rows);
		j.inode = carve(&cv, 2 * (size_t)items);
		j.wbuf = carve(&cv, 4 * j.wlen * nw);
	}
	total = 0;
	for (uint32_t e = 0, g = 0; e < a->n_experts; e++) {
		const struct moem_ffn_expert *ex = &a->experts[e];

		j.act_off[e] = total;
		j.voff[e] = 16 * g;
		for (uint32_t t = 0; t < ex->n; t++, total++)
			j.tok[total] = a->assign[ex->first + t].token;
		for (uint32_t t = 0; j.pack && t < ex->n; t += 16, g++) {
			j.gsrc[g] = j.act_off[e] + t;
			j.gn[g] = (uint8_t)moem_min(16, ex->n - t);
			j.gprec[g] = (uint8_t)ex->prec;
			/* a group to lay out: bf16 always, q8/q4/q2 where the AMX form reads it */
			lay |= ex->prec == MOEM_PREC_BF16 || j.gn[g] >= MOEM_CPU_AMX_QMIN;
		}
		j.enode[e] = moem_cpu_node_of(c, moem_dptr_host(ex->blob));
	}
	for (uint32_t i = 0; i < moem_max(total, 16 * j.groups); i++)
		j.ident[i] = i;
	j.vin.K = a->H;
	j.vact.K = a->I;
	j.rb1 = (a->I + j.gu_rows - 1) / j.gu_rows;
	j.rb2 = (a->H + j.dn_rows - 1) / j.dn_rows;

	if (need_f32)
		moem_tpool_run(c->pool, a->B, convert_rows, &j.in);
	if (j.in.fmts & ~((1u << CPU_ACT_F32) | (1u << CPU_ACT_BF16)))
		moem_tpool_run(c->pool, a->B, prep_row, &j.in);
	if (lay) {
		struct pack_job pj = {&j, &j.in.a, j.tok, &j.vin, j.qt_in};

		moem_tpool_run(c->pool, j.groups, pack_groups, &pj);
	}
	for (uint32_t i = 0; i < a->n_experts * j.rb1; i++)
		j.inode[i] = j.enode[i / j.rb1];
	ret = moem_tpool_run_nodes(c->pool, a->n_experts * j.rb1, gateup_rows, &j, j.inode);
	if (ret)
		return ret;
	if (j.act.fmts & ~(1u << CPU_ACT_F32))
		moem_tpool_run(c->pool, total, prep_row, &j.act);
	if (lay) {
		struct pack_job pj = {&j, &j.act.a, j.ident, &j.vact, j.qt_act};

		moem_tpool_run(c->pool, j.groups, pack_groups, &pj);
	}
	for (uint32_t i = 0; i < a->n_experts * j.rb2; i++)
		j.inode[i] = j.enode[i / j.rb2];
	return moem_tpool_run_nodes(c->pool, a->n_experts * j.rb2, down_rows, &j, j.inode);
}
