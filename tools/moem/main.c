// SPDX-License-Identifier: GPL-2.0-only
/* moem: the command-line front end (pack, run, sim, trace, mkmodel, info, ...). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <moem/error.h>

#include "cmd.h"

extern const struct moem_cmd __start_moem_cmds[], __stop_moem_cmds[];

/* The linker brackets the section; count entries by address, not by
 * comparing pointers to two different objects. */
static size_t n_cmds(void)
{
	return ((uintptr_t)__stop_moem_cmds - (uintptr_t)__start_moem_cmds) /
	       sizeof(struct moem_cmd);
}

int moem_tool_fail(const char *cmd, int err, const char *what)
{
	if (what)
		fprintf(stderr, "moem %s: %s: %s\n", cmd, what, moem_strerror(err));
	else
		fprintf(stderr, "moem %s: %s\n", cmd, moem_strerror(err));
	return 1;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: moem <command> [options]   (moem <command> --help)\n\ncommands:\n");
	for (size_t i = 0; i < n_cmds(); i++)
		fprintf(f, "  %-10s %s\n", __start_moem_cmds[i].name, __start_moem_cmds[i].summary);
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
	    !strcmp(argv[1], "help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (size_t i = 0; i < n_cmds(); i++)
		if (!strcmp(__start_moem_cmds[i].name, argv[1]))
			return __start_moem_cmds[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "moem: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
