#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# moem against llama.cpp (make bench-llama): the same synthetic all-MoE
# qwen3_moe checkpoint (Qwen3-30B-A3B layer shapes: hidden 2048, 32/4
# heads of 128, experts of width 768, top-8; LLAMA_BENCH_LAYERS layers of
# LLAMA_BENCH_EXPERTS experts, vocab 4096) packed by moem (bf16, q8, q4)
# and converted to GGUF by bench/llama/to_gguf.py (BF16), then quantized
# with llama.cpp's own llama_model_quantize (Q8_0, Q4_K_M). Same token
# ids, same threads (1 and 2), batch 1, all experts in host memory:
# prompt tokens/s, decode tokens/s over the whole run and the median
# decode step, precision against precision; then moem at 25% HBM, which
# llama.cpp cannot express. Results are synthetic. The peer is
# node-llama-cpp's prebuilt CPU build (bench/llama/install.sh); without
# the npm registry the benchmark is skipped (exit 77).
# Note what the rows compare: a q8/q4 pack quantizes the routed experts
# only; llama.cpp's Q8_0 and Q4_K_M quantize every matrix. So each moem
# precision runs with its dense weights (attention projections, lm_head)
# as packed, bf16, and quantized when loaded (moem decode --dense-prec):
# q8 with q8, q4 with q8 and q4.
# Each row is the best of LLAMA_BENCH_REPS runs of each program (by decode
# rate): on a shared machine other work only ever slows a run, so the
# best run is the nearest to what the program does alone.
#   LLAMA_BENCH_LAYERS (4) LLAMA_BENCH_EXPERTS (32) LLAMA_BENCH_PROMPT (64)
#   LLAMA_BENCH_NEW (32) LLAMA_BENCH_THREADS ("1 2") LLAMA_BENCH_REPS (3)
#   DOC=path (the page)
set -eu
B=${MOEM_BUILD:-build}
moem=$B/bin/moem
here=$(cd "$(dirname "$0")" && pwd)
L=${LLAMA_BENCH_LAYERS:-4}
E=${LLAMA_BENCH_EXPERTS:-32}
P=${LLAMA_BENCH_PROMPT:-64}
N=${LLAMA_BENCH_NEW:-32}
THREADS=${LLAMA_BENCH_THREADS:-1 2}
REPS=${LLAMA_BENCH_REPS:-3}
py=/usr/bin/python3
dir=$B/bench/llama
# shellcheck source=bench/llama/peer.sh
. "$here/peer.sh"
peer_setup
mkdir -p "$dir"
m=$dir/q3moe-L$L-E$E
peer_model "$m" "$L" "$E" bf16,q8,q4 q8_0 q4_k_m
prompt=$($py -c "import random; r = random.Random(7); print(','.join(str(r.randrange(4096)) for _ in range($P)))")
res=$dir/results.jsonl
: >"$res"
# best CMD..: run CMD (one JSON line out) REPS times, print the run of the best decode rate
best() {
	: >"$dir/runs.jsonl"
	i=0
	while [ "$i" -lt "$REPS" ]; do
		"$@" >>"$dir/runs.jsonl" || return 1
		echo >>"$dir/runs.jsonl"
		i=$((i + 1))
	done
	$py -c 'import json, sys
rs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(json.dumps(max(rs, key=lambda r: r["decode_tokens_per_s"]), separators=(",", ":")))' \
		"$dir/runs.jsonl"
}
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for t in $THREADS; do
	for pr in bf16:bf16:bf16 q8:q8_0:bf16,q8 q4:q4_k_m:bf16,q8,q4; do
		mp=${pr%%:*}
		lp=${pr#*:}
		dps=${lp#*:}
		lp=${lp%%:*}
		lo=$(best "$peer" run --model "$m.$lp.gguf" --tokens "$prompt" --max-new "$N" --threads "$t")
		for dp in $(echo "$dps" | tr , ' '); do
			mo=$(best "$moem" decode --pack "$m.moem" --tokens "$prompt" --max-new "$N" \
				--no-model-eos --backend cpu --threads "$t" --precisions "$mp" \
				--dense-prec "$dp" --json)
			printf '{"threads":%s,"moem_prec":"%s","dense":"%s","llama_type":"%s","hbm":"100%%","llama":%s,"moem":%s}\n' \
				"$t" "$mp" "$dp" "$lp" "$lo" "$mo" >>"$res"
		done
	done
	for mp in bf16 q4; do
		mo=$(best "$moem" decode --pack "$m.moem" --tokens "$prompt" --max-new "$N" \
			--no-model-eos --backend cpu --threads "$t" --precisions "$mp" --hbm 25% --json)
		printf '{"threads":%s,"moem_prec":"%s","dense":"bf16","hbm":"25%%","moem":%s}\n' \
			"$t" "$mp" "$mo" >>"$res"
	done
done
$py - "$res" "$L" "$E" "$P" "$N" "$REPS" "$dir/backend.txt" <<'PY' >"$dir/table.md"
import json, re, sys
L, E, P, N, R, meta = sys.argv[2:]
rows = [json.loads(l) for l in open(sys.argv[1])]
# Each row's thread counts as the programs report them (moem decode --json's
# "threads", the peer's n_threads = n_threads_batch), not as asked.
def threads(r):
    mt = r["moem"].get("threads", r["threads"])
    lt = r["llama"]["threads"] if "llama" in r else mt
    return f"{mt}" if mt == lt else f"{mt} (llama.cpp {lt})"
# The backend without its thread count, which varies by row.
dev = rows[0]["moem"].get("device", rows[0]["moem"]["backend"]) if rows else "?"
dev = re.sub(r"\b\d+ threads?, ", "", dev)
used = sorted({threads(r) for r in rows}, key=lambda t: (len(t), t))
with open(meta, "w") as f:
    f.write(f"{dev}; threads: {', '.join(used)}\n")
# Weight bytes one decode token reads (the qwen3-30b-a3b preset's shapes,
# every layer MoE): 8 experts of 3 x 2048 x 768 per layer, q/k/v/o
# (4096 + 2 x 512 rows of 2048, 2048 rows of 4096), lm_head 4096 x 2048;
# bits per weight with the fp16 scales (and mins) of moem's layouts.
bpw = {"bf16": 16, "q8": 8 + 16 / 128, "q4": 4 + 32 / 128, "q2": 2 + 32 / 64}
def token_bytes(ep, dp):
    ex = 8 * 3 * 2048 * 768 * int(L)
    attn = (4096 + 1024) * 2048 * int(L) + 2048 * 4096 * int(L)
    return (ex * bpw[ep] + (attn + 4096 * 2048) * bpw[dp]) / 8
print(f"Synthetic all-MoE qwen3_moe, {L} layers x {E} experts (top-8, Qwen3-30B-A3B layer "
      f"shapes, vocab 4096), batch 1, a prompt of {P} tokens, {N} generated; decode tok/s over "
      f"the whole run (median step in brackets), each program's best of {R} runs by decode rate. *dense*: the precision of moem's attention "
      f"projections and lm_head (bf16 as packed, or quantized when loaded: --dense-prec); "
      f"*moem step*: its mean decode step split into attention (projections and KV), MoE "
      f"and lm_head, in ms; *moem GB/s*: the weight bytes a token reads (experts, "
      f"projections, lm_head) over the mean decode step, to hold against the read-only "
      f"stream of cpu-kernels.md.\n")
print("| threads | moem | dense | llama.cpp | HBM | moem prompt tok/s | llama.cpp prompt tok/s | "
      "ratio | moem decode tok/s (median ms) | llama.cpp decode tok/s (median ms) | ratio | "
      "moem step: attn / MoE / head | moem GB/s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    m = r["moem"]
    mp, md = m["prompt_tokens_per_s"], m["decode_tokens_per_s"]
    ms = m["median_decode_step_ms"]
    dd = m["decode"]
    n = max(dd["steps"], 1)
    split = f"{dd['attention_ms'] / n:.1f} / {dd['moe_ms'] / n:.1f} / {dd['head_ms'] / n:.1f}"
    gbs = token_bytes(r["moem_prec"], r["dense"]) / (dd["total_ms"] / n * 1e6)
    if "llama" in r:
        l = r["llama"]
        lp, ld, ls = l["prompt_tokens_per_s"], l["decode_tokens_per_s"], l["median_decode_step_ms"]
        print(f"| {threads(r)} | {r['moem_prec']} | {r['dense']} | {r['llama_type'].upper()} | "
              f"{r['hbm']} | {mp:.1f} | {lp:.1f} | {mp / lp:.2f}x | {md:.2f} ({ms:.0f}) | "
              f"{ld:.2f} ({ls:.0f}) | {md / ld:.2f}x | {split} | {gbs:.1f} |")
    else:
        print(f"| {threads(r)} | {r['moem_prec']} | {r['dense']} | - | {r['hbm']} | {mp:.1f} | "
              f"- | - | {md:.2f} ({ms:.0f}) | - | - | {split} | - |")
PY
cat "$dir/table.md"
if [ -n "${DOC:-}" ]; then
	{
		echo "<!-- SPDX-License-Identifier: GPL-2.0-only -->"
		echo "# moem against llama.cpp on the CPU (synthetic)"
		echo
		echo "Generated by \`make bench-llama DOC=$DOC\` (bench/llama/run.sh); do not edit."
		echo
		echo "- machine: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs," \
			"$(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)," \
			"load average $load0 at the start of the run and" \
			"$(cut -d' ' -f1-3 /proc/loadavg) at its end (2 CPUs: above about 1," \
			"other work shares the cores and memory with both programs)"
		echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
		echo "- moem: $(git -C "$here" describe --always --dirty 2>/dev/null || echo unknown)," \
			"backend $(cat "$dir/backend.txt") (each row's *threads* column: what both" \
			"programs ran with, as each reported it; moem's CPU workers, llama.cpp's" \
			"n_threads and n_threads_batch)"
		echo "- llama.cpp: node-llama-cpp 3.21.1's prebuilt linux-x64 CPU build" \
			"(llama.cpp $(sed -n 's/.*"tag": "\(.*\)".*/\1/p' \
				"$B/llama-peer/npm/node_modules/node-llama-cpp/llama/llama.cpp.info.json")," \
			"flash attention off, F16 KV cache), driven through llama.h by bench/llama/llama_peer.c"
		echo
		echo "A moem q8/q4 pack quantizes the routed experts only; attention, embeddings" \
			"and lm_head stay bf16 unless the decoder quantizes the dense weights when it" \
			"loads them (the *dense* column, \`moem decode --dense-prec\`). llama.cpp's Q8_0" \
			"and Q4_K_M quantize every matrix (Q4_K_M keeps attn_v and the output matrix" \
			"in Q6_K), so the dense-bf16 rows move more bytes per token than llama.cpp."
		echo
		cat "$dir/table.md"
		echo
		echo "Where the time goes. A batch-1 decode step reads once every weight the token" \
			"uses, so on one thread its time is those bytes over what one core can stream." \
			"The split column (\`moem decode --json\`) shows a q8/q4 pack with its dense" \
			"weights in bf16 spending about as long on the attention projections as on the" \
			"experts: the dense-bf16 rows read more bytes per token than llama.cpp's. With" \
			"\`--dense-prec\` the decoder quantizes them when it loads them, as llama.cpp's" \
			"types do; dense q4 costs more quality than dense q8 (\`moem eval --dense-prec\`," \
			"tests/decode/eval_cli.sh), where Q4_K_M keeps attn_v and the output matrix in" \
			"Q6_K. What is left of a gap shows in the GB/s column (moem's weight bytes per" \
			"second) against the read-only stream of cpu-kernels.md on the same machine type:" \
			"where a row reads well below that stream, its expert and projection kernels," \
			"not memory, set the pace (cpu-kernels.md's *of read* column per precision);" \
			"the rest of a step (router, norms, RoPE, attention over a short KV cache," \
			"lm_head) is the remainder the split shows. On this shared 2-CPU machine the" \
			"load above moves both programs' rates by tens of percent from run to run."
	} >"$DOC.tmp"
	mv "$DOC.tmp" "$DOC"
fi
