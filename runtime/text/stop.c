// SPDX-License-Identifier: GPL-2.0-only
/*
 * Stop strings over streamed text (text_stop.h). Each stop string has a
 * Knuth-Morris-Pratt automaton whose state is the longest prefix of the
 * string that ends the text so far; bytes are fed one at a time, so the
 * first stop string to be completed wins however the text was chunked
 * (a streaming server stops as soon as one completes), and the text held
 * back is the largest state: nothing that could still become a stop
 * string is let out. Work is linear in the text times the number of
 * strings.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/text_stop.h>
#include <moem/util.h>

#include "tok_int.h"

struct stop_str {
	char *s;
	uint32_t len;
	uint32_t state; /* bytes of s that end the text */
	uint32_t *fail; /* KMP: fail[i] = longest proper border of s[0..i] */
};

struct moem_text_stop {
	struct stop_str *v;
	uint32_t n;
	unsigned flags;
	int matched;
	char *buf; /* text not let out yet, then what the last call let out */
	size_t len, cap;
	size_t sent; /* bytes at the start of buf that the last call let out */
};

void moem_text_stop_free(struct moem_text_stop *s)
{
	if (!s)
		return;
	for (uint32_t i = 0; i < s->n; i++) {
		free(s->v[i].s);
		free(s->v[i].fail);
	}
	free(s->v);
	free(s->buf);
	free(s);
}

static int add_stop(struct stop_str *st, const char *str, size_t len, uint32_t i)
{
	size_t bad;

	if (!len)
		return moem_errf(EINVAL, "stop string %u is empty", i);
	if (len > MOEM_TEXT_STOP_MAX_LEN)
		return moem_errf(EINVAL, "stop string %u has %zu bytes: at most %d", i, len,
				 MOEM_TEXT_STOP_MAX_LEN);
	bad = moem_tok_utf8_invalid_at(str, len);
	if (bad < len)
		return moem_errf(EINVAL, "stop string %u is not valid UTF-8 (byte %zu)", i, bad);
	st->s = malloc(len);
	st->fail = malloc(sizeof(*st->fail) * len);
	if (!st->s || !st->fail)
		return -ENOMEM;
	memcpy(st->s, str, len);
	st->len = (uint32_t)len;
	st->fail[0] = 0;
	for (uint32_t k = 0, j = 1; j < len; j++) {
		while (k && str[j] != str[k])
			k = st->fail[k - 1];
		if (str[j] == str[k])
			k++;
		st->fail[j] = k;
	}
	return 0;
}

int moem_text_stop_new(const char *const *stops, const size_t *lens, uint32_t n, unsigned flags,
		       struct moem_text_stop **out)
{
	struct moem_text_stop *s;
	int ret = 0;

	*out = NULL;
	if (flags & ~MOEM_TEXT_STOP_KEEP)
		return moem_errf(EINVAL, "stop strings: unknown flags %#x", flags);
	if (n > MOEM_TEXT_STOP_MAX)
		return moem_errf(EINVAL, "%u stop strings: at most %d", n, MOEM_TEXT_STOP_MAX);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->flags = flags;
	s->matched = -1;
	s->v = calloc(n ? n : 1, sizeof(*s->v));
	if (!s->v) {
		free(s);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n && !ret; i++) {
		s->n = i + 1;
		ret = add_stop(&s->v[i], stops[i], lens ? lens[i] : strlen(stops[i]), i);
	}
	if (ret) {
		moem_text_stop_free(s);
		return ret;
	}
	*out = s;
	return 0;
}

/* Advance every automaton by c; the index of a string c completes, or -1. */
static int step(struct moem_text_stop *s, char c)
{
	int done = -1;

	for (uint32_t i = 0; i < s->n; i++) {
		struct stop_str *st = &s->v[i];
		uint32_t k = st->state;

		if (k == st->len) /* completed before: continue as after a full match */
			k = st->fail[k - 1];
		while (k && st->s[k] != c)
			k = st->fail[k - 1];
		if (st->s[k] == c)
			k++;
		st->state = k;
		if (k == st->len && done < 0)
			done = (int)i;
	}
	return done;
}

int moem_text_stop_feed(struct moem_text_stop *s, const char *text, size_t len, const char **out,
			size_t *out_len)
{
	size_t hold = 0, start;

	/* Forget what the last call let out. */
	if (s->sent) {
		memmove(s->buf, s->buf + s->sent, s->len - s->sent);
		s->len -= s->sent;
		s->sent = 0;
	}
	*out = s->buf ? s->buf : "";
	*out_len = 0;
	if (s->matched >= 0)
		return 1;
	if (len > SIZE_MAX / 2 - s->len - 1)
		return -ENOMEM;
	if (s->len + len + 1 > s->cap) {
		size_t cap = (s->len + len + 1) * 2;
		char *b = realloc(s->buf, cap);

		if (!b)
			return -ENOMEM;
		s->buf = b;
		s->cap = cap;
	}
	start = s->len;
	memcpy(s->buf + s->len, text, len);
	s->len += len;
	s->buf[s->len] = 0;
	*out = s->buf;
	for (size_t p = start; p < s->len; p++) {
		int m = step(s, s->buf[p]);

		if (m >= 0) {
			size_t end = p + 1;

			s->matched = m;
			if (!(s->flags & MOEM_TEXT_STOP_KEEP))
				end -= s->v[m].len;
			s->len = end;
			s->sent = end;
			*out_len = end;
			return 1;
		}
	}
	for (uint32_t i = 0; i < s->n; i++)
		hold = moem_max(hold, (size_t)s->v[i].state);
	s->sent = s->len - hold;
	*out_len = s->sent;
	return 0;
}

void moem_text_stop_flush(struct moem_text_stop *s, const char **out, size_t *out_len)
{
	if (s->sent) {
		memmove(s->buf, s->buf + s->sent, s->len - s->sent);
		s->len -= s->sent;
	}
	*out = s->buf ? s->buf : "";
	*out_len = s->matched >= 0 ? 0 : s->len;
	s->sent = s->len;
	for (uint32_t i = 0; i < s->n; i++)
		s->v[i].state = 0;
}

int moem_text_stop_matched(const struct moem_text_stop *s)
{
	return s->matched;
}

void moem_text_stop_reset(struct moem_text_stop *s)
{
	s->len = 0;
	s->sent = 0;
	s->matched = -1;
	for (uint32_t i = 0; i < s->n; i++)
		s->v[i].state = 0;
}
