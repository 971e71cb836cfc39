# SPDX-License-Identifier: GPL-2.0-only
# Scheduling-policy benchmarks: the standard synthetic suite through the
# trace simulator (bench/sim/run.sh) -> Documentation/benchmarks/.
# test-guard: the placement layer's before/after guard (tests/guard/guard.sh:
# simulator numbers, engine digests and trace files against golden files).
# bench-hybrid: hybrid CPU/GPU execution against transfer-only in the
# simulator, with this machine's CPU kernels (bench/sim/hybrid.sh ->
# Documentation/benchmarks/hybrid.md), then moem run tokens/s end to end
# (bench/sim/hybrid_run.sh, alone: bench-hybrid-run).
BENCH_SUITES += bench-sim bench-hybrid
TEST_SUITES += test-guard

# The online policies' bound on the synthetic workload (bench/sim/online_bound.c).
ONLINE_BOUND	:= $(O)/bench/sim/online_bound

$(ONLINE_BOUND): $(O)/bench/sim/online_bound.o $(LIB)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB) $(LDLIBS)

.PHONY: bench-sim bench-hybrid bench-hybrid-run test-guard
bench-sim: all $(ONLINE_BOUND)
	$(Q)MOEM=$(O)/bin/moem ONLINE_BOUND=$(ONLINE_BOUND) OUT=$(O)/bench/sim bench/sim/run.sh

bench-hybrid: all
	$(Q)MOEM=$(O)/bin/moem OUT=$(O)/bench/hybrid bench/sim/hybrid.sh

# Only the end-to-end section of hybrid.md (moem run tokens/s); bench-hybrid runs it too.
bench-hybrid-run: all
	$(Q)MOEM=$(O)/bin/moem OUT=$(O)/bench/hybrid bench/sim/hybrid_run.sh

test-guard: all $(ONLINE_BOUND)
	$(Q)MOEM_BUILD=$(O) scripts/run-tests.sh --suite guard tests/guard/guard.sh
