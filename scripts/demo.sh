#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# The quick start's main job (make demo). At this stage: open the staging
# pool with the embedded defaults (userspace provider unless moem.ko is
# loaded) and report what served it; write a synthetic model with
# Qwen3-30B-A3B expert shapes and pack it.
set -eu
B=${MOEM_BUILD:-build}
echo "== moem demo: staging pool"
"$B/bin/moem" pool --size 256M

# A synthetic checkpoint (Documentation/synthetic-models.md) and its pack.
D=${MOEM_DEMO_DIR:-$B/demo}
mkdir -p "$D"
rm -rf "$D/model" "$D/model.moem"
echo "== moem demo: synthetic model, Qwen3-30B-A3B expert shapes, 4 layers x 32 experts, top-4"
"$B/bin/moem" mkmodel --arch qwen3_moe --layers 4 --experts 32 --topk 4 --hidden 2048 \
	--moe-intermediate 768 --seed 1 --out "$D/model"
echo "== moem demo: pack (bf16 + q4)"
"$B/bin/moem" pack --model "$D/model" --out "$D/model.moem" --precisions bf16,q4
"$B/bin/moem" info "$D/model.moem"
