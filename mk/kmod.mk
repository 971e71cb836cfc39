# SPDX-License-Identifier: GPL-2.0-only
#
# moem.ko and its QEMU-guest test suite.
#   make kmod         build kmod/moem.ko against $(KDIR) (W=1: extra warnings,
#                     C=1: sparse, if installed)
#   make test-kmod    boot $(KIMAGE) under qemu -accel tcg and run tests/kselftest
#   make kmod-shell   the same guest with moem.ko loaded and a shell on the console

KMOD	:= kmod/moem.ko
KSFT_SRCS := $(wildcard tests/kselftest/*.c)
KSFT_BINS := $(KSFT_SRCS:tests/kselftest/%.c=$(O)/kselftest/%)
# The guest has no shared libraries: link everything statically, libmoem
# and liburing included. Sanitizers need their runtime, so never here.
KSFT_CFLAGS := $(filter-out -fsanitize=% -fno-sanitize-recover=% -fPIC,$(CFLAGS)) -static \
	-Wno-sign-compare -Wno-misleading-indentation
KSFT_LDLIBS := -luring -lpthread

TEST_SUITES += test-kmod

.PHONY: kmod kmod-clean test-kmod kselftest-build kmod-shell

# kbuild must not see this Makefile's command-line O= (its own O= means
# something else), so drop command-line variables from what it inherits.
kmod:
	$(Q)$(MAKE) -C $(KDIR) M=$(CURDIR) MAKEOVERRIDES= O= $(if $(W),W=$(W)) $(if $(C),C=$(C)) \
		modules

kmod-clean:
	$(Q)$(MAKE) -C $(KDIR) M=$(CURDIR) MAKEOVERRIDES= O= clean

$(O)/kselftest/%: tests/kselftest/%.c tests/kselftest/moem_test.h $(GUEST_LIB)
	$(call msg,KSFT,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(TEST_CPPFLAGS) $(KSFT_CFLAGS) -o $@ $< $(GUEST_LIB) $(KSFT_LDLIBS)

kselftest-build: $(KSFT_BINS)

# run.sh exits 77 when qemu or the guest kernel is missing: a skip, not a
# failure of `make test` (it says why).
# GUEST_EXTRA_BINS: helpers other areas put in the guest (mk/bpf.mk).
test-kmod: kmod kselftest-build $(GUEST_EXTRA_BINS)
	$(Q)KVER=$(KVER) KIMAGE=$(KIMAGE) scripts/guest/run.sh --work $(O)/guest --ko $(KMOD) \
		$(KSFT_BINS) $(GUEST_EXTRA_BINS); rc=$$?; [ $$rc -eq 77 ] && rc=0; exit $$rc

kmod-shell: kmod kselftest-build $(GUEST_EXTRA_BINS)
	$(Q)KVER=$(KVER) KIMAGE=$(KIMAGE) scripts/guest/run.sh --work $(O)/guest --ko $(KMOD) \
		--shell $(KSFT_BINS) $(GUEST_EXTRA_BINS)
