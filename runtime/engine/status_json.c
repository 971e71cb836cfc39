// SPDX-License-Identifier: GPL-2.0-only
/* Parts of moem_engine_status as JSON, shared by moemd's status and moem's --json (engine.h). */
#include <json-c/json.h>

#include <moem/engine.h>

void moem_engine_dram_nodes_json(struct json_object *o, const struct moem_engine_status *st)
{
	json_object *nodes = json_object_new_array();

	for (uint32_t k = 0; k < st->dram_n_nodes; k++) {
		json_object *n = json_object_new_object();
		uint64_t b = st->dram_node[k].budget, u = st->dram_node[k].used;

		json_object_object_add(n, "node", json_object_new_int(st->dram_node[k].node));
		json_object_object_add(n, "bytes", json_object_new_uint64(st->dram_node[k].bytes));
		json_object_object_add(n, "budget", json_object_new_uint64(b));
		json_object_object_add(n, "used", json_object_new_uint64(u));
		json_object_object_add(n, "free", json_object_new_uint64(b > u ? b - u : 0));
		json_object_array_add(nodes, n);
	}
	json_object_object_add(o, "dram_nodes", nodes);
	json_object_object_add(o, "dram_node_fallback",
			       json_object_new_uint64(st->dram_node_fallback));
	json_object_object_add(o, "pool_bound", json_object_new_boolean(st->pool_bound));
}

void moem_engine_phases_json(struct json_object *o, const char *key,
			     const uint64_t ns[MOEM_PHASE_NR])
{
	json_object *ph = json_object_new_object();

	for (int p = 0; p < MOEM_PHASE_NR; p++)
		json_object_object_add(ph, moem_phase_name(p), json_object_new_uint64(ns[p]));
	json_object_object_add(o, key, ph);
}
