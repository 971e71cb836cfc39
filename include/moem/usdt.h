/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * USDT probes in libmoem (sys/sdt.h from systemtap-sdt-dev), for bpftrace,
 * bpftool-loaded programs and `moem trace record`. Each probe has a
 * semaphore: the kernel increments it while a uprobe is attached, and the
 * argument setup is skipped (one load and a not-taken branch) while it is
 * zero, so an unattached probe costs next to nothing.
 *
 *   moem:route   (u32 layer, u64 step, u32 tokens, u32 k, i32 *ids, float *w,
 *                 u32 n_layers, u32 n_experts, u32 flags)
 *                one per MoE layer per step (layer = MoE-layer index);
 *                ids[tokens][k] (-1 unused), w[tokens][k]; the model's
 *                MoE layers and experts, and trace.h's MOEM_TRACE_F_*
 *                header flags (synthetic), so a recorder attached in the
 *                middle of a run can write a trace header
 *   moem:fetch   (u32 layer, u32 expert, u32 prec, u32 from, u32 to,
 *                 u64 bytes, u64 ns)     tiers: 0 NVMe, 1 DRAM, 2 HBM
 *   moem:stall   (u32 layer, u32 expert, u64 ns)
 *   moem:promote (u32 layer, u32 expert, u32 from_prec, u32 to_prec)
 *   moem:demote  (u32 layer, u32 expert, u32 from_prec, u32 to_prec)
 * Precisions are enum moem_prec values (0 bf16, 1 q8, 2 q4, 3 q2).
 * promote/demote fire when a DynaExq transition is applied (the expert's
 * plan changes and the fetch of its new version is queued).
 *
 * Arguments are kept in registers or constants ("nr", not the default
 * "nor"): a memory operand may use base+index*scale addressing, which
 * libbpf before 1.5 cannot read, and under the semaphore loading them
 * into registers costs nothing when no tracer is attached.
 * Documentation/tracing.md lists the probes for bpftrace users.
 */
#ifndef MOEM_USDT_H
#define MOEM_USDT_H

#define _SDT_HAS_SEMAPHORES	1
#define STAP_SDT_ARG_CONSTRAINT nr
#include <sys/sdt.h>

#define MOEM_TIER_NVME 0
#define MOEM_TIER_DRAM 1
#define MOEM_TIER_HBM  2

extern unsigned short moem_route_semaphore, moem_fetch_semaphore, moem_stall_semaphore,
	moem_promote_semaphore, moem_demote_semaphore;

#define MOEM_USDT_ENABLED(name) __builtin_expect(moem_##name##_semaphore, 0)

#define MOEM_USDT_ROUTE(layer, step, tokens, k, ids, w, n_layers, n_experts, flags)          \
	do {                                                                                 \
		if (MOEM_USDT_ENABLED(route))                                                \
			DTRACE_PROBE9(moem, route, layer, step, tokens, k, ids, w, n_layers, \
				      n_experts, flags);                                     \
	} while (0)
#define MOEM_USDT_FETCH(layer, expert, prec, from, to, bytes, ns)                             \
	do {                                                                                  \
		if (MOEM_USDT_ENABLED(fetch))                                                 \
			DTRACE_PROBE7(moem, fetch, layer, expert, prec, from, to, bytes, ns); \
	} while (0)
#define MOEM_USDT_STALL(layer, expert, ns)                             \
	do {                                                           \
		if (MOEM_USDT_ENABLED(stall))                          \
			DTRACE_PROBE3(moem, stall, layer, expert, ns); \
	} while (0)
#define MOEM_USDT_PROMOTE(layer, expert, from, to)                             \
	do {                                                                   \
		if (MOEM_USDT_ENABLED(promote))                                \
			DTRACE_PROBE4(moem, promote, layer, expert, from, to); \
	} while (0)
#define MOEM_USDT_DEMOTE(layer, expert, from, to)                             \
	do {                                                                  \
		if (MOEM_USDT_ENABLED(demote))                                \
			DTRACE_PROBE4(moem, demote, layer, expert, from, to); \
	} while (0)

#endif /* MOEM_USDT_H */
