// SPDX-License-Identifier: GPL-2.0-only
/* INI configuration files through libinih (config.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <ini.h>

#include <moem/settings.h>
#include <moem/error.h>

#define MOEM_SETTINGS_MAX (1 << 20)

struct cfg_ctx {
	moem_settings_fn fn;
	void *arg;
	const char *path;
	int err;
	int line;
};

static int on_entry(void *user, const char *section, const char *name, const char *value)
{
	struct cfg_ctx *c = user;
	int ret;

	c->line++;
	/* inih goes on after an error: the first one's message and line stand */
	if (c->err)
		return 0;
	ret = c->fn(c->arg, section, name, value ? value : "");
	if (ret) {
		c->err = ret;
		return 0; /* inih: stop with an error */
	}
	return 1;
}

int moem_settings_load(const char *path, moem_settings_fn fn, void *arg)
{
	struct cfg_ctx c = {fn, arg, path, 0, 0};
	FILE *f = fopen(path, "r");
	struct stat st;
	int r;

	if (!f)
		return moem_errf(errno, "config %s: %s", path, strerror(errno));
	/* a directory read as nothing, /dev/zero as a line without end */
	if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode) || st.st_size > MOEM_SETTINGS_MAX) {
		fclose(f);
		return moem_errf(EINVAL, "config %s: not a regular file of at most %d bytes", path,
				 MOEM_SETTINGS_MAX);
	}
	r = ini_parse_file(f, on_entry, &c);
	fclose(f);
	if (c.err)
		return moem_err_prefix(-c.err, "config %s, line %d", path, r > 0 ? r : c.line);
	if (r > 0)
		return moem_errf(EINVAL, "config %s: syntax error on line %d", path, r);
	if (r < 0)
		return moem_errf(EIO, "config %s: read error", path);
	return 0;
}
