/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Full transformer decode on an opened engine: token ids in, token ids
 * (with log-probabilities) out, for qwen3_moe, mixtral, olmoe and
 * deepseek_v2 packs. The MoE half of every layer is the engine's own
 * (residency, policies, budgets: engine.h); the decoder adds the token
 * embedding, attention with a paged KV cache, the final norm, lm_head and
 * sampling (Documentation/engine.md, "Full decode").
 *
 * The decoder is built for a scheduler (moemd's continuous batching): it
 * holds sequences, and the caller chooses, at every step boundary, which
 * of them take part in the next step and how many prompt tokens each
 * prefills. One step is one forward pass over all the work items
 * together: prefill chunks and single decode tokens may be mixed.
 *
 * KV cache: fixed-size token blocks from one pool whose size is the KV
 * budget (kv_bytes); a block table per sequence. Adding a sequence
 * reserves the blocks its prompt and max_new_tokens can need, so a
 * running sequence never runs out of cache and is never preempted; a
 * sequence that finishes (or is cancelled) returns its blocks at once.
 * Whole blocks stay cached for later prompts with the same beginning
 * (prefix caching, moem_decoder_opts.prefix_cache_off): a cached block
 * nobody holds counts as free and is reused, least recently released
 * first, when no empty block is left.
 *
 * Threads: every call is made from one thread (the engine thread), except
 * moem_decoder_set_kv_bytes(), moem_decoder_kv_usage() and
 * moem_decoder_stats(), which are safe from any thread at any time. A step
 * holds the engine as moem_engine_run() does (engine knobs set meanwhile
 * apply at its layer boundaries; a moem_engine_run() or warm-up during a
 * step gets -EBUSY), and the engine's status counts its residency.
 */
#ifndef MOEM_DECODE_H
#define MOEM_DECODE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "sample.h"

#define MOEM_DECODE_MAX_TOP_LOGPROBS 20
#define MOEM_DECODE_MAX_STOP	     16 /* stop sequences per sequence */
#define MOEM_DECODE_MAX_STOP_LEN     32 /* tokens per stop sequence */
#define MOEM_DECODE_MAX_EOS	     16
#define MOEM_DECODE_MAX_BIAS	     300 /* logit biases per sequence (OpenAI's bound) */

struct moem_decoder_opts {
	/* Bytes of KV cache (0: the engine's kv_bytes knob, and if that is 0
	 * enough for max_seqs sequences of the model's whole context, at most
	 * 1 GiB, and in HBM at most half of what hbm_bytes holds above one
	 * expert). Non-zero sets the knob. Live: moem_decoder_set_kv_bytes(). */
	uint64_t kv_bytes;
	uint32_t block_tokens;	  /* tokens per KV block (0: 16; 1..1024) */
	uint32_t max_seqs;	  /* sequences held at once (0: 64; at most 1024) */
	uint32_t max_step_tokens; /* tokens of one step, all items (0: 512; at most 4096) */
	uint32_t max_context;	  /* prompt + generated tokens (0: max_position_embeddings) */
	/*
	 * The attention projections and an untied lm_head: bf16 as packed
	 * (MOEM_PREC_BF16, 0), or quantized to q8/q4/q2 when loaded, as
	 * llama.cpp's quantized types do every matrix (embeddings, norms and
	 * MLA's absorbed kv_b stay bf16). Both backends; every such matrix's
	 * input width must be a whole number of groups.
	 */
	enum moem_prec dense_prec;
	/*
	 * Every prompt prefilled whole. Otherwise (the default) the KV blocks
	 * of finished and running sequences stay cached while the pool has
	 * room, and a new prompt that begins with the same whole blocks of
	 * tokens takes them instead of computing them (at least its last
	 * prompt token is computed; not for a sequence with logits_fn).
	 */
	bool prefix_cache_off;
};

/* Called with the logits of every position a sequence computes (see want_logits). */
typedef void (*moem_logits_fn)(void *arg, uint64_t seq, uint32_t pos, const float *logits,
			       uint32_t vocab);

/*
 * Constrained decoding (moem_seq_params.constraint): before each token of
 * a sequence is sampled, mask() sets the logits of the ids that may not
 * come next to -INFINITY (after the logit bias; it must leave at least one
 * finite); after it is sampled, accept() takes the id. Both run on the
 * thread that steps the decoder.
 */
struct moem_constraint_ops {
	void (*mask)(void *arg, float *logits, uint32_t vocab);
	void (*accept)(void *arg, int32_t id);
};

struct moem_seq_params {
	const int32_t *prompt; /* token ids, 1..max_context - 1 of them, each < vocab */
	uint32_t n_prompt;
	struct moem_sampling sampling;
	uint32_t max_new_tokens; /* >= 1; prompt + this <= max_context */
	/*
	 * End-of-sequence ids: model_eos takes the checkpoint's
	 * (generation_config.json's eos_token_id, else config.json's);
	 * eos[] adds more. Neither: the sequence ends by length or stop.
	 */
	bool model_eos;
	uint32_t n_eos;
	int32_t eos[MOEM_DECODE_MAX_EOS];
	/* Before this many tokens no end-of-sequence id can be sampled (<= max_new_tokens). */
	uint32_t min_new_tokens;
	/* Stop sequences as token ids: generation ends when the output ends with one. */
	uint32_t n_stop;
	uint32_t stop_len[MOEM_DECODE_MAX_STOP];
	int32_t stop[MOEM_DECODE_MAX_STOP][MOEM_DECODE_MAX_STOP_LEN];
	uint32_t top_logprobs; /* 0..MOEM_DECODE_MAX_TOP_LOGPROBS alternatives per token */
	/*
	 * OpenAI's logit_bias: bias[i] (-100..100) is added to the logit of
	 * id bias_id[i] before the penalties and the temperature; -100 all
	 * but bans a token, 100 all but forces it. Logprobs include it.
	 */
	uint32_t n_bias;
	int32_t bias_id[MOEM_DECODE_MAX_BIAS];
	float bias[MOEM_DECODE_MAX_BIAS];
	/*
	 * Ids at and above n_vocab are never sampled (0: every id of the
	 * model's vocabulary): a checkpoint's vocab_size is often padded past
	 * its tokenizer's last id (Qwen3: 151936 rows, 151669 tokens), and a
	 * padding id has no text. <= the model's vocabulary.
	 */
	uint32_t n_vocab;
	const struct moem_constraint_ops *constraint; /* NULL: none */
	void *constraint_arg;
	/*
	 * Call logits_fn for every position of the prompt and every
	 * generated token (evaluation, reference tests): the prompt's
	 * lm_head then runs on all its positions, not only the last.
	 */
	moem_logits_fn logits_fn;
	void *logits_arg;
};

enum moem_finish {
	MOEM_FINISH_NONE = 0, /* still running */
	MOEM_FINISH_EOS,      /* sampled an end-of-sequence id (it is the token) */
	MOEM_FINISH_STOP,     /* the output ends with a stop sequence */
	MOEM_FINISH_LENGTH,   /* max_new_tokens or max_context reached */
	MOEM_FINISH_CANCELLED,
};

/* "none", "eos", "stop", "length", "cancelled". */
const char *moem_finish_name(enum moem_finish f);

enum moem_work_kind {
	MOEM_WORK_PREFILL = 0, /* the next n_tokens prompt tokens of the sequence */
	MOEM_WORK_DECODE = 1,  /* one token: the last sampled one */
};

struct moem_work {
	uint64_t seq;
	enum moem_work_kind kind;
	uint32_t n_tokens; /* prefill: 1..remaining prompt tokens (0: all); decode: ignored */
};

struct moem_token_out {
	uint64_t seq;
	/* The token sampled at this step, or -1: a prefill chunk that did
	 * not reach the end of the prompt samples nothing. */
	int32_t token;
	float logprob;
	uint32_t n_top;
	int32_t top_ids[MOEM_DECODE_MAX_TOP_LOGPROBS];
	float top_logprobs[MOEM_DECODE_MAX_TOP_LOGPROBS];
	uint32_t n_generated; /* tokens generated so far, this one included */
	enum moem_finish finish;
};

/* One step, or the decoder's totals (moem_decoder_stats()). */
struct moem_decode_stats {
	uint64_t steps;
	uint64_t prefill_tokens, decode_tokens, sampled;
	uint64_t step_ns;
	uint64_t attn_ns; /* embedding, norms, projections, RoPE, attention */
	uint64_t moe_ns;  /* the engine's MoE / dense MLP half, waiting included */
	uint64_t wait_ns; /* of moe_ns: waiting for experts to arrive */
	uint64_t head_ns; /* final norm, lm_head, sampling */
	/* steps planned on the device: their kernels are queued whole and
	 * waited for once, so the host sees launches in the split above and
	 * the rest as this wait, which no phase can claim */
	uint64_t device_ns;
	uint64_t hits, misses, fallbacks; /* expert residency, as moem run counts it */
	uint64_t bytes_nvme, bytes_h2d;
	/* forward passes whose MoE layers were planned on the device: one
	 * host synchronisation each (Documentation/backends.md) */
	uint64_t device_steps;
	/* of those, run as a CUDA graph (replayed or just captured), and
	 * captured (Documentation/engine.md, "CUDA graphs") */
	uint64_t graph_steps, graph_captures;
	/* hybrid execution: (layer, expert) pairs computed on the CPU, its time */
	uint64_t cpu_experts, cpu_ns;
	/* prompt tokens of the sequences added, and of those, taken from the
	 * prefix cache (not computed); counted at moem_decoder_add(), so in
	 * the totals only */
	uint64_t prompt_tokens, prefix_tokens;
	/* of moe_ns: the engine thread's phases of the MoE layers (engine.h
	 * moem_phase); a step planned on the device has none */
	uint64_t phase_ns[MOEM_PHASE_NR];
};

/* a += b, every counter (steps, tokens, times, phases). */
void moem_decode_stats_add(struct moem_decode_stats *a, const struct moem_decode_stats *b);

struct moem_kv_usage {
	uint32_t block_tokens;
	uint64_t block_bytes;	  /* one block, all layers */
	uint64_t blocks_total;	  /* what the budget holds */
	uint64_t blocks_used;	  /* holding tokens */
	uint64_t blocks_reserved; /* promised to running sequences, used included */
	uint64_t blocks_free;	  /* total - reserved */
	uint64_t blocks_cached;	  /* of free: keep a prefix for later prompts */
	uint64_t budget_bytes;	  /* kv_bytes in force (a pending change shows next step) */
	uint64_t used_bytes;	  /* blocks_used * block_bytes */
	uint64_t pool_bytes;	  /* allocated: above budget_bytes until a cut's blocks are free */
	uint32_t seqs, max_seqs;
	uint32_t max_context;
};

struct moem_decoder;

/*
 * Open a decoder on an engine whose pack carries what full decode needs
 * (format 1.1 or later, with the attention config; an older pack is
 * refused with a message saying to re-pack it). Allocates the KV pool
 * and the activations on the engine's backend. The engine must outlive
 * the decoder. -errno with a message.
 */
int moem_decoder_open(struct moem_engine *e, const struct moem_decoder_opts *o,
		      struct moem_decoder **out);
void moem_decoder_close(struct moem_decoder *d);

/*
 * Add a sequence; *id identifies it until it finishes or is cancelled
 * (ids are never reused). -EINVAL (bad prompt: empty, an id >= vocab,
 * longer than the context; bad sampling values), -ENOSPC (the KV cache
 * cannot reserve its blocks now: wait for running sequences to finish and
 * retry; nothing else changes), -EFBIG (it would not fit even in an empty
 * cache), -EMFILE (max_seqs sequences held), all with a message.
 */
int moem_decoder_add(struct moem_decoder *d, const struct moem_seq_params *p, uint64_t *id);

/*
 * Run one step over items[0..n) (at most one item per sequence; the sum
 * of their tokens <= max_step_tokens) and write one moem_token_out per
 * item to out[0..n), in the items' order. A sequence that finishes here
 * (finish != NONE) is gone after the call: its blocks are free for the
 * next add. stats (may be NULL) receives this step's figures. A bad item
 * (-EINVAL/-ENOENT: unknown sequence, decode before the prompt is done,
 * prefill after it) fails the call before any work, changing nothing; a
 * backend or I/O error (-EIO ...) mid-step leaves the sequences of that
 * step unusable: they are finished as cancelled.
 */
int moem_decoder_step(struct moem_decoder *d, const struct moem_work *items, uint32_t n,
		      struct moem_token_out *out, struct moem_decode_stats *stats);

/* End a sequence now and return its blocks. -ENOENT if it is not held. */
int moem_decoder_cancel(struct moem_decoder *d, uint64_t id);

/* Prompt tokens of a sequence still to prefill (0: decoding). -ENOENT if not held. */
int moem_decoder_pending_prompt(const struct moem_decoder *d, uint64_t id, uint32_t *n);
/*
 * Prompt tokens of a sequence whose keys and values came from the prefix
 * cache when it was added (0..n_prompt - 1). -ENOENT if not held.
 */
int moem_decoder_cached_prompt(const struct moem_decoder *d, uint64_t id, uint32_t *n);

/*
 * Any thread: set the KV budget, the engine's kv_bytes knob
 * (moem_engine_set_knob(); 0: the default size). Applied before the next
 * step: the pool grows at once; a cut applies to new sequences at once
 * and frees memory once the running sequences holding blocks above it
 * end, never moving or dropping their cache. -ERANGE with a message if
 * bytes cannot hold one block, or (on CUDA, where the pool lives in HBM)
 * leaves the experts less than the smallest HBM share that runs.
 */
int moem_decoder_set_kv_bytes(struct moem_decoder *d, uint64_t bytes);
/* Any thread. */
void moem_decoder_kv_usage(struct moem_decoder *d, struct moem_kv_usage *u);
/* Any thread: totals since open. */
void moem_decoder_stats(struct moem_decoder *d, struct moem_decode_stats *s);

#endif /* MOEM_DECODE_H */
