#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# llama.cpp as a second independent reference for qwen3_moe: a synthetic
# checkpoint (classic per-expert tensors, and the same weights in
# transformers 5's fused layout) converted to an F32 GGUF
# (bench/llama/to_gguf.py), run by llama.cpp with an F32 KV cache and
# flash attention off (bench/llama/llama_peer.c, node-llama-cpp's prebuilt
# CPU build), against moem decode on the bf16 pack of the same
# checkpoint: logits at every position of a 48-token prompt and 16
# generated tokens, greedy tokens (tests/llama/compare.py). Skips (77)
# when npm or the registry is unreachable, or without Debian's numpy.
set -u
B=${MOEM_BUILD:-build}
moem=$B/bin/moem
py=/usr/bin/python3
here=$(dirname "$0")
if ! $py -c 'import numpy' 2>/dev/null; then
	echo "SKIP: /usr/bin/python3 has no numpy (python3-torch brings it)"
	exit 77
fi
sh "$here/../../bench/llama/install.sh" "$B/llama-peer"
rc=$?
if [ $rc -eq 77 ]; then
	echo "SKIP: the llama.cpp peer cannot be installed (npm registry unreachable)"
	exit 77
fi
[ $rc -eq 0 ] || { echo "FAIL: installing the llama.cpp peer"; exit 1; }
peer=$B/llama-peer/peer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
prompt=$($py -c 'import random; r = random.Random(9); print(",".join(str(r.randrange(4096)) for _ in range(48)))')

"$moem" mkmodel --arch qwen3_moe --layers 2 --experts 8 --topk 2 --hidden 256 \
	--moe-intermediate 128 --heads 4 --kv-heads 2 --head-dim 64 --seed 3 \
	--out "$tmp/m" >/dev/null 2>&1 || { echo "FAIL: mkmodel"; exit 1; }
$py "$here/../ref/fuse_experts.py" "$tmp/m" "$tmp/f" || { echo "FAIL: fuse_experts"; exit 1; }
for v in m f; do
	if ! "$moem" pack --model "$tmp/$v" --out "$tmp/$v.moem" --precisions bf16 >/dev/null ||
		! $py "$here/../../bench/llama/to_gguf.py" "$tmp/$v" "$tmp/$v.gguf" f32; then
		echo "FAIL $v: could not pack or convert"
		fail=1
		continue
	fi
	mt=$("$moem" decode --pack "$tmp/$v.moem" --tokens "$prompt" --max-new 16 --no-model-eos \
		--threads 2 --logits-out "$tmp/$v.moem.lgt" --quiet | sed 's/ (.*//')
	lt=$("$peer" run --model "$tmp/$v.gguf" --tokens "$prompt" --max-new 16 --threads 2 \
		--f32-kv --logits-out "$tmp/$v.llama.lgt" | sed 's/.*"tokens":\[\([0-9,]*\)\].*/\1/')
	if [ -z "$mt" ] || [ -z "$lt" ]; then
		echo "FAIL $v: no output (moem '$mt', llama.cpp '$lt')"
		fail=1
		continue
	fi
	if $py "$here/compare.py" "$tmp/$v.moem.lgt" "$tmp/$v.llama.lgt" 48 "$mt" "$lt"; then
		echo "ok   $v"
	else
		echo "FAIL $v"
		fail=1
	fi
done
exit $fail
