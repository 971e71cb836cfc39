#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# Judge a guest log written by scripts/guest/init:
#   scripts/guest/check.sh LOG PROG...
# Every PROG named *_test must have run in both phases (root, then an
# unprivileged user) and exited 0 with no "not ok" TAP line; every
# MOEM-STEP must be ok (bpf-pool too when bpf_pool_watch is among the
# PROGs); the run must reach MOEM-DONE; and no kernel log section after
# boot may hold a kernel problem report (KASAN, lockdep and kmemleak's
# included, for the debug kernel). Prints a summary; exit 0 pass, 1 fail.
set -u
log=$1
shift
fail=0
bad() {
	echo "test-kmod: FAIL: $*"
	fail=1
}

phases="root user"
# The BPF tracepoint watcher (mk/bpf.mk) must have passed if it was given.
want_bpf=0
for t in "$@"; do
	[ "$(basename "$t")" = bpf_pool_watch ] && want_bpf=1
done
for t in "$@"; do
	name=$(basename "$t")
	case "$name" in
	*_test) ;;
	*) continue ;;
	esac
	for p in $phases; do
		line=$(grep -E "^MOEM-EXIT $p/$name " "$log" | head -n1)
		if [ -z "$line" ]; then
			bad "$p/$name: no result (crashed guest or timeout)"
			continue
		fi
		set -- $line
		rc=$3
		secs=$(awk -v a="$4" -v b="$5" 'BEGIN { printf "%.1f", b - a }')
		# TAP lines of this program: between its RUN and EXIT markers.
		tap=$(sed -n "/^MOEM-RUN $p\/$name\$/,/^MOEM-EXIT $p\/$name /p" "$log")
		nok=$(printf '%s\n' "$tap" | grep -c '^not ok' || true)
		nok_total=$(printf '%s\n' "$tap" | grep -cE '^(not )?ok ' || true)
		nskip=$(printf '%s\n' "$tap" | grep -cE '^ok .*# SKIP' || true)
		if [ "$rc" != 0 ] || [ "$nok" != 0 ]; then
			bad "$p/$name: exit $rc, $nok of $nok_total tests not ok"
			printf '%s\n' "$tap" | grep -E '^not ok|^# .*(FAIL|Expected|ASSERT)' | head -n 20 |
				sed 's/^/        | /'
		else
			printf '  PASS  %-8s %-20s %3d tests (%d skipped) %6ss guest\n' "$p" "$name" \
				"$nok_total" "$nskip" "$secs"
		fi
	done
done

while read -r l; do
	bad "step: ${l#MOEM-STEP }"
done < <(grep -E '^MOEM-STEP .*FAILED' "$log")
for s in insmod rmmod-busy hold-persist rmmod sysfs-gone insmod-pin rmmod-pinned insmod-user \
	regions-empty rmmod-user insmod-compat remap-user rmmod-compat insmod-node0 node0 \
	user-max-default rmmod-node0; do
	grep -qE "^MOEM-STEP $s ok" "$log" || bad "step $s did not pass"
done
[ "$(grep -c '^MOEM-STEP insmod-refused .* ok$' "$log")" -eq 10 ] ||
	bad "not every bad parameter set was refused"
if [ $want_bpf -eq 1 ]; then
	grep -qE '^MOEM-STEP bpf-pool ok' "$log" &&
		grep -E '^MOEM-STEP bpf-pool ok' "$log" | sed 's/^MOEM-STEP /  PASS  /' ||
		bad "step bpf-pool did not pass (a BPF program on moem.ko's tracepoints)"
fi
grep -q '^MOEM-DONE' "$log" || bad "the guest did not reach the end of its script"

# Kernel problem reports anywhere after boot (and panics anywhere).
pat='BUG:|WARNING:|unreferenced object|Out of memory|oom-kill|page allocation failure|Oops|general protection|lockdep|possible circular locking|possible recursive locking|INFO: task .* blocked|Call Trace:|UBSAN|KASAN|kernel BUG|Bad page|list_(add|del) corruption|refcount_t:|rcu: INFO|Kernel panic'
kern=$(awk '/^MOEM-DMESG-BEGIN boot$/ { skip = 1 } /^MOEM-DMESG-END boot$/ { skip = 0; next } !skip' "$log" |
	grep -E "$pat" || true)
if [ -n "$kern" ]; then
	bad "kernel log reports problems:"
	printf '%s\n' "$kern" | head -n 40 | sed 's/^/        | /'
fi
if [ $fail -eq 0 ]; then
	echo "test-kmod: $(sed -n 's/^MOEM-GUEST kernel //p' "$log" | head -n 1): every program" \
		"passed as root and as a user; rmmod refused while a region was mapped, safe while" \
		"a dead region was pinned; kernel log clean"
fi
exit $fail
