// SPDX-License-Identifier: GPL-2.0-only
/*
 * Eviction invariants: LRU and LFU agree with brute-force references;
 * no policy ever returns a slot the caller marked in use or in flight;
 * two-level LRU takes victims from the low level first and protects the
 * predicted and next-S-layer experts; Belady MIN matches an exhaustive
 * search for the best schedule and bounds every online policy; a cache
 * driven through the budget tracker never exceeds its budget.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/policy.h>
#include <moem/rng.h>

#include "kselftest_harness.h"

static bool all_ok(void *arg, uint32_t key)
{
	return true;
}

static bool not_pinned(void *arg, uint32_t key)
{
	return !((const uint8_t *)arg)[key];
}

static struct moem_evict *mk(struct __test_metadata *_metadata, enum moem_evict_kind kind,
			     uint32_t L, uint32_t N)
{
	struct moem_evict_cfg c = {kind, L, N, 2, 1, 0};
	struct moem_evict *ev = NULL;

	EXPECT_EQ(0, moem_evict_create(&c, &ev));
	return ev;
}

TEST(parse)
{
	struct moem_evict_cfg c = {0};
	char buf[32];

	ASSERT_EQ(0, moem_evict_parse("lru2:W=3", &c));
	EXPECT_EQ(MOEM_EVICT_LRU2, c.kind);
	EXPECT_EQ(3u, c.window);
	moem_evict_format(&c, buf, sizeof(buf));
	EXPECT_STREQ("lru2:W=3", buf);
	ASSERT_EQ(0, moem_evict_parse("lfu:half=100", &c));
	EXPECT_EQ(100u, c.half);
	EXPECT_EQ(-EINVAL, moem_evict_parse("lru:W=3", &c));
	EXPECT_EQ(-EINVAL, moem_evict_parse("mru", &c));
}

/* LRU and LFU against brute force on random traffic, with random pinning. */
TEST(lru_lfu_match_reference)
{
	const uint32_t L = 4, N = 8, K = L * N;
	struct moem_rng r;

	moem_rng_seed(&r, 11, 0);
	for (int kind = 0; kind < 3; kind += 2) {
		struct moem_evict *ev = mk(_metadata, kind, L, N);
		uint64_t last[32] = {0};
		float cnt[32] = {0};
		uint8_t mem[32] = {0}, pin[32];

		ASSERT_NE(NULL, ev);
		for (uint64_t pos = 1; pos < 5000; pos++) {
			uint32_t k = moem_rng_below(&r, K), v = UINT32_MAX, got;
			int ret;

			if (moem_rng_below(&r, 3) == 0 && !mem[k]) {
				moem_evict_insert(ev, k, pos);
				mem[k] = 1;
				last[k] = pos;
			} else {
				moem_evict_access(ev, k, pos);
				cnt[k] += 1;
				if (mem[k])
					last[k] = pos;
			}
			for (uint32_t i = 0; i < K; i++)
				pin[i] = moem_rng_below(&r, 4) == 0;
			/* reference: lowest (count,) last use, key among members not pinned */
			for (uint32_t i = 0; i < K; i++) {
				if (!mem[i] || pin[i])
					continue;
				if (v == UINT32_MAX)
					v = i;
				else if (kind == MOEM_EVICT_LRU
						 ? last[i] < last[v]
						 : cnt[i] < cnt[v] ||
							   (cnt[i] == cnt[v] &&
							    (last[i] < last[v] ||
							     (last[i] == last[v] && i < v))))
					v = i;
			}
			ret = moem_evict_victim(ev, pos, 0, not_pinned, pin, &got);
			if (v == UINT32_MAX) {
				ASSERT_EQ(-ENOENT, ret);
				continue;
			}
			ASSERT_EQ(0, ret);
			ASSERT_EQ(v, got) TH_LOG("kind %d pos %llu", kind, (unsigned long long)pos);
			if (moem_rng_below(&r, 2)) {
				moem_evict_remove(ev, got);
				mem[got] = 0;
			}
		}
		moem_evict_destroy(ev);
	}
}

TEST(lfu_aging)
{
	struct moem_evict_cfg c = {MOEM_EVICT_LFU, 1, 4, 0, 0, 10};
	struct moem_evict *ev;
	uint32_t v;

	ASSERT_EQ(0, moem_evict_create(&c, &ev));
	moem_evict_insert(ev, 0, 0);
	moem_evict_insert(ev, 1, 0);
	for (int i = 0; i < 8; i++)
		moem_evict_access(ev, 0, 1);
	moem_evict_access(ev, 1, 2);
	ASSERT_EQ(0, moem_evict_victim(ev, 2, 0, all_ok, NULL, &v));
	EXPECT_EQ(1u, v);
	/* key 0 goes quiet; key 1 stays busy: aging lets 1 overtake 0 */
	for (uint64_t pos = 3; pos < 100; pos++)
		moem_evict_access(ev, 1, pos);
	ASSERT_EQ(0, moem_evict_victim(ev, 100, 0, all_ok, NULL, &v));
	EXPECT_EQ(0u, v);
	moem_evict_destroy(ev);
}

TEST(lru2_levels)
{
	const uint32_t L = 8, N = 4;
	struct moem_evict *ev = mk(_metadata, MOEM_EVICT_LRU2, L, N);
	uint8_t pin[32] = {0};
	uint32_t v;

	ASSERT_NE(NULL, ev);
	/* one expert of each layer, used in layer order during step 0 */
	for (uint32_t m = 0; m < L; m++)
		moem_evict_insert(ev, moem_key(m, 0, N), m);
	moem_evict_set_horizon(ev, 2);
	/* at tick 7 (layer 7): layers 0 and 1 (next step's first S = 2) are high;
	 * 6 and 7 are recent (W = 2); of the low ones 2..5, layer 5 runs again
	 * last (its LRU order would take layer 2, run again first) */
	ASSERT_EQ(0, moem_evict_victim(ev, 7, 0, all_ok, NULL, &v));
	EXPECT_EQ(moem_key(5, 0, N), v);
	EXPECT_TRUE(moem_evict_is_high(ev, moem_key(0, 0, N), 7));
	EXPECT_TRUE(moem_evict_is_high(ev, moem_key(1, 0, N), 7));
	EXPECT_TRUE(moem_evict_is_high(ev, moem_key(6, 0, N), 7));
	EXPECT_FALSE(moem_evict_is_high(ev, moem_key(3, 0, N), 7));
	/* plain LRU would take layer 0: the one needed next */
	{
		struct moem_evict *lru = mk(_metadata, MOEM_EVICT_LRU, L, N);

		for (uint32_t m = 0; m < L; m++)
			moem_evict_insert(lru, moem_key(m, 0, N), m);
		ASSERT_EQ(0, moem_evict_victim(lru, 7, 0, all_ok, NULL, &v));
		EXPECT_EQ(moem_key(0, 0, N), v);
		moem_evict_destroy(lru);
	}
	/* a prediction protects layer 5 until its tick */
	moem_evict_predict(ev, moem_key(5, 0, N), 10);
	ASSERT_EQ(0, moem_evict_victim(ev, 7, 0, all_ok, NULL, &v));
	EXPECT_EQ(moem_key(4, 0, N), v);
	/* pinned low ones are skipped; with all low pinned, LOW_ONLY finds none */
	for (uint32_t m = 2; m < 5; m++)
		pin[moem_key(m, 0, N)] = 1;
	EXPECT_EQ(-ENOENT, moem_evict_victim(ev, 7, MOEM_EVICT_LOW_ONLY, not_pinned, pin, &v));
	/* without LOW_ONLY the LRU high one goes */
	ASSERT_EQ(0, moem_evict_victim(ev, 7, 0, not_pinned, pin, &v));
	EXPECT_EQ(moem_key(0, 0, N), v);
	/* after tick 10 the prediction has expired; at tick 11 (layer 3) layers
	 * 4 and 5 are the next S, and layer 3 itself (just run) runs again last */
	memset(pin, 0, sizeof(pin));
	EXPECT_TRUE(moem_evict_is_high(ev, moem_key(5, 0, N), 10));
	EXPECT_TRUE(moem_evict_is_high(ev, moem_key(5, 0, N), 11));
	EXPECT_FALSE(moem_evict_is_high(ev, moem_key(2, 0, N), 11));
	ASSERT_EQ(0, moem_evict_victim(ev, 11, 0, all_ok, NULL, &v));
	EXPECT_EQ(moem_key(3, 0, N), v);
	moem_evict_remove(ev, v);
	EXPECT_FALSE(moem_evict_has(ev, v));
	EXPECT_EQ(L - 1, moem_evict_members(ev));
	moem_evict_destroy(ev);
}

/*
 * lru2's victim against a brute-force reference of its rule over every
 * member: among low keys (out of the recency window W, not predicted,
 * not of the next S layers) that the caller allows, the one whose layer
 * runs again last, the least recently used of those; with none and no
 * LOW_ONLY, the least recently used allowed key. Random inserts, uses,
 * removals, predictions, pins and horizons, several keys a tick.
 */
TEST(lru2_matches_reference)
{
	enum { L = 6, N = 5, KEYS = L * N };
	struct moem_rng r;

	moem_rng_seed(&r, 5, 0);
	for (int trial = 0; trial < 8; trial++) {
		struct moem_evict *ev = mk(_metadata, MOEM_EVICT_LRU2, L, N);
		uint64_t seq[KEYS] = {0}, last[KEYS] = {0}, pred[KEYS] = {0}, n = 0;
		uint8_t mem[KEYS] = {0}, pin[KEYS];
		uint32_t S = (uint32_t)trial % 3;

		ASSERT_NE(NULL, ev);
		moem_evict_set_horizon(ev, S);
		for (uint64_t pos = 1; pos < 3000; pos += moem_rng_below(&r, 4) == 0) {
			uint32_t k = moem_rng_below(&r, KEYS), got, v = UINT32_MAX, vd = 0;
			uint32_t f = UINT32_MAX;
			unsigned flags = moem_rng_below(&r, 2) ? MOEM_EVICT_LOW_ONLY : 0;
			const uint32_t cur = (uint32_t)(pos % L);
			int ret;

			switch (moem_rng_below(&r, 6)) {
			case 0:
			case 1:
				if (!mem[k]) {
					moem_evict_insert(ev, k, pos);
					mem[k] = 1;
					last[k] = pos;
					seq[k] = ++n;
				}
				break;
			case 2: {
				uint64_t until = pos + moem_rng_below(&r, 8);

				moem_evict_predict(ev, k, until);
				if (until + 1 > pred[k])
					pred[k] = until + 1;
				break;
			}
			case 3:
				moem_evict_remove(ev, k);
				if (mem[k]) /* a prediction goes with the member */
					pred[k] = 0;
				mem[k] = 0;
				break;
			default:
				moem_evict_access(ev, k, pos);
				if (mem[k]) {
					last[k] = pos;
					seq[k] = ++n;
				}
			}
			for (uint32_t i = 0; i < KEYS; i++)
				pin[i] = moem_rng_below(&r, 5) == 0;
			for (uint32_t i = 0; i < KEYS; i++) {
				uint32_t l = i / N, d = (l + L - cur) % L, dist = d ? d : L;

				if (!mem[i] || pin[i] || last[i] + 2 > pos || pred[i] > pos ||
				    (d >= 1 && d <= S))
					continue;
				if (v == UINT32_MAX || dist > vd ||
				    (dist == vd && seq[i] < seq[v])) {
					v = i;
					vd = dist;
				}
			}
			/* none low: the least recently used allowed key, unless LOW_ONLY */
			for (uint32_t i = 0; v == UINT32_MAX && !flags && i < KEYS; i++)
				if (mem[i] && !pin[i] && (f == UINT32_MAX || seq[i] < seq[f]))
					f = i;
			if (v == UINT32_MAX)
				v = f;
			ret = moem_evict_victim(ev, pos, flags, not_pinned, pin, &got);
			if (v == UINT32_MAX) {
				ASSERT_EQ(-ENOENT, ret) TH_LOG("pos %llu", (unsigned long long)pos);
				continue;
			}
			ASSERT_EQ(0, ret) TH_LOG("pos %llu", (unsigned long long)pos);
			ASSERT_EQ(v, got)
			TH_LOG("trial %d pos %llu S %u", trial, (unsigned long long)pos, S);
		}
		moem_evict_destroy(ev);
	}
}

/* Exhaustive best schedule for tiny logs: max hits over every eviction choice. */
static int best(const struct moem_access_log *log, uint64_t p, uint32_t i, uint32_t mask,
		uint32_t slots, int *memo)
{
	int *m, hits = 0, b = -1;
	uint32_t tick = 0, n;

	if (p == log->n_pos)
		return 0;
	m = &memo[(log->off[p] + i) * 256 + mask];
	if (*m >= 0)
		return *m;
	for (uint64_t j = log->off[p]; j < log->off[p + 1]; j++)
		tick |= 1u << log->keys[j];
	if (i == 0)
		hits = __builtin_popcount(mask & tick);
	n = (uint32_t)(log->off[p + 1] - log->off[p]);
	for (; i < n; i++) {
		uint32_t k = log->keys[log->off[p] + i];

		if (mask & (1u << k))
			continue;
		if ((uint32_t)__builtin_popcount(mask) < slots) {
			mask |= 1u << k;
			continue;
		}
		/* full: try every victim not used this tick; bypass if none */
		for (uint32_t v = 0; v < 8; v++)
			if ((mask & (1u << v)) && !(tick & (1u << v))) {
				int x = best(log, p, i + 1, (mask & ~(1u << v)) | (1u << k), slots,
					     memo);

				if (x > b)
					b = x;
			}
		if (b < 0)
			continue;
		*m = hits + b;
		return *m;
	}
	*m = hits + best(log, p + 1, 0, mask, slots, memo);
	return *m;
}

TEST(belady_is_optimal_and_bounds_online)
{
	struct moem_rng r;

	moem_rng_seed(&r, 12, 0);
	for (int it = 0; it < 300; it++) {
		struct moem_access_log log;
		uint32_t slots = 1 + moem_rng_below(&r, 4), per = 1 + moem_rng_below(&r, 3);
		uint64_t h, a;
		int *memo;

		moem_access_log_init(&log, 8);
		for (int p = 0; p < 14; p++) {
			uint32_t keys[3], n = 0;

			while (n < per) {
				uint32_t k = moem_rng_below(&r, it % 2 ? 8 : 5);
				bool dup = false;

				for (uint32_t j = 0; j < n; j++)
					dup |= keys[j] == k;
				if (!dup)
					keys[n++] = k;
			}
			ASSERT_EQ(0, moem_access_log_add(&log, keys, n));
		}
		ASSERT_EQ(0, moem_belady(&log, slots, 0, &h, &a));
		memo = malloc(sizeof(int) * (log.n_keys + 1) * 256);
		for (uint64_t i = 0; i < (log.n_keys + 1) * 256; i++)
			memo[i] = -1;
		ASSERT_EQ((uint64_t)best(&log, 0, 0, 0, slots, memo), h)
		TH_LOG("iteration %d slots %u per %u", it, slots, per);
		EXPECT_EQ(log.n_keys, a);
		free(memo);
		moem_access_log_free(&log);
	}
}

/* An online policy driving a cache under a byte budget: never over, never above MIN. */
TEST(online_policies_under_budget_and_belady)
{
	const uint32_t L = 6, N = 16, S = 24;
	struct moem_rng r;
	struct moem_access_log log;
	uint64_t bh, ba;

	moem_access_log_init(&log, L * N);
	moem_rng_seed(&r, 13, 0);
	for (uint64_t pos = 0; pos < 3000; pos++) {
		uint32_t keys[4], n = 0, m = (uint32_t)(pos % L);

		while (n < 4) {
			/* skewed: low expert ids are popular */
			uint32_t e = moem_rng_below(&r, 1 + moem_rng_below(&r, N));
			bool dup = false;

			for (uint32_t j = 0; j < n; j++)
				dup |= keys[j] == moem_key(m, e, N);
			if (!dup)
				keys[n++] = moem_key(m, e, N);
		}
		ASSERT_EQ(0, moem_access_log_add(&log, keys, n));
	}
	ASSERT_EQ(0, moem_belady(&log, S, 0, &bh, &ba));
	for (int kind = 0; kind < MOEM_EVICT_NR; kind++) {
		struct moem_evict *ev = mk(_metadata, kind, L, N);
		struct moem_tier_budget b;
		uint8_t pin[96] = {0}, res[96] = {0};
		uint64_t hits = 0;

		ASSERT_NE(NULL, ev);
		moem_tier_budget_init(&b, S * 1000);
		for (uint64_t p = 0; p < log.n_pos; p++) {
			for (uint64_t i = log.off[p]; i < log.off[p + 1]; i++)
				pin[log.keys[i]] = 1;
			for (uint64_t i = log.off[p]; i < log.off[p + 1]; i++) {
				uint32_t k = log.keys[i], v;

				if (res[k]) {
					hits++;
					moem_evict_access(ev, k, p);
					continue;
				}
				while (!moem_tier_budget_try_reserve(&b, 1000)) {
					ASSERT_EQ(0,
						  moem_evict_victim(ev, p, 0, not_pinned, pin, &v));
					ASSERT_FALSE(pin[v]);
					moem_evict_remove(ev, v);
					res[v] = 0;
					ASSERT_EQ(0, moem_tier_budget_release(&b, 1000));
				}
				res[k] = 1;
				moem_evict_insert(ev, k, p);
				moem_evict_access(ev, k, p);
				ASSERT_LE(b.used, b.limit);
			}
			for (uint64_t i = log.off[p]; i < log.off[p + 1]; i++)
				pin[log.keys[i]] = 0;
		}
		TH_LOG("%s: %llu hits, Belady %llu of %llu", moem_evict_kind_name(kind),
		       (unsigned long long)hits, (unsigned long long)bh, (unsigned long long)ba);
		EXPECT_LE(hits, bh);
		EXPECT_LE(b.peak, b.limit);
		moem_evict_destroy(ev);
	}
	moem_access_log_free(&log);
}

TEST_HARNESS_MAIN
