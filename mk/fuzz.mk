# SPDX-License-Identifier: GPL-2.0-only
#
# libFuzzer harnesses for the store's parsers and moemd's control protocol
# (runtime/serve/ctl/proto.c): tests/fuzz/fuzz_<name>.c,
# seed corpus in tests/fuzz/corpus/<name>/. The harnesses and the library
# sources they need are built with clang -fsanitize=fuzzer,address,undefined
# (libmoem.a itself is built with gcc and is not used here).
#
#   make fuzz          run each harness for FUZZ_SECONDS (default 60), a new
#                      random seed each run: this is where new inputs are found
#   make test-fuzz     the short pass `make test` runs (FUZZ_SHORT_SECONDS, 10)
#                      from a fixed seed (FUZZ_SEED, 1), so that a gate's result
#                      does not depend on the luck of the draw: the same tree
#                      tries the same inputs (a slower machine, a prefix of them)
#   make fuzz-build    build only

FUZZ_SECONDS		?= 60
FUZZ_SHORT_SECONDS	?= 10
FUZZ_SEED		?= 1
FUZZ_NAMES	:= $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS	:= $(FUZZ_NAMES:%=$(O)/fuzz/fuzz_%)
FUZZ_LIB_SRCS	:= $(wildcard runtime/storage/store/*.c) runtime/model/model.c \
		   runtime/compute/route/route.c \
		   $(wildcard runtime/compute/quant/*.c) $(wildcard runtime/model/synth/*.c) \
		   $(wildcard runtime/core/*.c) runtime/serve/ctl/proto.c \
		   $(wildcard runtime/serve/api/*.c) $(wildcard runtime/text/*.c)
FUZZ_LIB_OBJS	:= $(FUZZ_LIB_SRCS:%.c=$(O)/fuzz/obj/%.o)
FUZZ_CFLAGS	:= -g -O1 -std=gnu11 -pthread -fno-omit-frame-pointer \
		   -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined \
		   -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
FUZZ_LDLIBS	:= -ljson-c -lxxhash -linih -lpcre2-8 -lutf8proc -lm -lpthread

$(O)/fuzz/obj/%.o: %.c
	$(call msg,FUZZCC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CLANG) $(CPPFLAGS) $(FUZZ_CFLAGS) -MMD -MP -c -o $@ $<

$(O)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(wildcard tests/fuzz/*.h) $(FUZZ_LIB_OBJS)
	$(call msg,FUZZLD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CLANG) $(CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB_OBJS) \
		$(FUZZ_LDLIBS)

# Kept between runs (make would delete them as intermediates of the pattern rules).
.SECONDARY: $(FUZZ_LIB_OBJS)

fuzz-build: $(FUZZ_BINS)

fuzz: fuzz-build
	$(Q)MOEM_BUILD=$(O) tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_NAMES)

test-fuzz: fuzz-build
	$(Q)MOEM_BUILD=$(O) FUZZ_SEED=$(FUZZ_SEED) tests/fuzz/run.sh $(FUZZ_SHORT_SECONDS) \
		$(FUZZ_NAMES)

TEST_SUITES += test-fuzz

.PHONY: fuzz fuzz-build test-fuzz
