/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Rotary position embedding of each architecture, as tables the RoPE op
 * (backend.h moem_op_rope) reads, and the attention softmax scale that
 * goes with it. deepseek_v2 follows DeepSeek's own modeling code (and
 * vLLM, SGLang): YaRN frequencies, cos/sin times
 * mscale(factor, mscale) / mscale(factor, mscale_all_dim), and a softmax
 * scale of (qk_nope + qk_rope)^-0.5 * mscale(factor, mscale_all_dim)^2,
 * a factor transformers' DeepseekV2Attention leaves out.
 */
#ifndef MOEM_ROPE_H
#define MOEM_ROPE_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

struct moem_rope_info {
	uint32_t dim;	       /* rotated values per head (head_dim, or qk_rope_head_dim) */
	bool pairs;	       /* adjacent pairs (deepseek_v2) rather than halves */
	double attn_scale;     /* softmax scale of the attention scores */
	double inv_freq[2048]; /* [dim / 2] */
	double cos_mul;	       /* YaRN's mscale ratio applied to cos and sin (1 otherwise) */
};

/* -EINVAL with a message if c cannot be decoded (rotated width odd or > 4096). */
int moem_rope_info(const struct moem_model_config *c, struct moem_rope_info *r);

/* cos[p][i], sin[p][i] for p < n_pos, i < dim / 2 (float, from double). */
void moem_rope_tables(const struct moem_rope_info *r, uint32_t n_pos, float *cos, float *sin);

/* DeepSeek's yarn_get_mscale(): 1 for scale <= 1, else 0.1 * m * ln(scale) + 1. */
double moem_yarn_mscale(double scale, double m);

#endif /* MOEM_ROPE_H */
