// SPDX-License-Identifier: GPL-2.0-only
/*
 * Stop strings over streamed text (openai.h). The filter keeps the
 * longest end of the text that is the start of some stop string and
 * lets out the rest; stop strings are at most MOEM_OAI_STOP_LEN bytes,
 * so what it holds is bounded.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/openai.h>

void moem_oai_stop_init(struct moem_oai_stop *s, char *const *stops, uint32_t n)
{
	memset(s, 0, sizeof(*s));
	s->stops = stops;
	s->n = n;
}

void moem_oai_stop_free(struct moem_oai_stop *s)
{
	free(s->buf);
	memset(s, 0, sizeof(*s));
}

/* How many bytes at the end of buf could begin a stop string. */
static size_t held_suffix(const struct moem_oai_stop *s)
{
	size_t best = 0;

	for (uint32_t i = 0; i < s->n; i++) {
		size_t sl = strlen(s->stops[i]);
		size_t max = sl - 1 < s->len ? sl - 1 : s->len;

		for (size_t k = max; k > best; k--)
			if (!memcmp(s->buf + s->len - k, s->stops[i], k)) {
				best = k;
				break;
			}
	}
	return best;
}

int moem_oai_stop_feed(struct moem_oai_stop *s, const char *text, size_t len, const char **out,
		       size_t *out_len)
{
	size_t first = (size_t)-1, hold;

	/* Forget what the last call let out. */
	if (s->sent) {
		memmove(s->buf, s->buf + s->sent, s->len - s->sent);
		s->len -= s->sent;
		s->sent = 0;
	}
	*out = s->buf;
	*out_len = 0;
	if (s->matched)
		return 1;
	if (s->len + len + 1 > s->cap) {
		size_t cap = (s->len + len + 1) * 2;
		char *b = realloc(s->buf, cap);

		if (!b)
			return -ENOMEM;
		s->buf = b;
		s->cap = cap;
		*out = s->buf;
	}
	memcpy(s->buf + s->len, text, len);
	s->len += len;
	s->buf[s->len] = 0;
	for (uint32_t i = 0; i < s->n; i++) {
		const char *m = memmem(s->buf, s->len, s->stops[i], strlen(s->stops[i]));

		if (m && (size_t)(m - s->buf) < first)
			first = (size_t)(m - s->buf);
	}
	if (first != (size_t)-1) {
		s->matched = true;
		s->len = first;
		s->sent = first;
		*out_len = first;
		return 1;
	}
	hold = held_suffix(s);
	s->sent = s->len - hold;
	*out_len = s->sent;
	return 0;
}

void moem_oai_stop_flush(struct moem_oai_stop *s, const char **out, size_t *out_len)
{
	if (s->sent) {
		memmove(s->buf, s->buf + s->sent, s->len - s->sent);
		s->len -= s->sent;
	}
	s->sent = s->len;
	*out = s->buf ? s->buf : "";
	*out_len = s->matched ? 0 : s->len;
}
