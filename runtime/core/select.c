// SPDX-License-Identifier: GPL-2.0-only
/* The first k of n by a key, without sorting (util.h moem_select_top()). */
#include <stdbool.h>

#include <moem/util.h>

/* Whether x ranks before y: the higher key, ties by the lower index (a strict total order). */
static inline bool before(const float *key, uint32_t x, uint32_t y)
{
	return key[x] != key[y] ? key[x] > key[y] : x < y;
}

/*
 * Quickselect with Hoare's partition around the lower middle entry, which
 * leaves both sides of every partition non-empty, so the range shrinks.
 */
void moem_select_top(uint32_t *idx, uint32_t n, uint32_t k, const float *key)
{
	uint32_t lo = 0, hi = n;

	while (lo < k && k < hi) {
		uint32_t p = idx[lo + (hi - lo - 1) / 2], i = lo, j = hi - 1, t;

		for (;;) {
			while (before(key, idx[i], p))
				i++;
			while (before(key, p, idx[j]))
				j--;
			if (i >= j)
				break;
			t = idx[i];
			idx[i++] = idx[j];
			idx[j--] = t;
		}
		/* idx[lo..j] rank no later than p, idx[j + 1..hi) no earlier */
		if (k <= j)
			hi = j + 1;
		else
			lo = j + 1;
	}
}
