#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Install every Debian package moem's build, tests, benchmarks and demo
# need. Idempotent: with everything present it only checks.
#   scripts/deps.sh            install what is missing (root, or sudo)
#   scripts/deps.sh --check    exit 1 and list what is missing
#   scripts/deps.sh --ensure   like the default, quiet when nothing is missing
# CUDA's nvcc is not a Debian package: the build uses it when it is on the
# PATH or in /usr/local/cuda, and says so when it is not.
set -eu

PKGS="
build-essential pkg-config git
libjson-c-dev liburing-dev libxxhash-dev libssl-dev libsystemd-dev libinih-dev
clang llvm libclang-rt-14-dev libbpf-dev bpftool systemtap-sdt-dev
linux-headers-amd64 linux-image-amd64 kmod
qemu-system-x86 busybox-static cpio e2fsprogs
fio gnuplot-nox python3-torch
cppcheck clang-format
libnuma-dev libsimde-dev python3-torch
"

missing() {
	for p in $PKGS; do
		s=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
		case "$s" in
		*"install ok installed"*) ;;
		*) printf '%s ' "$p" ;;
		esac
	done
}

mode=${1:-install}
todo=$(missing)
if [ -z "$todo" ]; then
	[ "$mode" = "--ensure" ] || echo "deps: all packages present"
	exit 0
fi
if [ "$mode" = "--check" ]; then
	echo "deps: missing: $todo"
	exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
	SUDO=
elif command -v sudo >/dev/null 2>&1; then
	SUDO=sudo
else
	echo "deps: missing: $todo" >&2
	echo "deps: run as root (or install sudo) so apt-get can install them" >&2
	exit 1
fi

echo "deps: installing: $todo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $todo
todo=$(missing)
if [ -n "$todo" ]; then
	echo "deps: still missing after apt-get: $todo" >&2
	exit 1
fi
