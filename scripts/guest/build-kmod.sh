#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# Build moem.ko against one kernel tree, out of the source tree:
#   scripts/guest/build-kmod.sh KDIR DIR
# copies the module's sources (Kbuild, kmod/, the uapi headers) into DIR/src,
# runs kbuild there (it writes objects next to the sources, so every kernel
# gets its own copy) with warnings as errors, and leaves DIR/moem.ko. The
# build log is DIR/build.log, printed when the build fails.
set -eu
kdir=${1:?usage: build-kmod.sh KDIR DIR}
dir=${2:?usage: build-kmod.sh KDIR DIR}
top=$(cd "$(dirname "$0")/../.." && pwd)

[ -r "$kdir/Makefile" ] || { echo "build-kmod: $kdir: no kernel build tree there" >&2; exit 1; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
src=$dir/src
rm -rf "$src" "$dir/moem.ko"
mkdir -p "$src/kmod" "$src/include/uapi/linux"
cp "$top/Kbuild" "$src/"
cp "$top"/kmod/Kbuild "$top"/kmod/*.c "$top"/kmod/*.h "$src/kmod/"
cp "$top"/include/uapi/linux/moem*.h "$src/include/uapi/linux/"
# MAKEFLAGS may carry the caller's O=...: kbuild must not see it.
if ! env -u MAKEFLAGS -u MAKEOVERRIDES -u MFLAGS make -C "$kdir" M="$src" KCFLAGS=-Werror \
	${W:+W=$W} modules >"$dir/build.log" 2>&1; then
	cat "$dir/build.log" >&2
	echo "build-kmod: moem.ko does not build against $kdir" >&2
	exit 1
fi
cp "$src/kmod/moem.ko" "$dir/moem.ko"
