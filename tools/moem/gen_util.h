/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Text generation for moem generate and moem chat: the engine and decoder
 * of moem decode (decode_util.h: the same budget, policy and sampling
 * options), the pack's tokenizer, text-level stop strings, and one
 * sequence decoded at a time with its text streamed as it is produced:
 * token ids through the streaming decoder (never a split UTF-8
 * character), then the stop-string matcher (never a stop string, nor the
 * start of one that may still complete).
 */
#ifndef MOEM_TOOL_GEN_UTIL_H
#define MOEM_TOOL_GEN_UTIL_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include <moem/text_stop.h>
#include <moem/tokenizer.h>

#include "decode_util.h"

struct json_object;

/*
 * The long options both commands take, all with val 0 (dispatched by name
 * to moem_gen_set()): written to out[0..MOEM_GEN_N_OPTS); the caller adds
 * its own and the terminating {0}.
 */
#define MOEM_GEN_N_OPTS 49
void moem_gen_options(struct option *out);

/* The usage lines of those options. */
#define MOEM_GEN_USAGE                                                                           \
	"  --max-new N              tokens to generate at most (128)\n"                          \
	"  --temperature T --top-k K --top-p P --min-p P --repetition-penalty R\n"               \
	"  --presence-penalty X --frequency-penalty X --seed S\n"                                \
	"                           sampling, as moem decode (greedy unless --temperature)\n"    \
	"  --stop TEXT              end when the text contains TEXT (not shown); repeatable\n"   \
	"  --stop-ids ID,..         end on this token-id sequence; --eos ID,.. more end ids\n"   \
	"  --no-model-eos           ignore the model's and tokenizer's end-of-sequence ids\n"    \
	"  --special                show special tokens the model writes (hidden by default)\n"  \
	"  --logprobs N             with --json: N alternatives per token\n"                     \
	"  --json                   no streaming: one JSON object with the text, token ids,\n"   \
	"                           timings and counters\n"                                      \
	"  --json-stream            each piece of text as it comes as a line {\"text\": ...},\n" \
	"                           then the --json object\n"                                    \
	"  --kv-bytes SIZE --kv-block N --prefill-chunk N --no-warmup --quiet\n"                 \
	"  --dense-prec P           quantize the attention projections and lm_head when\n"       \
	"                           loaded (q8, q4, q2; as moem decode)\n"                       \
	"  budgets and policies as moem run: --hbm --dram --precisions --route --evict\n"        \
	"  --prefetch --precision --paging --backend --threads --pool --loader\n"                \
	"  --exec gpu|hybrid --cpu-moe-layers N --cpu-gbps X --place RULE --cpu-threads N ...\n"

struct moem_gen {
	struct moem_dec_run r; /* engine, decoder, sampling and budgets */
	struct moem_pack *pk;  /* open while tok is used */
	struct moem_tokenizer *tok;
	struct moem_tok_info ti;
	char *stops[MOEM_TEXT_STOP_MAX];
	uint32_t n_stops;
	bool special;	  /* --special: special tokens shown */
	bool json_stream; /* --json-stream: each piece of text as a JSON line */
	bool synthetic;	  /* the pack is a synthetic model: its text is gibberish */
	uint32_t vocab;	  /* the model's */
};

/* One generation: what was shown, the ids and the figures. */
struct moem_gen_out {
	int32_t *prompt; /* the prompt's ids (a copy) */
	int32_t *toks;	 /* generated ids (an end-of-sequence id included) */
	float *lp;
	int32_t *top_ids; /* [n][top] with --logprobs */
	float *top_lp;
	uint32_t n, cap;
	uint32_t n_prompt;
	char *text; /* what was shown (NUL-terminated) */
	size_t len, text_cap;
	enum moem_finish finish;
	int stop; /* index of the --stop string that ended it, or -1 */
	uint64_t t_start, t_first, t_end;
	struct moem_decode_stats st; /* this generation's */
};

void moem_gen_init(struct moem_gen *g);
void moem_gen_free(struct moem_gen *g);
/* One option of MOEM_GEN_OPTIONS; -EINVAL with a message. */
int moem_gen_set(struct moem_gen *g, const char *name, const char *value);
/* Open the pack's tokenizer, then the engine and decoder. */
int moem_gen_open(struct moem_gen *g);
/*
 * Encode a prompt. add_special: as transformers encodes a plain prompt
 * (the post-processor's special tokens, and BOS where
 * tokenizer_config.json asks for one); without, as apply_chat_template
 * does (the template wrote them). *ids is malloc'd.
 */
int moem_gen_encode(struct moem_gen *g, const char *text, size_t len, bool add_special,
		    int32_t **ids, uint32_t *n);
/*
 * Generate from prompt[0..n); stream (may be NULL) receives the text as
 * it comes, flushed piece by piece. o is reset first.
 */
int moem_gen_run(struct moem_gen *g, const int32_t *prompt, uint32_t n, FILE *stream,
		 struct moem_gen_out *o);
void moem_gen_out_free(struct moem_gen_out *o);
/* The --json object of one generation (caller puts it). */
struct json_object *moem_gen_json(const struct moem_gen *g, const struct moem_gen_out *o);
/* The one-line summary on stderr (tokens, finish, time to first token, speed). */
void moem_gen_summary(const struct moem_gen *g, const struct moem_gen_out *o, const char *cmd);

#endif /* MOEM_TOOL_GEN_UTIL_H */
