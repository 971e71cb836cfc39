#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""The FFN row tiling table of a GPU run (run-gpu.sh --bench, phases
ffn_rt1, ffn_rt2, ffn_rt4): per precision and batch, us per expert and the
fraction of the copy bandwidth under each tiling, the fastest marked.

    rt_table.py RESULTS.TXT     (run-gpu.sh's OUTDIR/results.txt)
"""
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    res = {}
    with open(sys.argv[1]) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                try:
                    res[parts[0]] = float(parts[1])
                except ValueError:
                    pass
    rts = [1, 2, 4]
    print("| prec | B | " + " | ".join(f"{r} row tile{'s' if r > 1 else ''}: us (of copy)"
                                         for r in rts) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in rts) + " |")
    rows = 0
    for p in ("bf16", "q8", "q4", "q2"):
        for b in (1, 4, 16):
            us = [res.get(f"ffn_{p}_B{b}_rt{r}_us_per_expert") for r in rts]
            fr = [res.get(f"ffn_{p}_B{b}_rt{r}_vs_copy") for r in rts]
            if all(u is None for u in us):
                continue
            best = min(u for u in us if u is not None)
            cells = []
            for u, c in zip(us, fr):
                if u is None:
                    cells.append("-")
                    continue
                cell = f"{u:.2f} ({c:.2f})"
                cells.append(f"**{cell}**" if u == best else cell)
            print(f"| {p} | {b} | " + " | ".join(cells) + " |")
            rows += 1
    if not rows:
        sys.exit("rt_table.py: no ffn_*_rt*_ keys in " + sys.argv[1])


if __name__ == "__main__":
    main()
