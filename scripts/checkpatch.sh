#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Run the kernel's checkpatch.pl --strict on moem.ko's sources and the uapi
# header (make check-patch). checkpatch.pl, spelling.txt and
# const_structs.checkpatch come from Debian's linux-source tarball
# (/usr/src/linux-source-*.tar.xz), extracted once into $MOEM_BUILD/checkpatch;
# the package is installed with apt-get when missing and we are root.
#   scripts/checkpatch.sh [FILE...]   default: git's kmod/ files + the uapi header
set -eu
B=${MOEM_BUILD:-build}
dir=$B/checkpatch

find_tar() {
	ls /usr/src/linux-source-*.tar.xz 2>/dev/null | sort -V | tail -n 1
}

if [ ! -r "$dir/checkpatch.pl" ]; then
	tarball=$(find_tar)
	if [ -z "$tarball" ]; then
		if [ "$(id -u)" -eq 0 ]; then
			echo "checkpatch: installing linux-source for checkpatch.pl"
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
				linux-source >/dev/null
			tarball=$(find_tar)
		fi
		if [ -z "$tarball" ]; then
			echo "checkpatch: SKIP: no /usr/src/linux-source-*.tar.xz (apt-get install linux-source)"
			exit 0
		fi
	fi
	top=$(basename "$tarball" .tar.xz)
	mkdir -p "$dir"
	echo "checkpatch: extracting scripts from $tarball"
	tar -xJf "$tarball" -C "$dir" --strip-components=2 "$top/scripts/checkpatch.pl" \
		"$top/scripts/spelling.txt" "$top/scripts/const_structs.checkpatch"
fi

if [ $# -eq 0 ]; then
	set -- $(git ls-files 'kmod/*.c' 'kmod/*.h') include/uapi/linux/moem*.h
fi
# trace.h is TRACE_EVENT() boilerplate: its layout (lines ending in '(',
# arguments not aligned to the macro's parenthesis) is the one every
# include/trace/events/*.h has, and checkpatch --strict flags all of them.
# compat.h is where the module compares kernel versions, on purpose:
# LINUX_VERSION_CODE on the left, and a macro argument the newer kernel
# no longer needs, are what it is for.
# moem_knobs.h declares the knob table as an X-macro list (as
# <linux/bpf.h>'s __BPF_FUNC_MAPPER) and budget.c expands it: each
# expansion takes every column and uses the few it needs, and expands to
# initialisers or declarations, which no parenthesis can enclose.
rc=0
for f in "$@"; do
	case "$f" in
	*/trace.h) ignore=--ignore=OPEN_ENDED_LINE,PARENTHESIS_ALIGNMENT ;;
	*/compat.h) ignore=--ignore=LINUX_VERSION_CODE,CONSTANT_COMPARISON,MACRO_ARG_UNUSED ;;
	*/moem_knobs.h | kmod/budget.c)
		ignore=--ignore=COMPLEX_MACRO,MACRO_ARG_UNUSED,MACRO_ARG_REUSE,TRAILING_SEMICOLON ;;
	*) ignore= ;;
	esac
	out=$(perl "$dir/checkpatch.pl" --no-tree --strict --show-types --terse $ignore -f "$f") ||
		rc=1
	printf '%s\n' "$out" | grep -v -e '^total: 0 errors, 0 warnings, 0 checks' -e '^$' || true
done
[ $rc -eq 0 ] && echo "checkpatch: $# files clean (--strict)"
exit $rc
