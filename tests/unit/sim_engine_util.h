/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The simulator set up to replay an engine run (test_engine's and
 * test_engine_hybrid's "the engine does what the simulator says" cases).
 */
#ifndef MOEM_SIM_ENGINE_UTIL_H
#define MOEM_SIM_ENGINE_UTIL_H

#include <moem/sim.h>
#include <moem/trace.h>

/* moem_sim_cost_default() with the shapes of the run that wrote trace. */
static inline int st_sim_cost_for_trace(const char *trace, struct moem_sim_cost *c)
{
	const struct moem_trace_info *ti;
	struct moem_trace_reader *tr;
	int ret = moem_trace_open(trace, &tr);

	if (ret)
		return ret;
	ti = moem_trace_reader_info(tr);
	moem_sim_cost_default(c);
	c->hidden = ti->hidden;
	c->inter = ti->moe_inter;
	moem_trace_close(tr);
	return 0;
}

/*
 * After moem_sim_cost_finish(): the experts the engine's HBM budget held,
 * in its slots (an expert's bytes 64 KiB aligned in the arena).
 */
static inline void st_sim_engine_hbm(struct moem_sim_cost *c, uint64_t hbm_budget)
{
	const uint64_t slot = (c->expert_bytes[MOEM_PREC_BF16] + 65535) & ~65535ULL;

	c->hbm_bytes = hbm_budget / slot * c->expert_bytes[MOEM_PREC_BF16];
}

#endif /* MOEM_SIM_ENGINE_UTIL_H */
