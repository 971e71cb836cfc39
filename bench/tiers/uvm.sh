#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# UVM (managed memory paged by the driver, with and without moem's
# prefetch policy driving cuMemPrefetchAsync) against moem's VMM staging
# at the same HBM budget, 25% of the expert bytes, DRAM holding the whole
# model: bench_uvm on the synthetic Qwen3-30B-A3B-shaped pack tokens.sh
# builds (made here if absent). --smoke: a tiny model and two steps, to
# prove the run on the kernel emulator. Usage: uvm.sh [--smoke] cuda
set -eu
B=${MOEM_BUILD:-build}
smoke=0
[ "${1:-}" = --smoke ] && { smoke=1; shift; }
[ "${1:-cuda}" = cuda ] || { echo "uvm.sh: UVM needs the CUDA backend"; exit 2; }
dir=${MOEM_BENCH_DIR:-$B/bench}/tiers
moem=$B/bin/moem
mkdir -p "$dir"
if [ $smoke = 1 ]; then
	pack=$dir/uvm-smoke.moem
	if [ ! -f "$pack" ]; then
		rm -rf "$dir/uvm-smoke"
		"$moem" mkmodel --arch qwen3_moe --layers 2 --experts 8 --topk 2 --hidden 256 \
			--moe-intermediate 128 --seed 7 --out "$dir/uvm-smoke" >/dev/null
		"$moem" pack --model "$dir/uvm-smoke" --out "$pack" --precisions bf16 >/dev/null
		rm -rf "$dir/uvm-smoke"
	fi
	exec "$B/bench/tiers/bench_uvm" --pack "$pack" --hbm 25% --batch 4 --steps 2
fi
pack=$dir/q30.moem
if [ ! -f "$pack" ]; then
	rm -rf "$dir/model"
	"$moem" mkmodel --arch qwen3_moe --layers 4 --experts 32 --topk 4 --hidden 2048 \
		--moe-intermediate 768 --seed 7 --out "$dir/model" >/dev/null
	"$moem" pack --model "$dir/model" --out "$pack" --precisions bf16 >/dev/null
	rm -rf "$dir/model"
fi
exec "$B/bench/tiers/bench_uvm" --pack "$pack" --hbm 25% --batch 8 --steps 24
