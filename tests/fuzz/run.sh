#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Run libFuzzer harnesses for a bounded time each (make fuzz / test-fuzz).
#   tests/fuzz/run.sh SECONDS name...
# Each harness starts from its committed seeds (tests/fuzz/corpus/<name>/,
# read-only) plus what earlier runs found (build/fuzz/corpus/<name>/). A
# crash, leak, sanitizer report or timeout fails the run; the reproducer is
# kept under build/fuzz/artifacts/. FUZZ_SEED, when set, fixes libFuzzer's
# seed (make test-fuzz); unset, each run draws its own (make fuzz).
set -u
secs=$1
shift
B=${MOEM_BUILD:-build}
failed=""
for name in "$@"; do
	bin="$B/fuzz/fuzz_$name"
	work="$B/fuzz/corpus/$name"
	log="$B/fuzz/$name.log"
	mkdir -p "$work" "$B/fuzz/artifacts"
	dict=""
	seed=""
	[ -n "${FUZZ_SEED:-}" ] && seed="-seed=$FUZZ_SEED"
	[ -f "tests/fuzz/$name.dict" ] && dict="-dict=tests/fuzz/$name.dict"
	# shellcheck disable=SC2086
	"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$B/fuzz/artifacts/$name-" $dict $seed \
		"$work" "tests/fuzz/corpus/$name" >"$log" 2>&1
	rc=$?
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
	if [ $rc -eq 0 ]; then
		printf '  PASS  fuzz_%-20s %ss, %s runs, %s\n' "$name" "$secs" "${runs:-?}" "${cov:-?}"
	else
		printf '  FAIL  fuzz_%-20s exit %d (log %s)\n' "$name" $rc "$log"
		grep -E 'ERROR|SUMMARY|Test unit written|runtime error' "$log" | head -n 20 |
			sed 's/^/        | /'
		failed="$failed $name"
	fi
done
if [ -n "$failed" ]; then
	echo "fuzz: failed:$failed"
	exit 1
fi
echo "fuzz: $# harnesses passed"
