// SPDX-License-Identifier: GPL-2.0-only
/*
 * Determinism of the CPU backend: the grouped FFN (and a whole MoE layer
 * built from the ops) gives bitwise identical results for any thread
 * count, any expert order and any split of the experts into calls (the
 * engine runs resident experts first and late arrivals later). Also the
 * whole layer against a double-precision reference.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <moem/backend.h>
#include <moem/error.h>

#include "kselftest_harness.h"
#include "test_backend_util.h"

#define LH 256
#define LI 128
#define LN 16
#define LK 4
#define LB 12
#define NS 1 /* shared experts */

struct layer {
	struct tb_expert ex[LN], shared;
	uint16_t *gate, *norm_w;
	float *h;
};

static void layer_make(struct layer *L)
{
	for (int e = 0; e < LN; e++)
		tb_expert_make(&L->ex[e], (enum moem_prec)(e % MOEM_PREC_NR), LH, LI, 100 + e);
	tb_expert_make(&L->shared, MOEM_PREC_BF16, LH, LI, 99);
	L->gate = tb_rand_bf16(98, LN * LH, 0.2);
	L->norm_w = tb_rand_bf16(97, LH, 0.5);
	L->h = tb_rand_f32(96, LB * LH, 1.0);
}

static void layer_free(struct layer *L)
{
	for (int e = 0; e < LN; e++)
		tb_expert_free(&L->ex[e]);
	tb_expert_free(&L->shared);
	free(L->gate);
	free(L->norm_w);
	free(L->h);
}

/*
 * One MoE layer on backend be: rmsnorm -> router -> top-k -> FFN of the
 * routed experts (in `order`, split into `calls` calls) and the shared
 * expert -> combine. Returns the new residual in out[LB][LH].
 */
static int run_layer(struct moem_backend *be, const struct layer *L, const int *order, int calls,
		     float *out)
{
	struct moem_route_args ra = {.mode = MOEM_ROUTE_TOPK, .cfg = {LN, LK, true, 1.0f}, .B = LB};
	struct moem_rmsnorm_args na = {.B = LB, .H = LH, .eps = 1e-6f};
	struct moem_router_args rta = {.B = LB, .H = LH, .N = LN};
	struct moem_combine_args ca = {.B = LB, .H = LH, .k = LK, .n_shared = NS};
	struct moem_ffn_expert fe[LN];
	struct moem_ffn_assign as[LB * LK + LB];
	moem_dptr blobs[LN], sblob, y, routed, shared;
	int32_t ids[LB * LK];
	uint32_t cnt[LB], na_ = 0, done = 0;
	int ret = 0;

	na.x = tb_put(be, L->h, 4 * LB * LH);
	na.weight = tb_put(be, L->norm_w, 2 * LH);
	na.y = y = tb_zeros(be, 2 * LB * LH);
	rta.x = y;
	rta.gate = tb_put(be, L->gate, 2 * LN * LH);
	rta.logits = ra.logits = tb_zeros(be, 4 * LB * LN);
	ra.ids = tb_zeros(be, 4 * LB * LK);
	ra.w = tb_zeros(be, 4 * LB * LK);
	ra.cnt = tb_zeros(be, 4 * LB);
	routed = tb_zeros(be, 4 * LB * LK * LH);
	shared = tb_zeros(be, 4 * LB * NS * LH);
	for (int e = 0; e < LN; e++)
		blobs[e] = tb_put(be, L->ex[e].blob, L->ex[e].l.bytes);
	sblob = tb_put(be, L->shared.blob, L->shared.l.bytes);
	if ((ret = moem_op_rmsnorm(be, NULL, &na)) || (ret = moem_op_router(be, NULL, &rta)) ||
	    (ret = moem_op_route(be, NULL, &ra)) || (ret = tb_get(be, ids, ra.ids, sizeof(ids))) ||
	    (ret = tb_get(be, cnt, ra.cnt, sizeof(cnt))))
		goto out;
	/* Group the routed (token, slot) pairs by expert, in the given order. */
	for (int oi = 0; oi < LN; oi++) {
		int e = order[oi];

		fe[oi].blob = blobs[e];
		fe[oi].prec = L->ex[e].l.prec;
		fe[oi].first = na_;
		fe[oi].n = 0;
		for (uint32_t t = 0; t < LB; t++)
			for (uint32_t j = 0; j < cnt[t]; j++)
				if (ids[t * LK + j] == e) {
					as[na_].token = (uint16_t)t;
					as[na_++].slot = (uint16_t)j;
					fe[oi].n++;
				}
	}
	/* Experts nobody chose are dropped; the rest go out in `calls` calls. */
	{
		struct moem_ffn_expert used[LN];
		uint32_t nu = 0;

		for (int oi = 0; oi < LN; oi++)
			if (fe[oi].n)
				used[nu++] = fe[oi];
		for (int c = 0; c < calls; c++) {
			uint32_t lo = nu * c / calls, hi = nu * (c + 1) / calls;
			struct moem_ffn_args fa = {LB,	   LH,	    LI,	       LK,  y,
						   routed, hi - lo, used + lo, na_, as};

			if (hi > lo && (ret = moem_op_ffn(be, NULL, &fa)))
				goto out;
			done += hi - lo;
		}
	}
	{
		struct moem_ffn_expert se = {sblob, MOEM_PREC_BF16, na_, LB};
		struct moem_ffn_args fa = {LB, LH, LI, NS, y, shared, 1, &se, na_ + LB, as};

		for (uint32_t t = 0; t < LB; t++) {
			as[na_ + t].token = (uint16_t)t;
			as[na_ + t].slot = 0;
		}
		if ((ret = moem_op_ffn(be, NULL, &fa)))
			goto out;
	}
	ca.h = na.x;
	ca.routed = routed;
	ca.w = ra.w;
	ca.cnt = ra.cnt;
	ca.shared = shared;
	if ((ret = moem_op_combine(be, NULL, &ca)))
		goto out;
	ret = tb_get(be, out, na.x, 4 * LB * LH);
out:
	for (int e = 0; e < LN; e++)
		moem_be_free(be, blobs[e]);
	moem_be_free(be, sblob);
	moem_be_free(be, na.x);
	moem_be_free(be, na.weight);
	moem_be_free(be, y);
	moem_be_free(be, rta.gate);
	moem_be_free(be, ra.logits);
	moem_be_free(be, ra.ids);
	moem_be_free(be, ra.w);
	moem_be_free(be, ra.cnt);
	moem_be_free(be, routed);
	moem_be_free(be, shared);
	return ret;
}

TEST(bitwise_same_for_threads_order_and_splits)
{
	static const uint32_t threads[] = {1, 2, 3, 7};
	struct layer L;
	float *ref = malloc(4 * LB * LH), *got = malloc(4 * LB * LH);
	int order[LN], rev[LN];

	layer_make(&L);
	for (int e = 0; e < LN; e++) {
		order[e] = e;
		rev[e] = LN - 1 - e;
	}
	for (unsigned int ti = 0; ti < sizeof(threads) / sizeof(threads[0]); ti++) {
		struct moem_backend_opts o = {.threads = threads[ti]};
		struct moem_backend *be;

		ASSERT_EQ(0, moem_backend_open("cpu", &o, &be));
		for (int v = 0; v < 3; v++) {
			float *dst = ti == 0 && v == 0 ? ref : got;

			ASSERT_EQ(0, run_layer(be, &L, v == 1 ? rev : order, v == 2 ? 3 : 1, dst))
			TH_LOG("%s", moem_last_error());
			if (dst == got) {
				ASSERT_EQ(0, memcmp(ref, got, 4 * LB * LH))
				TH_LOG("threads %u variant %d differs", threads[ti], v);
			}
		}
		moem_backend_close(be);
	}
	layer_free(&L);
	free(ref);
	free(got);
}

/* The same layer in double precision from the same bf16/quantized data. */
TEST(layer_matches_double_reference)
{
	/* the scalar kernels against the double-precision reference */
	struct moem_backend_opts o = {.isa = MOEM_CPU_ISA_SCALAR};
	struct moem_backend *be;
	struct layer L;
	float *got = malloc(4 * LB * LH), xf[LH];
	int order[LN];
	double maxerr = 0, maxref = 0;

	layer_make(&L);
	for (int e = 0; e < LN; e++)
		order[e] = e;
	ASSERT_EQ(0, moem_backend_open("cpu", &o, &be));
	ASSERT_EQ(0, run_layer(be, &L, order, 1, got));
	for (uint32_t t = 0; t < LB; t++) {
		double ss = 0, r, z[LN], y[LH], acc[LH];
		struct moem_route_cfg cfg = {LN, LK, true, 1.0f};
		float zf[LN], w[LK];
		int32_t ids[LK];
		uint32_t cnt;
		struct moem_route_out ro = {ids, w, &cnt};

		for (uint32_t i = 0; i < LH; i++)
			ss += (double)L.h[t * LH + i] * L.h[t * LH + i];
		r = 1.0 / sqrt(ss / LH + 1e-6);
		for (uint32_t i = 0; i < LH; i++) /* the bf16 rounding is part of the model */
			xf[i] = moem_bf16_to_f32(moem_f32_to_bf16(
				(float)(L.h[t * LH + i] * r * moem_bf16_to_f32(L.norm_w[i]))));
		for (uint32_t e = 0; e < LN; e++) {
			z[e] = 0;
			for (uint32_t i = 0; i < LH; i++)
				z[e] += (double)xf[i] * moem_bf16_to_f32(L.gate[e * LH + i]);
			zf[e] = (float)z[e];
		}
		ASSERT_EQ(0, moem_route_topk(&cfg, 1, zf, NULL, &ro));
		ASSERT_EQ(0, moem_ffn_ref(&L.shared.l, L.shared.blob, xf, acc));
		for (uint32_t j = 0; j < cnt; j++) {
			ASSERT_EQ(0, moem_ffn_ref(&L.ex[ids[j]].l, L.ex[ids[j]].blob, xf, y));
			for (uint32_t i = 0; i < LH; i++)
				acc[i] += w[j] * y[i];
		}
		for (uint32_t i = 0; i < LH; i++) {
			double ref = L.h[t * LH + i] + acc[i];

			maxerr = fmax(maxerr, fabs(got[t * LH + i] - ref));
			maxref = fmax(maxref, fabs(acc[i]));
		}
	}
	TH_LOG("layer: max |err| %.3g, max |update| %.3g", maxerr, maxref);
	/* fp32 vs double, and a bf16 rounding of x that may flip in the last bit */
	EXPECT_LT(maxerr, 1e-3 * maxref);
	moem_backend_close(be);
	layer_free(&L);
	free(got);
}

TEST_HARNESS_MAIN
