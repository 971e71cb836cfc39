#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# One host synchronisation per decode step (Documentation/backends.md):
# with every expert in HBM, the CUDA backend routes and plans each MoE
# layer on the device, and the host waits once per step, for the logits.
#  - the greedy tokens of the device-planned steps equal the CPU
#    backend's and those of the per-layer path (MOEM_DEVICE_PLAN=0);
#  - every decode step was planned on the device (device_steps), and the
#    steps after a shape's first two were replayed CUDA graphs
#    (graph_steps; Documentation/engine.md, "CUDA graphs");
#  - on the kernel emulator, which counts every host synchronisation
#    (stream, event and context synchronisations, pageable copies back,
#    implicit ones) step by step: exactly one in each decode step, with
#    graphs and without (MOEM_CUDA_GRAPHS=0), while
#    the per-layer path makes one per MoE layer and one for the logits
#    (so the count tells them apart).
# Runs on a GPU machine (the counts need the emulator: skipped there) and
# on the kernel emulator (make test-gpu-emu); skips (exit 4) without a
# CUDA device.
. "$(dirname "$0")/lib.sh"

layers=3
"$moem" mkmodel --arch qwen3_moe --layers $layers --experts 16 --topk 4 --hidden 256 \
	--moe-intermediate 128 --seed 11 --out "$tmp/q" >/dev/null 2>&1 &&
	"$moem" pack --model "$tmp/q" --out "$tmp/q.moem" --precisions bf16 >/dev/null 2>&1 ||
	{ echo "FAIL: cannot make the model"; exit 1; }

p=5,17,300,42,9,1000,77,12
# Room for every expert beside the KV pool, which on CUDA comes out of the
# HBM budget (by default up to half of it): every step finds its experts
# in HBM.
dec() {
	"$moem" decode --pack "$tmp/q.moem" --no-model-eos --quiet --tokens $p \
		--hbm 16M --kv-bytes 1M "$@"
}
ids() { echo "$1" | sed 's/ (.*//; s/:[^,]*//g'; }

cpu=$(ids "$(dec --backend cpu --max-new 12)")
dev=$(ids "$(dec --backend cuda --max-new 12)")
host=$(ids "$(MOEM_DEVICE_PLAN=0 dec --backend cuda --max-new 12)")
[ -n "$dev" ] && [ "$dev" = "$cpu" ] && ok "device-planned tokens equal the CPU backend's ($dev)" ||
	bad "device-planned tokens $dev, CPU $cpu"
[ "$host" = "$dev" ] && ok "the per-layer path gives the same tokens" ||
	bad "per-layer path tokens $host vs device-planned $dev"

# Every step planned on the device once warm-up filled HBM.
js=$(dec --backend cuda --max-new 12 --json)
steps=$(echo "$js" | sed -n 's/.*"steps":\([0-9]*\),"kv_waits".*/\1/p')
dsteps=$(echo "$js" | sed -n 's/.*"device_steps":\([0-9]*\).*/\1/p' | head -1)
if [ -n "$steps" ] && [ "${dsteps:-0}" = "$steps" ] && [ "$steps" -gt 0 ]; then
	ok "all $steps steps planned on the device"
else
	bad "device_steps ${dsteps:-?} of ${steps:-?} steps: $js"
fi
gs=$(echo "$js" | sed -n 's/.*"graph_steps":\([0-9]*\).*/\1/p' | head -1)
if [ -n "$steps" ] && [ "${gs:-0}" -gt 0 ] && [ "$gs" -ge $((steps - 3)) ]; then
	ok "$gs of $steps steps ran as CUDA graphs (the prefill and the first decode step plainly)"
else
	bad "graph_steps ${gs:-?} of ${steps:-?} steps: $js"
fi
hs=$(MOEM_DEVICE_PLAN=0 dec --backend cuda --max-new 12 --json |
	sed -n 's/.*"device_steps":\([0-9]*\).*/\1/p' | head -1)
[ "${hs:-x}" = 0 ] && ok "MOEM_DEVICE_PLAN=0 plans every step on the host" ||
	bad "MOEM_DEVICE_PLAN=0: device_steps ${hs:-?}"

if [ -z "${MOEM_GPU_EMU:-}" ]; then
	echo "SKIP: synchronisations are counted by the kernel emulator only (make test-gpu-emu)"
	exit $fail
fi

# steps [env...]: host synchronisations step by step (the emulator's
# step_syncs: between launches of moem_embed, which starts each step),
# prefill first; the last step, which runs into the exit, is left out.
steps() {
	rm -f "$tmp/stats"
	env MOEM_EMU_STATS="$tmp/stats" MOEM_EMU_STEP_KERNEL=moem_embed "$@" "$moem" decode \
		--pack "$tmp/q.moem" --no-model-eos --quiet --tokens $p --backend cuda \
		--hbm 16M --kv-bytes 1M --max-new 8 $extra >/dev/null 2>"$tmp/err" ||
		{ echo "decode failed: $(cat "$tmp/err")" >&2; return; }
	sed -n 's/.* step_syncs=\([0-9,]*\).*/\1/p' "$tmp/stats"
}
# the decode steps' counts (all but the first), one per line
decode_steps() { echo "$1" | tr ',' '\n' | tail -n +2; }
extra=
dev=$(steps)
plain=$(steps MOEM_CUDA_GRAPHS=0)
host=$(steps MOEM_DEVICE_PLAN=0)
n=$(decode_steps "$dev" | grep -c .)
if [ "$n" -ge 6 ] && [ -z "$(decode_steps "$dev" | grep -vx 1)" ]; then
	ok "one host synchronisation in each of $n decode steps (prefill, then decode: $dev)"
else
	bad "host synchronisations per step (prefill, then decode): '$dev', want 1 per decode step"
fi
n=$(decode_steps "$plain" | grep -c .)
if [ "$n" -ge 6 ] && [ -z "$(decode_steps "$plain" | grep -vx 1)" ]; then
	ok "without graphs too: one in each of $n decode steps ($plain)"
else
	bad "MOEM_CUDA_GRAPHS=0: host synchronisations per step '$plain', want 1 per decode step"
fi
# The per-layer path waits once a MoE layer, for its routing (pinned host
# mirrors: the three readbacks are one wait; no pre-gate where nothing
# reads it), and once for the logits: it made 19 a step here before.
if [ -n "$host" ] && [ -z "$(decode_steps "$host" | grep -vx $((layers + 1)))" ]; then
	ok "the per-layer path: $host (one per MoE layer and the logits: the count tells them apart)"
else
	bad "the per-layer path: '$host', want $((layers + 1)) per decode step"
fi
# Hybrid execution on the per-layer path, the first MoE layer's experts on
# the CPU: their input comes down with the routing (no round trip of its
# own), and the predictor kept for the keep value runs no pre-gate.
extra="--exec hybrid --cpu-moe-layers 1 --cpu-threads 1"
hyb=$(steps MOEM_DEVICE_PLAN=0)
if [ -n "$hyb" ] && [ -z "$(decode_steps "$hyb" | grep -vx $((layers + 1)))" ]; then
	ok "hybrid, a layer on the CPU: $hyb, as the per-layer path"
else
	bad "hybrid, a layer on the CPU: '$hyb', want $((layers + 1)) per decode step"
fi
exit $fail
