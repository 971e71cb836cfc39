#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# Run test programs the liburing way: each with a timeout, exit 0 = pass,
# 4 (KSFT_SKIP) or 77 = skip, anything else = fail; the output of a
# failed or skipped test is shown, the rest summarised.
#   scripts/run-tests.sh [--suite NAME] [--timeout S] prog...
# Each program runs with XDG_CACHE_HOME set to a fresh empty directory,
# removed after it: nothing a developer keeps in ~/.cache/moem (the
# calibration cache moem calibrate writes, which every engine open reads)
# reaches a test, and nothing a test writes there outlives it
# (MOEM_TEST_RUNNER=1 tells a test it runs here: test_calib checks it).
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
cache=
trap 'rm -f "$log"; [ -z "$cache" ] || rm -rf "$cache"' EXIT
for t in "$@"; do
	name=$(basename "$t")
	cache=$(mktemp -d "${TMPDIR:-/tmp}/moem-test-cache.XXXXXX") && chmod 0755 "$cache" || exit 1
	start=$(date +%s%N)
	MOEM_TEST_RUNNER=1 XDG_CACHE_HOME=$cache timeout -k 10 "$tmo" "$t" >"$log" 2>&1
	rc=$?
	rm -rf "$cache"
	cache=
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
