#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# make bench-restart: moemd's restart-to-first-step with moem.ko in the
# QEMU guest, cold (region destroyed, the pack staged from the virtio
# disk) against warm (kill -9, the persistent region's staged experts
# adopted), measured by warm_restart_test on each pack of
# BENCH_RESTART_PACKS ("LAYERS EXPERTS HIDDEN WIDTH", separated by ';').
# DOC=path also writes the page (Documentation/benchmarks/restart.md).
#   bench/restart/run.sh BUILD_DIR KO PROG...   (KVER, KIMAGE, MOEM as for
#   tests/integration/guest/run.sh; BENCH_RESTART_MEM: guest MiB, 4096)
# Exit 77 when no guest can be booted here.
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../page.sh"
build=${1:?usage: run.sh BUILD_DIR KO PROG...}
page_begin
packs=${BENCH_RESTART_PACKS:-4 16 512 512;4 32 1024 1024}
mem=${BENCH_RESTART_MEM:-4096}
dir=$build/bench/restart
mkdir -p "$dir"
: >"$dir/results.txt"
IFS=';' read -ra list <<<"$packs"
for p in "${list[@]}"; do
	read -r L E H I <<<"$p"
	log=$dir/guest-$L-$E-$H-$I.txt
	rc=0
	MOEM_GUEST_PACK="$L $E $H $I" MOEM_GUEST_MEM=$mem MOEM_GUEST_POOL_MB=$((mem / 2)) \
		"$here/../../tests/integration/guest/run.sh" "$@" | tee "$log" || rc=$?
	[ $rc -eq 77 ] && exit 77
	[ $rc -eq 0 ] || { echo "bench-restart: the guest run of pack '$p' failed" >&2; exit 1; }
	r=$(sed -n 's/^  result  restart \(cold_ms=.*\)/\1/p' "$log" | head -n 1)
	[ -n "$r" ] || { echo "bench-restart: pack '$p': no result line in $log" >&2; exit 1; }
	echo "$L $E $H $I $r" >>"$dir/results.txt"
done
[ -n "${DOC:-}" ] || exit 0
{
	page_head "Warm against cold restart of moemd with moem.ko (synthetic)" \
		"make bench-restart DOC=$DOC" bench/restart/run.sh
	echo "- guest: Debian's ${KVER:-?} under QEMU TCG (2 vCPUs, $mem MiB), moemd on the CPU" \
		"backend, pool kmod, HBM 25% and DRAM 100% of the expert bytes, packs bf16,q4 on" \
		"the guest's virtio disk"
	echo
	echo "*cold*: from exec to the first decode step taken with the persistent region" \
		"destroyed (\`--cold\`), so every expert is staged from the pack; the faster of 2." \
		"*warm*: the same after \`kill -9\` in the middle of a run, the region's staged" \
		"experts adopted (no byte read from the pack); the median of 3. *ready*: moemd's own" \
		"count from its start to serving (engine open and warm-up done), in the same start;" \
		"*open*: engine open with the re-attach and adoption; *fill*:" \
		"the warm-up's copy of the HBM budget from DRAM (Documentation/admin-guide.md," \
		"\"Warm restart\"). Everything runs at emulation speed, while the cold start's" \
		"extra work is reading the pack at the virtual disk's speed."
	echo
	echo "| pack (layers x experts, hidden x width) | experts staged | cold ms (ready) | warm ms (ready) | warm: open / fill ms | warm/cold |"
	echo "| --- | --: | --: | --: | --: | --: |"
	while read -r L E H I kv; do
		declare -A v=()
		for f in $kv; do
			v[${f%%=*}]=${f#*=}
		done
		echo "| $L x $E, $H x $I | ${v[staged_mib]} MiB | ${v[cold_ms]} (${v[cold_ready_ms]}) |" \
			"${v[warm_ms]} (${v[warm_ready_ms]}) | ${v[open_ms]} / ${v[fill_ms]} | ${v[ratio]} |"
		unset v
	done <"$dir/results.txt"
} | page_commit "$DOC"
