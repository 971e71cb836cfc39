# SPDX-License-Identifier: GPL-2.0-only
#
# moem.ko and its QEMU-guest test suite, on every kernel of the matrix.
#   make kmod             kmod/moem.ko for KVER (the running kernel, else Debian's
#                         6.1; it says which) against KDIR (W=1: extra warnings,
#                         C=1: sparse, if installed)
#   make kmod-all         $(O)/kmod/VER/moem.ko for every VER in KVERS (Debian 12's
#                         6.1 and 6.12), warnings as errors
#   make test-kmod        the guest suite under qemu -accel tcg, on each kernel of
#                         KVERS in turn, with a result line for each
#   make test-numa        the NUMA guest alone (two nodes, and one without memory;
#                         make test-kmod runs it too)
#   make test-kmod-debug  the suite on a debug build of 6.12 (KASAN, lockdep,
#                         kmemleak, ...) made once into $(O)/kernel-debug; long,
#                         not part of `make test`
#   make kmod-shell       the KVER guest with moem.ko loaded and a shell on the console

KMOD	:= kmod/moem.ko
KSFT_SRCS := $(wildcard tests/kselftest/*.c)
KSFT_BINS := $(KSFT_SRCS:tests/kselftest/%.c=$(O)/kselftest/%)
KSFT_HDRS := $(wildcard tests/kselftest/*.h)
# The guest has no shared libraries: link everything statically, libmoem
# and liburing included. Sanitizers need their runtime, so never here.
KSFT_CFLAGS := $(filter-out -fsanitize=% -fno-sanitize-recover=% -fPIC,$(CFLAGS)) -static \
	-Wno-sign-compare -Wno-misleading-indentation
KSFT_LDLIBS := -luring -lnuma -lpthread
KMOD_SRCS := Kbuild kmod/Kbuild $(wildcard kmod/*.c kmod/*.h) $(wildcard include/uapi/linux/moem*.h)
KMOD_ALL := $(foreach v,$(KVERS),$(O)/kmod/$(v)/moem.ko)
KDEBUG	:= $(O)/kernel-debug

TEST_SUITES += test-kmod

.PHONY: kmod kmod-all kmod-clean test-kmod test-numa test-kmod-debug kselftest-build kmod-shell

# kbuild must not see this Makefile's command-line O= (its own O= means
# something else), so drop command-line variables from what it inherits.
kmod:
	@echo "  KMOD     $(KMOD) for $(KVER) ($(KDIR))"
	$(Q)$(MAKE) -C $(KDIR) M=$(CURDIR) MAKEOVERRIDES= O= $(if $(W),W=$(W)) $(if $(C),C=$(C)) \
		modules

kmod-clean:
	$(Q)$(MAKE) -C $(KDIR) M=$(CURDIR) MAKEOVERRIDES= O= clean

# One copy of the sources per kernel: kbuild writes objects next to them.
$(O)/kmod/%/moem.ko: $(KMOD_SRCS) scripts/guest/build-kmod.sh
	$(call msg,KMOD,$@)
	$(Q)root=$$(scripts/guest/kernels.sh root $*) && \
		scripts/guest/build-kmod.sh $$root/usr/src/linux-headers-$* $(@D)

kmod-all: $(KMOD_ALL)

$(O)/kselftest/%: tests/kselftest/%.c $(KSFT_HDRS) $(GUEST_LIB)
	$(call msg,KSFT,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(TEST_CPPFLAGS) $(KSFT_CFLAGS) -o $@ $< $(GUEST_LIB) $(KSFT_LDLIBS)

# numa_test runs the engine: all of libmoem's libraries, static.
$(O)/kselftest/numa_test: KSFT_LDLIBS = $(LDLIBS)

kselftest-build: $(KSFT_BINS)

# test-kernels.sh exits 77 when qemu or every guest kernel is missing: a
# skip, not a failure of `make test` (it says why).
# GUEST_EXTRA_BINS: helpers other areas put in the guest (mk/bpf.mk).
# Then the NUMA guest (make test-numa), after it: never two TCG guests at once.
test-kmod: $(KMOD_ALL) kselftest-build $(GUEST_EXTRA_BINS)
	$(Q)scripts/guest/test-kernels.sh $(O) "$(KVERS)" $(KSFT_BINS) $(GUEST_EXTRA_BINS); \
		rc=$$?; [ $$rc -eq 77 ] && rc=0; \
		scripts/guest/test-kernels.sh --numa $(O) "$(KVERS)" $(NUMA_BINS); \
		rn=$$?; [ $$rn -eq 77 ] && rn=0; [ $$rc -eq 0 ] && [ $$rn -eq 0 ]

# The DRAM pool and tier on a guest with two NUMA nodes (QEMU's emulated
# NUMA), on each kernel: tests/kselftest/numa_test.c as root and as a user.
NUMA_BINS := $(O)/kselftest/numa_test $(O)/kselftest/moem_asuser
test-numa: $(KMOD_ALL) $(NUMA_BINS)
	$(Q)scripts/guest/test-kernels.sh --numa $(O) "$(KVERS)" $(NUMA_BINS); \
		rc=$$?; [ $$rc -eq 77 ] && rc=0; exit $$rc

# The debug kernel: built once (scripts/guest/debug-kernel.sh says how long),
# then moem.ko against it and the whole suite with kmemleak scans.
test-kmod-debug: kselftest-build $(GUEST_EXTRA_BINS)
	$(Q)scripts/deps.sh --ensure --debug-kernel
	$(Q)scripts/guest/debug-kernel.sh $(KDEBUG)
	$(Q)scripts/guest/build-kmod.sh $(KDEBUG)/obj $(O)/kmod/debug
	$(Q)scripts/guest/run.sh --debug --work $(O)/guest/debug --kver debug \
		--kimage $(KDEBUG)/obj/arch/x86/boot/bzImage --moddir $(KDEBUG)/obj \
		--ko $(O)/kmod/debug/moem.ko --timeout 7200 --mem 3072 $(KSFT_BINS) $(GUEST_EXTRA_BINS)

kmod-shell: kmod kselftest-build $(GUEST_EXTRA_BINS)
	$(Q)scripts/guest/run.sh --work $(O)/guest/shell --ko $(KMOD) \
		--shell $(KSFT_BINS) $(GUEST_EXTRA_BINS)

# What Linux 6.1 costs the loader: plain O_DIRECT io_uring reads into
# region-shaped memory (pinned per request) against fixed buffers, with
# fio's fixed-buffer read as the peer (bench/kmod/).
BENCH_SUITES += bench-kmod-pin
.PHONY: bench-kmod-pin
$(O)/bench/kmod/pin-cost: bench/kmod/pin_cost.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< -luring

bench-kmod-pin: $(O)/bench/kmod/pin-cost
	$(Q)DOC=$(DOC) bench/kmod/pin_cost.sh $(O)/bench/kmod/pin-cost --dir $(O)/bench
