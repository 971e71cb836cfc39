# SPDX-License-Identifier: GPL-2.0-only
# Scheduling-policy benchmarks: the standard synthetic suite through the
# trace simulator (bench/sim/run.sh) -> Documentation/benchmarks/.
BENCH_SUITES += bench-sim

.PHONY: bench-sim
bench-sim: all
	$(Q)MOEM=$(O)/bin/moem OUT=$(O)/bench/sim bench/sim/run.sh
