#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# The GPU bundle (mk/gpu-bundle.mk) is what a GPU machine receives: at most
# 64 MiB, no compiler, none of the build's libraries. With nvcc here
# (make test-gpu-bundle builds the bundle first) this checks
#  - its size against GPU_BUNDLE_MAX and that it holds what run-gpu.sh runs;
#  - its ldd closure: every library a program loads, outside glibc, comes
#    from the bundle (scripts/gpu-bundle-libs.sh --check), and SHA256SUMS;
#  - that it was built for GPU_ARCHS only (BUILD-INFO);
#  - that run-gpu.sh refuses, exit 4 with a summary saying why, without a
#    driver (no libcuda.so.1) and without a device (CUDA_VISIBLE_DEVICES=);
#  - on the kernel emulator (EMU_DIR), run-gpu.sh --smoke end to end: every
#    kind of phase passes and the JSON and Markdown summaries are written;
#    on a real GPU, run-gpu.sh --tests instead.
# Without nvcc it checks the recipe (make -n): SASS for sm_90 only, one
# shared libmoem, DT_RPATH, the library gathering.
set -u
B=${MOEM_BUILD:-build}
GB=${GPU_BUNDLE:-${B%/}-gpu}
max=${GPU_BUNDLE_MAX:-67108864}
fail=0
ok() { echo "ok   $*"; }
bad() {
	echo "FAIL $*"
	fail=1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ -z "${NVCC:-}" ]; then
	echo "# no nvcc here: checking the recipe (make -n gpu-bundle)"
	${MAKE:-make} -n --no-print-directory gpu-bundle O="$B" NVCC=/nonexistent/nvcc \
		GPU_BUNDLE="$tmp/b" >"$tmp/recipe" 2>&1
	for want in "-gencode arch=compute_90,code=sm_90" "-Wl,-soname,libmoem.so" \
		"--disable-new-dtags" "gpu-bundle-libs.sh --copy" "$tmp/b/run-gpu.sh"; do
		if grep -qF -- "$want" "$tmp/recipe"; then ok "recipe has $want"; else bad "recipe lacks $want"; fi
	done
	if grep -qE 'code=(sm|compute)_(80|86|89)' "$tmp/recipe"; then
		bad "recipe builds architectures other than sm_90"
	else
		ok "recipe builds sm_90 only"
	fi
	exit $fail
fi

[ -x "$GB/run-gpu.sh" ] || {
	bad "no bundle at $GB (make gpu-bundle)"
	exit 1
}
size=$(du -sb "$GB" | cut -f1)
if [ "$size" -le "$max" ]; then ok "size $size bytes <= $max"; else bad "size $size bytes > $max"; fi
for f in run-gpu.sh BUILD-INFO scripts/run-tests.sh bin/moem lib/libmoem.so \
	tests/gpu/test_gpu_ops tests/gpu/test_gpu_fatal tests/gpu/dump_ops \
	tests/gpu/engine_same_outputs.sh tests/gpu/decode_same_tokens.sh tests/gpu/torch_check.py \
	tests/gpu/sync_per_step.sh tests/gpu/graph_steps.sh \
	bench/kernels/bench_kernels bench/kernels/torch_ffn.py bench/tiers/bench_tiers \
	bench/tiers/tokens.sh bench/tiers/bench_uvm bench/tiers/uvm.sh bench/tiers/sync_step.sh \
	tests/gpu/test_gpu_driver tests/gpu/test_gpu_tierdev; do
	[ -e "$GB/$f" ] || bad "the bundle lacks $f"
done
if scripts/gpu-bundle-libs.sh --check "$GB" >"$tmp/libs" 2>&1; then
	ok "ldd closure: only glibc from the system ($(ls "$GB/lib" | tr '\n' ' '))"
else
	bad "ldd closure:"
	sed 's/^/     /' "$tmp/libs"
fi
if (cd "$GB" && sha256sum --quiet -c SHA256SUMS) >"$tmp/sums" 2>&1; then
	ok "SHA256SUMS"
else
	bad "SHA256SUMS: $(head -3 "$tmp/sums")"
fi
archs=$(sed -n 's/^archs: *//p' "$GB/BUILD-INFO")
want_archs="SASS $(for a in ${GPU_ARCHS:-90}; do printf 'sm_%s ' "$a"; done)"
if [ "$archs" = "${want_archs% }" ]; then ok "built for $archs"; else bad "built for '$archs', want '${want_archs% }'"; fi

# refused: 4, a summary that says why, nothing run
refused() { # what, then the environment to run in
	local what=$1 rc
	shift
	rm -rf "$tmp/r"
	env "$@" "$GB/run-gpu.sh" "$tmp/r" >"$tmp/r.log" 2>&1
	rc=$?
	if [ $rc -eq 4 ] && grep -q '"status":"refused"' "$tmp/r/summary.json" &&
		grep -q 'no usable GPU or driver' "$tmp/r/summary.json" && [ ! -e "$tmp/r/logs/gpu_ops.log" ]; then
		ok "run-gpu.sh refuses $what: $(head -c 150 "$tmp/r.log")"
	else
		bad "run-gpu.sh $what: exit $rc: $(cat "$tmp/r.log")"
	fi
}
real_gpu=0
if "$GB/bin/moem" backend --backend cuda >/dev/null 2>&1 && [ -z "${MOEM_GPU_EMU:-}" ]; then
	real_gpu=1
else
	refused "without a driver" LD_LIBRARY_PATH="$tmp/none"
fi
if [ -n "${EMU_DIR:-}" ] && [ $real_gpu = 0 ]; then
	refused "without a device (emulator, CUDA_VISIBLE_DEVICES=)" \
		LD_LIBRARY_PATH="$EMU_DIR" MOEM_GPU_EMU=1 CUDA_VISIBLE_DEVICES=
	out=$tmp/smoke
	LD_LIBRARY_PATH="$EMU_DIR" MOEM_GPU_EMU=1 "$GB/run-gpu.sh" --smoke "$out" >"$tmp/smoke.log" 2>&1
	rc=$?
	sed 's/^/     /' "$tmp/smoke.log"
	if [ $rc -eq 0 ] && grep -q '"status":"pass"' "$out/summary.json"; then
		ok "run-gpu.sh --smoke on the kernel emulator"
	else
		bad "run-gpu.sh --smoke on the kernel emulator: exit $rc"
	fi
	for p in gpu_ops gpu_fatal test_gpu_driver test_gpu_tierdev bench_kernels ffn_rt4 uvm_vs_vmm; do
		grep -q "{\"name\":\"$p\",\"status\":\"pass\"" "$out/summary.json" || bad "phase $p did not pass"
	done
	grep -q '^ffn_bf16_B1_gbps ' "$out/results.txt" || bad "no FFN result in results.txt"
	grep -q '^| gpu_ops | pass |' "$out/summary.md" || bad "summary.md lacks the phase table"
	# everything in one file, for tools that bring back few files
	tar tzf "$out/run.tar.gz" 2>/dev/null | grep -q 'logs/gpu_ops.log' &&
		tar tzf "$out/run.tar.gz" | grep -q 'summary.json' &&
		! tar tzf "$out/run.tar.gz" | grep -q '^\./work/' ||
		bad "run.tar.gz lacks the logs or summary, or holds work/"
	# the scratch models are gone: OUTDIR is what a device tool brings back
	[ ! -e "$out/work" ] || bad "run-gpu.sh left its scratch models in OUTDIR/work"
	grep -q '^ffn_q4_B1_rt4_gbps ' "$out/results.txt" || bad "no --ffn-rt 4 result in results.txt"
	# the JSON parses (python3 here, not on the GPU machine)
	if command -v python3 >/dev/null 2>&1; then
		python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$out/summary.json" ||
			bad "summary.json is not JSON"
	fi
elif [ $real_gpu = 1 ]; then
	"$GB/run-gpu.sh" --tests "$B/gpu-results" || bad "run-gpu.sh --tests on this GPU"
fi
exit $fail
