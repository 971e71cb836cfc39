# SPDX-License-Identifier: GPL-2.0-only
#
# Benchmarks (`make bench` runs every suite in BENCH_SUITES).
#
# bench-loader: the loader against fio on one file, same request size and
# queue depth (bench/loader/bench_loader.c). The test file is written once
# and kept under $(O) (not in git); put it elsewhere with
# BENCH_LOADER_FILE=/nvme/moem-bench.dat, and pass options with
# BENCH_LOADER_ARGS="--qd 64 --bs 2M --reps 7".

BENCH_LOADER		:= $(O)/bench/loader/bench-loader
BENCH_LOADER_FILE	?= $(O)/bench/loader.dat
BENCH_LOADER_SIZE	?= 4G
BENCH_LOADER_ARGS	?=
BENCH_SUITES		+= bench-loader

$(BENCH_LOADER): $(O)/bench/loader/bench_loader.o $(LIB)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB) $(LDLIBS)

.PHONY: bench-loader
bench-loader: $(BENCH_LOADER)
	$(Q)mkdir -p $(dir $(BENCH_LOADER_FILE))
	$(Q)$(BENCH_LOADER) --file $(BENCH_LOADER_FILE) --size $(BENCH_LOADER_SIZE) $(BENCH_LOADER_ARGS)

# bench-decode: moem decode on a synthetic qwen3_moe (bench/decode/run.sh):
# tokens/s at batch 1 and 8, prompt tokens/s, all resident and 25% HBM,
# the time split. DOC=Documentation/benchmarks/decode.md writes the page.
BENCH_SUITES		+= bench-decode

.PHONY: bench-decode
bench-decode: all
	$(Q)MOEM_BUILD=$(O) DOC=$(DOC) sh bench/decode/run.sh

# bench-prefix: a chat's turns through moem decode with and without the
# prefix cache, against llama.cpp keeping its cache's common beginning
# and computing every prompt (bench/prefix/run.sh). Skips without the npm
# registry. DOC=Documentation/benchmarks/prefix-cache.md writes the page.
BENCH_SUITES		+= bench-prefix

.PHONY: bench-prefix
bench-prefix: all
	$(Q)MOEM_BUILD=$(O) DOC=$(DOC) sh bench/prefix/run.sh

# bench-llama: moem against llama.cpp (node-llama-cpp's prebuilt CPU build)
# on the same synthetic qwen3_moe, bf16/q8/q4 against BF16/Q8_0/Q4_K_M, 1
# and 2 threads, then moem at 25% HBM (bench/llama/run.sh). Skips without
# the npm registry. DOC=Documentation/benchmarks/llama-cpp.md writes the page.
BENCH_SUITES		+= bench-llama

.PHONY: bench-llama
bench-llama: all
	$(Q)MOEM_BUILD=$(O) DOC=$(DOC) sh bench/llama/run.sh || [ $$? -eq 77 ]
