// SPDX-License-Identifier: GPL-2.0-only
/*
 * Synthetic routing traces: the structured workload of synth.h, routed by
 * vanilla top-k, one record per (step, MoE layer). Deterministic: the
 * generator's two streams (intents, noise) are consumed in a fixed order.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/route.h>
#include <moem/trace.h>

void moem_trace_gen_info(const struct moem_trace_gen_opts *o, struct moem_trace_info *info)
{
	const struct moem_synth_params *p = &o->synth;

	memset(info, 0, sizeof(*info));
	info->flags = MOEM_TRACE_F_SYNTHETIC | (o->logits ? MOEM_TRACE_F_LOGITS : 0);
	info->source = MOEM_TRACE_SRC_SYNTH;
	info->n_layers = p->n_layers;
	info->n_experts = p->n_experts;
	info->top_k = p->top_k;
	info->max_tokens = o->batch;
	info->seed = p->seed;
	info->pregate_depth = o->pregate;
	info->hidden = o->hidden;
	info->moe_inter = o->moe_inter;
	snprintf(info->desc, sizeof(info->desc), "synthetic B=%u zipf=%.2f drift=%.3f W=%u",
		 o->batch, p->zipf_s, p->drift, p->n_workloads);
}

/* Pre-gate picks of layers m + 1 .. m + D ([D][B][K]; -1 past the step's last layer). */
static int pregate(struct moem_synth *g, const struct moem_trace_gen_opts *o, uint32_t m, float *z,
		   int32_t *pg)
{
	const uint32_t B = o->batch, N = o->synth.n_experts, K = o->synth.top_k;
	struct moem_route_cfg rc = {N, K, true, 1.0f};
	float wt[MOEM_TRACE_MAX_TOPK * 64] = {0};
	uint32_t cnt[64] = {0};
	int ret = 0;

	for (uint32_t d = 1; d <= o->pregate && !ret; d++) {
		int32_t *ids = pg + (size_t)(d - 1) * B * K;

		if (m + d >= o->synth.n_layers) {
			for (size_t i = 0; i < (size_t)B * K; i++)
				ids[i] = -1;
			continue;
		}
		/* in chunks of 64 tokens: route.h's output arrays */
		for (uint32_t b0 = 0; b0 < B && !ret; b0 += 64) {
			uint32_t n = B - b0 < 64 ? B - b0 : 64;
			struct moem_route_out out = {ids + (size_t)b0 * K, wt, cnt};

			for (uint32_t b = 0; b < n; b++)
				moem_synth_pregate(g, b0 + b, m, d, z + (size_t)b * N);
			ret = moem_route_topk(&rc, n, z, NULL, &out);
		}
	}
	return ret;
}

int moem_trace_gen(const struct moem_trace_gen_opts *o, struct moem_trace_writer *w,
		   void (*progress)(void *arg, uint64_t step), void *arg)
{
	const struct moem_synth_params *p = &o->synth;
	const uint32_t B = o->batch, N = p->n_experts, K = p->top_k;
	struct moem_route_cfg rc = {N, K, true, 1.0f};
	struct moem_route_out out;
	struct moem_synth *g = NULL;
	int32_t *ids = NULL, *pg = NULL;
	float *wt = NULL, *z = NULL;
	uint32_t *cnt = NULL;
	int ret;

	if (!o->steps || o->steps > (1ull << 40))
		return moem_errf(EINVAL, "trace gen: %llu steps, want 1..2^40",
				 (unsigned long long)o->steps);
	if (!B || B > MOEM_TRACE_MAX_TOKENS)
		return moem_errf(EINVAL, "trace gen: batch %u, want 1..%u", B,
				 MOEM_TRACE_MAX_TOKENS);
	ret = moem_synth_create(p, o->mix, B, &g);
	if (ret)
		return ret;
	ids = malloc(sizeof(*ids) * B * K);
	wt = malloc(sizeof(*wt) * B * K);
	cnt = malloc(sizeof(*cnt) * B);
	z = malloc(sizeof(*z) * B * N);
	pg = o->pregate ? malloc(sizeof(*pg) * o->pregate * B * K) : NULL;
	if (!ids || !wt || !cnt || !z || (o->pregate && !pg)) {
		ret = -ENOMEM;
		goto out;
	}
	out = (struct moem_route_out){ids, wt, cnt};
	for (uint64_t s = 0; s < o->steps; s++) {
		moem_synth_step(g);
		for (uint32_t m = 0; m < p->n_layers; m++) {
			struct moem_trace_rec rec = {s,	   m, B, ids, wt, o->logits ? z : NULL,
						     NULL, pg};

			ret = pregate(g, o, m, z, pg);
			for (uint32_t b = 0; b < B; b++)
				moem_synth_logits(g, b, m, z + (size_t)b * N);
			if (!ret)
				ret = moem_route_topk(&rc, B, z, NULL, &out);
			if (!ret)
				ret = moem_trace_write(w, &rec);
			if (ret)
				goto out;
		}
		if (progress)
			progress(arg, s + 1);
	}
out:
	free(ids);
	free(pg);
	free(wt);
	free(cnt);
	free(z);
	moem_synth_destroy(g);
	return ret;
}
