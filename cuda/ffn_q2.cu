// SPDX-License-Identifier: GPL-2.0-only
/* Grouped expert FFN kernels for q2 weights (ffn.cuh). */
#include "ffn.cuh"

MOEM_FFN_KERNELS(P_Q2, q2)
