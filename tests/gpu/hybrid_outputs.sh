#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Hybrid CPU/GPU expert execution on the CUDA backend: experts computed by
# the CPU kernels from the DRAM pool beside the GPU's.
#  - moem decode with --cpu-moe-layers 2 (two of three MoE layers on the
#    CPU) and with the cost model's choice (--exec hybrid, a CPU rated
#    faster than the link) at 25% HBM gives the all-resident CUDA run's
#    greedy tokens, and logprobs within 2e-3 of it: the tolerance of the
#    CPU backend against the CUDA backend (decode_same_tokens.sh), since
#    those experts' numerics are the CPU kernels';
#  - moem run at 25% HBM moves fewer bytes DRAM->HBM with --exec hybrid
#    than transfer-only, computes experts on the CPU, and none of a
#    --cpu-moe-layers layer ever enters HBM (all layers: 0 bytes);
#  - moem calibrate measures the link through the CUDA backend, and the
#    engine then takes its CPU figures from that cache.
# Runs on a GPU machine (make test-gpu) and on the kernel emulator (make
# test-gpu-emu); skips (exit 4) without a CUDA device.
. "$(dirname "$0")/lib.sh"

"$moem" mkmodel --arch qwen3_moe --layers 3 --experts 16 --topk 4 --hidden 256 \
	--moe-intermediate 128 --seed 7 --out "$tmp/q" >/dev/null 2>&1 &&
	"$moem" pack --model "$tmp/q" --out "$tmp/q.moem" --precisions bf16 >/dev/null 2>&1 ||
	{ echo "FAIL: cannot make the model"; exit 1; }

p1=5,17,300,42,9,1000,77,12
dec() {
	"$moem" decode --pack "$tmp/q.moem" --backend cuda --max-new 8 --no-model-eos --quiet \
		--logprobs 1 --tokens $p1 "$@"
}
ids() { echo "$1" | sed 's/ (.*//; s/:[^,]*//g'; }
ref=$(dec)
[ -n "$ref" ] || { echo "FAIL: no output from the all-resident run"; exit 1; }
for v in "--cpu-moe-layers 2 --hbm 25%" "--exec hybrid --cpu-gbps 1000 --hbm 25%"; do
	# shellcheck disable=SC2086
	got=$(dec $v)
	if [ -n "$got" ] && [ "$(ids "$got")" = "$(ids "$ref")" ]; then
		ok "$v: the all-resident run's tokens ($(ids "$ref"))"
	else
		bad "$v: tokens $(ids "$got") vs $(ids "$ref")"
	fi
	worst=$(printf '%s\n%s\n' "$ref" "$got" | sed 's/ (.*//' | tr ',' '\n' |
		awk -F: '{ v[NR] = $2 } END { n = NR / 2; w = 0;
			for (i = 1; i <= n; i++) { d = v[i] - v[i + n]; if (d < 0) d = -d;
				if (d > w) w = d } print w }')
	if awk -v w="$worst" 'BEGIN { exit !(w <= 2e-3) }'; then
		ok "$v: logprobs within $worst of the all-resident run's"
	else
		bad "$v: logprobs differ by $worst"
	fi
done

field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }
field_str() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }
runj() {
	"$moem" run --pack "$tmp/q.moem" --backend cuda --batch 4 --steps 6 --json --quiet "$@"
}
xfer=$(runj --hbm 25%)
hyb=$(runj --hbm 25% --exec hybrid --cpu-gbps 1000)
all=$(runj --hbm 25% --cpu-moe-layers 3)
xb=$(echo "$xfer" | field bytes_h2d)
hb=$(echo "$hyb" | field bytes_h2d)
hc=$(echo "$hyb" | field cpu_experts)
ab=$(echo "$all" | field bytes_h2d)
ac=$(echo "$all" | field cpu_experts)
if [ -n "$xb" ] && [ -n "$hb" ] && [ "$hb" -lt "$xb" ] && [ "${hc:-0}" -gt 0 ]; then
	ok "25% HBM: hybrid moves $hb bytes to HBM ($hc experts on the CPU), transfer-only $xb"
else
	bad "25% HBM: hybrid ${hb:-?} bytes (${hc:-?} on the CPU), transfer-only ${xb:-?}"
fi
if [ "${ab:-x}" = 0 ] && [ "${ac:-0}" -gt 0 ]; then
	ok "--cpu-moe-layers 3: $ac experts on the CPU, nothing moved to HBM"
else
	bad "--cpu-moe-layers 3: ${ab:-?} bytes to HBM, ${ac:-?} on the CPU"
fi
# moem calibrate measures the host->device link through the CUDA backend,
# and an engine on this machine then takes its CPU figures from the cache.
cal=$("$moem" calibrate --out "$tmp/cal.json" --precisions bf16 --hidden 128 --inter 128 \
	--json 2>/dev/null)
lg=$(echo "$cal" | sed -n 's/.*"h2d_gbps":\([0-9.e+-]*\).*/\1/p')
if [ -n "$lg" ] && awk -v g="$lg" 'BEGIN { exit !(g > 0) }'; then
	ok "moem calibrate: link $lg GB/s host->device"
else
	bad "moem calibrate: no link figure: $cal"
fi
from=$(runj --hbm 25% --exec hybrid --calibration "$tmp/cal.json" | field_str cpu_from)
if [ "$from" = cache ]; then
	ok "the engine read the calibration cache"
else
	bad "the engine's CPU figures came from '${from:-?}', not the cache"
fi
exit $fail
