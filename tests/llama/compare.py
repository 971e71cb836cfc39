#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only
"""Compare moem decode's --logits-out with llama-peer's on the same token
ids: every position's logits within the tolerance of tests/ref (0.02 of
the largest |logit| + 0.01: bf16 activations in moem against llama.cpp's
F32 pipeline, the same argument as tests/ref/ref_forward.py gives),
except at most 3 positions (llama.cpp's router choices are not visible
here, so a routing near-tie cannot be told apart); and the greedy tokens
identical up to the first position whose top-2 logits are closer than the
tolerance in llama.cpp's logits (a near-tie either may break).

usage: compare.py MOEM.lgt LLAMA.lgt N_PROMPT MOEM_TOKENS LLAMA_TOKENS
"""
import struct
import sys

import numpy as np


def read(path):
    b = open(path, "rb").read()
    if b[:8] != b"MOEMLGT1":
        raise SystemExit(f"{path}: not a logits file")
    v = struct.unpack("<I", b[8:12])[0]
    rows, o = {}, 12
    while o + 8 + 4 * v <= len(b):
        _, pos = struct.unpack("<II", b[o:o + 8])
        rows[pos] = np.frombuffer(b[o + 8:o + 8 + 4 * v], dtype=np.float32)
        o += 8 + 4 * v
    return rows


def main():
    mo, ll = read(sys.argv[1]), read(sys.argv[2])
    n_prompt = int(sys.argv[3])
    mt = [int(x) for x in sys.argv[4].split(",")]
    lt = [int(x) for x in sys.argv[5].split(",")]
    off, worst, checked = [], 0.0, 0
    for pos in sorted(ll):
        if pos not in mo:
            continue
        r = ll[pos].astype(np.float64)
        tol = 0.02 * float(np.abs(r).max()) + 0.01
        err = float(np.abs(mo[pos] - r).max())
        worst = max(worst, err / tol)
        checked += 1
        if err > tol:
            off.append(pos)
    print(f"llama.cpp: {checked} positions, worst error {worst:.2f} of the tolerance, "
          f"off: {off}")
    ok = checked >= n_prompt and len(off) <= 3
    same = 0
    for i, (a, b) in enumerate(zip(mt, lt)):
        if a != b:
            r = np.sort(ll[n_prompt - 1 + i].astype(np.float64))
            tol = 0.02 * float(np.abs(r).max()) + 0.01
            if r[-1] - r[-2] >= tol:
                print(f"FAIL: greedy token {i}: moem {a}, llama.cpp {b} (no near-tie)")
                ok = False
            break
        same += 1
    print(f"llama.cpp: {same} greedy tokens identical of {min(len(mt), len(lt))}")
    if len(off) > 3:
        print("FAIL: more than 3 positions off the tolerance")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
