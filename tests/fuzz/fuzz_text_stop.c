// SPDX-License-Identifier: GPL-2.0-only
/*
 * libFuzzer harness for the stop-string matcher (text_stop.h): stop
 * strings from the input (a server takes them from requests), then text
 * fed in chunks whose sizes also come from the input. Whatever the
 * chunking, what comes out must be the text before the first stop string
 * to complete (brute force), or all of it when none does.
 *
 * Input: n (1..4), then n times (len 1..16, bytes), then a chunk-size
 * byte, then the text.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <moem/text_stop.h>

static size_t first_end(const uint8_t *t, size_t len, char **stops, const size_t *sl, int n,
			int *which)
{
	for (size_t e = 1; e <= len; e++)
		for (int i = 0; i < n; i++)
			if (sl[i] <= e && !memcmp(t + e - sl[i], stops[i], sl[i])) {
				*which = i;
				return e;
			}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *stops[4] = {0}, *got;
	size_t sl[4], at = 1, glen = 0, chunk, e;
	struct moem_text_stop *s;
	int n, which = -1, ret = 0;

	if (size < 2)
		return 0;
	n = 1 + data[0] % 4;
	for (int i = 0; i < n; i++) {
		if (at >= size)
			goto out;
		sl[i] = 1 + data[at++] % 16;
		if (at + sl[i] > size)
			goto out;
		stops[i] = malloc(sl[i]);
		if (!stops[i])
			goto out;
		memcpy(stops[i], data + at, sl[i]);
		at += sl[i];
	}
	if (at >= size)
		goto out;
	chunk = 1 + data[at++] % 7;
	if (moem_text_stop_new((const char *const *)stops, sl, (uint32_t)n, 0, &s))
		goto out; /* invalid UTF-8 in a stop string: refused */
	got = malloc(size - at + 1);
	if (!got)
		abort();
	for (size_t p = at; p < size && ret == 0; p += chunk) {
		size_t c = size - p < chunk ? size - p : chunk, ol;
		const char *o;

		ret = moem_text_stop_feed(s, (const char *)data + p, c, &o, &ol);
		if (ret < 0)
			abort();
		memcpy(got + glen, o, ol);
		glen += ol;
	}
	if (!ret) {
		const char *o;
		size_t ol;

		moem_text_stop_flush(s, &o, &ol);
		memcpy(got + glen, o, ol);
		glen += ol;
	}
	e = first_end(data + at, size - at, stops, sl, n, &which);
	if (e ? (ret != 1 || glen != e - sl[which] || moem_text_stop_matched(s) != which)
	      : (ret != 0 || glen != size - at))
		abort();
	if (memcmp(got, data + at, glen))
		abort();
	free(got);
	moem_text_stop_free(s);
out:
	for (int i = 0; i < 4; i++)
		free(stops[i]);
	return 0;
}
