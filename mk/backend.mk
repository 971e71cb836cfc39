# SPDX-License-Identifier: GPL-2.0-only
#
# Compute backends (runtime/compute/{backend,cpu,cuda}/). The CPU backend promises bitwise
# reproducible results and a combine op identical to the CUDA kernel's:
# no a*b+c contraction into FMA on any architecture.
$(O)/runtime/compute/backend/%.o: CFLAGS += -ffp-contract=off
$(O)/runtime/compute/cpu/%.o: CFLAGS += -ffp-contract=off
$(O)/runtime/compute/cuda/%.o: CFLAGS += -ffp-contract=off
# The CPU backend's row kernels (dequantize, dot) want the vectorizer.
$(O)/runtime/compute/cpu/%.o: CFLAGS += -O3

# Kernel benchmarks (bench/kernels): `make bench` runs the CPU variant;
# mk/cuda.mk's bench-gpu runs the same program on the CUDA backend.
BENCH_SUITES	+= bench-kernels

$(O)/bench/kernels/%: bench/kernels/%.c $(LIB)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

.PHONY: bench-kernels
bench-kernels: $(O)/bench/kernels/bench_kernels
	$(Q)$(O)/bench/kernels/bench_kernels --backend cpu --out $(O)/bench/kernels/cpu_results.txt
