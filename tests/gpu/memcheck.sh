#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# compute-sanitizer memcheck over the GPU op tests (all forked children):
# any memory error fails. Skips without compute-sanitizer or a GPU.
B=${MOEM_BUILD:-build}
CS=$(command -v compute-sanitizer 2>/dev/null || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
[ -n "$CS" ] || { echo "SKIP no compute-sanitizer on PATH or in /usr/local/cuda/bin"; exit 4; }
for t in test_gpu_ops test_gpu_decode; do
	"$CS" --tool memcheck --target-processes all --error-exitcode 1 --print-limit 20 \
		"$B/tests/gpu/$t" || exit 1
done
