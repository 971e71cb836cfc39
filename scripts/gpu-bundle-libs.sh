#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# The shared libraries of the GPU bundle (mk/gpu-bundle.mk). Every ELF
# program and library under DIR is run through ldd; a library that is
# not part of glibc (which every Linux system has: the loader, libc, libm,
# libpthread, libdl, librt, libutil, libresolv) must come from DIR/lib,
# where the programs' DT_RPATH ($ORIGIN/../lib) finds it before the
# system's. libcuda.so.1 is not linked (libmoem dlopen()s it) and is the
# GPU machine's own.
#   gpu-bundle-libs.sh --copy DIR    copy what is missing into DIR/lib, then check
#   gpu-bundle-libs.sh --check DIR   check only: list each program's libraries,
#                                    exit 1 naming any resolved outside DIR
set -u
mode=${1:-}
dir=${2:-}
case "$mode" in --copy | --check) ;; *) mode= ;; esac
if [ -z "$mode" ] || [ ! -d "$dir" ]; then
	echo "usage: gpu-bundle-libs.sh --copy|--check DIR" >&2
	exit 2
fi
dir=$(cd "$dir" && pwd -P)
BASE=" linux-vdso.so.1 ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 \
librt.so.1 libutil.so.1 libresolv.so.2 "

elfs() {
	find "$dir" -type f | while read -r f; do
		[ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] && echo "$f"
	done
}

# "name path" for every library a file loads (path "not-found" if none).
libs_of() {
	ldd "$1" 2>/dev/null | awk '
	/=>/ { p = $3; if (p == "not") p = "not-found"; print $1, p; next }
	/^[ \t]*\/.*ld-linux/ { n = $1; sub(/.*\//, "", n); print n, $1 }'
}

mkdir -p "$dir/lib"
if [ "$mode" = --copy ]; then
	# ldd lists the whole closure, so one pass copies everything; the
	# check below proves it.
	elfs | while read -r f; do
		libs_of "$f" | while read -r name path; do
			case "$BASE" in *" $name "*) continue ;; esac
			[ -e "$dir/lib/$name" ] && continue
			if [ "$path" = not-found ] || [ ! -e "$path" ]; then
				echo "gpu-bundle-libs: $f needs $name, which is not installed" >&2
				continue
			fi
			cp -L "$path" "$dir/lib/$name" && chmod 0644 "$dir/lib/$name"
			strip --strip-unneeded "$dir/lib/$name" 2>/dev/null || true
			echo "  LIB      $name (from $path)"
		done
	done
fi

bad=0
while read -r f; do
	rel=${f#"$dir"/}
	case "$rel" in
	lib/*)
		# A library is loaded on behalf of a program, whose DT_RPATH
		# also serves the library's own needs: check those by name.
		out=$(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' |
			while read -r name; do
				if [ -e "$dir/lib/$name" ]; then
					echo "$name $dir/lib/$name"
				else
					echo "$name not-in-bundle"
				fi
			done)
		;;
	*) out=$(libs_of "$f") ;;
	esac
	[ "$mode" = --check ] && printf '%s:%s\n' "$rel" "$(echo "$out" | awk '{printf " %s", $1}')"
	while read -r name path; do
		[ -n "$name" ] || continue
		case "$BASE" in *" $name "*) continue ;; esac
		case "$(readlink -f "$path" 2>/dev/null || echo "$path")" in
		"$dir"/lib/*) ;;
		*)
			echo "gpu-bundle-libs: $rel loads $name from $path, outside the bundle" >&2
			bad=1
			;;
		esac
	done <<<"$out"
done < <(elfs)
exit $bad
