#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only
"""Rewrite a classic Hugging Face MoE checkpoint in transformers 5's layout:
each layer's routed experts as mlp.experts.gate_up_proj [E, 2I, H] (gate
rows, then up rows) and mlp.experts.down_proj [E, H, I]; Mixtral's
block_sparse_moe renamed to mlp (w1 gate, w3 up, w2 down). One
model.safetensors; the JSON files are copied. For the store's tests.

usage: fuse_experts.py SRC DST [--bad-shape | --both]
  --bad-shape  drop the last expert from layer 0's gate_up_proj
  --both       also keep layer 0's per-expert tensors (both layouts)
"""
import json
import os
import re
import shutil
import struct
import sys



def read(src):
    idx = os.path.join(src, "model.safetensors.index.json")
    files = (sorted(set(json.load(open(idx))["weight_map"].values()))
             if os.path.exists(idx) else ["model.safetensors"])
    out = {}
    for fn in files:
        b = open(os.path.join(src, fn), "rb").read()
        n = struct.unpack("<Q", b[:8])[0]
        hdr = json.loads(b[8:8 + n])
        for k, t in hdr.items():
            if k != "__metadata__":
                a, e = t["data_offsets"]
                out[k] = (t["dtype"], t["shape"], b[8 + n + a:8 + n + e])
    return out


def write(path, tensors):
    hdr, off, blobs = {}, 0, []
    for k in sorted(tensors):
        dt, shape, raw = tensors[k]
        hdr[k] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for raw in blobs:
            f.write(raw)


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    mode = sys.argv[3] if len(sys.argv) > 3 else ""
    t = read(src)
    os.makedirs(dst, exist_ok=True)
    for fn in os.listdir(src):
        if fn.endswith(".json") and fn != "model.safetensors.index.json":
            shutil.copy(os.path.join(src, fn), os.path.join(dst, fn))
    names = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down",
             "w1": "gate", "w3": "up", "w2": "down"}
    pat = re.compile(r"model\.layers\.(\d+)\.(mlp|block_sparse_moe)\.experts\.(\d+)\.(\w+)\.weight")
    experts, out = {}, {}
    for k, v in t.items():
        m = pat.fullmatch(k)
        if m:
            experts.setdefault(int(m.group(1)), {})[(int(m.group(3)), names[m.group(4)])] = v
            if mode == "--both" and int(m.group(1)) == 0:
                out[k] = v
            continue
        out[k.replace(".block_sparse_moe.", ".mlp.")] = v
    for l, ex in experts.items():
        n = max(e for e, _ in ex) + 1
        dt = ex[(0, "gate")][0]
        i_, h = ex[(0, "gate")][1]
        gu = b"".join(ex[(e, "gate")][2] + ex[(e, "up")][2] for e in range(n))
        ne = n
        if mode == "--bad-shape" and l == 0:
            ne = n - 1
            gu = gu[:len(gu) * ne // n]
        out[f"model.layers.{l}.mlp.experts.gate_up_proj"] = (dt, [ne, 2 * i_, h], gu)
        out[f"model.layers.{l}.mlp.experts.down_proj"] = (
            dt, [n, h, i_], b"".join(ex[(e, "down")][2] for e in range(n)))
    write(os.path.join(dst, "model.safetensors"), out)


if __name__ == "__main__":
    main()
