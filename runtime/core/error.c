// SPDX-License-Identifier: GPL-2.0-only
/* Per-thread error messages behind the -errno convention (error.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <moem/error.h>

#define MOEM_ERRMSG_MAX 512

static __thread char errmsg[MOEM_ERRMSG_MAX];
static __thread int errset;

int moem_errf(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
	va_end(ap);
	errset = 1;
	return -err;
}

int moem_err_prefix(int err, const char *fmt, ...)
{
	char prefix[MOEM_ERRMSG_MAX], old[MOEM_ERRMSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	snprintf(old, sizeof(old), "%s", errset ? errmsg : strerror(err));
	snprintf(errmsg, sizeof(errmsg), "%s: %s", prefix, old);
	errset = 1;
	return -err;
}

const char *moem_last_error(void)
{
	return errset ? errmsg : "no error recorded";
}

void moem_clear_error(void)
{
	errset = 0;
	errmsg[0] = 0;
}

const char *moem_strerror(int err)
{
	if (err < 0)
		err = -err;
	return errset ? errmsg : strerror(err);
}
