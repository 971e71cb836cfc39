/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Static expert placement rules (`--place`, Documentation/policies.md
 * "Placement rules"): which experts are always computed on the CPU, which
 * never are, and which the hybrid cost model decides, by MoE layer and
 * expert, as llama.cpp's --override-tensor and KTransformers' placement
 * rules do. One rule:
 *
 *   [layers=LIST][,experts=LIST]:cpu|gpu|auto
 *
 * LIST is comma-separated items, each N, N-M (inclusive) or *; a key
 * names the items after it up to the next key (`layers=0-3,8,experts=*`).
 * A rule names at least one key; one left out means every one. Layers
 * count the model's MoE layers from 0 (as --cpu-moe-layers and routing
 * traces do), experts a layer's experts from 0.
 *
 * The first rule that matches an expert decides (llama.cpp's order);
 * --cpu-moe-layers N is the rule `layers=0-(N-1):cpu` after every --place
 * rule; an expert no rule matches is auto. cpu: always computed on the
 * CPU from the DRAM pool, never loaded into HBM; gpu: never computed on
 * the CPU; auto: the cost model decides under --exec hybrid, else the GPU.
 *
 * The engine (at open) and the simulator (moem_sim_run) resolve the rules
 * with the same moem_place_map(), so `moem sim` honours them as the
 * engine does.
 */
#ifndef MOEM_PLACE_H
#define MOEM_PLACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MOEM_PLACE_MAX_RULES  16
#define MOEM_PLACE_MAX_RANGES 8 /* items per key */
#define MOEM_PLACE_MAX_INDEX  65535u

enum moem_place {
	MOEM_PLACE_AUTO = 0,
	MOEM_PLACE_CPU = 1,
	MOEM_PLACE_GPU = 2,
};

struct moem_place_range {
	uint32_t lo, hi; /* inclusive */
};

struct moem_place_rule {
	uint8_t where;		     /* enum moem_place */
	uint8_t n_layers, n_experts; /* 0: every layer / expert */
	struct moem_place_range layers[MOEM_PLACE_MAX_RANGES];
	struct moem_place_range experts[MOEM_PLACE_MAX_RANGES];
};

/* Rules in the order given; zero-initialised is "no rules". */
struct moem_place_rules {
	uint32_t n;
	struct moem_place_rule r[MOEM_PLACE_MAX_RULES];
};

/*
 * Parse one rule (syntax above) and append it. -EINVAL with a message
 * quoting the rule and saying what is wrong (p unchanged); -E2BIG past
 * MOEM_PLACE_MAX_RULES.
 */
int moem_place_add(struct moem_place_rules *p, const char *text);
/* Parse one rule alone (no append). */
int moem_place_parse(const char *text, struct moem_place_rule *r);
/*
 * A rule in canonical form ("layers=0-3,experts=*:cpu" minus the keys that
 * match everything): the length it needs, as snprintf.
 */
int moem_place_format(const struct moem_place_rule *r, char *buf, size_t size);
/* All rules, joined with "; " ("" for none): as moem_place_format. */
int moem_place_format_all(const struct moem_place_rules *p, char *buf, size_t size);
/* Does the rule name MoE layer m's expert x? */
bool moem_place_matches(const struct moem_place_rule *r, uint32_t m, uint32_t x);
/* Same rules, same order. */
bool moem_place_equal(const struct moem_place_rules *a, const struct moem_place_rules *b);
/* "cpu", "gpu" or "auto". */
const char *moem_place_name(enum moem_place w);

/*
 * Resolve the rules (and --cpu-moe-layers, after them) for a model of L
 * MoE layers of N experts each: map[m * N + x] gets each expert's enum
 * moem_place (map may be NULL to validate only), *n_cpu (may be NULL) how
 * many are cpu. -EINVAL with a message for a rule that names a layer or
 * expert beyond the model or matches nothing (every expert it names is
 * decided by an earlier rule), or cpu_moe_layers above L.
 */
int moem_place_map(const struct moem_place_rules *p, uint32_t cpu_moe_layers, uint32_t L,
		   uint32_t N, uint8_t *map, uint64_t *n_cpu);

#endif /* MOEM_PLACE_H */
