// SPDX-License-Identifier: GPL-2.0-only
/* Grouped expert FFN kernels for q8 weights (ffn.cuh). */
#include "ffn.cuh"

MOEM_FFN_KERNELS(P_Q8, q8)
