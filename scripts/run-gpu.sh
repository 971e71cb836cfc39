#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# moem on a GPU machine, from the folder `make gpu-bundle` writes: needs
# bash, coreutils and awk, not make, a compiler or the build's libraries
# (they are in lib/). Documentation/developing.md, "Testing on a GPU
# machine", has the procedure.
#
#   run-gpu.sh [--tests | --bench | --all | --profile] [--budget S] [--kernels L] [--smoke] OUTDIR
#
#   --tests    GPU unit and parity tests (every op against the CPU backend),
#              the fatal-error test, the engine on the GPU (budgets, host
#              synchronisations per step, CUDA graphs of decode steps,
#              GPU against CPU, moemd's HBM share with the KV pool on top),
#              the PyTorch
#              check, compute-sanitizer memcheck and racecheck when the
#              toolkit is installed
#   --bench    kernel benchmarks (FFN weight bytes/s against the device's
#              copy bandwidth, and against PyTorch's bf16 grouped matmul when
#              torch is installed), tier benchmarks, UVM against VMM staging
#              at one HBM budget (page faults and bytes through CUPTI),
#              the decode step with and without CUDA graphs (sync_step),
#              the FFN of 1..16 tokens under each row tiling (ffn_rt*),
#              decode tokens/s at batch 1 and 8, all-resident and 25% HBM,
#              against PyTorch's eager decode of the same model (decode_bench),
#              hybrid CPU/GPU experts against transfer-only at 25% HBM
#              (hybrid_run, OUTDIR/hybrid.md; hybrid_run_4x128 on 4 x 128
#              experts, OUTDIR/hybrid-4x128/hybrid.md)
#   --all      both, interleaved so the most telling run first (default)
#   --profile  Nsight Compute (ncu, when the toolkit has it) on one launch
#              of each of a few kernels inside bench_kernels: speed of
#              light, occupancy and its limiters, scheduler statistics,
#              warp stall reasons with their sampled counts (the logs
#              ncu_*.log); not part of --all
#   --budget S start no phase after S seconds (default 510: the whole run
#              ends inside 9 minutes on one H100); phases left out say so
#   --kernels L  --profile only the kernels of the comma list L (names as in
#              the ncu_* phases, e.g. ffn_gateup_q4_n1,route)
#   --phases L run only the phases of the comma list L (names as in the
#              summary, e.g. gpu_ops,bench_kernels,torch_ffn): the others
#              are listed as skipped
#   --smoke    a few seconds of each kind of phase (the kernel emulator runs
#              this, tests/gpu/bundle_check.sh)
#
# Scratch models go under OUTDIR/work and are removed at the end
# (MOEM_GPU_KEEP_WORK=1 keeps them).
# Writes OUTDIR/summary.json and OUTDIR/summary.md (device, driver, what ran,
# pass/fail/skip and seconds per phase, every benchmark number, the targets),
# OUTDIR/results.txt (the RESULT key=value lines), OUTDIR/logs/ and
# OUTDIR/run.tar.gz (all of these in one file).
# Exit: 0 every phase passed or skipped, 1 one failed or ran out of time,
# 2 usage, 3 the bundle's programs do not load on this machine, 4 no usable
# GPU or driver (nothing was run; the summary says why).
set -u
here=$(cd "$(dirname "$0")" && pwd)
mode=all budget=510 smoke=0 out= kernels= phases=
while [ $# -gt 0 ]; do
	case "$1" in
	--tests) mode=tests ;;
	--bench) mode=bench ;;
	--all) mode=all ;;
	--profile) mode=profile ;;
	--smoke) smoke=1 ;;
	--budget)
		budget=${2:-}
		shift
		;;
	--kernels)
		kernels=${2:-}
		shift
		;;
	--phases)
		phases=${2:-}
		shift
		;;
	-h | --help)
		sed -n '2,/^set -u/p' "$0" | sed -e '/^set -u/d' -e 's/^# \{0,1\}//'
		exit 0
		;;
	-*)
		echo "run-gpu.sh: unknown option $1" >&2
		exit 2
		;;
	*) out=$1 ;;
	esac
	shift
done
case "$budget" in '' | *[!0-9]*)
	echo "run-gpu.sh: --budget wants seconds" >&2
	exit 2
	;;
esac
if [ -z "$out" ]; then
	echo "usage: run-gpu.sh [--tests|--bench|--all|--profile] [--budget S] [--kernels L] [--smoke] OUTDIR" >&2
	exit 2
fi
mkdir -p "$out/logs" || exit 2
out=$(cd "$out" && pwd)
export MOEM_BUILD=$here
export MOEM_BENCH_DIR=$out/work
mkdir -p "$MOEM_BENCH_DIR"
moem=$here/bin/moem
start=$(date +%s)
date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)

json_str() {
	printf '"%s"' "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | tr '\n\t' '  ')"
}

bundle_info=$(sed -n 's/^commit: *//p' "$here/BUILD-INFO" 2>/dev/null)
archs=$(sed -n 's/^archs: *//p' "$here/BUILD-INFO" 2>/dev/null)

refuse() { # code why
	{
		printf '{"status":"refused","date":%s,"why":%s,"bundle":%s}\n' "$(json_str "$date_utc")" \
			"$(json_str "$2")" "$(json_str "$bundle_info")"
	} >"$out/summary.json"
	printf '# moem GPU run: refused\n\n%s\n' "$2" >"$out/summary.md"
	echo "run-gpu.sh: $2" >&2
	exit "$1"
}

# ---- preflight: the bundle loads, a GPU and its driver answer --------------
if ! "$moem" --help >/dev/null 2>"$out/logs/preflight.log"; then
	ldd "$moem" >>"$out/logs/preflight.log" 2>&1
	refuse 3 "the bundle's programs do not load on this machine (glibc older than the build's?): $(grep -m3 -E 'not found|error' "$out/logs/preflight.log" | tr '\n' ' ')"
fi
if ! why=$("$moem" backend --backend cuda 2>&1); then
	refuse 4 "no usable GPU or driver here, nothing was run: $why"
fi
echo "$why" >"$out/logs/device.log"
device=$(sed -n 's/^ *device: *//p' "$out/logs/device.log" | head -1)
driver=$(sed -n 's/^ *driver: *//p' "$out/logs/device.log" | head -1)
smi=
if command -v nvidia-smi >/dev/null 2>&1; then
	smi=$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory,pcie.link.gen.max \
		--format=csv,noheader 2>/dev/null | head -1)
fi
torch=none
if command -v python3 >/dev/null 2>&1; then
	torch=$(python3 -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "no-cuda")' 2>/dev/null || echo none)
fi
cs=$(command -v compute-sanitizer 2>/dev/null || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
echo "run-gpu.sh: $device (driver $driver)${smi:+; nvidia-smi: $smi}"
echo "run-gpu.sh: bundle $bundle_info ($archs); torch: $torch; compute-sanitizer: ${cs:-none}"
echo "run-gpu.sh: mode $mode, budget ${budget}s, results in $out"

# ---- phases -----------------------------------------------------------------
PH_NAME=() PH_STATUS=() PH_SECS=() PH_NOTE=()

# phase NAME LIMIT_SECONDS CMD...: run CMD with a timeout inside the budget.
phase() {
	local name=$1 limit=$2 left rc t0 secs status note=
	shift 2
	left=$((budget - ($(date +%s) - start) - 5))
	if [ -n "$phases" ] && case ",$phases," in *",$name,"*) false ;; *) true ;; esac then
		status=skip note="not on --phases"
		secs=0
	elif [ "$left" -lt 15 ]; then
		status=not-run note="out of time (budget ${budget}s)"
		secs=0
	else
		[ "$limit" -gt "$left" ] && limit=$left
		t0=$(date +%s%N)
		timeout -k 10 "$limit" "$@" >"$out/logs/$name.log" 2>&1
		rc=$?
		secs=$((($(date +%s%N) - t0) / 1000000))
		secs=$((secs / 1000)).$(((secs % 1000) / 100))
		case $rc in
		0) status=pass ;;
		4 | 77)
			status=skip
			note=$(grep -m1 -iE 'skip' "$out/logs/$name.log" | cut -c1-160)
			;;
		124 | 137)
			status=timeout
			note="stopped after ${limit}s"
			;;
		*)
			status=fail
			note="exit $rc"
			;;
		esac
	fi
	PH_NAME+=("$name") PH_STATUS+=("$status") PH_SECS+=("$secs") PH_NOTE+=("$note")
	printf '  %-8s %-22s %6ss  %s\n' "$(echo "$status" | tr a-z A-Z)" "$name" "$secs" "$note"
	case $status in fail | timeout) tail -n 25 "$out/logs/$name.log" | sed 's/^/        | /' ;; esac
}

# skipped NAME WHY: a phase that cannot run here.
skipped() {
	PH_NAME+=("$1") PH_STATUS+=(skip) PH_SECS+=(0) PH_NOTE+=("$2")
	printf '  %-8s %-22s %6ss  %s\n' SKIP "$1" 0 "$2"
}

T=$here/tests/gpu
K=$here/bench/kernels
R=$here/bench/tiers
want() { [ "$1" != profile ] && [ "$mode" = all ] || [ "$mode" = "$1" ]; }

# want_kernel K: --profile's kernel K is on the --kernels list (or no list).
want_kernel() { [ -z "$kernels" ] || case ",$kernels," in *",$1,"*) true ;; *) false ;; esac; }

have_torch() { [ "${torch%% *}" != none ] && [ "${torch##* }" = cuda ]; }
no_torch="python3 with a CUDA-enabled torch is not installed here ($torch)"

if [ "$smoke" = 1 ]; then
	# The kernel emulator is a thousand times slower than a GPU: one quick
	# case of each kind, to prove the bundle and this script work.
	want tests && phase gpu_ops 300 "$T/test_gpu_ops" -t combine_bitwise -t histogram
	want tests && phase gpu_fatal 120 "$T/test_gpu_fatal"
	for t in "$T"/test_gpu_*; do
		case ${t##*/} in test_gpu_ops | test_gpu_fatal) continue ;; esac
		want tests && phase "${t##*/}" 300 "$t"
	done
	want bench && phase bench_kernels 300 "$K/bench_kernels" --backend cuda --smoke \
		--out "$out/kernels.txt"
	want bench && phase ffn_rt4 300 "$K/bench_kernels" --backend cuda --smoke --ffn-rt 4 \
		--out "$out/kernels_rt4.txt"
	want bench && phase uvm_vs_vmm 300 "$R/uvm.sh" --smoke cuda
else
	want tests && phase gpu_ops 180 "$T/test_gpu_ops"
	want tests && phase gpu_fatal 60 "$T/test_gpu_fatal"
	for t in "$T"/test_gpu_*; do
		case ${t##*/} in test_gpu_ops | test_gpu_fatal) continue ;; esac
		want tests && phase "${t##*/}" 120 "$t"
	done
	want tests && phase engine_budgets 120 "$T/engine_same_outputs.sh"
	want tests && phase decode_tokens 180 "$T/decode_same_tokens.sh"
	want tests && phase sync_per_step 90 "$T/sync_per_step.sh"
	want tests && phase graph_steps 90 "$T/graph_steps.sh"
	want tests && phase hybrid 90 "$T/hybrid_outputs.sh"
	want tests && phase moemd_hbm 90 "$T/moemd_hbm_share.sh"
	want bench && phase bench_kernels 120 "$K/bench_kernels" --backend cuda \
		--out "$out/kernels.txt"
	if want bench; then
		if have_torch; then
			phase torch_ffn 90 python3 "$K/torch_ffn.py" --ours "$out/kernels.txt"
		else
			skipped torch_ffn "$no_torch"
		fi
	fi
	# The FFN rows again under each row tiling of 1..16 tokens an expert
	# (MOEM_CUDA_FFN_RT; cuda/ffn.cuh): keys ffn_<prec>_B<B>_rt<R>_*.
	for r in 1 2 4; do
		want bench && phase "ffn_rt$r" 60 "$K/bench_kernels" --backend cuda --ffn-rt "$r" \
			--out "$out/kernels_rt$r.txt"
	done
	want bench && phase bench_tiers 60 "$R/bench_tiers" --backend cuda
	if want bench; then
		if command -v python3 >/dev/null 2>&1; then
			phase decode_bench 150 "$here/bench/decode/gpu.sh" cuda
		else
			skipped decode_bench "python3 is not installed here"
		fi
	fi
	want bench && phase tokens 90 "$R/tokens.sh" cuda
	# Hybrid CPU/GPU experts end to end: moem run tokens/s at 25% HBM,
	# transfer-only against --exec hybrid (writes OUTDIR/hybrid.md).
	want bench && phase hybrid_run 150 env MOEM="$moem" OUT="$MOEM_BENCH_DIR/hybrid" DOC="$out" \
		BACKEND=cuda REPS=3 COMMIT="$bundle_info" "$here/bench/sim/hybrid_run.sh"
	# The same on 4 layers of 128 experts, where batch 1 fell to half of
	# transfer-only in the sixth GPU session (OUTDIR/hybrid-4x128/hybrid.md,
	# with where the engine thread's time went).
	want bench && phase hybrid_run_4x128 150 env MOEM="$moem" OUT="$MOEM_BENCH_DIR/hybrid4" \
		DOC="$out/hybrid-4x128" LAYERS=4 EXPERTS=128 BACKEND=cuda REPS=3 \
		COMMIT="$bundle_info" "$here/bench/sim/hybrid_run.sh"
	want bench && phase sync_step 90 "$R/sync_step.sh" cuda
	want bench && phase uvm_vs_vmm 120 "$R/uvm.sh" cuda
	if want tests; then
		if have_torch; then
			phase torch_check 60 "$T/torch_check.sh"
		else
			skipped torch_check "$no_torch"
		fi
		if [ -z "$cs" ]; then
			skipped memcheck "compute-sanitizer is not installed here"
			skipped racecheck "compute-sanitizer is not installed here"
		else
			phase memcheck 150 "$cs" --tool memcheck --target-processes all \
				--error-exitcode 1 --print-limit 20 "$T/test_gpu_ops"
			phase racecheck 120 "$cs" --tool racecheck --target-processes all \
				--error-exitcode 1 --print-limit 20 "$T/test_gpu_ops" \
				-t ffn_small_and_odd_shapes -t router -t route_all_modes_same_choices \
				-t rmsnorm -t quantize_bytes_and_status
		fi
	fi
fi

# Nsight Compute on one launch of each kernel named (a regex on its name):
# the first launch inside a bench_kernels run is a warm-up, hence -s 1.
if want profile; then
	ncu=$(command -v ncu 2>/dev/null || ls /usr/local/cuda/bin/ncu \
		/opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
	if [ -z "$ncu" ]; then
		skipped profile "Nsight Compute (ncu) is not installed here"
	else
		# with or without a row tiling suffix: the kernel the backend picks
		for k in ffn_gateup_q4_n1 ffn_down_q4_n1 ffn_gateup_q2_n1 ffn_gateup_bf16_n1 \
			ffn_gateup_bf16_n8 ffn_down_bf16_n8 ffn_gateup_q4_n8 ffn_down_q4_n8 \
			attn_part matmul router_n1 route; do
			want_kernel "$k" || continue
			phase "ncu_$k" 90 "$ncu" --target-processes all \
				-k "regex:^moem_${k}(_r[124])?\$" \
				-s 1 -c 1 --section SpeedOfLight --section Occupancy \
				--section LaunchStats --section WarpStateStats \
				--section SchedulerStats --section MemoryWorkloadAnalysis \
				--metrics "regex:smsp__pcsamp_warps_issue_stalled_.*" \
				"$K/bench_kernels" --backend cuda \
				$([ "$smoke" = 1 ] && echo --smoke)
		done
	fi
fi

# ---- summary ------------------------------------------------------------------
total=$(($(date +%s) - start))
cat "$out"/logs/*.log 2>/dev/null | sed -n 's/^RESULT \([A-Za-z0-9_.]*\)=\([-0-9.eE+]*\)$/\1 \2/p' |
	sort -u -k1,1 >"$out/results.txt"
failed=0
for i in "${!PH_NAME[@]}"; do
	case ${PH_STATUS[$i]} in fail | timeout | not-run) failed=1 ;; esac
done

# Targets (Documentation/benchmarks/gpu.md): batch 1 FFN weight bytes/s
# against the copy bandwidth, batch >= 16 against PyTorch's bf16 grouped matmul.
targets=$(awk '
	{ v[$1] = $2 }
	function row(name, key, goal,   s) {
		if (!(key in v)) { printf "%s\t%s\t>= %s\tnot measured\n", name, key, goal; return }
		s = v[key] >= goal ? "met" : "missed"
		printf "%s\t%s\t>= %s\t%s (%.3g)\n", name, key, goal, s, v[key]
	}
	END {
		row("bf16 B=1 vs copy", "ffn_bf16_B1_vs_copy", 0.8)
		row("q8 B=1 vs copy", "ffn_q8_B1_vs_copy", 0.8)
		row("q4 B=1 vs copy", "ffn_q4_B1_vs_copy", 0.7)
		row("q2 B=1 vs copy", "ffn_q2_B1_vs_copy", 0.7)
		split("bf16 q8 q4 q2", p, " ")
		for (i = 1; i <= 4; i++)
			for (b = 16; b <= 64; b *= 4)
				row(p[i] " B=" b " vs torch", "ffn_" p[i] "_B" b "_vs_torch", 1.0)
	}' "$out/results.txt")

{
	printf '{"status":%s,"date":%s,"seconds":%d,"budget":%d,"mode":"%s","smoke":%s,\n' \
		"$([ $failed = 0 ] && echo '"pass"' || echo '"fail"')" "$(json_str "$date_utc")" \
		"$total" "$budget" "$mode" "$([ $smoke = 1 ] && echo true || echo false)"
	printf ' "device":%s,"driver":%s,"nvidia_smi":%s,\n' "$(json_str "$device")" \
		"$(json_str "$driver")" "$(json_str "$smi")"
	printf ' "bundle":%s,"archs":%s,"torch":%s,"compute_sanitizer":%s,\n' \
		"$(json_str "$bundle_info")" "$(json_str "$archs")" "$(json_str "$torch")" \
		"$(json_str "${cs:-none}")"
	printf ' "phases":['
	for i in "${!PH_NAME[@]}"; do
		[ "$i" -gt 0 ] && printf ','
		printf '\n  {"name":%s,"status":%s,"seconds":%s,"note":%s,"log":%s}' \
			"$(json_str "${PH_NAME[$i]}")" "$(json_str "${PH_STATUS[$i]}")" "${PH_SECS[$i]}" \
			"$(json_str "${PH_NOTE[$i]}")" "$(json_str "logs/${PH_NAME[$i]}.log")"
	done
	printf '],\n "targets":['
	echo "$targets" | awk -F'\t' 'NF { printf "%s\n  {\"what\":\"%s\",\"key\":\"%s\",\"goal\":\"%s\",\"result\":\"%s\"}", n++ ? "," : "", $1, $2, $3, $4 }'
	printf '],\n "results":{'
	awk '{ printf "%s\n  \"%s\":%s", (NR > 1 ? "," : ""), $1, $2 }' "$out/results.txt"
	printf '}}\n'
} >"$out/summary.json"

{
	echo "# moem GPU run"
	echo
	echo "| | |"
	echo "| --- | --- |"
	echo "| device | $device |"
	echo "| driver | $driver${smi:+ (nvidia-smi: $smi)} |"
	echo "| date | $date_utc |"
	echo "| bundle | $bundle_info, $archs |"
	echo "| PyTorch | $torch |"
	echo "| compute-sanitizer | ${cs:-not installed} |"
	echo "| command | run-gpu.sh --$mode$([ $smoke = 1 ] && echo ' --smoke') --budget $budget ($total s) |"
	echo
	echo "| phase | result | seconds | note |"
	echo "| --- | --- | ---: | --- |"
	for i in "${!PH_NAME[@]}"; do
		echo "| ${PH_NAME[$i]} | ${PH_STATUS[$i]} | ${PH_SECS[$i]} | ${PH_NOTE[$i]} |"
	done
	echo
	echo "Targets (weight bytes/s of the expert FFN against the device-to-device copy"
	echo "bandwidth measured in the same run; time against PyTorch's bf16 grouped matmul):"
	echo
	echo "| target | key | goal | result |"
	echo "| --- | --- | --- | --- |"
	echo "$targets" | awk -F'\t' 'NF { printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4 }'
	echo
	echo "Every number (RESULT lines of the logs):"
	echo
	echo "| key | value |"
	echo "| --- | ---: |"
	awk '{ printf "| %s | %s |\n", $1, $2 }' "$out/results.txt"
} >"$out/summary.md"

# One file with everything but the scratch models, for tools that bring
# back only a few files from the GPU machine.
# Written elsewhere first: tar of a directory that holds the growing archive
# reports "file changed as we read it" and fails.
tgz=$(mktemp "${TMPDIR:-/tmp}/run-gpu.XXXXXX") &&
	tar czf "$tgz" -C "$out" --exclude=./work --exclude=./run.tar.gz . 2>/dev/null &&
	chmod 644 "$tgz" && mv -f "$tgz" "$out/run.tar.gz" || {
	rm -f "$tgz"
	echo "run-gpu.sh: could not write $out/run.tar.gz" >&2
}
# The scratch models (gigabytes: the tier and UVM benchmarks' packs) go, so
# that OUTDIR holds only what a device tool should bring back;
# MOEM_GPU_KEEP_WORK=1 keeps them.
[ "${MOEM_GPU_KEEP_WORK:-0}" = 1 ] || rm -rf "$out/work"
echo "run-gpu.sh: $([ $failed = 0 ] && echo passed || echo FAILED) in ${total}s; $out/summary.md"
exit $failed
