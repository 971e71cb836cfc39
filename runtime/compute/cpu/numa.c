// SPDX-License-Identifier: GPL-2.0-only
/*
 * NUMA topology for the CPU backend (libnuma): which node each usable CPU
 * is on, so workers can be spread over the nodes and an expert computed
 * by the workers of the node that holds its pages.
 */
#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <string.h>

#include "cpu_int.h"

void moem_cpu_topo_detect(struct moem_cpu_topo *t)
{
	int cpus[MOEM_CPU_MAX_CPUS], nodes[MOEM_CPU_MAX_CPUS];
	uint32_t n = 0, used[MOEM_TPOOL_MAX_NODES] = {0};
	bool numa = numa_available() >= 0;
	cpu_set_t set;

	memset(t, 0, sizeof(*t));
	if (sched_getaffinity(0, sizeof(set), &set))
		CPU_ZERO(&set);
	for (int c = 0; c < CPU_SETSIZE && n < MOEM_CPU_MAX_CPUS; c++) {
		int nd = 0, k;

		if (!CPU_ISSET(c, &set))
			continue;
		if (numa) {
			nd = numa_node_of_cpu(c);
			if (nd < 0)
				nd = 0;
		}
		for (k = 0; k < (int)t->n_nodes && t->node_id[k] != nd; k++)
			;
		if (k == (int)t->n_nodes) {
			if (t->n_nodes == MOEM_TPOOL_MAX_NODES)
				k = 0; /* more nodes than we track: fold into the first */
			else
				t->node_id[t->n_nodes++] = nd;
		}
		cpus[n] = c;
		nodes[n++] = k;
	}
	if (!n) { /* no affinity mask: one CPU, node 0 */
		t->n_nodes = 1;
		t->n_cpus = 1;
		return;
	}
	/* round-robin over the nodes, each node's CPUs in order */
	while (t->n_cpus < n)
		for (uint32_t k = 0; k < t->n_nodes; k++) {
			uint32_t seen = 0;

			for (uint32_t i = 0; i < n; i++)
				if (nodes[i] == (int)k && seen++ == used[k]) {
					t->cpu[t->n_cpus] = cpus[i];
					t->node[t->n_cpus++] = (uint16_t)k;
					used[k]++;
					break;
				}
		}
}

uint16_t moem_cpu_topo_node_of(const struct moem_cpu_topo *t, const void *addr)
{
	int nd = -1;

	if (t->n_nodes <= 1)
		return 0;
	if (get_mempolicy(&nd, NULL, 0, (void *)addr, MPOL_F_NODE | MPOL_F_ADDR))
		return MOEM_CPU_NODE_ANY;
	for (uint32_t k = 0; k < t->n_nodes; k++)
		if (t->node_id[k] == nd)
			return (uint16_t)k;
	return MOEM_CPU_NODE_ANY;
}

uint16_t moem_cpu_node_of(struct cpu_backend *c, const void *addr)
{
	if (c->hooks.node_of)
		return c->hooks.node_of(addr, c->hooks.node_arg);
	return moem_cpu_topo_node_of(&c->topo, addr);
}
