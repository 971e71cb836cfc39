/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Hugging Face tokenizers in C: tokenizer.json (+ tokenizer_config.json,
 * generation_config.json) loaded into the pipeline huggingface/tokenizers
 * runs (added tokens, normalizer, pre-tokenizer, BPE model,
 * post-processor; decoder for the way back). Two kinds are read: byte-level
 * BPE with a regex pre-tokenizer (Qwen3, OLMoE, DeepSeek-V2/V3) and
 * SentencePiece-style BPE with "▁" and byte fallback (Mixtral, Llama-2,
 * Mistral). Anything else (WordPiece, Unigram, unknown stage types) is
 * refused with a message naming it (Documentation/tokenizers.md).
 *
 * A loaded tokenizer is read-only: threads may encode and decode with it
 * at the same time. Input text must be valid UTF-8 (-EILSEQ otherwise,
 * with the offset in the message); decoded text is always valid UTF-8.
 */
#ifndef MOEM_TOKENIZER_H
#define MOEM_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct moem_tokenizer;
struct moem_pack;

enum moem_tok_kind {
	MOEM_TOK_BYTE_BPE, /* byte-level BPE (GPT-2 byte map, regex pre-tokenizer) */
	MOEM_TOK_SP_BPE,   /* SentencePiece-style BPE ("▁", byte fallback) */
	MOEM_TOK_BPE,	   /* BPE without either (whitespace-split word pieces) */
};

const char *moem_tok_kind_name(enum moem_tok_kind k);

/* The files of a Hugging Face tokenizer, as bytes; only tokenizer_json is required. */
struct moem_tok_files {
	const char *tokenizer_json;
	size_t tokenizer_json_len;
	const char *config_json; /* tokenizer_config.json */
	size_t config_json_len;
	const char *generation_json; /* generation_config.json */
	size_t generation_json_len;
};

int moem_tok_load(struct moem_tokenizer **out, const struct moem_tok_files *f);
/*
 * Load path (a tokenizer.json, or a directory holding one) with the
 * tokenizer_config.json and generation_config.json beside it.
 */
int moem_tok_load_path(struct moem_tokenizer **out, const char *path);
/* The tokenizer a pack carries; -ENOENT (with a message) if it has none. */
int moem_tok_load_pack(struct moem_tokenizer **out, const struct moem_pack *p);
void moem_tok_free(struct moem_tokenizer *t);

/* A growable id array; zero-initialise, free with moem_tok_ids_free(). */
struct moem_tok_ids {
	uint32_t *ids;
	size_t n, cap;
};

void moem_tok_ids_free(struct moem_tok_ids *ids);

/* Encode flags. */
#define MOEM_TOK_ADD_SPECIAL   (1u << 0) /* the post-processor's BOS/EOS (as HF add_special_tokens) */
#define MOEM_TOK_SPLIT_SPECIAL (1u << 1) /* added tokens in the text are plain text */

/*
 * Append the ids of text[0, len) to ids. -EILSEQ for invalid UTF-8; on
 * any error ids keeps only what it held before.
 */
int moem_tok_encode(const struct moem_tokenizer *t, const char *text, size_t len, unsigned flags,
		    struct moem_tok_ids *ids);

/* Decode flags. */
#define MOEM_TOK_SKIP_SPECIAL (1u << 0) /* leave special tokens out */
/*
 * The bytes as the tokens hold them: a byte-level or <0xXX> byte that is
 * not UTF-8 on its own stays that byte instead of becoming U+FFFD (one
 * token's own bytes, as OpenAI's logprobs "bytes" give them). The result
 * may then not be UTF-8.
 */
#define MOEM_TOK_RAW_BYTES    (1u << 1)

/*
 * Decode ids into a malloc'ed NUL-terminated string (*len excludes the
 * NUL), as tokenizers' decode(ids, skip_special_tokens). -ERANGE for an id
 * the tokenizer does not have.
 */
int moem_tok_decode(const struct moem_tokenizer *t, const uint32_t *ids, size_t n, unsigned flags,
		    char **text, size_t *len);

/* Summary of a tokenizer (pointers stay valid while t lives). */
struct moem_tok_info {
	enum moem_tok_kind kind;
	uint32_t vocab_size; /* 1 + the largest id, model or added: the embedding rows needed */
	uint32_t n_model;    /* tokens of the BPE model */
	uint32_t n_merges;
	uint32_t n_added;			/* added tokens (special or not) */
	uint32_t n_special;			/* of which special */
	int64_t bos_id, eos_id, pad_id, unk_id; /* -1 where the files name none */
	bool post_bos; /* encode with ADD_SPECIAL puts a special token first (tokenizer.json) */
	/*
	 * tokenizer_config.json's add_bos_token (else post_bos): whether
	 * transformers starts a plain prompt with BOS. DeepSeek's
	 * tokenizer.json adds none, its config asks for one.
	 */
	bool add_bos;
	const char *chat_template; /* NULL if the files have none */
};

void moem_tok_info(const struct moem_tokenizer *t, struct moem_tok_info *info);

/* The token string of id (as stored: "Ġthe", "▁the", "<|im_end|>"), or NULL. */
const char *moem_tok_id_to_token(const struct moem_tokenizer *t, uint32_t id, size_t *len);
/* The id of a token string (model or added), or -ENOENT. */
int64_t moem_tok_token_to_id(const struct moem_tokenizer *t, const char *tok, size_t len);
/* Added token number i (0 <= i < n_added): content, id, special. */
const char *moem_tok_added(const struct moem_tokenizer *t, size_t i, uint32_t *id, bool *special);
/* Is id the end of a turn: eos_id or one of generation_config.json's eos ids. */
bool moem_tok_is_eos(const struct moem_tokenizer *t, uint32_t id);
/* The string of a role token from tokenizer_config.json ("bos_token", "eos_token"), or NULL. */
const char *moem_tok_special_str(const struct moem_tokenizer *t, const char *which);

/*
 * Streaming decode: push ids one at a time as a model produces them; each
 * push gives the text that became final (possibly empty: a UTF-8
 * character split over byte tokens is held back until it is complete,
 * and a SentencePiece word's leading space is decided with its context).
 * The concatenated pushes and the final flush equal moem_tok_decode() of
 * all ids. This is huggingface/tokenizers' DecodeStream.
 */
struct moem_tok_stream;

int moem_tok_stream_new(const struct moem_tokenizer *t, unsigned flags,
			struct moem_tok_stream **out);
/* *text (NUL-terminated, *len bytes) stays valid until the next call. */
int moem_tok_stream_push(struct moem_tok_stream *s, uint32_t id, const char **text, size_t *len);
/* What is held back (an incomplete character ends as U+FFFD), then reset. */
int moem_tok_stream_flush(struct moem_tok_stream *s, const char **text, size_t *len);
void moem_tok_stream_free(struct moem_tok_stream *s);

#endif /* MOEM_TOKENIZER_H */
