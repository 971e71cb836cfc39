# SPDX-License-Identifier: GPL-2.0-only
#
# Compute backends (runtime/backend/). The CPU backend promises bitwise
# reproducible results and a combine op identical to the CUDA kernel's:
# no a*b+c contraction into FMA on any architecture.
$(O)/runtime/backend/%.o: CFLAGS += -ffp-contract=off
