#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# The packaged files: packaging/install.sh puts everything where the admin
# guide says (into a scratch DESTDIR) and keeps an edited configuration;
# the systemd unit passes `systemd-analyze verify`; moem.ko has the
# parameters the modprobe snippet names; the example moemd.conf is read
# by moemd, which serves with it (budgets overridden by flags) and stops
# through moemctl. Exit 0 pass, 1 fail.
set -u
B=${MOEM_BUILD:-build}
top=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/moem-pkg-XXXXXX)
fail=0
pid=
cleanup() {
	[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
bad() {
	echo "not ok: $*"
	fail=1
}
ok() {
	echo "ok: $*"
}

dest=$tmp/root
"$top/packaging/install.sh" --build "$B" --destdir "$dest" --no-kmod >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log"; bad "install.sh failed"; exit 1; }
for f in usr/local/bin/moem usr/local/bin/moemctl usr/local/sbin/moemd etc/moem/moemd.conf \
	etc/systemd/system/moemd.service usr/local/share/doc/moem/admin-guide.md \
	usr/local/share/man/man1/moem.1 usr/local/share/man/man1/moemctl.1 \
	usr/local/share/man/man8/moemd.8 var/lib/moem/traces var/lib/moem/inputs; do
	[ -e "$dest/$f" ] || bad "install.sh did not install /$f"
done
[ -x "$dest/usr/local/sbin/moemd" ] || bad "moemd is not executable"
for m in man1/moem.1 man1/moemctl.1 man8/moemd.8; do
	grep -qF -- '\-\-version' "$dest/usr/local/share/man/$m" || bad "$m does not document --version"
done
[ "$(stat -c %a "$dest/var/lib/moem/traces")" = 750 ] || bad "the trace directory is not 0750"
ok "install.sh installs the programs, man pages, the unit, the config and its directories"

# An edited configuration survives a second install.
echo "# edited" >>"$dest/etc/moem/moemd.conf"
"$top/packaging/install.sh" --build "$B" --destdir "$dest" --no-kmod >/dev/null 2>&1 ||
	bad "second install.sh failed"
grep -q '^# edited' "$dest/etc/moem/moemd.conf" || bad "install.sh overwrote an edited moemd.conf"
[ -e "$dest/etc/moem/moemd.conf.moem-new" ] || bad "install.sh did not leave moemd.conf.moem-new"
ok "an edited moemd.conf is kept"

if [ -r "$top/kmod/moem.ko" ]; then
	"$top/packaging/install.sh" --build "$B" --destdir "$tmp/k" --no-systemd >/dev/null 2>&1 ||
		bad "install.sh with moem.ko failed"
	ls "$tmp"/k/lib/modules/*/extra/moem.ko >/dev/null 2>&1 || bad "moem.ko not installed"
	[ -e "$tmp/k/etc/modules-load.d/moem.conf" ] || bad "modules-load snippet not installed"
	[ -e "$tmp/k/etc/modprobe.d/moem.conf" ] || bad "modprobe snippet not installed"
	for p in $(sed -n 's/^#\{0,1\}options moem //p' "$top/packaging/modprobe-moem.conf" |
		tr ' ' '\n' | cut -d= -f1); do
		modinfo -p "$top/kmod/moem.ko" | grep -q "^$p:" || bad "moem.ko has no parameter $p"
	done
	ok "moem.ko, modules-load and modprobe snippets (parameters exist)"
else
	echo "ok: # SKIP kmod/moem.ko not built"
fi

if command -v systemd-analyze >/dev/null; then
	sed "s|/usr/local/sbin/moemd|$top/$B/bin/moemd|" "$top/packaging/moemd.service" \
		>"$tmp/moemd.service"
	if systemd-analyze verify "$tmp/moemd.service" >"$tmp/verify.log" 2>&1; then
		ok "systemd-analyze verify moemd.service"
	else
		cat "$tmp/verify.log"
		bad "systemd-analyze verify moemd.service"
	fi
else
	echo "ok: # SKIP systemd-analyze not installed"
fi

# The example config, as shipped, with a tiny pack and small budgets.
"$B/bin/moem" mkmodel --layers 2 --experts 8 --top-k 2 --hidden 128 --moe-intermediate 128 \
	--vocab 256 --out "$tmp/model" >/dev/null &&
	"$B/bin/moem" pack --model "$tmp/model" --out "$tmp/tiny.moem" --precisions bf16,q4 \
		>/dev/null || { bad "cannot make a pack"; exit 1; }
"$B/bin/moemd" --config "$top/packaging/moemd.conf" --pack "$tmp/tiny.moem" --hbm 40% \
	--dram 60% --pool thp --backend cpu --socket "$tmp/s.sock" 2>"$tmp/moemd.log" &
pid=$!
for _ in $(seq 300); do
	"$B/bin/moemctl" --socket "$tmp/s.sock" hello 2>/dev/null | grep -q ', ready;' && break
	sleep 0.1
done
if "$B/bin/moemctl" --socket "$tmp/s.sock" status >"$tmp/status.txt" 2>&1 &&
	grep -q 'route cache-aware, evict lru2, prefetch adaptive' "$tmp/status.txt"; then
	ok "moemd serves with the example moemd.conf (its policies in moemctl status)"
else
	cat "$tmp/status.txt" "$tmp/moemd.log"
	bad "moemd with the example moemd.conf"
fi
"$B/bin/moemctl" --socket "$tmp/s.sock" stop >/dev/null 2>&1 || bad "moemctl stop"
wait "$pid"
rc=$?
pid=
[ $rc -eq 0 ] || bad "moemd exited $rc after moemctl stop"
[ -e "$tmp/s.sock" ] && bad "the socket is still there after moemd stopped"
exit $fail
