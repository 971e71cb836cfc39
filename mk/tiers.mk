# SPDX-License-Identifier: GPL-2.0-only
#
# Tier benchmarks (issue: tiered residency).
#   bench-tiers      transfer engine vs raw device copies (emulated device
#                    here), tokens/s at HBM = 100/50/25% of expert bytes
#                    with on-demand LRU, and the DRAM tier's eviction rules
#                    (bench/tiers/page.sh); DOC=path writes the page
#                    Documentation/benchmarks/tiers.md
#   bench-tiers-gpu  the same on the GPU from this build (bench-gpu runs the
#                    GPU bundle's copy, mk/gpu-bundle.mk)

BENCH_TIERS	:= $(O)/bench/tiers/bench_tiers
BENCH_SUITES	+= bench-tiers

$(BENCH_TIERS): $(O)/bench/tiers/bench_tiers.o $(LIB)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB) $(LDLIBS)

.PHONY: bench-tiers bench-tiers-gpu
bench-tiers: all $(BENCH_TIERS)
	$(Q)MOEM_BUILD=$(O) DOC=$(DOC) sh bench/tiers/page.sh

bench-tiers-gpu: all $(BENCH_TIERS)
	$(Q)$(BENCH_TIERS) --backend cuda
	$(Q)MOEM_BUILD=$(O) bench/tiers/tokens.sh cuda
