#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# The engine on the CUDA backend and the CUDA tier device (VMM arena, copy
# stream, events), and in the UVM mode (managed memory paged by the driver
# under a budget): outputs under HBM and DRAM budgets far below the model,
# with every lossless policy, equal the all-resident run bit for bit; and
# on a real GPU, a budgeted run is clean under compute-sanitizer memcheck
# and racecheck. Runs on a GPU machine (make test-gpu) and on the kernel
# emulator (make test-gpu-emu); skips (exit 4) without a CUDA device.
. "$(dirname "$0")/lib.sh"
"$moem" mkmodel --arch qwen3_moe --layers 3 --experts 16 --topk 4 --hidden 256 \
	--moe-intermediate 256 --seed 5 --out "$tmp/m" >/dev/null || exit 1
"$moem" pack --model "$tmp/m" --out "$tmp/m.moem" --precisions bf16,q4 >/dev/null || exit 1

digest() {
	"$moem" run --pack "$tmp/m.moem" --backend cuda --batch 8 --steps 6 --json --quiet "$@" |
		sed -n 's/.*"digest":"\([0-9a-f]*\)".*/\1/p'
}

fail=0
ref=$(digest)
[ -n "$ref" ] || { echo "FAIL: the all-resident run did not finish"; exit 1; }
echo "all resident: $ref"
for v in "--hbm 20% --dram 35%" \
	 "--hbm 20% --dram 35% --route cache-aware --prefetch adaptive --evict lru2" \
	 "--hbm 20% --dram 35% --evict pred --prefetch adaptive" \
	 "--hbm 80% --paging fluxmoe" \
	 "--hbm-mode uvm --hbm 20%" \
	 "--hbm-mode uvm --hbm 20% --dram 35% --prefetch adaptive"; do
	# shellcheck disable=SC2086
	d=$(digest $v)
	if [ "$d" = "$ref" ]; then
		echo "ok   $v"
	else
		echo "FAIL $v: $d"
		fail=1
	fi
done
q=$(digest --precisions q4)
qb=$(digest --precisions q4 --hbm 15% --dram 30%)
if [ -n "$q" ] && [ "$q" = "$qb" ] && [ "$q" != "$ref" ]; then
	echo "ok   q4 under budget equals q4 resident, differs from bf16"
else
	echo "FAIL q4: resident $q, budgeted $qb"
	fail=1
fi
if [ -z "${MOEM_GPU_EMU:-}" ] && command -v compute-sanitizer >/dev/null 2>&1; then
	for tool in memcheck racecheck; do
		if compute-sanitizer --tool "$tool" --error-exitcode 9 "$moem" run \
			--pack "$tmp/m.moem" --backend cuda --batch 4 --steps 2 --hbm 20% \
			--dram 35% --prefetch adaptive --quiet >"$tmp/$tool.log" 2>&1; then
			echo "ok   compute-sanitizer $tool"
		else
			echo "FAIL compute-sanitizer $tool:"
			tail -30 "$tmp/$tool.log"
			fail=1
		fi
	done
fi
exit $fail
