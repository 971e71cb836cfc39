#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# The moem CLI under bad input, as an adversarial pass found it (each
# check failed before its fix): an output that is one of the command's
# inputs, or a device, is refused and the input stays whole; a failed
# decode leaves an existing --logits-out file as it was; sizes with blanks
# and signs, an empty budget list and zero heads are refused with a
# message; text from a trace never reaches gnuplot's script as commands.
# Exit 0 pass, 1 fail.
set -u
B=${MOEM_BUILD:-build}
M=$B/bin/moem
tmp=$(mktemp -d /tmp/moem-cli-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() {
	echo "not ok: $*"
	fail=1
}
# refused RC_WANT MESSAGE_PART CMD...: the command exits RC_WANT saying MESSAGE_PART
refused() {
	local want=$1 msg=$2
	shift 2
	"$@" >"$tmp/out" 2>&1
	local rc=$?
	if [ "$rc" = "$want" ] && grep -q -- "$msg" "$tmp/out"; then
		ok "refused ($rc, '$msg'): ${*#"$M "}"
	else
		bad "${*#"$M "}: exit $rc, want $want and '$msg'; said: $(tail -n 3 "$tmp/out")"
	fi
}

"$M" mkmodel --arch qwen3_moe --layers 2 --experts 4 --top-k 2 --hidden 128 \
	--moe-intermediate 64 --intermediate 64 --heads 2 --kv-heads 1 --head-dim 64 --vocab 256 \
	--seed 1 --out "$tmp/m" >"$tmp/mk.log" 2>&1 &&
	"$M" pack --model "$tmp/m" --out "$tmp/m.moem" --precisions bf16 >>"$tmp/mk.log" 2>&1 &&
	"$M" trace gen --seed 1 --layers 2 --experts 8 --top-k 2 --steps 20 \
		--out "$tmp/t.trace" >>"$tmp/mk.log" 2>&1 || {
	cat "$tmp/mk.log"
	echo "not ok: setup"
	exit 1
}
size() { stat -c %s "$1"; }
psize=$(size "$tmp/m.moem")

# Outputs that are inputs.
refused 1 "it is the input" "$M" run --pack "$tmp/m.moem" --steps 1 --trace-out "$tmp/m.moem"
refused 1 "it is the input" "$M" run --pack "$tmp/m.moem" --steps 1 --counts-out "$tmp/m.moem"
refused 1 "it is the input" "$M" decode --pack "$tmp/m.moem" --tokens 1,2 --max-new 1 \
	--logits-out "$tmp/m.moem"
[ "$(size "$tmp/m.moem")" = "$psize" ] && "$M" info "$tmp/m.moem" >/dev/null 2>&1 &&
	ok "the pack is whole after them" || bad "the pack was changed"
refused 1 "checkpoint being packed" "$M" pack --model "$tmp/m" \
	--out "$tmp/m/model.safetensors" --precisions bf16
"$M" info "$tmp/m" >/dev/null 2>&1 && ok "the checkpoint is whole" ||
	bad "the checkpoint was destroyed"
"$M" trace dump "$tmp/t.trace" >"$tmp/t.jsonl"
refused 1 "it is the input" "$M" trace import --out "$tmp/t.jsonl" "$tmp/t.jsonl"
head -c 1 "$tmp/t.jsonl" | grep -q '{' && ok "the JSON trace is whole" ||
	bad "the JSON trace was replaced"

# A device as the output (root makes one; a user cannot, and skips).
if mknod "$tmp/null" c 1 3 2>/dev/null; then
	refused 1 "not a regular file" "$M" trace gen --seed 1 --layers 2 --experts 8 \
		--top-k 2 --steps 2 --out "$tmp/null"
	[ -c "$tmp/null" ] && ok "the device node stays" || bad "the device node was replaced"
else
	echo "skip: mknod (not root): the device-output check"
fi

# A decode that fails leaves --logits-out's old content.
echo keep >"$tmp/lo.bin"
refused 1 "outside the vocabulary" "$M" decode --pack "$tmp/m.moem" --tokens 99999 \
	--logits-out "$tmp/lo.bin"
[ "$(cat "$tmp/lo.bin")" = keep ] && ok "the old logits file stays" ||
	bad "a failed decode changed --logits-out"
"$M" decode --pack "$tmp/m.moem" --tokens 1,2 --max-new 2 --logits-out "$tmp/lo.bin" \
	>/dev/null 2>&1 && [ "$(head -c 8 "$tmp/lo.bin")" = MOEMLGT1 ] &&
	ok "a decode that works writes it" || bad "--logits-out not written"

# Config files: a device or a directory is refused (/dev/zero spun forever),
# and the first error's line goes with its message.
refused 1 "not a regular file" timeout 60 "$M" run --pack "$tmp/m.moem" --config /dev/zero
refused 1 "not a regular file" "$M" run --pack "$tmp/m.moem" --config "$tmp"
printf 'steps = 2\nbogus = 1\nbatch = 999\n' >"$tmp/c.ini"
refused 1 "line 2: unknown setting 'bogus'" "$M" run --pack "$tmp/m.moem" --config "$tmp/c.ini"

# A replayed trace shorter than the run is refused before step 0.
"$M" trace gen --model "$tmp/m" --seed 1 --batch 2 --steps 5 --out "$tmp/r.trace" \
	>/dev/null 2>&1 || bad "trace gen --model"
refused 1 "holds 5 steps, the run asks for 9" "$M" run --pack "$tmp/m.moem" \
	--workload "trace:$tmp/r.trace" --batch 2 --steps 9

# info --json says the pack's format version, as the text does.
fmt=$("$M" info "$tmp/m.moem" | sed -n 's/.*format \([0-9.]*\),.*/\1/p')
"$M" info --json "$tmp/m.moem" | grep -q "\"format\": \"$fmt\"" && [ -n "$fmt" ] &&
	ok "info --json: format $fmt" || bad "info --json does not say format $fmt"

# Output that does not reach stdout is a failure.
if [ -c /dev/full ]; then
	refused 1 "writing the output" sh -c "\"$M\" info \"$tmp/m.moem\" >/dev/full"
fi

# Sizes, budgets, shapes.
refused 2 "no HBM budget" "$M" sim "$tmp/t.trace" --policy lru --hbm ,
refused 1 "no sign or blanks" "$M" sim "$tmp/t.trace" --policy lru --hbm " -5"
refused 1 "less than one byte" "$M" sim "$tmp/t.trace" --policy lru --hbm 0.00000001%
refused 1 "num_attention_heads 0" "$M" mkmodel --layers 2 --experts 4 --top-k 2 \
	--hidden 128 --moe-intermediate 64 --vocab 256 --heads 0 --kv-heads 1 --head-dim 64 \
	--seed 1 --out "$tmp/h0"
[ -e "$tmp/h0" ] && bad "mkmodel --heads 0 left a directory" || ok "nothing left by it"

# A trace's description is text, never gnuplot script (with gnuplot or without).
"$M" trace dump "$tmp/t.trace" |
	sed "1s|\"desc\":\"[^\"]*\"|\"desc\":\"x\\\\\"; system \\\\\"touch $tmp/INJ\\\\\"; print \\\\\"\"|" \
		>"$tmp/evil.jsonl"
if "$M" trace import --out "$tmp/evil.trace" "$tmp/evil.jsonl" >/dev/null 2>&1; then
	"$M" sim "$tmp/evil.trace" --policy lru --sweep --budgets 25%,50% \
		--plot "$tmp/p.png" >/dev/null 2>&1
	[ -e "$tmp/INJ" ] && bad "the trace's text ran as a command" ||
		ok "the trace's text did not run"
else
	bad "the crafted trace was not imported"
fi
refused 1 "quotes, backquotes or newlines" "$M" sim "$tmp/t.trace" --policy lru --sweep \
	--budgets 25% --plot "$tmp/it's.png"

# Endless input (/dev/zero as a file): refused at a stated size, not read
# until the machine runs out of memory.
printf '%s' '{"version":"1.0","added_tokens":[],"normalizer":null,"pre_tokenizer":null,
"post_processor":null,"decoder":null,"model":{"type":"BPE","vocab":{"a":0,"b":1},
"merges":[]}}' >"$tmp/tokenizer.json"
refused 1 "larger than 1.00 GiB" "$M" tokenize --tokenizer "$tmp/tokenizer.json" \
	--file /dev/zero
refused 1 "a line longer than 64.00 MiB" "$M" eval --pack "$tmp/m.moem" --tokens-file /dev/zero
refused 1 "a line longer than 256.00 MiB" "$M" trace import --out "$tmp/z.trace" /dev/zero
[ -e "$tmp/z.trace" ] && bad "trace import of /dev/zero left a file" || ok "nothing left by it"
exit $fail
