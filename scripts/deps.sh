#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Install every Debian package moem's build, tests, benchmarks and demo
# need. Idempotent: with everything present it only checks.
#   scripts/deps.sh            install what is missing (root, or sudo)
#   scripts/deps.sh --check    exit 1 and list what is missing
#   scripts/deps.sh --ensure   like the default, quiet when nothing is missing
#   ... --debug-kernel         also what `make test-kmod-debug` needs to build
#                              its guest kernel (linux-source-6.12, bison, flex, ...)
# CUDA's nvcc is not a Debian package: the build uses it when it is on the
# PATH or in /usr/local/cuda, and says so when it is not.
#
# moem.ko is tested on both kernels Debian 12 ships (make test-kmod): 6.1
# is installed as the packages below; 6.12 (bookworm-security) is only a
# guest kernel here, so its newest build's image, modules and headers are
# unpacked from the apt packages into $MOEM_KERNEL_CACHE/<version>
# (default /var/cache/moem/kernels; scripts/guest/kernels.sh finds them)
# instead of being installed: installing them would make 6.12 this
# machine's default boot entry and its headers `make kmod`'s target.
set -eu

# dwarves: pahole, which module builds against 6.12's headers run (their
# vmlinux carries the BTF that moem.ko's is generated against).
PKGS="
build-essential pkg-config git
libjson-c-dev liburing-dev libxxhash-dev libssl-dev libsystemd-dev libinih-dev
libmicrohttpd-dev
libpcre2-dev libutf8proc-dev nodejs
clang llvm libclang-rt-14-dev libbpf-dev bpftool systemtap-sdt-dev
linux-headers-amd64 linux-image-amd64 kmod dwarves
qemu-system-x86 busybox-static cpio e2fsprogs
fio gnuplot-nox python3-torch python3-jinja2 python3-jsonschema
cppcheck clang-format valgrind help2man
libnuma-dev libsimde-dev
"
DEBUG_KERNEL_PKGS="linux-source-6.12 bison flex bc libelf-dev libssl-dev"
GUEST_SERIES="6.12"
KCACHE=${MOEM_KERNEL_CACHE:-/var/cache/moem/kernels}
here=$(cd "$(dirname "$0")" && pwd)

mode=install
for a in "$@"; do
	case "$a" in
	--check | --ensure) mode=$a ;;
	--debug-kernel) PKGS="$PKGS $DEBUG_KERNEL_PKGS" ;;
	*) echo "usage: scripts/deps.sh [--check|--ensure] [--debug-kernel]" >&2; exit 2 ;;
	esac
done

missing() {
	for p in $PKGS; do
		s=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
		case "$s" in
		*"install ok installed"*) ;;
		*) printf '%s ' "$p" ;;
		esac
	done
	# npm installs the tests' JavaScript peers (tokenizers, the openai
	# client). NodeSource's nodejs ships it; Debian's nodejs needs its npm
	# package (which conflicts with NodeSource's), so ask only without one.
	command -v npm >/dev/null 2>&1 || printf 'npm '
}

# The build of series S (6.12) that apt offers now: its metapackage's dependency.
guest_kver() {
	apt-cache depends "linux-headers-$1-amd64" 2>/dev/null |
		sed -n 's/^ *Depends: linux-headers-\(.*-amd64\)$/\1/p' | head -n 1
}

# Guest kernels not unpacked yet, as "series=version" (version "?" if apt
# has no list that names it).
guest_missing() {
	for s in $GUEST_SERIES; do
		v=$(guest_kver "$s")
		if [ -z "$v" ]; then
			printf '%s=? ' "$s"
		elif ! MOEM_KERNEL_CACHE=$KCACHE "$here/guest/kernels.sh" root "$v" >/dev/null 2>&1; then
			printf '%s=%s ' "$s" "$v"
		fi
	done
}

unpack_guest_kernel() { # SERIES VERSION
	s=$1 v=$2 dst=$KCACHE/$2
	# The headers package names its -common and kbuild companions.
	extra=$(apt-cache depends "linux-headers-$v" |
		sed -n 's/^ *Depends: \(linux-\(headers\|kbuild\)-[^ ]*\)$/\1/p')
	tmp=$(mktemp -d)
	echo "deps: unpacking guest kernel $v into $dst"
	(cd "$tmp" && $SUDO apt-get download -q -o APT::Sandbox::User=root \
		"linux-image-$v" "linux-headers-$v" $extra) || { rm -rf "$tmp"; return 1; }
	$SUDO rm -rf "$dst.new"
	$SUDO mkdir -p "$dst.new"
	for d in "$tmp"/*.deb; do
		$SUDO dpkg -x "$d" "$dst.new"
	done
	rm -rf "$tmp"
	# The headers' Makefile includes the -common part by absolute path.
	$SUDO sed -i "s|/usr/src/|$dst/usr/src/|" "$dst.new/usr/src/linux-headers-$v/Makefile"
	$SUDO depmod -b "$dst.new" "$v"
	$SUDO rm -rf "$dst"
	$SUDO mv "$dst.new" "$dst"
	# Only the newest build of a series is kept (and tested).
	for o in "$KCACHE/$s".*; do
		[ "$o" = "$dst" ] || [ ! -e "$o" ] || $SUDO rm -rf "$o"
	done
}

todo=$(missing)
gtodo=$(guest_missing)
if [ -z "$todo" ] && [ -z "$gtodo" ]; then
	[ "$mode" = "--ensure" ] || echo "deps: all packages present"
	exit 0
fi
if [ "$mode" = "--check" ]; then
	[ -z "$todo" ] || echo "deps: missing: $todo"
	[ -z "$gtodo" ] || echo "deps: guest kernels missing from $KCACHE: $gtodo"
	exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
	SUDO=
elif command -v sudo >/dev/null 2>&1; then
	SUDO=sudo
else
	echo "deps: missing: $todo $gtodo" >&2
	echo "deps: run as root (or install sudo) so apt-get can install them" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
if [ -n "$todo" ]; then
	echo "deps: installing: $todo"
	$SUDO apt-get update -q
	# shellcheck disable=SC2086
	$SUDO apt-get install -y -q --no-install-recommends $todo
	todo=$(missing)
	if [ -n "$todo" ]; then
		echo "deps: still missing after apt-get: $todo" >&2
		exit 1
	fi
fi
case "$gtodo" in
*"=?"*) $SUDO apt-get update -q ;;
esac
for s in $GUEST_SERIES; do
	v=$(guest_kver "$s")
	if [ -z "$v" ]; then
		echo "deps: apt offers no linux-headers-$s-amd64 (is bookworm-security in sources.list?)" >&2
		exit 1
	fi
	MOEM_KERNEL_CACHE=$KCACHE "$here/guest/kernels.sh" root "$v" >/dev/null 2>&1 ||
		unpack_guest_kernel "$s" "$v"
done
gtodo=$(guest_missing)
if [ -n "$gtodo" ]; then
	echo "deps: guest kernels still missing after unpacking: $gtodo" >&2
	exit 1
fi
