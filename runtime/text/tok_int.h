/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Internals of the tokenizer (include/moem/tokenizer.h). The pipeline is
 * Hugging Face tokenizers' five stages, one file per stage kind:
 *
 *   added tokens (added_vocab.c) -> normalizer (normalizer.c)
 *   -> pre-tokenizer (pre_tokenizer.c) -> model (bpe.c)
 *   -> post-processor (post_processor.c)
 *   decode: ids -> tokens -> decoder (decoder.c) -> text
 *
 * loader.c maps tokenizer.json's "type" fields onto these units;
 * tokenizer.c runs them. Text between stages is UTF-8 that has been
 * validated once at the entry (moem_tok_encode refuses invalid UTF-8).
 */
#ifndef MOEM_TEXT_TOK_INT_H
#define MOEM_TEXT_TOK_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <moem/tokenizer.h>

struct json_object;

/* ---- growable buffers ---- */

struct tok_buf {
	char *p;
	size_t n, cap;
};

int moem_tok_buf_put(struct tok_buf *b, const void *s, size_t n);
int moem_tok_buf_putc(struct tok_buf *b, char c);
/* NUL-terminate without counting the NUL (p is then a C string). */
int moem_tok_buf_cstr(struct tok_buf *b);
void moem_tok_buf_free(struct tok_buf *b);

/* A list of text pieces, each [off, off + len) of one arena. */
struct tok_piece {
	size_t off, len;
};

struct tok_pieces {
	struct tok_buf text;
	struct tok_piece *v;
	size_t n, cap;
};

/* Append a copy of s as a new piece. */
int moem_tok_pieces_add(struct tok_pieces *p, const char *s, size_t n);
void moem_tok_pieces_reset(struct tok_pieces *p);
void moem_tok_pieces_free(struct tok_pieces *p);

int moem_tok_ids_push(struct moem_tok_ids *ids, uint32_t id);

/* ---- hash maps ---- */

/* String -> u32, open addressing; keys point into memory the owner keeps. */
struct tok_strmap {
	struct tok_strmap_slot {
		const char *key;
		uint32_t len, val;
	} * slot;
	size_t cap, n;
};

int moem_tok_strmap_init(struct tok_strmap *m, size_t expect);
/* -EEXIST if the key is present (the old value stays). */
int moem_tok_strmap_put(struct tok_strmap *m, const char *key, size_t len, uint32_t val);
bool moem_tok_strmap_get(const struct tok_strmap *m, const char *key, size_t len, uint32_t *val);
void moem_tok_strmap_free(struct tok_strmap *m);

/* (id, id) -> (rank, merged id): the BPE merge table. */
struct tok_pairmap {
	struct tok_pair_slot {
		uint64_t key; /* (a << 32 | b) + 1; 0 is empty */
		uint32_t rank, id;
	} * slot;
	size_t cap, n;
};

int moem_tok_pairmap_init(struct tok_pairmap *m, size_t expect);
/* A pair already present takes the new rank and id (the last merge wins, as in tokenizers). */
int moem_tok_pairmap_put(struct tok_pairmap *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t id);
bool moem_tok_pairmap_get(const struct tok_pairmap *m, uint32_t a, uint32_t b, uint32_t *rank,
			  uint32_t *id);
void moem_tok_pairmap_free(struct tok_pairmap *m);

/* ---- UTF-8 ---- */

/* Offset of the first invalid byte, or len if s is valid UTF-8. */
size_t moem_tok_utf8_invalid_at(const char *s, size_t len);
/* Length of the valid UTF-8 character at s (1..4; s is valid). */
static inline size_t tok_utf8_len(unsigned char c)
{
	return c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
}
/* Decode the valid character at s; *n gets its length. */
uint32_t moem_tok_utf8_get(const char *s, size_t *n);
/* Encode cp (<= 0x10ffff) into out; returns the length. */
size_t moem_tok_utf8_put(uint32_t cp, char out[4]);
/*
 * Append bytes to out as UTF-8, replacing each maximal invalid subpart with
 * U+FFFD (what Rust's String::from_utf8_lossy and WHATWG's decoder do).
 */
int moem_tok_utf8_lossy(struct tok_buf *out, const unsigned char *s, size_t len);
/* Unicode White_Space (what Rust's char::is_whitespace tests). */
bool moem_tok_is_space(uint32_t cp);

/*
 * GPT-2's byte <-> printable character map (the ByteLevel stages): bytes
 * that print stay themselves, the other 68 go to U+0100.. in byte order.
 */
static inline uint32_t tok_byte_to_cp(unsigned char b)
{
	if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
		return b;
	if (b <= 32)
		return 256 + b;
	if (b <= 160)
		return 256 + 33 + (b - 127);
	return 256 + 33 + 34; /* 173, soft hyphen */
}

/* -1 if cp is not one of the 256 characters. */
static inline int tok_cp_to_byte(uint32_t cp)
{
	if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
		return (int)cp;
	if (cp >= 256 && cp < 256 + 33)
		return (int)(cp - 256);
	if (cp >= 256 + 33 && cp < 256 + 67)
		return (int)(cp - 256 - 33 + 127);
	if (cp == 256 + 67)
		return 173;
	return -1;
}

/* ---- regex (pcre2, UTF + UCP) ---- */

struct tok_regex {
	pcre2_code *code;
	char *src;
};

int moem_tok_regex_compile(struct tok_regex *re, const char *pattern, size_t len, const char *what);
void moem_tok_regex_free(struct tok_regex *re);
/*
 * Find the next match in [start, len) of s: 1 with [*ms, *me), 0 if none.
 * Empty matches are skipped, as Hugging Face's splitting ignores them.
 */
int moem_tok_regex_next(const struct tok_regex *re, pcre2_match_data *md, const char *s, size_t len,
			size_t start, size_t *ms, size_t *me);

/* A pattern in tokenizer.json: {"String": s} or {"Regex": r}. */
struct tok_pattern {
	bool is_regex;
	char *str; /* the literal for String */
	size_t len;
	struct tok_regex re;
};

int moem_tok_pattern_load(struct tok_pattern *p, struct json_object *o, const char *what);
void moem_tok_pattern_free(struct tok_pattern *p);
/* Next occurrence as moem_tok_regex_next (a String pattern is a literal search). */
int moem_tok_pattern_next(const struct tok_pattern *p, pcre2_match_data *md, const char *s,
			  size_t len, size_t start, size_t *ms, size_t *me);

/* ---- per-call scratch (a tokenizer is shared by threads, a ctx is not) ---- */

struct tok_ctx {
	pcre2_match_data *md;
	struct tok_pieces a, b;
	struct tok_buf norm, tmp, pre;
	struct tok_seg {
		size_t s, e;
		bool m;
	} * seg;
	size_t seg_n, seg_cap;
	/* BPE work area: the word's symbols and the merge queue */
	struct tok_sym {
		uint32_t id;
		int32_t prev, next;
		bool gone;
	} * sym;
	size_t sym_cap;
	struct tok_merge {
		uint32_t rank, pos, id;
	} * heap;
	size_t heap_n, heap_cap;
	bool raw; /* decode: bytes as the tokens hold them (MOEM_TOK_RAW_BYTES) */
};

int moem_tok_ctx_init(struct tok_ctx *c);
void moem_tok_ctx_free(struct tok_ctx *c);

/* ---- normalizers (normalizer.c) ---- */

enum tok_norm_kind {
	TOK_NORM_SEQUENCE,
	TOK_NORM_NFC,
	TOK_NORM_NFD,
	TOK_NORM_NFKC,
	TOK_NORM_NFKD,
	TOK_NORM_LOWERCASE,
	TOK_NORM_PREPEND,
	TOK_NORM_REPLACE,
	TOK_NORM_STRIP,
	TOK_NORM_STRIP_ACCENTS,
};

struct tok_norm {
	enum tok_norm_kind kind;
	char *content; /* Prepend, Replace */
	size_t content_len;
	struct tok_pattern pat; /* Replace */
	bool left, right;	/* Strip */
	struct tok_norm **items;
	size_t n_items;
};

int moem_tok_norm_load(struct tok_norm **out, struct json_object *o);
void moem_tok_norm_free(struct tok_norm *n);
/* Normalize s into out (out is reset first). */
int moem_tok_norm_apply(const struct tok_norm *n, struct tok_ctx *c, const char *s, size_t len,
			struct tok_buf *out);

/* ---- pre-tokenizers (pre_tokenizer.c) ---- */

enum tok_pretok_kind {
	TOK_PRE_SEQUENCE,
	TOK_PRE_BYTELEVEL,
	TOK_PRE_SPLIT,
	TOK_PRE_METASPACE,
	TOK_PRE_DIGITS,
	TOK_PRE_WHITESPACE_SPLIT,
	TOK_PRE_PUNCTUATION,
};

enum tok_split_behavior {
	TOK_SPLIT_REMOVED,
	TOK_SPLIT_ISOLATED,
	TOK_SPLIT_MERGED_PREV,
	TOK_SPLIT_MERGED_NEXT,
	TOK_SPLIT_CONTIGUOUS,
};

enum tok_prepend_scheme { TOK_PREPEND_ALWAYS, TOK_PREPEND_NEVER, TOK_PREPEND_FIRST };

struct tok_pretok {
	enum tok_pretok_kind kind;
	struct tok_pattern pat;		  /* Split; ByteLevel with use_regex */
	enum tok_split_behavior behavior; /* Split, Punctuation */
	bool invert;			  /* Split */
	bool add_prefix_space, use_regex; /* ByteLevel */
	bool individual_digits;		  /* Digits */
	char replacement[8];		  /* Metaspace: the character, UTF-8 */
	size_t repl_len;
	enum tok_prepend_scheme prepend; /* Metaspace */
	bool split;			 /* Metaspace */
	struct tok_pretok **items;
	size_t n_items;
};

int moem_tok_pretok_load(struct tok_pretok **out, struct json_object *o);
void moem_tok_pretok_free(struct tok_pretok *p);
/*
 * Split and transform the pieces of in into out (out is reset first).
 * first: the pieces come from the start of the input (Metaspace "first").
 */
int moem_tok_pretok_apply(const struct tok_pretok *p, struct tok_ctx *c, bool first,
			  struct tok_pieces *in, struct tok_pieces *out);
/* The pieces of one piece of text, through every stage. */
int moem_tok_pretok_run(const struct tok_pretok *p, struct tok_ctx *c, bool first, const char *s,
			size_t len, struct tok_pieces **result);

/* ---- the BPE model (bpe.c) ---- */

struct tok_bpe {
	char *arena; /* every token string, NUL-terminated */
	/* token strings, by id (NULL for ids the model does not have) */
	char **tok;
	uint32_t *tok_len;
	uint32_t n_ids; /* 1 + the largest model id */
	uint32_t n_vocab;
	struct tok_strmap vocab;
	struct tok_pairmap merges;
	uint32_t n_merges;
	bool has_unk;
	uint32_t unk_id;
	bool fuse_unk, byte_fallback, ignore_merges;
	char *cont_prefix, *eow_suffix; /* NULL when absent or empty */
	size_t cont_prefix_len, eow_suffix_len;
	uint32_t byte_id[256]; /* <0xXX> tokens; UINT32_MAX where missing */
	bool all_bytes;	       /* every <0xXX> is present */
};

int moem_tok_bpe_load(struct tok_bpe *m, struct json_object *o);
void moem_tok_bpe_free(struct tok_bpe *m);
/* Append the ids of one pre-token. */
int moem_tok_bpe_encode(const struct tok_bpe *m, struct tok_ctx *c, const char *s, size_t len,
			struct moem_tok_ids *ids);

/* ---- added tokens (added_vocab.c) ---- */

struct tok_added {
	char *content;
	size_t len;
	uint32_t id;
	bool special, normalized, lstrip, rstrip, single_word;
	char *norm_content; /* content through the normalizer (normalized tokens) */
	size_t norm_len;
};

/* A byte trie for leftmost-longest matching of one set of added tokens. */
struct tok_trie {
	struct tok_trie_node {
		uint32_t child; /* index of the first child, 0 = none */
		uint32_t sibling;
		int32_t added; /* index in added[], -1 = no token ends here */
		unsigned char byte;
	} * node;
	uint32_t n, cap;
	uint8_t first[32]; /* bitmap of bytes a token can start with */
};

struct tok_added_vocab {
	struct tok_added *v;
	size_t n;
	struct tok_strmap by_content;
	struct tok_trie raw, norm; /* not normalized / normalized tokens */
};

int moem_tok_added_load(struct tok_added_vocab *a, struct json_object *arr);
/* After the normalizer is known: the normalized forms and the tries. */
int moem_tok_added_build(struct tok_added_vocab *a, const struct tok_norm *n, struct tok_ctx *c);
void moem_tok_added_free(struct tok_added_vocab *a);
const struct tok_added *moem_tok_added_by_id(const struct tok_added_vocab *a, uint32_t id);

/* One split of the input: an added token (id) or text to tokenize. */
struct tok_split {
	size_t off, len;
	int64_t id; /* -1: text */
};

struct tok_splits {
	struct tok_split *v;
	size_t n, cap;
};

/*
 * Split s around the added tokens of one trie (raw or normalized), with
 * the lstrip/rstrip/single_word rules of huggingface/tokenizers'
 * AddedVocabulary::find_matches. skip_special: special tokens found are
 * left in the text (tokenizers' encode_special_tokens).
 */
int moem_tok_added_split(const struct tok_added_vocab *a, const struct tok_trie *t, const char *s,
			 size_t len, bool skip_special, struct tok_splits *out);

/* ---- post-processors (post_processor.c) ---- */

enum tok_post_kind { TOK_POST_NONE, TOK_POST_TEMPLATE, TOK_POST_BYTELEVEL, TOK_POST_SEQUENCE };

struct tok_post_item {
	bool special; /* else the sequence itself */
	uint32_t *ids;
	size_t n_ids;
};

struct tok_post {
	enum tok_post_kind kind;
	struct tok_post_item *single;
	size_t n_single;
	struct tok_post **items;
	size_t n_items;
};

int moem_tok_post_load(struct tok_post **out, struct json_object *o);
void moem_tok_post_free(struct tok_post *p);
/* Wrap ids[start..] as the template says (only with MOEM_TOK_ADD_SPECIAL). */
int moem_tok_post_apply(const struct tok_post *p, struct moem_tok_ids *ids, size_t start);
/* Number of special ids the post-processor adds to one sequence. */
size_t moem_tok_post_added(const struct tok_post *p);

/* ---- decoders (decoder.c) ---- */

enum tok_dec_kind {
	TOK_DEC_SEQUENCE,
	TOK_DEC_BYTELEVEL,
	TOK_DEC_METASPACE,
	TOK_DEC_BYTEFALLBACK,
	TOK_DEC_FUSE,
	TOK_DEC_STRIP,
	TOK_DEC_REPLACE,
};

struct tok_dec {
	enum tok_dec_kind kind;
	char replacement[8]; /* Metaspace */
	size_t repl_len;
	bool prepend_first; /* Metaspace: the first token's leading space goes */
	char *content;	    /* Strip (one character), Replace */
	size_t content_len;
	uint32_t start, stop;	/* Strip */
	struct tok_pattern pat; /* Replace */
	struct tok_dec **items;
	size_t n_items;
};

int moem_tok_dec_load(struct tok_dec **out, struct json_object *o);
void moem_tok_dec_free(struct tok_dec *d);
/*
 * Decode a list of token strings (pieces of in, in order) into text. The
 * chain transforms the list; the last step joins it. in is consumed.
 */
int moem_tok_dec_apply(const struct tok_dec *d, struct tok_ctx *c, struct tok_pieces *in,
		       struct tok_buf *out);

/* ---- the tokenizer ---- */

struct moem_tokenizer {
	enum moem_tok_kind kind;
	struct tok_norm *norm;
	struct tok_pretok *pre;
	struct tok_bpe bpe;
	struct tok_added_vocab added;
	struct tok_post *post;
	struct tok_dec *dec;
	uint32_t vocab_size; /* 1 + the largest id (model or added) */
	int32_t *added_of;   /* id -> index in added.v, -1 if not added; vocab_size entries */
	size_t n_special;
	/* from tokenizer_config.json (absent: -1 / NULL) */
	int64_t bos_id, eos_id, pad_id, unk_id;
	bool add_bos, add_eos, cfg_add_bos_set, cfg_add_eos_set;
	char *chat_template;
	char *bos_str, *eos_str;
	/* generation_config.json's eos ids, besides eos_id */
	uint32_t *stop_ids;
	size_t n_stop_ids;
};

/* JSON parsing with json-c (strict, depth-limited). */
int moem_tok_json_parse(const char *buf, size_t len, const char *what, struct json_object **out);
/* Typed getters: -EINVAL with a message naming what and key. */
int moem_tok_json_str(struct json_object *o, const char *key, bool required, const char *what,
		      const char **val, size_t *len);
int moem_tok_json_bool(struct json_object *o, const char *key, bool dflt, const char *what,
		       bool *val);
int moem_tok_json_u32(struct json_object *o, const char *key, const char *what, uint32_t *val);
/* The "type" of a stage object, or an error naming what. */
int moem_tok_json_type(struct json_object *o, const char *what, const char **type);

#endif /* MOEM_TEXT_TOK_INT_H */
