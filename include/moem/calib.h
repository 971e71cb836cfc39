/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * This machine's figures for hybrid execution's cost model (cost.h), as
 * `moem calibrate` measures them and the engine reads them back at open
 * (Documentation/engine.md, "Calibration"): the CPU expert kernels'
 * weight reads at batch 1 (GB/s, over a buffer larger than the last-level
 * cache) and their cost per (token, expert) pair at batch 64, per
 * precision, with a given worker count and instruction set; and the
 * host -> device link through the CUDA backend, when there is one.
 *
 * The cache is one JSON file (format "moem-calibration", version
 * MOEM_CALIB_VERSION) written atomically; it applies only to the machine
 * it describes: the same CPU model, worker thread count and ISA.
 */
#ifndef MOEM_CALIB_H
#define MOEM_CALIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "quant.h"

/*
 * 2: the amx table's q8/q4/q2 kernels changed (AMX-INT8): their figures are measured again;
 * 3: call_ns, the executor's cost per call beyond its experts' reads;
 * 4: the avx512 table's q8/q4/q2 kernels changed (16 rows in the lanes): a
 *    cache of their old per-token cost, 2.5 times the new at batch 64, is
 *    measured again;
 * 5: the activation quantizer's block statistics in AVX-512, the avx512
 *    kernels' weight prefetch and its bf16 rows taking all their tokens:
 *    per-token cost 10-20% lower from 4 tokens;
 * 6: call_ns measured as the engine calls: the pool idle, woken ahead
 *    (about twice the back-to-back figure on a 16-CPU host); and the
 *    pool's caller kept off its workers' CPUs (tpool.h), which had run
 *    some measurements at one thread's speed
 * 7: the pool's items claimed a few at a time (tpool.h), so the kernels'
 *    prefetch of the next rows lands in the right core's cache: batch-1
 *    reads 5-15% faster, bf16 at 4 tokens about 15%
 */
#define MOEM_CALIB_VERSION 7
#define MOEM_CALIB_TOKENS  64 /* the batch the per-token cost is measured at */

struct moem_calib_cpu {
	bool valid;
	double gbps;	   /* expert weight bytes read per ns, batch 1 */
	uint64_t token_ns; /* per (token, expert) pair, one expert used by 64 tokens */
	uint64_t call_ns;  /* one call with one expert at batch 1, less its weight reads */
};

struct moem_calib {
	uint32_t version;
	char cpu_model[128];	/* /proc/cpuinfo's "model name" */
	uint32_t threads;	/* CPU backend workers the figures were taken with */
	enum moem_cpu_isa isa;	/* the kernels' instruction set (resolved, never AUTO) */
	uint32_t hidden, inter; /* the expert shape measured */
	struct moem_calib_cpu cpu[MOEM_PREC_NR];
	double link_gbps;    /* host -> device copies; 0: not measured */
	char link_note[160]; /* why the link was not measured */
	int64_t created;     /* Unix time */
};

/*
 * Fill c's identity for this machine (version, CPU model, the given
 * worker count and resolved ISA); figures zeroed.
 */
int moem_calib_machine(uint32_t threads, enum moem_cpu_isa isa, struct moem_calib *c);

/*
 * Measure the CPU kernels of be (a CPU backend) for one precision on
 * experts of hidden x inter: batch-1 GB/s over copies of an expert filling
 * at least 64 MiB and 4x the last-level cache (best of two passes), and
 * the per-token cost of one expert used by MOEM_CALIB_TOKENS tokens, and
 * the cost of a call beyond its reads: calls of one expert each (one
 * expert split over every worker, as a layer with a single CPU expert
 * runs), less what that expert's bytes take at the batch-1 rate.
 * *buf_bytes (may be NULL) gets the size of the buffer read.
 */
int moem_calib_cpu_measure(struct moem_backend *be, enum moem_prec prec, uint32_t hidden,
			   uint32_t inter, struct moem_calib_cpu *out, uint64_t *buf_bytes);

/*
 * Host -> device copy bandwidth through the CUDA backend (pinned host
 * memory, 256 MiB, best of three) into c->link_gbps; without a CUDA device
 * -ENODEV, link_gbps 0 and the reason in c->link_note.
 */
int moem_calib_link(struct moem_calib *c);

/*
 * The cache file: $XDG_CACHE_HOME/moem/calibration.json, else
 * $HOME/.cache/moem/calibration.json. -ENOENT with a message if neither
 * variable is set, -ENAMETOOLONG if it does not fit.
 */
int moem_calib_default_path(char *buf, size_t size);

/*
 * Write c to path atomically: a temporary file in the same directory
 * (created if missing, as the cache directory), fsync, rename; on any
 * error nothing is left behind and an existing file is untouched.
 */
int moem_calib_write(const char *path, const struct moem_calib *c);

/*
 * The cache file's JSON text for c (what moem_calib_write() writes),
 * indented or on one line; the caller frees it. NULL without memory.
 */
char *moem_calib_to_json(const struct moem_calib *c, bool pretty);

/*
 * Read path into c. -ENOENT if there is no file; -EINVAL with a message
 * for one that is not a calibration file or has a field missing or out of
 * range; -ESTALE with a message for another format version.
 */
int moem_calib_read(const char *path, struct moem_calib *c);

/*
 * Was c measured on the machine here describes (CPU model, threads,
 * ISA)? If not, why (may be NULL) says what differs.
 */
bool moem_calib_matches(const struct moem_calib *c, const struct moem_calib *here, char *why,
			size_t size);

/*
 * The CPU figures for prec on experts of hidden x inter: GB/s as
 * measured, the per-token cost scaled by the weights per expert (it is
 * compute: proportional to hidden x inter), the call cost as measured
 * (call_ns may be NULL). -ENOENT if c has no figures for prec.
 */
int moem_calib_cpu_for(const struct moem_calib *c, enum moem_prec prec, uint32_t hidden,
		       uint32_t inter, double *gbps, uint64_t *token_ns, uint64_t *call_ns);

#endif /* MOEM_CALIB_H */
