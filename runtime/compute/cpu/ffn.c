// SPDX-License-Identifier: GPL-2.0-only
/*
 * CPU grouped expert FFN (backend.h moem_op_ffn). Two passes over the
 * thread pool, each item a block of rows of one expert:
 *   1. gate/up: dequantize rows i of gate and up once (fp32, exactly the
 *      values moem_dequantize_row() gives), dot them with each of the
 *      expert's tokens, act[a][i] = silu(g) * u;
 *   2. down: dequantize row h of down, dot it with each act row, write
 *      out[token][slot][h].
 * Every output element is produced by one item with dot_f32()'s fixed
 * order, so results are bitwise independent of thread count, scheduling
 * and expert order.
 */
#include <errno.h>
#include <math.h>

#include <moem/error.h>

#include "cpu_int.h"

#define GATEUP_ROWS 16
#define DOWN_ROWS   32

struct ffn_job {
	const struct moem_ffn_args *a;
	struct moem_expert_layout lay[MOEM_PREC_NR];
	const float *xf;   /* [B][H] */
	float *act;	   /* [sum n][I], expert e's rows start at act_off[e] */
	uint32_t *act_off; /* [n_experts] */
	float *wbuf;	   /* [workers][2][wlen] */
	uint32_t wlen;
	uint32_t rb1, rb2; /* row blocks per expert in pass 1 and 2 */
};

/* Row r of a matrix in layout l at base, as fp32 (== moem_dequantize_row). */
MOEM_CPU_CLONES static void dequant_row(const struct moem_qmat_layout *l, const uint8_t *base,
					uint32_t r, float *out)
{
	const uint8_t *q = base + l->data_off + (size_t)r * l->row_bytes;
	const uint16_t *sc =
		(const uint16_t *)(base + l->scale_off) + (size_t)r * l->groups_per_row;
	const uint16_t *mn = (const uint16_t *)(base + l->min_off) + (size_t)r * l->groups_per_row;
	const uint32_t G = l->group;

	switch (l->prec) {
	case MOEM_PREC_BF16:
		bf16_to_f32_row((const uint16_t *)q, out, l->cols);
		break;
	case MOEM_PREC_Q8:
		for (uint32_t g = 0; g < l->groups_per_row; g++) {
			const int8_t *qg = (const int8_t *)q + (size_t)g * G;
			float s = moem_f16_to_f32(sc[g]), *o = out + (size_t)g * G;

			for (uint32_t i = 0; i < G; i++)
				o[i] = (float)qg[i] * s;
		}
		break;
	case MOEM_PREC_Q4:
		for (uint32_t g = 0; g < l->groups_per_row; g++) {
			const uint8_t *qg = q + (size_t)g * G / 2;
			float s = moem_f16_to_f32(sc[g]), m = moem_f16_to_f32(mn[g]);
			float *o = out + (size_t)g * G;

			for (uint32_t i = 0; i < G / 2; i++) {
				o[2 * i] = (float)(qg[i] & 15u) * s + m;
				o[2 * i + 1] = (float)(qg[i] >> 4) * s + m;
			}
		}
		break;
	default: /* q2 */
		for (uint32_t g = 0; g < l->groups_per_row; g++) {
			const uint8_t *qg = q + (size_t)g * G / 4;
			float s = moem_f16_to_f32(sc[g]), m = moem_f16_to_f32(mn[g]);
			float *o = out + (size_t)g * G;

			for (uint32_t i = 0; i < G / 4; i++)
				for (uint32_t b = 0; b < 4; b++)
					o[4 * i + b] = (float)((qg[i] >> (2 * b)) & 3u) * s + m;
		}
		break;
	}
}

static inline float silu(float g)
{
	return g / (1.0f + expf(-g));
}

MOEM_CPU_CLONES static void gateup_rows(void *arg, uint32_t item, uint32_t worker)
{
	struct ffn_job *j = arg;
	const struct moem_ffn_args *a = j->a;
	uint32_t e = item / j->rb1, blk = item % j->rb1;
	const struct moem_ffn_expert *ex = &a->experts[e];
	const struct moem_expert_layout *l = &j->lay[ex->prec];
	const uint8_t *blob = moem_dptr_host(ex->blob);
	float *wg = j->wbuf + (size_t)worker * 2 * j->wlen, *wu = wg + j->wlen;
	uint32_t r0 = blk * GATEUP_ROWS, r1 = moem_min(r0 + GATEUP_ROWS, a->I);

	for (uint32_t r = r0; r < r1; r++) {
		dequant_row(&l->mat[MOEM_MAT_GATE], blob + l->mat_off[MOEM_MAT_GATE], r, wg);
		dequant_row(&l->mat[MOEM_MAT_UP], blob + l->mat_off[MOEM_MAT_UP], r, wu);
		for (uint32_t t = 0; t < ex->n; t++) {
			const float *x = j->xf + (size_t)a->assign[ex->first + t].token * a->H;
			float g = dot_f32(wg, x, a->H), u = dot_f32(wu, x, a->H);

			j->act[((size_t)j->act_off[e] + t) * a->I + r] = silu(g) * u;
		}
	}
}

MOEM_CPU_CLONES static void down_rows(void *arg, uint32_t item, uint32_t worker)
{
	struct ffn_job *j = arg;
	const struct moem_ffn_args *a = j->a;
	uint32_t e = item / j->rb2, blk = item % j->rb2;
	const struct moem_ffn_expert *ex = &a->experts[e];
	const struct moem_expert_layout *l = &j->lay[ex->prec];
	const uint8_t *blob = moem_dptr_host(ex->blob);
	float *out = moem_dptr_host(a->out);
	float *wd = j->wbuf + (size_t)worker * 2 * j->wlen;
	uint32_t h0 = blk * DOWN_ROWS, h1 = moem_min(h0 + DOWN_ROWS, a->H);

	for (uint32_t h = h0; h < h1; h++) {
		dequant_row(&l->mat[MOEM_MAT_DOWN], blob + l->mat_off[MOEM_MAT_DOWN], h, wd);
		for (uint32_t t = 0; t < ex->n; t++) {
			const struct moem_ffn_assign *as = &a->assign[ex->first + t];
			const float *act = j->act + ((size_t)j->act_off[e] + t) * a->I;

			out[((size_t)as->token * a->n_slots + as->slot) * a->H + h] =
				dot_f32(wd, act, a->I);
		}
	}
}

int moem_cpu_ffn(struct moem_backend *be, struct moem_stream *s, const struct moem_ffn_args *a)
{
	struct cpu_backend *c = cpu_of(be);
	uint32_t nw = moem_tpool_size(c->pool), total = 0;
	struct ffn_job j = {.a = a};
	size_t xf_n, act_n, off_n, w_n;
	uint8_t *buf;
	float *xf;

	for (int p = 0; p < MOEM_PREC_NR; p++)
		if (moem_expert_layout((enum moem_prec)p, a->H, a->I, &j.lay[p]))
			memset(&j.lay[p], 0, sizeof(j.lay[p])); /* checked per expert upstream */
	for (uint32_t e = 0; e < a->n_experts; e++)
		total += a->experts[e].n; /* <= 64 * 64: assignments are unique */
	j.wlen = moem_max(a->H, a->I);
	xf_n = (size_t)a->B * a->H;
	act_n = (size_t)total * a->I;
	off_n = (a->n_experts + 15) & ~15u;
	w_n = (size_t)nw * 2 * j.wlen;
	buf = moem_cpu_scratch(s, (xf_n + act_n + off_n + w_n) * sizeof(float));
	if (!buf)
		return -ENOMEM;
	/* [xf floats][act floats][act_off u32][wbuf floats], all 4-byte units */
	j.xf = xf = (float *)(void *)buf;
	j.act = (float *)(void *)(buf + 4 * xf_n);
	j.act_off = (uint32_t *)(void *)(buf + 4 * (xf_n + act_n));
	j.wbuf = (float *)(void *)(buf + 4 * (xf_n + act_n + off_n));
	total = 0;
	for (uint32_t e = 0; e < a->n_experts; e++) {
		j.act_off[e] = total;
		total += a->experts[e].n;
	}
	j.rb1 = (a->I + GATEUP_ROWS - 1) / GATEUP_ROWS;
	j.rb2 = (a->H + DOWN_ROWS - 1) / DOWN_ROWS;
	moem_cpu_convert_x(c->pool, moem_dptr_host(a->x), xf, a->B, a->H);
	moem_tpool_run(c->pool, a->n_experts * j.rb1, gateup_rows, &j);
	moem_tpool_run(c->pool, a->n_experts * j.rb2, down_rows, &j);
	return 0;
}
