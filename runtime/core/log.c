// SPDX-License-Identifier: GPL-2.0-only
/* Leveled logging with a replaceable sink (log.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <moem/log.h>

static enum moem_log_level log_level = MOEM_LOG_INFO;
static moem_log_fn log_sink;
static void *log_sink_arg;

static const char *const level_names[] = {"err", "warn", "info", "debug"};

void moem_log_set_level(enum moem_log_level lvl)
{
	log_level = lvl;
}

enum moem_log_level moem_log_get_level(void)
{
	return log_level;
}

int moem_log_level_parse(const char *s, enum moem_log_level *out)
{
	for (size_t i = 0; i < MOEM_ARRAY_SIZE(level_names); i++) {
		if (!strcmp(s, level_names[i])) {
			*out = (enum moem_log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

void moem_log_set_sink(moem_log_fn fn, void *arg)
{
	log_sink = fn;
	log_sink_arg = arg;
}

void moem_log(enum moem_log_level lvl, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	if (lvl > log_level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (log_sink)
		log_sink(lvl, msg, log_sink_arg);
	else
		fprintf(stderr, "moem: %s: %s\n", level_names[lvl], msg);
}
