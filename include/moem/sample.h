/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Next-token sampling on the host from one row of logits: penalties,
 * temperature, top-k, top-p, min-p and a seeded draw; log-probabilities
 * of the chosen token and the strongest alternatives. Pure functions of
 * their inputs: the same logits, history and generator state give the
 * same token.
 */
#ifndef MOEM_SAMPLE_H
#define MOEM_SAMPLE_H

#include <stdint.h>

#include "rng.h"

/*
 * Sampling, applied in this order to the next-token logits (HF generate's
 * order): repetition penalty (logit / p if > 0, else * p, for every token
 * already in the prompt or output), frequency and presence penalties
 * (OpenAI's: logit -= count * frequency + (count > 0) * presence, over
 * generated tokens), temperature, top-k, top-p, min-p, then a draw from
 * the remaining distribution with the sequence's own generator (seed).
 * temperature 0 is greedy (argmax, lowest id on ties) whatever the rest
 * says. Log-probabilities are those of the distribution after the
 * penalties and temperature, before top-k/p/min-p truncation (log-softmax
 * of the processed logits), as OpenAI's API reports them.
 */
struct moem_sampling {
	float temperature;	  /* 0 (greedy) .. 100 */
	uint32_t top_k;		  /* 0: off */
	float top_p;		  /* (0, 1]; 1: off */
	float min_p;		  /* [0, 1]; 0: off */
	float repetition_penalty; /* (0, 100]; 1: off */
	float presence_penalty;	  /* [-2, 2]; 0: off */
	float frequency_penalty;  /* [-2, 2]; 0: off */
	uint64_t seed;		  /* the same seed gives the same tokens */
};

/* Greedy: temperature 0, top_p 1, repetition_penalty 1, the rest 0. */
void moem_sampling_defaults(struct moem_sampling *s);
/* -EINVAL with a message naming the first value out of range. */
int moem_sampling_check(const struct moem_sampling *s);

/*
 * Sample from logits[V] (modified: penalties and temperature are applied
 * in place). seen[V] (may be NULL) marks tokens of the prompt or output
 * (repetition penalty), gen_count[V] (may be NULL) counts output tokens
 * (frequency/presence). scratch holds 2 * V uint32. Writes the token,
 * its log-probability and the n_top strongest alternatives (ids
 * strongest first, lowest id first on ties). s must pass
 * moem_sampling_check().
 */
void moem_sample(const struct moem_sampling *s, float *logits, uint32_t V, const uint8_t *seen,
		 const uint32_t *gen_count, struct moem_rng *rng, uint32_t n_top, uint32_t *scratch,
		 int32_t *token, float *logprob, int32_t *top_ids, float *top_lp);

#endif /* MOEM_SAMPLE_H */
