/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The placement layer's one cost model (DESIGN.md, "One cost model"): how
 * long it takes to move an expert's bytes between the tiers and to run it.
 * Everything that weighs time reads it: the prefetch horizon, FluxMoE's
 * rho controller, inclusive or exclusive DRAM, the smallest budget a
 * policy can run in, and where an expert runs (hybrid CPU/GPU execution,
 * ALGORITHMS.md sec. 7). The simulator
 * takes all of its time from it; the engine fills it from what it
 * measures (link bandwidth from the transfer engine, layer time from its
 * own clock) and starts from the defaults.
 *
 * Units: bandwidths in GB/s (10^9 bytes/s, which is bytes per ns), times
 * in ns. Defaults: an H100-class GPU on PCIe 4.0 x16 and an NVMe drive.
 */
#ifndef MOEM_COST_H
#define MOEM_COST_H

#include <stdbool.h>
#include <stdint.h>

struct moem_cost {
	double link_gbps;  /* host -> device copies (25) */
	double d2h_gbps;   /* device -> host copies, write-back to DRAM (0: link_gbps) */
	double nvme_gbps;  /* NVMe -> DRAM reads (7) */
	double hbm_gbps;   /* the GPU reading expert weights (3000) */
	uint64_t layer_ns; /* fixed work per MoE layer outside the experts (20000) */
	uint64_t token_ns; /* GPU work per (token, expert) pair beyond the weights (20) */
	/* The CPU side (hybrid execution); cpu_gbps 0: no CPU executor, never
	 * on the CPU. The engine measures both at open (or is given them). */
	double cpu_gbps;       /* the CPU reading weights from pinned DRAM */
	uint64_t cpu_token_ns; /* CPU work per (token, expert) pair */
	/* One call of the CPU executor beyond its experts' reads: waking the
	 * workers, one expert split over all of them (0: none). A layer that
	 * computes any expert on the CPU pays it once. */
	uint64_t cpu_call_ns;
};

/* The defaults above. */
void moem_cost_default(struct moem_cost *c);
/* Range checks with a message naming the field. */
int moem_cost_check(const struct moem_cost *c);

/*
 * Bandwidth of a host -> device copy in bytes/ns: the link, or for a
 * version that is not in DRAM a read from NVMe through a pipelined bounce
 * buffer, min(link, NVMe).
 */
double moem_cost_h2d_bpn(const struct moem_cost *c, bool from_nvme);
/* ns to bring bytes into HBM (from DRAM, or from NVMe through DRAM). */
uint64_t moem_cost_load_ns(const struct moem_cost *c, uint64_t bytes, bool from_nvme);
/* ns of one expert on the GPU: read its bytes once, tokens (token, expert) pairs. */
uint64_t moem_cost_gpu_ns(const struct moem_cost *c, uint64_t bytes, uint32_t tokens);

/*
 * The least stall any schedule can have when it must move link_bytes into
 * HBM over the link while the run computes for compute_ns: the link is
 * busy link_bytes / link_gbps, and only that much of it can hide behind
 * compute (a transfer can overlap any compute, even an earlier step's, so
 * the bound is over the whole run, not per layer). With link_bytes the
 * bytes Belady MIN loads at the budget (the fewest loads any schedule of
 * the same accesses needs, prefetching or not), this is the stall floor
 * that `moem sim` reports each policy's stall against. 0 when compute
 * hides the link entirely.
 */
uint64_t moem_cost_stall_bound_ns(const struct moem_cost *c, uint64_t link_bytes,
				  uint64_t compute_ns);

/*
 * Where an expert version lives once it leaves HBM. Inclusive: DRAM keeps
 * its own copy of what is in HBM, so an eviction costs nothing now and a
 * later use reads DRAM (or NVMe if DRAM dropped it). Exclusive: DRAM
 * holds what HBM does not, so HBM + DRAM together cover more experts, and
 * an expert evicted from HBM is written back to DRAM (device -> host)
 * instead of being read from NVMe again later. Exclusive pays when the
 * model does not fit in DRAM (else DRAM holds everything anyway) and a
 * write-back is cheaper than the NVMe read it saves.
 */
bool moem_cost_dram_exclusive(const struct moem_cost *c, uint64_t model_bytes, uint64_t dram_bytes);
/*
 * The same choice per eviction, as the engine and the simulator make it
 * (moem_driver_copy_back()): copy a version that leaves HBM, and that
 * DRAM no longer holds, back into DRAM (device -> host) rather than drop
 * it. reuse_p is the probability that it is used again before DRAM would
 * evict it. Worth it when the NVMe read it saves, weighed by reuse_p,
 * exceeds the write-back's own time (charged on the critical path: the
 * slot it frees waits for it):
 *   reuse_p * (bytes / min(link, nvme) - bytes / link) > bytes / d2h
 * With the defaults (link 25, NVMe 7 GB/s) that is reuse_p > 0.39.
 */
bool moem_cost_copy_back(const struct moem_cost *c, uint64_t bytes, double reuse_p);

/*
 * Hybrid CPU/GPU execution (ALGORITHMS.md sec. 7): where one expert of a
 * layer runs this step, the one rule the engine and `moem sim --exec
 * hybrid` share. bytes: the version's blob; tokens: (token, slot) pairs
 * routed to it; resident: some usable version is in HBM; in_dram: the
 * version is staged in the DRAM pool (else both sides first read it from
 * NVMe, at nvme_gbps; the GPU side then copies it at min(link, NVMe)).
 *   t_cpu = nvme + max(bytes / cpu_gbps, tokens * cpu_token_ns) + cpu_call_ns
 *   t_gpu = load + bytes / hbm_gbps + tokens * token_ns
 * The CPU when t_cpu + keep_ns < t_gpu, keep_ns being the value of having
 * the expert resident for its predicted next uses (moem_driver_keep_ns():
 * the engine and the simulator ask the same driver). A
 * resident expert, or cpu_gbps 0 (no CPU executor), always gives the GPU.
 * The activations' round trip (B x H bf16 down, B x H fp32 up per layer)
 * is left out: it is paid once per layer, not per expert.
 */
enum moem_exec {
	MOEM_EXEC_GPU = 0,
	MOEM_EXEC_CPU = 1,
};

enum moem_exec moem_cost_exec(const struct moem_cost *c, uint64_t bytes, uint32_t tokens,
			      bool resident, bool in_dram, uint64_t keep_ns);
/*
 * The decision for a layer's experts one after another, each behind the
 * work the layer already gave each side: q->cpu_ns of CPU experts, and
 * q->link_ns of loads on the link (the layer's own: what earlier layers
 * queued is not counted, so that the engine and the simulator see the
 * same numbers). The CPU when q->cpu_ns + t_cpu + keep_ns < q->link_ns +
 * t_gpu; the chosen side's queue grows by the expert's time (a resident
 * expert adds nothing). cpu_call_ns is in the first CPU expert's t_cpu
 * only: the layer's later ones share its call (cpu_n counts them). On
 * 16 CPUs feeding an H200, a layer's 2-3 CPU experts at batch 1 took
 * 150-170 us each against the 84 us the weight reads alone predict
 * (Documentation/benchmarks/gpu.md, sixth session): that difference is
 * what the call cost puts in. Start each layer with a zeroed queue and call it
 * in execution order (resident experts never go to the CPU, the rest in
 * ascending expert order). force: the CPU whatever the cost (the
 * --cpu-moe-layers layers), counted in the queue the same way.
 */
struct moem_exec_queue {
	uint64_t cpu_ns, link_ns;
	uint32_t cpu_n;
};

enum moem_exec moem_cost_exec_next(const struct moem_cost *c, struct moem_exec_queue *q,
				   uint64_t bytes, uint32_t tokens, bool resident, bool in_dram,
				   uint64_t keep_ns, bool force);
/* t_cpu above without the call: ns of one expert on the CPU (NVMe read first if not in DRAM). */
uint64_t moem_cost_cpu_ns(const struct moem_cost *c, uint64_t bytes, uint32_t tokens, bool in_dram);
/* "gpu" or "cpu". */
const char *moem_exec_name(enum moem_exec x);

#endif /* MOEM_COST_H */
