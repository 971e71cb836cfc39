#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# make bench-tiers: the transfer engine against the device's raw copies
# (bench_tiers), tokens/s at HBM budgets (tokens.sh) and the DRAM tier's
# eviction rules (dram.sh), on the CPU backend with the emulated HBM
# tier; with DOC=path, also the page Documentation/benchmarks/tiers.md
# (machine, date, command, the outputs as they came). Results are
# synthetic.
set -eu
B=${MOEM_BUILD:-build}
here=$(cd "$(dirname "$0")" && pwd)
dir=${MOEM_BENCH_DIR:-$B/bench}/tiers
mkdir -p "$dir"
. "$here/../page.sh"
page_begin
"$B/bench/tiers/bench_tiers" --backend cpu | tee "$dir/staging.txt"
MOEM_BUILD=$B sh "$here/tokens.sh" cpu | tee "$dir/tokens.txt"
MOEM_BUILD=$B sh "$here/dram.sh" | tee "$dir/dram.md"
[ -n "${DOC:-}" ] || exit 0
{
	page_head "Tier benchmarks: staging, expert readiness, tokens/s vs HBM budget, DRAM rules (synthetic)" \
		"make bench-tiers DOC=$DOC" bench/tiers/page.sh
	echo "- backend: CPU, emulated HBM tier (no GPU); the GPU's figures are in gpu.md" \
		"(the GPU bundle runs the same programs)"
	echo
	echo "## Staging and expert readiness (bench/tiers/bench_tiers.c)"
	echo
	echo "The emulated device copies no faster than this machine's memcpy, so these" \
		"ratios measure what the transfer engine itself costs (piece splitting, priority" \
		"queues, completion tracking), not PCIe. *staging_vs_raw*: the engine's staging" \
		"over the device's raw copies of the same bytes from the same pinned memory," \
		"medians of interleaved repetitions (target on a GPU: >= 0.9). *expert_ready*:" \
		"the time to make one expert ready when the link is idle (alone) and behind" \
		"queued prefetches (backlog), over bytes / bandwidth (ideal): a miss overtakes" \
		"every queued prefetch and waits only for the pieces already on the copy engine."
	echo
	echo '```'
	cat "$dir/staging.txt"
	echo '```'
	echo
	echo "## tokens/s against the HBM budget (bench/tiers/tokens.sh)"
	echo
	echo "On-demand LRU, no prefetch, DRAM holding the whole model. The CPU backend's FFN," \
		"not the link, dominates the step, so only the shape carries over to a GPU, and on" \
		"a loaded machine tokens/s moves by tens of percent from run to run (the load" \
		"above); hit rate and bytes do not. Once the budget is below what one cycle" \
		"through the layers touches, LRU's victim is always one the next layers need" \
		"(policies.md: what lru2, pred and prefetch do about it). The digest is the same" \
		"at every budget: the outputs are bitwise the all-resident run's."
	echo
	echo '```'
	cat "$dir/tokens.txt"
	echo '```'
	echo
	echo "## The DRAM tier's eviction rules (bench/tiers/dram.sh)"
	echo
	echo "The demo model (qwen3_moe, 4 layers x 32 experts, top-4, Qwen3-30B-A3B expert" \
		"shapes, packed bf16,q4), \`moem run --backend cpu --cpu-threads 2 --hbm 40%" \
		"--dram 50% --batch 8 --steps ${DRAM_BENCH_STEPS:-20} --prefetch none\`" \
		"with each \`--evict\` and \`--dram-evict\` (Documentation/tiers.md, \"The DRAM" \
		"tier\"); without prefetch the bytes are deterministic, tokens/s is this" \
		"machine's. *copied back*: HBM evictions written back to DRAM (exclusive" \
		"DRAM, the cost model's call per eviction) instead of reread from NVMe later."
	echo
	cat "$dir/dram.md"
} | page_commit "$DOC"
