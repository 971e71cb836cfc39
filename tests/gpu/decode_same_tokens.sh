#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Full decode on the CUDA backend, for a qwen3_moe pack (GQA, per-head
# q/k norms, rotate-half RoPE) and a deepseek_v2 pack (MLA's latent cache,
# adjacent-pair RoPE with YaRN, DeepSeek-V2's group-limited routing):
#  - the CUDA backend's greedy tokens equal the CPU backend's, and their
#    logprobs agree within 2e-3;
#  - budgets never change tokens: 25% HBM with 40% DRAM, and a KV budget
#    so small that sequences wait for each other, give the all-resident
#    run's tokens;
#  - with quantized dense weights (--dense-prec q8) the CUDA backend's
#    greedy tokens equal the CPU backend's scalar table's.
# Runs on a GPU machine (make test-gpu) and on the kernel emulator (make
# test-gpu-emu); skips (exit 4) without a CUDA device.
. "$(dirname "$0")/lib.sh"
# the ids of a --logprobs line (id:logprob,...)
ids() { echo "$1" | sed 's/ (.*//; s/:[^,]*//g'; }

"$moem" mkmodel --arch qwen3_moe --layers 3 --experts 16 --topk 4 --hidden 256 \
	--moe-intermediate 128 --seed 7 --out "$tmp/q" >/dev/null 2>&1 &&
	"$moem" pack --model "$tmp/q" --out "$tmp/q.moem" --precisions bf16 >/dev/null 2>&1 ||
	{ echo "FAIL: cannot make the qwen3_moe model"; exit 1; }
"$moem" mkmodel --preset deepseek-v2-lite --layers 3 --experts 16 --topk 4 --hidden 256 \
	--moe-intermediate 128 --n-group 4 --topk-group 2 --seed 7 --out "$tmp/d" >/dev/null 2>&1 &&
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
# --hbm in % is a share of the experts' bytes, no --hbm all of them, and
# the KV pool (device memory here) comes on top: 100% or no budget holds
# every expert, and every step is planned on the device. The same budget
# in bytes is the device memory to use: the pool takes its room, an expert
# is missed, no step is planned.
num() { echo "$1" | sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p" | head -1; }
fnum() { echo "$1" | sed -n "s/.*\"time\":{[^}]*\"$2\":\([-0-9.e+]*\).*/\1/p"; }
hb() { "$moem" decode --pack "$tmp/q.moem" --backend cuda --max-new 6 --no-model-eos \
	--json --quiet --tokens $p1 "$@"; }
for b in 100% none; do
	if [ $b = none ]; then out=$(hb); else out=$(hb --hbm $b); fi
	share=$(num "$out" hbm_budget)
	# steps planned on the device are waited for once: that wait is device_ms
	if [ "$(num "$out" misses)" = 0 ] && [ "${share:-0}" -gt 0 ] &&
		[ "$(num "$out" device_steps)" -gt 0 ] &&
		awk -v v="$(fnum "$out" device_ms)" 'BEGIN { exit !(v > 0) }'; then
		ok "--hbm $b: every expert resident ($share bytes)," \
			"$(num "$out" device_steps) device steps, $(fnum "$out" device_ms) ms waited"
	else
		bad "--hbm $b: misses $(num "$out" misses), device steps $(num "$out" device_steps)"
	fi
done
out=$(hb --hbm "${share:-1}")
if [ "$(num "$out" misses)" -gt 0 ] && [ "$(num "$out" device_steps)" = 0 ] &&
	awk -v v="$(fnum "$out" device_ms)" 'BEGIN { exit !(v != "" && v == 0) }'; then
	ok "--hbm $share (bytes): the pool takes its room, $(num "$out" misses) misses"
else
	bad "--hbm $share (bytes): misses $(num "$out" misses), device steps" \
		"$(num "$out" device_steps)"
fi
# A device too full for the pool on top (the emulator's memory cut to 80
# MiB, less than the pool and the 64 MiB margin free): a warning names
# it, the pool stays inside the budget, the run completes.
if [ "${MOEM_GPU_EMU:-}" = 1 ]; then
	out=$(MOEM_EMU_MEM_MIB=80 "$moem" decode --pack "$tmp/q.moem" --backend cuda --max-new 6 \
		--no-model-eos --json --tokens $p1 --hbm 100% 2>&1)
	if echo "$out" | grep -q "KV pool's .* bytes free" &&
		[ "$(num "$out" hbm_budget)" -lt "${share:-0}" ] &&
		echo "$out" | grep -q '"finish":"length"'; then
		ok "80 MiB device: the pool stays inside --hbm 100% with a warning, the run completes"
	else
		bad "80 MiB device: $(echo "$out" | grep -v '^{' | head -3)"
	fi
fi
# Quantized dense weights (--dense-prec q8: the attention projections and
# lm_head as one q8 matrix each, the same bytes on both backends): the
# CUDA kernel dequantizes every weight as the CPU's scalar table does and
# multiplies it with the bf16 input in fp32, so that table
# (MOEM_CPU_ISA=scalar; the AVX2 one quantizes the input to int8 as well)
# is its reference: the same greedy tokens, logprobs within 2e-3.
for pk in q d; do
	decq() { "$moem" decode --pack "$tmp/$pk.moem" --max-new 8 --no-model-eos --quiet \
		--logprobs 1 --tokens $p1 --dense-prec q8 "$@"; }
	cpu=$(MOEM_CPU_ISA=scalar decq --backend cpu)
	gpu=$(decq --backend cuda)
	[ -n "$gpu" ] && [ -n "$cpu" ] || { bad "$pk: dense q8: no output"; continue; }
	if [ "$(ids "$gpu")" = "$(ids "$cpu")" ]; then
		ok "$pk: dense q8: CUDA greedy tokens equal the CPU backend's ($(ids "$gpu"))"
	else
		bad "$pk: dense q8: CUDA tokens $(ids "$gpu"), CPU $(ids "$cpu")"
	fi
	worst=$(printf '%s\n%s\n' "$gpu" "$cpu" | sed 's/ (.*//' | tr ',' '\n' |
		awk -F: '{ v[NR] = $2 } END { n = NR / 2; w = 0;
			for (i = 1; i <= n; i++) { d = v[i] - v[i + n]; if (d < 0) d = -d;
				if (d > w) w = d } print w }')
	if awk -v w="$worst" 'BEGIN { exit !(w <= 2e-3) }'; then
		ok "$pk: dense q8: logprobs within $worst of the CPU backend's"
	else
		bad "$pk: dense q8: logprobs differ by $worst from the CPU backend's"
	fi
	# the option acts: q8 dense weights are not the bf16 run's logprobs
	[ "$cpu" != "$(MOEM_CPU_ISA=scalar "$moem" decode --pack "$tmp/$pk.moem" --max-new 8 \
		--no-model-eos --quiet --logprobs 1 --tokens $p1 --backend cpu)" ] &&
		ok "$pk: dense q8 changes the logprobs" ||
		bad "$pk: dense q8 gives the bf16 run's output: not applied?"
done
exit $fail
