# SPDX-License-Identifier: GPL-2.0-only
#
# moemd's integration tests (tests/integration/, kselftest harness).
#
#   make test-integration   on the host: moemd on the userspace pool and the CPU
#                           backend (tests/integration/*_test.c), then in the QEMU
#                           guest with moem.ko: warm restart, the kill -9 loop on a
#                           kmod region, sysfs budget changes (tests/integration/guest/)
#   make test-daemon-host   the host part only (with tests/integration/*_test.sh:
#                           packaging/install.sh, the systemd unit, the example config)
#   make test-daemon-guest  the guest part only
#
#   MOEM_KILL9_ITERS=N      kill -9 iterations on the host (default 100)
#   MOEM_GUEST_KILL9_ITERS=N  ... in the guest (default 30; TCG is slow)
#   make bench-restart      warm/cold restart-to-first-step in the guest on two
#                           packs (BENCH_RESTART_PACKS="L E H I;L E H I", DOC=page)

INTEG_SRCS	:= $(wildcard tests/integration/*_test.c)
INTEG_BINS	:= $(INTEG_SRCS:tests/integration/%.c=$(O)/tests/integration/%)
INTEG_SCRIPTS	:= $(wildcard tests/integration/*_test.sh)
INTEG_HDRS	:= $(wildcard tests/integration/*.h)
GUEST_DMN_SRCS	:= $(wildcard tests/integration/guest/*_test.c)
GUEST_DMN_BINS	:= $(GUEST_DMN_SRCS:tests/integration/guest/%.c=$(O)/guest-daemon/%)
GUEST_DMN_PROGS	:= $(O)/guest-daemon/moemd $(O)/guest-daemon/moemctl
MOEM_KILL9_ITERS	?= 100
MOEM_GUEST_KILL9_ITERS	?= 30

TEST_SUITES	+= test-integration

$(O)/tests/integration/%: tests/integration/%.c $(INTEG_HDRS) $(LIB)
	$(call msg,TEST,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(TEST_CPPFLAGS) $(CFLAGS) -Wno-sign-compare -Wno-misleading-indentation $(LDFLAGS) -o $@ $< \
		$(LIB) $(LDLIBS)

# The fatal-device-error test runs moemd on the CUDA kernel emulator
# (mk/cuda.mk) when this machine can build it.
INTEG_DEPS	:= $(if $(EMU_DIR),$(EMU_DIR)/libcuda.so.1)

.PHONY: test-integration test-daemon-host test-daemon-guest guest-daemon-build

test-daemon-host: all $(INTEG_BINS) $(INTEG_DEPS)
	$(Q)MOEM_BUILD=$(O) MOEM_KILL9_ITERS=$(MOEM_KILL9_ITERS) \
		scripts/run-tests.sh --suite integration --timeout 900 $(INTEG_BINS) $(INTEG_SCRIPTS)

# The guest has no shared libraries: moemd, moemctl and the tests are
# linked statically, without sanitizers (they need their runtime): under
# SAN=1 against GUEST_O's objects and GUEST_LIB (Makefile).
GUEST_CFLAGS	:= $(filter-out -fsanitize=% -fno-sanitize-recover=% -fPIC,$(CFLAGS)) -static \
		   -Wno-sign-compare -Wno-misleading-indentation
GUEST_LDLIBS	:= $(LDLIBS)

# Without the HTTP listener (tests/integration/guest/moemd_nohttp.c says why).
GUEST_MOEMD_OBJS := $(patsubst %.c,$(GUEST_O)/%.o,$(filter-out $(MOEMD_HTTP_SRCS),\
		    $(wildcard runtime/serve/moemd/*.c))) $(O)/guest-daemon/obj/moemd_nohttp.o

$(O)/guest-daemon/obj/moemd_nohttp.o: tests/integration/guest/moemd_nohttp.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) -Iruntime/serve/moemd $(GUEST_CFLAGS) -c -o $@ $<

$(O)/guest-daemon/moemd: $(GUEST_MOEMD_OBJS) $(GUEST_LIB)
	$(call msg,LDSTATIC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(GUEST_CFLAGS) -o $@ $(filter %.o,$^) $(GUEST_LIB) $(GUEST_LDLIBS) 2>$@.ldlog || \
		{ cat $@.ldlog; exit 1; }

$(O)/guest-daemon/moemctl: $(call guest_objs,$(wildcard tools/moemctl/*.c)) $(GUEST_LIB)
	$(call msg,LDSTATIC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(GUEST_CFLAGS) -o $@ $(filter %.o,$^) $(GUEST_LIB) $(GUEST_LDLIBS) 2>$@.ldlog || \
		{ cat $@.ldlog; exit 1; }

$(O)/guest-daemon/%: tests/integration/guest/%.c $(INTEG_HDRS) $(GUEST_LIB)
	$(call msg,TESTSTATIC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(TEST_CPPFLAGS) -Itests/integration $(GUEST_CFLAGS) -o $@ $< \
		$(GUEST_LIB) $(GUEST_LDLIBS) 2>$@.ldlog || { cat $@.ldlog; exit 1; }

guest-daemon-build: $(GUEST_DMN_PROGS) $(GUEST_DMN_BINS) $(O)/bin/moem

# scripts/guest/run.sh exits 77 without qemu or a guest kernel: a skip.
test-daemon-guest: kmod guest-daemon-build
	$(Q)KVER=$(KVER) KIMAGE=$(KIMAGE) MOEM=$(O)/bin/moem \
		MOEM_GUEST_KILL9_ITERS=$(MOEM_GUEST_KILL9_ITERS) \
		tests/integration/guest/run.sh $(O) $(KMOD) $(GUEST_DMN_PROGS) $(GUEST_DMN_BINS); \
		rc=$$?; [ $$rc -eq 77 ] && rc=0; exit $$rc

# The warm-restart measurement (a benchmark, on demand): only
# warm_restart_test, in a guest with room for each pack's region, on the
# test's pack and a larger one (bench/restart/run.sh;
# BENCH_RESTART_PACKS="L E H I;L E H I"). DOC=path writes the page.
BENCH_RESTART_MEM	?= 4096
BENCH_SUITES		+= bench-restart

.PHONY: bench-restart
bench-restart: kmod guest-daemon-build
	$(Q)KVER=$(KVER) KIMAGE=$(KIMAGE) MOEM=$(O)/bin/moem BENCH_RESTART_MEM=$(BENCH_RESTART_MEM) \
		DOC=$(DOC) bench/restart/run.sh $(O) $(KMOD) $(GUEST_DMN_PROGS) \
		$(O)/guest-daemon/warm_restart_test; rc=$$?; [ $$rc -eq 77 ] && rc=0; exit $$rc

# One after the other (never in parallel: the guest's timings would suffer).
test-integration:
	$(Q)rc=0; $(MAKE) --no-print-directory test-daemon-host || rc=1; \
	$(MAKE) --no-print-directory test-daemon-guest || rc=1; exit $$rc
