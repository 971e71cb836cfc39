// SPDX-License-Identifier: GPL-2.0-only
/*
 * Hybrid CPU/GPU execution (engine_int.h, Documentation/engine.md
 * "Hybrid execution"): the CPU executor that computes a layer's cold
 * experts straight from the DRAM pool while the device computes the rest,
 * the per (expert, step) decision (moem_driver_exec_next(), shared with `moem
 * sim --exec hybrid`), and the CPU kernels' figures the decision needs:
 * given, read from the calibration cache when it describes this machine
 * (calib.h, `moem calibrate`), or measured once at open.
 *
 * The CPU side runs the CPU backend's grouped FFN (the same kernels the
 * CPU backend uses for everything) on the expert's bytes where they sit
 * in the pool; on the CPU backend that is the engine's own backend, so
 * its inputs and outputs are the engine's buffers and a hybrid run is
 * bitwise the all-resident run. On another backend the B x H bf16 inputs
 * come down once per layer and each CPU-computed (token, slot) row goes
 * back up into the layer's output before combine, which then reduces
 * the slots in the usual order.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moem/calib.h>
#include <moem/error.h>
#include <moem/log.h>
#include <moem/util.h>

#include "engine_int.h"

bool moem_eng_hybrid_on(const struct moem_engine *e)
{
	return e->cpu_be != NULL;
}

/*
 * The CPU figures from the calibration cache (calib.h) when it was made on
 * this machine with this thread count and ISA and has the precision: 0.
 * Otherwise a note of why not, and -ENOENT: measure instead. A bad file is
 * never fatal.
 */
static int from_cache(struct moem_engine *e)
{
	const struct moem_model_config *c = e->cfg;
	struct moem_backend_info bi;
	struct moem_calib cal, here;
	char path[4096], why[512];
	int ret;

	if (e->o.calibration && !strcmp(e->o.calibration, "none"))
		return -ENOENT;
	if (e->o.calibration)
		snprintf(path, sizeof(path), "%s", e->o.calibration);
	else if (moem_calib_default_path(path, sizeof(path)))
		return -ENOENT;
	ret = moem_calib_read(path, &cal);
	if (ret == -ENOENT) {
		moem_info("hybrid: no calibration cache at %s (moem calibrate writes one)", path);
		return ret;
	}
	if (ret) {
		moem_warn("hybrid: calibration cache ignored: %s", moem_last_error());
		return -ENOENT;
	}
	moem_backend_get_info(e->cpu_be, &bi);
	moem_calib_machine(bi.threads, bi.isa, &here);
	if (!moem_calib_matches(&cal, &here, why, sizeof(why))) {
		moem_info("hybrid: calibration cache %s ignored: %s", path, why);
		return -ENOENT;
	}
	ret = moem_calib_cpu_for(&cal, e->prec[0], c->hidden, c->moe_inter, &e->xcost.cpu_gbps,
				 &e->xcost.cpu_token_ns, &e->xcost.cpu_call_ns);
	if (ret) {
		moem_info("hybrid: calibration cache %s has no %s figures", path,
			  moem_prec_name(e->prec[0]));
		return ret;
	}
	snprintf(e->cpu_from, sizeof(e->cpu_from), "cache");
	moem_info("hybrid: CPU expert kernels %.2f GB/s, %llu ns per token, %llu ns per call (%s, "
		  "calibration cache %s)",
		  e->xcost.cpu_gbps, (unsigned long long)e->xcost.cpu_token_ns,
		  (unsigned long long)e->xcost.cpu_call_ns, moem_prec_name(e->prec[0]), path);
	return 0;
}

/* Measure this CPU's kernels on the model's expert shape (calib.h). */
static int calibrate(struct moem_engine *e)
{
	struct moem_calib_cpu m;
	uint64_t bytes;
	int ret = moem_calib_cpu_measure(e->cpu_be, e->prec[0], e->cfg->hidden, e->cfg->moe_inter,
					 &m, &bytes);

	if (ret)
		return ret;
	e->xcost.cpu_gbps = m.gbps;
	e->xcost.cpu_token_ns = m.token_ns;
	e->xcost.cpu_call_ns = m.call_ns;
	snprintf(e->cpu_from, sizeof(e->cpu_from), "measured");
	moem_info("hybrid: CPU expert kernels read %.2f GB/s from DRAM, %llu ns per token, %llu "
		  "ns per call (measured over %llu MiB, %s)",
		  e->xcost.cpu_gbps, (unsigned long long)e->xcost.cpu_token_ns,
		  (unsigned long long)e->xcost.cpu_call_ns, (unsigned long long)(bytes >> 20),
		  moem_prec_name(e->prec[0]));
	return 0;
}

static void executor_close(struct moem_engine *e)
{
	moem_backend_close(e->cpu_be_own);
	e->cpu_be_own = NULL;
	e->cpu_be = NULL;
	if (e->cpu_reg)
		moem_be_host_unregister(e->be, e->cpu_x);
	e->cpu_reg = false;
	free(e->cpu_x); /* cpu_out is in the same block */
	e->cpu_x = NULL;
	e->cpu_out = NULL;
}

/*
 * The executor's host buffers, the layer's inputs down and the CPU's rows
 * up, in one block pinned for the device's backend, so that the rows go
 * up as asynchronous copies (from pageable memory each copy would first
 * wait for the device's stream) and the inputs come down in one round trip.
 */
static int executor_buffers(struct moem_engine *e)
{
	const uint64_t x = moem_align_up((uint64_t)ENG_MAX_B * e->cfg->hidden * 2, 4096);
	const uint64_t bytes =
		x + moem_align_up((uint64_t)ENG_MAX_B * e->cfg->top_k * e->cfg->hidden * 4, 4096);
	uint8_t *blk = aligned_alloc(4096, bytes);
	int ret;

	if (!blk)
		return -ENOMEM;
	memset(blk, 0, bytes);
	e->cpu_x = (void *)blk;
	e->cpu_out = (void *)(blk + x);
	ret = moem_be_host_register(e->be, blk, bytes);
	if (ret)
		moem_info("hybrid: the executor's buffers not pinned (%s): copies through "
			  "pageable memory",
			  moem_last_error());
	e->cpu_reg = !ret;
	return 0;
}

/* The CPU executor: its backend, host buffers and the cost model's figures. */
static int executor_open(struct moem_engine *e)
{
	struct moem_backend_opts bo = {.threads = e->o.threads, .isa = e->o.cpu_isa};
	int ret;

	e->xcost = e->dcfg.cost;
	e->xcost.link_gbps = e->o.link_gbps; /* the link as given, also under lockstep */
	if (moem_backend_kind(e->be) == MOEM_BACKEND_CPU) {
		e->cpu_be = e->be;
	} else {
		ret = moem_backend_open("cpu", &bo, &e->cpu_be_own);
		if (ret)
			return moem_err_prefix(-ret, "hybrid: the CPU executor's backend");
		e->cpu_be = e->cpu_be_own;
		ret = executor_buffers(e);
		if (ret)
			return ret;
	}
	if (e->o.cpu_gbps > 0) {
		e->xcost.cpu_gbps = e->o.cpu_gbps;
		e->xcost.cpu_token_ns = e->o.cpu_token_ns;
		e->xcost.cpu_call_ns = e->o.cpu_call_ns;
		snprintf(e->cpu_from, sizeof(e->cpu_from), "given");
	} else {
		ret = from_cache(e) ? calibrate(e) : 0;
		if (ret)
			return moem_err_prefix(-ret, "hybrid: measuring the CPU kernels");
		if (e->o.cpu_token_ns)
			e->xcost.cpu_token_ns = e->o.cpu_token_ns;
		if (e->o.cpu_call_ns)
			e->xcost.cpu_call_ns = e->o.cpu_call_ns;
	}
	ret = moem_cost_check(&e->xcost);
	if (ret)
		return moem_err_prefix(-ret, "hybrid");
	return 0;
}

static const char uvm_msg[] = "hybrid execution needs hbm mode vmm: under uvm the driver, not "
			      "moem, decides where an expert is";

int moem_eng_hybrid_open(struct moem_engine *e)
{
	int ret;

	if (!e->o.exec_hybrid && !e->n_placed_cpu)
		return 0;
	if (e->uvm)
		return moem_errf(EINVAL, "%s", uvm_msg);
	ret = executor_open(e);
	if (ret)
		return ret;
	if (!e->n_placed_cpu)
		moem_info("hybrid: the cost model sends experts not in HBM to the CPU");
	else
		moem_info("hybrid: %llu expert%s placed on the CPU%s",
			  (unsigned long long)e->n_placed_cpu, e->n_placed_cpu == 1 ? "" : "s",
			  e->o.exec_hybrid ? ", the cost model places the rest" : "");
	return 0;
}

int moem_eng_place_open(struct moem_engine *e)
{
	const uint32_t N = e->cfg->n_experts;
	int ret;

	/* validate first: a model-sized map only when some rule places anything */
	ret = moem_place_map(&e->o.place, e->o.cpu_moe_layers, e->n_moe, N, NULL, &e->n_placed_cpu);
	if (ret || (!e->o.place.n && !e->o.cpu_moe_layers))
		return ret;
	e->place = calloc((size_t)e->n_moe * N, 1);
	if (!e->place)
		return -ENOMEM;
	return moem_place_map(&e->o.place, e->o.cpu_moe_layers, e->n_moe, N, e->place, NULL);
}

void moem_eng_hybrid_close(struct moem_engine *e)
{
	free(e->place);
	free(e->hyb_place);
	e->place = NULL;
	e->hyb_place = NULL;
	executor_close(e);
}

/* moem_engine_set_hybrid() under hyb_set_lock. */
static int set_hybrid(struct moem_engine *e, bool exec_hybrid, uint32_t cpu_moe_layers)
{
	const uint32_t N = e->cfg->n_experts;
	uint64_t n_cpu = 0, layer_bytes = (uint64_t)N * e->blob_bytes[0], placed, dram;
	uint8_t *map = NULL;
	int ret;

	ret = moem_place_map(&e->o.place, cpu_moe_layers, e->n_moe, N, NULL, &n_cpu);
	if (ret)
		return ret;
	if ((exec_hybrid || n_cpu) && e->uvm)
		return moem_errf(EINVAL, "%s", uvm_msg);
	/* what is placed now (or pending), and the DRAM budget in force */
	pthread_mutex_lock(&e->knob_lock);
	placed = e->hyb_dirty ? e->hyb_n_cpu : e->n_placed_cpu;
	pthread_mutex_unlock(&e->knob_lock);
	pthread_mutex_lock(&e->budget_lock);
	dram = e->applied_dram;
	pthread_mutex_unlock(&e->budget_lock);
	/* Placed experts must find DRAM room (or a step fails): at least a
	 * layer's worth, beside what is staged there. */
	if (n_cpu > placed && dram < layer_bytes)
		return moem_errf(ENOSPC,
				 "cpu-moe-layers %u: the DRAM budget (%llu bytes) is below one "
				 "layer's experts (%llu bytes), where experts on the CPU are "
				 "computed from",
				 cpu_moe_layers, (unsigned long long)dram,
				 (unsigned long long)layer_bytes);
	if (e->o.place.n || cpu_moe_layers) {
		map = calloc((size_t)e->n_moe * N, 1);
		if (!map)
			return -ENOMEM;
		moem_place_map(&e->o.place, cpu_moe_layers, e->n_moe, N, map, NULL);
	}
	if ((exec_hybrid || n_cpu) && !e->cpu_be) {
		/* The executor was not opened at start: open it now, while no
		 * run reads e->cpu_be. */
		if (!moem_eng_claim_brief(e)) {
			free(map);
			return moem_errf(EBUSY, "hybrid: the CPU executor was not opened at start "
						"and opens only between runs: a run holds the "
						"engine now");
		}
		ret = executor_open(e);
		if (ret)
			executor_close(e);
		moem_eng_unclaim(e);
		if (ret) {
			free(map);
			return ret;
		}
	}
	pthread_mutex_lock(&e->knob_lock);
	free(e->hyb_place);
	e->hyb_place = map;
	e->hyb_exec = exec_hybrid;
	e->hyb_layers = cpu_moe_layers;
	e->hyb_n_cpu = n_cpu;
	e->hyb_dirty = true;
	/* the knobs (get_knob, status, /metrics) show it set, as the others */
	e->knob[MOEM_BUDGET_EXEC] = exec_hybrid ? MOEM_EXEC_MODE_HYBRID : MOEM_EXEC_MODE_GPU;
	e->knob[MOEM_BUDGET_CPU_MOE_LAYERS] = cpu_moe_layers;
	pthread_mutex_unlock(&e->knob_lock);
	/* at once when no run holds the engine, else at its next layer boundary */
	if (moem_eng_claim_brief(e)) {
		moem_eng_hybrid_apply(e);
		moem_eng_unclaim(e);
	}
	return 0;
}

int moem_engine_set_hybrid(struct moem_engine *e, bool exec_hybrid, uint32_t cpu_moe_layers)
{
	int ret;

	pthread_mutex_lock(&e->hyb_set_lock);
	ret = set_hybrid(e, exec_hybrid, cpu_moe_layers);
	pthread_mutex_unlock(&e->hyb_set_lock);
	return ret;
}

int moem_eng_set_hybrid_knob(struct moem_engine *e, enum moem_budget_knob knob, uint64_t value)
{
	bool hyb;
	uint32_t layers;
	int ret;

	pthread_mutex_lock(&e->hyb_set_lock);
	pthread_mutex_lock(&e->knob_lock);
	hyb = e->knob[MOEM_BUDGET_EXEC] == MOEM_EXEC_MODE_HYBRID;
	layers = (uint32_t)e->knob[MOEM_BUDGET_CPU_MOE_LAYERS];
	pthread_mutex_unlock(&e->knob_lock);
	if (knob == MOEM_BUDGET_EXEC)
		hyb = value == MOEM_EXEC_MODE_HYBRID;
	else
		layers = (uint32_t)value;
	ret = set_hybrid(e, hyb, layers);
	pthread_mutex_unlock(&e->hyb_set_lock);
	return ret;
}

void moem_eng_hybrid_apply(struct moem_engine *e)
{
	uint8_t *old;

	pthread_mutex_lock(&e->knob_lock);
	if (!e->hyb_dirty) {
		pthread_mutex_unlock(&e->knob_lock);
		return;
	}
	old = e->place;
	e->place = e->hyb_place;
	e->hyb_place = NULL;
	e->o.exec_hybrid = e->hyb_exec;
	e->o.cpu_moe_layers = e->hyb_layers;
	e->n_placed_cpu = e->hyb_n_cpu;
	e->hyb_dirty = false;
	pthread_mutex_unlock(&e->knob_lock);
	free(old);
	__atomic_store_n(&e->knobs_applied_ns, moem_now_ns(), __ATOMIC_RELEASE);
	moem_info("hybrid: exec %s, cpu-moe-layers %u: %llu expert%s placed on the CPU",
		  e->o.exec_hybrid ? "hybrid" : "gpu", e->o.cpu_moe_layers,
		  (unsigned long long)e->n_placed_cpu, e->n_placed_cpu == 1 ? "" : "s");
}

enum moem_exec moem_eng_exec_of(struct moem_engine *e, struct moem_exec_queue *q, uint32_t m,
				uint32_t x, uint32_t tokens, bool *forced)
{
	enum moem_place w =
		e->place ? (enum moem_place)e->place[m * e->cfg->n_experts + x] : MOEM_PLACE_AUTO;
	uint32_t pi;
	bool resident;
	int pub;

	*forced = w == MOEM_PLACE_CPU;
	if (!e->cpu_be || w == MOEM_PLACE_GPU || (!*forced && !e->o.exec_hybrid))
		return MOEM_EXEC_GPU;
	pi = moem_tiers_plan(e->tiers, m, x);
	pub = moem_tiers_published(e->tiers, m, x);
	resident = pub >= 0 && ((uint32_t)pub == pi || e->o.allow_fallback);
	return moem_driver_exec_next(e->drv, &e->xcost, q, m * e->cfg->n_experts + x,
				     e->blob_bytes[pi], tokens, resident,
				     moem_tiers_staged(e->tiers, m, x, pi), *forced);
}

bool moem_eng_hbm_allowed(const struct moem_engine *e, uint32_t m, uint32_t x)
{
	return !e->place || e->place[m * e->cfg->n_experts + x] != MOEM_PLACE_CPU;
}

int moem_eng_cpu_inputs_queue(struct moem_engine *e, uint32_t B)
{
	e->cpu_x_queued = false;
	if (!e->cpu_be || e->cpu_be == e->be || !e->cpu_reg)
		return 0;
	e->cpu_x_queued = true;
	return moem_be_dtoh(e->be, e->cpu_x, e->xb, (uint64_t)B * e->cfg->hidden * 2, NULL);
}

int moem_eng_cpu_inputs(struct moem_engine *e, uint32_t B)
{
	int ret;

	if (e->cpu_be == e->be || e->cpu_x_queued)
		return 0; /* the CPU backend's own buffers; or down with the routing */
	ret = moem_be_dtoh(e->be, e->cpu_x, e->xb, (uint64_t)B * e->cfg->hidden * 2, NULL);
	/* also ends the last layer's uploads from cpu_out before it is rewritten */
	if (!ret)
		ret = moem_be_stream_sync(e->be, NULL);
	return ret;
}

int moem_eng_cpu_ffn(struct moem_engine *e, uint32_t B, const struct moem_ffn_expert *ex,
		     uint32_t n, const struct moem_ffn_assign *assign, uint32_t n_assign)
{
	const uint32_t H = e->cfg->hidden, K = e->cfg->top_k;
	bool own = e->cpu_be == e->be;
	struct moem_ffn_args a = {
		.B = B,
		.H = H,
		.I = e->cfg->moe_inter,
		.n_slots = K,
		.x = own ? e->xb : (moem_dptr)(uintptr_t)e->cpu_x,
		.out = own ? e->out : (moem_dptr)(uintptr_t)e->cpu_out,
		.n_experts = n,
		.experts = ex,
		.n_assign = n_assign,
		.assign = assign,
	};
	int ret;

	if (!n)
		return 0;
	ret = moem_op_ffn(e->cpu_be, NULL, &a);
	if (ret || own)
		return ret;
	/* Each CPU-computed (token, slot) row into the layer's output on the device. */
	for (uint32_t i = 0; i < n && !ret; i++)
		for (uint32_t j = ex[i].first; j < ex[i].first + ex[i].n && !ret; j++) {
			uint64_t row = ((uint64_t)assign[j].token * K + assign[j].slot) * H;

			ret = moem_be_htod(e->be, e->out + row * 4, e->cpu_out + row, H * 4ull,
					   NULL);
		}
	return ret;
}
