#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Compare moem's router, top-k routing and bf16 expert FFN with PyTorch.

Runs dump_ops (the CUDA backend at Qwen3-30B-A3B shapes), then recomputes
the same ops with torch on the GPU in fp32 (TF32 off) and checks:
  logits   |dz| <= 5e-5 * sum_i |x_i w_i|
  top-k    same experts, except where torch's own logits nearly tie
           (|dz| <= 1e-5 * sum|xw|); weights |dw| <= 1e-4
  ffn      per row max |dy| <= 2e-3 * max |y_torch|
and reports the distance to a torch bf16 pipeline (as bf16 models run).
Exit 0 pass, 1 fail, 4 skip (no torch, no GPU).
usage: torch_check.py DUMP_OPS_BINARY
"""
import os
import subprocess
import sys
import tempfile


def skip(why):
    print(f"SKIP {why}")
    sys.exit(4)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    try:
        import torch
    except ImportError:
        skip("python3 has no torch")
    if not torch.cuda.is_available():
        skip("no CUDA device for torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([sys.argv[1], d], capture_output=True, text=True)
        print(r.stdout, end="")
        if r.returncode == 4:
            skip(r.stdout.strip())
        if r.returncode:
            print(r.stderr, end="")
            return 1
        B, H, N, K, I, E = map(int, open(os.path.join(d, "meta.txt")).read().split())

        def load(name, dtype, shape):
            raw = open(os.path.join(d, name), "rb").read()
            t = torch.frombuffer(bytearray(raw), dtype=dtype)
            return t.reshape(shape).to(dev)

        x = load("x.bf16", torch.bfloat16, (B, H))
        gate = load("gate.bf16", torch.bfloat16, (N, H))
        z = load("logits.f32", torch.float32, (B, N))
        ids = load("ids.i32", torch.int32, (B, K)).long()
        w = load("w.f32", torch.float32, (B, K))
        y = load("ffn.f32", torch.float32, (B, E, H))
        fails = 0

        xf, gf = x.float(), gate.float()
        zt = xf @ gf.t()
        mag = xf.abs() @ gf.abs().t()
        dz = (z - zt).abs()
        worst = (dz / mag).max().item()
        print(f"router: max |dz| / sum|xw| = {worst:.2e} (limit 5e-5)")
        if worst > 5e-5:
            fails += 1

        tv, ti = torch.topk(zt.double(), K, dim=1)
        mism = 0
        for t in range(B):
            ours, theirs = set(ids[t].tolist()), set(ti[t].tolist())
            if ours != theirs:
                # allowed only between near-equal logits of torch's own
                diff = ours ^ theirs
                vals = zt[t, list(diff)]
                if (vals.max() - vals.min()).item() > 1e-5 * mag[t].max().item():
                    mism += 1
        p = torch.softmax(zt.double(), dim=1)
        wt = torch.gather(p, 1, ids)
        wt = wt / wt.sum(dim=1, keepdim=True)
        dw = (w.double() - wt).abs().max().item()
        print(f"top-k: {mism} tokens choose differently; max |dw| = {dw:.2e} (limit 1e-4)")
        if mism or dw > 1e-4:
            fails += 1

        worst32, worst16 = 0.0, 0.0
        for e in range(E):
            wg = load(f"e{e}_gate.bf16", torch.bfloat16, (I, H))
            wu = load(f"e{e}_up.bf16", torch.bfloat16, (I, H))
            wd = load(f"e{e}_down.bf16", torch.bfloat16, (H, I))
            a = torch.nn.functional.silu(xf @ wg.float().t()) * (xf @ wu.float().t())
            yt = a @ wd.float().t()
            a16 = torch.nn.functional.silu(x @ wg.t()) * (x @ wu.t())
            yt16 = (a16 @ wd.t()).float()
            ours = y[:, e, :]
            den = yt.abs().max(dim=1).values
            worst32 = max(worst32, ((ours - yt).abs().max(dim=1).values / den).max().item())
            worst16 = max(worst16, ((yt16 - yt).abs().max(dim=1).values / den).max().item())
        print(f"ffn bf16: worst row max|dy|/max|y| vs torch fp32 = {worst32:.2e} (limit 2e-3); "
              f"torch bf16 pipeline vs fp32 = {worst16:.2e}")
        if worst32 > 2e-3:
            fails += 1
        print("torch_check: " + ("FAIL" if fails else "PASS"))
        return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
