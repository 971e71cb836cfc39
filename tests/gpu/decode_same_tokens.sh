#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Full decode on the CUDA backend, for a qwen3_moe pack (GQA, per-head
# q/k norms, rotate-half RoPE) and a deepseek_v2 pack (MLA's latent cache,
# adjacent-pair RoPE with YaRN):
#  - the CUDA backend's greedy tokens equal the CPU backend's, and their
#    logprobs agree within 2e-3;
#  - budgets never change tokens: 25% HBM with 40% DRAM, and a KV budget
#    so small that sequences wait for each other, give the all-resident
#    run's tokens;
#  - quantized dense weights (--dense-prec), a CPU-backend path, are
#    refused with a clear error.
# Runs on a GPU machine (make test-gpu) and on the kernel emulator (make
# test-gpu-emu); skips (exit 4) without a CUDA device.
set -u
B=${MOEM_BUILD:-build}
moem=$B/bin/moem
if ! why=$("$moem" backend --backend cuda 2>&1); then
	echo "SKIP: $why"
	exit 4
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

"$moem" mkmodel --arch qwen3_moe --layers 3 --experts 16 --topk 4 --hidden 256 \
	--moe-intermediate 128 --seed 7 --out "$tmp/q" >/dev/null 2>&1 &&
	"$moem" pack --model "$tmp/q" --out "$tmp/q.moem" --precisions bf16 >/dev/null 2>&1 ||
	{ echo "FAIL: cannot make the qwen3_moe model"; exit 1; }
"$moem" mkmodel --preset deepseek-v2-lite --layers 3 --experts 16 --topk 4 --hidden 256 \
	--moe-intermediate 128 --seed 7 --out "$tmp/d" >/dev/null 2>&1 &&
	"$moem" pack --model "$tmp/d" --out "$tmp/d.moem" --precisions bf16 >/dev/null 2>&1 ||
	{ echo "FAIL: cannot make the deepseek_v2 model"; exit 1; }

p1=5,17,300,42,9,1000,77,12
others="--tokens 1,2,3 --tokens 4000,3999,17,5,6,7,8,9,10,11,12,13 --tokens 99,98"
for pk in q d; do
	kvb=200K # two sequences' blocks
	[ $pk = q ] && kvb=600K
	dec() { "$moem" decode --pack "$tmp/$pk.moem" --max-new 8 --no-model-eos --quiet "$@"; }
	cpu=$(dec --backend cpu --logprobs 1 --tokens $p1)
	gpu=$(dec --backend cuda --logprobs 1 --tokens $p1)
	[ -n "$gpu" ] || { bad "$pk: no output on the CUDA backend"; continue; }
	ids() { echo "$1" | sed 's/ (.*//; s/:[^,]*//g'; }
	ref=$(ids "$gpu")
	if [ "$ref" = "$(ids "$cpu")" ]; then
		ok "$pk: CUDA greedy tokens equal the CPU backend's ($ref)"
	else
		bad "$pk: CUDA tokens $ref, CPU $(ids "$cpu")"
	fi
	worst=$(printf '%s\n%s\n' "$gpu" "$cpu" | sed 's/ (.*//' | tr ',' '\n' |
		awk -F: '{ v[NR] = $2 } END { n = NR / 2; w = 0;
			for (i = 1; i <= n; i++) { d = v[i] - v[i + n]; if (d < 0) d = -d;
				if (d > w) w = d } print w }')
	if awk -v w="$worst" 'BEGIN { exit !(w <= 2e-3) }'; then
		ok "$pk: logprobs within $worst of the CPU backend's"
	else
		bad "$pk: logprobs differ by $worst from the CPU backend's"
	fi
	got=$(ids "$(dec --backend cuda --logprobs 1 --tokens $p1 --hbm 25% --dram 40%)")
	[ "$got" = "$ref" ] && ok "$pk: 25% HBM, 40% DRAM gives the same tokens" ||
		bad "$pk: budgets changed tokens: $got vs $ref"
	# a KV budget of about two sequences' blocks: the others wait
	# shellcheck disable=SC2086
	out=$("$moem" decode --pack "$tmp/$pk.moem" --backend cuda --max-new 8 --no-model-eos \
		--json --kv-block 8 --kv-bytes $kvb --tokens $p1 $others)
	waits=$(echo "$out" | sed -n 's/.*"kv_waits":\([0-9]*\).*/\1/p')
	first=$(echo "$out" | sed -n 's/.*"sequences":\[{"tokens":\[\([0-9,]*\)\].*/\1/p')
	[ "$first" = "$ref" ] && [ "${waits:-0}" -gt 0 ] &&
		ok "$pk: tiny kv budget: $waits waits, same tokens" ||
		bad "$pk: tiny kv budget: waits ${waits:-?}, tokens $first vs $ref"
done
# quantized dense weights are a CPU-backend path: refused here, not run wrong
if out=$("$moem" decode --pack "$tmp/q.moem" --backend cuda --max-new 2 --tokens $p1 \
	--dense-prec q8 2>&1); then
	bad "accepted: --dense-prec q8 on the CUDA backend"
elif echo "$out" | grep -q "CPU backend only"; then
	ok "refused: --dense-prec q8 on the CUDA backend"
else
	bad "--dense-prec q8 on the CUDA backend: message \"$out\""
fi
exit $fail
