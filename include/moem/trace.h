/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Routing traces: a versioned, streaming binary format of router decisions
 * (Documentation/trace-format.md has the byte layout). One record per
 * (decode step, MoE layer): the tokens of the batch, each token's top-k
 * expert ids and route weights, and optionally the router logits so a
 * simulator can re-route the batch with another policy.
 *
 * Writers: the engine, `moem trace record` (the eBPF ring buffer) and the
 * synthetic generator (moem_trace_gen()). Reader: the simulator and
 * `moem trace info|dump`. Both stream: neither holds a trace in memory.
 *
 * Layers are MoE-layer indices 0..n_layers-1 (dense layers are not
 * counted). Within a trace, records come in (step, layer) order: steps
 * never decrease and layers strictly increase within a step; a layer may
 * be missing from a step (a recorder that dropped it).
 */
#ifndef MOEM_TRACE_H
#define MOEM_TRACE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "synth.h"

#define MOEM_TRACE_VERSION_MAJOR 1
#define MOEM_TRACE_VERSION_MINOR 2

/* Header flags. */
#define MOEM_TRACE_F_LOGITS    (1u << 0) /* every record carries router logits */
#define MOEM_TRACE_F_SYNTHETIC (1u << 1) /* generated, not recorded from a model */
#define MOEM_TRACE_F_KNOWN     (MOEM_TRACE_F_LOGITS | MOEM_TRACE_F_SYNTHETIC)

/* Where the routing came from. */
enum moem_trace_source {
	MOEM_TRACE_SRC_UNKNOWN = 0,
	MOEM_TRACE_SRC_SYNTH = 1,  /* moem trace gen */
	MOEM_TRACE_SRC_ENGINE = 2, /* the moem engine */
	MOEM_TRACE_SRC_BPF = 3,	   /* moem trace record (USDT probes) */
	MOEM_TRACE_SRC_IMPORT = 4, /* moem trace import (JSON lines) */
	MOEM_TRACE_SRC_NR
};

/* Bounds every reader enforces (and every writer respects). */
#define MOEM_TRACE_MAX_LAYERS  256
#define MOEM_TRACE_MAX_EXPERTS 1024
#define MOEM_TRACE_MAX_TOPK    64
#define MOEM_TRACE_MAX_TOKENS  65536
#define MOEM_TRACE_DESC_MAX    64
#define MOEM_TRACE_MAX_PREGATE 16

struct moem_trace_info {
	uint16_t version_major, version_minor; /* filled by the reader */
	uint32_t flags;			       /* MOEM_TRACE_F_* */
	enum moem_trace_source source;
	uint32_t n_layers;		/* MoE layers */
	uint32_t n_experts;		/* N */
	uint32_t top_k;			/* k: slots per token in every record */
	uint32_t max_tokens;		/* largest batch in the trace (0: unknown) */
	uint64_t seed;			/* generator seed (synthetic), else 0 */
	char desc[MOEM_TRACE_DESC_MAX]; /* free text: model, generator options */
	/* Since 1.1 (0 in older traces: unknown / none). */
	uint32_t hidden, moe_inter; /* expert shape: the bytes an expert moves */
	uint32_t pregate_depth;	    /* records carry pre-gate picks for 1..D layers ahead */
	/* Since 1.2: the model's expert groups (route.h; 0 0: none), so a
	 * simulator re-routes the logits as the model does. */
	uint32_t n_group, topk_group;
};

/*
 * One routing record. ids[t * k + j] is token t's j-th expert (strongest
 * first), -1 for an unused slot (a token of a pruned router may use fewer
 * than k; used slots come first); w likewise (0 for unused slots). logits
 * is [tokens][n_experts] or NULL. pregate is [pregate_depth][tokens][k]
 * (NULL iff the header's pregate_depth is 0): the top-k experts layer
 * + d's router picks from this layer's input hidden state (the pre-gate),
 * d = 1..D; -1 for unused slots and for layers past the step's last. From
 * the reader, the arrays (and cnt, slots used per token) belong to the
 * reader and stay valid until its next call; writers ignore cnt.
 */
struct moem_trace_rec {
	uint64_t step;
	uint32_t layer;
	uint32_t tokens;
	const int32_t *ids;
	const float *w;
	const float *logits;
	const uint32_t *cnt;
	const int32_t *pregate;
};

struct moem_trace_writer;
struct moem_trace_reader;

/*
 * Open a trace for writing at path. The trace is written to a temporary
 * file next to it and renamed into place by moem_trace_writer_close(), so
 * a crash or an abort never leaves a half-written trace under the name.
 * info->version_* are ignored; max_tokens may be 0.
 */
int moem_trace_writer_open(const char *path, const struct moem_trace_info *info,
			   struct moem_trace_writer **out);
/*
 * moem_trace_writer_open() with flags. MOEM_TRACE_W_EXCL: never replace a
 * file this process did not write itself (a daemon writing where a client
 * said): the trace is linked in only where nothing is, or over a trace an
 * earlier MOEM_TRACE_W_EXCL writer of this process left there; a symlink,
 * or any other file, at path makes close() fail with -EEXIST and leaves
 * it untouched.
 */
#define MOEM_TRACE_W_EXCL 1u
int moem_trace_writer_open_ex(const char *path, unsigned int flags,
			      const struct moem_trace_info *info, struct moem_trace_writer **out);
/*
 * Could a MOEM_TRACE_W_EXCL trace be written at path now? 0, or -errno
 * with a message: -EEXIST (a file this process did not write is there),
 * -ENOENT / -ENOTDIR / -EACCES (its directory).
 */
int moem_trace_dest_check(const char *path);
/* Write to an open descriptor instead (a pipe, stdout); not closed by us. */
int moem_trace_writer_fdopen(int fd, const struct moem_trace_info *info,
			     struct moem_trace_writer **out);
/*
 * Append one record. -EINVAL with a message if it breaks the format's
 * rules (order, bounds, duplicate ids, logits present iff the header says
 * so, non-finite weights); nothing is written then. I/O errors are sticky.
 */
int moem_trace_write(struct moem_trace_writer *w, const struct moem_trace_rec *r);
/* Records written so far. */
uint64_t moem_trace_writer_count(const struct moem_trace_writer *w);
/*
 * Replace the header's desc (truncated to MOEM_TRACE_DESC_MAX - 1 bytes).
 * A named trace gets it when moem_trace_writer_close() patches the header
 * (a recorder learns of dropped records only at the end); an fd trace
 * keeps what it was opened with.
 */
void moem_trace_writer_set_desc(struct moem_trace_writer *w, const char *desc);
/*
 * Write the end record, flush, fsync and rename into place. Returns the
 * first error of the writer's life; on error the temporary file is
 * removed. Frees w either way.
 */
int moem_trace_writer_close(struct moem_trace_writer *w);
/* Discard everything written (temporary file removed) and free w. */
void moem_trace_writer_abort(struct moem_trace_writer *w);

/*
 * Open a trace and check its header: -EPROTO for a file that is not a
 * trace or has an unsupported major version, -EBADMSG for a corrupt
 * header, with a message naming the file.
 */
int moem_trace_open(const char *path, struct moem_trace_reader **out);
const struct moem_trace_info *moem_trace_reader_info(const struct moem_trace_reader *r);
/*
 * Next routing record: 1 and *rec filled, 0 at the end record, or a
 * negative errno with a message naming the record and byte offset:
 * -EBADMSG (checksum, malformed record, order), -EPROTO (truncated: the
 * file ends inside a record or without an end record). Records of unknown
 * type (a newer minor version) are skipped.
 */
int moem_trace_next(struct moem_trace_reader *r, struct moem_trace_rec *rec);
/* Start again from the first record. */
int moem_trace_rewind(struct moem_trace_reader *r);
/* Routing records returned so far, and what the end record said. */
uint64_t moem_trace_reader_count(const struct moem_trace_reader *r);
void moem_trace_close(struct moem_trace_reader *r);

const char *moem_trace_source_name(enum moem_trace_source s);

/*
 * The synthetic generator behind `moem trace gen`: per step, per MoE
 * layer, noisy logits from moem_synth_logits() for each slot of the
 * batch, routed by vanilla top-k (route.h, Qwen3's renormalised weights)
 * and written as one record (with the logits if o->logits, and the
 * pre-gate picks of the D layers ahead, routed the same way, if
 * o->pregate = D). Same options, same bytes. mix may be NULL (uniform
 * over the workloads).
 */
struct moem_trace_gen_opts {
	struct moem_synth_params synth;
	const double *mix;
	uint32_t batch;
	uint64_t steps;
	bool logits;
	uint32_t pregate;	    /* pre-gate depth D (moem_synth_pregate()), 0: none */
	uint32_t hidden, moe_inter; /* expert shape for the header (0: unknown) */
};

/* Header a generator run writes (flags, source, shape, seed, desc). */
void moem_trace_gen_info(const struct moem_trace_gen_opts *o, struct moem_trace_info *info);
/*
 * Generate into w (opened with moem_trace_gen_info()'s header).
 * progress(arg, step) is called after each step when non-NULL.
 */
int moem_trace_gen(const struct moem_trace_gen_opts *o, struct moem_trace_writer *w,
		   void (*progress)(void *arg, uint64_t step), void *arg);

/*
 * JSON lines, the interchange form (`moem trace dump` / `moem trace
 * import`): any engine or script that can print its router decisions can
 * become a trace. First line: the header
 *   {"moem_trace":1,"n_layers":L,"n_experts":N,"top_k":k,"source":"engine",
 *    "flags":["logits","synthetic"],"seed":S,"desc":"..."}
 * then one record per line
 *   {"step":s,"layer":m,"ids":[[e,..],..],"w":[[x,..],..],"logits":[[z,..],..]}
 * (ids per token strongest first, at most k, padded with -1 or short;
 * "w" and "logits" as the header's flags say; floats print with 9
 * significant digits, so dump -> import is bit-exact.)
 */
/* Write r's records (from where it stands) to f; returns records or -errno. */
int64_t moem_trace_dump_json(struct moem_trace_reader *r, FILE *f);
/*
 * Read JSON lines from f into a new trace at out_path (written atomically).
 * Errors name the input line. *records gets the count when non-NULL.
 */
int moem_trace_import_json(FILE *f, const char *in_name, const char *out_path, uint64_t *records);

#endif /* MOEM_TRACE_H */
