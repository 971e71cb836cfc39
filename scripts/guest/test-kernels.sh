#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# make test-kmod: the whole guest suite on every kernel of the matrix,
# one after the other (never in parallel: two TCG guests on two cores
# would starve each other), and a line for each.
#   scripts/guest/test-kernels.sh [--numa] BUILD_DIR "VER..." PROG...
# --numa: the NUMA guest instead (two nodes with memory and a third, node
# 2, with a vCPU and none; scripts/guest/numa.sh judged by check-numa.sh),
# working in BUILD_DIR/guest/numa-VER.
# moem.ko for VER is BUILD_DIR/kmod/VER/moem.ko (make kmod-all); the guest
# of VER works in BUILD_DIR/guest/VER. Exit 1 if any kernel failed, 77 if
# none could run (no qemu, no kernel), else 0. Debian 12 has two kernels
# (6.1 and 6.12): a missing one is named, not silently skipped.
set -u
here=$(cd "$(dirname "$0")" && pwd)
mode=()
tag=
if [ "${1:-}" = --numa ]; then
	mode=(--numa 2 --memless 1 --script "$here/numa.sh" --check "$here/check-numa.sh")
	tag=numa-
	shift
fi
build=${1:?usage: test-kernels.sh BUILD_DIR "VER..." PROG...}
kvers=$2
shift 2

[ -n "$kvers" ] || {
	echo "test-kmod: SKIP: no kernel with headers, image and modules installed (scripts/deps.sh)"
	exit 77
}
for want in 6.1 6.12; do
	case " $kvers" in
	*" $want".*) ;;
	*) echo "test-kmod: NOTE: no Debian $want kernel found (scripts/deps.sh provides it): not tested" ;;
	esac
done

summary=()
failed=0
ran=0
for v in $kvers; do
	root=$("$here/kernels.sh" root "$v") || { summary+=("$v: FAIL (not installed)"); failed=1; continue; }
	echo "test-kmod: $v"
	KVER=$v "$here/run.sh" --work "$build/guest/$tag$v" --kver "$v" --kimage "$root/boot/vmlinuz-$v" \
		--moddir "$root/lib/modules/$v" --ko "$build/kmod/$v/moem.ko" ${mode[@]+"${mode[@]}"} "$@"
	rc=$?
	case $rc in
	0) summary+=("$tag$v: PASS"); ran=1 ;;
	77) summary+=("$tag$v: SKIP") ;;
	*) summary+=("$tag$v: FAIL (log: $build/guest/$tag$v/guest.log.txt)"); failed=1; ran=1 ;;
	esac
done
for l in "${summary[@]}"; do
	echo "test-kmod: $l"
done
[ $failed -eq 0 ] || exit 1
[ $ran -eq 1 ] || exit 77
exit 0
