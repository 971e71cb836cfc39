#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# The DRAM tier's eviction rules (moem run --dram-evict) against the HBM
# policy, on the demo model (Documentation/tiers.md, "The DRAM tier"):
# qwen3_moe 4 layers x 32 experts, top-4, Qwen3-30B-A3B expert shapes,
# packed bf16,q4; CPU backend, emulated HBM at 40% of expert bytes, DRAM
# at 50%, batch 8, no prefetch (so the bytes are deterministic). Prints a
# Markdown table of MB per step: NVMe -> DRAM, DRAM -> HBM and HBM -> DRAM
# copied back (exclusive DRAM, the cost model's call), and tokens/s.
# Usage: dram.sh (the model is built once under $MOEM_BUILD/bench/tiers).
set -eu
B=${MOEM_BUILD:-build}
dir=${MOEM_BENCH_DIR:-$B/bench}/tiers
moem=$B/bin/moem
steps=${DRAM_BENCH_STEPS:-20}
mkdir -p "$dir"
if [ ! -f "$dir/demo.moem" ]; then
	rm -rf "$dir/demo"
	"$moem" mkmodel --arch qwen3_moe --layers 4 --experts 32 --topk 4 --hidden 2048 \
		--moe-intermediate 768 --seed 1 --out "$dir/demo" >/dev/null
	"$moem" pack --model "$dir/demo" --out "$dir/demo.moem.tmp" --precisions bf16,q4 >/dev/null
	mv "$dir/demo.moem.tmp" "$dir/demo.moem"
	rm -rf "$dir/demo"
fi
echo "| \`--evict\` | \`--dram-evict\` | NVMe -> DRAM MB/step | DRAM -> HBM MB/step | copied back MB/step | tokens/s |"
echo "| --- | --- | ---: | ---: | ---: | ---: |"
for ev in lru pred; do
	for dr in lru policy hbm-first; do
		"$moem" run --pack "$dir/demo.moem" --backend cpu --cpu-threads 2 --hbm 40% \
			--dram 50% --batch 8 --steps "$steps" --evict "$ev" --dram-evict "$dr" \
			--prefetch none --json --quiet |
			/usr/bin/python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
s = r["steps"]
nv, h2d, d2h = (r[k] / s / 1e6 for k in ("bytes_nvme", "bytes_h2d", "bytes_d2h"))
tps = r["tokens_per_s"]
print(f"| {sys.argv[1]} | {sys.argv[2]} | {nv:.1f} | {h2d:.1f} | {d2h:.1f} | {tps:.1f} |")' "$ev" "$dr"
	done
done
