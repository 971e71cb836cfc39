#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# Run each `make` test suite even if an earlier one failed; fail at the
# end. Then say what ran: each suite passed, FAILED or was skipped, its
# counts, and every test that was skipped with its reason (a machine
# without qemu, a GPU or BPF privileges skips those parts: CI's log says
# which).
#   scripts/run-suites.sh MAKE SUITE...
# Each suite runs with XDG_CACHE_HOME set to a fresh empty directory (and
# scripts/run-tests.sh gives every program of it its own): a developer's
# ~/.cache/moem/calibration.json never reaches a test.
set -u
make=$1
shift
failed=""
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
start=$(date +%s)
for s in "$@"; do
	echo "=== $s"
	t0=$(date +%s)
	mkdir "$logs/cache-$s"
	XDG_CACHE_HOME=$logs/cache-$s $make --no-print-directory "$s" 2>&1 | tee "$logs/$s.log"
	rc=${PIPESTATUS[0]}
	echo "$rc $(($(date +%s) - t0))" >"$logs/$s.rc"
	[ "$rc" -eq 0 ] || failed="$failed $s"
done

echo
echo "=== summary ($(($(date +%s) - start)) s)"
for s in "$@"; do
	read -r rc secs <"$logs/$s.rc"
	log=$logs/$s.log
	# "<suite>: N passed, N skipped, N failed" lines of scripts/run-tests.sh
	counts=$(grep -E '^[a-z0-9-]+: [0-9]+ passed, [0-9]+ skipped, [0-9]+ failed' "$log" |
		sed 's/^[a-z0-9-]*: //' | paste -sd ';' -)
	whole=$(grep -m1 -E '^[a-z0-9-]+: SKIP' "$log")
	pass=$(grep -cE '^  PASS  |^ok [0-9]' "$log")
	skips=$(grep -cE '^  SKIP  ' "$log")
	if [ "$rc" -ne 0 ]; then
		status=FAILED
	elif [ -n "$whole" ] || { [ "$pass" -eq 0 ] && [ "$skips" -gt 0 ]; }; then
		status=skipped
	else
		status=passed
	fi
	printf '  %-20s %-8s %5ss  %s\n' "$s" "$status" "$secs" "${counts:-${whole:-}}"
	[ -n "$whole" ] && [ -n "$counts" ] && printf '  %-20s          %s\n' "" "$whole"
	grep -E '^  SKIP  ' "$log" | sed 's/^  SKIP  /      skipped: /' | cut -c1-150
done
if [ -n "$failed" ]; then
	echo "=== FAILED:$failed"
	exit 1
fi
echo "=== all suites passed: $*"
