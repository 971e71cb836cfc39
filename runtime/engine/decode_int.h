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
	/* The prefix cache (kv_prefix.c): its first n_reg blocks are cached,
	 * the last of them reg_parent (generation reg_gen), chain hash reg_hash. */
	uint32_t n_reg, n_prefix; /* n_prefix: prompt tokens the cache gave at add */
	int32_t reg_parent;
	uint64_t reg_gen, reg_hash;
};

/* One KV block's state (kv_prefix.c). */
struct kv_block {
	uint64_t hash;		    /* chain hash of every token up to its end (cached) */
	uint64_t gen;		    /* bumped each time it caches new tokens */
	uint64_t parent_gen;	    /* parent's gen when this was cached */
	int32_t parent;		    /* the cached block before it (-1: the first) */
	int32_t next;		    /* the hash table's chain */
	int32_t lru_prev, lru_next; /* cached and held by none: the eviction list */
	uint16_t refs;		    /* sequences holding it (max_seqs <= 1024) */
	bool cached;
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
	uint32_t pool_blocks, limit_blocks;
	uint32_t reserved;    /* blocks held (refs > 0) */
	uint32_t shared_refs; /* refs beyond the first, over all blocks */
	uint32_t entry;	      /* floats per token per layer */
	uint64_t block_bytes;
	struct kv_block *kvb; /* [pool_blocks] */
	int32_t *kv_toks;     /* [pool_blocks][block_tokens]: a cached block's tokens */
	int32_t *kv_bucket;   /* [kv_mask + 1] the cached blocks by hash */
	uint32_t kv_mask;
	int32_t lru_head, lru_tail;
	uint32_t n_cached_free; /* cached blocks held by none (on the list) */
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
	uint64_t kv_seen;    /* the kv_bytes knob the pool follows (0: default) */
	uint64_t kv_default; /* the pool's bytes when kv_bytes is 0 */
	struct moem_decode_stats total;
};

/*
 * kv_prefix.c: KV blocks and the prefix cache. Engine thread; the
 * counters (reserved, shared_refs, n_cached_free) change under d->lock.
 */
/* Size the block state for a pool of n blocks; those from n up hold nothing. */
int moem_kv_blocks_resize(struct moem_decoder *d, uint32_t n);
void moem_kv_blocks_free(struct moem_decoder *d);
/* Forget the cached blocks from n up that no sequence holds (a cut). */
void moem_kv_drop_above(struct moem_decoder *d, uint32_t n);
/* 1 + the highest block held or cached (0: none). */
uint32_t moem_kv_top(const struct moem_decoder *d);
/*
 * How many of the n_blocks whole blocks at the start of toks are cached
 * in a row, their blocks in out[]; no change (0 with the cache off).
 */
uint32_t moem_kv_match(const struct moem_decoder *d, const int32_t *toks, uint32_t n_blocks,
		       int32_t *out);
/* Of blocks[0..n), those no sequence holds (taking them reserves them). */
uint32_t moem_kv_fresh(const struct moem_decoder *d, const int32_t *blocks, uint32_t n);
/*
 * tab[0..n): the n_shared matched blocks, then blocks holding nothing
 * below the limit (lowest first), then cached ones least recently
 * released first; the caller checked that n - n_shared +
 * moem_kv_fresh() blocks are free below the limit.
 */
void moem_kv_take(struct moem_decoder *d, const int32_t *shared, uint32_t n_shared, uint32_t n,
		  int32_t *tab);
void moem_kv_release(struct moem_decoder *d, const int32_t *tab, uint32_t n);
/* Cache the whole blocks of s's tokens that its KV now holds (after a step). */
void moem_kv_publish(struct moem_decoder *d, struct dec_seq *s);

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
