// SPDX-License-Identifier: GPL-2.0-only
/* INI configuration files through libinih (config.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <ini.h>

#include <moem/settings.h>
#include <moem/error.h>

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
	int r;

	if (!f)
		return moem_errf(errno, "config %s: %s", path, strerror(errno));
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
