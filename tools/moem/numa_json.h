/* SPDX-License-Identifier: GPL-2.0-only */
/* The DRAM tier per NUMA node as JSON, for moem run and decode --json. */
#ifndef MOEM_TOOL_NUMA_JSON_H
#define MOEM_TOOL_NUMA_JSON_H

#include <json-c/json.h>

#include <moem/engine.h>

/* Add dram_nodes ([{node, bytes, budget, used, free}]), dram_node_fallback
 * and pool_bound to o. */
void dram_nodes_json(json_object *o, const struct moem_engine_status *st);

#endif /* MOEM_TOOL_NUMA_JSON_H */
