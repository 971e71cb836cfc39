// SPDX-License-Identifier: GPL-2.0-only
/*
 * Bounded reads of what a user hands a tool (util.h): a file, a FIFO or
 * standard input may be endless (/dev/zero, `yes`), so every read stops
 * at a stated size with a message instead of growing until the machine
 * runs out of memory.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/util.h>

static int too_big(const char *what, size_t max)
{
	char b[32];

	return moem_errf(EFBIG, "%s: larger than %s, the most this reads", what,
			 moem_fmt_bytes(max, b, sizeof(b)));
}

static int line_too_long(const char *what, size_t max)
{
	char b[32];

	return moem_errf(EFBIG, "%s%sa line longer than %s, the most this reads", what ? what : "",
			 what ? ": " : "", moem_fmt_bytes(max, b, sizeof(b)));
}

int moem_read_whole(FILE *f, const char *what, size_t max, char **buf, size_t *len)
{
	size_t n = 0, cap = 0;
	char *b = NULL;

	for (;;) {
		size_t r;

		if (cap - n < 2) {
			size_t ncap = cap ? cap * 2 : 65536;
			char *nb;

			if (ncap > max + 2)
				ncap = max + 2; /* room for one byte past max, and the NUL */
			if (ncap <= cap) {
				free(b);
				return too_big(what, max);
			}
			nb = realloc(b, ncap);
			if (!nb) {
				free(b);
				return moem_errf(ENOMEM, "%s: out of memory after %zu bytes", what,
						 n);
			}
			b = nb;
			cap = ncap;
		}
		r = fread(b + n, 1, cap - n - 1, f);
		n += r;
		if (n > max) {
			free(b);
			return too_big(what, max);
		}
		if (r)
			continue;
		if (ferror(f)) {
			int e = errno ? errno : EIO;

			free(b);
			return moem_errf(e, "%s: %s", what, strerror(e));
		}
		break;
	}
	b[n] = 0;
	*buf = b;
	*len = n;
	return 0;
}

ssize_t moem_getline(char **line, size_t *cap, FILE *f, const char *what, size_t max)
{
	size_t n = 0;

	for (;;) {
		int c;

		if (*cap - n < 2 || !*line) {
			size_t ncap = *cap && *line ? *cap * 2 : 256;
			char *nb;

			if (ncap > max + 2)
				ncap = max + 2;
			if (ncap <= n + 1)
				return line_too_long(what, max);
			nb = realloc(*line, ncap);
			if (!nb)
				return moem_errf(ENOMEM, "%s: out of memory",
						 what ? what : "a line");
			*line = nb;
			*cap = ncap;
		}
		c = getc_unlocked(f);
		if (c == EOF) {
			if (ferror(f)) {
				int e = errno ? errno : EIO;

				return moem_errf(e, "%s: %s", what ? what : "read", strerror(e));
			}
			(*line)[n] = 0;
			return n ? (ssize_t)n : -ENODATA;
		}
		if (n == max)
			return line_too_long(what, max);
		(*line)[n++] = (char)c;
		if (c == '\n') {
			(*line)[n] = 0;
			return (ssize_t)n;
		}
	}
}
