#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# The before/after guard of the placement layer: what the policies decide
# must not change by accident. It pins, in tests/guard/golden/:
#
#   sim-*.json   `moem sim --policy all --json` on small generated traces
#                (batch 1 and 8, HBM 25% and 50%, one run with a DRAM
#                budget below the model): every number the simulator
#                prints;
#   sim-cli.txt  `moem sim`'s text output on a small model's trace (its
#                header's expert shape, an n/a row, a --warmup error);
#   engine.txt   `moem run` on a tiny generated model for every policy
#                family at two HBM budgets and batch 1 and 8: the digest
#                of the outputs and the mean T (or the refusal message);
#                hit rates are left out on purpose: they follow timing;
#   traces.txt   SHA-256 of a generated trace and of the trace an engine
#                run writes.
#
# A change of behaviour that is meant regenerates the golden files in the
# same commit, with the reason in its message:
#   tests/guard/guard.sh --update
# Exit 0 pass, 1 fail (with a diff of what moved).
set -u
# The digests pin what the policies decide, not the kernels' last bits:
# each CPU instruction set keeps its own fixed order of operations (AVX2
# and AVX-512 outputs differ in the last bits), so the guard runs the
# scalar reference kernels, the same on every x86-64.
export MOEM_CPU_ISA=scalar
B=${MOEM_BUILD:-build}
top=$(cd "$(dirname "$0")/../.." && pwd)
gold=$top/tests/guard/golden
moem=$(cd "$B" && pwd)/bin/moem
bound=$(cd "$B" && pwd)/bench/sim/online_bound
update=0
[ "${1:-}" = --update ] && update=1
tmp=$(mktemp -d /tmp/moem-guard-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out
mkdir -p "$out"
cd "$tmp" || exit 1

die() {
	echo "guard: $*" >&2
	exit 1
}

# ---- the simulator ----------------------------------------------------------
gen() { # name batch seed
	"$moem" trace gen --layers 8 --experts 32 --top-k 4 --batch "$2" --steps 200 \
		--seed "$3" --logits --out "$1.trace" >/dev/null 2>&1 || die "trace gen $1 failed"
}
gen b1 1 11
gen b8 8 18
sim() { # output name, moem sim arguments
	o=$1
	shift
	"$moem" sim "$@" --policy all --budgets 25%,50% --hidden 256 --inter 256 --json \
		>"$out/$o" 2>"$tmp/sim.err" || { cat "$tmp/sim.err"; die "moem sim $* failed"; }
}
sim sim-b1.json b1.trace
sim sim-b8.json b8.trace
sim sim-b8-dram.json b8.trace --dram 50%
# moem sim's command line: a small model's trace is simulated with the
# expert shape its header records, an n/a row puts no budget under T, and
# a warm-up that takes the whole trace is an error (exit 1), not zeros.
"$moem" trace gen --layers 4 --experts 16 --top-k 4 --batch 4 --steps 20 --seed 4 \
	--hidden 128 --inter 128 --out small.trace >/dev/null 2>&1 || die "trace gen small failed"
{
	"$moem" sim small.trace --policy lru --policy moem --hbm 25% 2>&1 | sed 1d
	"$moem" sim small.trace --policy lru --hbm 1K 2>&1 | tail -n 2
	"$moem" sim small.trace --policy lru --warmup 20 2>&1
	echo "exit $?"
} >"$out/sim-cli.txt"

# bench/sim/online_bound regenerates trace gen's routing to bound online
# policies: the accesses must stay the trace's, so its MIN must be the
# simulator's on that trace (the bound's own hit rates follow its policy:
# not pinned).
[ -x "$bound" ] || die "$bound not built (make $B/bench/sim/online_bound)"
bmin=$("$bound" --layers 8 --experts 32 --top-k 4 --batch 8 --steps 200 --seed 18 \
	--hbm 25 | awk '/^hit rate:/ { print $4 }')
smin=$("$moem" sim b8.trace --policy belady --hbm 25% | awk '$1 == "belady" { print $3 }')
[ -n "$bmin" ] && [ "$bmin" = "$smin" ] ||
	die "online_bound's MIN '$bmin' is not the simulator's '$smin' on the same trace"

# ---- the engine --------------------------------------------------------------
"$moem" mkmodel --arch qwen3_moe --layers 4 --experts 16 --topk 4 --hidden 256 \
	--moe-intermediate 256 --seed 3 --out model --quiet >/dev/null 2>&1 || die "mkmodel failed"
"$moem" pack --model model --out tiny.moem --precisions bf16,q4 >/dev/null 2>&1 ||
	die "pack failed"
# "budgets | batches | moem run options". DynaExq's digest follows when a
# promotion lands (the forward pass never waits for one), so its interval
# is set beyond the run: the lo-only digest is pinned.
families=(
	"30% 60% | 1 8 | --evict lru"
	"30% 60% | 1 8 | --evict lru2"
	"30% 60% | 1 8 | --evict lfu"
	"30% 60% | 1 8 | --evict pred"
	"30% 60% | 1 8 | --evict lru --prefetch fixed:S=2"
	"30% 60% | 1 8 | --route cache-aware --evict lru2 --prefetch adaptive"
	"30% 60% | 1 8 | --route cache-aware --evict pred --prefetch adaptive:qmin=0.3"
	"30% 60% | 1 8 | --route lynx"
	"30% 60% | 1 8 | --route oea"
	"30% 60% | 1 8 | --route piggyback"
	"30% 60% | 1 8 | --precisions bf16,q4 --precision dynaexq:interval_ms=1000000"
	"30% 60% | 1 8 | --paging fluxmoe"
	"30% 60% | 1 8 | --paging fluxmoe --pregate 0"
)
for fam in "${families[@]}"; do
	budgets=${fam%% |*}
	rest=${fam#* | }
	batches=${rest%% |*}
	f=${rest#* | }
	for hbm in $budgets; do
		for batch in $batches; do
			# shellcheck disable=SC2086
			r=$("$moem" run --pack tiny.moem --hbm "$hbm" --dram 100% --batch "$batch" \
				--steps 12 --seed 5 $f --json --quiet 2>"$tmp/run.err")
			if [ -n "$r" ]; then
				d=$(printf '%s' "$r" | sed -n 's/.*"digest":"\([0-9a-f]*\)".*/\1/p')
				t=$(printf '%s' "$r" | sed -n 's/.*"mean_T":\([0-9.e+-]*\).*/\1/p')
				echo "$f | hbm $hbm | batch $batch | digest $d | mean_T $t"
			else
				echo "$f | hbm $hbm | batch $batch | refused: $(tail -n 1 "$tmp/run.err")"
			fi
		done
	done
done >"$out/engine.txt"

# ---- trace files ---------------------------------------------------------------
"$moem" run --pack tiny.moem --hbm 30% --batch 8 --steps 12 --seed 5 --trace-out run.trace \
	--json --quiet >/dev/null 2>&1 || die "moem run --trace-out failed"
{
	echo "generated b8.trace $(sha256sum <b8.trace | cut -c1-64)"
	echo "engine run.trace $(sha256sum <run.trace | cut -c1-64)"
} >"$out/traces.txt"

if [ $update = 1 ]; then
	mkdir -p "$gold"
	cp "$out"/* "$gold/"
	echo "guard: golden files updated in tests/guard/golden"
	exit 0
fi
fail=0
for f in "$out"/*; do
	n=$(basename "$f")
	if [ ! -f "$gold/$n" ]; then
		echo "not ok: no golden $n (tests/guard/guard.sh --update)"
		fail=1
	elif ! diff -u "$gold/$n" "$f" >"$tmp/diff"; then
		echo "not ok: $n changed:"
		head -n 80 "$tmp/diff"
		fail=1
	else
		echo "ok: $n"
	fi
done
exit $fail
