// SPDX-License-Identifier: GPL-2.0-only
/*
 * Engine life cycle (engine.h): open the pack, backend, pool, loader, tier
 * device and tiers; upload the fixed weights; knobs and status.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moem/cuda_api.h>
#include <moem/dev.h>
#include <moem/error.h>
#include <moem/half.h>
#include <moem/log.h>
#include <moem/util.h>

#include "engine_int.h"

static const char *or_default(const char *s, const char *d)
{
	return s && *s ? s : d;
}

int moem_engine_pack_bytes(const char *pack_path, enum moem_prec p, uint64_t *bytes)
{
	const struct moem_model_config *c;
	struct moem_expert_layout l;
	struct moem_pack *pack;
	int ret = moem_pack_open(pack_path, &pack);

	if (ret)
		return ret;
	c = moem_pack_config(pack);
	ret = moem_expert_layout(p, c->hidden, c->moe_inter, &l);
	/* As the HBM arena holds them (64 KiB slots): 100% is what the whole
	 * model takes there, the budget an engine uses when given none. */
	if (!ret)
		*bytes = (uint64_t)moem_n_moe_layers(c) * c->n_experts *
			 moem_align_up(l.bytes, 65536);
	moem_pack_close(pack);
	return ret;
}

/* Upload a pack tensor as bf16 (converted exactly from f32 or f16 up). */
static int upload_bf16(struct moem_engine *e, const struct moem_pack_tensor *t, uint64_t nelem,
		       moem_dptr *out)
{
	float *f = NULL;
	uint16_t *b = NULL;
	int ret;

	if (!t)
		return moem_errf(ENOENT, "pack lacks a tensor the engine needs");
	if (t->nelem != nelem)
		return moem_errf(EINVAL, "tensor %s has %llu elements, %llu expected", t->name,
				 (unsigned long long)t->nelem, (unsigned long long)nelem);
	f = malloc(sizeof(float) * nelem);
	b = malloc(sizeof(uint16_t) * nelem);
	if (!f || !b) {
		ret = -ENOMEM;
		goto out;
	}
	ret = moem_pack_read_tensor_f32(e->pack, t, f, nelem);
	if (ret)
		goto out;
	for (uint64_t i = 0; i < nelem; i++)
		b[i] = moem_f32_to_bf16(f[i]);
	ret = moem_be_alloc(e->be, nelem * 2, out);
	if (ret)
		goto out;
	ret = moem_be_htod(e->be, *out, b, nelem * 2, NULL);
	if (!ret)
		ret = moem_be_stream_sync(e->be, NULL);
	if (!ret)
		e->fixed_bytes += nelem * 2;
out:
	free(f);
	free(b);
	return ret;
}

static int upload_blob(struct moem_engine *e, const struct moem_pack_blob *b, moem_dptr *out)
{
	void *buf = aligned_alloc(4096, b->size);
	int ret;

	if (!buf)
		return -ENOMEM;
	ret = moem_pack_read_blob(e->pack, b, buf, b->size);
	if (!ret)
		ret = moem_be_alloc(e->be, b->size, out);
	if (!ret)
		ret = moem_be_htod(e->be, *out, buf, b->size, NULL);
	if (!ret)
		ret = moem_be_stream_sync(e->be, NULL);
	if (!ret)
		e->fixed_bytes += b->size;
	free(buf);
	return ret;
}

static int load_fixed(struct moem_engine *e)
{
	const struct moem_model_config *c = e->cfg;
	int ret = 0;

	e->gate = calloc(e->n_moe, sizeof(moem_dptr));
	e->norm = calloc(c->n_layers, sizeof(moem_dptr));
	e->shared = calloc(c->n_layers, sizeof(moem_dptr));
	e->dense = calloc(c->n_layers, sizeof(moem_dptr));
	if (!e->gate || !e->norm || !e->shared || !e->dense)
		return -ENOMEM;
	for (uint32_t l = 0; l < c->n_layers && !ret; l++) {
		const struct moem_pack_blob *b;

		ret = upload_bf16(e, moem_pack_tensor_role(e->pack, MOEM_TR_POST_NORM, l),
				  c->hidden, &e->norm[l]);
		if (ret)
			break;
		if (e->moe_idx[l] < 0) {
			b = moem_pack_dense(e->pack, l, MOEM_PREC_BF16);
			if (!b)
				return moem_errf(ENOENT, "pack has no MLP for dense layer %u", l);
			e->dense_l = b->layout;
			ret = upload_blob(e, b, &e->dense[l]);
			continue;
		}
		ret = upload_bf16(e, moem_pack_tensor_role(e->pack, MOEM_TR_ROUTER, l),
				  (uint64_t)c->n_experts * c->hidden, &e->gate[e->moe_idx[l]]);
		if (ret)
			break;
		b = moem_pack_shared(e->pack, l, MOEM_PREC_BF16);
		if (b) {
			e->shared_l = b->layout;
			ret = upload_blob(e, b, &e->shared[l]);
		}
	}
	if (ret)
		return moem_err_prefix(-ret, "loading the fixed weights");
	return 0;
}

/*
 * The host ends of the copies every layer and step makes (routing back,
 * the pre-gate's logits, the resident mask up, the hidden state back), in
 * one block pinned for the backend: a copy from pageable memory is
 * synchronous on CUDA and one to it waits for the stream, so each of a
 * layer's few readbacks would be a round trip of its own. Pinning is
 * an optimisation: where the backend refuses it, pageable memory still works.
 */
static int host_mirrors(struct moem_engine *e)
{
	const uint64_t B = ENG_MAX_B, H = e->cfg->hidden, N = e->cfg->n_experts;
	const uint64_t K = e->cfg->top_k;
	struct {
		void **p;
		uint64_t bytes;
	} a[] = {
		{(void **)&e->h_host, B * H * 4},
		{(void **)&e->logits_host, B * N * 4},
		{(void **)&e->pg_logits_host, e->pg_depth ? B * N * 4 : 0},
		{(void **)&e->ids_host, B * K * 4},
		{(void **)&e->w_host, B * K * 4},
		{(void **)&e->cnt_host, B * 4},
		{(void **)&e->res_host, N},
		{(void **)&e->counts_host, (uint64_t)e->n_moe * N * 4},
	};
	uint64_t at = 0, bytes;
	int ret;

	for (size_t i = 0; i < MOEM_ARRAY_SIZE(a); i++)
		at += moem_align_up(a[i].bytes, 64);
	bytes = moem_align_up(at, 4096);
	e->host_blk = aligned_alloc(4096, bytes);
	if (!e->host_blk)
		return -ENOMEM;
	memset(e->host_blk, 0, bytes);
	at = 0;
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(a); i++) {
		*a[i].p = a[i].bytes ? (uint8_t *)e->host_blk + at : NULL;
		at += moem_align_up(a[i].bytes, 64);
	}
	ret = moem_be_host_register(e->be, e->host_blk, bytes);
	if (ret)
		moem_info("engine: host mirrors not pinned (%s): copies through pageable memory",
			  moem_last_error());
	e->host_reg = !ret;
	return 0;
}

static int alloc_acts(struct moem_engine *e)
{
	const struct moem_model_config *c = e->cfg;
	const uint64_t B = ENG_MAX_B, H = c->hidden, N = c->n_experts, K = c->top_k;
	struct {
		moem_dptr *p;
		uint64_t bytes;
	} a[] = {
		{&e->h, B * H * 4},	  {&e->xb, B * H * 2},
		{&e->logits, B * N * 4},  {&e->ids, B * K * 4},
		{&e->w, B * K * 4},	  {&e->cnt, B * 4},
		{&e->out, B * K * H * 4}, {&e->shout, B * H * 4},
		{&e->resident, N},	  {&e->counts, (uint64_t)e->n_moe * N * 4},
	};
	int ret;

	for (size_t i = 0; i < MOEM_ARRAY_SIZE(a); i++) {
		ret = moem_be_alloc(e->be, a[i].bytes, a[i].p);
		if (ret)
			return ret;
	}
	ret = moem_be_memset(e->be, e->counts, 0, (uint64_t)e->n_moe * N * 4, NULL);
	if (ret)
		return ret;
	if (e->pg_depth) {
		ret = moem_be_alloc(e->be, B * N * 4, &e->pg_logits);
		if (ret)
			return ret;
		e->pg_prob = calloc(N, sizeof(float));
		e->pg_ids = calloc((size_t)e->pg_depth * B * K, sizeof(int32_t));
		if (!e->pg_prob || !e->pg_ids)
			return -ENOMEM;
	}
	return host_mirrors(e);
}

static int pick_precisions(struct moem_engine *e)
{
	uint32_t mask = moem_pack_precisions(e->pack);
	const struct moem_model_config *c = e->cfg;
	struct moem_expert_layout l;
	int ret;

	e->prec[0] = e->o.hi;
	e->n_prec = e->o.two_prec ? 2 : 1;
	e->prec[1] = e->o.two_prec ? e->o.lo : e->o.hi;
	for (uint32_t i = 0; i < e->n_prec; i++) {
		if (!(mask & (1u << e->prec[i])))
			return moem_errf(ENOENT, "the pack has no %s experts (it has:%s%s%s%s)",
					 moem_prec_name(e->prec[i]), mask & 1 ? " bf16" : "",
					 mask & 2 ? " q8" : "", mask & 4 ? " q4" : "",
					 mask & 8 ? " q2" : "");
		ret = moem_expert_layout(e->prec[i], c->hidden, c->moe_inter, &l);
		if (ret)
			return ret;
		e->blob_bytes[i] = l.bytes;
	}
	if (e->n_prec == 2 && e->prec[0] == e->prec[1])
		return moem_errf(EINVAL, "hi and lo precisions are both %s",
				 moem_prec_name(e->prec[0]));
	e->arena_bytes = 0;
	for (uint32_t i = 0; i < e->n_prec; i++)
		e->arena_bytes +=
			(uint64_t)e->n_moe * c->n_experts * moem_align_up(e->blob_bytes[i], 65536);
	return 0;
}

/* The directory of a persistent pool takes its first bytes. */
static uint64_t dir_bytes(const struct moem_engine *e)
{
	return moem_align_up(4096 + (uint64_t)e->n_moe * e->cfg->n_experts * 2 * 16,
			     MOEM_CHUNK_BYTES);
}

static int open_pool(struct moem_engine *e)
{
	struct moem_pool_opts po = e->o.pool;
	int ret;

	/* more than every expert version of the pack would stay empty */
	if (!po.size)
		po.size = dir_bytes(e) + moem_align_up(moem_min(e->o.dram_budget, e->arena_bytes),
						       MOEM_CHUNK_BYTES);
	ret = moem_pool_open(&po, &e->pool);
	if (ret)
		return moem_err_prefix(-ret, "staging pool");
	moem_pool_get_info(e->pool, &e->pool_info);
	if (moem_pool_size(e->pool) < dir_bytes(e) + e->blob_bytes[0])
		return moem_errf(ENOSPC, "staging pool of %llu bytes cannot hold one expert",
				 (unsigned long long)moem_pool_size(e->pool));
	e->dram = (uint8_t *)moem_pool_base(e->pool) + dir_bytes(e);
	e->dram_bytes = moem_pool_size(e->pool) - dir_bytes(e);
	if (e->o.dram_budget > e->dram_bytes)
		e->o.dram_budget = e->dram_bytes;
	moem_info("pool: %s (%s)", moem_pool_provider_name(e->pool_info.provider),
		  e->pool_info.why);
	return 0;
}

/*
 * The pool's NUMA ranges in the tiers' offsets (the directory takes the
 * pool's first bytes): the DRAM tier places each expert on a node.
 */
static void tiers_nodes(const struct moem_engine *e, struct moem_tiers_cfg *tc)
{
	const struct moem_pool_info *pi = &e->pool_info;
	uint64_t dir = dir_bytes(e);

	for (uint32_t k = 0; k < pi->n_nodes; k++) {
		uint64_t end = pi->nodes[k].off + pi->nodes[k].bytes;

		if (end <= dir)
			continue; /* all directory */
		tc->node_id[tc->n_nodes] = pi->nodes[k].node;
		tc->node_off[tc->n_nodes++] = pi->nodes[k].off > dir ? pi->nodes[k].off - dir : 0;
	}
}

static int open_tiers(struct moem_engine *e)
{
	struct moem_tiers_cfg tc = {
		.n_layers = e->n_moe,
		.n_experts = e->cfg->n_experts,
		.n_prec = e->n_prec,
		.bytes = {e->blob_bytes[0], e->blob_bytes[1]},
		.prec = {e->prec[0], e->prec[1]},
		/* UVM: the driver pages; the budget goes to the device (balloon) */
		.hbm_budget = e->uvm ? e->arena_bytes : e->o.hbm_budget,
		.hbm_capacity = e->arena_bytes,
		.dram_budget = e->o.dram_budget,
		.allow_fallback = e->o.allow_fallback,
	};
	/* the emulated link's latency per piece: 10 us unless set, none if negative */
	struct moem_emu_opts eo = {
		.link_gbps = e->o.link_gbps,
		.link_lat_us = e->o.link_lat_us == 0  ? 10
			       : e->o.link_lat_us > 0 ? e->o.link_lat_us
						      : 0,
	};
	int ret;

	tiers_nodes(e, &tc);
	if (e->uvm)
		ret = moem_tierdev_uvm_create(e->be, &e->dev);
	else if (moem_backend_kind(e->be) == MOEM_BACKEND_CUDA)
		ret = moem_tierdev_cuda_create(e->be, &e->dev);
	else
		ret = moem_tierdev_emu_create(&eo, &e->dev);
	if (ret)
		return moem_err_prefix(-ret, "tier device");
	/* both tiers' evictions follow the placement policy (placement.c) */
	ret = moem_tiers_create(&tc, e->dev, e->dram, e->dram_bytes, e->stager, &e->hev, &e->dramev,
				&e->tiers);
	if (ret)
		return moem_err_prefix(-ret, "tiers");
	return 0;
}

/*
 * A prefetch pays with link time the compute leaves idle (the cost model in
 * driver_prefetch.c). On the CPU backend the emulated link's copies are a
 * host thread's memcpys: when the workers take every CPU this process may
 * run on, that time is the compute's, a prefetch hides no copy and a wrong
 * one costs its copy and its victim outright (the demo's ExpertFlow row ran
 * 2-5% below LRU for it). There the prefetch depth starts at 0: the policy
 * keeps its state (lru2 its horizon), nothing is issued; the
 * prefetch_depth knob issues them anyway. Lockstep runs, whose link is never
 * busy by definition, keep it (the tests comparing the engine with the
 * simulator).
 */
static bool prefetch_parked(struct moem_engine *e)
{
	struct moem_backend_info bi;

	if (e->o.lockstep || moem_backend_kind(e->be) != MOEM_BACKEND_CPU)
		return false;
	moem_backend_get_info(e->be, &bi);
	if (bi.threads < moem_cpu_count())
		return false;
	moem_info("prefetch %s: parked (prefetch_depth 0): the emulated link's copies run on "
		  "the %u CPUs the workers use, so a prefetch cannot hide one; "
		  "fewer workers (%u) or the prefetch_depth knob issue them",
		  e->prefetch_spec, bi.threads, bi.threads > 1 ? bi.threads - 1 : 1);
	return true;
}

int moem_engine_open(const struct moem_engine_opts *o, struct moem_engine **out)
{
	struct moem_backend_opts bo = {.threads = o->threads, .isa = o->cpu_isa};
	struct moem_engine *e;
	uint64_t hbm_asked;
	bool paged;
	int ret;

	if (!o->pack_path)
		return moem_errf(EINVAL, "no pack given");
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->o = *o;
	e->batch = 8;
	pthread_mutex_init(&e->knob_lock, NULL);
	pthread_mutex_init(&e->budget_lock, NULL);
	pthread_mutex_init(&e->hyb_set_lock, NULL);
	snprintf(e->route_spec, sizeof(e->route_spec), "%s", or_default(o->route, "none"));
	/* FluxMoE's cache is pred's unless told otherwise: paging never below LRU */
	paged = o->paging && *o->paging && strcmp(o->paging, "none");
	snprintf(e->evict_spec, sizeof(e->evict_spec), "%s",
		 or_default(o->evict, paged ? "pred" : "lru"));
	snprintf(e->prefetch_spec, sizeof(e->prefetch_spec), "%s", or_default(o->prefetch, "none"));
	snprintf(e->prec_spec, sizeof(e->prec_spec), "%s", or_default(o->precision, "none"));
	snprintf(e->paging_spec, sizeof(e->paging_spec), "%s", or_default(o->paging, "none"));
	if (o->hbm_mode && strcmp(o->hbm_mode, "vmm") && strcmp(o->hbm_mode, "uvm")) {
		ret = moem_errf(EINVAL, "hbm mode '%s': want vmm or uvm", o->hbm_mode);
		goto err;
	}
	e->uvm = o->hbm_mode && !strcmp(o->hbm_mode, "uvm");
	if (!(e->o.link_gbps > 0))
		e->o.link_gbps = 25;
	if (!o->no_verify)
		e->o.verify_blobs = true;
	/* The trace path is the engine's own copy: moem_engine_set_trace()
	 * replaces it between runs. */
	e->o.trace_out = NULL;
	ret = moem_engine_set_trace(e, o->trace_out, o->trace_logits);
	if (ret)
		goto err;

	ret = moem_pack_open(o->pack_path, &e->pack);
	if (ret)
		goto err;
	e->cfg = moem_pack_config(e->pack);
	e->moe_layer = calloc(e->cfg->n_layers, sizeof(uint32_t));
	e->moe_idx = calloc(e->cfg->n_layers, sizeof(int32_t));
	if (!e->moe_layer || !e->moe_idx) {
		ret = -ENOMEM;
		goto err;
	}
	for (uint32_t l = 0; l < e->cfg->n_layers; l++) {
		e->moe_idx[l] = moem_layer_is_moe(e->cfg, l) ? (int32_t)e->n_moe : -1;
		if (e->moe_idx[l] >= 0)
			e->moe_layer[e->n_moe++] = l;
	}
	ret = pick_precisions(e);
	if (!ret)
		ret = moem_eng_place_open(e); /* a bad --place rule, before anything loads */
	if (ret)
		goto err;
	/* pre-gate depth: the default 2, none, or what was asked, within the step */
	e->pg_depth = o->pregate == 0 ? 2 : o->pregate < 0 ? 0 : (uint32_t)o->pregate;
	if (e->pg_depth > MOEM_TRACE_MAX_PREGATE)
		e->pg_depth = MOEM_TRACE_MAX_PREGATE;
	if (e->pg_depth >= e->n_moe)
		e->pg_depth = e->n_moe - 1;
	/*
	 * No KV pool yet: the decoder's, when one opens, is charged then, to
	 * the budget as asked (hbm_asked may exceed what the experts fill:
	 * the rest is room for the pool), not to the experts' share.
	 */
	hbm_asked = e->o.hbm_budget;
	e->o.hbm_budget = moem_eng_expert_hbm(e, e->o.hbm_budget, 0);
	if (!e->o.dram_budget)
		e->o.dram_budget = e->arena_bytes;

	ret = moem_backend_open(or_default(o->backend, "auto"), &bo, &e->be);
	if (ret)
		goto err;
	if (*moem_backend_note(e->be))
		moem_info("%s", moem_backend_note(e->be));
	ret = open_pool(e);
	if (ret)
		goto err;
	ret = moem_loader_create(&o->loader, &e->ld);
	if (!ret)
		ret = moem_loader_add_file(e->ld, o->pack_path, &e->ld_file);
	if (!ret)
		ret = moem_loader_register_memory(e->ld, e->dram, e->dram_bytes);
	if (ret)
		goto err;
	ret = moem_eng_stager_create(e->pack, e->ld, e->ld_file, e->prec[0], e->prec[1],
				     e->o.verify_blobs, &e->stager);
	if (ret)
		goto err;
	ret = moem_eng_placement_open(e);
	if (ret)
		goto err;
	ret = open_tiers(e);
	if (ret)
		goto err;
	ret = moem_eng_placement_attach(e);
	if (!ret)
		ret = moem_eng_warm_attach(e);
	if (ret)
		goto err;
	ret = load_fixed(e);
	if (!ret)
		ret = alloc_acts(e);
	if (!ret)
		ret = moem_eng_hotness_open(e);
	if (!ret)
		ret = moem_eng_hybrid_open(e);
	/* After the fixed weights and activations: the rest is for managed pages. */
	if (!ret && e->uvm)
		ret = moem_tierdev_uvm_set_budget(e->dev, e->o.hbm_budget);
	if (ret)
		goto err;
	e->knob[MOEM_BUDGET_HBM_BYTES] = hbm_asked ? hbm_asked : e->o.hbm_budget;
	e->knob[MOEM_BUDGET_DRAM_BYTES] = e->o.dram_budget;
	e->applied_hbm = e->o.hbm_budget;
	e->applied_dram = e->o.dram_budget;
	e->knob[MOEM_BUDGET_HI_PRECISION_PERMILLE] = 1000;
	e->knob[MOEM_BUDGET_PREFETCH_DEPTH] = 0;
	if (e->dcfg.prefetch && !prefetch_parked(e))
		e->knob[MOEM_BUDGET_PREFETCH_DEPTH] = MOEM_BUDGET_PREFETCH_MAX;
	e->knob[MOEM_BUDGET_REROUTE] =
		(uint64_t)e->rp.kind < MOEM_REROUTE_NR ? (uint64_t)e->rp.kind : 0;
	e->knob[MOEM_BUDGET_EXEC] = e->o.exec_hybrid ? MOEM_EXEC_MODE_HYBRID : MOEM_EXEC_MODE_GPU;
	e->knob[MOEM_BUDGET_CPU_MOE_LAYERS] = e->o.cpu_moe_layers;
	moem_driver_set_depth(e->drv, (uint32_t)e->knob[MOEM_BUDGET_PREFETCH_DEPTH]);
	/* as a live change would be: CPU experts need a layer's worth of DRAM */
	if (e->o.dram_budget) {
		ret = moem_engine_check_knob(e, MOEM_BUDGET_DRAM_BYTES, e->o.dram_budget);
		if (ret)
			goto err;
	}
	if (o->kv_budget) {
		/* A KV budget in HBM leaves the experts the rest from the start. */
		ret = moem_engine_set_knob(e, MOEM_BUDGET_KV_BYTES, o->kv_budget);
		if (!ret)
			ret = moem_eng_apply_knobs(e);
		if (ret)
			goto err;
	}
	*out = e;
	return 0;
err:
	moem_engine_close(e);
	return ret;
}

void moem_engine_close(struct moem_engine *e)
{
	if (!e)
		return;
	if (e->trace)
		moem_trace_writer_abort(e->trace);
	moem_eng_dstep_free(e);
	moem_eng_hotness_close(e);
	moem_tiers_destroy(e->tiers);
	if (e->dev)
		e->dev->ops->destroy(e->dev);
	moem_eng_placement_close(e);
	moem_eng_stager_destroy(e->stager);
	moem_loader_destroy(e->ld);
	if (e->be) {
		moem_dptr bufs[] = {e->h,   e->xb,  e->logits, e->ids,	    e->w,
				    e->cnt, e->out, e->shout,  e->resident, e->counts};

		moem_be_sync(e->be);
		moem_eng_graph_free(e);
		if (e->pg_logits)
			moem_be_free(e->be, e->pg_logits);
		for (size_t i = 0; i < MOEM_ARRAY_SIZE(bufs); i++)
			moem_be_free(e->be, bufs[i]);
		for (uint32_t i = 0; e->gate && i < e->n_moe; i++)
			moem_be_free(e->be, e->gate[i]);
		for (uint32_t l = 0; e->cfg && l < e->cfg->n_layers; l++) {
			if (e->norm)
				moem_be_free(e->be, e->norm[l]);
			if (e->shared)
				moem_be_free(e->be, e->shared[l]);
			if (e->dense)
				moem_be_free(e->be, e->dense[l]);
		}
	}
	moem_eng_hybrid_close(e);
	if (e->host_reg)
		moem_be_host_unregister(e->be, e->host_blk);
	moem_pool_close(e->pool);
	moem_backend_close(e->be);
	moem_pack_close(e->pack);
	free(e->gate);
	free(e->norm);
	free(e->shared);
	free(e->dense);
	free(e->host_blk);
	free(e->pg_prob);
	free(e->pg_ids);
	free(e->moe_layer);
	free(e->moe_idx);
	free(e->trace_path);
	pthread_mutex_destroy(&e->knob_lock);
	pthread_mutex_destroy(&e->budget_lock);
	pthread_mutex_destroy(&e->hyb_set_lock);
	free(e);
}

bool moem_eng_kv_in_hbm(const struct moem_engine *e)
{
	return e->be && moem_backend_kind(e->be) == MOEM_BACKEND_CUDA;
}

uint64_t moem_eng_expert_hbm(const struct moem_engine *e, uint64_t hbm, uint64_t kv)
{
	if (!hbm)
		return e->arena_bytes;
	if (moem_eng_kv_in_hbm(e))
		hbm = hbm > kv ? hbm - kv : 0;
	return moem_min(hbm, e->arena_bytes);
}

/* The smallest HBM share the experts run with (one expert's slot). */
static uint64_t min_expert_hbm(const struct moem_engine *e)
{
	return moem_align_up(moem_max(e->blob_bytes[0], e->n_prec > 1 ? e->blob_bytes[1] : 0),
			     65536);
}

/* KV bytes charged to HBM: the budget, or the pool while it is larger (a
 * shrink waits for blocks to be free). Under knob_lock. */
static uint64_t kv_charged(const struct moem_engine *e, uint64_t kv_knob)
{
	return moem_max(kv_knob, e->kv_pool_bytes);
}

uint64_t moem_engine_kv_hbm_bytes(struct moem_engine *e)
{
	uint64_t v;

	if (!moem_eng_kv_in_hbm(e))
		return 0;
	pthread_mutex_lock(&e->knob_lock);
	v = kv_charged(e, e->knob[MOEM_BUDGET_KV_BYTES]);
	pthread_mutex_unlock(&e->knob_lock);
	return v;
}

/* What a raise must leave free on the device for the rest (the driver's own
 * allocations, CUDA graphs, scratch): below it the raise is refused. */
#define HBM_ON_TOP_MARGIN (64ull << 20)

int moem_engine_hbm_on_top(struct moem_engine *e, uint64_t share)
{
	uint64_t kv = share ? moem_engine_kv_hbm_bytes(e) : 0, fr = 0, tot = 0;
	uint64_t now = moem_engine_get_knob(e, MOEM_BUDGET_HBM_BYTES);
	int ret;

	/* only a raise asks the device (0 is no limit: any budget lowers it) */
	if (kv && now && share + kv > now) {
		ret = moem_be_mem_info(e->be, &fr, &tot);
		if (ret)
			return ret;
		if (fr < kv + HBM_ON_TOP_MARGIN)
			return moem_errf(
				ENOSPC,
				"the KV pool's %llu bytes on top of the experts' %llu: the "
				"device has %llu bytes free, less than that and a %llu-byte "
				"margin",
				(unsigned long long)kv, (unsigned long long)share,
				(unsigned long long)fr, HBM_ON_TOP_MARGIN);
	}
	ret = moem_engine_set_knob(e, MOEM_BUDGET_HBM_BYTES, share + kv);
	return ret ? ret : moem_engine_apply_knobs(e);
}

uint64_t moem_eng_kv_room(struct moem_engine *e)
{
	uint64_t hbm, share;

	pthread_mutex_lock(&e->knob_lock);
	hbm = e->knob[MOEM_BUDGET_HBM_BYTES];
	pthread_mutex_unlock(&e->knob_lock);
	if (!moem_eng_kv_in_hbm(e) || !hbm)
		return UINT64_MAX;
	/* Half of what the budget holds above the smallest expert share. */
	share = moem_eng_expert_hbm(e, hbm, 0);
	return share > min_expert_hbm(e) ? (share - min_expert_hbm(e)) / 2 : 0;
}

/* Would the experts run in an HBM share of share bytes? what: the setting. */
static int check_expert_hbm(struct moem_engine *e, const char *what, uint64_t share, uint64_t kv)
{
	char why[256], kvs[96] = "";

	if (moem_eng_kv_in_hbm(e) && kv)
		snprintf(kvs, sizeof(kvs), " (hbm_bytes less %llu bytes of kv_bytes)",
			 (unsigned long long)kv);
	if (share < min_expert_hbm(e))
		return moem_errf(ERANGE,
				 "%s leaves the experts %llu bytes of HBM%s, below one expert: "
				 "the smallest budget that runs is %llu bytes",
				 what, (unsigned long long)share, kvs,
				 (unsigned long long)min_expert_hbm(e));
	if (e->dcfg.dynaexq) {
		/* DynaExq keeps every expert resident in the low precision */
		uint32_t n_hi;

		if (moem_eng_dynaexq_n_hi(e, share, 1000, &n_hi)) {
			snprintf(why, sizeof(why), "%s", moem_last_error());
			return moem_errf(ERANGE, "%s%s: %s", what, kvs, why);
		}
	}
	return 0;
}

int moem_engine_check_knob(struct moem_engine *e, enum moem_budget_knob knob, uint64_t value)
{
	uint64_t big = moem_max(e->blob_bytes[0], e->n_prec > 1 ? e->blob_bytes[1] : 0);
	uint64_t hbm, kv, block;
	char what[64];
	int ret = moem_budget_validate(knob, value);

	if (ret)
		return ret;
	if (knob == MOEM_BUDGET_CPU_MOE_LAYERS)
		/* the rest (DRAM room, the executor) only moem_engine_set_hybrid knows */
		return moem_place_map(&e->o.place, (uint32_t)value, e->n_moe, e->cfg->n_experts,
				      NULL, NULL);
	if (knob == MOEM_BUDGET_HBM_BYTES || knob == MOEM_BUDGET_KV_BYTES) {
		pthread_mutex_lock(&e->knob_lock);
		hbm = knob == MOEM_BUDGET_HBM_BYTES ? value : e->knob[MOEM_BUDGET_HBM_BYTES];
		kv = kv_charged(e, knob == MOEM_BUDGET_KV_BYTES ? value
								: e->knob[MOEM_BUDGET_KV_BYTES]);
		block = e->kv_block_bytes;
		pthread_mutex_unlock(&e->knob_lock);
		if (knob == MOEM_BUDGET_KV_BYTES && value && value < block)
			return moem_errf(ERANGE,
					 "kv_bytes %llu holds no KV block: the smallest KV budget "
					 "is one %llu-byte block",
					 (unsigned long long)value, (unsigned long long)block);
		/* in host memory (the CPU backend) the pool can be no larger than it:
		 * above, the next sequence's allocation of it would fail */
		if (knob == MOEM_BUDGET_KV_BYTES && !moem_eng_kv_in_hbm(e)) {
			uint64_t mem =
				(uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);

			if (mem && value > mem / 2)
				return moem_errf(
					ERANGE,
					"kv_bytes %llu is more than half of this machine's "
					"%llu bytes of memory, where the KV cache lives on "
					"the CPU backend",
					(unsigned long long)value, (unsigned long long)mem);
		}
		snprintf(what, sizeof(what), "%s %llu", moem_budget_name(knob),
			 (unsigned long long)value);
		/* hbm_bytes 0 is "no limit": the experts keep the arena */
		if (knob == MOEM_BUDGET_KV_BYTES || value)
			return check_expert_hbm(e, what, moem_eng_expert_hbm(e, hbm, kv), kv);
		return 0;
	}
	if (knob == MOEM_BUDGET_DRAM_BYTES && value && value < big)
		return moem_errf(ERANGE,
				 "dram_bytes %llu is below one expert: the smallest budget that "
				 "runs is %llu bytes",
				 (unsigned long long)value, (unsigned long long)big);
	if (knob == MOEM_BUDGET_DRAM_BYTES && value) {
		/* experts placed on the CPU are computed from DRAM, pinned there
		 * for their layer: below a layer's worth a step finds no room (the
		 * rule moem_engine_set_hybrid() applies the other way round) */
		uint64_t layer = (uint64_t)e->cfg->n_experts * e->blob_bytes[0], cpu;

		pthread_mutex_lock(&e->knob_lock);
		cpu = e->hyb_dirty ? e->hyb_n_cpu : e->n_placed_cpu;
		pthread_mutex_unlock(&e->knob_lock);
		if (cpu && value < layer)
			return moem_errf(
				ENOSPC,
				"dram_bytes %llu: with experts placed on the CPU "
				"(cpu_moe_layers, --place) the smallest DRAM budget is one "
				"layer's experts, %llu bytes",
				(unsigned long long)value, (unsigned long long)layer);
	}
	if (knob == MOEM_BUDGET_DRAM_BYTES && value > e->dram_bytes)
		return moem_errf(ERANGE, "dram_bytes %llu is above the %llu-byte staging pool",
				 (unsigned long long)value, (unsigned long long)e->dram_bytes);
	return 0;
}

int moem_engine_set_knob(struct moem_engine *e, enum moem_budget_knob knob, uint64_t value)
{
	int ret = moem_engine_check_knob(e, knob, value);

	if (ret)
		return ret;
	if (knob == MOEM_BUDGET_EXEC || knob == MOEM_BUDGET_CPU_MOE_LAYERS)
		return moem_eng_set_hybrid_knob(e, knob, value);
	pthread_mutex_lock(&e->knob_lock);
	e->knob[knob] = value;
	e->knob_dirty |= 1u << knob;
	pthread_mutex_unlock(&e->knob_lock);
	return 0;
}

uint64_t moem_engine_get_knob(struct moem_engine *e, enum moem_budget_knob knob)
{
	uint64_t v;

	if ((unsigned int)knob >= MOEM_BUDGET_NR)
		return 0;
	pthread_mutex_lock(&e->knob_lock);
	v = e->knob[knob];
	pthread_mutex_unlock(&e->knob_lock);
	return v;
}

/*
 * Give the tiers the budgets the knobs hold now. Any thread: the tiers
 * take budget changes at any moment; budget_lock keeps two appliers from
 * installing values out of order. The policies' derived numbers (DynaExq
 * capacity, paging) are the engine thread's, in moem_eng_apply_knobs().
 */
int moem_eng_apply_budget(struct moem_engine *e, uint64_t *hbm_out, uint64_t *dram_out)
{
	uint64_t hbm, dram;
	int ret = 0;

	pthread_mutex_lock(&e->budget_lock);
	pthread_mutex_lock(&e->knob_lock);
	hbm = moem_eng_expert_hbm(e, e->knob[MOEM_BUDGET_HBM_BYTES],
				  kv_charged(e, e->knob[MOEM_BUDGET_KV_BYTES]));
	dram = e->knob[MOEM_BUDGET_DRAM_BYTES];
	pthread_mutex_unlock(&e->knob_lock);
	/* 0 means "no limit set": everything fits. */
	dram = !dram || dram > e->dram_bytes ? e->dram_bytes : dram;
	if (hbm != e->applied_hbm || dram != e->applied_dram) {
		/* UVM: the tiers keep the whole arena, the device the budget */
		ret = moem_tiers_set_budget(e->tiers, e->uvm ? e->arena_bytes : hbm, dram);
		if (!ret && e->uvm && hbm != e->applied_hbm)
			ret = moem_tierdev_uvm_set_budget(e->dev, hbm);
		if (ret) {
			moem_warn("budget change refused: %s", moem_last_error());
		} else {
			e->applied_hbm = hbm;
			e->applied_dram = dram;
			__atomic_store_n(&e->knobs_applied_ns, moem_now_ns(), __ATOMIC_RELEASE);
			moem_info("budgets applied: hbm %llu, dram %llu", (unsigned long long)hbm,
				  (unsigned long long)dram);
		}
	}
	pthread_mutex_unlock(&e->budget_lock);
	*hbm_out = hbm;
	*dram_out = dram;
	return ret;
}

int moem_eng_kv_resize(struct moem_engine *e, uint64_t pool_bytes, uint64_t block_bytes)
{
	uint64_t hbm, dram;

	pthread_mutex_lock(&e->knob_lock);
	e->kv_pool_bytes = pool_bytes;
	e->kv_block_bytes = block_bytes;
	/* The policies' numbers derived from the experts' share follow. */
	e->knob_dirty |= 1u << MOEM_BUDGET_KV_BYTES;
	pthread_mutex_unlock(&e->knob_lock);
	return moem_eng_apply_budget(e, &hbm, &dram);
}

/* Apply knob changes at a layer boundary; the engine thread only. */
int moem_eng_apply_knobs(struct moem_engine *e)
{
	uint64_t k[MOEM_BUDGET_NR], share;
	uint32_t dirty;
	int ret = 0;

	pthread_mutex_lock(&e->knob_lock);
	dirty = e->knob_dirty;
	e->knob_dirty = 0;
	memcpy(k, e->knob, sizeof(k));
	share = moem_eng_expert_hbm(e, k[MOEM_BUDGET_HBM_BYTES],
				    kv_charged(e, k[MOEM_BUDGET_KV_BYTES]));
	pthread_mutex_unlock(&e->knob_lock);
	moem_eng_hybrid_apply(e);
	if (!dirty)
		return 0;
	if (dirty & ((1u << MOEM_BUDGET_HBM_BYTES) | (1u << MOEM_BUDGET_DRAM_BYTES) |
		     (1u << MOEM_BUDGET_KV_BYTES))) {
		uint64_t hbm, dram;

		ret = moem_eng_apply_budget(e, &hbm, &dram);
		if (!ret && e->dcfg.dynaexq) {
			uint32_t n_hi;

			if (moem_eng_dynaexq_n_hi(e, hbm, k[MOEM_BUDGET_HI_PRECISION_PERMILLE],
						  &n_hi) == 0)
				moem_driver_set_n_hi(e->drv, n_hi);
		}
		if (!ret)
			moem_eng_paging_batch(e, e->batch, hbm);
		if (!ret)
			moem_driver_set_slots(e->drv, hbm / moem_align_up(e->blob_bytes[0], 65536));
	}
	if (dirty & (1u << MOEM_BUDGET_REROUTE)) {
		pthread_mutex_lock(&e->knob_lock); /* status reads rp */
		moem_route_policy_default((enum moem_route_kind)k[MOEM_BUDGET_REROUTE],
					  e->cfg->top_k, &e->rp);
		pthread_mutex_unlock(&e->knob_lock);
		moem_info("reroute policy: %s", moem_route_kind_name(e->rp.kind));
	}
	if (dirty & (1u << MOEM_BUDGET_PREFETCH_DEPTH))
		moem_driver_set_depth(e->drv, (uint32_t)k[MOEM_BUDGET_PREFETCH_DEPTH]);
	__atomic_store_n(&e->knobs_applied_ns, moem_now_ns(), __ATOMIC_RELEASE);
	if (dirty & (1u << MOEM_BUDGET_HI_PRECISION_PERMILLE) && e->dcfg.dynaexq) {
		uint32_t n_hi;

		if (moem_eng_dynaexq_n_hi(e, share, k[MOEM_BUDGET_HI_PRECISION_PERMILLE], &n_hi) ==
		    0)
			moem_driver_set_n_hi(e->drv, n_hi);
	}
	return ret;
}

int moem_engine_apply_knobs(struct moem_engine *e)
{
	int ret;

	while (!moem_eng_claim_brief(e)) {
		if (__atomic_load_n(&e->busy, __ATOMIC_ACQUIRE) == ENG_BUSY_WORK) {
			uint64_t hbm, dram;

			/* A run (or warm-up) holds the engine: budgets take
			 * effect in the tiers now, what the policies derive
			 * from them at its next layer boundary. */
			return moem_eng_apply_budget(e, &hbm, &dram);
		}
		sched_yield(); /* another thread is applying: then it is our turn */
	}
	ret = moem_eng_apply_knobs(e);
	moem_eng_unclaim(e);
	return ret;
}

void moem_engine_stop(struct moem_engine *e)
{
	__atomic_store_n(&e->stop, 1, __ATOMIC_RELEASE);
}

int moem_engine_set_trace(struct moem_engine *e, const char *path, bool logits)
{
	return moem_engine_set_trace_ex(e, path, logits, 0);
}

int moem_engine_set_trace_ex(struct moem_engine *e, const char *path, bool logits,
			     unsigned int flags)
{
	char *p = NULL;

	if (path && !*path)
		return moem_errf(EINVAL, "empty trace path");
	if (path && strlen(path) >= sizeof(((struct moem_engine_status *)0)->trace_path))
		return moem_errf(ENAMETOOLONG, "trace path longer than %zu bytes",
				 sizeof(((struct moem_engine_status *)0)->trace_path) - 1);
	if (path) {
		p = strdup(path);
		if (!p)
			return -ENOMEM;
	}
	pthread_mutex_lock(&e->knob_lock);
	free(e->trace_path);
	e->trace_path = p;
	e->trace_logits = logits;
	e->trace_flags = flags;
	pthread_mutex_unlock(&e->knob_lock);
	return 0;
}

bool moem_engine_fatal(struct moem_engine *e, char *msg, size_t len)
{
	bool fatal = e->be && moem_backend_fatal(e->be);

	if (msg && len)
		snprintf(msg, len, "%s", fatal ? moem_backend_fatal_msg(e->be) : "");
	return fatal;
}

void moem_engine_get_status(struct moem_engine *e, struct moem_engine_status *st)
{
	struct moem_tiers_stats ts;

	memset(st, 0, sizeof(*st));
	snprintf(st->backend, sizeof(st->backend), "%s", moem_backend_name(e->be));
	snprintf(st->backend_note, sizeof(st->backend_note), "%s", moem_backend_note(e->be));
	{
		struct moem_backend_info bi;

		moem_backend_get_info(e->be, &bi);
		snprintf(st->backend_device, sizeof(st->backend_device), "%s", bi.device);
		st->backend_threads = bi.threads;
	}
	snprintf(st->pool_provider, sizeof(st->pool_provider), "%s",
		 moem_pool_provider_name(e->pool_info.provider));
	snprintf(st->pool_why, sizeof(st->pool_why), "%s", e->pool_info.why);
	st->pool_bytes = e->pool_info.size;
	st->pool_pinned = e->pool_info.pinned;
	st->pool_pinned_bytes = e->pool_info.pinned_bytes;
	pthread_mutex_lock(&e->knob_lock);
	moem_route_policy_format(&e->rp, st->route, sizeof(st->route));
	snprintf(st->evict, sizeof(st->evict), "%s", e->evict_spec);
	snprintf(st->prefetch, sizeof(st->prefetch), "%s", e->prefetch_spec);
	snprintf(st->precision, sizeof(st->precision), "%s", e->prec_spec);
	snprintf(st->paging, sizeof(st->paging), "%s", e->paging_spec);
	st->steps = e->total.step;
	st->cpu_experts = e->total.cpu_experts;
	st->cpu_ns = e->total.cpu_ns;
	st->last_cpu_experts = e->last_cpu_experts;
	st->last_cpu_ns = e->last_cpu_ns;
	st->step_ns = e->total.step_ns;
	memcpy(st->phase_ns, e->total.phase_ns, sizeof(st->phase_ns));
	/* a pending live change shows as set (applied at the next layer boundary) */
	st->exec_hybrid = e->hyb_dirty ? e->hyb_exec : e->o.exec_hybrid;
	st->cpu_moe_layers = e->hyb_dirty ? e->hyb_layers : e->o.cpu_moe_layers;
	st->cpu_placed = e->hyb_dirty ? e->hyb_n_cpu : e->n_placed_cpu;
	memcpy(st->knob, e->knob, sizeof(st->knob));
	snprintf(st->trace_path, sizeof(st->trace_path), "%s", e->trace_path ? e->trace_path : "");
	pthread_mutex_unlock(&e->knob_lock);
	st->knobs_applied_ns = __atomic_load_n(&e->knobs_applied_ns, __ATOMIC_ACQUIRE);
	st->warm = e->warm;
	st->adopted = e->adopted;
	snprintf(st->pool_region, sizeof(st->pool_region), "%s", e->pool_info.region);
	st->pool_persistent = e->pool_info.persistent;
	{
		struct moem_pack_id id;

		moem_pack_get_id(e->pack, &id);
		moem_pack_id_str(&id, st->pack_id);
	}
	moem_tiers_get_stats(e->tiers, &ts);
	st->hbm_budget = ts.hbm_budget;
	st->hbm_used = ts.hbm_used;
	st->dram_budget = ts.dram_budget;
	st->dram_used = ts.dram_used;
	st->pool_bound = e->pool_info.bound;
	st->dram_n_nodes = ts.n_nodes;
	memcpy(st->dram_node, ts.dram_node, ts.n_nodes * sizeof(ts.dram_node[0]));
	st->dram_node_fallback = ts.dram_node_fallback;
	st->hbm_resident_hi = ts.hbm_resident[0];
	st->hbm_resident_lo = ts.hbm_resident[1];
	st->dram_ready = ts.dram_ready;
	st->hits = ts.hits;
	st->misses = ts.misses;
	st->fallbacks = ts.fallbacks;
	st->stall_ns = ts.stall_ns;
	st->bytes_nvme = ts.bytes_nvme;
	st->dram_hits = ts.dram_hits;
	st->dram_misses = ts.dram_misses;
	st->bytes_h2d = 0;
	for (int p = 0; p < MOEM_PRIO_NR; p++)
		st->bytes_h2d += ts.bytes_h2d[p];
	st->link_gbps = ts.link_bw / 1e9;
	st->prefetch_horizon = moem_driver_horizon(e->drv);
	st->running = __atomic_load_n(&e->running, __ATOMIC_ACQUIRE);
	snprintf(st->hotness, sizeof(st->hotness), "%s", e->hotness);
	snprintf(st->hbm_mode, sizeof(st->hbm_mode), "%s", e->uvm ? "uvm" : "vmm");
	snprintf(st->exec, sizeof(st->exec), "%s", st->exec_hybrid ? "hybrid" : "gpu");
	moem_place_format_all(&e->o.place, st->place, sizeof(st->place));
	st->cpu_gbps = e->cpu_be ? e->xcost.cpu_gbps : 0;
	st->cpu_token_ns = e->cpu_be ? e->xcost.cpu_token_ns : 0;
	st->cpu_call_ns = e->cpu_be ? e->xcost.cpu_call_ns : 0;
	snprintf(st->cpu_from, sizeof(st->cpu_from), "%s", e->cpu_be ? e->cpu_from : "");
	if (e->uvm) {
		struct moem_uvm_stats us;

		moem_tierdev_uvm_stats(e->dev, &us);
		st->uvm_prefetches = us.prefetches;
		st->uvm_prefetch_bytes = us.prefetch_bytes;
	}
}
