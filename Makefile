# SPDX-License-Identifier: GPL-2.0-only
#
# moem top-level Makefile. Userspace is built here, non-recursively, into
# $(O); moem.ko is built by kbuild (Kbuild, kmod/Kbuild). Areas with their
# own rules (kmod, cuda, bpf, tests, fuzz, bench) live in mk/*.mk and only
# append to the variables below.
#
#   make            libmoem, moem, moemctl, moemd
#   make kmod       kmod/moem.ko for KVER (the running kernel, else Debian's 6.1)
#   make test       every suite that can run here
#   make check      cppcheck, clang-format --dry-run, checkpatch.pl
#   make demo       the quick start: deps, build, main job
#   make bench      benchmarks (CPU; bench-gpu on a GPU machine)
#   make help       every target the documentation names
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

# The kernels (scripts/guest/kernels.sh): KVERS, the newest installed build
# of each series (Debian 12's 6.1 and 6.12), is what `make test-kmod` builds
# and tests, each in turn; KVER is what `make kmod` builds kmod/moem.ko for:
# the running kernel if its headers are installed, else the first of KVERS
# (it says which). Set either on the command line to choose.
MOEM_KERNEL_CACHE ?= /var/cache/moem/kernels
export MOEM_KERNEL_CACHE
ifeq ($(origin KVERS),undefined)
KVERS	:= $(shell scripts/guest/kernels.sh list)
endif
ifeq ($(origin KVER),undefined)
KVER	:= $(shell scripts/guest/kernels.sh default)
endif
ifeq ($(origin KROOT),undefined)
KROOT	:= $(shell scripts/guest/kernels.sh root $(KVER) 2>/dev/null)
endif
KDIR	?= $(KROOT)/usr/src/linux-headers-$(KVER)
KIMAGE	?= $(KROOT)/boot/vmlinuz-$(KVER)
KMODDIR	?= $(KROOT)/lib/modules/$(KVER)
export KVER KDIR KIMAGE KMODDIR

CPPFLAGS := -Iinclude -Iinclude/uapi -D_GNU_SOURCE
CFLAGS	?= -O2 -g
CFLAGS	+= -std=gnu11 -pthread -fPIC -MMD -MP \
	   -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers \
	   -Wformat=2 -Wno-format-truncation -Wshadow=local -Wvla -Werror=implicit-function-declaration \
	   -Werror=incompatible-pointer-types -Werror=return-type
LDFLAGS	?=
LDLIBS	:= -ljson-c -luring -lxxhash -lcrypto -linih -lpcre2-8 -lutf8proc -lm -ldl -lpthread
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

# Static programs for the test guest (mk/kmod.mk, mk/integration.mk,
# mk/bpf.mk) cannot carry the sanitizers' runtime: under SAN=1 they link
# objects and a libmoem built without sanitizers, under $(O)/nosan/
# (GUEST_O, GUEST_LIB); otherwise the normal ones.
ifeq ($(SAN),1)
GUEST_O		:= $(O)/nosan
GUEST_LIB	:= $(O)/nosan/libmoem.a
else
GUEST_O		:= $(O)
GUEST_LIB	:= $(LIB)
endif
guest_objs = $(patsubst %.c,$(GUEST_O)/%.o,$(1))

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

# What mk/*.mk say about optional parts (BPF, CUDA) is for the build that
# will happen: quiet while a goal first installs the dependencies (demo,
# test: the sub-make that builds says it).
comma := ,
QUIET_NOTE_GOALS := demo test deps help clean check check-format check-cppcheck check-patch \
		    check-headers check-symbols
config_note = $(if $(filter $(QUIET_NOTE_GOALS),$(MAKECMDGOALS)),,$(info moem: $(1)))

include $(sort $(wildcard mk/*.mk))

# The build's configuration: compiler and flags, sanitizers, and the
# optional parts mk/*.mk enabled (BPF_MISSING, NVCC). The file changes
# only when that set does, and every object depends on it: objects built
# while BPF (or CUDA) was off are rebuilt when it comes on, and so on.
BUILD_CONFIG	:= $(O)/build-config
BUILD_CONFIG_TEXT := cc=$(CC) san=$(SAN) cflags=$(CFLAGS) cppflags=$(CPPFLAGS) \
	ldflags=$(LDFLAGS) ldlibs=$(LDLIBS) bpf=$(if $(BPF_MISSING),off: $(BPF_MISSING),on) \
	nvcc=$(or $(NVCC),none)
$(shell mkdir -p $(O) && { printf '%s\n' '$(BUILD_CONFIG_TEXT)' | cmp -s - $(BUILD_CONFIG) || \
	printf '%s\n' '$(BUILD_CONFIG_TEXT)' >$(BUILD_CONFIG); })

$(O)/%.o: %.c $(BUILD_CONFIG)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

# An archive keeps the first of two definitions of a symbol silently; a
# relocatable link of every object refuses them, so a clash fails the build.
$(LIB): $(LIB_OBJS) $(LIB_EXTRA_OBJS) $(BUILD_CONFIG)
	$(call msg,AR,$@)
	$(Q)rm -f $@
	$(Q)$(LD) -r -o $(O)/libmoem.check.o $(filter %.o,$^) && rm -f $(O)/libmoem.check.o
	$(Q)$(AR) rcs $@ $(filter %.o,$^)

ifeq ($(SAN),1)
# A make of its own builds them, with every per-directory flag mk/*.mk
# gives (-mavx2 for the AVX2 kernels, ...), SAN=0 and no CUDA kernels
# (the guest has no GPU).
GUEST_PROG_OBJS := $(call guest_objs,$(wildcard runtime/serve/moemd/*.c tools/moemctl/*.c))
.PHONY: nosan-force
$(GUEST_LIB) $(GUEST_PROG_OBJS) &: nosan-force
	$(Q)$(MAKE) --no-print-directory O=$(GUEST_O) SAN=0 NVCC= $(GUEST_LIB) $(GUEST_PROG_OBJS)
endif

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

.PHONY: all deps test test-unit check check-headers check-symbols check-format check-cppcheck check-patch demo \
	bench clean help tests-build

deps:
	$(Q)scripts/deps.sh --ensure

tests-build: all $(UNIT_BINS)

test-unit: tests-build
	$(Q)MOEM_BUILD=$(O) scripts/run-tests.sh --suite unit --timeout 900 $(UNIT_BINS)

test: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)scripts/run-suites.sh $(MAKE) $(TEST_SUITES)

check: check-format check-cppcheck check-patch check-headers check-symbols

# Every public header compiles on its own, and the umbrella includes each.
check-headers:
	$(Q)for h in include/moem/*.h; do \
		printf '#include <moem/%s>\n' "$${h##*/}" | \
			$(CC) $(CPPFLAGS) -std=gnu11 -Wall -Werror -fsyntax-only -x c - || exit 1; \
		[ "$$h" = include/moem/moem.h ] || grep -q "^#include \"$${h##*/}\"" include/moem/moem.h || \
			{ echo "include/moem/moem.h does not include $${h##*/}"; exit 1; }; \
	done

# Every symbol libmoem exports starts with moem_: a program linking it
# keeps its own namespace (_.stapsdt.base is the USDT probes' shared
# semaphore section, which <sys/sdt.h> names).
check-symbols: $(LIB)
	$(Q)bad=$$(nm -g --defined-only $(LIB) | awk '$$2 ~ /^[TDBRCVW]$$/ && $$3 !~ /^moem_/ && $$3 != "_.stapsdt.base" {print $$3}' | sort -u); \
	if [ -n "$$bad" ]; then echo "libmoem exports symbols without the moem_ prefix:" $$bad; exit 1; fi

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

# Every target the documentation names (Documentation/developing.md,
# admin-guide.md, backends.md, tracing.md, the benchmark pages).
define HELP_TEXT
moem: make [TARGET] [V=1] [SAN=1] [O=DIR]

build
  all (default)      libmoem, moem, moemctl, moemd, man pages (help2man)
  kmod               moem.ko against KDIR (W=1 warnings, C=1 sparse); kmod-clean
  bpf, cuda          the eBPF skeletons; the CUDA fatbins (nvcc)
  man                man pages from --help (moem.1, moemctl.1, moemd.8)
  deps               install the Debian packages (scripts/deps.sh)
  clean              remove $$(O) and moem.ko's build
tests
  test               every suite below that can run here, then a summary
  test-unit          unit tests (tests/unit)
  test-valgrind      the control protocol's tests under valgrind
  test-integration   moemd: test-daemon-host, then test-daemon-guest (QEMU)
  test-kmod          moem.ko's kselftests in a QEMU guest; kmod-shell: a shell there
  test-bpf           eBPF tracing against moem run (root)
  test-gpu           GPU parity tests (skip without a GPU); test-gpu-emu on the emulator
  test-fuzz          a short libFuzzer pass; fuzz: FUZZ_SECONDS each; fuzz-build
  check              check-format, check-cppcheck, check-patch, check-headers,
                     check-symbols (every libmoem export starts with moem_)
benchmarks
  bench              every bench-* that runs here
  bench-loader       the io_uring loader against fio
  bench-kernels      CPU kernels; bench-gpu: kernels, tiers on the GPU
  bench-tiers        transfer engine and tokens/s at HBM budgets; bench-tiers-gpu
  bench-sim          the policy matrix through the simulator
  bench-hybrid       hybrid CPU/GPU execution against transfer-only (simulator, moem run)
  bench-hybrid-run   only its moem run tokens/s section
  bench-trace        the tracing overhead
  bench-restart      warm vs cold restart in the guest
other
  demo               the quick start: deps, build, moemd serving a synthetic model
endef
export HELP_TEXT

help:
	@printf '%s\n' "$$HELP_TEXT"

# The debug guest kernel (make test-kmod-debug) is built under $(O) too: not ours.
-include $(shell find $(O) -path $(O)/kernel-debug -prune -o -name '*.d' -type f -print 2>/dev/null)
