#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# make bench-kmod-pin: what it costs the loader that Linux 6.1's io_uring
# takes no moem.ko region memory as fixed buffers (bench/kmod/pin_cost.c
# says how it is measured), and fio's fixed-buffer read of the same file
# at the same request size and queue depth in the same run, the peer that
# shows the fixed path is at full speed.
# DOC=path also writes the page (Documentation/benchmarks/kmod-pin.md).
#   bench/kmod/pin_cost.sh PIN_COST_BINARY [--dir BUILD/bench] [--reps 5] [--secs 3]
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../page.sh"
page_begin
bin=${1:?usage: pin_cost.sh PIN_COST_BINARY [--dir D] [--reps N] [--secs S]}
shift
dir=build/bench
reps=5
secs=3
while [ $# -gt 0 ]; do
	case "$1" in
	--dir) dir=$2; shift 2 ;;
	--reps) reps=$2; shift 2 ;;
	--secs) secs=$2; shift 2 ;;
	*) echo "usage: pin_cost.sh BIN [--dir D] [--reps N] [--secs S]" >&2; exit 2 ;;
	esac
done
command -v fio >/dev/null || { echo "bench-kmod-pin: SKIP: fio not installed (scripts/deps.sh)"; exit 0; }
mkdir -p "$dir"
file=$dir/kmod-pin.dat
if [ ! -s "$file" ]; then
	echo "bench-kmod-pin: writing $file (2 GiB, O_DIRECT)"
	fio --name=mk --filename="$file" --size=2G --rw=write --bs=8M --direct=1 \
		--ioengine=io_uring --iodepth=8 >/dev/null || exit 1
fi
# Everything the page shows, as it is printed.
run() {
	echo "bench-kmod-pin: $(date -u '+%F %T') UTC, $(uname -r), $(nproc) CPUs" \
		"($(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1)), load $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "bench-kmod-pin: file $file on $(df --output=source "$dir" | tail -n 1), $(fio --version)"
	for bs in 1M 8M; do
		fio_gbps=$(fio --name=peer --filename="$file" --rw=read --bs="$bs" --iodepth=32 --direct=1 \
			--ioengine=io_uring --registerfiles --fixedbufs --mem=malloc --time_based \
			--runtime="$secs" --numjobs=1 --minimal 2>/dev/null |
			awk -F';' '{ printf "%.3f", $7 * 1024 / 1e9 }')
		echo "bench-kmod-pin: peer: fio --ioengine=io_uring --direct=1 --fixedbufs --bs=$bs --iodepth=32: $fio_gbps GB/s"
		"$bin" "$file" --bs "$bs" --qd 32 --mem 256M --reps "$reps" --secs "$secs" || exit 1
	done
}
run | tee "$dir/kmod-pin.txt" || exit 1
[ -n "${DOC:-}" ] || exit 0
{
	page_head "Reads into moem.ko region memory with and without io_uring fixed buffers" \
		"make bench-kmod-pin DOC=$DOC" bench/kmod/pin_cost.sh
	echo
	echo "Linux 6.1's io_uring refuses file-backed pages (moem.ko region memory) as fixed" \
		"buffers, so there the loader issues plain O_DIRECT reads, which pin and unpin the" \
		"destination pages on every request (Documentation/admin-guide.md, \"Long-term" \
		"pins\"). bench/kmod/pin_cost.c reads the same file into memory shaped like a region" \
		"mapping (2 MiB physically contiguous folios under 4 KiB PTEs: this host cannot load" \
		"the module) with the destination registered (*fixed*) and not (*plain*), alternating;" \
		"fio's fixed-buffer read of the same file at the same request size and queue depth" \
		"is the peer that shows the fixed path runs at the disk's speed. Each RESULT line:" \
		"*ratio* plain over fixed GB/s, and the CPU time per GB of each (the median rep)."
	echo
	echo '```'
	cat "$dir/kmod-pin.txt"
	echo '```'
} | page_commit "$DOC"
