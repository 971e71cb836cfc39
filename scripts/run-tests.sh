#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# Run test programs the liburing way: each with a timeout, exit 0 = pass,
# 4 (KSFT_SKIP) or 77 = skip, anything else = fail; the output of a
# failed or skipped test is shown, the rest summarised.
#   scripts/run-tests.sh [--suite NAME] [--timeout S] prog...
set -u
suite=tests
tmo=${MOEM_TEST_TIMEOUT:-300}
while [ $# -gt 0 ]; do
	case "$1" in
	--suite) suite=$2; shift 2 ;;
	--timeout) tmo=$2; shift 2 ;;
	*) break ;;
	esac
done

pass=0 fail=0 skip=0 failed=""
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in "$@"; do
	name=$(basename "$t")
	start=$(date +%s%N)
	timeout -k 10 "$tmo" "$t" >"$log" 2>&1
	rc=$?
	ms=$((($(date +%s%N) - start) / 1000000))
	secs=$((ms / 1000)).$(((ms % 1000) / 100))
	case $rc in
	0)
		pass=$((pass + 1))
		printf '  PASS  %-40s %6ss\n' "$name" "$secs"
		;;
	4 | 77)
		skip=$((skip + 1))
		printf '  SKIP  %-40s %s\n' "$name" "$(grep -m1 -iE 'skip' "$log" | cut -c1-100)"
		;;
	*)
		fail=$((fail + 1))
		failed="$failed $name"
		if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
			printf '  FAIL  %-40s timed out after %ss\n' "$name" "$tmo"
		else
			printf '  FAIL  %-40s exit %d\n' "$name" "$rc"
		fi
		sed 's/^/        | /' "$log" | tail -n 60
		;;
	esac
done
echo "$suite: $pass passed, $skip skipped, $fail failed"
[ $fail -eq 0 ] || { echo "$suite: failed:$failed"; exit 1; }
exit 0
