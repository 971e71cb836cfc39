// SPDX-License-Identifier: GPL-2.0-only
/*
 * Belady MIN over a recorded access sequence (policy_evict.h): the
 * offline bound on the hit rate of any demand-paging eviction policy with
 * the same number of uniform slots. O(A log A) for A accesses: next-use
 * indices by a backward scan, then a max-heap of resident keys by next
 * use with lazy deletion.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/policy.h>

void moem_access_log_init(struct moem_access_log *log, uint32_t key_space)
{
	memset(log, 0, sizeof(*log));
	log->key_space = key_space;
}

void moem_access_log_free(struct moem_access_log *log)
{
	free(log->off);
	free(log->keys);
	memset(log, 0, sizeof(*log));
}

int moem_access_log_add(struct moem_access_log *log, const uint32_t *keys, uint32_t n)
{
	if (log->n_pos + 2 > log->pos_cap) {
		uint64_t cap = log->pos_cap ? 2 * log->pos_cap : 1024;
		uint64_t *p = realloc(log->off, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		log->off = p;
		log->pos_cap = cap;
		if (!log->n_pos)
			log->off[0] = 0;
	}
	if (log->n_keys + n > log->keys_cap) {
		uint64_t cap = log->keys_cap ? 2 * log->keys_cap : 65536;
		uint32_t *p;

		while (cap < log->n_keys + n)
			cap *= 2;
		p = realloc(log->keys, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		log->keys = p;
		log->keys_cap = cap;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (keys[i] >= log->key_space)
			return moem_errf(EINVAL, "access log: key %u out of range", keys[i]);
		log->keys[log->n_keys + i] = keys[i];
	}
	log->n_keys += n;
	log->n_pos++;
	log->off[log->n_pos] = log->n_keys;
	return 0;
}

struct hent {
	uint64_t next;
	uint32_t key;
};

static void hpush(struct hent *h, uint64_t *n, struct hent e)
{
	uint64_t i = (*n)++;

	while (i > 0) {
		uint64_t p = (i - 1) / 2;

		if (h[p].next >= e.next)
			break;
		h[i] = h[p];
		i = p;
	}
	h[i] = e;
}

static struct hent hpop(struct hent *h, uint64_t *n)
{
	struct hent top = h[0], e = h[--(*n)];
	uint64_t i = 0;

	for (;;) {
		uint64_t l = 2 * i + 1, m = l;

		if (l >= *n)
			break;
		if (l + 1 < *n && h[l + 1].next > h[l].next)
			m = l + 1;
		if (h[m].next <= e.next)
			break;
		h[i] = h[m];
		i = m;
	}
	if (*n)
		h[i] = e;
	return top;
}

int moem_belady(const struct moem_access_log *log, uint64_t slots, uint64_t count_from,
		uint64_t *hits, uint64_t *accesses)
{
	const uint64_t A = log->n_keys, INF = UINT64_MAX;
	uint64_t *nextuse = NULL, *cur = NULL, *seen = NULL, *stamp = NULL, nh = 0, used = 0;
	uint64_t h = 0, a = 0, stash_n;
	struct hent *heap = NULL;
	uint32_t *stash = NULL;
	uint8_t *res = NULL;
	int ret = 0;

	*hits = *accesses = 0;
	if (!A)
		return 0;
	nextuse = malloc(A * sizeof(*nextuse));
	seen = malloc(log->key_space * sizeof(*seen));
	cur = malloc(log->key_space * sizeof(*cur));
	stamp = malloc(log->key_space * sizeof(*stamp));
	res = calloc(log->key_space, 1);
	/* Each access pushes at most one entry: the heap never exceeds A. */
	heap = malloc(A * sizeof(*heap));
	stash = malloc(log->key_space * sizeof(*stash));
	if (!nextuse || !seen || !cur || !stamp || !res || !heap || !stash) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t k = 0; k < log->key_space; k++) {
		seen[k] = INF;
		stamp[k] = INF;
	}
	for (uint64_t p = log->n_pos; p-- > 0;)
		for (uint64_t i = log->off[p]; i < log->off[p + 1]; i++) {
			nextuse[i] = seen[log->keys[i]];
			seen[log->keys[i]] = p;
		}
	for (uint64_t p = 0; p < log->n_pos; p++) {
		/* Hits first: their next use moves on, and they are pinned this tick. */
		for (uint64_t i = log->off[p]; i < log->off[p + 1]; i++) {
			uint32_t k = log->keys[i];

			stamp[k] = p;
			if (!res[k])
				continue;
			if (p >= count_from)
				h++;
			cur[k] = nextuse[i];
			hpush(heap, &nh, (struct hent){cur[k], k});
		}
		for (uint64_t i = log->off[p]; i < log->off[p + 1]; i++) {
			uint32_t k = log->keys[i];

			if (p >= count_from)
				a++;
			if (res[k] && cur[k] == nextuse[i])
				continue; /* a hit handled above */
			if (!slots)
				continue;
			if (used == slots) {
				struct hent e;

				stash_n = 0;
				for (;;) {
					if (!nh)
						break;
					e = hpop(heap, &nh);
					if (!res[e.key] || cur[e.key] != e.next)
						continue; /* stale */
					if (stamp[e.key] == p) {
						stash[stash_n++] = e.key;
						continue;
					}
					res[e.key] = 0;
					used--;
					break;
				}
				for (uint64_t s = 0; s < stash_n; s++)
					hpush(heap, &nh, (struct hent){cur[stash[s]], stash[s]});
				if (used == slots)
					continue; /* everything resident is pinned: bypass */
			}
			res[k] = 1;
			used++;
			cur[k] = nextuse[i];
			hpush(heap, &nh, (struct hent){cur[k], k});
		}
	}
	*hits = h;
	*accesses = a;
out:
	free(nextuse);
	free(seen);
	free(cur);
	free(stamp);
	free(res);
	free(heap);
	free(stash);
	return ret;
}
