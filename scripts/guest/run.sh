#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# Boot Debian's kernel under QEMU (TCG) with a busybox initramfs holding
# moem.ko and the statically linked kselftest programs, run them, and pass
# or fail from their TAP output and the kernel log.
#
#   scripts/guest/run.sh [options] PROG...
#     --work DIR      scratch directory (default build/guest)
#     --kimage FILE   guest kernel (default $KIMAGE)
#     --kver VER      its version (default $KVER)
#     --moddir DIR    its modules: modules.dep and modules.builtin (default
#                     $KMODDIR, else /lib/modules/VER); drivers the kernel
#                     has built in (6.12's virtio_pci) are not loaded
#     --ko FILE       moem.ko (default kmod/moem.ko)
#     --debug         the debug kernel's run (make test-kmod-debug): kmemleak
#                     scans after every program, slower limits
#     --timeout S     whole-run limit (default 900)
#     --params STR    moem.ko parameters (default "max_pool_mb=256 prealloc_mb=32")
#     --shell         interactive guest shell instead of the tests
#     --script FILE   run FILE (busybox sh) in the guest instead of the
#                     module's test sequence; the module is not loaded
#     --check FILE    judge the log with FILE LOG PROG... (default check.sh)
#     --disk-add FILE put FILE on the guest's disk too (/mnt, read-only)
#     --disk-mb N     size of that disk (default 64)
#     --env K=V       export K=V to the guest's script (repeatable)
#     --mem MB        guest memory (default 2048)
#     --numa N        N NUMA nodes (2..8), the memory split evenly, one vCPU
#                     each (-smp N); default one node, two vCPUs
#     --memless M     with --numa: M more nodes (numbered from N) with one
#                     vCPU each and no memory (default 0)
#
# Fails on: a "not ok" TAP line, a program that exits non-zero or is
# killed by its timeout, a program with no result, a failed rmmod, and any
# BUG:/WARNING:/Oops/lockdep/general protection/... in the kernel log after
# moem.ko is loaded. Exit 77 (skip) only when qemu, the kernel image or
# its modules are missing. The guest log is printed on failure.
set -u

here=$(cd "$(dirname "$0")" && pwd)
work=build/guest
kimage=${KIMAGE:-}
kver=${KVER:-}
moddir=${KMODDIR:-}
debug=0
ko=kmod/moem.ko
tmo=900
params="max_pool_mb=256 prealloc_mb=32"
shell=0
script=
check=$here/check.sh
disk_mb=64
mem_mb=2048
numa=1
memless=0
disk_add=()
envs=()
while [ $# -gt 0 ]; do
	case "$1" in
	--script) script=$2; shift 2 ;;
	--check) check=$2; shift 2 ;;
	--disk-add) disk_add+=("$2"); shift 2 ;;
	--disk-mb) disk_mb=$2; shift 2 ;;
	--env) envs+=("$2"); shift 2 ;;
	--mem) mem_mb=$2; shift 2 ;;
	--numa) numa=$2; shift 2 ;;
	--memless) memless=$2; shift 2 ;;
	--work) work=$2; shift 2 ;;
	--kimage) kimage=$2; shift 2 ;;
	--kver) kver=$2; shift 2 ;;
	--moddir) moddir=$2; shift 2 ;;
	--debug) debug=1; shift ;;
	--ko) ko=$2; shift 2 ;;
	--timeout) tmo=$2; shift 2 ;;
	--params) params=$2; shift 2 ;;
	--shell) shell=1; shift ;;
	-*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
done

skip() {
	echo "test-kmod: SKIP: $*"
	exit 77
}
die() {
	echo "test-kmod: $*" >&2
	exit 1
}

qemu=$(command -v qemu-system-x86_64) || skip "qemu-system-x86_64 not installed (scripts/deps.sh installs qemu-system-x86)"
[ -n "$kimage" ] && [ -r "$kimage" ] || skip "guest kernel '${kimage:-?}' not readable (install linux-image-amd64)"
[ -n "$moddir" ] || moddir=/lib/modules/$kver
[ -r "$moddir/modules.dep" ] || [ -r "$moddir/modules.builtin" ] ||
	skip "$moddir/modules.dep missing (install linux-image-amd64, or scripts/deps.sh)"
busybox=$(command -v busybox) || skip "busybox not installed (install busybox-static)"
readelf -l "$busybox" 2>/dev/null | grep -q INTERP &&
	skip "$busybox is not statically linked (install busybox-static)"
command -v cpio >/dev/null || skip "cpio not installed"
command -v mke2fs >/dev/null || skip "mke2fs not installed (install e2fsprogs)"
[ -r "$ko" ] || die "$ko not built (make kmod)"
[ $# -gt 0 ] || [ $shell -eq 1 ] || die "no test programs given"

root=$work/root
rm -rf "$root" "$work/disk"
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,mnt,lib/modules,tests} "$work/disk" || exit 1
cp "$busybox" "$root/bin/busybox"
cp "$here/init" "$root/init"
chmod 755 "$root/init"
cp "$ko" "$root/moem.ko"
echo "$params" >"$root/moem.params"
if [ -n "$script" ]; then
	cp "$script" "$root/script.sh" && chmod 755 "$root/script.sh" || exit 1
	for e in ${envs[@]+"${envs[@]}"}; do
		printf 'export %q\n' "$e"
	done >"$root/script.env"
fi

# Kernel modules for the virtio disk and ext4, in dependency order; what
# the kernel has built in needs no loading (modules.builtin lists it).
builtin() {
	grep -qE "(^|/)$1\.ko\$" "$moddir/modules.builtin" 2>/dev/null
}
resolve() {
	local m=$1 path deps d
	builtin "$m" && return 0
	[ -r "$moddir/modules.dep" ] || die "module $m: not built in, and no $moddir/modules.dep"
	path=$(grep -E "(^|/)$m\.ko(\.[a-z]+)?:" "$moddir/modules.dep" | head -n1 | cut -d: -f1)
	[ -n "$path" ] || die "module $m not in $moddir/modules.dep"
	deps=$(grep -E "^$path:" "$moddir/modules.dep" | cut -d: -f2)
	for d in $deps; do
		resolve "$(basename "$d" | sed -E 's/\.ko(\.[a-z]+)?$//')"
	done
	grep -qx "$path" "$work/mods" 2>/dev/null || echo "$path" >>"$work/mods"
}
rm -f "$work/mods"
touch "$work/mods" "$root/lib/modules/load.list"
for m in crc32c_generic virtio_pci virtio_blk ext4; do
	resolve "$m"
done
while read -r path; do
	name=$(basename "$path")
	case "$name" in
	*.ko) cp "$moddir/$path" "$root/lib/modules/$name" ;;
	*.ko.xz) xz -dc "$moddir/$path" >"$root/lib/modules/${name%.xz}" ;;
	*.ko.zst) zstd -qdc "$moddir/$path" >"$root/lib/modules/${name%.zst}" ;;
	*) die "unknown module format $name" ;;
	esac
	echo "${name%.ko*}.ko" >>"$root/lib/modules/load.list"
done <"$work/mods"

for t in "$@"; do
	cp "$t" "$root/tests/" || exit 1
	echo "$(basename "$t")" >>"$root/tests/list"
done

# The disk: ext4 made on the host, holding a file whose u64 at byte
# offset 8*k is k, so a reader can check any range it lands.
perl -e 'for my $i (0 .. 2047) { print pack("Q<*", map { $i * 512 + $_ } 0 .. 511) }' \
	>"$work/disk/pattern.bin" || die "perl failed"
for f in ${disk_add[@]+"${disk_add[@]}"}; do
	cp "$f" "$work/disk/" || die "cannot put $f on the guest disk"
done
rm -f "$work/disk.img"
truncate -s "${disk_mb}M" "$work/disk.img" || die "cannot create $work/disk.img"
mke2fs -q -F -t ext4 -b 4096 -L moemtest -d "$work/disk" "$work/disk.img" ||
	die "mke2fs failed"

(cd "$root" && find . | cpio -o -H newc --quiet) >"$work/initramfs.cpio" || die "cpio failed"

# no_timer_check: on a busy host TCG is too slow for the boot's timer IRQ
# check, which then panics ("IO-APIC + timer doesn't work").
append="console=ttyS0 quiet panic=-1 nokaslr no_timer_check"
[ $shell -eq 1 ] && append="$append moem.shell=1"
[ $debug -eq 1 ] && append="$append moem.debug=1"
# thread=single: one host thread runs both vCPUs. Multi-threaded TCG let
# a guest oops at boot on an int3 of the kernel's own text patching
# (6.12, no module loaded) and starve a vCPU's timer into an RCU stall
# (6.1), one run in many; the guest is slower, and reproducible.
accel=tcg,thread=single
# The machine: two vCPUs on one node, or --numa N nodes of one vCPU and
# an equal share of the memory each, and --memless M nodes of one vCPU
# and no memory after them (Linux onlines such a node without N_MEMORY).
machine=(-m "$mem_mb" -smp 2)
if [ "$numa" -gt 1 ]; then
	[ "$numa" -le 8 ] || die "--numa $numa: at most 8 nodes"
	[ "$memless" -ge 0 ] && [ "$((numa + memless))" -le 8 ] || die "--memless $memless: at most 8 nodes in all"
	machine=(-m "$((mem_mb / numa * numa))" -smp "$((numa + memless))")
	for ((n = 0; n < numa; n++)); do
		machine+=(-object "memory-backend-ram,id=m$n,size=$((mem_mb / numa))M"
			-numa "node,nodeid=$n,cpus=$n,memdev=m$n")
	done
	for ((n = numa; n < numa + memless; n++)); do
		machine+=(-numa "node,nodeid=$n,cpus=$n")
	done
fi
log=$work/guest.log
start=$(date +%s%N)
if [ $shell -eq 1 ]; then
	exec "$qemu" -accel "$accel" "${machine[@]}" -nographic -no-reboot -kernel "$kimage" \
		-initrd "$work/initramfs.cpio" -append "$append" \
		-drive "file=$work/disk.img,if=virtio,format=raw" -nic none
fi
timeout -k 10 "$tmo" "$qemu" -accel "$accel" "${machine[@]}" -nographic -no-reboot \
	-kernel "$kimage" -initrd "$work/initramfs.cpio" -append "$append" \
	-drive "file=$work/disk.img,if=virtio,format=raw" -nic none </dev/null >"$log" 2>&1
qrc=$?
secs=$((($(date +%s%N) - start) / 1000000))
secs=$((secs / 1000)).$(((secs % 1000) / 100))
tr -d '\r' <"$log" >"$log.txt"

"$check" "$log.txt" "$@"
rc=$?
if [ $qrc -eq 124 ] || [ $qrc -eq 137 ]; then
	echo "test-kmod: the guest did not finish within ${tmo}s"
	rc=1
fi
boot=$(grep -o 'MOEM-GUEST boot [0-9.]*' "$log.txt" | head -n1 | cut -d' ' -f3)
echo "test-kmod: guest run ${secs}s wall (kernel up after ${boot:-?}s guest time); log: $log.txt"
if [ $rc -ne 0 ]; then
	echo "---- guest log ----"
	cat "$log.txt"
	echo "---- end of guest log ----"
fi
exit $rc
