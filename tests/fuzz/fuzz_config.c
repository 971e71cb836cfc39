// SPDX-License-Identifier: GPL-2.0-only
/*
 * libFuzzer harness: config.json text through moem_config_parse. An
 * accepted config must name its non-expert tensors, and if moem can write
 * it back as config.json, reading that back must give the same shape.
 */
#include <stdint.h>
#include <stdlib.h>

#include <json-c/json.h>

#include <moem/store.h>

#include "../../runtime/storage/store/store_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct moem_model_config c, back;
	struct moem_tensor_spec *s;
	struct json_object *j;
	size_t n;

	if (moem_config_parse((const char *)data, size, &c))
		return 0;
	if (!moem_store_arch_tensors(&c, false, &s, &n))
		free(s);
	if (moem_config_to_json(&c, &j))
		return 0;
	if (moem_config_from_json(j, &back) || back.arch != c.arch || back.hidden != c.hidden ||
	    back.n_layers != c.n_layers || back.n_experts != c.n_experts || back.top_k != c.top_k ||
	    back.moe_inter != c.moe_inter || moem_n_moe_layers(&back) != moem_n_moe_layers(&c))
		abort();
	json_object_put(j);
	return 0;
}
