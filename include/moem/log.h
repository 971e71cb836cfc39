/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Logging for long-running parts (moemd, background workers). Library
 * code logs only state changes a user wants to see ("kmod not loaded:
 * using memfd hugetlb pool"), never errors it also returns.
 */
#ifndef MOEM_LOG_H
#define MOEM_LOG_H

#include "util.h"

enum moem_log_level {
	MOEM_LOG_ERR = 0,
	MOEM_LOG_WARN,
	MOEM_LOG_INFO,
	MOEM_LOG_DEBUG,
};

typedef void (*moem_log_fn)(enum moem_log_level lvl, const char *msg, void *arg);

void moem_log_set_level(enum moem_log_level lvl);
enum moem_log_level moem_log_get_level(void);
/* Parse "err", "warn", "info", "debug"; -EINVAL otherwise. */
int moem_log_level_parse(const char *s, enum moem_log_level *out);
/* Replace the sink (default: stderr with a level prefix). NULL restores it. */
void moem_log_set_sink(moem_log_fn fn, void *arg);
void moem_log(enum moem_log_level lvl, const char *fmt, ...) MOEM_PRINTF(2, 3);

#define moem_err(...)  moem_log(MOEM_LOG_ERR, __VA_ARGS__)
#define moem_warn(...) moem_log(MOEM_LOG_WARN, __VA_ARGS__)
#define moem_info(...) moem_log(MOEM_LOG_INFO, __VA_ARGS__)
#define moem_dbg(...)  moem_log(MOEM_LOG_DEBUG, __VA_ARGS__)

#endif /* MOEM_LOG_H */
