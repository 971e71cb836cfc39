# SPDX-License-Identifier: GPL-2.0-only
#
# moem top-level Makefile. Userspace is built here, non-recursively, into
# $(O); moem.ko is built by kbuild (Kbuild, kmod/Kbuild). Areas with their
# own rules (kmod, cuda, bpf, tests, fuzz, bench) live in mk/*.mk and only
# append to the variables below.
#
#   make            libmoem, moem, moemctl, moemd
#   make kmod       moem.ko against KDIR (default: Debian linux-headers-amd64)
#   make test       every suite that can run here
#   make check      cppcheck, clang-format --dry-run, checkpatch.pl
#   make demo       the quick start: deps, build, main job
#   make bench      benchmarks (CPU; bench-gpu on a GPU machine)
#   V=1             show commands;  SAN=1  ASan + UBSan;  O=dir  build dir

.DELETE_ON_ERROR:
.SUFFIXES:
MAKEFLAGS += --no-builtin-rules

O	?= build
V	?= 0
SAN	?= 0
ifeq ($(origin CC),default)
CC	:= gcc
endif
CLANG	?= clang
NVCC	?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)

ifeq ($(V),1)
Q :=
msg = @true
else
Q := @
msg = @printf '  %-8s %s\n' "$(1)" "$(2)";
endif

# The guest kernel and its headers: Debian's linux-image-amd64 and
# linux-headers-amd64 (the newest installed, whatever the host runs).
KVER	?= $(lastword $(sort $(patsubst /usr/src/linux-headers-%,%,$(wildcard /usr/src/linux-headers-*-amd64))))
KDIR	?= /usr/src/linux-headers-$(KVER)
KIMAGE	?= /boot/vmlinuz-$(KVER)
export KVER KDIR KIMAGE

CPPFLAGS := -Iinclude -Iinclude/uapi -D_GNU_SOURCE
CFLAGS	?= -O2 -g
CFLAGS	+= -std=gnu11 -pthread -fPIC -MMD -MP \
	   -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers \
	   -Wformat=2 -Wno-format-truncation -Wshadow=local -Wvla -Werror=implicit-function-declaration \
	   -Werror=incompatible-pointer-types -Werror=return-type
LDFLAGS	?=
LDLIBS	:= -ljson-c -luring -lxxhash -lcrypto -linih -lm -ldl -lpthread
ifeq ($(SAN),1)
CFLAGS	+= -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS	+= -fsanitize=address,undefined
endif

# libmoem: every runtime/<group>/[<part>/]*.c except the daemon's main program.
LIB	:= $(O)/libmoem.a
LIB_SRCS := $(filter-out runtime/serve/moemd/%,$(wildcard runtime/*/*.c runtime/*/*/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(O)/%.o)
# Extra objects (the embedded CUDA fatbin, BPF skeleton users) from mk/*.mk.
LIB_EXTRA_OBJS :=

# Programs: tools/<prog>/*.c -> $(O)/bin/<prog>; moemd from runtime/serve/moemd.
TOOL_DIRS := $(patsubst tools/%/,%,$(sort $(dir $(wildcard tools/*/*.c))))
PROGS	:= $(TOOL_DIRS:%=$(O)/bin/%)
ifneq ($(wildcard runtime/serve/moemd/*.c),)
PROGS	+= $(O)/bin/moemd
endif

# Suites `make test` runs, in order; mk/*.mk append theirs.
TEST_SUITES := test-unit
BENCH_SUITES :=
# clang-format covers userspace; moem.ko and its uapi header follow the
# kernel's own style and are checked by checkpatch.pl (check-patch).
CHECK_SRCS = $(shell git ls-files '*.c' '*.h' '*.cu' '*.cuh' 2>/dev/null | \
	       grep -v -e '^tests/include/' -e '^kmod/' -e '^include/uapi/')

all: $(LIB) $(PROGS)

include $(sort $(wildcard mk/*.mk))

$(O)/%.o: %.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

# An archive keeps the first of two definitions of a symbol silently; a
# relocatable link of every object refuses them, so a clash fails the build.
$(LIB): $(LIB_OBJS) $(LIB_EXTRA_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@
	$(Q)$(LD) -r -o $(O)/libmoem.check.o $^ && rm -f $(O)/libmoem.check.o
	$(Q)$(AR) rcs $@ $^

# Each program links its own objects, libmoem and per-program libraries
# (<prog>_LDLIBS from mk/*.mk).
define prog_rule
$(O)/bin/$(1): $(patsubst %.c,$(O)/%.o,$(wildcard tools/$(1)/*.c)) $(LIB)
	$$(call msg,LD,$$@)
	$$(Q)mkdir -p $$(@D)
	$$(Q)$$(CC) $$(CFLAGS) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $$(LIB) $$($(1)_LDLIBS) $$(LDLIBS)
endef
$(foreach p,$(TOOL_DIRS),$(eval $(call prog_rule,$(p))))

$(O)/bin/moemd: $(patsubst %.c,$(O)/%.o,$(wildcard runtime/serve/moemd/*.c)) $(LIB)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB) $(moemd_LDLIBS) $(LDLIBS)

# Unit tests: tests/unit/test_*.c, one program each, kselftest harness.
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(O)/tests/unit/%)
TEST_CPPFLAGS := -Itests/include

$(O)/tests/unit/%: tests/unit/%.c $(LIB)
	$(call msg,TEST,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(TEST_CPPFLAGS) $(CFLAGS) -Wno-sign-compare -Wno-misleading-indentation $(LDFLAGS) -o $@ $< \
		$(LIB) $(unit_LDLIBS) $(LDLIBS)

.PHONY: all deps test test-unit check check-headers check-format check-cppcheck check-patch demo \
	bench clean help tests-build

deps:
	$(Q)scripts/deps.sh --ensure

tests-build: all $(UNIT_BINS)

test-unit: tests-build
	$(Q)MOEM_BUILD=$(O) scripts/run-tests.sh --suite unit --timeout 900 $(UNIT_BINS)

test: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)scripts/run-suites.sh $(MAKE) $(TEST_SUITES)

check: check-format check-cppcheck check-patch check-headers

# Every public header compiles on its own, and the umbrella includes each.
check-headers:
	$(Q)for h in include/moem/*.h; do \
		printf '#include <moem/%s>\n' "$${h##*/}" | \
			$(CC) $(CPPFLAGS) -std=gnu11 -Wall -Werror -fsyntax-only -x c - || exit 1; \
		[ "$$h" = include/moem/moem.h ] || grep -q "^#include \"$${h##*/}\"" include/moem/moem.h || \
			{ echo "include/moem/moem.h does not include $${h##*/}"; exit 1; }; \
	done

check-format:
	$(Q)clang-format --dry-run --Werror $(filter-out %.cu %.cuh,$(CHECK_SRCS))

check-cppcheck:
	$(Q)cppcheck --quiet --error-exitcode=1 --std=c11 --inline-suppr \
		--suppress=missingIncludeSystem --suppress=unusedFunction \
		--suppress=unmatchedSuppression --enable=warning,performance,portability \
		-Iinclude -Iinclude/uapi -D__GNUC__ runtime tools

check-patch:
	$(Q)scripts/checkpatch.sh

demo: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)MOEM_BUILD=$(O) scripts/demo.sh

bench: all $(BENCH_SUITES)

clean:
	$(call msg,CLEAN,$(O))
	$(Q)rm -rf $(O)
	$(Q)if [ -d "$(KDIR)" ]; then $(MAKE) -C $(KDIR) M=$(CURDIR) clean >/dev/null; fi

help:
	@sed -n '3,16p' Makefile | sed 's/^# \{0,1\}//'

-include $(shell find $(O) -name '*.d' 2>/dev/null)
