#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# The router op has two CUDA kernels, chosen by the device's SM count
# (runtime/compute/cuda/ops.c): the dense projection kernel when the tile
# engine's 16 rows a block would leave SMs idle (every real router on an
# H100), else the tile engine. test_gpu_ops's router test covers the kind
# this device takes; on the kernel emulator, whose SM count MOEM_EMU_SMS
# sets, this runs it again on a one-SM device so that the other kernel is
# checked against the CPU backend too. Skips (exit 4) on a real GPU.
set -u
B=${MOEM_BUILD:-build}
if [ "${MOEM_GPU_EMU:-0}" != 1 ]; then
	echo "SKIP: the SM count is the device's own on a real GPU"
	exit 4
fi
out=$(MOEM_EMU_SMS=1 "$B/tests/gpu/test_gpu_ops" -t router 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || exit 1
# the test ran its shapes (not skipped or filtered away)
echo "$out" | grep -q "router B 1 N 128 H 2048" || exit 1
