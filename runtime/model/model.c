// SPDX-License-Identifier: GPL-2.0-only
/* Architecture names and layer structure of struct moem_model_config. */
#include <errno.h>
#include <string.h>

#include <moem/error.h>
#include <moem/model.h>
#include <moem/route.h>

static const char *const arch_names[MOEM_ARCH_NR] = {
	[MOEM_ARCH_QWEN3_MOE] = "qwen3_moe",
	[MOEM_ARCH_MIXTRAL] = "mixtral",
	[MOEM_ARCH_OLMOE] = "olmoe",
	[MOEM_ARCH_DEEPSEEK_V2] = "deepseek_v2",
};

static const char *const dtype_names[MOEM_DTYPE_NR] = {
	[MOEM_DTYPE_BF16] = "bfloat16",
	[MOEM_DTYPE_F16] = "float16",
	[MOEM_DTYPE_F32] = "float32",
};

const char *moem_arch_name(enum moem_arch a)
{
	return (unsigned int)a < MOEM_ARCH_NR ? arch_names[a] : "?";
}

int moem_arch_parse(const char *s, enum moem_arch *out)
{
	for (int i = 0; i < MOEM_ARCH_NR; i++) {
		if (!strcmp(s, arch_names[i])) {
			*out = (enum moem_arch)i;
			return 0;
		}
	}
	return moem_errf(EINVAL,
			 "unknown architecture '%s' (qwen3_moe, mixtral, olmoe, deepseek_v2)", s);
}

const char *moem_dtype_name(enum moem_dtype d)
{
	return (unsigned int)d < MOEM_DTYPE_NR ? dtype_names[d] : "?";
}

uint32_t moem_dtype_size(enum moem_dtype d)
{
	return d == MOEM_DTYPE_F32 ? 4 : 2;
}

bool moem_layer_is_moe(const struct moem_model_config *c, uint32_t l)
{
	if (l >= c->n_layers || l < c->first_dense)
		return false;
	if (l < MOEM_MAX_LAYERS && (c->dense_mask[l / 64] >> (l % 64)) & 1)
		return false;
	if (c->sparse_step > 1 && (l + 1) % c->sparse_step)
		return false;
	return true;
}

uint32_t moem_n_moe_layers(const struct moem_model_config *c)
{
	uint32_t n = 0;

	for (uint32_t l = 0; l < c->n_layers; l++)
		n += moem_layer_is_moe(c, l);
	return n;
}

int moem_moe_index(const struct moem_model_config *c, uint32_t l)
{
	int idx = 0;

	if (!moem_layer_is_moe(c, l))
		return -1;
	for (uint32_t i = 0; i < l; i++)
		idx += moem_layer_is_moe(c, i);
	return idx;
}

int moem_model_config_validate(const struct moem_model_config *c)
{
	if ((unsigned int)c->arch >= MOEM_ARCH_NR)
		return moem_errf(EINVAL, "config: bad architecture");
	if ((unsigned int)c->dtype >= MOEM_DTYPE_NR)
		return moem_errf(EINVAL, "config: bad torch_dtype");
	if (!c->hidden || c->hidden > 65536)
		return moem_errf(EINVAL, "config: hidden_size %u out of range 1..65536", c->hidden);
	if (!c->n_layers || c->n_layers > MOEM_MAX_LAYERS)
		return moem_errf(EINVAL, "config: num_hidden_layers %u out of range 1..%u",
				 c->n_layers, MOEM_MAX_LAYERS);
	if (!c->n_experts || c->n_experts > MOEM_MAX_EXPERTS)
		return moem_errf(EINVAL, "config: expert count %u out of range 1..%u", c->n_experts,
				 MOEM_MAX_EXPERTS);
	if (!c->top_k || c->top_k > c->n_experts || c->top_k > MOEM_MAX_TOPK)
		return moem_errf(EINVAL, "config: num_experts_per_tok %u out of range 1..%u",
				 c->top_k,
				 c->n_experts < MOEM_MAX_TOPK ? c->n_experts : MOEM_MAX_TOPK);
	if (!c->moe_inter || c->moe_inter > 262144)
		return moem_errf(EINVAL, "config: expert intermediate size %u out of range",
				 c->moe_inter);
	if (c->n_shared && (!c->shared_inter || c->shared_inter > 262144))
		return moem_errf(EINVAL, "config: shared expert size %u out of range",
				 c->shared_inter);
	if (c->first_dense > c->n_layers)
		return moem_errf(EINVAL, "config: first_k_dense_replace %u > %u layers",
				 c->first_dense, c->n_layers);
	if (!moem_n_moe_layers(c))
		return moem_errf(EINVAL, "config: no MoE layer");
	if (moem_n_moe_layers(c) < c->n_layers && !c->dense_inter)
		return moem_errf(EINVAL, "config: dense layers need intermediate_size");
	if (!(c->rms_eps > 0 && c->rms_eps < 1))
		return moem_errf(EINVAL, "config: rms_norm_eps %g out of range",
				 (double)c->rms_eps);
	if (!(c->routed_scaling > 0 && c->routed_scaling < 1000))
		return moem_errf(EINVAL, "config: routed_scaling_factor %g out of range",
				 (double)c->routed_scaling);
	if ((c->n_group || c->topk_group) && c->arch != MOEM_ARCH_DEEPSEEK_V2)
		return moem_errf(EINVAL, "config: only deepseek_v2 routes within expert groups");
	{
		const struct moem_route_cfg rc = moem_route_cfg_of(c);

		if (moem_route_groups_check(&rc))
			return moem_err_prefix(EINVAL, "config");
	}
	return 0;
}
