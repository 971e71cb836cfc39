#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# moemd on the CUDA backend, where the decoder's KV pool is device memory
# charged to the HBM budget:
#  - --hbm 100% is the experts' share: once the model is served every
#    expert is resident and the budget is that share plus the pool; the
#    same with no --hbm;
#  - --hbm in bytes is the device memory to use: the pool takes its room
#    and some experts stay out;
#  - moemctl set hbm_bytes 100% over the socket, and hbm = 100% in the
#    config file reloaded by SIGHUP: the same share-plus-pool rule as at
#    start.
# The pack carries a byte-level tokenizer written here (256 byte tokens, no
# merges) so that moemd serves it. Runs on a GPU machine (make test-gpu)
# and on the kernel emulator (make test-gpu-emu); skips (exit 4) without a
# CUDA device.
. "$(dirname "$0")/lib.sh"
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT

# GPT-2's byte-level vocabulary: printable bytes stand for themselves,
# the others for U+0100 on, in byte order; written as \u escapes.
awk 'BEGIN { n = 0
	printf "{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":null,"
	printf "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
	printf "\"use_regex\":true},\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},"
	printf "\"model\":{\"type\":\"BPE\",\"merges\":[],\"vocab\":{"
	for (b = 0; b < 256; b++) {
		c = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174 ? b : 256 + n++
		printf "%s\"\\u%04x\":%d", b ? "," : "", c, b
	}
	printf "}}}\n" }' >"$tmp/tokenizer.json"
"$moem" mkmodel --arch qwen3_moe --layers 3 --experts 16 --topk 4 --hidden 256 \
	--moe-intermediate 128 --seed 7 --tokenizer "$tmp/tokenizer.json" --out "$tmp/q" \
	>/dev/null 2>&1 &&
	"$moem" pack --model "$tmp/q" --out "$tmp/q.moem" --precisions bf16 >/dev/null 2>&1 ||
	{ echo "FAIL: cannot make the model"; exit 1; }

# wait_log PATTERN: until moemd's log has a line matching it (0), or moemd
# exits first or 5 minutes pass (1). tail -f follows the log as it grows
# (inotify) and ends with moemd (--pid); grep stops at the first match.
wait_log() {
	rm -f "$tmp/follow"
	mkfifo "$tmp/follow" || return 1
	tail -n +1 --pid="$pid" -f "$tmp/log" >"$tmp/follow" &
	tpid=$!
	timeout 300 grep -q -m1 -e "$1" <"$tmp/follow"
	r=$?
	kill "$tpid" 2>/dev/null
	wait "$tpid" 2>/dev/null
	return $r
}

# start ARGS: moemd in the background until it serves the model (or gives up)
start() {
	rm -f "$tmp/s.sock"
	: >"$tmp/log"
	"$B/bin/moemd" --pack "$tmp/q.moem" --socket "$tmp/s.sock" --backend cuda \
		--persistent=no --listen 127.0.0.1:0 "$@" 2>>"$tmp/log" &
	pid=$!
	wait_log "serving: .* ready\|no model to serve" && grep -q "serving: .* ready" "$tmp/log" ||
		{ cat "$tmp/log"; return 1; }
}
stop() {
	kill "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	pid=
}
ctl() { "$B/bin/moemctl" --socket "$tmp/s.sock" "$@"; }
# "knob share used resident staged": the hbm_bytes knob, the experts'
# share, what they use, how many are resident, how many DRAM holds (all)
state() {
	ctl --json status | tr ',' '\n' | awk -F: '
		/"hbm_bytes"/ { k = $NF } /"hbm_budget"/ { s = $NF } /"hbm_used"/ { u = $NF }
		/"hbm_resident_hi"/ { r = $NF } /"dram_ready"/ { d = $NF }
		END { print k + 0, s + 0, u + 0, r + 0, d + 0 }'
}


# on_top WHAT: after WHAT, the knob holds the experts' $share and the pool
on_top() {
	set -- "$1" $(state)
	if [ "$2" -gt "$share" ] && [ "$3" = "$share" ]; then
		ok "$1: hbm_bytes $2, the experts' share $3"
	else
		bad "$1: knob $2, share $3 (want $share)"
	fi
}

share=0
for b in 100% none; do
	if [ $b = none ]; then start; else start --hbm $b; fi ||
		{ bad "moemd --hbm $b did not serve"; continue; }
	set -- $(state)
	if [ "$4" -gt 0 ] && [ "$4" = "$5" ] && [ "$1" -gt "$2" ] && [ "$3" = "$2" ]; then
		ok "--hbm $b: all $4 experts resident, hbm_bytes $1 = the experts' $2 + the pool"
	else
		bad "--hbm $b: knob $1, share $2, used $3, resident $4 of $5"
	fi
	[ $b = 100% ] && share=$2
	stop
done
if [ "$share" -gt 0 ] && start --hbm "$share"; then
	set -- $(state)
	if [ "$1" = "$share" ] && [ "$2" -lt "$share" ] && [ "$4" -lt "$5" ]; then
		ok "--hbm $share (bytes): kept as given, the pool takes $((share - $2)) of it," \
			"$4 of $5 experts resident"
	else
		bad "--hbm $share (bytes): knob $1, share $2, resident $4 of $5"
	fi
	ctl set hbm_bytes 100% >/dev/null || bad "moemctl set hbm_bytes 100% refused"
	on_top "moemctl set hbm_bytes 100%"
	stop
fi
printf 'hbm = %s\n' "$share" >"$tmp/conf"
if [ "$share" -gt 0 ] && start --config "$tmp/conf"; then
	printf 'hbm = 100%%\n' >"$tmp/conf"
	kill -HUP "$pid"
	if wait_log "reload: hbm_bytes = "; then
		on_top "hbm = 100% reloaded by SIGHUP"
	else
		bad "SIGHUP: no reload of hbm_bytes in the log"
		cat "$tmp/log"
	fi
	stop
fi
exit $fail
