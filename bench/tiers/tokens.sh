#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# tokens/s at HBM = 100%, 50%, 25% of expert bytes with on-demand LRU
# (no prefetch), DRAM holding the whole model, on a synthetic model with
# Qwen3-30B-A3B expert shapes. Usage: tokens.sh cpu|cuda
# The model and pack are built once under $MOEM_BUILD/bench/tiers.
set -eu
B=${MOEM_BUILD:-build}
backend=${1:-cpu}
dir=${MOEM_BENCH_DIR:-$B/bench}/tiers
moem=$B/bin/moem
mkdir -p "$dir"
if [ ! -f "$dir/q30.moem" ]; then
	rm -rf "$dir/model"
	"$moem" mkmodel --arch qwen3_moe --layers 4 --experts 32 --topk 4 --hidden 2048 \
		--moe-intermediate 768 --seed 7 --out "$dir/model" >/dev/null
	"$moem" pack --model "$dir/model" --out "$dir/q30.moem" --precisions bf16 >/dev/null
	rm -rf "$dir/model"
fi
label=$([ "$backend" = cuda ] && echo "GPU" || echo "emulated HBM tier, CPU backend")
echo "tokens/s vs HBM budget ($label; synthetic Qwen3-30B-A3B expert shapes, 4 layers x 32 experts, top-4, batch 8, LRU on demand)"
printf '%-6s %10s %9s %8s %12s %s\n' HBM tokens/s hit_rate stall% DRAM-\>HBM digest
for pct in 100 50 25; do
	"$moem" run --pack "$dir/q30.moem" --backend "$backend" --hbm "$pct%" --dram 100% \
		--evict lru --prefetch none --batch 8 --steps 12 --seed 3 --json --quiet |
	awk -v pct="$pct" '
	function num(k,   m) { if (match($0, "\"" k "\":[-0-9.e+]+")) { m = substr($0, RSTART, RLENGTH); sub(/.*:/, "", m); return m } return "?" }
	function str(k,   m) { if (match($0, "\"" k "\":\"[^\"]*\"")) { m = substr($0, RSTART, RLENGTH); sub(/.*:"/, "", m); sub(/"$/, "", m); return m } return "?" }
	{ printf "%-6s %10.2f %9.3f %8.1f %12s %s\n", pct "%", num("tokens_per_s"), num("hit_rate"), 100 * num("stall_share"), num("bytes_h2d"), substr(str("digest"), 1, 16) }'
done
