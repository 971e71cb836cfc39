/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The trace simulator behind `moem sim`: replays a routing trace
 * (trace.h) through the scheduling policies on a modelled GPU and reports
 * what each policy would have cost. The decisions are the engine's own:
 * the policy driver (driver.h) makes them for both; the simulator plays
 * the engine's part (owning residency and budgets, running a copy
 * engine) and takes time from the placement layer's cost model (cost.h;
 * defaults: H100-class GPU on PCIe 4.0 x16, Qwen3-30B-A3B experts,
 * Documentation/policies.md):
 *  - expert bytes per precision from the expert shape (quant.h layout);
 *  - one copy engine over the link; an expert not in DRAM is read from
 *    NVMe through a pipelined bounce (min(link, NVMe) bandwidth);
 *    transfers move in pieces of at most piece_bytes, and between pieces
 *    the highest priority waiting transfer goes next: miss > prefetch >
 *    promotion / paging; optional bandwidth jitter per transfer (seeded);
 *  - a layer: layer_ns of fixed work (attention, router) after which the
 *    routing is known and misses are issued; then each active expert
 *    costs bytes / hbm_gbps (reading its weights) + tokens * token_ns;
 *    without cache-aware order the experts start when all have landed,
 *    with it resident experts run first and each miss as it lands;
 *  - stall = the layer's time beyond its compute; step time = sum.
 * Budgets: hbm_bytes bounds expert bytes in HBM (the fixed/KV part is
 * outside it), dram_bytes the DRAM expert cache (default: all experts).
 *
 * Same trace, options and seed: the same numbers, bit for bit.
 */
#ifndef MOEM_SIM_H
#define MOEM_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "cost.h"
#include "place.h"
#include "policy.h"
#include "quant.h"

struct moem_sim_cost {
	struct moem_cost cost;		     /* bandwidths and times (cost.h defaults) */
	uint32_t hidden, inter;		     /* expert shape (Qwen3-30B-A3B: 2048, 768) */
	enum moem_prec prec;		     /* precision experts are served in (bf16) */
	uint64_t expert_bytes[MOEM_PREC_NR]; /* from the shape (moem_sim_cost_finish) */
	uint64_t piece_bytes;		     /* 8 MiB */
	uint64_t hbm_bytes;		     /* expert budget in HBM */
	uint64_t dram_bytes;		     /* 0: every expert fits in DRAM */
	double jitter;			     /* relative std of per-transfer bandwidth (0) */
	/* DRAM starts empty (experts read from NVMe on first use) even when
	 * dram_bytes holds every expert, as an engine that skipped warm-up */
	bool dram_cold;
	/*
	 * Hybrid execution (`moem sim --exec hybrid`), cache policies only:
	 * each (expert, step) goes where the engine would send it, by the same
	 * moem_cost_exec() on cost.cpu_gbps and cost.cpu_token_ns; the first
	 * cpu_moe_layers MoE layers are always on the CPU and never in HBM,
	 * and the place rules (place.h) resolved by the engine's own
	 * moem_place_map(): cpu experts as those, gpu ones never on the CPU.
	 * exec_link_gbps is the link the decision assumes (0: cost.link_gbps;
	 * the engine's --link-gbps when the modelled link is not it). A CPU
	 * expert costs moem_cost_cpu_ns() on one CPU timeline that runs beside
	 * the GPU's; the layer ends when both have; the CPU's time past the
	 * GPU's counts as stall.
	 */
	bool exec_hybrid;
	uint32_t cpu_moe_layers;
	double exec_link_gbps;
	/*
	 * The NVMe bandwidth the copy-back decision assumes (0: cost.nvme_gbps),
	 * for replaying an engine run whose policies assume another figure
	 * than the link the replay models (a lockstep engine's see 7 GB/s
	 * while its loads take no modelled time).
	 */
	double decide_nvme_gbps;
	struct moem_place_rules place;
};

/* Defaults above; hbm_bytes 0 until set. */
void moem_sim_cost_default(struct moem_sim_cost *c);
/* Expert sizes from the shape; range checks with a message. */
int moem_sim_cost_finish(struct moem_sim_cost *c);

enum moem_sim_mode {
	MOEM_SIM_CACHE = 0,   /* eviction policy (+ prefetch) over an HBM cache */
	MOEM_SIM_BELADY = 1,  /* the same with Belady MIN (the oracle) */
	MOEM_SIM_DYNAEXQ = 2, /* every expert resident, lo/hi precision */
	MOEM_SIM_FLUXMOE = 3, /* resident set + two-layer streaming window */
};

/*
 * A simulated policy: a preset name and parameters,
 *   NAME[:key=value,...]
 * presets: lru, lru2, lfu, pred, belady, prefetch-fixed, expertflow, moem,
 * lynx, oea, piggyback, dynaexq, fluxmoe (Documentation/policies.md lists
 * each preset's components and every key).
 */
struct moem_sim_policy {
	char label[96]; /* the spec as given */
	enum moem_sim_mode mode;
	char route[64]; /* route policy spec (policy_route.h) */
	struct moem_evict_cfg evict;
	bool prefetch;
	struct moem_prefetch_cfg pf;
	uint32_t pf_queue; /* outstanding prefetches at most (64) */
	bool ordered;	   /* cache-aware execution order */
	bool pregate;	   /* read the trace's pre-gate picks (default on) */
	int dram;	   /* enum moem_dram_rule: the DRAM cache's victims (dram=, lru) */
	/* copyback= (1): with a DRAM cache, HBM's victims that DRAM lacks are
	 * copied back when the cost model says so (moem_driver_copy_back());
	 * 0: inclusive DRAM, never */
	bool copy_back;
	/*
	 * belady only: what the oracle knows (a bound on what that much
	 * information allows, not a policy). look > 0: MIN over the next look
	 * ticks only; a key not used within them is evicted first, among such
	 * keys by oracle_fb. step: next uses known to the step, not the tick
	 * (ties by oracle_fb). Defaults (look 0, tick): MIN.
	 */
	uint32_t oracle_look;
	bool oracle_step;
	int oracle_fb; /* enum moem_sim_oracle_fb */
	struct moem_dynaexq_cfg dx;
	bool dx_pair_given, dx_n_hi_given;
	struct moem_paging_cfg pg;
	bool pg_initial_given;
};

/* How a restricted oracle ranks the keys it has no next use for (fb=). */
enum moem_sim_oracle_fb {
	MOEM_SIM_FB_LRU = 0,  /* least recently used first */
	MOEM_SIM_FB_LFU = 1,  /* fewest uses so far first, then LRU */
	MOEM_SIM_FB_PRED = 2, /* latest use the online predictor expects first (pred's rank) */
};

int moem_sim_policy_parse(const char *spec, struct moem_sim_policy *p);
/* Preset names `all` expands to (re-routing ones only if logits is true). */
const char *const *moem_sim_policy_all(bool logits, uint32_t *n);

struct moem_sim_opts {
	uint64_t seed;	       /* jitter stream */
	uint64_t warmup_steps; /* steps simulated but not counted */
	uint64_t max_steps;    /* 0: the whole trace */
};

struct moem_sim_result {
	char policy[96];
	char detail[160]; /* what ran: components and derived sizes */
	uint64_t hbm_bytes;
	uint64_t steps, layer_steps, tokens;
	uint64_t accesses; /* expert uses (counted steps) */
	uint64_t hits;	   /* resident and landed when needed */
	uint64_t late;	   /* in flight when needed (not hits) */
	double hit_rate;
	double belady_hit_rate; /* MIN on the same accesses and budget */
	double frac_belady;	/* hit_rate / belady_hit_rate */
	double mean_T;		/* distinct experts per layer-step */
	uint64_t stall_ns;
	uint64_t compute_ns; /* the same run without any stall */
	/* the stall floor: the bytes Belady MIN loads over the link on the
	 * counted steps (its misses at the same slots), and the least stall
	 * moving them allows (moem_cost_stall_bound_ns()); stall_x_bound =
	 * stall_ns / stall_bound_ns (0 when the bound is 0: compute hides
	 * even MIN's loads) */
	uint64_t min_bytes;
	uint64_t stall_bound_ns;
	double stall_x_bound;
	uint64_t total_ns;
	double step_ns; /* modelled time per decode step */
	uint64_t bytes_pcie, bytes_nvme;
	uint64_t bytes_d2h; /* copied back HBM -> DRAM (exclusive DRAM, cost-model decided) */
	uint64_t bytes_demand, bytes_prefetch, bytes_other;
	uint64_t pf_issued, pf_used, pf_wasted;
	double mean_S;	   /* prefetch horizon, mean over layer-steps */
	double hi_frac;	   /* dynaexq: uses served in the high precision */
	uint32_t slots;	   /* uniform slots at the budget (Belady's) */
	uint64_t hbm_peak; /* most HBM bytes ever reserved (<= hbm_bytes) */
	/* hybrid execution: expert uses computed on the CPU (not in accesses,
	 * so hit_rate is over the GPU's uses as the engine counts it), their
	 * CPU time, and their share of all uses */
	uint64_t cpu_experts, cpu_ns;
	double cpu_share;
};

/*
 * Run one policy over a trace. -EINVAL / -ENOSPC with a message if the
 * policy cannot run (it needs logits the trace lacks, the budget cannot
 * hold what one layer needs, ...); trace errors as moem_trace_next().
 */
int moem_sim_run(const char *trace, const struct moem_sim_cost *c, const struct moem_sim_policy *p,
		 const struct moem_sim_opts *o, struct moem_sim_result *r);

#endif /* MOEM_SIM_H */
