/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Engine settings by name, as `moem run` options, moemd flags, config
 * file keys ("name = value") and control-socket run requests spell them,
 * so every front end reads the same files the same way:
 *
 *   pack hbm dram kv precisions fallback route evict prefetch precision
 *   paging backend threads cpu-threads cpu-isa pool region persistent
 *   link-gbps loader exec cpu-moe-layers cpu-gbps cpu-token-ns place
 *   calibration
 *   no-verify trace-out trace-logits hotness pregate   (engine settings)
 *   workload batch steps mix seed              (workload settings)
 *
 * place may be given more than once: each appends a rule (place.h).
 * Boolean settings take no value on a command line; in a file they take
 * yes/no, true/false, on/off or 1/0 (an empty value means yes).
 */
#ifndef MOEM_ENGINE_ARGS_H
#define MOEM_ENGINE_ARGS_H

#include <stdbool.h>

#include "engine.h"

enum moem_arg_class {
	MOEM_ARG_ENGINE = 0,   /* fixed when the engine opens */
	MOEM_ARG_WORKLOAD = 1, /* per run */
};

struct moem_arg_def {
	const char *name;
	bool flag; /* boolean: no value on a command line */
	enum moem_arg_class cls;
};

/* Every setting, NULL-terminated. */
extern const struct moem_arg_def moem_engine_arg_defs[];
/* The definition of name, or NULL. */
const struct moem_arg_def *moem_engine_arg_find(const char *name);

/*
 * Settings as given. The strings in o and w are owned by the struct
 * (freed by moem_engine_args_free()); hbm and dram keep the user's
 * spelling ("12G", "25%") until moem_engine_args_resolve().
 */
struct moem_engine_args {
	struct moem_engine_opts o;
	struct moem_workload w;
	char *hbm, *dram, *precisions;
	char *region;	   /* the region setting (o.pool.name points here) */
	char *mem_reserve; /* the mem-reserve setting until resolved */
	char *dram_nodes;  /* the dram-nodes setting (o.pool.nodes points here) */
};

/* Defaults: synthetic workload, batch 8, 32 steps, bf16, auto backend and pool. */
void moem_engine_args_init(struct moem_engine_args *a);
void moem_engine_args_free(struct moem_engine_args *a);
/* A deep copy (dst is initialised here); -ENOMEM. */
int moem_engine_args_copy(struct moem_engine_args *dst, const struct moem_engine_args *src);

/*
 * Apply one setting. -ENOENT (no message) if name is not one of ours, so
 * a caller can handle its own keys; -EINVAL/-ERANGE with a message naming
 * the setting for a bad value (nothing changed).
 */
int moem_engine_args_set(struct moem_engine_args *a, const char *name, const char *value);

/* Parse a boolean setting's value (see above). */
int moem_arg_bool(const char *name, const char *value, bool *out);

/*
 * Resolve precisions ("bf16,q4") into o.hi/o.lo/o.two_prec and the
 * budgets into o.hbm_budget/o.dram_budget (a percentage of the pack's
 * expert bytes in the chosen precisions, read from the pack). Needs
 * o.pack_path for percentages. -EINVAL with a message.
 */
int moem_engine_args_resolve(struct moem_engine_args *a);

#endif /* MOEM_ENGINE_ARGS_H */
