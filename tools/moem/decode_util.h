/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What moem decode and moem eval share: option parsing for sequences and
 * sampling, opening an engine and decoder, a small scheduler that runs
 * every sequence to the end (prefill chunks, then one batch of decode
 * tokens per step; sequences the KV budget cannot hold yet wait), and
 * the report.
 */
#ifndef MOEM_TOOL_DECODE_UTIL_H
#define MOEM_TOOL_DECODE_UTIL_H

#include <stdbool.h>
#include <stdio.h>

#include <moem/decode.h>
#include <moem/engine_args.h>

struct moem_dec_seq_out {
	int32_t *prompt;
	uint32_t n_prompt;
	int32_t *toks; /* generated */
	float *lp;
	int32_t *top_ids; /* [n][top] */
	float *top_lp;
	uint32_t n, cap;
	enum moem_finish finish;
	uint64_t first_ns; /* when its first token came */
	bool added;
	uint64_t id;
};

struct moem_dec_run {
	struct moem_engine_args ea;
	struct moem_decoder_opts dopt;
	struct moem_seq_params sp; /* template: sampling, stops, eos, top logprobs */
	uint32_t chunk;		   /* prefill tokens per sequence per step (0: all) */
	bool chunk_set;		   /* --prefill-chunk was given */
	bool json, quiet, no_warmup;
	char *logits_out;
	char *logits_tmp; /* written here, renamed to logits_out when the run ends well */
	FILE *logits_f;
	struct moem_dec_seq_out *seqs;
	uint32_t n_seqs;
	moem_logits_fn logits_fn; /* eval: overrides --logits-out */
	void *logits_arg;

	struct moem_engine *e;
	struct moem_decoder *d;
	uint64_t t_start, t_end, waits;
	struct moem_decode_stats st;
	/* Steps with decode tokens only (their own time split, for the
	 * benchmarks' median step) and steps with prefill work. */
	struct moem_decode_stats dec_st, pre_st;
	uint64_t *dec_step_ns;
	uint32_t n_dec_steps, cap_dec_steps;
};

void moem_dec_run_init(struct moem_dec_run *r);
void moem_dec_run_free(struct moem_dec_run *r);
/* --logits-out: the file written whole, in place (0), or -errno with a message. */
int moem_dec_run_logits_commit(struct moem_dec_run *r);
/* One option (the names of moem decode); -EINVAL with a message. */
int moem_dec_run_set(struct moem_dec_run *r, const char *name, const char *value);
/* Add a sequence's prompt ("1,2,3"). */
int moem_dec_run_add_prompt(struct moem_dec_run *r, const int32_t *ids, uint32_t n);
int moem_dec_run_open(struct moem_dec_run *r);
/* Decode every sequence to its end. */
int moem_dec_run_all(struct moem_dec_run *r);
void moem_dec_run_print(const struct moem_dec_run *r, FILE *f);
/* "1,2,3" -> ids (malloc'd). */
int moem_parse_ids(const char *s, int32_t **ids, uint32_t *n);

#endif /* MOEM_TOOL_DECODE_UTIL_H */
