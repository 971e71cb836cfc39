// SPDX-License-Identifier: GPL-2.0-only
/* moem: the command-line front end (pack, run, sim, trace, mkmodel, info, ...). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <moem/error.h>
#include <moem/version.h>

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
	const char *msg = moem_strerror(err);

	/* Say a path once: most messages already start with it. */
	if (what && !strstr(msg, what))
		fprintf(stderr, "moem %s: %s: %s\n", cmd, what, msg);
	else
		fprintf(stderr, "moem %s: %s\n", cmd, moem_strerror(err));
	return 1;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: moem <command> [options]   (moem <command> --help)\n"
		   "Pack, run, simulate and trace Mixture-of-Experts models whose experts do not\n"
		   "fit in GPU memory (moemd serves them; moemctl talks to moemd).\n\ncommands:\n");
	for (size_t i = 0; i < n_cmds(); i++)
		/* two spaces at least: help2man splits the man page's list on them */
		fprintf(f, "  %-11s %s\n", __start_moem_cmds[i].name, __start_moem_cmds[i].summary);
	fprintf(f, "\n  --version  the version of moem\n");
}

/*
 * A command's output that did not reach stdout (a full disk, a closed
 * pipe's reader gone) is a failure, whatever the command made of it.
 */
static int finish(const char *cmd, int rc)
{
	if (fflush(stdout) || ferror(stdout)) {
		fprintf(stderr, "moem %s: writing the output: %s\n", cmd,
			strerror(errno ? errno : EIO));
		return rc ? rc : 1;
	}
	return rc;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))) {
		printf("moem %s\n", MOEM_VERSION);
		return 0;
	}
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
	    !strcmp(argv[1], "help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (size_t i = 0; i < n_cmds(); i++)
		if (!strcmp(__start_moem_cmds[i].name, argv[1]))
			return finish(argv[1], __start_moem_cmds[i].fn(argc - 1, argv + 1));
	fprintf(stderr, "moem: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
