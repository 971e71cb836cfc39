/* SPDX-License-Identifier: GPL-2.0-only */
/* The quantization error table printed by `moem pack` and `moem info --quant-error`. */
#ifndef MOEM_TOOL_QERR_REPORT_H
#define MOEM_TOOL_QERR_REPORT_H

#include <stdint.h>

struct moem_pack;

/* Measure and print; returns 0 or a negative errno (message set). */
int moem_tool_qerr_report(const struct moem_pack *p, uint32_t n_experts, uint32_t n_acts,
			  uint64_t seed, uint32_t threads);

#endif /* MOEM_TOOL_QERR_REPORT_H */
