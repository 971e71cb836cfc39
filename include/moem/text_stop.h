/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Stop strings over streamed text: what `moem generate` and an OpenAI
 * server's "stop" need. The decoder stops on token-id sequences
 * (decode.h); a stop *string* can start or end in the middle of a token,
 * and the same string has many tokenizations, so it is matched on the
 * text the streaming decoder lets out (moem_tok_stream_push()).
 *
 * The matcher holds back the longest end of the text that could still
 * become a stop string and lets the rest out; once a stop string appears
 * it lets out the text before its earliest occurrence (of any of the
 * strings) and nothing after. What it lets out never contains a stop
 * string, whatever the chunk boundaries, and never ends inside a UTF-8
 * character that the input did not split. Held text is bounded by the
 * longest stop string.
 */
#ifndef MOEM_TEXT_STOP_H
#define MOEM_TEXT_STOP_H

#include <stddef.h>
#include <stdint.h>

#define MOEM_TEXT_STOP_MAX     64   /* stop strings per matcher */
#define MOEM_TEXT_STOP_MAX_LEN 4096 /* bytes per stop string */

/* Flags. */
#define MOEM_TEXT_STOP_KEEP (1u << 0) /* let the matched stop string out too */

struct moem_text_stop;

/*
 * A matcher for stops[0..n) (lens[i] bytes each, or NUL-terminated when
 * lens is NULL); the strings are copied. -EINVAL with a message for an
 * empty string, one longer than MOEM_TEXT_STOP_MAX_LEN, invalid UTF-8,
 * more than MOEM_TEXT_STOP_MAX strings or unknown flags. n may be 0 (a
 * matcher that lets everything out).
 */
int moem_text_stop_new(const char *const *stops, const size_t *lens, uint32_t n, unsigned flags,
		       struct moem_text_stop **out);
void moem_text_stop_free(struct moem_text_stop *s);

/*
 * Add text. *out / *out_len: what may be shown now (valid until the next
 * call on s). Returns 0 while no stop string has appeared, 1 once one has
 * (this call's *out ends where it begins, or after it with
 * MOEM_TEXT_STOP_KEEP; later calls let nothing out and return 1), or
 * -ENOMEM (nothing changed).
 */
int moem_text_stop_feed(struct moem_text_stop *s, const char *text, size_t len, const char **out,
			size_t *out_len);

/* The end of the text: what is still held back (nothing after a match). */
void moem_text_stop_flush(struct moem_text_stop *s, const char **out, size_t *out_len);

/* Which stop string matched (its index in stops[]), or -1. */
int moem_text_stop_matched(const struct moem_text_stop *s);

/* Forget the text so far (a new generation with the same strings). */
void moem_text_stop_reset(struct moem_text_stop *s);

#endif /* MOEM_TEXT_STOP_H */
