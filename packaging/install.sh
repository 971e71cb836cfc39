#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Install moem from a built tree (make && make kmod): the tools, moemd,
# moem.ko, the systemd unit and the module snippets. Existing
# configuration files are kept (the new one is put next to them as
# *.moem-new).
#   packaging/install.sh [--build DIR] [--prefix /usr/local] [--destdir DIR]
#                        [--no-kmod] [--no-systemd]
# Then: systemctl daemon-reload; systemctl enable --now moemd
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
build=$top/build
prefix=/usr/local
destdir=
kmod=1
systemd=1
while [ $# -gt 0 ]; do
	case "$1" in
	--build) build=$2; shift 2 ;;
	--prefix) prefix=$2; shift 2 ;;
	--destdir) destdir=$2; shift 2 ;;
	--no-kmod) kmod=0; shift ;;
	--no-systemd) systemd=0; shift ;;
	-h | --help) sed -n '3,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "install.sh: unknown option $1" >&2; exit 2 ;;
	esac
done

for b in moem moemctl moemd; do
	[ -x "$build/bin/$b" ] || { echo "install.sh: $build/bin/$b not built (make)" >&2; exit 1; }
done

# install FILE DEST MODE, keeping an existing configuration file.
put() {
	mkdir -p "$(dirname "$destdir$2")"
	install -m "$3" "$1" "$destdir$2"
	echo "  $2"
}
put_conf() {
	if [ -e "$destdir$2" ] && ! cmp -s "$1" "$destdir$2"; then
		put "$1" "$2.moem-new" "$3"
		echo "    (kept the existing $2)"
	else
		put "$1" "$2" "$3"
	fi
}

echo "install.sh: installing into ${destdir:-/}"
put "$build/bin/moem" "$prefix/bin/moem" 0755
put "$build/bin/moemctl" "$prefix/bin/moemctl" 0755
put "$build/bin/moemd" "$prefix/sbin/moemd" 0755
put_conf "$here/moemd.conf" /etc/moem/moemd.conf 0644
for d in "$top"/Documentation/admin-guide.md "$top"/Documentation/protocol.md; do
	[ -e "$d" ] && put "$d" "$prefix/share/doc/moem/$(basename "$d")" 0644
done
# Manual pages (make builds them with help2man).
for m in moem.1 moemctl.1 moemd.8; do
	if [ -e "$build/man/$m" ]; then
		put "$build/man/$m" "$prefix/share/man/man${m##*.}/$m" 0644
	else
		echo "install.sh: $build/man/$m not built (install help2man, then make man)" >&2
	fi
done
# Where socket clients may have moemd write traces and read inputs
# (moemd.conf: trace-dir, workload-dir): root's, not world-writable.
for d in /var/lib/moem/traces /var/lib/moem/inputs; do
	mkdir -p "$destdir$d"
	chmod 0750 "$destdir$d"
	echo "  $d/"
done
if [ $kmod -eq 1 ]; then
	kver=${KVER:-$(uname -r)}
	[ -r "$top/kmod/moem.ko" ] || { echo "install.sh: kmod/moem.ko not built (make kmod, or --no-kmod)" >&2; exit 1; }
	put "$top/kmod/moem.ko" "/lib/modules/$kver/extra/moem.ko" 0644
	put_conf "$here/modules-load-moem.conf" /etc/modules-load.d/moem.conf 0644
	put_conf "$here/modprobe-moem.conf" /etc/modprobe.d/moem.conf 0644
	put_conf "$here/70-moem.rules" /etc/udev/rules.d/70-moem.rules 0644
	if [ -z "$destdir" ] && command -v depmod >/dev/null; then
		depmod "$kver"
	fi
fi
if [ $systemd -eq 1 ]; then
	tmp=$(mktemp)
	sed "s|/usr/local/sbin/moemd|$prefix/sbin/moemd|; s|/usr/local/share/doc|$prefix/share/doc|" \
		"$here/moemd.service" >"$tmp"
	put "$tmp" /etc/systemd/system/moemd.service 0644
	rm -f "$tmp"
	if [ -z "$destdir" ] && [ -d /run/systemd/system ]; then
		systemctl daemon-reload
		echo "install.sh: now: edit /etc/moem/moemd.conf, then systemctl enable --now moemd"
	fi
fi
