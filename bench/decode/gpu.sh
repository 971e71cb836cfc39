#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Decode on the GPU against PyTorch (run-gpu.sh's phase decode_bench):
# moem decode --backend cuda on a synthetic qwen3_moe model with
# Qwen3-30B-A3B layer shapes (as bench/decode/run.sh: hidden 2048, 32
# heads, 4 KV heads, experts of width 768, top-8, vocab 4096; fewer layers
# and experts), batch 1 and 8, every expert resident and 25% HBM, against
# torch_decode.py (Hugging Face's eager qwen3_moe decode in bf16 with a KV
# cache, every weight on the device) on the same checkpoint. Prints a table
# and RESULT key=value lines; results are synthetic.
#   gpu.sh [cuda|cpu]   cpu: both sides on the CPU (a check of the script
#                       where there is no GPU; the numbers mean nothing)
#   DECODE_BENCH_LAYERS (4) DECODE_BENCH_EXPERTS (32) DECODE_BENCH_PROMPT (64)
#   DECODE_BENCH_NEW (32) DECODE_BENCH_DIR ($MOEM_BENCH_DIR/decode)
#   PYTHON (python3): an interpreter with torch; without torch the PyTorch
#   rows say so and the moem rows still run
set -eu
backend=${1:-cuda}
B=${MOEM_BUILD:-build}
here=$(cd "$(dirname "$0")" && pwd)
moem=$B/bin/moem
L=${DECODE_BENCH_LAYERS:-4}
E=${DECODE_BENCH_EXPERTS:-32}
P=${DECODE_BENCH_PROMPT:-64}
N=${DECODE_BENCH_NEW:-32}
dir=${DECODE_BENCH_DIR:-${MOEM_BENCH_DIR:-$B/bench}/decode-gpu}
py=${PYTHON:-python3}
case $backend in cuda | cpu) ;; *)
	echo "gpu.sh: backend $backend: cuda or cpu" >&2
	exit 2
	;;
esac
mkdir -p "$dir"
. "$here/model.sh"
decode_model "$dir" "$L" "$E" bf16 keep
res=$dir/results.jsonl
: >"$res"
torch_ok=1
$py -c 'import torch' 2>/dev/null || torch_ok=0
for batch in 1 8; do
	# the same prompts for both sides and every run, one a line, ids
	# separated by commas: Park-Miller's generator, exact in awk's doubles
	# (awk's own rand() differs between machines' awks)
	awk -v b="$batch" -v p="$P" 'BEGIN { x = 7; for (i = 0; i < b; i++) { s = "";
		for (j = 0; j < p; j++) { x = (x * 16807) % 2147483647
			s = s (j ? "," : "") x % 4096 }
		print s } }' >"$dir/prompts$batch"
	args=$(sed 's/^/--tokens /' "$dir/prompts$batch" | tr '\n' ' ')
	for hbm in 100% 25%; do
		# On CUDA the KV pool comes out of the HBM budget (Documentation/
		# engine.md, "KV cache"): the budget is the experts' share (each
		# expert 9 MiB in bf16) plus a 64 MiB pool, more than these
		# sequences need, so "100%" means every expert resident.
		mib=$((L * E * 9 * ${hbm%\%} / 100 + 64))
		# shellcheck disable=SC2086
		"$moem" decode --pack "$m.moem" $args --max-new "$N" --no-model-eos \
			--backend "$backend" --hbm "${mib}M" --kv-bytes 64M --json |
			$py -c "
import json, sys
d = json.load(sys.stdin)
print(json.dumps({'who': 'moem', 'batch': $batch, 'hbm': '$hbm',
                  'tps': d['decode_tokens_per_s'], 'step_ms': d['median_decode_step_ms'],
                  'ptps': d['prompt_tokens_per_s'], 'device_steps': d.get('device_steps', 0),
                  'graph_steps': d.get('graph_steps', 0), 'h2d': d['bytes_h2d'],
                  'misses': d['misses'], 'dec': d['decode'], 'pre': d['prefill'],
                  'tokens': [s['tokens'] for s in d['sequences']]}))" >>"$res"
	done
	if [ $torch_ok = 1 ]; then
		$py "$here/torch_decode.py" "$m" --prompts "$dir/prompts$batch" --max-new "$N" \
			--device "$backend" | $py -c "
import json, sys
d = json.load(sys.stdin)
print(json.dumps({'who': 'pytorch', 'batch': $batch, 'hbm': '100%',
                  'tps': d['decode_tokens_per_s'], 'step_ms': d['median_decode_step_ms'],
                  'ptps': d['prompt_tokens_per_s'], 'torch': d['torch'],
                  'tokens': [s['tokens'] for s in d['sequences']]}))" >>"$res"
	fi
done
$py - "$res" "$L" "$E" "$P" "$N" "$backend" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
L, E, P, N, be = sys.argv[2:]
torch = {r["batch"]: r for r in rows if r["who"] == "pytorch"}
print(f"Synthetic qwen3_moe, {L} layers x {E} experts (top-8, Qwen3-30B-A3B layer shapes, "
      f"vocab 4096), bf16, prompts of {P} tokens, {N} new tokens each, backend {be}.")
if torch:
    print(f"PyTorch {next(iter(torch.values()))['torch']}: torch_decode.py (HF eager qwen3_moe, "
          "bf16, KV cache, all weights on the device).")
else:
    print("PyTorch: not installed here; its rows and the ratios are left out.")
print()
print("| batch | run | decode tok/s | median step ms | prompt tok/s | decode x PyTorch "
      "| prompt x PyTorch | tokens as PyTorch's | decode: attention / MoE (waiting) / head / device "
      "| prefill: attention / MoE (waiting) / head / device | misses | device steps |")
print("|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|")


def split(d):  # shares of the steps' time
    if not d:
        return ""
    t = d["total_ms"] or 1
    a, m, w, h, v = (100 * d.get(k, 0) / t for k in
                     ("attention_ms", "moe_ms", "waiting_ms", "head_ms", "device_ms"))
    return f"{a:.0f}% / {m:.0f}% ({w:.0f}%) / {h:.0f}% / {v:.0f}%"


def same(a, b):  # greedy tokens equal up to the first difference, summed over sequences
    n = 0
    for x, y in zip(a, b):
        for u, v in zip(x, y):
            if u != v:
                break
            n += 1
    return n


res = []
for r in rows:
    t = torch.get(r["batch"])
    name = "PyTorch" if r["who"] == "pytorch" else f"moem, HBM {r['hbm']}"
    rt = pt = sm = ""
    if t and r["who"] == "moem":
        rt, pt = f"{r['tps'] / t['tps']:.2f}", f"{r['ptps'] / t['ptps']:.2f}"
        tot = sum(len(s) for s in t["tokens"])
        sm = f"{same(r['tokens'], t['tokens'])}/{tot}"
    print(f"| {r['batch']} | {name} | {r['tps']:.1f} | {r['step_ms']:.2f} | {r['ptps']:.0f} "
          f"| {rt} | {pt} | {sm} | {split(r.get('dec'))} | {split(r.get('pre'))} "
          f"| {r.get('misses', '')} | {r.get('device_steps', '')} |")
    key = "torch" if r["who"] == "pytorch" else "moem_hbm" + r["hbm"].rstrip("%")
    res.append(f"RESULT decode_{key}_B{r['batch']}_tps={r['tps']:.3f}")
    res.append(f"RESULT decode_{key}_B{r['batch']}_prompt_tps={r['ptps']:.3f}")
    if rt:
        res.append(f"RESULT decode_{key}_B{r['batch']}_vs_torch={rt}")
print()
# The first sequence's greedy tokens on each side: where they part shows
# whether a difference comes and goes between runs.
for r in rows:
    if r["batch"] == 1 and r["hbm"] == "100%":
        print(f"tokens ({r['who']}, batch 1): {','.join(map(str, r['tokens'][0]))}")
print()
print("\n".join(res))
PY
