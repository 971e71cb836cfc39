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
