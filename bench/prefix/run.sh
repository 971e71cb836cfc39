#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# The prefix cache against llama.cpp's prompt cache (make bench-prefix):
# the turns of a chat as a client sends them, each prompt the one before,
# an assistant answer and a new user message (PREFIX_BENCH_SYS system
# tokens, then PREFIX_BENCH_TURNS turns of PREFIX_BENCH_ANS answer and
# PREFIX_BENCH_USER user tokens; random ids), each turn decoded greedily
# for PREFIX_BENCH_NEW tokens. moem: `moem decode --max-seqs 1` (the
# turns one after another in one decoder) with its prefix cache and with
# --no-prefix-cache; llama.cpp (node-llama-cpp's prebuilt CPU build,
# bench/llama/llama_peer.c `chat`) keeping the cache's common beginning
# with the next prompt (the server's cache_prompt) and computing every
# prompt whole. Same synthetic bf16 model (the bench-llama shapes), same
# token ids, same threads. Each figure: the prompt time summed over the
# turns (each prompt's forward pass and its first token), the median of
# PREFIX_BENCH_REPS runs, programs alternating. DOC=FILE writes the page.
set -eu
B=${MOEM_BUILD:-build}
moem=$B/bin/moem
here=$(cd "$(dirname "$0")" && pwd)
L=${PREFIX_BENCH_LAYERS:-4}
E=${PREFIX_BENCH_EXPERTS:-32}
SYS=${PREFIX_BENCH_SYS:-384}
TURNS=${PREFIX_BENCH_TURNS:-6}
USER=${PREFIX_BENCH_USER:-40}
ANS=${PREFIX_BENCH_ANS:-24}
NEW=${PREFIX_BENCH_NEW:-8}
T=${PREFIX_BENCH_THREADS:-2}
REPS=${PREFIX_BENCH_REPS:-3}
py=/usr/bin/python3
dir=$B/bench/prefix
rc=0
sh "$here/../llama/install.sh" "$B/llama-peer" || rc=$?
if [ $rc -eq 77 ]; then
	echo "SKIP: the llama.cpp peer cannot be installed"
	exit 77
fi
[ $rc -eq 0 ] || exit 1
peer=$B/llama-peer/peer
mkdir -p "$dir"
m=$dir/q3moe-L$L-E$E
if [ ! -f "$m.bf16.gguf" ]; then
	rm -rf "$m"
	"$moem" mkmodel --preset qwen3-30b-a3b --layers "$L" --experts "$E" --seed 1 \
		--out "$m" >/dev/null
	"$moem" pack --model "$m" --out "$m.moem" --precisions bf16 >/dev/null
	$py "$here/../llama/to_gguf.py" "$m" "$m.bf16.gguf.tmp" bf16
	mv "$m.bf16.gguf.tmp" "$m.bf16.gguf"
	rm -rf "$m"
fi
# The turns' prompts, one per line (comma-separated ids).
$py - "$SYS" "$TURNS" "$USER" "$ANS" >"$dir/turns.txt" <<'PY'
import random, sys
s, turns, user, ans = map(int, sys.argv[1:])
r = random.Random(11)
ids = lambda n: [r.randrange(4096) for _ in range(n)]
p = ids(s) + ids(user)
for t in range(turns):
    print(",".join(map(str, p)))
    p = p + ids(ans) + ids(user)
PY
set --
while read -r line; do
	set -- "$@" --tokens "$line"
done <"$dir/turns.txt"
res=$dir/results.jsonl
: >"$res"
load0=$(cut -d' ' -f1-3 /proc/loadavg)
i=0
while [ "$i" -lt "$REPS" ]; do
	for mode in on off; do
		pc=
		reuse=--reuse
		[ $mode = off ] && pc=--no-prefix-cache && reuse=
		# shellcheck disable=SC2086
		mo=$("$moem" decode --pack "$m.moem" --max-seqs 1 --max-new "$NEW" --no-model-eos \
			--backend cpu --threads "$T" --json $pc "$@")
		# shellcheck disable=SC2086
		lo=$("$peer" chat --model "$m.bf16.gguf" --max-new "$NEW" --threads "$T" $reuse "$@")
		printf '{"mode":"%s","moem":%s,"llama":%s}\n' "$mode" "$mo" "$lo" >>"$res"
	done
	i=$((i + 1))
done
$py - "$res" "$dir/turns.txt" "$NEW" <<'PY' >"$dir/table.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
turns = [len(l.split(",")) for l in open(sys.argv[2]) if l.strip()]
new = int(sys.argv[3])
def med(mode, f):
    return statistics.median(f(r) for r in rows if r["mode"] == mode)
moem_ms = lambda r: r["moem"]["prefill"]["total_ms"]
llama_ms = lambda r: r["llama"]["prompt_ms"]
moem_tok = lambda r: r["moem"]["prompt_tokens"]
llama_tok = lambda r: sum(t["computed"] for t in r["llama"]["turns"])
n = sum(1 for r in rows if r["mode"] == "on")
print(f"{len(turns)} turns, prompts of {turns[0]} to {turns[-1]} tokens ({sum(turns)} in all), "
      f"{new} tokens generated per turn; prompt time summed over the turns, the median of {n} "
      f"runs of each (programs alternating); *computed*: prompt tokens run through the model.\n")
print("| cache | moem computed | moem prompt ms | llama.cpp computed | llama.cpp prompt ms | "
      "llama.cpp / moem |")
print("|---|--:|--:|--:|--:|--:|")
for mode, name in (("off", "off (every prompt whole)"),
                   ("on", "on (moem prefix cache; llama.cpp cache_prompt)")):
    mm, lm = med(mode, moem_ms), med(mode, llama_ms)
    print(f"| {name} | {med(mode, moem_tok):.0f} | {mm:.1f} | {med(mode, llama_tok):.0f} | "
          f"{lm:.1f} | {lm / mm:.2f}x |")
print()
print(f"The cache's own gain, prompt time off / on: moem {med('off', moem_ms) / med('on', moem_ms):.2f}x, "
      f"llama.cpp {med('off', llama_ms) / med('on', llama_ms):.2f}x. moem takes whole blocks of "
      f"16 tokens (at least the last prompt token computed), llama.cpp any common beginning, so "
      f"moem computes up to 15 tokens more per turn.")
PY
cat "$dir/table.md"
if [ -n "${DOC:-}" ]; then
	# before the page is opened for writing, which would make the tree dirty
	rev=$(git -C "$here" describe --always --dirty 2>/dev/null || echo unknown)
	dev=$($py -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["moem"]["device"])' "$res")
	{
		echo "<!-- SPDX-License-Identifier: GPL-2.0-only -->"
		echo "# Prefix cache: a chat's turns against llama.cpp's prompt cache (synthetic)"
		echo
		echo "Generated by \`make bench-prefix DOC=$DOC\` (bench/prefix/run.sh); do not edit."
		echo
		echo "- machine: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs," \
			"$(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)," \
			"load average $load0 at the start of the run and" \
			"$(cut -d' ' -f1-3 /proc/loadavg) at its end"
		echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
		echo "- moem: $rev, \`moem decode --max-seqs 1 --backend cpu --threads $T\`, bf16" \
			"($dev; CPU flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
				grep -E '^(avx2|fma|avx512f|avx512_bf16|avx512_vnni|amx_bf16)$' |
				tr '\n' ' ' | sed 's/ $//'))"
		echo "- llama.cpp: node-llama-cpp's prebuilt linux-x64 CPU build" \
			"(llama.cpp $(sed -n 's/.*"tag": "\(.*\)".*/\1/p' \
				"$B/llama-peer/npm/node_modules/node-llama-cpp/llama/llama.cpp.info.json")," \
			"$T threads, flash attention off, F16 KV cache), \`llama-peer chat\`" \
			"(bench/llama/llama_peer.c)"
		echo "- model: \`moem mkmodel --preset qwen3-30b-a3b --layers $L --experts $E --seed 1\`" \
			"(all-MoE qwen3_moe, Qwen3-30B-A3B layer shapes, vocab 4096, random weights)," \
			"packed bf16 and converted to BF16 GGUF by bench/llama/to_gguf.py; prompts of" \
			"random ids: $SYS system tokens, then per turn the last answer's $ANS and" \
			"the user's $USER"
		echo
		cat "$dir/table.md"
	} >"$DOC"
	echo "wrote $DOC"
fi
