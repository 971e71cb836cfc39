/* SPDX-License-Identifier: GPL-2.0-only */
/* Inside the decoder (decode.h): shared by decode.c and decode_fwd.c only. */
#ifndef MOEM_DECODE_INT_H
#define MOEM_DECODE_INT_H

#include <pthread.h>

#include <moem/decode.h>
#include <moem/rope.h>

#include "engine_int.h"

/* Tokens of one forward pass: the engine's MoE path takes ENG_MAX_B. */
#define DEC_PIECE ENG_MAX_B

struct dec_seq {
	uint64_t id;
	bool live;
	struct moem_seq_params p; /* prompt points at toks */
	int32_t *toks;		  /* prompt, then generated tokens */
	uint32_t n_prompt, n_tok, cap;
	uint32_t n_cached; /* positions whose KV is in the cache */
	uint32_t n_gen;
	struct moem_rng rng;
	uint8_t *seen;	     /* [V] repetition penalty, or NULL */
	uint32_t *gen_count; /* [V] frequency/presence penalties, or NULL */
	uint32_t n_blocks;   /* reserved (and allocated) at add */
	uint32_t tab_off;    /* its row of the block tables */
};

/* Device weights of one layer's attention (bf16). */
struct dec_layer {
	moem_dptr in_norm;
	moem_dptr wq, wkv, wo, q_norm, k_norm;			 /* GQA: k and v rows stacked */
	moem_dptr wq_a, q_a_norm, wq_b, wkv_a, kv_a_norm, wkv_b; /* MLA */
};

struct moem_decoder {
	struct moem_engine *e;
	struct moem_backend *be;
	const struct moem_model_config *cfg;
	struct moem_decoder_opts o;
	bool mla;

	/* KV pool: block b at pool + b * block_bytes. */
	moem_dptr pool;
	uint32_t pool_blocks, limit_blocks, reserved;
	uint32_t entry; /* floats per token per layer */
	uint64_t block_bytes;
	uint8_t *used; /* [pool_blocks] */
	moem_dptr tables;
	int32_t *tables_host; /* [max_seqs][max_blocks] */
	uint32_t max_blocks;

	struct dec_seq *seqs; /* [max_seqs] */
	uint32_t n_seqs;
	uint64_t next_id;

	/* Weights. */
	struct dec_layer *L;
	moem_dptr embed, final_norm, lm_head;
	uint64_t weight_bytes;
	struct moem_rope_info rope;
	moem_dptr cos, sin;

	/* Activations for DEC_PIECE tokens. */
	moem_dptr xb, q, kv, att, att_b, oproj, qa, qa_b, qattn, olat, hb, logits;
	moem_dptr ids_d, pos_d, tab_d;
	int32_t ids[DEC_PIECE], pos[DEC_PIECE];
	uint32_t tab[DEC_PIECE];
	/* Pinned (registered with the backend): the step's logits and, after
	 * them, its upload of ids, pos, tab, so no per-step copy is pageable. */
	float *logits_host; /* [DEC_PIECE][V] */
	int32_t *io_host;   /* [3][DEC_PIECE] */
	bool host_reg;
	uint32_t *scratch; /* sampler, [2 * V] */

	/* Any-thread state. */
	pthread_mutex_t lock;
	uint64_t kv_pending; /* 0: none */
	struct moem_decode_stats total;
};

/* decode_fwd.c */
int moem_dec_load(struct moem_decoder *d);
void moem_dec_unload(struct moem_decoder *d);
/*
 * One forward pass over T <= DEC_PIECE tokens (d->ids/pos/tab filled):
 * every layer, then the final norm and lm_head for the n_out rows in
 * rows[] into d->logits_host. prefill: route the MoE half with plain
 * top-k (batch-aware routing acts on decode batches only).
 */
int moem_dec_forward(struct moem_decoder *d, uint32_t T, bool prefill, const uint32_t *rows,
		     uint32_t n_out, struct moem_decode_stats *st);

#endif /* MOEM_DECODE_INT_H */
