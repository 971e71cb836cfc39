#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# Judge the NUMA guest's log (scripts/guest/numa.sh):
#   scripts/guest/check-numa.sh LOG PROG...
# The guest had two nodes with memory and one without; every PROG named *_test ran as root and as a
# user, exited 0 with no "not ok" and no SKIP (a skip there means the
# nodes were missing); moem.ko loaded and unloaded; the script reached
# MOEM-DONE; the kernel log after boot holds no problem report. Exit 0
# pass, 1 fail.
set -u
log=$1
shift
fail=0
bad() {
	echo "test-numa: FAIL: $*"
	fail=1
}
grep -q '^MOEM-NUMA online 0-2$' "$log" ||
	bad "the guest did not have nodes 0-2 online (0 and 1 with memory, 2 without)"
for t in "$@"; do
	name=$(basename "$t")
	case "$name" in
	*_test) ;;
	*) continue ;;
	esac
	for p in root user; do
		line=$(grep -E "^MOEM-EXIT $p/$name " "$log" | head -n1)
		if [ -z "$line" ]; then
			bad "$p/$name: no result (crashed guest or timeout)"
			continue
		fi
		set -- $line
		tap=$(sed -n "/^MOEM-RUN $p\/$name\$/,/^MOEM-EXIT $p\/$name /p" "$log")
		nok=$(printf '%s\n' "$tap" | grep -c '^not ok' || true)
		n=$(printf '%s\n' "$tap" | grep -cE '^(not )?ok ' || true)
		skips=$(printf '%s\n' "$tap" | grep -E '^ok .*# SKIP' || true)
		# as a user, reserving huge pages is refused: that skip is expected
		skips=$(printf '%s\n' "$skips" | grep -v 'needs root' || true)
		if [ "$3" != 0 ] || [ "$nok" != 0 ] || [ "$n" = 0 ] || [ -n "$skips" ]; then
			bad "$p/$name: exit $3, $nok of $n tests not ok${skips:+, skipped: $skips}"
			printf '%s\n' "$tap" | grep -E '^not ok|^# .*(FAIL|Expected|ASSERT)' | head -n 20 |
				sed 's/^/        | /'
		else
			printf '  PASS  %-5s %-16s %d tests on two NUMA nodes\n' "$p" "$name" "$n"
		fi
	done
done
grep -q '^MOEM-DONE' "$log" || bad "the guest did not reach the end of its script"
for s in insmod rmmod; do
	grep -q "^MOEM-STEP $s ok" "$log" || bad "moem.ko: $s did not succeed"
done
pat='BUG:|WARNING:|Out of memory|oom-kill|page allocation failure|Oops|general protection|Call Trace:|UBSAN|kernel BUG|Bad page|rcu: INFO|Kernel panic'
kern=$(awk '/^MOEM-DMESG-BEGIN/ { on = 1 } /^MOEM-DMESG-END/ { on = 0 } on' "$log" |
	grep -E "$pat" || true)
[ -z "$kern" ] || bad "kernel log reports problems: $(printf '%s\n' "$kern" | head -n 5)"
[ $fail -eq 0 ] && echo "test-numa: $(sed -n 's/^MOEM-GUEST kernel //p' "$log" | head -n 1):" \
	"the pool (thp, hugetlb, moem.ko) and the DRAM tier on two NUMA nodes, as root and as a user"
exit $fail
