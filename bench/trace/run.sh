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
# Where tracing is not permitted it says so and prints no RESULT (and
# writes no page). DOC=path also writes the page
# (Documentation/benchmarks/trace.md): machine, date, command, the output.
#
#   MOEM=build/bin/moem BIN=build/bench/trace OUT=build/bench/trace bench/trace/run.sh
#   ROUNDS (16), STEPS (8), BATCH (1), LAYERS (2), THREADS (0: online CPUs)
set -eu -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../page.sh"
page_begin

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

"$BIN/bench_probe" | tee "$OUT/probe.txt"
rc=0
"$BIN/bench_trace" --pack "$pack" --rounds "$ROUNDS" --steps "$STEPS" --batch "$BATCH" \
	--threads "$THREADS" --trace-out "$OUT/bench.trace" | tee "$OUT/trace.txt" || rc=$?
[ $rc -eq 4 ] && exit 0 # not permitted here: said so
[ $rc -eq 0 ] || exit $rc
[ -n "${DOC:-}" ] || exit 0
{
	page_head "Tracing overhead (synthetic)" "make bench-trace DOC=$DOC" bench/trace/run.sh
	echo "- run: $ROUNDS rounds x $STEPS steps each way, batch $BATCH, $LAYERS MoE layers" \
		"(Qwen3-30B-A3B expert shapes: hidden 2048, width 768, 128 experts, top-8)," \
		"CPU backend, threads $THREADS (0: every online CPU)"
	echo
	echo "What each line measures is in Documentation/tracing.md (\"Overhead\")."
	echo "*probe unattached*: one \`moem:route\` probe site with no tracer, against the same" \
		"call without the probe (the semaphore check). *probe attached*: the uprobe trap and" \
		"the BPF program counting into \`moem_hot\`, then also copying the record into the" \
		"ring buffer, drained as \`moem trace record\` does. *trace_overhead*: the median" \
		"decode step with the route tracer and a recorder attached over the median step" \
		"without, rounds alternating (target <= 1.01). The probe fires once per MoE layer" \
		"and step, so a 48-layer step pays 48 attached probes."
	echo
	echo '```'
	cat "$OUT/probe.txt"
	cat "$OUT/trace.txt"
	echo '```'
} | page_commit "$DOC"
