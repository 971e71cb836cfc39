// SPDX-License-Identifier: GPL-2.0-only
/* The quantization error table shared by `moem pack` and `moem info`. */
#include <stdio.h>

#include <moem/pack.h>

#include "qerr_report.h"

int moem_tool_qerr_report(const struct moem_pack *p, uint32_t n_experts, uint32_t n_acts,
			  uint64_t seed, uint32_t threads)
{
	struct moem_qerr q[MOEM_PREC_NR];
	struct moem_synth_params sp;
	int ret;

	ret = moem_pack_quant_error(p, n_experts, n_acts, seed, threads, q);
	if (ret)
		return ret;
	printf("expert FFN output error vs bf16 (%u experts x %u N(0,1) activations, seed "
	       "%llu%s):\n",
	       n_experts, n_acts, (unsigned long long)seed,
	       moem_pack_synth(p, &sp) ? "" : "; synthetic model");
	printf("  %-5s %11s %14s %14s\n", "prec", "bits/weight", "mean rel err", "max rel err");
	for (int i = MOEM_PREC_Q8; i < MOEM_PREC_NR; i++) {
		if (!q[i].samples)
			continue;
		printf("  %-5s %11.3f %14.5f %14.5f\n", moem_prec_name((enum moem_prec)i),
		       moem_prec_bits_per_weight((enum moem_prec)i), q[i].mean_rel, q[i].max_rel);
	}
	return 0;
}
