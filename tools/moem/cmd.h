/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Subcommands of the `moem` tool. Each lives in its own cmd_<name>.c and
 * registers itself with MOEM_CMD(); main.c finds them through the linker
 * section, so adding a command touches no shared file.
 */
#ifndef MOEM_TOOL_CMD_H
#define MOEM_TOOL_CMD_H

struct moem_cmd {
	const char *name;
	const char *summary;
	int (*fn)(int argc, char **argv); /* argv[0] is the command name */
};

#define MOEM_CMD(var, nm, sum, f)                                                        \
	static const struct moem_cmd var                                                 \
		__attribute__((used, section("moem_cmds"), aligned(sizeof(void *)))) = { \
			.name = nm, .summary = sum, .fn = f}

/* Print "moem <cmd>: <message>" for a library error and return exit status 1. */
int moem_tool_fail(const char *cmd, int err, const char *what);

#endif /* MOEM_TOOL_CMD_H */
