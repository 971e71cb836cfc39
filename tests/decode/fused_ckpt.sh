#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Checkpoints in transformers 5's layout (fused mlp.experts.gate_up_proj
# [E, 2I, H] and down_proj [E, H, I], Mixtral's block_sparse_moe renamed
# to mlp), written from classic ones by tests/ref/fuse_experts.py: for
# qwen3_moe, mixtral, olmoe and deepseek_v2 the pack of the fused
# checkpoint decodes to bitwise the same logits as the classic one's;
# a fused tensor of the wrong shape, and a layer with both layouts, are
# refused with a message and leave no pack behind.
set -u
B=${MOEM_BUILD:-build}
moem=$B/bin/moem
py=/usr/bin/python3
here=$(dirname "$0")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

for a in qwen3_moe mixtral olmoe deepseek_v2; do
	"$moem" mkmodel --arch $a --layers 2 --experts 8 --topk 2 --hidden 256 \
		--moe-intermediate 128 --intermediate 128 --seed 5 --out "$tmp/c_$a" >/dev/null 2>&1 ||
		{ bad "$a: mkmodel"; continue; }
	$py "$here/../ref/fuse_experts.py" "$tmp/c_$a" "$tmp/f_$a" || { bad "$a: fuse"; continue; }
	for v in c f; do
		"$moem" pack --model "$tmp/${v}_$a" --out "$tmp/${v}_$a.moem" --precisions bf16,q4 \
			>/dev/null 2>"$tmp/err" || { bad "$a: pack $v: $(cat "$tmp/err")"; continue 2; }
		"$moem" decode --pack "$tmp/${v}_$a.moem" --tokens 1,2,3,4,5 --max-new 6 \
			--no-model-eos --quiet --logits-out "$tmp/${v}_$a.lgt" >/dev/null ||
			{ bad "$a: decode $v"; continue 2; }
	done
	cmp -s "$tmp/c_$a.lgt" "$tmp/f_$a.lgt" && ok "$a: fused checkpoint gives the same logits" ||
		bad "$a: fused and classic logits differ"
done

refuse() {
	what=$1
	msg=$2
	if out=$("$moem" pack --model "$tmp/$3" --out "$tmp/$3.moem" 2>&1); then
		bad "accepted: $what"
	elif [ -e "$tmp/$3.moem" ]; then
		bad "$what: a pack was left behind"
	elif echo "$out" | grep -q "$msg"; then
		ok "refused: $what"
	else
		bad "$what: message \"$out\" lacks \"$msg\""
	fi
}
$py "$here/../ref/fuse_experts.py" "$tmp/c_qwen3_moe" "$tmp/b1" --bad-shape &&
	refuse "fused tensor of the wrong shape" "gate_up_proj: shape \[7, 256, 256\]" b1
$py "$here/../ref/fuse_experts.py" "$tmp/c_mixtral" "$tmp/b2" --both &&
	refuse "a layer with both layouts" "a layer has both layouts" b2
exit $fail
