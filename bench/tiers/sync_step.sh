#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Decode step time with every expert in HBM: MoE layers planned on the
# device (one host synchronisation per step, Documentation/backends.md)
# against the per-layer path (MOEM_DEVICE_PLAN=0: the router's picks read
# back and planned on the host, a synchronisation per MoE layer), in the
# same run, on a synthetic model with Qwen3-30B-A3B expert shapes (8 MoE
# layers x 32 experts, top-4, batch 1). Usage: sync_step.sh cpu|cuda
# (on the CPU backend both rows take the per-layer path). The device
# row runs its steps as CUDA graphs (Documentation/engine.md, "CUDA
# graphs"); the no-graphs row is the same device plan with plain launches
# (MOEM_CUDA_GRAPHS=0), so the two rows give what the graphs save. The
# model and pack are built once under $MOEM_BUILD/bench/tiers.
set -eu
B=${MOEM_BUILD:-build}
backend=${1:-cpu}
dir=${MOEM_BENCH_DIR:-$B/bench}/tiers
moem=$B/bin/moem
mkdir -p "$dir"
if [ ! -f "$dir/q30d.moem" ]; then
	rm -rf "$dir/model-d"
	"$moem" mkmodel --arch qwen3_moe --layers 8 --experts 32 --topk 4 --hidden 2048 \
		--moe-intermediate 768 --seed 7 --out "$dir/model-d" >/dev/null
	"$moem" pack --model "$dir/model-d" --out "$dir/q30d.moem" --precisions bf16 >/dev/null
	rm -rf "$dir/model-d"
fi
label=$([ "$backend" = cuda ] && echo "GPU" || echo "CPU backend: no device plan")
echo "decode step, every expert in HBM ($label; synthetic Qwen3-30B-A3B expert shapes, 8 layers x 32 experts, top-4, batch 1, 48 new tokens)"
printf '%-14s %14s %12s %13s %12s\n' plan median_step_ms tokens/s device_steps graph_steps
# Every expert in HBM means an HBM budget of the experts' bytes (8 x 32 x
# 9 MiB = 2304 MiB) plus the KV pool, which on CUDA comes out of the same
# budget: with --hbm 100% and the default pool (up to half the budget)
# the experts got about 60% and no step was ever planned on the device
# (the H200 run of 27d8500 printed device_steps 0 on both rows).
run() {
	env "$@" "$moem" decode --pack "$dir/q30d.moem" --backend "$backend" --tokens 5,17,300,42 \
		--max-new 48 --no-model-eos --json --quiet --hbm 2368M --kv-bytes 64M
}
num() { echo "$1" | sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p" | head -1; }
dev=$(run MOEM_DEVICE_PLAN=1)
nog=$(run MOEM_DEVICE_PLAN=1 MOEM_CUDA_GRAPHS=0)
host=$(run MOEM_DEVICE_PLAN=0)
dm=$(num "$dev" median_decode_step_ms) hm=$(num "$host" median_decode_step_ms)
nm=$(num "$nog" median_decode_step_ms)
row() {
	printf '%-14s %14.3f %12.2f %13s %12s\n' "$1" "$(num "$2" median_decode_step_ms)" \
		"$(num "$2" decode_tokens_per_s)" "$(num "$2" device_steps)" "$(num "$2" graph_steps)"
}
row device "$dev"
row device-plain "$nog"
row per-layer "$host"
# Both rows take the same path on the CPU backend: no result to record.
[ "$backend" = cuda ] || exit 0
ds=$(num "$dev" device_steps)
if [ "${ds:-0}" -eq 0 ]; then
	echo "sync_step: the device row planned no step on the device: it would time the" \
		"per-layer path twice" >&2
	exit 1
fi
echo "RESULT decode_step_ms_device_plan=$dm"
echo "RESULT decode_step_ms_device_plan_no_graphs=$nm"
echo "RESULT decode_graph_steps=$(num "$dev" graph_steps)"
echo "RESULT decode_step_ms_per_layer=$hm"
awk -v d="$dm" -v h="$hm" 'BEGIN { if (d > 0) printf "RESULT decode_step_per_layer_over_device=%.3f\n", h / d }'
awk -v g="$dm" -v n="$nm" 'BEGIN { if (g > 0) printf "RESULT decode_step_no_graphs_over_graphs=%.3f\n", n / g }'
