#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# Build the debug guest kernel of `make test-kmod-debug` once:
#   scripts/guest/debug-kernel.sh DIR
# from Debian's linux-source-6.12 (/usr/src/linux-source-6.12.tar.xz, or
# $KSRC_TAR) with x86_64_defconfig + kvm_guest.config + debug.config
# (KASAN, lockdep, kmemleak, DEBUG_VM, DEBUG_ATOMIC_SLEEP) into DIR:
# DIR/src (the tree), DIR/obj (the build: arch/x86/boot/bzImage, and the
# tree moem.ko builds against). A stamp holding the tarball's and the
# fragment's checksums makes a second run a no-op; a changed fragment or
# tarball rebuilds. The build is niced: it takes tens of minutes on two
# cores. Exit 77 (skip) when the source package is not installed.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: debug-kernel.sh DIR}
tar=${KSRC_TAR:-/usr/src/linux-source-6.12.tar.xz}
frag=$here/debug.config
jobs=${JOBS:-2}

[ -r "$tar" ] || {
	echo "test-kmod-debug: SKIP: $tar missing (scripts/deps.sh --debug-kernel installs linux-source-6.12)"
	exit 77
}
want=$(cat "$tar.sha256" 2>/dev/null || stat -c '%s %Y' "$tar")-$(sha256sum <"$frag" | cut -d' ' -f1)
if [ -r "$dir/obj/arch/x86/boot/bzImage" ] && [ "$(cat "$dir/stamp" 2>/dev/null)" = "$want" ]; then
	exit 0
fi

mkdir -p "$dir"
rm -f "$dir/stamp"
if [ ! -r "$dir/src/Makefile" ] || [ "$(cat "$dir/src.stamp" 2>/dev/null)" != "${want%-*}" ]; then
	echo "test-kmod-debug: unpacking $tar"
	rm -rf "$dir/src" "$dir/obj"
	mkdir -p "$dir/src"
	tar -xf "$tar" -C "$dir/src" --strip-components=1
	echo "${want%-*}" >"$dir/src.stamp"
fi
mkdir -p "$dir/obj"
src=$dir/src
obj=$(cd "$dir/obj" && pwd)

echo "test-kmod-debug: configuring (x86_64_defconfig + kvm_guest.config + $frag)"
make -s -C "$src" O="$obj" x86_64_defconfig
"$src/scripts/kconfig/merge_config.sh" -m -O "$obj" "$obj/.config" \
	"$src/kernel/configs/kvm_guest.config" "$frag" >"$obj/merge.log"
make -s -C "$src" O="$obj" olddefconfig
# Every option the fragment asks for must have survived olddefconfig.
miss=0
while read -r line; do
	case "$line" in
	CONFIG_*=*) grep -qx "$line" "$obj/.config" || { echo "  not set: $line"; miss=1; } ;;
	"# CONFIG_"*" is not set")
		opt=${line#\# }
		opt=${opt%% *}
		grep -q "^$opt=[ym]" "$obj/.config" && { echo "  still set: $opt"; miss=1; } ;;
	esac
done <"$frag"
[ $miss -eq 0 ] || { echo "test-kmod-debug: the config lost options above" >&2; exit 1; }

echo "test-kmod-debug: building (nice -n 19, -j$jobs; tens of minutes); log: $obj/build.log"
if ! nice -n 19 make -C "$src" O="$obj" -j"$jobs" bzImage modules >"$obj/build.log" 2>&1; then
	tail -n 40 "$obj/build.log" >&2
	echo "test-kmod-debug: kernel build failed" >&2
	exit 1
fi
echo "$want" >"$dir/stamp"
echo "test-kmod-debug: built $obj/arch/x86/boot/bzImage"
