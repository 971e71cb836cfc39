#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# moem decode on a synthetic qwen3_moe and deepseek_v2 pack (CPU backend):
#  - budgets never change greedy tokens: 25% HBM and a small DRAM budget,
#    and a KV budget so small that sequences wait for each other, give the
#    all-resident run's tokens; so do hybrid CPU/GPU runs (--cpu-moe-layers,
#    --place rules, and the cost model's choice at 25% HBM);
#  - batching never changes tokens: a sequence alone and in a batch of 8
#    of different lengths;
#  - bad input gets a clear error: ids out of vocabulary, an empty prompt,
#    a prompt longer than the context, sampling values out of range, a
#    pack of format 1.0;
#  - sampling with a seed is reproducible;
#  - --json names the backend's device and thread count;
#  - with the dense weights quantized (--dense-prec q8), budgets, batching
#    and the thread count still never change tokens, and a model whose
#    widths are no whole number of q8 groups, or an unknown precision, is
#    refused with a message naming it.
set -u
B=${MOEM_BUILD:-build}
moem=$B/bin/moem
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

"$moem" mkmodel --arch qwen3_moe --layers 3 --experts 16 --topk 4 --hidden 256 \
	--moe-intermediate 128 --seed 7 --out "$tmp/q" >/dev/null 2>&1 &&
	"$moem" pack --model "$tmp/q" --out "$tmp/q.moem" --precisions bf16 >/dev/null 2>&1 ||
	{ echo "FAIL: cannot make the model"; exit 1; }
"$moem" mkmodel --preset deepseek-v2-lite --layers 3 --experts 16 --topk 4 --hidden 256 \
	--moe-intermediate 128 --seed 7 --out "$tmp/d" >/dev/null 2>&1 &&
	"$moem" pack --model "$tmp/d" --out "$tmp/d.moem" --precisions bf16 >/dev/null 2>&1 ||
	{ echo "FAIL: cannot make the deepseek model"; exit 1; }

p1=5,17,300,42,9,1000,77,12,3,8
others="--tokens 1,2,3 --tokens 4000,3999,17,5,6,7,8,9,10,11,12,13 --tokens 99
	--tokens 7,7,7,7,7 --tokens 123,456,789,1011 --tokens 2,4,6,8,10,12,14,16,18,20,22
	--tokens 31,41,59,26,53"
for pk in q d; do
	kvb=200K # two or three sequences of blocks
	[ $pk = q ] && kvb=600K
	dec() { "$moem" decode --pack "$tmp/$pk.moem" --max-new 12 --no-model-eos --quiet "$@"; }
	ref=$(dec --tokens $p1)
	[ -n "$ref" ] || { bad "$pk: no output"; continue; }
	got=$(dec --tokens $p1 --hbm 25% --dram 40%)
	[ "$got" = "$ref" ] && ok "$pk: 25% HBM, 40% DRAM gives the same tokens" ||
		bad "$pk: budgets changed tokens: $got vs $ref"
	for v in "--cpu-moe-layers 2 --hbm 25%" "--exec hybrid --cpu-gbps 1000 --hbm 25% --dram 40%" \
		"--place layers=0,experts=0-7:cpu --place layers=1:cpu --hbm 25%" \
		"--exec hybrid --cpu-gbps 1000 --place layers=1:gpu --hbm 25%"; do
		# shellcheck disable=SC2086
		got=$(dec --tokens $p1 $v)
		[ "$got" = "$ref" ] && ok "$pk: $v gives the same tokens" ||
			bad "$pk: $v changed tokens: $got vs $ref"
	done
	# shellcheck disable=SC2086
	got=$(dec --tokens $p1 $others | head -1)
	[ "$got" = "$ref" ] && ok "$pk: batch of 8 gives the same tokens" ||
		bad "$pk: batching changed tokens: $got vs $ref"
	# a KV budget of two sequences' blocks: the others wait, tokens unchanged
	# shellcheck disable=SC2086
	out=$("$moem" decode --pack "$tmp/$pk.moem" --max-new 12 --no-model-eos --json \
		--kv-block 8 --kv-bytes $kvb --tokens $p1 $others)
	waits=$(echo "$out" | sed -n 's/.*"kv_waits":\([0-9]*\).*/\1/p')
	first=$(echo "$out" | sed -n 's/.*"sequences":\[{"tokens":\[\([0-9,]*\)\].*/\1/p')
	[ "$first" = "$(echo "$ref" | sed 's/ (.*//')" ] && [ "${waits:-0}" -gt 0 ] &&
		ok "$pk: tiny kv budget: $waits waits, same tokens" ||
		bad "$pk: tiny kv budget: waits ${waits:-?}, tokens $first vs $ref"
	got=$(dec --tokens $p1 --prefill-chunk 3)
	[ "$got" = "$ref" ] && ok "$pk: chunked prefill gives the same tokens" ||
		bad "$pk: chunked prefill changed tokens"
	# the prefix cache: four copies of a 40-token prompt under a budget of
	# one of them (6 blocks of 8) run in turn, the later ones taking its
	# first 4 blocks; their tokens are the prompt's alone, with the cache
	# off too
	long=$(seq -s, 100 139)
	one=$(dec --tokens $long --max-new 4 | sed 's/ (.*//')
	pcb=600K
	[ $pk = d ] && pcb=450K
	for pc in "" --no-prefix-cache; do
		# shellcheck disable=SC2086
		out=$("$moem" decode --pack "$tmp/$pk.moem" --max-new 4 --no-model-eos --json \
			--kv-block 8 --kv-bytes $pcb $pc --tokens $long --tokens $long \
			--tokens $long --tokens $long)
		cached=$(echo "$out" | sed -n 's/.*"cached_prompt_tokens":\([0-9]*\).*/\1/p')
		seqs=$(echo "$out" | grep -o '"tokens":\[[0-9,]*\]' | sort -u)
		want=96
		[ -n "$pc" ] && want=0
		if [ "$seqs" = "\"tokens\":[$one]" ] && [ "$cached" = $want ]; then
			ok "$pk: prefix cache ${pc:-on}: $cached prompt tokens cached, same tokens"
		else
			bad "$pk: prefix cache ${pc:-on}: cached '$cached' (want $want), sequences $seqs vs $one"
		fi
	done
done

# --json names what ran the decode: the thread count asked for, and the device
for t in 1 2; do
	out=$("$moem" decode --pack "$tmp/q.moem" --max-new 2 --tokens $p1 --backend cpu \
		--threads $t --json)
	th=$(echo "$out" | sed -n 's/.*"threads":\([0-9]*\).*/\1/p')
	dv=$(echo "$out" | sed -n 's/.*"device":"\([^"]*\)".*/\1/p')
	if [ "$th" = $t ] && echo "$dv" | grep -q "^cpu: $t thread"; then
		ok "--json --threads $t: threads $th, device '$dv'"
	else
		bad "--json --threads $t: threads '$th', device '$dv'"
	fi
done

# --json splits the MoE time by the engine thread's phases (moe_phases_ms):
# under a small HBM budget the decode split has routing and misses waited
# for, and its phases fit inside its moe_ms
out=$("$moem" decode --pack "$tmp/q.moem" --max-new 6 --tokens $p1 --backend cpu --hbm 10% \
	--no-model-eos --json)
dsplit=$(echo "$out" | sed -n 's/.*"decode":{\([^}]*}\)[^}]*}.*/\1/p')
if echo "$dsplit" | awk '{
	moe = $0; sub(/.*"moe_ms":/, "", moe); sub(/,.*/, "", moe)
	ph = $0; sub(/.*"moe_phases_ms":\{/, "", ph); sub(/\}.*/, "", ph)
	n = split(ph, kv, ","); sum = 0
	for (i = 1; i <= n; i++) { split(kv[i], p, ":"); gsub(/"/, "", p[1]); v[p[1]] = p[2]; sum += p[2] }
	exit !(n == 10 && v["route"] > 0 && v["wait"] > 0 && sum <= moe + 1e-6)
}'; then
	ok "--json: the decode split's MoE phases fit in its moe_ms"
else
	bad "--json: moe_phases_ms missing or over moe_ms: $dsplit"
fi

# Prompts known up front: the KV pool holds those sequences and no more
# (one 16-token block for 3 + 13 tokens; two sequences of 24 tokens, two
# blocks each), unless the user sized it (--max-seqs: the model's context).
kvj() { "$moem" decode --pack "$tmp/q.moem" --no-model-eos --json "$@" |
	sed -n "s/.*\"kv_bytes\":\([0-9]*\),\"kv_max_seqs\":\([0-9]*\),\"kv_max_context\":\([0-9]*\).*/\1 \2 \3/p"; }
one=$(kvj --tokens 1,2,3 --max-new 13)
two=$(kvj --tokens 1,2,3 --tokens 4000,3999,17,5,6,7,8,9,10,11,12,13 --max-new 12)
set -- $one
blk=${1:-0}
if [ "$one" = "$blk 1 16" ] && [ "$blk" -gt 0 ] && [ "$two" = "$((4 * blk)) 2 24" ]; then
	ok "the KV pool holds the prompts' sequences: '$one', '$two'"
else
	bad "KV pool for the prompts: '$one' (want B 1 16), '$two' (want 4B 2 24)"
fi
set -- $(kvj --tokens 1,2,3 --max-new 13 --max-seqs 4)
mp=$(sed -n 's/.*"max_position_embeddings": *\([0-9]*\).*/\1/p' "$tmp/q/config.json")
[ "$2" = 4 ] && [ "$3" = "$mp" ] && [ "$1" -gt "$blk" ] &&
	ok "--max-seqs 4: the pool is the decoder's default ($1 bytes, context $3)" ||
	bad "--max-seqs 4: kv '$*', the model's context is $mp"

for pk in q d; do
	dec() { "$moem" decode --pack "$tmp/$pk.moem" --max-new 12 --no-model-eos --quiet \
		--dense-prec q8 "$@"; }
	ref=$(dec --tokens $p1)
	[ -n "$ref" ] || { bad "$pk dense q8: no output"; continue; }
	got=$(dec --tokens $p1 --hbm 25% --dram 40% --threads 2)
	[ "$got" = "$ref" ] && ok "$pk dense q8: 25% HBM and 2 threads give the same tokens" ||
		bad "$pk dense q8: budgets or threads changed tokens: $got vs $ref"
	# shellcheck disable=SC2086
	got=$(dec --tokens $p1 $others | head -1)
	[ "$got" = "$ref" ] && ok "$pk dense q8: batch of 8 gives the same tokens" ||
		bad "$pk dense q8: batching changed tokens: $got vs $ref"
done
"$moem" mkmodel --arch qwen3_moe --layers 1 --experts 8 --topk 2 --hidden 192 \
	--moe-intermediate 64 --seed 7 --out "$tmp/o" >/dev/null 2>&1 &&
	"$moem" pack --model "$tmp/o" --out "$tmp/o.moem" --precisions bf16 >/dev/null 2>&1 ||
	bad "cannot make the hidden-192 model"
if out=$("$moem" decode --pack "$tmp/o.moem" --tokens 1,2 --max-new 2 --dense-prec q8 2>&1); then
	bad "accepted: --dense-prec q8 on hidden 192"
elif echo "$out" | grep -q "q_proj.weight to q8.*multiple of 128"; then
	ok "refused: --dense-prec q8 on hidden 192 (names q_proj)"
else
	bad "--dense-prec q8 on hidden 192: message \"$out\""
fi

expect_err() {
	what=$1
	shift
	if out=$("$moem" decode --pack "$tmp/q.moem" --max-new 2 --quiet "$@" 2>&1); then
		bad "accepted: $what"
	elif echo "$out" | grep -q "$msg"; then
		ok "refused: $what"
	else
		bad "$what: message \"$out\" lacks \"$msg\""
	fi
}
msg="outside the vocabulary" expect_err "id out of vocabulary" --tokens 1,4096
msg="outside the vocabulary" expect_err "negative id" --tokens 1,-3
msg="empty prompt" expect_err "empty prompt" --tokens ""
long=$(seq -s, 1 4100)
msg="does not fit the context" expect_err "prompt longer than the context" --tokens "$long"
msg="temperature" expect_err "temperature out of range" --tokens 1,2 --temperature -1
msg="top_p" expect_err "top_p out of range" --tokens 1,2 --temperature 1 --top-p 0
msg="unknown precision 'q3'" expect_err "--dense-prec q3" --tokens 1,2 --dense-prec q3
msg="repetition_penalty" expect_err "repetition penalty out of range" --tokens 1,2 \
	--repetition-penalty 0
msg="the model has 3 MoE layers" expect_err "--cpu-moe-layers beyond the MoE layers" \
	--tokens 1,2 --cpu-moe-layers 4
msg="want a number" expect_err "negative --cpu-moe-layers" --tokens 1,2 --cpu-moe-layers -1
msg="want gpu or hybrid" expect_err "unknown --exec" --tokens 1,2 --exec npu
msg="at least one token" expect_err "--max-new 0" --tokens 1,2 --max-new 0
msg="two at most" expect_err "three precisions" --tokens 1,2 --precisions bf16,q8,q4
msg="must have fewer bits" expect_err "LO above HI" --tokens 1,2 --precisions q4,bf16
msg="MoE layer 3 is beyond the model's 3" expect_err "--place beyond the MoE layers" \
	--tokens 1,2 --place layers=1-3:cpu
msg="'host' is not cpu, gpu or auto" expect_err "--place that does not parse" --tokens 1,2 \
	--place layers=0:host
msg="'layers=1:gpu' matches nothing" expect_err "--place that matches nothing" --tokens 1,2 \
	--place layers=0-2:cpu --place layers=1:gpu

a=$("$moem" decode --pack "$tmp/q.moem" --tokens $p1 --max-new 12 --temperature 0.9 \
	--top-p 0.9 --top-k 50 --seed 42 --quiet)
b=$("$moem" decode --pack "$tmp/q.moem" --tokens $p1 --max-new 12 --temperature 0.9 \
	--top-p 0.9 --top-k 50 --seed 42 --quiet)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "seeded sampling is reproducible" ||
	bad "seeded sampling: $a vs $b"
exit $fail
