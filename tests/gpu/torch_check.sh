#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Router, top-k and bf16 FFN against PyTorch on the GPU (torch_check.py);
# exit 4 (skip) without python3, torch or a GPU.
B=${MOEM_BUILD:-build}
command -v python3 >/dev/null 2>&1 || { echo "SKIP no python3"; exit 4; }
exec python3 "$(dirname "$0")/torch_check.py" "$B/tests/gpu/dump_ops"
