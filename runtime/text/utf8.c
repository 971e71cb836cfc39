// SPDX-License-Identifier: GPL-2.0-only
/* UTF-8 checks, decoding and the lossy conversion decoders end with. */
#include <errno.h>

#include "tok_int.h"

/* Length of the valid sequence at s[0..len), or 0 if it is not one. */
static size_t valid_seq(const unsigned char *s, size_t len)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	size_t n;

	if (c < 0x80)
		return 1;
	if (c < 0xc2 || c > 0xf4)
		return 0;
	n = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (len < n || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return n;
}

size_t moem_tok_utf8_invalid_at(const char *str, size_t len)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;

	while (i < len) {
		size_t n;

		if (s[i] < 0x80) {
			i++;
			continue;
		}
		n = valid_seq(s + i, len - i);
		if (!n)
			return i;
		i += n;
	}
	return len;
}

uint32_t moem_tok_utf8_get(const char *str, size_t *n)
{
	const unsigned char *s = (const unsigned char *)str;

	if (s[0] < 0x80) {
		*n = 1;
		return s[0];
	}
	if (s[0] < 0xe0) {
		*n = 2;
		return (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
	}
	if (s[0] < 0xf0) {
		*n = 3;
		return (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
	}
	*n = 4;
	return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 |
	       (uint32_t)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
}

size_t moem_tok_utf8_put(uint32_t cp, char out[4])
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | cp >> 12);
		out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | cp >> 18);
	out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* How many bytes of s form the start of a valid sequence (the maximal subpart). */
static size_t maximal_subpart(const unsigned char *s, size_t len)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	size_t n, i;

	if (c < 0xc2 || c > 0xf4)
		return 1;
	n = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (len < 2 || s[1] < lo || s[1] > hi)
		return 1;
	for (i = 2; i < n && i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			break;
	return i;
}

int moem_tok_utf8_lossy(struct tok_buf *out, const unsigned char *s, size_t len)
{
	static const char fffd[3] = {(char)0xef, (char)0xbf, (char)0xbd};
	size_t i = 0, run = 0;
	int ret;

	if (!len)
		return 0; /* s may be NULL (an empty token's text) */
	while (i < len) {
		size_t n = s[i] < 0x80 ? 1 : valid_seq(s + i, len - i);

		if (n) {
			i += n;
			run += n;
			continue;
		}
		ret = moem_tok_buf_put(out, s + i - run, run);
		if (ret)
			return ret;
		run = 0;
		ret = moem_tok_buf_put(out, fffd, sizeof(fffd));
		if (ret)
			return ret;
		i += maximal_subpart(s + i, len - i);
	}
	return moem_tok_buf_put(out, s + i - run, run);
}

bool moem_tok_is_space(uint32_t cp)
{
	return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 ||
	       cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
	       cp == 0x202f || cp == 0x205f || cp == 0x3000;
}
