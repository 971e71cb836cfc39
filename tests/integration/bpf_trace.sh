#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# moem trace record/top and moem_hot against `moem run` on this machine
# (Documentation/tracing.md). Needs root or CAP_BPF+CAP_PERFMON; exits 4
# (skip) with the reason where BPF is not permitted or not built.
#
#  1. without the capabilities, record/top/pool say so and exit 1;
#  2. record --exec: the recorded trace equals the one the engine writes
#     itself, record by record, and moem_hot equals the engine's own
#     per-(layer, expert) counts exactly; the fetch probes' byte totals
#     equal the run's;
#  3. record --pid, attached mid-run: a tail of the engine's trace;
#  4. `bpftool map dump name moem_hot` shows live counts while a run with
#     --hotness bpf decodes;
#  5. DynaExq's transitions fire moem:promote/demote; top refreshes.
#
#   MOEM_BUILD=build tests/integration/bpf_trace.sh
set -u
B=${MOEM_BUILD:-build}
M=$(cd "$B/bin" 2>/dev/null && pwd)/moem
BPFTOOL=$(command -v bpftool || echo /usr/sbin/bpftool)
tmp=$(mktemp -d)
bg=""
rec=""
cleanup() {
	[ -n "$bg" ] && kill "$bg" 2>/dev/null
	[ -n "$rec" ] && kill "$rec" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
	echo "bpf_trace: FAIL: $*"
	exit 1
}
skip() {
	echo "bpf_trace: SKIP: $*"
	exit 4
}
ok() {
	echo "bpf_trace: ok: $*"
}
# Nothing here waits on the clock: runs that must outlast an attach last
# until the test closes their --until-eof FIFO, and say each step they
# finish on --ready-fd; the test waits for those events (with a deadline).
wait_for() { # FILE REGEX SECONDS: until a line of FILE matches REGEX
	local end=$((SECONDS + $3))
	until grep -q "$2" "$1" 2>/dev/null; do
		[ $SECONDS -lt $end ] || return 1
		sleep 0.05
	done
}
last_step() { # FILE: the last step a --ready-fd file reports
	sed -n 's/^step \([0-9]*\)$/\1/p' "$1" | tail -n 1
}
wait_step() { # FILE N SECONDS: until the run finished step N
	local end=$((SECONDS + $3))
	until [ "$(last_step "$1")" -ge "$2" ] 2>/dev/null; do
		[ $SECONDS -lt $end ] || return 1
		sleep 0.05
	done
}
# Start `moem run ARGS...` in the background until told (stop_held).
start_held() { # STEPSFILE ERRFILE ARGS...
	local steps=$1 err=$2
	shift 2
	rm -f "$tmp/hold"
	mkfifo "$tmp/hold"
	"$M" "$@" --steps 100000000 --until-eof 4 --ready-fd 3 4<"$tmp/hold" 3>"$steps" \
		2>"$err" &
	bg=$!
	exec 5>"$tmp/hold" # the run's open of the FIFO completes with this one
}
stop_held() { # the run ends after its current step; its exit status
	exec 5>&-
	wait "$bg"
	local rc=$?
	bg=""
	return $rc
}
[ -x "$M" ] || fail "$M not built (make)"

# --- 0. can we trace here at all? ------------------------------------------
out=$("$M" trace record -o "$tmp/x.trace" -- /bin/true 2>&1)
rc=$?
case "$out" in
*"needs CAP_BPF and CAP_PERFMON (or root)"*)
	[ $rc -eq 1 ] || fail "exit $rc without privileges"
	skip "$out"
	;;
*"built without BPF"* | *"the kernel refused"*) skip "BPF not permitted here: $out" ;;
*"has no moem:route probe"*) [ $rc -eq 1 ] || fail "exit $rc for a binary without probes" ;;
*) fail "tracing /bin/true: exit $rc: $out" ;;
esac
[ ! -e "$tmp/x.trace" ] || fail "a failed recording left $tmp/x.trace"

# --- 1. without the capabilities ------------------------------------------
if command -v capsh >/dev/null; then
	for c in "trace record -o $tmp/y.trace -- /bin/true" "trace top --pid $$" "trace pool"; do
		out=$(capsh --drop=cap_sys_admin,cap_bpf,cap_perfmon -- -c "exec $M $c" 2>&1)
		rc=$?
		[ $rc -eq 1 ] || fail "moem $c without capabilities: exit $rc"
		[ "$out" = "moem trace: needs CAP_BPF and CAP_PERFMON (or root)" ] ||
			fail "moem $c without capabilities said: $out"
	done
	ok "without CAP_BPF/CAP_PERFMON/CAP_SYS_ADMIN, record/top/pool say so and exit 1"
else
	echo "bpf_trace: capsh not installed: privilege messages not checked"
fi

# --- a synthetic model -----------------------------------------------------
"$M" mkmodel --out "$tmp/model" --layers 4 --experts 16 --top-k 4 --hidden 256 \
	--moe-intermediate 128 --seed 7 >/dev/null || fail "mkmodel"
"$M" pack --model "$tmp/model" --out "$tmp/m.moem" --precisions bf16,q4 --quiet \
	>/dev/null 2>&1 || fail "pack"
P="$tmp/m.moem"
run=(run --pack "$P" --backend cpu --threads 2 --batch 8 --seed 11)

dump_records() { # trace -> its records as JSON lines (no header, no pre-gate:
	# the engine's own, the USDT route probe does not carry them)
	"$M" trace dump "$1" | tail -n +2 | sed 's/,"pregate":.*}$/}/'
}

# --- 2. record --exec: same trace, same counts ----------------------------
"$M" trace record -o "$tmp/bpf.trace" --hot-out "$tmp/hot.txt" -- \
	"$M" "${run[@]}" --steps 40 --trace-out "$tmp/eng.trace" --counts-out "$tmp/eng.txt" \
	--json >"$tmp/run.json" 2>"$tmp/rec.err" || fail "record --exec: $(cat "$tmp/rec.err")"
"$M" trace info "$tmp/bpf.trace" | grep -q 'source: *bpf (synthetic)' ||
	fail "the recorded trace does not say source bpf (synthetic)"
dump_records "$tmp/eng.trace" >"$tmp/eng.jsonl"
dump_records "$tmp/bpf.trace" >"$tmp/bpf.jsonl"
n=$(wc -l <"$tmp/eng.jsonl")
[ "$n" -eq 160 ] || fail "the engine wrote $n records, want 40 steps x 4 layers"
cmp -s "$tmp/eng.jsonl" "$tmp/bpf.jsonl" ||
	fail "recorded trace differs from the engine's: $(diff "$tmp/eng.jsonl" "$tmp/bpf.jsonl" | head -4)"
ok "record --exec: $n records equal to the engine's own trace (step, layer, ids, weights)"
[ "$(wc -l <"$tmp/eng.txt")" -gt 16 ] || fail "the engine counted almost nothing"
cmp -s "$tmp/eng.txt" "$tmp/hot.txt" ||
	fail "moem_hot differs from the engine's counts: $(diff "$tmp/eng.txt" "$tmp/hot.txt" | head -4)"
ok "moem_hot equals the engine's per-(layer, expert) counts ($(($(wc -l <"$tmp/eng.txt") - 1)) experts)"

# Fetch probes against the run's own byte totals (no warm-up: every fetch
# happens inside a step; no prefetch: none completes after the last).
"$M" trace record -o "$tmp/f.trace" -- "$M" "${run[@]}" --steps 30 --no-warmup \
	--precisions bf16,q4 --dram 50% --hbm 30% --json >"$tmp/f.json" 2>"$tmp/f.err" ||
	fail "record (fetches): $(cat "$tmp/f.err")"
want=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["bytes_nvme"], d["bytes_h2d"])' \
	"$tmp/f.json")
got=$(sed -n 's/.*fetch (\([0-9]*\) bytes NVMe->DRAM, \([0-9]*\) bytes DRAM->HBM).*/\1 \2/p' "$tmp/f.err")
[ -n "$got" ] && [ "$got" = "$want" ] || fail "fetch probes saw '$got' bytes, the run moved '$want'"
ok "moem:fetch byte totals equal the run's (NVMe->DRAM, DRAM->HBM: $got)"

# --- 3. record --pid, attached in the middle of a run ----------------------
start_held "$tmp/long.steps" "$tmp/long.err" "${run[@]}" --trace-out "$tmp/long.trace" \
	--json >/dev/null
wait_for "$tmp/long.steps" '^step' 120 || fail "moem run took no step: $(cat "$tmp/long.err")"
"$M" trace record -o "$tmp/pid.trace" --pid "$bg" 2>"$tmp/pid.err" 5>&- &
rec=$!
wait_for "$tmp/pid.err" 'tracing pid' 120 ||
	fail "record --pid did not attach: $(cat "$tmp/pid.err")"
# Ten more steps of the engine's, all taken while the tracer is attached.
s0=$(last_step "$tmp/long.steps")
wait_step "$tmp/long.steps" $((s0 + 10)) 120 || fail "moem run stopped stepping"
stop_held || fail "moem run: $(cat "$tmp/long.err")"
wait "$rec" || fail "record --pid: $(cat "$tmp/pid.err")"
rec=""
dump_records "$tmp/pid.trace" >"$tmp/pid.jsonl"
dump_records "$tmp/long.trace" >"$tmp/long.jsonl"
n=$(wc -l <"$tmp/pid.jsonl")
total=$(wc -l <"$tmp/long.jsonl")
[ "$n" -ge 40 ] || fail "record --pid caught only $n records (10 steps x 4 layers at least)"
[ "$n" -lt "$total" ] || fail "record --pid caught the whole run ($n of $total): not attached mid-run"
tail -n "$n" "$tmp/long.jsonl" >"$tmp/tail.jsonl"
cmp -s "$tmp/tail.jsonl" "$tmp/pid.jsonl" || fail "record --pid: not a tail of the engine's trace"
ok "record --pid attached mid-run: the engine's last $n of $total records exactly"

# --- 4. bpftool sees moem_hot while the engine decodes ---------------------
start_held "$tmp/hb.steps" "$tmp/hb.err" "${run[@]}" --hotness bpf --json >"$tmp/hb.json"
found=""
end=$((SECONDS + 120))
while [ $SECONDS -lt $end ] && kill -0 "$bg" 2>/dev/null; do
	if "$BPFTOOL" map dump name moem_hot >"$tmp/bpftool.txt" 2>/dev/null &&
		grep -q '"expert"' "$tmp/bpftool.txt"; then
		found=1
		break
	fi
	sleep 0.1
done
stop_held || fail "moem run --hotness bpf: $(cat "$tmp/hb.err")"
[ -n "$found" ] || fail "bpftool map dump name moem_hot showed no counts during the run"
grep -q '"hotness":"bpf"' "$tmp/hb.json" || fail "moem run --hotness bpf: $(cat "$tmp/hb.json")"
ok "bpftool map dump name moem_hot shows live counts under moem run --hotness bpf"

# --- 5. promote/demote probes, and top -------------------------------------
# DynaExq retargets on the wall clock (every 200 ms by default): a fast
# machine decodes the 600 steps within one interval and never promotes.
# At 5 ms any machine retargets many times within the run.
"$M" trace record -o "$tmp/dx.trace" -- "$M" "${run[@]}" --steps 600 --precisions bf16,q4 \
	--precision dynaexq:interval_ms=5 --hbm 60% --json >/dev/null 2>"$tmp/dx.err" ||
	fail "record (dynaexq): $(cat "$tmp/dx.err")"
promo=$(sed -n 's/.* \([0-9]*\) promote,.*/\1/p' "$tmp/dx.err")
[ "${promo:-0}" -gt 0 ] || fail "no moem:promote seen under DynaExq: $(cat "$tmp/dx.err")"
ok "moem:promote fired $promo times under DynaExq"

# top's traced run lasts until top has refreshed twice (then top waits
# for it to end: the test closes the run's FIFO).
rm -f "$tmp/hold"
mkfifo "$tmp/hold"
"$M" trace top --count 2 -i 0.5 -n 4 -- "$M" "${run[@]}" --steps 100000000 --json \
	--until-eof 4 4<"$tmp/hold" >"$tmp/top.txt" 2>"$tmp/top.err" &
rec=$!
exec 5>"$tmp/hold"
end=$((SECONDS + 120))
until [ "$(grep -c '^moem trace top - pid' "$tmp/top.txt" 2>/dev/null)" -ge 2 ] 2>/dev/null; do
	[ $SECONDS -lt $end ] && kill -0 "$rec" 2>/dev/null || break
	sleep 0.1
done
exec 5>&-
wait "$rec" || fail "top: $(cat "$tmp/top.err")"
rec=""
[ "$(grep -c '^moem trace top - pid' "$tmp/top.txt")" -ge 2 ] || fail "top did not refresh twice"
grep -qE '^ +3 +[0-9.]+ +[0-9]+ +[0-9.]+%' "$tmp/top.txt" || fail "top shows no layer 3: $(cat "$tmp/top.txt")"
ok "top refreshed with every layer's hottest experts"
echo "bpf_trace: all passed"
