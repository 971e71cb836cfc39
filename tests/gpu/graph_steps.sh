#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# CUDA graphs of device-planned decode steps (Documentation/engine.md,
# "CUDA graphs"), for a qwen3_moe pack and a deepseek_v2 pack (shared
# experts: the grouped FFN's host-planned descriptors inside the graph):
#  - the greedy tokens of every sequence with graphs on equal those with
#    graphs off (MOEM_CUDA_GRAPHS=0) and the CPU backend's, over a run
#    whose shape key repeats and changes: four prompts of different
#    lengths under a KV budget that makes sequences wait, so the batch
#    grows and shrinks as they start and finish, and 8-token KV blocks
#    that the positions cross;
#  - steps were replayed: graph_steps > graph_captures > 0 (moem decode
#    --json), and 0 of both with --no-cuda-graphs (qwen3_moe) or
#    MOEM_CUDA_GRAPHS=0 (deepseek_v2);
#  - a capture that fails (the emulator's MOEM_EMU_FAULT_CAPTURE=1) turns
#    graphs off with one warning, and changes no token;
#  - on the emulator: graph launches counted by the driver itself
#    (graph_launches, graph_kernels), and no graph or graph exec left
#    alive at exit.
# Runs on a GPU machine (the emulator's counts are skipped there) and on
# the kernel emulator (make test-gpu-emu); skips (exit 4) without a CUDA
# device.
. "$(dirname "$0")/lib.sh"

"$moem" mkmodel --arch qwen3_moe --layers 3 --experts 16 --topk 4 --hidden 256 \
	--moe-intermediate 128 --seed 11 --out "$tmp/q" >/dev/null 2>&1 &&
	"$moem" pack --model "$tmp/q" --out "$tmp/q.moem" --precisions bf16 >/dev/null 2>&1 ||
	{ echo "FAIL: cannot make the qwen3_moe model"; exit 1; }
"$moem" mkmodel --preset deepseek-v2-lite --layers 3 --experts 16 --topk 4 --hidden 256 \
	--moe-intermediate 128 --seed 7 --out "$tmp/d" >/dev/null 2>&1 &&
	"$moem" pack --model "$tmp/d" --out "$tmp/d.moem" --precisions bf16 >/dev/null 2>&1 ||
	{ echo "FAIL: cannot make the deepseek_v2 model"; exit 1; }

# Four sequences; the KV budget holds about two of them, so the others
# wait: batches of 1 and 2 tokens, repeated and changing.
prompts="--tokens 5,17,300,42,9,1000,77,12 --tokens 1,2,3 --tokens 4000,3999,17,5,6,7,8,9,10,11,12
	--tokens 99,98"
# the token lists of every sequence, one line each
seqs() { echo "$1" | grep -o '"tokens":\[[0-9,]*\]' | sed 's/"tokens"://'; }
num() { echo "$1" | sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p" | head -1; }

for pk in q d; do
	kvb=420K # about two sequences' blocks
	[ $pk = q ] && kvb=600K
	dec() {
		# shellcheck disable=SC2086
		"$moem" decode --pack "$tmp/$pk.moem" --max-new 12 --no-model-eos --json \
			--kv-block 8 --kv-bytes $kvb --hbm 16M $prompts "$@"
	}
	rm -f "$tmp/stats"
	# (the statistics file is the kernel emulator's; a GPU's driver ignores it)
	on=$(MOEM_EMU_STATS="$tmp/stats" dec --backend cuda 2>"$tmp/err.on") ||
		{ bad "$pk: graphs on: $(cat "$tmp/err.on")"; continue; }
	# graphs off: the flag for one pack, the environment for the other
	if [ $pk = q ]; then
		offhow=--no-cuda-graphs
		off=$(dec --backend cuda --no-cuda-graphs 2>/dev/null)
	else
		offhow=MOEM_CUDA_GRAPHS=0
		off=$(MOEM_CUDA_GRAPHS=0 dec --backend cuda 2>/dev/null)
	fi
	cpu=$(dec --backend cpu 2>/dev/null)
	ton=$(seqs "$on")
	n=$(echo "$ton" | grep -c .)
	if [ "$n" = 4 ] && [ "$ton" = "$(seqs "$off")" ] && [ "$ton" = "$(seqs "$cpu")" ]; then
		ok "$pk: greedy tokens with graphs equal those without and the CPU backend's"
	else
		bad "$pk: tokens with graphs '$ton', without '$(seqs "$off")', CPU '$(seqs "$cpu")'"
	fi
	gs=$(num "$on" graph_steps)
	gc=$(num "$on" graph_captures)
	ds=$(num "$on" device_steps)
	waits=$(num "$on" kv_waits)
	# two shapes at least (batches of one and two sequences), each replayed
	if [ -n "$gs" ] && [ -n "$gc" ] && [ "$gc" -ge 2 ] && [ "$gs" -gt "$gc" ] &&
		[ "${waits:-0}" -gt 0 ]; then
		ok "$pk: $gs of $ds device-planned steps ran as graphs, $gc captured ($waits KV waits)"
	else
		bad "$pk: graph_steps ${gs:-?}, graph_captures ${gc:-?}, device_steps ${ds:-?}, kv_waits ${waits:-?}"
	fi
	[ "$(num "$off" graph_steps)" = 0 ] && [ "$(num "$off" graph_captures)" = 0 ] &&
		ok "$pk: $offhow runs no graph" ||
		bad "$pk: $offhow: graph_steps $(num "$off" graph_steps)"

	[ -n "${MOEM_GPU_EMU:-}" ] || continue
	gl=$(sed -n 's/.* graph_launches=\([0-9]*\).*/\1/p' "$tmp/stats")
	gk=$(sed -n 's/.* graph_kernels=\([0-9]*\).*/\1/p' "$tmp/stats")
	live=$(sed -n 's/.* \(graphs_live=[0-9-]* execs_live=[0-9-]*\).*/\1/p' "$tmp/stats")
	if [ "${gl:-0}" = "$gs" ] && [ "${gk:-0}" -gt "$gs" ]; then
		ok "$pk: the emulator ran $gl graph launches, $gk kernels in them"
	else
		bad "$pk: the emulator counted graph_launches ${gl:-?}, graph_kernels ${gk:-?}; the engine $gs graph steps"
	fi
	[ "$live" = "graphs_live=0 execs_live=0" ] && ok "$pk: no graph left alive at exit" ||
		bad "$pk: at exit: ${live:-?}"
	flt=$(MOEM_EMU_FAULT_CAPTURE=1 dec --backend cuda 2>"$tmp/err.f")
	nw=$(grep -c "CUDA graphs off" "$tmp/err.f")
	if [ "$(seqs "$flt")" = "$ton" ] && [ "$(num "$flt" graph_steps)" = 0 ] && [ "$nw" = 1 ]; then
		ok "$pk: a failed capture: graphs off, said once, same tokens"
	else
		bad "$pk: failed capture: graph_steps $(num "$flt" graph_steps), $nw warnings, tokens $(seqs "$flt")"
	fi
done
exit $fail
