// SPDX-License-Identifier: GPL-2.0-only
/* Grouped expert FFN kernels for bf16 weights (ffn.cuh). */
#include "ffn.cuh"

MOEM_FFN_KERNELS(P_BF16, bf16)
