# SPDX-License-Identifier: GPL-2.0-only
#
# The GPU test bundle: one folder that a GPU machine without a compiler,
# make or the build's libraries can run (Documentation/developing.md,
# "Testing on a GPU machine").
#
#   make gpu-bundle         build it into GPU_BUNDLE (default $(O)-gpu, i.e.
#                           build-gpu/): a second build in $(O)/gpu-obj with
#                           SASS for GPU_ARCHS only (default 90: H100/H200),
#                           libmoem as one shared library, the programs, the
#                           GPU test and bench programs and scripts, every
#                           shared library outside glibc they load, stripped;
#                           refused above GPU_BUNDLE_MAX bytes (64 MiB)
#   make test-gpu-bundle    build it, check its size and ldd closure, check that
#                           run-gpu.sh refuses without a GPU, and (x86-64) run
#                           it end to end on the kernel emulator (--smoke)
#   make test-gpu           GPU_BUNDLE/run-gpu.sh --tests  (nothing is rebuilt)
#   make bench-gpu          GPU_BUNDLE/run-gpu.sh --bench  (nothing is rebuilt)
#
# On the GPU machine: GPU_BUNDLE/run-gpu.sh OUTDIR (summary.json, summary.md).

GPU_ARCHS	?= 90
GPU_PTX		?=
GPU_BUNDLE	?= $(patsubst %/,%,$(O))-gpu
GPU_BUNDLE_MAX	?= 67108864
GPU_RESULTS	?= $(O)/gpu-results
GPU_BUNDLE_O	:= $(O)/gpu-obj

.PHONY: gpu-bundle gpu-bundle-stage test-gpu-bundle test-gpu bench-gpu clean-gpu-bundle
TEST_SUITES	+= test-gpu-bundle

ifneq ($(MOEM_GPU_BUNDLE_STAGE),1)
# The outer make: a second build with its own objects, so the everyday
# build keeps every architecture and the static library.
gpu-bundle:
	$(Q)if [ -z "$(NVCC)" ]; then \
		echo "gpu-bundle: nvcc not found (PATH, /usr/local/cuda/bin): a bundle without" \
		     "kernels would be useless on a GPU"; exit 1; fi
	$(Q)$(MAKE) --no-print-directory MOEM_GPU_BUNDLE_STAGE=1 O=$(GPU_BUNDLE_O) \
		CUDA_ARCHS='$(GPU_ARCHS)' CUDA_PTX='$(GPU_PTX)' SAN=0 \
		GPU_BUNDLE='$(abspath $(GPU_BUNDLE))' gpu-bundle-stage

clean-gpu-bundle:
	$(Q)rm -rf $(GPU_BUNDLE)
clean: clean-gpu-bundle

# Without nvcc the recipe is checked instead of built (tests/gpu/bundle_check.sh).
test-gpu-bundle: $(if $(NVCC),gpu-bundle) $(if $(EMU_DIR),$(EMU_DIR)/libcuda.so.1)
	$(Q)MOEM_BUILD=$(O) GPU_BUNDLE=$(GPU_BUNDLE) GPU_BUNDLE_MAX=$(GPU_BUNDLE_MAX) \
		EMU_DIR=$(EMU_DIR) NVCC=$(NVCC) MAKE='$(MAKE)' \
		scripts/run-tests.sh --suite gpu-bundle --timeout 600 tests/gpu/bundle_check.sh

# Nothing here depends on `all`: on a GPU machine, which has the bundle but
# neither a compiler nor the build's libraries, nothing must be rebuilt.
test-gpu bench-gpu:
	$(Q)if [ ! -x $(GPU_BUNDLE)/run-gpu.sh ]; then \
		echo "$@: no GPU bundle at $(GPU_BUNDLE): run 'make gpu-bundle' first" \
		     "(on any machine with nvcc; it needs no GPU)"; exit 1; fi
	$(Q)$(GPU_BUNDLE)/run-gpu.sh $(if $(filter test-gpu,$@),--tests,--bench) $(GPU_RESULTS); \
	rc=$$?; [ $$rc -eq 4 ] && exit 0; exit $$rc
else
# ---- the inner make (O = $(GPU_BUNDLE_O)) ----------------------------------
GB		:= $(GPU_BUNDLE)
GB_LIB		:= $(GB)/lib/libmoem.so
# Programs built straight from one source: no dependency file in the bundle.
GB_CFLAGS	:= $(filter-out -MMD -MP,$(CFLAGS))
# DT_RPATH, not DT_RUNPATH: it also serves the libraries' own dependencies
# (libbpf's libelf, ...), which RUNPATH would leave to the system.
# Stripped at link time (-s): stripping in place would make every file
# newer than its sources, and nothing would be rebuilt again.
gb_rpath	= -s -Wl,--disable-new-dtags,-rpath,'$$ORIGIN/$(1)'
GB_TOOLS	:= $(TOOL_DIRS:%=$(GB)/bin/%) $(if $(wildcard runtime/serve/moemd/*.c),$(GB)/bin/moemd)
GB_TESTS	:= $(patsubst tests/gpu/%.c,$(GB)/tests/gpu/%,$(wildcard tests/gpu/test_*.c) \
		   tests/gpu/dump_ops.c)
GB_BENCH	:= $(GB)/bench/kernels/bench_kernels $(GB)/bench/tiers/bench_tiers \
		   $(GB)/bench/tiers/bench_uvm
# CUPTI, for the UVM bench's page-fault and migration counters (dlopen()ed;
# the GPU machine may have no toolkit).
GB_CUPTI	:= $(if $(CUPTI_LIB),$(GB)/lib/$(notdir $(CUPTI_LIB)))
# Scripts, at the same paths relative to the bundle as to the tree, so
# that MOEM_BUILD=<bundle> finds the programs where the scripts look.
GB_SCRIPTS	:= $(GB)/run-gpu.sh $(GB)/scripts/run-tests.sh \
		   $(patsubst %,$(GB)/%,$(filter-out tests/gpu/bundle_check.sh, \
		   $(wildcard tests/gpu/*.sh tests/gpu/*.py)) \
		   $(wildcard bench/kernels/*.py bench/kernels/*.sh bench/tiers/*.sh) \
		   bench/decode/gpu.sh bench/decode/model.sh \
		   bench/decode/torch_decode.py bench/sim/hybrid_run.sh)

$(GB_LIB): $(LIB)
	$(call msg,SO,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -shared -Wl,-soname,libmoem.so $(call gb_rpath,) -o $@ \
		-Wl,--whole-archive $(LIB) -Wl,--no-whole-archive $(LDLIBS)

define gb_tool_rule
$(GB)/bin/$(1): $(patsubst %.c,$(O)/%.o,$(wildcard tools/$(1)/*.c)) $(GB_LIB)
	$$(call msg,LD,$$@)
	$$(Q)mkdir -p $$(@D)
	$$(Q)$$(CC) $$(CFLAGS) $$(LDFLAGS) $$(call gb_rpath,../lib) -o $$@ $$(filter %.o,$$^) \
		$(GB_LIB) $$($(1)_LDLIBS) -Wl,--as-needed $$(LDLIBS)
endef
$(foreach p,$(TOOL_DIRS),$(eval $(call gb_tool_rule,$(p))))

$(GB)/bin/moemd: $(patsubst %.c,$(O)/%.o,$(wildcard runtime/serve/moemd/*.c)) $(GB_LIB)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $(call gb_rpath,../lib) -o $@ $(filter %.o,$^) $(GB_LIB) \
		$(moemd_LDLIBS) -Wl,--as-needed $(LDLIBS)

$(GB)/tests/gpu/%: tests/gpu/%.c $(wildcard tests/gpu/*.h tests/unit/*.h) $(GB_LIB)
	$(call msg,TEST,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(TEST_CPPFLAGS) $(GB_CFLAGS) -Wno-sign-compare $(LDFLAGS) \
		$(call gb_rpath,../../lib) -o $@ $< $(GB_LIB) -Wl,--as-needed $(LDLIBS)

$(GB)/bench/kernels/bench_kernels: bench/kernels/bench_kernels.c $(wildcard tests/unit/*.h) $(GB_LIB)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(GB_CFLAGS) $(LDFLAGS) $(call gb_rpath,../../lib) -o $@ $< $(GB_LIB) \
		-Wl,--as-needed $(LDLIBS)

$(GB)/bench/tiers/bench_tiers: $(O)/bench/tiers/bench_tiers.o $(GB_LIB)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $(call gb_rpath,../../lib) -o $@ $< $(GB_LIB) \
		-Wl,--as-needed $(LDLIBS)

$(GB)/bench/tiers/bench_uvm: bench/tiers/bench_uvm.c $(GB_LIB)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(BENCH_UVM_CPPFLAGS) $(GB_CFLAGS) $(LDFLAGS) \
		$(call gb_rpath,../../lib) -o $@ $< $(GB_LIB) -Wl,--as-needed $(LDLIBS)

$(GB_CUPTI): $(CUPTI_LIB)
	$(Q)mkdir -p $(@D) && cp -L $< $@ && chmod 0644 $@

$(GB)/run-gpu.sh: scripts/run-gpu.sh
	$(Q)mkdir -p $(@D) && cp $< $@
$(GB)/scripts/%: scripts/%
	$(Q)mkdir -p $(@D) && cp $< $@
$(GB)/tests/gpu/%: tests/gpu/%
	$(Q)mkdir -p $(@D) && cp $< $@
$(GB)/bench/%: bench/%
	$(Q)mkdir -p $(@D) && cp $< $@

# Gather the libraries, write what was built, check the size.
gpu-bundle-stage: $(GB_LIB) $(GB_TOOLS) $(GB_TESTS) $(GB_BENCH) $(GB_SCRIPTS) $(GB_CUPTI)
	$(call msg,BUNDLE,$(GB))
	$(Q)scripts/gpu-bundle-libs.sh --copy $(GB)
	$(Q){ echo "moem GPU bundle"; \
	  echo "commit:  $$(git describe --always --dirty 2>/dev/null || echo unknown)"; \
	  echo "built:   $$(date -u +%Y-%m-%dT%H:%M:%SZ) on $$(uname -n) ($$(uname -m))"; \
	  echo "nvcc:    $$($(NVCC) --version | tail -1)"; \
	  echo "archs:   SASS $(foreach a,$(CUDA_ARCHS),sm_$(a))$(if $(CUDA_PTX), PTX $(foreach a,$(CUDA_PTX),compute_$(a)))"; \
	  echo "cuda:    $(notdir $(CUDA_SRCS))"; \
	} > $(GB)/BUILD-INFO
	$(Q)cd $(GB) && find . -type f ! -name SHA256SUMS -print | LC_ALL=C sort | \
		xargs sha256sum > SHA256SUMS
	$(Q)sz=$$(du -sb $(GB) | cut -f1); \
	echo "  bundle   $(GB): $$((sz / 1048576)) MiB ($$sz bytes, limit $(GPU_BUNDLE_MAX))"; \
	[ $$sz -le $(GPU_BUNDLE_MAX) ] || { echo "gpu-bundle: $$sz bytes is over the limit" \
		"of $(GPU_BUNDLE_MAX)"; exit 1; }
endif
