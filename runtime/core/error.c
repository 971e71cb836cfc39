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

/*
 * A message cut to fit ends inside a UTF-8 character when a name in it
 * was long: drop the partial character, so that the message can go into
 * JSON (moemd's answers) as it is.
 */
static void trim_utf8(char *s)
{
	size_t n = strlen(s), lead = n, need;
	unsigned char c;

	while (lead > 0 && n - lead < 4 && ((unsigned char)s[lead - 1] & 0xc0) == 0x80)
		lead--;
	if (!lead)
		return;
	c = (unsigned char)s[lead - 1];
	if (c < 0x80)
		return;
	need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
	if (n - (lead - 1) < need)
		s[lead - 1] = 0;
}

void moem_error_save(struct moem_err_saved *s)
{
	memcpy(s->msg, errmsg, sizeof(s->msg));
	s->set = errset;
}

void moem_error_restore(const struct moem_err_saved *s)
{
	memcpy(errmsg, s->msg, sizeof(errmsg));
	errset = s->set;
}

int moem_errf(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
	va_end(ap);
	trim_utf8(errmsg);
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
	trim_utf8(errmsg);
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
