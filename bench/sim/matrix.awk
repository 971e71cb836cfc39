# SPDX-License-Identifier: GPL-2.0-only
#
# One row of bench/sim/run.sh's section 0 from `moem sim --policy all --md`
# (fields split on '|'; variables b, s, h: batch, seed, HBM %; what: "hit"
# for the hit-rate table, "stall" for stall as a multiple of its floor).
function trim(x) {
	gsub(/^ +| +$/, "", x)
	return x
}
NR > 2 && NF > 10 {
	p = trim($2)
	hit[p] = trim($5) + 0
	min = trim($6) + 0
	floor_ms = trim($10) + 0
	xb[p] = trim($11)
	step[p] = trim($12) + 0
}
END {
	n = split("lru2 lfu pred prefetch-fixed expertflow moem fluxmoe", pol, " ")
	if (what == "stall") {
		line = sprintf("| %d | %d | %d%% | %.3f | %s", b, s, h, floor_ms, xb["lru"])
		best = ""
		for (i = 1; i <= n; i++) {
			q = pol[i]
			if (!(q in xb)) {
				line = line " | -"
				continue
			}
			line = line " | " xb[q]
			if (xb[q] != "-" && (best == "" || xb[q] + 0 < best + 0)) {
				best = xb[q]
				who = q
			}
		}
		printf("%s | %s |\n", line, best == "" ? "-" : best " (" who ")")
		exit
	}
	best = 0
	below = ""
	line = sprintf("| %d | %d | %d%% | %.4f | %.4f", b, s, h, min, hit["lru"])
	for (i = 1; i <= n; i++) {
		q = pol[i]
		if (!(q in hit)) {
			line = line " | -"
			continue
		}
		line = line sprintf(" | %.4f", hit[q])
		if (hit[q] > best)
			best = hit[q]
		if (hit[q] < hit["lru"] || step[q] > step["lru"])
			below = below (below == "" ? "" : ", ") q
	}
	lossy = "-"
	if ("dynaexq" in hit)
		lossy = sprintf("hit %.4f, step %.3f ms (LRU %.3f)", hit["dynaexq"], step["dynaexq"],
				step["lru"])
	frac = min > 0 ? best / min : 0
	if (below == "")
		below = "none"
	printf("%s | %.3f | %s | %s |\n", line, frac, below, lossy)
}
