/* SPDX-License-Identifier: GPL-2.0-only */
/* The engine's internals (engine.h): shared by its source files only. */
#ifndef MOEM_ENGINE_INT_H
#define MOEM_ENGINE_INT_H

#include <pthread.h>

#include <moem/backend.h>
#include <moem/cost.h>
#include <moem/driver.h>
#include <moem/engine.h>
#include <moem/loader.h>
#include <moem/pack.h>
#include <moem/policy.h>
#include <moem/synth.h>
#include <moem/tierdev.h>
#include <moem/tiers.h>
#include <moem/trace.h>

#define ENG_MAX_B	  64
/* lockstep runs: the link rate the policies are told (moem sim --pcie-gbps 10000) */
#define ENG_LOCKSTEP_GBPS 10000.0

struct moem_engine {
	struct moem_engine_opts o;
	char route_spec[64], evict_spec[64], prefetch_spec[64], prec_spec[96], paging_spec[64];

	struct moem_pack *pack;
	const struct moem_model_config *cfg;
	uint32_t n_moe;
	uint32_t *moe_layer; /* [n_moe] model layer of each MoE layer */
	int32_t *moe_idx;    /* [n_layers] MoE index or -1 */

	struct moem_backend *be;
	struct moem_pool *pool;
	struct moem_pool_info pool_info;
	uint8_t *dram; /* staging area inside the pool (after the directory) */
	uint64_t dram_bytes;
	struct moem_loader *ld;
	uint32_t ld_file;
	struct moem_stager *stager;
	struct moem_tierdev *dev;
	bool uvm;		 /* hbm_mode "uvm": dev is the UVM device, the tiers never evict */
	struct moem_evictor hev; /* the policy driver behind the tiers' interface */
	struct moem_evictor dramev; /* and the DRAM tier's (driver.h: moem_driver_dram_pick) */
	struct moem_tiers *tiers;
	uint32_t n_prec;
	enum moem_prec prec[2];
	uint64_t blob_bytes[2];
	uint64_t arena_bytes; /* every managed version of every expert */
	bool warm;	      /* staged experts were adopted from a persistent region */
	uint64_t adopted;

	/* Fixed weights, resident for the engine's lifetime. */
	moem_dptr *gate;   /* [n_moe] bf16 [N][H] */
	moem_dptr *norm;   /* [n_layers] bf16 [H] (post-attention norm) */
	moem_dptr *shared; /* [n_layers] shared-expert blob or 0 */
	moem_dptr *dense;  /* [n_layers] dense MLP blob or 0 */
	struct moem_expert_layout shared_l, dense_l;
	uint64_t fixed_bytes;

	/* Activations (device) and their host mirrors. */
	moem_dptr h, xb, logits, ids, w, cnt, out, shout, resident, counts;
	void *host_blk; /* the host mirrors below in one block, pinned if host_reg */
	bool host_reg;
	float *h_host, *logits_host;
	int32_t *ids_host;
	float *w_host;
	uint32_t *cnt_host;
	uint8_t *res_host;
	uint32_t *counts_host; /* [n_moe][N] histogram read back per interval */

	/* Policies: the routing policy, and the policy driver for the rest
	 * (placement.c feeds it and carries out its decisions on the tiers). */
	struct moem_route_policy rp;
	struct moem_driver_cfg dcfg;
	struct moem_driver *drv;
	uint64_t pos; /* layer clock: step * n_moe + MoE layer */
	uint64_t interval_start_ns;
	uint64_t pf_last_bytes, pf_last_ns; /* transfer totals fed to the driver */
	uint64_t pg_last_misses;	    /* FluxMoE: the tiers' misses at the last step */
	/* Pre-gate: layers ahead, their router logits (device, host), picks [D][B][K]. */
	uint32_t pg_depth, replay_pg_depth; /* ours, and the replayed trace's */
	moem_dptr pg_logits;
	float *pg_logits_host, *pg_prob;
	int32_t *pg_ids;
	uint64_t last_layer_ns;
	uint32_t batch; /* the current (or last) run's tokens per step */

	/* Knobs from other threads, applied at layer boundaries. */
	pthread_mutex_t knob_lock;
	uint64_t knob[MOEM_BUDGET_NR];
	uint32_t knob_dirty; /* bit per knob */
	volatile int stop;
	volatile int running; /* a moem_engine_run() is in progress */
	volatile int busy;    /* the engine thread's role is taken (moem_eng_claim) */

	/* Totals for status (under knob_lock). */
	struct moem_step_stats total;

	struct moem_trace_writer *trace;
	bool trace_synthetic;
	/* The trace the next run writes (under knob_lock; NULL: none). */
	char *trace_path;
	bool trace_logits;
	unsigned int trace_flags;  /* moem_trace_writer_open_ex() flags */
	uint64_t knobs_applied_ns; /* when a knob change last took effect */
	/* Budgets go to the tiers from any thread, one at a time, with the
	 * knob values current at that moment (moem_eng_apply_budget). */
	pthread_mutex_t budget_lock;
	uint64_t applied_hbm, applied_dram;
	/* The decoder's KV pool (decode.c), under knob_lock: what it holds
	 * now, and one block, the smallest kv_bytes (0: no decoder). */
	uint64_t kv_pool_bytes, kv_block_bytes;

	/* Route counts and the hotness source (hotness.c). */
	uint64_t *route_counts;		/* [n_moe][N] since open, from the host ids */
	struct moem_bpf_route *hot_bpf; /* hotness "bpf": our own moem_hot, or NULL */
	uint64_t *hot_prev, *hot_cur;	/* [n_moe][N] moem_hot at the last interval, now */
	uint32_t *hot_delta;		/* [N] */
	char hotness[96];		/* what serves, for status */

	struct moem_eng_dstep *ds;  /* device-planned steps (dstep.c), or NULL */
	struct moem_eng_graphs *gr; /* their graphs (graph.c), or NULL */

	/* Hybrid execution (hybrid.c): the CPU executor, NULL when off. */
	struct moem_backend *cpu_be;	 /* e->be on the CPU backend, else cpu_be_own */
	struct moem_backend *cpu_be_own; /* a CPU backend of our own */
	struct moem_cost xcost;		 /* what the exec decision weighs */
	char cpu_from[16];		 /* "given", "cache", "measured" */
	uint8_t *place;			 /* [n_moe][N] enum moem_place (place.h), or NULL */
	uint64_t n_placed_cpu;		 /* experts placed on the CPU always */
	/* A live change of exec / cpu_moe_layers (moem_engine_set_hybrid),
	 * under knob_lock until the engine thread takes it at a layer
	 * boundary (moem_eng_hybrid_apply). */
	bool hyb_dirty, hyb_exec;
	uint32_t hyb_layers;
	/* Serialises changes of exec / cpu_moe_layers: a change of one knob
	 * (moem_eng_set_hybrid_knob) keeps the other as it is. */
	pthread_mutex_t hyb_set_lock;
	uint8_t *hyb_place;
	uint64_t hyb_n_cpu;
	uint64_t last_cpu_experts, last_cpu_ns; /* the last step's, under knob_lock */
	uint16_t *cpu_x;   /* host bf16 [ENG_MAX_B][H]: the layer's FFN input */
	float *cpu_out;	   /* host f32 [ENG_MAX_B][K][H]: CPU-computed rows */
	bool cpu_reg;	   /* cpu_x's block (cpu_out too) pinned for the backend */
	bool cpu_x_queued; /* this layer's input went down with its routing */
};

/* A step's stats into the engine's totals (moemd's status reads them). */
void moem_eng_count_step(struct moem_engine *e, const struct moem_step_stats *st);

/*
 * stager.c: the tiers' source of bytes, the pack's expert blobs read
 * through the io_uring loader (O_DIRECT, fixed buffers over the pool).
 * MoE layer m of the tiers is the m-th MoE layer of the model; pi 0/1 read
 * precisions hi/lo of the pack. With verify, every blob's XXH3 checksum is
 * checked on arrival (-EBADMSG).
 */
int moem_eng_stager_create(struct moem_pack *pack, struct moem_loader *ld, uint32_t file_idx,
			   enum moem_prec hi, enum moem_prec lo, bool verify,
			   struct moem_stager **out);
void moem_eng_stager_destroy(struct moem_stager *s);
/* engine.c */
int moem_eng_apply_knobs(struct moem_engine *e);
int moem_eng_apply_budget(struct moem_engine *e, uint64_t *hbm, uint64_t *dram);
/* Does the decoder's KV pool live in the HBM budget (the CUDA backend)? */
bool moem_eng_kv_in_hbm(const struct moem_engine *e);
/*
 * The experts' share of HBM for an hbm_bytes value and the KV bytes
 * charged to it: hbm (0: no limit, the whole arena) less kv where the KV
 * pool lives in HBM, at most the arena. The one clamp of the HBM budget.
 */
uint64_t moem_eng_expert_hbm(const struct moem_engine *e, uint64_t hbm, uint64_t kv);
/* KV bytes a default-sized pool may take from HBM (UINT64_MAX: no limit). */
uint64_t moem_eng_kv_room(struct moem_engine *e);
/*
 * decode.c: the decoder's KV pool now holds pool_bytes in blocks of
 * block_bytes (0, 0: the decoder closed). Re-derives the experts' HBM
 * share; the policies' numbers follow at the next layer boundary.
 */
int moem_eng_kv_resize(struct moem_engine *e, uint64_t pool_bytes, uint64_t block_bytes);
/* layer.c: run one model layer on the current batch (B tokens in e->h). */
int moem_eng_layer(struct moem_engine *e, uint32_t layer, uint32_t B, uint64_t step,
		   const struct moem_trace_rec *replay, struct moem_step_stats *st);
/*
 * placement.c: the policy driver on the tiers. open() parses the policy
 * specs (before the tiers exist), attach() creates the driver once they
 * do; the per-layer calls follow driver.h's sequence.
 */
int moem_eng_placement_open(struct moem_engine *e);
int moem_eng_placement_attach(struct moem_engine *e);
void moem_eng_placement_close(struct moem_engine *e);
int moem_eng_dynaexq_n_hi(const struct moem_engine *e, uint64_t hbm, uint64_t permille,
			  uint32_t *n_hi);
uint32_t moem_eng_paging_window(const struct moem_engine *e, uint32_t B);
uint32_t moem_eng_paging_capacity(const struct moem_engine *e, uint64_t hbm, uint32_t B);
/* A run of batch B starts (or the budget moved): FluxMoE's window and resident set. */
void moem_eng_paging_batch(struct moem_engine *e, uint32_t B, uint64_t hbm);
/* Routing of MoE layer m known: T active experts, ascending. */
int moem_eng_routed(struct moem_engine *e, uint32_t m, uint32_t B, const uint8_t *active);
/*
 * A layer's routing is on the host (ids_host, w_host, cnt_host): mark the
 * experts it uses in active[], count them in st, and feed the route
 * counters, the USDT probe and the policies (moem_eng_routed). The
 * per-layer path calls it as it routes, a device-planned step one step late.
 */
int moem_eng_route_seen(struct moem_engine *e, uint32_t m, uint32_t B, uint64_t step,
			uint8_t *active, struct moem_step_stats *st);
/* An acquire's outcome for the driver (ret as moem_tiers_acquire). */
void moem_eng_used(struct moem_engine *e, const struct moem_xref *ref, int ret);
/*
 * The pre-gate of MoE layer m's input: the next pg_depth layers' routers
 * on it (or the replayed trace's picks), top-k per token, to the driver.
 */
int moem_eng_pregate(struct moem_engine *e, uint32_t m, uint32_t B,
		     const struct moem_trace_rec *replay);
/* Plan and issue prefetches (the layer's misses are queued). */
int moem_eng_lookahead(struct moem_engine *e);
int moem_eng_after_layer(struct moem_engine *e, uint32_t m, uint64_t layer_ns);
void moem_eng_after_step(struct moem_engine *e, uint64_t compute_ns, uint64_t bytes_streamed);
/*
 * dstep.c: decode steps planned on the device, one host synchronisation
 * per step. begin() decides for a step of B tokens (before its first
 * layer): it needs a backend with moem_op_ffn_routed, a routing policy
 * that stays on the device, and every expert's planned version in HBM,
 * and then pins them all for the step. While on(), moem_eng_layer runs
 * MoE layers through moem_eng_dstep_ffn(). end() comes after the step's
 * synchronisation: the host's per-layer work, one step late, and unpin.
 * abort() after a failed step; free() at close.
 */
int moem_eng_dstep_begin(struct moem_engine *e, uint32_t B);
bool moem_eng_dstep_on(const struct moem_engine *e);
int moem_eng_dstep_ffn(struct moem_engine *e, uint32_t m, uint32_t B);
int moem_eng_dstep_end(struct moem_engine *e, uint64_t step, struct moem_step_stats *st);
void moem_eng_dstep_abort(struct moem_engine *e);
void moem_eng_dstep_free(struct moem_engine *e);
/*
 * graph.c: a device-planned step's launches captured once per shape and
 * replayed (Documentation/engine.md, "CUDA graphs"). The key holds all
 * that fixes the launches' grids and by-value arguments; what changes
 * from step to step (ids, positions, block tables, the residency table)
 * the kernels read from device memory the step updates before the launch.
 * Zero the key, fill what the caller knows (the decoder: tokens, logits
 * rows, KV pool); begin() adds the engine's part (routing policy), then
 *  - ENG_GRAPH_OFF: launch as usual (graphs off, or a shape seen for the
 *    first time: the step grows whatever buffers it needs, plainly);
 *  - ENG_GRAPH_CAPTURE: launch as usual, then end(): the launches become
 *    a graph, which end() launches; *rerun when the capture failed (no
 *    work ran: launch again, plainly; graphs are then off for the
 *    process, said once);
 *  - ENG_GRAPH_REPLAY: the step's graph is launched: launch nothing.
 * Nothing may synchronise between begin() and end(). flush() destroys
 * every graph (after a synchronisation: device buffers a graph uses moved).
 */
enum moem_eng_graph_mode { ENG_GRAPH_OFF, ENG_GRAPH_CAPTURE, ENG_GRAPH_REPLAY };

struct moem_eng_graph_key {
	uint32_t T, n_out;
	uint32_t rp_kind, rp_k0, rp_beta;
	float rp_alpha;
	uint64_t kv_pool;
	uint32_t kv_blocks, pad;
	uint8_t rows[ENG_MAX_B]; /* of n_out; the rest 0 */
};

int moem_eng_graph_begin(struct moem_engine *e, struct moem_eng_graph_key *k,
			 enum moem_eng_graph_mode *mode);
int moem_eng_graph_end(struct moem_engine *e, int err, bool *rerun);
void moem_eng_graph_flush(struct moem_engine *e);
void moem_eng_graph_free(struct moem_engine *e);
/*
 * hybrid.c: the CPU executor. place_open() resolves the --place rules
 * and cpu_moe_layers against the model (as soon as its shape is known).
 * hybrid_apply() takes a live change (moem_engine_set_hybrid) on the
 * engine thread, at a layer boundary.
 * open() after the tiers and activations
 * (measures the CPU kernels unless cpu_gbps was given); off unless exec
 * hybrid, cpu_moe_layers or a cpu --place rule. exec_of() is where expert
 * x of MoE layer m, used by tokens (token, slot) pairs, runs this step
 * (*forced: placed on the CPU by a rule or --cpu-moe-layers; an expert
 * placed on the GPU never goes to the CPU). hbm_allowed(): may expert x
 * of MoE layer m enter HBM (not when placed on the CPU). cpu_inputs() brings the layer's FFN
 * input (e->xb, B tokens) to the host; cpu_ffn() runs the given experts
 * (blobs: host addresses in the pool) on the CPU into the layer's output
 * rows (e->out).
 */
int moem_eng_place_open(struct moem_engine *e);
void moem_eng_hybrid_apply(struct moem_engine *e);
/* The exec or cpu_moe_layers knob (moem_engine_set_knob): the other kept. */
int moem_eng_set_hybrid_knob(struct moem_engine *e, enum moem_budget_knob knob, uint64_t value);
int moem_eng_hybrid_open(struct moem_engine *e);
void moem_eng_hybrid_close(struct moem_engine *e);
bool moem_eng_hybrid_on(const struct moem_engine *e);
enum moem_exec moem_eng_exec_of(struct moem_engine *e, struct moem_exec_queue *q, uint32_t m,
				uint32_t x, uint32_t tokens, bool *forced);
bool moem_eng_hbm_allowed(const struct moem_engine *e, uint32_t m, uint32_t x);
/*
 * The layer's FFN input to the host for the CPU's experts: queued with the
 * routing's readback (_queue, before its synchronisation: one round trip a
 * layer for both, whether or not the layer sends an expert to the CPU), or
 * copied and waited for when the split finds CPU experts and nothing was
 * queued (the buffers not pinned, a replayed routing).
 */
int moem_eng_cpu_inputs_queue(struct moem_engine *e, uint32_t B);
int moem_eng_cpu_inputs(struct moem_engine *e, uint32_t B);
int moem_eng_cpu_ffn(struct moem_engine *e, uint32_t B, const struct moem_ffn_expert *ex,
		     uint32_t n, const struct moem_ffn_assign *assign, uint32_t n_assign);
/* hotness.c: route counts, and DynaExq's counts from moem_hot */
int moem_eng_hotness_open(struct moem_engine *e);
void moem_eng_hotness_close(struct moem_engine *e);
void moem_eng_count_routes(struct moem_engine *e, uint32_t m, uint32_t B);
/* Feed DynaExq one interval of counts from moem_hot; false: not served. */
bool moem_eng_hotness_interval(struct moem_engine *e);
/* warm.c: the staging directory of a persistent pool */
int moem_eng_warm_attach(struct moem_engine *e);
void eng_warm_note(struct moem_engine *e);
/*
 * run.c: claim / give back the engine thread's role. Runs, warm-up and
 * verify claim it for their duration (-EBUSY if taken); applying knobs
 * from another thread claims it briefly, only if free, and a long claim
 * waits for that to end rather than fail.
 */
#define ENG_BUSY_WORK  1
#define ENG_BUSY_BRIEF 2
int moem_eng_claim(struct moem_engine *e);
bool moem_eng_claim_brief(struct moem_engine *e);
void moem_eng_unclaim(struct moem_engine *e);
/* Give back a long claim and apply knobs set meanwhile. */
void moem_eng_unclaim_work(struct moem_engine *e);

#endif /* MOEM_ENGINE_INT_H */
