/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The decode engine (MoE-stack mode): a pack's MoE blocks run over a batch
 * of hidden states, step after step, with experts paged between NVMe,
 * the pinned DRAM pool and HBM under budgets smaller than the model, and
 * the outputs equal to an all-resident run at the same precision.
 *
 * Per step and layer l:
 *   dense layer:  h += MLP(rmsnorm(h))
 *   MoE layer:    x = rmsnorm(h); logits = router(x); route (policy);
 *                 ensure residency of the active experts (hit / miss at
 *                 top priority / lo fallback if allowed), cache-aware
 *                 order; FFN through the pinned versions as they land;
 *                 shared experts; h += combine; prefetch and precision
 *                 policies look ahead.
 * Hidden states come from the pack's synthetic workload generator, a
 * hidden-state file, or a replayed routing trace.
 *
 * Threads: one thread runs moem_engine_run(); moem_engine_set_knob(),
 * moem_engine_stop() and moem_engine_get_status() may be called from any
 * thread at any time (a knob change is applied at the next layer
 * boundary, never failing a step).
 */
#ifndef MOEM_ENGINE_H
#define MOEM_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/moem.h>

#include "backend.h"
#include "loader.h"
#include "place.h"
#include "pool.h"
#include "quant.h"

struct moem_engine_opts {
	const char *pack_path;
	const char *backend; /* "auto" (default), "cpu", "cuda" */
	uint32_t threads;    /* CPU backend threads (0: online CPUs) */
	/* CPU backend kernels (auto: $MOEM_CPU_ISA, else the best the CPU has) */
	enum moem_cpu_isa cpu_isa;
	/* Budgets in bytes; a percentage is resolved by the caller with
	 * moem_engine_pack_bytes(). 0 = the whole model fits. */
	uint64_t hbm_budget, dram_budget;
	/* The decoder's KV cache in bytes (the kv_bytes knob; 0: the decoder
	 * sizes it). On the CUDA backend it lives in HBM and comes out of
	 * hbm_budget: the experts get hbm_budget - kv_budget. */
	uint64_t kv_budget;
	/* The pool: provider, region name, persistence; size 0 = dram_budget
	 * (rounded to 2 MiB). */
	struct moem_pool_opts pool;
	/* Precisions: hi is the planned default; lo (if two_prec) is the
	 * fallback and the precision policy's low version. */
	enum moem_prec hi, lo;
	bool two_prec;
	bool allow_fallback; /* take lo instead of waiting for hi */
	/* Policies, as spec strings (NULL = default): route "none" | "lynx[..]"
	 * | "oea[..]" | "cache-aware" | "piggyback[..]"; evict "lru" | "lru2"
	 * | "lfu" | "pred"; prefetch "none" | "adaptive[..]" | "fixed:S=..";
	 * precision "none" | "dynaexq[..]"; paging "none" | "fluxmoe[..]". */
	const char *route, *evict, *prefetch, *precision, *paging;
	/* The DRAM tier's victims: "lru" (NULL, the default), "policy" (as
	 * evict), "hbm-first" (driver.h: enum moem_dram_rule). */
	const char *dram_evict;
	double link_gbps; /* emulated device: modelled H2D link (default 25) */
	/* emulated device: per-piece latency in us (0: the default, 10; < 0: none) */
	double link_lat_us;
	/*
	 * Every transfer a layer issues (misses, prefetches, paging,
	 * promotions) lands before the next layer starts: the link never
	 * limits, so hit rates and bytes follow the placement decisions alone
	 * and equal the simulator's on the run's trace with a link that is
	 * never busy (tests comparing the two; slower than a normal run).
	 */
	bool lockstep;
	/*
	 * Device-planned decode steps run as plain launches, never as CUDA
	 * graphs (as MOEM_CUDA_GRAPHS=0 in the environment does;
	 * Documentation/engine.md, "CUDA graphs").
	 */
	bool no_graphs;
	struct moem_loader_opts loader;
	bool verify_blobs;     /* check each staged blob's checksum (default on) */
	bool no_verify;	       /* turn verify_blobs off */
	const char *trace_out; /* write the routing trace here (NULL: none) */
	bool trace_logits;     /* with router logits */
	/* Where DynaExq's per-interval expert counts come from: "engine"
	 * (default: the backend's router histogram) or "bpf" (moem_hot, kept
	 * by a route tracer this engine attaches to its own process, bpf.h;
	 * visible to `bpftool map dump name moem_hot` while the engine runs).
	 * If the tracer cannot be loaded the engine says why and uses its own
	 * counters: the runtime never needs BPF. */
	const char *hotness;
	/*
	 * Pre-gate: the routers of the next pregate layers applied to each
	 * MoE layer's input, for prefetch, FluxMoE's window and pred's
	 * ranking (and written to the trace). 0: the default, 2; -1: none.
	 */
	int32_t pregate;
	/* How experts reach HBM: "vmm" (default: moem stages them into a CUDA
	 * VMM arena under the budget, its policies choose) or "uvm" (managed
	 * memory, the driver pages them on demand; the HBM budget bounds the
	 * device memory its pages may use, the prefetch policy, if any, only
	 * issues cuMemPrefetchAsync; CUDA backend). */
	const char *hbm_mode;
	/*
	 * Hybrid execution (Documentation/engine.md): exec_hybrid lets the
	 * cost model (cost.h, moem_cost_exec) send each (expert, step) that is
	 * not in HBM to the CPU, computed from the DRAM pool while the device
	 * computes the rest; cpu_moe_layers N puts every expert of the first N
	 * MoE layers on the CPU, never in HBM (llama.cpp's --n-cpu-moe), with
	 * or without exec_hybrid. cpu_gbps > 0 gives the CPU kernels'
	 * throughput (else it is measured at open), cpu_token_ns their cost
	 * per (token, expert) pair (0: measured, or none when cpu_gbps is
	 * given), cpu_call_ns the cost of a layer's call of the CPU executor
	 * beyond its experts (the same: measured, or none when given). place:
	 * the --place rules (place.h), resolved against the model at open
	 * with cpu_moe_layers as the last rule; a cpu rule starts the CPU
	 * executor as cpu_moe_layers does. calibration: the
	 * cache of `moem calibrate` (calib.h) read for the CPU figures when
	 * cpu_gbps is 0 (NULL: the default path; "none": always measure).
	 */
	bool exec_hybrid;
	uint32_t cpu_moe_layers;
	double cpu_gbps;
	uint64_t cpu_token_ns, cpu_call_ns;
	struct moem_place_rules place;
	const char *calibration;
};

enum moem_workload_kind {
	MOEM_WL_SYNTH = 0,  /* the pack's synthetic workload (mix, seed) */
	MOEM_WL_HIDDEN = 1, /* a hidden-state file (moem_hidden_*) */
	MOEM_WL_TRACE = 2,  /* replay a routing trace's decisions */
};

struct moem_workload {
	enum moem_workload_kind kind;
	const char *mix;  /* synth: "text:0.5,code:0.5" (NULL: uniform) */
	uint64_t seed;	  /* synth: overrides the pack's seed if non-zero */
	const char *path; /* hidden-state file or trace */
	uint32_t batch;	  /* tokens per step, 1..64 */
	uint64_t steps;
};

/*
 * Where the engine thread's time in a step's MoE layers went, on the host
 * clock (the host path of moem_eng_layer; a step planned on the device has
 * none). What the phases leave of step_ns is the rest of the step:
 * attention, dense layers, norms, the hidden state back to the host.
 */
enum moem_phase {
	MOEM_PHASE_ROUTE,     /* norm, router, top-k, histogram, ids back to the host */
	MOEM_PHASE_POLICY,    /* routes counted, predictor, pre-gate, trace record */
	MOEM_PHASE_SPLIT,     /* exec order, groups, hybrid decisions, DRAM pins, inputs down */
	MOEM_PHASE_ACQUIRE,   /* residency: hits pinned, misses given slots and copies */
	MOEM_PHASE_LOOKAHEAD, /* prefetch and paging for later layers */
	MOEM_PHASE_LAUNCH,    /* the device FFN of the resident experts issued */
	MOEM_PHASE_CPU,	      /* hybrid: the CPU's experts, their outputs up (cpu_ns) */
	MOEM_PHASE_WAIT,      /* misses waited for (stall_ns) and their FFN issued */
	MOEM_PHASE_COMBINE,   /* shared experts and combine */
	MOEM_PHASE_AFTER,     /* the policies' after-layer work */
	MOEM_PHASE_NR
};

/* "route", "policy", ...: the JSON key of phase p; NULL out of range. */
const char *moem_phase_name(enum moem_phase p);

/* a[p] += b[p] for every phase. */
static inline void moem_phases_add(uint64_t *a, const uint64_t *b)
{
	for (int p = 0; p < MOEM_PHASE_NR; p++)
		a[p] += b[p];
}

/* What one step did; totals add these up. */
struct moem_step_stats {
	uint64_t step;
	uint32_t tokens;
	uint64_t active; /* sum over MoE layers of T */
	uint64_t hits, misses, fallbacks;
	uint64_t stall_ns;
	uint64_t bytes_nvme, bytes_h2d;
	uint64_t bytes_d2h; /* HBM -> DRAM: evicted versions copied back (exclusive DRAM) */
	uint64_t step_ns;
	/* hybrid execution: (layer, expert) pairs computed on the CPU, and the
	 * time the CPU spent on them (loads from NVMe it waited for included) */
	uint64_t cpu_experts, cpu_ns;
	uint64_t phase_ns[MOEM_PHASE_NR]; /* the engine thread's time in MoE layers */
};

struct moem_run_stats {
	struct moem_step_stats total; /* .step = steps run */
	uint32_t moe_layers;
	double mean_T;	    /* per MoE layer-step */
	double hit_rate;    /* hits / (hits + misses + fallbacks) */
	double stall_share; /* stall_ns / step_ns */
	double tokens_per_s;
	uint8_t digest[32]; /* SHA-256 of every step's final hidden states */
	char digest_hex[65];
	bool stopped; /* moem_engine_stop() ended it early */
};

/* Called after every step; a non-zero return stops the run with it. */
typedef int (*moem_step_fn)(void *arg, const struct moem_step_stats *s);

struct moem_engine;

/*
 * Open the pack, the pool, the backend and the tier device, allocate the
 * HBM arena and stage what the DRAM budget holds (hottest layers first is
 * not attempted: staging is on demand plus warm-up). Logs what it chose
 * and why (backend, pool provider). -errno with a message.
 */
int moem_engine_open(const struct moem_engine_opts *o, struct moem_engine **out);
void moem_engine_close(struct moem_engine *e);

/* Expert bytes of the pack at precision p, for "25%" budgets. */
int moem_engine_pack_bytes(const char *pack_path, enum moem_prec p, uint64_t *bytes);

/*
 * Stage experts NVMe -> DRAM until the DRAM budget is full (or everything
 * is staged), layer by layer, then fill HBM the same way up to its
 * budget. progress may be NULL.
 */
struct moem_progress;
int moem_engine_warmup(struct moem_engine *e, struct moem_progress *progress);

/* Decode a workload. out may be NULL. Returns 0, a step_fn's value, or -errno. */
int moem_engine_run(struct moem_engine *e, const struct moem_workload *w, moem_step_fn fn,
		    void *arg, struct moem_run_stats *out);

/*
 * Any thread: would the engine run with knob at value? 0, or -EINVAL /
 * -ERANGE with a message naming the smallest value that runs (an HBM
 * budget below one expert; under DynaExq, below every expert in the low
 * precision plus headroom; on the CUDA backend the experts' share is
 * hbm_bytes less kv_bytes, so both knobs are checked against it; a
 * kv_bytes below one KV block of the open decoder). Changes nothing:
 * moemd checks a setting with it before committing it.
 */
int moem_engine_check_knob(struct moem_engine *e, enum moem_budget_knob knob, uint64_t value);
/* Any thread: a budget knob (include/uapi/linux/moem.h values). Checked
 * now (moem_engine_check_knob(): nothing changed when refused), applied at
 * the next layer. exec and cpu_moe_layers are moem_engine_set_hybrid()
 * with the other switch as it is (checked as it checks, applied as it
 * applies). */
int moem_engine_set_knob(struct moem_engine *e, enum moem_budget_knob knob, uint64_t value);
uint64_t moem_engine_get_knob(struct moem_engine *e, enum moem_budget_knob knob);
/*
 * Any thread: apply pending knob changes now when no run, warm-up or
 * verification holds the engine (then they take effect at once: status
 * shows them); otherwise the holder applies them at its next layer
 * boundary. Returns 0, or the tiers' refusal (-ERANGE ...) of a budget.
 */
int moem_engine_apply_knobs(struct moem_engine *e);
/*
 * The bytes of the decoder's KV pool charged to the HBM budget now: the
 * kv_bytes knob, or the pool while it is larger; 0 where the pool is not
 * device memory (the CPU backend: host memory, bounded by kv_bytes alone).
 * For a budget given as a share of the experts' bytes (a percentage), to
 * which the tools and moemd add it. Any thread.
 */
uint64_t moem_engine_kv_hbm_bytes(struct moem_engine *e);
/*
 * Set hbm_bytes for an experts' share (a budget in %, or none): share plus
 * moem_engine_kv_hbm_bytes(), so the experts keep share with the pool on
 * top (share alone where the pool is not device memory, 0 for no limit),
 * and apply it. -ENOSPC with a message, nothing changed, when that raises
 * the budget and the device has less memory free than the pool's bytes and
 * a margin (a caller may keep the pool inside the budget instead); other
 * -errno as moem_engine_set_knob() and moem_engine_apply_knobs().
 */
int moem_engine_hbm_on_top(struct moem_engine *e, uint64_t share);
/* Any thread: end the current run after the step in progress, or a
 * warm-up after the expert being staged (it then returns -ECANCELED). */
void moem_engine_stop(struct moem_engine *e);
/*
 * Any thread: write the routing trace of the following runs to path
 * (NULL: stop tracing). A run in progress keeps what it started with.
 */
int moem_engine_set_trace(struct moem_engine *e, const char *path, bool logits);
/* The same, with moem_trace_writer_open_ex()'s flags (MOEM_TRACE_W_EXCL:
 * a path a client chose, where no foreign file may be replaced). */
int moem_engine_set_trace_ex(struct moem_engine *e, const char *path, bool logits,
			     unsigned int flags);
/*
 * True once the backend saw a sticky device error (the process must exit
 * and be restarted); msg (may be NULL) receives the error.
 */
bool moem_engine_fatal(struct moem_engine *e, char *msg, size_t len);
/*
 * Check every expert version the staging directory says is in the pool
 * against the pack's checksums (adopted ones after a warm restart
 * included). Waits for loads in flight; -EBUSY while a run holds the
 * engine; moem_engine_stop() ends it early (-ECANCELED). *checked = versions read, *bad = mismatches (the first one is
 * described in the message, and the call returns -EBADMSG).
 */
int moem_engine_verify_staged(struct moem_engine *e, uint64_t *checked, uint64_t *bad);

struct moem_engine_status {
	char backend[32], backend_note[192];
	char pool_provider[16], pool_why[320];
	uint64_t pool_bytes;
	bool pool_pinned;	    /* every byte locked or pinned */
	uint64_t pool_pinned_bytes; /* what the kernel says is */
	char route[64], evict[64], prefetch[64], precision[64], paging[64];
	uint64_t hbm_budget, hbm_used, dram_budget, dram_used;
	uint64_t hbm_resident_hi, hbm_resident_lo, dram_ready;
	uint64_t hits, misses, fallbacks, stall_ns, steps; /* hits/misses/fallbacks: HBM */
	uint64_t dram_hits, dram_misses; /* of the HBM misses: staged in DRAM, or not yet */
	uint64_t bytes_nvme;		 /* read from the pack since open (warm-up included) */
	uint64_t bytes_h2d;		 /* DRAM -> HBM since open (warm-up included) */
	double link_gbps;
	uint32_t prefetch_horizon;
	bool running;
	/* Warm restart: staged versions adopted from a persistent region. */
	bool warm;
	uint64_t adopted;
	char pool_region[64];
	bool pool_persistent;
	uint64_t knob[MOEM_BUDGET_NR]; /* knob values in force or pending */
	uint64_t knobs_applied_ns;     /* moem_now_ns() of the last applied change */
	char trace_path[256];	       /* "" when not tracing */
	char pack_id[33];
	char hotness[96]; /* "engine", "bpf", or "engine (bpf refused: why)" */
	char hbm_mode[8]; /* "vmm" or "uvm" */
	/* Hybrid execution: "gpu" or "hybrid", --cpu-moe-layers, the CPU
	 * throughput the decision uses (0: no CPU executor), and totals. */
	char exec[8];
	bool exec_hybrid;
	uint32_t cpu_moe_layers;
	char place[256];     /* the --place rules, moem_place_format_all() */
	uint64_t cpu_placed; /* experts placed on the CPU always (rules, cpu-moe-layers) */
	double cpu_gbps;
	uint64_t cpu_token_ns, cpu_call_ns;
	char cpu_from[16]; /* where cpu_gbps came from: "given", "cache", "measured" ("" off) */
	uint64_t cpu_experts, cpu_ns;
	uint64_t last_cpu_experts, last_cpu_ns; /* the last step's */
	/* since the engine opened: steps' time and the engine thread's phases in it */
	uint64_t step_ns, phase_ns[MOEM_PHASE_NR];
	/* UVM mode: prefetches issued to the driver (tierdev.h) */
	uint64_t uvm_prefetches, uvm_prefetch_bytes;
	/* What the backend runs on (moem_backend_get_info): its device
	 * string and, on the CPU backend, its worker threads (CUDA: 0). */
	char backend_device[128];
	uint32_t backend_threads;
	/* The DRAM tier per NUMA node (moem_tiers_stats.dram_node): one entry
	 * on a one-node pool; pool_bound: placed with mbind and checked. */
	bool pool_bound;
	uint32_t dram_n_nodes;
	struct moem_dram_node dram_node[MOEM_POOL_MAX_NODES];
	uint64_t dram_node_fallback; /* versions placed off their node: it was full */
};
void moem_engine_get_status(struct moem_engine *e, struct moem_engine_status *st);
/*
 * Add st's DRAM tier per NUMA node to the JSON object o: "dram_nodes"
 * ([{node, bytes, budget, used, free}]), "dram_node_fallback" and
 * "pool_bound" (moemd's status and moem's --json print the same).
 */
struct json_object;
void moem_engine_dram_nodes_json(struct json_object *o, const struct moem_engine_status *st);
/* o[key] = {"route": ns[ROUTE], ...}: the phases in ns (moem run, moemd's status). */
void moem_engine_phases_json(struct json_object *o, const char *key,
			     const uint64_t ns[MOEM_PHASE_NR]);

/*
 * Hybrid execution's live switches, as the budget knobs are: exec (true:
 * hybrid) and cpu_moe_layers; the --place rules stay as opened. Checked
 * now, with a message: -EINVAL under hbm mode uvm, for cpu_moe_layers
 * beyond the model or that the rules leave nothing to (as at open), or for
 * more experts on the CPU than the DRAM budget holds a layer of; -EBUSY
 * when the CPU executor has to open (it was not at start) while a run
 * holds the engine; the executor's own errors (its figures come from
 * cpu_gbps, the calibration cache, or a measurement, as at open). A
 * refused change changes nothing. Applied at the next layer boundary of
 * a run, at once otherwise; experts newly placed on the CPU are not used
 * in HBM from then on (those resident there leave by eviction).
 */
int moem_engine_set_hybrid(struct moem_engine *e, bool exec_hybrid, uint32_t cpu_moe_layers);

/* The model's MoE layers and experts per layer. */
void moem_engine_moe_shape(const struct moem_engine *e, uint32_t *n_moe, uint32_t *n_experts);

/*
 * Cumulative route counts since moem_engine_open(), counted by the engine
 * from the routing it executes: out[m * n_experts + x] is how many
 * (token, slot) pairs MoE layer m sent to expert x (moem_engine_moe_shape()
 * gives the shape). Exact; the same numbers a route tracer's moem_hot
 * holds when attached from the start. Call it between runs (during one,
 * a layer may be half counted).
 */
void moem_engine_expert_counts(const struct moem_engine *e, uint64_t *out);

/*
 * Hidden-state files: "MOEMHID1", u32 version 1, u32 hidden, u32 batch,
 * u32 reserved 0, u64 steps, then f32 [steps][batch][hidden] little endian.
 */
int moem_hidden_write_synth(const char *pack_path, const char *mix, uint64_t seed, uint32_t batch,
			    uint64_t steps, const char *out_path);

#endif /* MOEM_ENGINE_H */
