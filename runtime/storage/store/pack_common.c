// SPDX-License-Identifier: GPL-2.0-only
/* Pieces of the pack format shared by writer and reader (pack_fmt.h). */
#include <errno.h>
#include <string.h>

#include <xxhash.h>

#include <moem/error.h>
#include <moem/model.h>

#include "pack_fmt.h"
#include "store_int.h"

void moem_pack_config_encode(const struct moem_model_config *c, struct pack_config *d)
{
	memset(d, 0, sizeof(*d));
	d->size = sizeof(*d);
	d->arch = c->arch;
	d->dtype = c->dtype;
	d->hidden = c->hidden;
	d->n_layers = c->n_layers;
	d->n_experts = c->n_experts;
	d->top_k = c->top_k;
	d->moe_inter = c->moe_inter;
	d->dense_inter = c->dense_inter;
	d->n_shared = c->n_shared;
	d->shared_inter = c->shared_inter;
	d->first_dense = c->first_dense;
	d->sparse_step = c->sparse_step;
	d->norm_topk_prob = c->norm_topk_prob;
	d->routed_scaling = c->routed_scaling;
	d->rms_eps = c->rms_eps;
	d->rope_theta = c->rope_theta;
	d->vocab = c->vocab;
	d->n_heads = c->n_heads;
	d->n_kv_heads = c->n_kv_heads;
	d->head_dim = c->head_dim;
	d->tie_embeddings = c->tie_embeddings;
	d->q_lora_rank = c->q_lora_rank;
	d->kv_lora_rank = c->kv_lora_rank;
	d->qk_nope_dim = c->qk_nope_dim;
	d->qk_rope_dim = c->qk_rope_dim;
	d->v_head_dim = c->v_head_dim;
	memcpy(d->dense_mask, c->dense_mask, sizeof(d->dense_mask));
	d->max_pos = c->max_pos;
	d->sliding_window = c->sliding_window;
	d->clip_qkv = c->clip_qkv;
	d->rope_kind = c->rope_kind;
	d->yarn_factor = c->yarn.factor;
	d->yarn_orig_max_pos = c->yarn.orig_max_pos;
	d->yarn_beta_fast = c->yarn.beta_fast;
	d->yarn_beta_slow = c->yarn.beta_slow;
	d->yarn_mscale = c->yarn.mscale;
	d->yarn_mscale_all_dim = c->yarn.mscale_all_dim;
	d->n_eos = c->n_eos;
	memcpy(d->eos, c->eos, sizeof(d->eos));
	d->n_group = c->n_group;
	d->topk_group = c->topk_group;
}

int moem_pack_config_decode(const struct pack_config *d, struct moem_model_config *c)
{
	int ret;

	memset(c, 0, sizeof(*c));
	if (d->size != sizeof(*d))
		return moem_errf(EINVAL, "pack config: %u bytes, expected %zu", d->size,
				 sizeof(*d));
	if (d->arch >= MOEM_ARCH_NR || d->dtype >= MOEM_DTYPE_NR)
		return moem_errf(EINVAL, "pack config: unknown architecture %u or dtype %u",
				 d->arch, d->dtype);
	if (d->norm_topk_prob > 1 || d->tie_embeddings > 1)
		return moem_errf(EINVAL, "pack config: boolean field not 0 or 1");
	c->arch = (enum moem_arch)d->arch;
	c->dtype = (enum moem_dtype)d->dtype;
	c->hidden = d->hidden;
	c->n_layers = d->n_layers;
	c->n_experts = d->n_experts;
	c->top_k = d->top_k;
	c->moe_inter = d->moe_inter;
	c->dense_inter = d->dense_inter;
	c->n_shared = d->n_shared;
	c->shared_inter = d->shared_inter;
	c->first_dense = d->first_dense;
	c->sparse_step = d->sparse_step;
	c->norm_topk_prob = d->norm_topk_prob;
	c->routed_scaling = d->routed_scaling;
	c->rms_eps = d->rms_eps;
	c->rope_theta = d->rope_theta;
	c->vocab = d->vocab;
	c->n_heads = d->n_heads;
	c->n_kv_heads = d->n_kv_heads;
	c->head_dim = d->head_dim;
	c->tie_embeddings = d->tie_embeddings;
	c->q_lora_rank = d->q_lora_rank;
	c->kv_lora_rank = d->kv_lora_rank;
	c->qk_nope_dim = d->qk_nope_dim;
	c->qk_rope_dim = d->qk_rope_dim;
	c->v_head_dim = d->v_head_dim;
	memcpy(c->dense_mask, d->dense_mask, sizeof(c->dense_mask));
	if (d->rope_kind > MOEM_ROPE_YARN || d->n_eos > MOEM_MAX_EOS)
		return moem_errf(EINVAL, "pack config: unknown rope kind %u or %u eos ids",
				 d->rope_kind, d->n_eos);
	c->max_pos = d->max_pos;
	c->sliding_window = d->sliding_window;
	c->clip_qkv = d->clip_qkv;
	c->rope_kind = (enum moem_rope_kind)d->rope_kind;
	c->yarn.factor = d->yarn_factor;
	c->yarn.orig_max_pos = d->yarn_orig_max_pos;
	c->yarn.beta_fast = d->yarn_beta_fast;
	c->yarn.beta_slow = d->yarn_beta_slow;
	c->yarn.mscale = d->yarn_mscale;
	c->yarn.mscale_all_dim = d->yarn_mscale_all_dim;
	c->n_eos = d->n_eos;
	memcpy(c->eos, d->eos, sizeof(c->eos));
	c->n_group = d->n_group;
	c->topk_group = d->topk_group;
	ret = moem_store_config_check(c);
	if (ret)
		return moem_err_prefix(-ret, "pack");
	return 0;
}

int moem_pack_compute_id(const struct pack_header *h, const void *meta, uint64_t meta_len,
			 uint8_t id[16])
{
	struct pack_header z = *h;
	XXH3_state_t *st = XXH3_createState();
	XXH128_canonical_t canon;

	if (!st)
		return -ENOMEM;
	memset(z.id, 0, sizeof(z.id));
	z.header_xxh3 = 0;
	XXH3_128bits_reset(st);
	XXH3_128bits_update(st, &z, PACK_HDR_SUM_OFF);
	XXH3_128bits_update(st, meta, (size_t)meta_len);
	XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(st));
	XXH3_freeState(st);
	memcpy(id, canon.digest, 16);
	return 0;
}
