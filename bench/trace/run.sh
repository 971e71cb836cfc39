#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# The tracing overhead (make bench-trace; results in Documentation/tracing.md).
#  1. bench_probe: one moem:route probe unattached (the semaphore check) and
#     attached (uprobe + BPF program on an 8 x 8 record);
#  2. bench_trace: decode step time of one engine on a synthetic model with
#     Qwen3-30B-A3B's expert shapes (CPU backend, fixed seed), ROUNDS
#     rounds of STEPS steps untraced and STEPS steps with the route tracer
#     and a recorder attached, alternating; medians over all steps.
# Last line: RESULT trace_overhead ratio=<traced/untraced> (target <= 1.01).
# Where tracing is not permitted it says so and prints no RESULT.
#
#   MOEM=build/bin/moem BIN=build/bench/trace OUT=build/bench/trace bench/trace/run.sh
#   ROUNDS (16), STEPS (8), BATCH (1), LAYERS (2), THREADS (0: online CPUs)
set -eu

MOEM=${MOEM:-build/bin/moem}
BIN=${BIN:-build/bench/trace}
OUT=${OUT:-build/bench/trace}
ROUNDS=${ROUNDS:-16}
STEPS=${STEPS:-8}
BATCH=${BATCH:-1}
LAYERS=${LAYERS:-2}
THREADS=${THREADS:-0}

[ -x "$MOEM" ] && [ -x "$BIN/bench_trace" ] || { echo "bench-trace: not built (make)" >&2; exit 1; }
mkdir -p "$OUT"

# Qwen3-30B-A3B's MoE blocks (hidden 2048, expert width 768, 128 experts,
# top-8), LAYERS of them: the probe fires once per layer and the layer's
# compute is the same at any depth, so the ratio does not depend on it.
model=$OUT/qwen3-a3b-l$LAYERS
pack=$model.moem
if [ ! -s "$pack" ]; then
	echo "bench-trace: writing $pack (synthetic, Qwen3-30B-A3B expert shapes)" >&2
	rm -rf "$model"
	"$MOEM" mkmodel --out "$model" --preset qwen3-30b-a3b --layers "$LAYERS" --vocab 4096 \
		--seed 3 >/dev/null
	"$MOEM" pack --model "$model" --out "$pack.tmp" --precisions bf16 --no-report --quiet \
		>/dev/null
	mv "$pack.tmp" "$pack"
	rm -rf "$model"
fi

"$BIN/bench_probe"
rc=0
"$BIN/bench_trace" --pack "$pack" --rounds "$ROUNDS" --steps "$STEPS" --batch "$BATCH" \
	--threads "$THREADS" --trace-out "$OUT/bench.trace" || rc=$?
[ $rc -eq 4 ] && exit 0 # not permitted here: said so
exit $rc
