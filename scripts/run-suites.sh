#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Run each `make` test suite even if an earlier one failed; fail at the end.
set -u
make=$1
shift
failed=""
for s in "$@"; do
	echo "=== $s"
	$make --no-print-directory "$s" || failed="$failed $s"
done
if [ -n "$failed" ]; then
	echo "=== FAILED:$failed"
	exit 1
fi
echo "=== all suites passed: $*"
