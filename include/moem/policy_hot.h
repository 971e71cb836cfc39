/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Expert hotness (ALGORITHMS.md sec. 4): per-(layer, expert) router hit
 * counters over an interval, folded every T_u into an EMA normalised per
 * layer so scores are scale-free (sum over a layer's experts -> 1):
 *   S[l][e] <- alpha * S[l][e] + (1 - alpha) * c[l][e] / total[l]
 * moem defaults: T_u = 200 ms, alpha = 0.8. An interval in which a layer
 * saw no tokens leaves that layer's scores unchanged (no evidence), and
 * several elapsed intervals fold once: idle time does not erase hotness.
 * Counters may come from the engine's own histogram or the BPF map.
 */
#ifndef MOEM_POLICY_HOT_H
#define MOEM_POLICY_HOT_H

#include <stddef.h>
#include <stdint.h>

#define MOEM_HOT_DEFAULT_ALPHA	     0.8
#define MOEM_HOT_DEFAULT_INTERVAL_NS 200000000ull

struct moem_hot;

int moem_hot_create(uint32_t n_layers, uint32_t n_experts, double alpha, uint64_t interval_ns,
		    struct moem_hot **out);
void moem_hot_destroy(struct moem_hot *h);
/* Count router picks of one layer: ids[n] (entries < 0 ignored). */
void moem_hot_count(struct moem_hot *h, uint32_t layer, const int32_t *ids, size_t n);
void moem_hot_add(struct moem_hot *h, uint32_t layer, uint32_t expert, uint32_t count);
/*
 * Advance to now_ns: the first call starts the first interval; a call at
 * or past its end folds the counters into the scores, resets them, and
 * returns 1 (0 otherwise).
 */
int moem_hot_tick(struct moem_hot *h, uint64_t now_ns);
/* Fold now regardless of the clock (tests, a budget change). */
void moem_hot_fold(struct moem_hot *h);
/* Scores of one layer, [n_experts]. */
const float *moem_hot_scores(const struct moem_hot *h, uint32_t layer);
uint64_t moem_hot_intervals(const struct moem_hot *h);

#endif /* MOEM_POLICY_HOT_H */
