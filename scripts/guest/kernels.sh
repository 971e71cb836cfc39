#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# The Debian kernels moem.ko is built and tested against, and where their
# files are. A kernel VER is usable when its headers (usr/src/linux-headers-
# VER), image (boot/vmlinuz-VER) and modules (lib/modules/VER/modules.dep)
# are all present under one root: / for kernels installed as Debian
# packages (Debian 12's 6.1: linux-image-amd64, linux-headers-amd64), or
# $MOEM_KERNEL_CACHE/VER for the guest kernels scripts/deps.sh unpacks
# there without installing them (6.12 from bookworm-security: not a boot
# entry of this machine, not a target `make kmod` picks by accident).
#
#   kernels.sh list         the newest usable kernel of each series (6.1, 6.12, ...),
#                           oldest series first, one per line
#   kernels.sh default      the kernel `make kmod` builds for: the running one if its
#                           headers are installed, else the first of `list`
#   kernels.sh root VER     the root holding VER ("" for /, else the cache directory)
#   kernels.sh check VER    exit 1 and say what is missing if VER is not usable
set -u

cache=${MOEM_KERNEL_CACHE:-/var/cache/moem/kernels}

usable() { # usable ROOT VER
	[ -r "$1/usr/src/linux-headers-$2/Makefile" ] && [ -r "$1/boot/vmlinuz-$2" ] &&
		[ -r "$1/lib/modules/$2/modules.dep" ]
}

root_of() {
	if usable "$cache/$1" "$1"; then
		echo "$cache/$1"
	elif usable "" "$1"; then
		echo ""
	else
		return 1
	fi
}

candidates() {
	local d v
	for d in /usr/src/linux-headers-*-amd64 "$cache"/*/usr/src/linux-headers-*-amd64; do
		[ -d "$d" ] || continue
		v=${d##*/linux-headers-}
		root_of "$v" >/dev/null && echo "$v"
	done | sort -u -V
}

# The series of 6.1.0-56-amd64 is 6.1, of 6.12.117+deb12-amd64 6.12.
series() {
	echo "$1" | sed -E 's/^([0-9]+\.[0-9]+).*/\1/'
}

case "${1:-}" in
list)
	# sort -V puts the newest of a series last; series in order of appearance.
	candidates | while read -r v; do echo "$(series "$v") $v"; done |
		awk '{ if (!($1 in last)) order[n++] = $1; last[$1] = $2 }
		     END { for (i = 0; i < n; i++) print last[order[i]] }'
	;;
default)
	run=$(uname -r)
	if [ -r "/usr/src/linux-headers-$run/Makefile" ] && root_of "$run" >/dev/null; then
		echo "$run"
	else
		"$0" list | head -n 1
	fi
	;;
root)
	[ $# -eq 2 ] || { echo "usage: kernels.sh root VER" >&2; exit 2; }
	root_of "$2" || { echo "kernels.sh: kernel $2 is not installed" >&2; exit 1; }
	;;
check)
	[ $# -eq 2 ] || { echo "usage: kernels.sh check VER" >&2; exit 2; }
	root_of "$2" >/dev/null && exit 0
	for r in "" "$cache/$2"; do
		for f in "usr/src/linux-headers-$2/Makefile" "boot/vmlinuz-$2" "lib/modules/$2/modules.dep"; do
			[ -r "$r/$f" ] || echo "kernels.sh: $2: missing $r/$f"
		done
	done
	exit 1
	;;
*)
	sed -n '3,20p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
