// SPDX-License-Identifier: GPL-2.0-only
/*
 * Decode steps planned on the device (engine_int.h, "dstep"): when every
 * expert of every MoE layer has its planned version in HBM at the start
 * of a step, the step pins them all, writes where they are into a
 * device-resident residency table, and each MoE layer routes and plans
 * its grouped FFN on the device (moem_op_ffn_routed) with no host round
 * trip. The router's picks go to pinned host memory asynchronously; the
 * host reads them after the step's one synchronisation and only then
 * makes its decisions for them (route counts, the policy driver's
 * routing, uses and layer ends, prefetch): one step behind, which is
 * lossless because nothing the step reads can move while it is pinned.
 * Any other step (an expert missing, a fallback version, a policy that
 * needs the host inside a layer) takes the per-layer path of layer.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/usdt.h>
#include <moem/util.h>

#include "engine_int.h"

struct moem_eng_dstep {
	bool on; /* the current step is planned on the device */
	bool disabled;
	bool tab_valid; /* tab_h is what the device table holds */
	uint32_t B;
	uint64_t t0;
	uint32_t prec_mask;
	moem_dptr table;  /* struct moem_res_entry [n_moe][N] */
	moem_dptr status; /* u32 [n_moe] */
	/* One registered host block: the table's mirror, then the copies back. */
	void *host;
	size_t host_bytes;
	struct moem_res_entry *tab_h;
	uint32_t *status_h;		/* [n_moe] */
	int32_t *ids_h;			/* [n_moe][ENG_MAX_B * K] */
	float *w_h;			/* [n_moe][ENG_MAX_B * K] */
	uint32_t *cnt_h;		/* [n_moe][ENG_MAX_B] */
	struct moem_res_entry *tab_new; /* this step's table, before the compare */
	struct moem_xref *refs;		/* [n_moe][N] pinned for the step */
	uint8_t *pinned;		/* [n_moe][N] */
};

void moem_eng_dstep_free(struct moem_engine *e)
{
	struct moem_eng_dstep *ds = e->ds;

	if (!ds)
		return;
	moem_eng_dstep_abort(e);
	if (ds->host) {
		moem_be_host_unregister(e->be, ds->host);
		free(ds->host);
	}
	if (ds->table)
		moem_be_free(e->be, ds->table);
	if (ds->status)
		moem_be_free(e->be, ds->status);
	free(ds->tab_new);
	free(ds->refs);
	free(ds->pinned);
	free(ds);
	e->ds = NULL;
}

static int dstep_alloc(struct moem_engine *e)
{
	const uint32_t N = e->cfg->n_experts, K = e->cfg->top_k, L = e->n_moe;
	const size_t tab = (size_t)L * N * sizeof(struct moem_res_entry);
	const size_t st = moem_align_up((uint64_t)L * 4, 64);
	const size_t pairs = (size_t)L * ENG_MAX_B * K;
	struct moem_eng_dstep *ds = calloc(1, sizeof(*ds));
	int ret;

	if (!ds)
		return -ENOMEM;
	e->ds = ds;
	ds->disabled = getenv("MOEM_DEVICE_PLAN") && !strcmp(getenv("MOEM_DEVICE_PLAN"), "0");
	ds->host_bytes = moem_align_up(tab + st + pairs * 8 + (size_t)L * ENG_MAX_B * 4, 4096);
	ds->host = aligned_alloc(4096, ds->host_bytes);
	ds->tab_new = malloc(tab);
	ds->refs = calloc((size_t)L * N, sizeof(*ds->refs));
	ds->pinned = calloc((size_t)L * N, 1);
	if (!ds->host || !ds->tab_new || !ds->refs || !ds->pinned) {
		free(ds->host);
		ds->host = NULL;
		return -ENOMEM;
	}
	memset(ds->host, 0, ds->host_bytes);
	ret = moem_be_host_register(e->be, ds->host, ds->host_bytes);
	if (ret) {
		free(ds->host);
		ds->host = NULL;
		return moem_err_prefix(-ret, "device-planned steps: pinning %zu bytes",
				       ds->host_bytes);
	}
	ds->tab_h = ds->host;
	ds->status_h = (void *)((uint8_t *)ds->host + tab);
	ds->ids_h = (void *)((uint8_t *)ds->status_h + st);
	ds->w_h = (void *)((uint8_t *)ds->ids_h + pairs * 4);
	ds->cnt_h = (void *)((uint8_t *)ds->w_h + pairs * 4);
	ret = moem_be_alloc(e->be, tab, &ds->table);
	if (!ret)
		ret = moem_be_alloc(e->be, (uint64_t)L * 4, &ds->status);
	for (uint32_t p = 0; p < e->n_prec; p++)
		ds->prec_mask |= 1u << e->prec[p];
	return ret;
}

/* Can this step be planned on the device at all (before looking at residency)? */
static bool dstep_allowed(const struct moem_engine *e, uint32_t B)
{
	switch (e->rp.kind) {
	case MOEM_RP_NONE:
	case MOEM_RP_LYNX:
	case MOEM_RP_OEA:
	case MOEM_RP_CACHE_AWARE:
		break;
	default:
		return false; /* piggyback, prune: the host decides inside the layer */
	}
	/*
	 * No pre-gate either: its routers on each layer's input only hint
	 * prefetches, and with every expert pinned in HBM there is nothing
	 * to prefetch. FluxMoE's paging moves experts inside the step; a
	 * trace wants the routing (and logits) layer by layer.
	 */
	/*
	 * Hybrid execution: experts placed on the CPU (--place,
	 * --cpu-moe-layers) are never in HBM, so the per-layer path runs them; with exec hybrid alone a step with every
	 * expert resident sends none to the CPU (moem_cost_exec), so planning
	 * it on the device changes nothing.
	 */
	return moem_be_has_ffn_routed(e->be) && B <= MOEM_BE_MAX_TOKENS && e->n_moe && !e->uvm &&
	       !e->dcfg.paging && !e->trace && !e->o.trace_logits && !e->n_placed_cpu;
}

/* Give back the step's pins: one release (one lock) per layer. */
static void unpin(struct moem_engine *e)
{
	struct moem_eng_dstep *ds = e->ds;
	const uint32_t N = e->cfg->n_experts;
	uint64_t seq = 0;

	for (uint32_t m = 0; m < e->n_moe; m++) {
		struct moem_xref *refs = ds->refs + (size_t)m * N;
		uint8_t *pinned = ds->pinned + (size_t)m * N;
		uint32_t n = 0;

		for (uint32_t x = 0; x < N; x++)
			if (pinned[x]) {
				refs[n++] = refs[x];
				pinned[x] = 0;
			}
		if (!n)
			continue;
		if (!seq)
			seq = e->dev->ops->compute_mark(e->dev);
		moem_tiers_release(e->tiers, refs, n, seq);
	}
}

/* Cheap and lock-free: has every expert some version in HBM? */
static bool all_resident(struct moem_engine *e)
{
	const uint32_t N = e->cfg->n_experts;

	for (uint32_t m = 0; m < e->n_moe; m++) {
		moem_tiers_resident_mask(e->tiers, m, e->res_host);
		for (uint32_t x = 0; x < N; x++)
			if (!e->res_host[x])
				return false;
	}
	return true;
}

int moem_eng_dstep_begin(struct moem_engine *e, uint32_t B)
{
	const uint32_t N = e->cfg->n_experts;
	const size_t tab = (size_t)e->n_moe * N * sizeof(struct moem_res_entry);
	struct moem_eng_dstep *ds;
	int ret;

	if (e->ds)
		e->ds->on = false;
	if (!dstep_allowed(e, B))
		return 0;
	if (!e->ds) {
		ret = dstep_alloc(e);
		if (ret) {
			moem_eng_dstep_free(e);
			return ret;
		}
	}
	ds = e->ds;
	if (ds->disabled || !all_resident(e))
		return 0; /* the per-layer path loads what is missing */
	for (uint32_t m = 0; m < e->n_moe; m++) {
		if (moem_tiers_pin_planned(e->tiers, m, ds->refs + (size_t)m * N,
					   ds->pinned + (size_t)m * N) < N) {
			unpin(e); /* an expert is not in HBM: the per-layer path loads it */
			return 0;
		}
		for (uint32_t x = 0; x < N; x++) {
			const struct moem_xref *r = &ds->refs[(size_t)m * N + x];

			ds->tab_new[(size_t)m * N + x] =
				(struct moem_res_entry){r->addr, (uint32_t)e->prec[r->pi], 0};
		}
	}
	/* The previous step's synchronisation ended every copy from tab_h. */
	if (!ds->tab_valid || memcmp(ds->tab_h, ds->tab_new, tab)) {
		memcpy(ds->tab_h, ds->tab_new, tab);
		ds->tab_valid = false;
		ret = moem_be_htod(e->be, ds->table, ds->tab_h, tab, NULL);
		if (ret) {
			unpin(e);
			return ret;
		}
		ds->tab_valid = true;
	}
	ret = moem_be_memset(e->be, ds->status, 0, (uint64_t)e->n_moe * 4, NULL);
	if (ret) {
		unpin(e);
		return ret;
	}
	ds->on = true;
	ds->B = B;
	ds->t0 = moem_now_ns();
	return 0;
}

bool moem_eng_dstep_on(const struct moem_engine *e)
{
	return e->ds && e->ds->on;
}

int moem_eng_dstep_ffn(struct moem_engine *e, uint32_t m, uint32_t B)
{
	struct moem_eng_dstep *ds = e->ds;
	const uint32_t N = e->cfg->n_experts, K = e->cfg->top_k;
	const size_t pk = (size_t)ENG_MAX_B * K;
	struct moem_ffn_routed_args a = {
		.B = B,
		.H = e->cfg->hidden,
		.I = e->cfg->moe_inter,
		.k = K,
		.N = N,
		.prec_mask = ds->prec_mask,
		.x = e->xb,
		.out = e->out,
		.ids = e->ids,
		.cnt = e->cnt,
		.table = ds->table + (uint64_t)m * N * sizeof(struct moem_res_entry),
		.status = ds->status + (uint64_t)m * 4,
	};
	int ret;

	/* The picks go back behind the layer's kernels; read after the step's sync. */
	ret = moem_be_dtoh(e->be, ds->ids_h + m * pk, e->ids, sizeof(int32_t) * B * K, NULL);
	if (!ret)
		ret = moem_be_dtoh(e->be, ds->w_h + m * pk, e->w, sizeof(float) * B * K, NULL);
	if (!ret)
		ret = moem_be_dtoh(e->be, ds->cnt_h + (size_t)m * ENG_MAX_B, e->cnt,
				   sizeof(uint32_t) * B, NULL);
	if (!ret)
		ret = moem_op_ffn_routed(e->be, NULL, &a);
	if (!ret && m == e->n_moe - 1)
		ret = moem_be_dtoh(e->be, ds->status_h, ds->status, (uint64_t)e->n_moe * 4, NULL);
	return ret;
}

void moem_eng_dstep_abort(struct moem_engine *e)
{
	if (!e->ds || !e->ds->on)
		return;
	e->ds->on = false;
	/* Kernels of the failed step may still read tab_h's copy: let them end. */
	moem_be_stream_sync(e->be, NULL);
	e->ds->tab_valid = false;
	unpin(e);
}

/* The host's share of MoE layer m, one step late: what layer.c does inline. */
static int layer_after(struct moem_engine *e, uint32_t m, uint64_t step, uint64_t layer_ns,
		       struct moem_step_stats *st)
{
	struct moem_eng_dstep *ds = e->ds;
	const uint32_t N = e->cfg->n_experts, K = e->cfg->top_k, B = ds->B;
	const size_t pk = (size_t)ENG_MAX_B * K;
	uint8_t active[MOEM_MAX_EXPERTS] = {0};
	int ret;

	memcpy(e->ids_host, ds->ids_h + m * pk, sizeof(int32_t) * B * K);
	memcpy(e->w_host, ds->w_h + m * pk, sizeof(float) * B * K);
	memcpy(e->cnt_host, ds->cnt_h + (size_t)m * ENG_MAX_B, sizeof(uint32_t) * B);
	e->pos = step * e->n_moe + m;
	ret = moem_eng_route_seen(e, m, B, step, active, st);
	if (ret)
		return ret;
	/* The uses, for the tiers' counters and the policies: each a hit, pinned. */
	for (uint32_t x = 0; x < N; x++) {
		struct moem_xref ref;
		int r;

		/* A plan changed since (DynaExq, an earlier layer_after) is not a use. */
		if (!active[x] ||
		    moem_tiers_published(e->tiers, m, x) != (int)moem_tiers_plan(e->tiers, m, x))
			continue;
		r = moem_tiers_acquire(e->tiers, m, x, &ref);
		if (r < 0)
			continue; /* counted nothing, holds nothing */
		moem_eng_used(e, &ref, r);
		if (r == MOEM_ACQ_PENDING && moem_tiers_wait(e->tiers, &ref))
			continue; /* the fetch failed: the step did not need it */
		moem_tiers_release(e->tiers, &ref, 1, e->dev->ops->compute_mark(e->dev));
	}
	ret = moem_eng_lookahead(e);
	if (ret)
		return ret;
	e->last_layer_ns = layer_ns;
	return moem_eng_after_layer(e, m, layer_ns);
}

int moem_eng_dstep_end(struct moem_engine *e, uint64_t step, struct moem_step_stats *st)
{
	struct moem_eng_dstep *ds = e->ds;
	uint64_t layer_ns;
	int ret = 0;

	if (!ds || !ds->on)
		return 0;
	ds->on = false;
	layer_ns = (moem_now_ns() - ds->t0) / e->n_moe;
	for (uint32_t m = 0; m < e->n_moe && !ret; m++)
		if (ds->status_h[m])
			ret = moem_errf(EIO,
					"layer %u: the device plan found expert %u without "
					"weights in its residency table",
					e->moe_layer[m], ds->status_h[m] - 1);
	for (uint32_t m = 0; m < e->n_moe && !ret; m++)
		ret = layer_after(e, m, step, layer_ns, st);
	unpin(e);
	return ret;
}
