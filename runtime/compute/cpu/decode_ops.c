// SPDX-License-Identifier: GPL-2.0-only
/*
 * CPU reference of the full-decode ops that are not attention
 * (backend.h): embedding, dense and per-head projections, row norms,
 * conversions, RoPE. One work item writes its own outputs in a fixed
 * order, so results do not depend on the batch or the thread count.
 */
#include <errno.h>
#include <math.h>

#include <moem/error.h>

#include "cpu_int.h"
#include "kern.h"

/* ---- embed ---- */

static void embed_row(void *arg, uint32_t t, uint32_t worker)
{
	const struct moem_embed_args *a = arg;
	const int32_t id = ((const int32_t *)moem_dptr_host(a->ids))[t];
	float *h = (float *)moem_dptr_host(a->h) + (size_t)t * a->H;

	if (id < 0 || (uint32_t)id >= a->V) {
		memset(h, 0, sizeof(float) * a->H); /* the decoder checks ids first */
		return;
	}
	bf16_to_f32_row((const uint16_t *)moem_dptr_host(a->table) + (size_t)id * a->H, h, a->H);
}

int moem_cpu_embed(struct moem_backend *be, struct moem_stream *s, const struct moem_embed_args *a)
{
	moem_tpool_run(cpu_of(be)->pool, a->B, embed_row, (void *)a);
	return 0;
}

/* ---- matmul ---- */

/*
 * Dense projections (q/k/v/o, MLA's, lm_head) run on the expert FFN's
 * row kernels of the backend's instruction set (kern.h): a [R][K] bf16
 * matrix is a moem_qmat_layout with no scales, a quantized one (prec)
 * is the layout of moem_qmat_layout(prec, R, K), its x quantized per
 * token in the kernel's format as the FFN's input is. Every output is
 * made by one kernel call in the kernel's fixed order, so the bits
 * depend on K and the ISA only, never on B, R's split or the threads.
 * The scalar table is the oracle (dequantize a row, dot_f32).
 */
#define MM_ROWS	    16
/*
 * amx: four row tiles (or panels) of 16 a call; bf16 with x laid out
 * once in VNNI form (kern.h; the B tiles every call would otherwise
 * build). A q8/q4/q2 call's own setup (the tokens' block sums, the
 * first panel's prefetch) took a quarter of a 16-row call at batch 1.
 */
#define MM_AMX_ROWS 64

struct mm_job {
	const struct moem_matmul_args *a;
	moem_cpu_rows_fn rows;
	struct moem_qmat_layout l;
	struct cpu_act act;
	uint32_t nrows;	       /* rows of an item */
	const uint32_t *ident; /* 0..B-1 */
	float *wbuf;	       /* [workers][MOEM_CPU_SCRATCH_FLOATS(K)] */
};

static void mm_rows(void *arg, uint32_t item, uint32_t worker)
{
	struct mm_job *j = arg;
	const struct moem_matmul_args *a = j->a;
	uint32_t r0 = item * j->nrows, r1 = moem_min(r0 + j->nrows, a->R);

	j->rows(&j->l, moem_dptr_host(a->w), r0, r1, &j->act, j->ident, a->B,
		(float *)moem_dptr_host(a->y) + r0, a->R,
		j->wbuf + worker * MOEM_CPU_SCRATCH_FLOATS(a->K));
}

/* VNNI group g of x, straight from its bf16 rows. */
static void mm_pack(void *arg, uint32_t g, uint32_t worker)
{
	struct mm_job *j = arg;

	moem_cpu_amx_pack(j->act.v[CPU_ACT_BF16], NULL, moem_min(16, j->a->B - 16 * g), j->a->K,
			  (uint32_t *)j->act.v[CPU_ACT_VNNI], 16 * g);
}

int moem_cpu_matmul(struct moem_backend *be, struct moem_stream *s,
		    const struct moem_matmul_args *a)
{
	struct cpu_backend *c = cpu_of(be);
	const struct moem_cpu_kern *k = c->kern;
	const enum moem_prec p = a->prec;
	uint32_t nw = moem_tpool_size(c->pool), fmt, qfmts = 0;
	struct mm_job j = {.a = a};
	size_t xn = (size_t)a->B * a->K, wn = nw * MOEM_CPU_SCRATCH_FLOATS(a->K), qb = 0, ib;
	bool pack;
	float *buf;
	uint32_t *ident;
	uint8_t *mem;
	int ret;

	/* AVX-512 and AMX step bf16 over K 32 at a time, AVX2 and the scalar table 8 (K % 8 == 0) */
	if (p == MOEM_PREC_BF16 && (k->isa == MOEM_CPU_ISA_AVX512 || k->isa == MOEM_CPU_ISA_AMX) &&
	    a->K % 32)
		k = moem_cpu_isa_check(MOEM_CPU_ISA_AVX2) ? &moem_cpu_kern_scalar
							  : &moem_cpu_kern_avx2;
	j.rows = k->rows[p];
	fmt = k->fmt[p];
	pack = p == MOEM_PREC_BF16 && k->isa == MOEM_CPU_ISA_AMX;
	j.nrows = k->isa == MOEM_CPU_ISA_AMX ? MM_AMX_ROWS : MM_ROWS;
	if (pack)
		qb = (size_t)2 * a->K * moem_align_up(a->B, 16);
	if (p == MOEM_PREC_BF16) {
		j.l = (struct moem_qmat_layout){.prec = MOEM_PREC_BF16,
						.rows = a->R,
						.cols = a->K,
						.row_bytes = 2 * a->K,
						.bytes = (uint64_t)2 * a->R * a->K};
	} else {
		ret = moem_qmat_layout(p, a->R, a->K, &j.l); /* checked by moem_op_matmul */
		if (ret)
			return ret;
		if (fmt != CPU_ACT_F32) {
			qfmts = 1u << fmt;
			qb = moem_cpu_act_bytes(a->B, a->K, qfmts);
		}
	}
	/* B ids, then the fp32 x and the workers' scratch, then x quantized (64-aligned) */
	ib = moem_align_up((size_t)a->B * sizeof(uint32_t) + (xn + wn) * sizeof(float), 64);
	mem = moem_cpu_scratch(s, ib + qb);
	if (!mem)
		return -ENOMEM;
	ident = (uint32_t *)(void *)mem;
	buf = (float *)(void *)(ident + a->B);
	for (uint32_t t = 0; t < a->B; t++)
		ident[t] = t;
	j.ident = ident;
	j.wbuf = buf + xn;
	j.act.K = a->K;
	j.act.v[CPU_ACT_BF16] = moem_dptr_host(a->x);
	if (fmt != CPU_ACT_BF16) {
		moem_cpu_convert_x(c->pool, moem_dptr_host(a->x), buf, a->B, a->K);
		j.act.v[CPU_ACT_F32] = buf;
	}
	if (qfmts) {
		/* replaces j.act: the f32 rows stay its source */
		moem_cpu_prepare_act_in(c->pool, buf, a->B, a->K, qfmts, mem + ib, &j.act);
	}
	if (pack) {
		j.act.v[CPU_ACT_VNNI] = mem + ib;
		moem_tpool_run(c->pool, (a->B + 15) / 16, mm_pack, &j);
	}
	moem_tpool_run(c->pool, (a->R + j.nrows - 1) / j.nrows, mm_rows, &j);
	return 0;
}

/* ---- rownorm ---- */

static void rownorm_row(void *arg, uint32_t r, uint32_t worker)
{
	const struct moem_rownorm_args *a = arg;
	const float *x = (const float *)moem_dptr_host(a->x) + (size_t)r * a->x_stride;
	const uint16_t *w = moem_dptr_host(a->weight);
	double ss = 0;
	float ms, rs;

	for (uint32_t i = 0; i < a->n; i++)
		ss += (double)x[i] * x[i];
	ms = (float)(ss / a->n);
	rs = 1.0f / sqrtf(ms + a->eps);
	if (a->y_bf16) {
		uint16_t *y = (uint16_t *)moem_dptr_host(a->y) + (size_t)r * a->y_stride;

		for (uint32_t i = 0; i < a->n; i++)
			y[i] = moem_f32_to_bf16((x[i] * rs) * moem_bf16_to_f32(w[i]));
	} else {
		float *y = (float *)moem_dptr_host(a->y) + (size_t)r * a->y_stride;

		for (uint32_t i = 0; i < a->n; i++)
			y[i] = (x[i] * rs) * moem_bf16_to_f32(w[i]);
	}
}

int moem_cpu_rownorm(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_rownorm_args *a)
{
	moem_tpool_run(cpu_of(be)->pool, a->rows, rownorm_row, (void *)a);
	return 0;
}

/* ---- convert ---- */

static void convert_row2(void *arg, uint32_t r, uint32_t worker)
{
	const struct moem_convert_args *a = arg;
	const float *x = (const float *)moem_dptr_host(a->x) + (size_t)r * a->x_stride;
	const float c = a->clip;

	for (uint32_t i = 0; i < a->n; i++) {
		float v = x[i];

		if (c > 0)
			v = v > c ? c : v < -c ? -c : v;
		if (a->y_bf16)
			((uint16_t *)moem_dptr_host(a->y))[(size_t)r * a->y_stride + i] =
				moem_f32_to_bf16(v);
		else
			((float *)moem_dptr_host(a->y))[(size_t)r * a->y_stride + i] = v;
	}
}

int moem_cpu_convert(struct moem_backend *be, struct moem_stream *s,
		     const struct moem_convert_args *a)
{
	/* In place with overlapping strides would race: run it on one thread. */
	if (a->x == a->y && a->x_stride != a->y_stride) {
		for (uint32_t r = 0; r < a->rows; r++)
			convert_row2((void *)a, r, 0);
		return 0;
	}
	moem_tpool_run(cpu_of(be)->pool, a->rows, convert_row2, (void *)a);
	return 0;
}

/* ---- rope ---- */

static void rope_token(void *arg, uint32_t t, uint32_t worker)
{
	const struct moem_rope_args *a = arg;
	const int32_t p = ((const int32_t *)moem_dptr_host(a->pos))[t];
	const uint32_t half = a->dim / 2;
	const float *cs, *sn;

	if (p < 0 || (uint32_t)p >= a->n_pos)
		return; /* the decoder never asks for a position past its tables */
	cs = (const float *)moem_dptr_host(a->cos) + (size_t)p * half;
	sn = (const float *)moem_dptr_host(a->sin) + (size_t)p * half;
	for (uint32_t h = 0; h < a->n_heads; h++) {
		float *x = (float *)moem_dptr_host(a->x) + (size_t)t * a->tok_stride +
			   (size_t)h * a->head_stride + a->off;

		for (uint32_t i = 0; i < half; i++) {
			float *p0 = a->pairs ? &x[2 * i] : &x[i];
			float *p1 = a->pairs ? &x[2 * i + 1] : &x[i + half];
			float x0 = *p0, x1 = *p1;

			*p0 = x0 * cs[i] - x1 * sn[i];
			*p1 = x1 * cs[i] + x0 * sn[i];
		}
	}
}

int moem_cpu_rope(struct moem_backend *be, struct moem_stream *s, const struct moem_rope_args *a)
{
	moem_tpool_run(cpu_of(be)->pool, a->T, rope_token, (void *)a);
	return 0;
}

/* ---- head_matmul ---- */

/*
 * Every output is one chain in input order, acc = acc + x[i] * w (each
 * product and sum rounded once), which the CUDA kernel (cuda/
 * head_matmul.cu) computes bit for bit. Without the transpose a row of
 * W_h is one output, so the plain loop was one chain of dependent adds
 * at a time (MLA's W_UV: 4.5 ms for 8 tokens of DeepSeek-V2-Lite's 16
 * heads on a 2-thread AMD EPYC). The AVX2 form takes 8 rows at once, the
 * lanes of one accumulator: each 8 x 8 block of them is transposed in
 * registers, so each lane runs its own row's chain in the same order;
 * with the transpose, 32 consecutive outputs are the lanes of four.
 */
#define HM_ROWS 8

#if MOEM_CPU_X86_GCC
/* y[j] = chain over i < n of x[i] * w[j * ld + i], j < 8. */
__attribute__((target("avx2"))) static void hm_rows8_avx2(const float *x, const uint16_t *w,
							  uint32_t ld, uint32_t n, float *y)
{
	__m256 acc = _mm256_setzero_ps();
	uint32_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 r0 = moem_cpu_bf16x8_avx2(w + i), r1 = moem_cpu_bf16x8_avx2(w + ld + i),
		       r2 = moem_cpu_bf16x8_avx2(w + 2 * ld + i),
		       r3 = moem_cpu_bf16x8_avx2(w + 3 * ld + i),
		       r4 = moem_cpu_bf16x8_avx2(w + 4 * ld + i),
		       r5 = moem_cpu_bf16x8_avx2(w + 5 * ld + i),
		       r6 = moem_cpu_bf16x8_avx2(w + 6 * ld + i),
		       r7 = moem_cpu_bf16x8_avx2(w + 7 * ld + i);
		/* the 8 x 8 transpose: c[k] = {r0[k], ..., r7[k]} */
		__m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
		       t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3),
		       t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
		       t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
		__m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee),
		       u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee),
		       u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee),
		       u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
		__m256 c[8] = {
			_mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
			_mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
			_mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
			_mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31),
		};

#pragma GCC unroll 8
		for (int k = 0; k < 8; k++)
			acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(x[i + k]), c[k]));
	}
	for (; i < n; i++) {
		float col[HM_ROWS];

		for (int j = 0; j < HM_ROWS; j++)
			col[j] = moem_bf16_to_f32(w[(size_t)j * ld + i]);
		acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(x[i]), _mm256_loadu_ps(col)));
	}
	_mm256_storeu_ps(y, acc);
}

/* y[o] = chain over i < n of x[i] * w[i * ld + o], o < m (m % 8 == 0): W_h read by columns. */
__attribute__((target("avx2"))) static void
hm_cols_avx2(const float *x, const uint16_t *w, uint32_t ld, uint32_t n, uint32_t m, float *y)
{
	uint32_t o = 0;

	for (; o + 32 <= m; o += 32) {
		__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;

		for (uint32_t i = 0; i < n; i++) {
			const uint16_t *wr = w + (size_t)i * ld + o;
			const __m256 s = _mm256_set1_ps(x[i]);

			a0 = _mm256_add_ps(a0, _mm256_mul_ps(s, moem_cpu_bf16x8_avx2(wr)));
			a1 = _mm256_add_ps(a1, _mm256_mul_ps(s, moem_cpu_bf16x8_avx2(wr + 8)));
			a2 = _mm256_add_ps(a2, _mm256_mul_ps(s, moem_cpu_bf16x8_avx2(wr + 16)));
			a3 = _mm256_add_ps(a3, _mm256_mul_ps(s, moem_cpu_bf16x8_avx2(wr + 24)));
		}
		_mm256_storeu_ps(y + o, a0);
		_mm256_storeu_ps(y + o + 8, a1);
		_mm256_storeu_ps(y + o + 16, a2);
		_mm256_storeu_ps(y + o + 24, a3);
	}
	for (; o < m; o += 8) {
		__m256 a0 = _mm256_setzero_ps();

		for (uint32_t i = 0; i < n; i++)
			a0 = _mm256_add_ps(
				a0, _mm256_mul_ps(_mm256_set1_ps(x[i]),
						  moem_cpu_bf16x8_avx2(w + (size_t)i * ld + o)));
		_mm256_storeu_ps(y + o, a0);
	}
}
#endif

struct head_mm_job {
	const struct moem_head_matmul_args *a;
	bool avx2;
};

static void head_mm(void *arg, uint32_t item, uint32_t worker)
{
	const struct head_mm_job *j = arg;
	const struct moem_head_matmul_args *a = j->a;
	const uint32_t t = item / a->n_heads, h = item % a->n_heads;
	const float *x = (const float *)moem_dptr_host(a->x) + (size_t)t * a->x_tok_stride +
			 (size_t)h * a->x_head_stride;
	const uint16_t *w = (const uint16_t *)moem_dptr_host(a->w) + (size_t)h * a->w_head_stride;
	float *y = (float *)moem_dptr_host(a->y) + (size_t)t * a->y_tok_stride +
		   (size_t)h * a->y_head_stride;
	uint32_t o = 0;

	if (a->transpose) {
#if MOEM_CPU_X86_GCC
		if (j->avx2) {
			o = a->out_dim / HM_ROWS * HM_ROWS;
			hm_cols_avx2(x, w, a->w_row_stride, a->in_dim, o, y);
		}
#endif
		for (uint32_t c = o; c < a->out_dim; c++)
			y[c] = 0.0f;
		for (uint32_t i = 0; i < a->in_dim; i++) {
			const uint16_t *wr = w + (size_t)i * a->w_row_stride;

			for (uint32_t c = o; c < a->out_dim; c++)
				y[c] += x[i] * moem_bf16_to_f32(wr[c]);
		}
		return;
	}
#if MOEM_CPU_X86_GCC
	if (j->avx2)
		for (; o + HM_ROWS <= a->out_dim; o += HM_ROWS)
			hm_rows8_avx2(x, w + (size_t)o * a->w_row_stride, a->w_row_stride,
				      a->in_dim, y + o);
#endif
	for (; o < a->out_dim; o++) {
		const uint16_t *wr = w + (size_t)o * a->w_row_stride;
		float acc = 0.0f;

		for (uint32_t i = 0; i < a->in_dim; i++)
			acc += x[i] * moem_bf16_to_f32(wr[i]);
		y[o] = acc;
	}
}

int moem_cpu_head_matmul(struct moem_backend *be, struct moem_stream *s,
			 const struct moem_head_matmul_args *a)
{
	struct head_mm_job j = {a, be->info.isa >= MOEM_CPU_ISA_AVX2};

	moem_tpool_run(cpu_of(be)->pool, a->T * a->n_heads, head_mm, &j);
	return 0;
}
