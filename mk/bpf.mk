# SPDX-License-Identifier: GPL-2.0-only
#
# eBPF tracing (Documentation/tracing.md): the CO-RE programs in bpf/ are
# built with clang -target bpf against a vmlinux.h generated from the
# build machine's BTF, turned into skeletons by `bpftool gen skeleton`
# (all under $(O)/bpf/) and loaded by runtime/observe/bpf/ with libbpf.
#
# Without clang, bpftool, libbpf's headers or kernel BTF, libmoem is built
# without the programs (runtime/observe/bpf/ compiled with -DMOEM_NO_BPF: every
# tracer returns -EOPNOTSUPP and says why) and the BPF tests skip.
#
#   make test-bpf     moem trace record/top against moem run (root; else skip)
#   make bench-trace  decode step time with the tracer attached vs not

BPFTOOL		?= $(shell command -v bpftool 2>/dev/null || ls /usr/sbin/bpftool 2>/dev/null)
VMLINUX_BTF	?= /sys/kernel/btf/vmlinux
BPF_OUT		:= $(O)/bpf
BPF_NAMES	:= $(patsubst bpf/%.bpf.c,%,$(wildcard bpf/*.bpf.c))
BPF_SKELS	:= $(BPF_NAMES:%=$(BPF_OUT)/%.skel.h)

BPF_MISSING	:= $(strip \
	$(if $(shell command -v $(CLANG) 2>/dev/null),,$(CLANG)) \
	$(if $(wildcard $(BPFTOOL)),,bpftool) \
	$(if $(wildcard /usr/include/bpf/libbpf.h),,libbpf-dev) \
	$(if $(wildcard $(VMLINUX_BTF)),,kernel BTF ($(VMLINUX_BTF))))

ifeq ($(BPF_MISSING),)
BPF_ARCH	:= $(patsubst x86_64,x86,$(patsubst aarch64,arm64,$(shell uname -m)))
# clang -target bpf does not search the host's multiarch include directory
# (asm/errno.h); hand it the host compiler's system directories.
BPF_SYS_INC	:= $(shell $(CLANG) -v -E - </dev/null 2>&1 | \
	sed -n '/<...> search starts here:/,/End of search list./{ s| \(/.*\)|-idirafter \1|p }')
BPF_CFLAGS	:= -g -O2 -target bpf -D__TARGET_ARCH_$(BPF_ARCH) -Wall -Wno-unused-function \
		   -I$(BPF_OUT) -Ibpf $(BPF_SYS_INC)

$(BPF_OUT)/vmlinux.h:
	$(call msg,GEN,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(BPFTOOL) btf dump file $(VMLINUX_BTF) format c >$@

$(BPF_OUT)/%.bpf.o: bpf/%.bpf.c bpf/%.h $(BPF_OUT)/vmlinux.h
	$(call msg,BPF,$@)
	$(Q)$(CLANG) $(BPF_CFLAGS) -c -o $@ $<

$(BPF_OUT)/%.skel.h: $(BPF_OUT)/%.bpf.o
	$(call msg,GENSKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name $*_bpf >$@

.SECONDARY: $(BPF_NAMES:%=$(BPF_OUT)/%.bpf.o)

$(O)/runtime/observe/bpf/%.o: CPPFLAGS += -I$(BPF_OUT) -Ibpf
$(O)/runtime/observe/bpf/route.o: $(BPF_OUT)/moem_route.skel.h
$(O)/runtime/observe/bpf/pool.o: $(BPF_OUT)/moem_pool.skel.h
LDLIBS		+= -lbpf -lelf -lz

# The guest test (make test-kmod): the pool tracer watching the kselftest
# programs, static like them (Debian ships libbpf.a, libelf.a and libz.a).
GUEST_EXTRA_BINS += $(O)/kselftest/bpf_pool_watch
$(O)/kselftest/bpf_pool_watch: tests/integration/bpf_pool_watch.c $(GUEST_LIB)
	$(call msg,KSFT,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(KSFT_CFLAGS) -o $@ $< $(GUEST_LIB) -l:libbpf.a -l:libelf.a -l:libz.a \
		-lpthread
else
$(call config_note,BPF tracing not built (missing: $(BPF_MISSING)))
$(O)/runtime/observe/bpf/%.o: CPPFLAGS += -DMOEM_NO_BPF -Ibpf
endif

.PHONY: bpf
bpf: $(BPF_SKELS)

# tests/integration/bpf*.sh against moem run (skip, exit 4, where BPF is
# not permitted); test_bpf (the tracer on the engine in one process) is a
# unit test.
TEST_SUITES	+= test-bpf
.PHONY: test-bpf
test-bpf: all
	$(Q)MOEM_BUILD=$(O) scripts/run-tests.sh --suite bpf --timeout 600 \
		$(wildcard tests/integration/bpf*.sh)

# bench-trace: the tracing overhead (bench/trace/run.sh): decode step time
# with the route tracer and a recorder attached vs not, one engine, one
# model, alternating (bench_trace), and the cost of one probe (bench_probe).
BENCH_TRACE_BINS := $(O)/bench/trace/bench_probe $(O)/bench/trace/bench_trace
BENCH_SUITES	+= bench-trace
.SECONDARY: $(BENCH_TRACE_BINS:%=%.o)

$(O)/bench/trace/%: $(O)/bench/trace/%.o $(LIB)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB) $(LDLIBS)

.PHONY: bench-trace
bench-trace: all $(BENCH_TRACE_BINS)
	$(Q)MOEM=$(O)/bin/moem BIN=$(O)/bench/trace OUT=$(O)/bench/trace DOC=$(DOC) \
		bench/trace/run.sh
