#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""The FFN row tiling table of a GPU run (run-gpu.sh --bench, phases
ffn_rt1, ffn_rt2, ffn_rt4): per precision and batch, us per expert and the
fraction of the copy bandwidth under each row tiling (1..16 tokens an
expert), the fastest marked. Also the table of the ffn_as* phases (16..64
tokens under each MOEM_CUDA_FFN_ASYNC setting) that bundles c87394e to
a486682 wrote (gpu.md, fourth session; those kernels are removed).

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
    rows = table(res, "rt", [1, 2, 4], (1, 4, 16),
                 lambda r: f"{r} row tile{'s' if r > 1 else ''}: us (of copy)")
    rows += table(res, "as", ["off", 16, 32, 64], (16, 64),
                  lambda a: f"async {'off' if a == 'off' else 'from ' + str(a)}: us (of copy)")
    if not rows:
        sys.exit("rt_table.py: no ffn_*_rt*_ or ffn_*_as*_ keys in " + sys.argv[1])


def table(res, tag, vals, batches, head):
    """One table of keys ffn_<prec>_B<b>_<tag><v>_*; the rows it printed."""
    lines = []
    for p in ("bf16", "q8", "q4", "q2"):
        for b in batches:
            us = [res.get(f"ffn_{p}_B{b}_{tag}{v}_us_per_expert") for v in vals]
            fr = [res.get(f"ffn_{p}_B{b}_{tag}{v}_vs_copy") for v in vals]
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
            lines.append(f"| {p} | {b} | " + " | ".join(cells) + " |")
    if lines:
        print("| prec | B | " + " | ".join(head(v) for v in vals) + " |")
        print("| --- | ---: | " + " | ".join("---:" for _ in vals) + " |")
        print("\n".join(lines))
        print()
    return len(lines)


if __name__ == "__main__":
    main()
