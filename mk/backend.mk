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
# SwiGLU's clamps become blends (vectorised) in every clone only without
# trapping math (swiglu.c); no value changes.
$(O)/runtime/compute/cpu/swiglu.o: CFLAGS += -fno-trapping-math
# The vector kernels (kern_avx2.c, kern_avx512.c) are built for their
# instruction set and only called after isa.c has checked the CPU runs it;
# inside them FMA is what the kernels ask for by name, so contraction
# stays off as everywhere in the backend.
$(O)/runtime/compute/cpu/kern_avx2.o: CFLAGS += -mavx2 -mfma -mf16c
$(O)/runtime/compute/cpu/kern_avx512.o: CFLAGS += -mavx2 -mfma -mf16c -mavx512f -mavx512bw \
	-mavx512vl -mavx512bf16 -mavx512vnni
$(O)/runtime/compute/cpu/kern_amx.o: CFLAGS += -mavx2 -mfma -mf16c -mavx512f -mavx512bw \
	-mavx512vl -mavx512bf16 -mavx512vnni -mamx-tile -mamx-bf16
$(O)/runtime/compute/cpu/kern_amx_q.o: CFLAGS += -mavx2 -mfma -mf16c -mavx512f -mavx512bw \
	-mavx512vl -mavx512vnni -mgfni -mamx-tile -mamx-int8
# NUMA topology and page placement (runtime/compute/cpu/numa.c).
LDLIBS	+= -lnuma

# Kernel benchmarks (bench/kernels): `make bench` runs the CPU variant;
# mk/cuda.mk's bench-gpu runs the same program on the CUDA backend.
BENCH_SUITES	+= bench-kernels

$(O)/bench/kernels/%: bench/kernels/%.c $(LIB)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# On the CPU: bench_kernels, then PyTorch's bf16 on the same shapes and
# threads (skipped, and said so in the table, when /usr/bin/python3 has no
# torch), then Documentation/benchmarks/cpu-kernels.md from both.
# BENCH_KERNELS_ARGS passes options (e.g. --threads 1, --isa scalar);
# CPU_KERNELS_DOC names the page (one per machine type kept in the tree:
# cpu-kernels.md an Intel Xeon with AMX, cpu-kernels-avx512.md an AMD
# EPYC with AVX-512 and no AMX).
BENCH_KERNELS_ARGS ?=
CPU_KERNELS_DOC ?= Documentation/benchmarks/cpu-kernels.md
.PHONY: bench-kernels
bench-kernels: $(O)/bench/kernels/bench_kernels
	$(Q)$(O)/bench/kernels/bench_kernels --backend cpu $(BENCH_KERNELS_ARGS) \
		--out $(O)/bench/kernels/cpu_results.txt
	$(Q)/usr/bin/python3 bench/kernels/torch_ffn.py --cpu \
		--ours $(O)/bench/kernels/cpu_results.txt >$(O)/bench/kernels/torch_cpu.txt; \
		rc=$$?; cat $(O)/bench/kernels/torch_cpu.txt; \
		[ $$rc -eq 0 ] || [ $$rc -eq 4 ] || exit $$rc; \
		[ $$rc -eq 0 ] || rm -f $(O)/bench/kernels/torch_cpu.txt
	$(Q)python3 bench/kernels/cpu_table.py --ours $(O)/bench/kernels/cpu_results.txt \
		--torch $(O)/bench/kernels/torch_cpu.txt --out $(CPU_KERNELS_DOC) \
		--command "make bench-kernels BENCH_KERNELS_ARGS='$(BENCH_KERNELS_ARGS)' CPU_KERNELS_DOC=$(CPU_KERNELS_DOC)"

# test_cpu_kern also runs the AVX-512 kernels built against SIMDe's portable
# AVX-512 (libsimde-dev), so that their logic is tested without AVX-512.
# -O1: at -O2 GCC 12 took 533 s to compile it here (the unrolled, always-inlined
# kernels over SIMDe's emulation), at -O1 150 s; the test runs 2.3 s against 1.5.
CPU_KERN_EMU := $(O)/tests/unit/kern_avx512_emu.o
$(CPU_KERN_EMU): runtime/compute/cpu/kern_avx512.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -O1 -ffp-contract=off -mavx2 -mfma -mf16c -Wno-psabi \
		-DMOEM_CPU_SIMDE -c -o $@ $<
$(O)/tests/unit/test_cpu_kern: $(CPU_KERN_EMU)
$(O)/tests/unit/test_cpu_kern: unit_LDLIBS += $(CPU_KERN_EMU)
