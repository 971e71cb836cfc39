#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Hybrid CPU/GPU expert execution end to end: `moem run` tokens/s,
# transfer-only (--exec gpu) against hybrid (--exec hybrid), at 25% HBM,
# batch 1 and 8, on a generated model with Qwen3-30B-A3B's expert shape
# (2048 x 768, bf16, 9 MiB per expert; LAYERS MoE layers of EXPERTS
# experts, top-8). Each cell is the median of REPS runs, the two modes
# alternating so that both see the same machine. Writes its section of
# Documentation/benchmarks/hybrid.md (between the "moem run" markers;
# bench/sim/hybrid.sh writes the rest and runs this script at its end).
# SYNTHETIC: generated weights and routing.
#
# Without a GPU (BACKEND=cpu, the default here) the "device" side is the
# CPU backend too and the link an emulated one (--link-gbps, default 25):
# the expert FFNs run on the same CPU either way, and what hybrid saves is
# the copies of the experts it computes from DRAM instead.
#
# With BACKEND=cuda (the GPU bundle's hybrid_run phase) `moem calibrate`
# runs first, as a user would: the runs read its cache and give the cost
# model the link it measured.
#
#   bench/sim/hybrid_run.sh           (make bench-hybrid-run)
#   MOEM=build/bin/moem OUT=build/bench/hybrid DOC=Documentation/benchmarks BACKEND=cuda
set -eu

MOEM=${MOEM:-build/bin/moem}
OUT=${OUT:-build/bench/hybrid}
DOC=${DOC:-Documentation/benchmarks}
BACKEND=${BACKEND:-cpu}
LINK=${LINK:-25}
LAYERS=${LAYERS:-2}
EXPERTS=${EXPERTS:-32}
REPS=${REPS:-5}
STEPS_B1=${STEPS_B1:-32}
STEPS_B8=${STEPS_B8:-16}
RES=$DOC/hybrid.md
BEGIN="<!-- moem run: begin (bench/sim/hybrid_run.sh) -->"
END="<!-- moem run: end -->"

mkdir -p "$OUT" "$DOC"
[ -x "$MOEM" ] || { echo "bench-hybrid-run: $MOEM not built (make)" >&2; exit 1; }

# On a GPU, what a user does first: `moem calibrate` measures this CPU's
# kernels and the host->device link; the runs read its cache and give the
# cost model the measured link. Without one, reproducible figures: the
# CPU measured at open, the emulated link's speed.
CAL=none
if [ "$BACKEND" = cuda ]; then
	echo "bench-hybrid-run: moem calibrate" >&2
	"$MOEM" calibrate --out "$OUT/cal.json" --precisions bf16 --json >"$OUT/cal.out"
	LINK=$(sed -n 's/.*"h2d_gbps":\([0-9.e+-]*\).*/\1/p' "$OUT/cal.out" |
		awk '{ printf "%.2f", $1 }')
	[ -n "$LINK" ] || { echo "bench-hybrid-run: no link figure from moem calibrate" >&2; exit 1; }
	CAL=$OUT/cal.json
fi

echo "bench-hybrid-run: generating the model" >&2
rm -rf "$OUT/run-model" "$OUT/run.moem"
"$MOEM" mkmodel --arch qwen3_moe --layers "$LAYERS" --experts "$EXPERTS" --topk 8 \
	--hidden 2048 --moe-intermediate 768 --seed 7 --out "$OUT/run-model" >/dev/null 2>&1
"$MOEM" pack --model "$OUT/run-model" --out "$OUT/run.moem" --precisions bf16 >/dev/null 2>&1
rm -rf "$OUT/run-model"

# One run: "tokens_per_s cpu_experts active bytes_h2d steps cpu_gbps"; its
# JSON line is kept in $OUT/run-TAG.jsonl (TAG: x or h, and the batch).
one() { # tag batch steps extra options...
	tag=$1
	b=$2
	n=$3
	shift 3
	"$MOEM" run --pack "$OUT/run.moem" --backend "$BACKEND" --hbm 25% --batch "$b" \
		--steps "$n" --link-gbps "$LINK" --calibration "$CAL" --json --quiet "$@" |
		tee -a "$OUT/run-$tag.jsonl" | tr ',' '\n' | awk -F':' '
		/"tokens_per_s"/ { t = $2 } /"cpu_experts"/ { c = $2 } /"hits"/ { h = $2 }
		/"misses"/ { m = $2 } /"fallbacks"/ { f = $2 } /"bytes_h2d"/ { x = $2 }
		/"steps"/ { s = $2 } /"cpu_gbps"/ { g = $2 }
		END { printf "%s %d %d %s %s %s\n", t, c, c + h + m + f, x, s, g }'
}

# The median line (by tokens/s) of what is on stdin.
median() { sort -g | awk '{ l[NR] = $0 } END { print l[int((NR + 1) / 2)] }'; }

# Where the engine thread's time went (moem run's phase_ns, engine.h
# moem_phase), ms per step over every run of a mode: one table row.
PHASES="route policy split acquire lookahead launch cpu wait combine after"
phase_row() { # label batch jsonl
	awk -v label="$1" -v b="$2" -v names="$PHASES" '
		{
			if (match($0, /"phase_ns":\{[^}]*\}/)) {
				n = split(substr($0, RSTART + 12, RLENGTH - 13), kv, ",")
				for (i = 1; i <= n; i++) {
					split(kv[i], p, ":")
					gsub(/"/, "", p[1])
					ph[p[1]] += p[2]
					all += p[2]
				}
			}
			if (match($0, /"steps":[0-9]+/))
				steps += substr($0, RSTART + 8, RLENGTH - 8)
			if (match($0, /"step_ns":[0-9]+/))
				total += substr($0, RSTART + 10, RLENGTH - 10)
		}
		END {
			if (!steps)
				exit
			printf "| %d | %s |", b, label
			k = split(names, nm, " ")
			for (i = 1; i <= k; i++)
				printf " %.3f |", ph[nm[i]] / steps / 1e6
			printf " %.3f | %.3f |\n", (total - all) / steps / 1e6, total / steps / 1e6
		}' "$3"
}

rows=""
phases=""
for b in 1 8; do
	n=$STEPS_B1
	[ "$b" = 8 ] && n=$STEPS_B8
	: >"$OUT/run-x$b" && : >"$OUT/run-h$b"
	: >"$OUT/run-x$b.jsonl" && : >"$OUT/run-h$b.jsonl"
	r=0
	while [ "$r" -lt "$REPS" ]; do
		echo "bench-hybrid-run: batch $b, run $((r + 1)) of $REPS" >&2
		one "x$b" "$b" "$n" >>"$OUT/run-x$b"
		one "h$b" "$b" "$n" --exec hybrid >>"$OUT/run-h$b"
		r=$((r + 1))
	done
	phases="$phases$(phase_row transfer-only "$b" "$OUT/run-x$b.jsonl")\n"
	phases="$phases$(phase_row hybrid "$b" "$OUT/run-h$b.jsonl")\n"
	x=$(median <"$OUT/run-x$b")
	h=$(median <"$OUT/run-h$b")
	xr=$(sort -g "$OUT/run-x$b" | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.1f-%.1f", lo, hi }')
	hr=$(sort -g "$OUT/run-h$b" | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.1f-%.1f", lo, hi }')
	rows="$rows$(echo "$b $n $x $h $xr $hr" | awk '{
		printf "| %d | %d | %.1f (%s) | %.1f (%s) | %.2f | %.1f%% | %.0f / %.0f | %.2f |\\n",
			$1, $2, $3, $15, $9, $16, $9 / $3, $11 ? 100 * $10 / $11 : 0,
			$6 / $7 / 1048576, $12 / $13 / 1048576, $14 }')"
done

sect=$(mktemp)
{
	echo "$BEGIN"
	echo "## End to end: \`moem run\` tokens/s, transfer-only against hybrid"
	echo
	echo "SYNTHETIC. Generated by \`bench/sim/hybrid_run.sh\` (\`make bench-hybrid-run\`,"
	echo "also run by \`make bench-hybrid\`) at commit"
	echo "${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, $(date -u +%Y-%m-%d); do not edit by hand."
	echo "Machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1),"
	echo "$(nproc) CPUs; backend \`$BACKEND\`."
	echo
	echo "Model: \`moem mkmodel --arch qwen3_moe --layers $LAYERS --experts $EXPERTS --topk 8"
	echo "--hidden 2048 --moe-intermediate 768\` (Qwen3-30B-A3B's expert shape, bf16, 9 MiB"
	echo "per expert), packed bf16. Each run: \`moem run --pack PACK --backend $BACKEND --hbm 25%"
	echo "--batch B --steps N --link-gbps $LINK --calibration $CAL\`, hybrid with"
	echo "\`--exec hybrid\`$([ "$BACKEND" = cpu ] && echo ' (the CPU kernels measured at open)'); the median of $REPS runs of"
	echo "each, alternating. Default policies (LRU, no prefetch), warm-up on."
	if [ "$BACKEND" = cuda ]; then
		echo
		echo "The link and the CPU kernels as \`moem calibrate --precisions bf16\` measured"
		echo "them first on this machine ($LINK GB/s host->device)."
	fi
	if [ "$BACKEND" = cpu ]; then
		echo
		echo "No GPU here: the device side is the CPU backend and the link an emulated"
		echo "$LINK GB/s one, so every expert FFN runs on this CPU in both modes; what"
		echo "hybrid saves is the copies (over the emulated link) of the experts the cost"
		echo "model computes from DRAM instead. Not a measurement of a GPU system."
	fi
	echo
	echo "Tokens/s: the median (the range over the runs in brackets; this machine is"
	echo "shared and noisy, so read the ratio with the ranges)."
	echo
	echo "| batch | steps | transfer-only tokens/s | hybrid tokens/s | hybrid / transfer-only (medians) | experts on the CPU | MiB to HBM per step (xfer / hybrid) | CPU GB/s measured |"
	echo "| --: | --: | --: | --: | --: | --: | --: | --: |"
	printf '%b' "$rows"
	echo
	echo "Where the engine thread's time went, in ms per step over all the runs of a"
	echo "mode (\`moem run --json\`'s \`phase_ns\`, Documentation/engine.md \"Where a"
	echo "step's time goes\"): the MoE layers' phases on the host clock, then the rest"
	echo "of the step (attention, dense layers, the hidden state back) and the step."
	echo
	echo "| batch | mode | $(echo "$PHASES" | sed 's/ / | /g') | rest | step |"
	echo "| --: | --- |$(echo "$PHASES" | awk '{ for (i = 1; i <= NF; i++) printf " --: |" }') --: | --: |"
	printf '%b' "$phases"
	echo "$END"
} >"$sect"

# Replace the section (or append it) without touching the rest of the file.
if [ -f "$RES" ] && grep -qF "$BEGIN" "$RES"; then
	awk -v b="$BEGIN" -v e="$END" -v f="$sect" '
		$0 == b { while ((getline l < f) > 0) print l; skip = 1; next }
		skip && $0 == e { skip = 0; next }
		!skip { print }' "$RES" >"$RES.tmp"
else
	{ [ -f "$RES" ] && cat "$RES" && echo; cat "$sect"; } >"$RES.tmp"
fi
mv "$RES.tmp" "$RES"
rm -f "$sect" "$OUT/run.moem"
echo "bench-hybrid-run: wrote $RES" >&2
