/* SPDX-License-Identifier: GPL-2.0-only */
/* `moem trace record|top|pool` (cmd_trace_bpf.c), dispatched by cmd_trace.c. */
#ifndef MOEM_TOOL_CMD_TRACE_BPF_H
#define MOEM_TOOL_CMD_TRACE_BPF_H

/* argv[0] is the subcommand's name; each returns the exit status. */
int cmd_trace_record(int argc, char **argv);
int cmd_trace_top(int argc, char **argv);
int cmd_trace_pool(int argc, char **argv);

#endif /* MOEM_TOOL_CMD_TRACE_BPF_H */
