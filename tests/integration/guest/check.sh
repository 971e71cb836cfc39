#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# Judge the log of the daemon's guest run (daemon.sh):
#   check.sh LOG PROG...
# Every PROG named *_test must have run and exited 0 with no "not ok" TAP
# line, every MOEM-STEP must be ok, the run must reach MOEM-DONE, and no
# kernel log section after boot may hold a kernel problem report. The
# measurements the tests print (MOEM-RESULT lines) are repeated.
set -u
log=$1
shift
fail=0
bad() {
	echo "test-daemon-guest: FAIL: $*"
	fail=1
}

for t in "$@"; do
	name=$(basename "$t")
	case "$name" in
	*_test) ;;
	*) continue ;;
	esac
	line=$(grep -E "^MOEM-EXIT daemon/$name " "$log" | head -n1)
	if [ -z "$line" ]; then
		bad "$name: no result (crashed guest or timeout)"
		continue
	fi
	set -- $line
	rc=$3
	secs=$(awk -v a="$4" -v b="$5" 'BEGIN { printf "%.1f", b - a }')
	tap=$(sed -n "/^MOEM-RUN daemon\/$name\$/,/^MOEM-EXIT daemon\/$name /p" "$log")
	nok=$(printf '%s\n' "$tap" | grep -c '^not ok' || true)
	ntot=$(printf '%s\n' "$tap" | grep -cE '^(not )?ok ' || true)
	nskip=$(printf '%s\n' "$tap" | grep -cE '^ok .*# SKIP' || true)
	if [ "$rc" != 0 ] || [ "$nok" != 0 ] || [ "$ntot" = 0 ]; then
		bad "$name: exit $rc, $nok of $ntot tests not ok"
		printf '%s\n' "$tap" | grep -E '^not ok|^# .*(FAIL|Expected|ASSERT)' | head -n 20 |
			sed 's/^/        | /'
	else
		printf '  PASS  %-28s %3d tests (%d skipped) %6ss guest\n' "$name" "$ntot" "$nskip" "$secs"
	fi
done

while read -r l; do
	bad "step: ${l#MOEM-STEP }"
done < <(grep -E '^MOEM-STEP .*FAILED' "$log")
for s in insmod rmmod; do
	grep -qE "^MOEM-STEP $s ok" "$log" || bad "step $s did not pass"
done
grep -q '^MOEM-DONE' "$log" || bad "the guest did not reach the end of its script"

pat='BUG:|WARNING:|Out of memory|oom-kill|page allocation failure|Oops|general protection|lockdep|possible circular locking|possible recursive locking|INFO: task .* blocked|Call Trace:|UBSAN|KASAN|kernel BUG|Bad page|list_(add|del) corruption|refcount_t:|rcu: INFO|Kernel panic'
kern=$(awk '/^MOEM-DMESG-BEGIN boot$/ { skip = 1 } /^MOEM-DMESG-END boot$/ { skip = 0; next } !skip' "$log" |
	grep -E "$pat" || true)
if [ -n "$kern" ]; then
	bad "kernel log reports problems:"
	printf '%s\n' "$kern" | head -n 40 | sed 's/^/        | /'
fi
grep -oE 'MOEM-RESULT .*' "$log" | sed 's/^MOEM-RESULT /  result  /'
[ $fail -eq 0 ] && echo "test-daemon-guest: every program passed; module unloaded; kernel log clean"
exit $fail
