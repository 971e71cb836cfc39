/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Error reporting. Every libmoem function that can fail returns a negative
 * errno and never exits or prints. Where the errno alone would not tell a
 * user what is wrong ("tensor model.layers.3.mlp.gate.weight: offsets
 * [100, 200) overlap ..."), the function also records a message for the
 * calling thread with moem_errf(); tools print it with moem_last_error().
 * The message belongs to the most recent failure on this thread.
 */
#ifndef MOEM_ERROR_H
#define MOEM_ERROR_H

#include "util.h"

/* Record a message for this thread and return -err (err > 0). */
int moem_errf(int err, const char *fmt, ...) MOEM_PRINTF(2, 3);

/*
 * Prefix the current message with "prefix: " (context added by a caller
 * on the way up); returns -err unchanged for tail calls.
 */
int moem_err_prefix(int err, const char *fmt, ...) MOEM_PRINTF(2, 3);

/* The last message on this thread, or strerror(-err) if none was set. */
const char *moem_last_error(void);

/* Forget the message (call before an operation whose message you print). */
void moem_clear_error(void);

/* The message if set, else strerror(err): for "tool: %s" output. */
const char *moem_strerror(int err);

/*
 * The thread's message kept across cleanup that may record its own (a
 * cancel after a failed step would otherwise replace the step's reason
 * with "no sequence N").
 */
struct moem_err_saved {
	char msg[512];
	int set;
};
void moem_error_save(struct moem_err_saved *s);
void moem_error_restore(const struct moem_err_saved *s);

#endif /* MOEM_ERROR_H */
