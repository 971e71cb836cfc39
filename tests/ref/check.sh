#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# moem's full decode against an independent PyTorch forward
# (tests/ref/ref_forward.py, Debian's python3-torch) on tiny random
# checkpoints of each architecture written by tests/ref/mkckpt.py in the
# real Hugging Face layout: qwen3_moe, mixtral with a sliding window,
# olmoe with clip_qkv and tied embeddings, deepseek_v2 with YaRN and q
# LoRA, deepseek_v2 Lite-style (no q LoRA, normalised routing), deepseek_v2
# V2-style (group-limited routing, scaled weights). Logits at
# every position of a 64-token prompt and 31 generated tokens within the
# tolerance, 32 greedy tokens identical. Skips (exit 77) without torch.
set -u
B=${MOEM_BUILD:-build}
moem=$B/bin/moem
py=/usr/bin/python3
here=$(dirname "$0")
if ! $py -c 'import torch' 2>/dev/null; then
	echo "SKIP: /usr/bin/python3 has no torch (scripts/deps.sh installs python3-torch)"
	exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prompt=$($py -c 'import random; r = random.Random(5); print(",".join(str(r.randrange(256)) for _ in range(64)))')
fail=0
for v in qwen3_moe mixtral_swa olmoe deepseek_v2_yarn deepseek_v2_lite deepseek_v2_groups; do
	if ! $py "$here/mkckpt.py" "$v" "$tmp/$v" 1 ||
		! "$moem" pack --model "$tmp/$v" --out "$tmp/$v.moem" --precisions bf16 >/dev/null; then
		echo "FAIL $v: could not make or pack the checkpoint"
		fail=1
		continue
	fi
	toks=$("$moem" decode --pack "$tmp/$v.moem" --tokens "$prompt" --max-new 32 \
		--no-model-eos --logits-out "$tmp/$v.lgt" --quiet | sed 's/ (.*//')
	if [ -z "$toks" ]; then
		echo "FAIL $v: moem decode produced nothing"
		fail=1
		continue
	fi
	if $py "$here/ref_forward.py" "$tmp/$v" "$tmp/$v.lgt" "$prompt" "$toks"; then
		echo "ok   $v"
	else
		echo "FAIL $v"
		fail=1
	fi
done
exit $fail
