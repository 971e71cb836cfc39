// SPDX-License-Identifier: GPL-2.0-only
/* The placement layer's cost model (cost.h). */
#include <errno.h>
#include <math.h>
#include <string.h>

#include <moem/cost.h>
#include <moem/error.h>

void moem_cost_default(struct moem_cost *c)
{
	memset(c, 0, sizeof(*c));
	c->link_gbps = 25;
	c->nvme_gbps = 7;
	c->hbm_gbps = 3000;
	c->layer_ns = 20000;
	c->token_ns = 20;
}

static bool bw_ok(double v, double hi)
{
	return v > 0 && v < hi;
}

int moem_cost_check(const struct moem_cost *c)
{
	if (!bw_ok(c->link_gbps, 1e5) || !bw_ok(c->nvme_gbps, 1e5) || !bw_ok(c->hbm_gbps, 1e6))
		return moem_errf(EINVAL, "cost: bandwidths must be in (0, 1e5) GB/s");
	if (c->d2h_gbps != 0 && !bw_ok(c->d2h_gbps, 1e5))
		return moem_errf(EINVAL, "cost: device-to-host bandwidth %g GB/s out of range",
				 c->d2h_gbps);
	if (c->cpu_gbps != 0 && !bw_ok(c->cpu_gbps, 1e5))
		return moem_errf(EINVAL, "cost: CPU bandwidth %g GB/s out of range", c->cpu_gbps);
	if (c->layer_ns > 1000000000ull || c->token_ns > 1000000000ull ||
	    c->cpu_token_ns > 1000000000ull || c->cpu_call_ns > 1000000000ull)
		return moem_errf(EINVAL, "cost: layer/token/call times above one second");
	return 0;
}

double moem_cost_h2d_bpn(const struct moem_cost *c, bool from_nvme)
{
	return from_nvme ? fmin(c->link_gbps, c->nvme_gbps) : c->link_gbps;
}

uint64_t moem_cost_load_ns(const struct moem_cost *c, uint64_t bytes, bool from_nvme)
{
	return (uint64_t)((double)bytes / moem_cost_h2d_bpn(c, from_nvme) + 0.5);
}

uint64_t moem_cost_gpu_ns(const struct moem_cost *c, uint64_t bytes, uint32_t tokens)
{
	return (uint64_t)((double)bytes / c->hbm_gbps + 0.5) + (uint64_t)tokens * c->token_ns;
}

uint64_t moem_cost_stall_bound_ns(const struct moem_cost *c, uint64_t link_bytes,
				  uint64_t compute_ns)
{
	double link = (double)link_bytes / c->link_gbps;

	return link > (double)compute_ns ? (uint64_t)(link - (double)compute_ns + 0.5) : 0;
}

bool moem_cost_dram_exclusive(const struct moem_cost *c, uint64_t model_bytes, uint64_t dram_bytes)
{
	double d2h = c->d2h_gbps > 0 ? c->d2h_gbps : c->link_gbps;

	/* Writing a version back costs bytes / d2h on the device -> host
	 * direction (PCIe is full duplex: it does not delay copies to HBM);
	 * reading it again from NVMe costs bytes / nvme on the critical path. */
	return dram_bytes < model_bytes && d2h > c->nvme_gbps;
}

bool moem_cost_copy_back(const struct moem_cost *c, uint64_t bytes, double reuse_p)
{
	double d2h = c->d2h_gbps > 0 ? c->d2h_gbps : c->link_gbps;
	double saved = (double)bytes / moem_cost_h2d_bpn(c, true) -
		       (double)bytes / moem_cost_h2d_bpn(c, false);

	return reuse_p > 0 && reuse_p * saved > (double)bytes / d2h;
}

static double cpu_ns(const struct moem_cost *c, uint64_t bytes, uint32_t tokens, bool in_dram)
{
	/* an expert only on NVMe is read into DRAM first */
	double nvme = in_dram ? 0 : (double)bytes / c->nvme_gbps;

	return nvme + fmax((double)bytes / c->cpu_gbps, (double)tokens * (double)c->cpu_token_ns);
}

uint64_t moem_cost_cpu_ns(const struct moem_cost *c, uint64_t bytes, uint32_t tokens, bool in_dram)
{
	return c->cpu_gbps > 0 ? (uint64_t)(cpu_ns(c, bytes, tokens, in_dram) + 0.5) : UINT64_MAX;
}

enum moem_exec moem_cost_exec(const struct moem_cost *c, uint64_t bytes, uint32_t tokens,
			      bool resident, bool in_dram, uint64_t keep_ns)
{
	double t_gpu;

	/* No CPU executor measured; or in HBM already: reading it there is
	 * always cheaper than moving the activations to the CPU and back. */
	if (!(c->cpu_gbps > 0) || resident)
		return MOEM_EXEC_GPU;
	/* the GPU side's load comes from NVMe at min(link, NVMe) likewise */
	t_gpu = (double)moem_cost_gpu_ns(c, bytes, tokens) +
		(double)moem_cost_load_ns(c, bytes, !in_dram);
	return cpu_ns(c, bytes, tokens, in_dram) + (double)c->cpu_call_ns + (double)keep_ns < t_gpu
		       ? MOEM_EXEC_CPU
		       : MOEM_EXEC_GPU;
}

enum moem_exec moem_cost_exec_next(const struct moem_cost *c, struct moem_exec_queue *q,
				   uint64_t bytes, uint32_t tokens, bool resident, bool in_dram,
				   uint64_t keep_ns, bool force)
{
	/* the layer's first CPU expert makes the executor's call */
	double call = q->cpu_n ? 0 : (double)c->cpu_call_ns;
	double t_cpu, load, t_gpu;

	if (force && c->cpu_gbps > 0) {
		q->cpu_ns += moem_cost_cpu_ns(c, bytes, tokens, in_dram) + (uint64_t)call;
		q->cpu_n++;
		return MOEM_EXEC_CPU;
	}
	if (!(c->cpu_gbps > 0) || resident)
		return MOEM_EXEC_GPU;
	t_cpu = cpu_ns(c, bytes, tokens, in_dram) + call;
	load = (double)moem_cost_load_ns(c, bytes, !in_dram);
	t_gpu = (double)moem_cost_gpu_ns(c, bytes, tokens) + load;
	if ((double)q->cpu_ns + t_cpu + (double)keep_ns < (double)q->link_ns + t_gpu) {
		q->cpu_ns += (uint64_t)(t_cpu + 0.5);
		q->cpu_n++;
		return MOEM_EXEC_CPU;
	}
	q->link_ns += (uint64_t)(load + 0.5);
	return MOEM_EXEC_GPU;
}

const char *moem_exec_name(enum moem_exec x)
{
	return x == MOEM_EXEC_CPU ? "cpu" : "gpu";
}
