#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Same-shape PyTorch peer for moem's expert FFN benchmark (make bench-gpu).

For B = 1, 4, 16, 64 tokens per expert at Qwen3-30B-A3B shapes (H 2048,
I 768), times torch.matmul in bf16 for the SwiGLU expert
    y = (silu(x @ Wg.T) * (x @ Wu.T)) @ Wd.T
over enough experts to defeat the L2 cache, two ways: eager, and captured
in a CUDA graph (no launch overhead: the stronger peer). Reports weight
bytes/s and, given bench_kernels' --out file, moem / torch ratios:
    RESULT ffn_bf16_B16_vs_torch_graph=...
Exit 4 (skip) without torch or a GPU.
usage: torch_ffn.py [--ours FILE] [--quick]
"""
import argparse
import sys

H, I = 2048, 768


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", help="bench_kernels --out file (key=value lines)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("SKIP python3 has no torch")
        return 4
    if not torch.cuda.is_available():
        print("SKIP no CUDA device for torch")
        return 4
    ours = {}
    if args.ours:
        for line in open(args.ours):
            k, _, v = line.strip().partition("=")
            if v:
                ours[k] = float(v)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    expert_bytes = 3 * H * I * 2
    n = (256 << 20) // expert_bytes + 1          # per set, as bench_kernels does
    sets = [[tuple(torch.randn(s, device=dev, dtype=torch.bfloat16) * 0.02
                   for s in ((I, H), (I, H), (H, I))) for _ in range(n)] for _ in range(2)]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}: "
          f"{n} experts per set, 2 sets, bf16 torch.matmul")
    print("   B   eager us/expert  GB/s   graph us/expert  GB/s   moem/torch(graph)")
    reps = 5 if args.quick else 20

    def run(x, s):
        for wg, wu, wd in sets[s]:
            a = torch.nn.functional.silu(torch.matmul(x, wg.t())) * torch.matmul(x, wu.t())
            torch.matmul(a, wd.t())

    for B in (1, 4, 16, 64):
        x = torch.randn(B, H, device=dev, dtype=torch.bfloat16)
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        for s in (0, 1):
            run(x, s)
        times = []
        for r in range(reps):
            ev[0].record()
            run(x, r & 1)
            ev[1].record()
            torch.cuda.synchronize()
            times.append(ev[0].elapsed_time(ev[1]) / 1e3)
        eager = sorted(times)[len(times) // 2] / n
        graphs = []
        try:
            for s in (0, 1):
                g = torch.cuda.CUDAGraph()
                st = torch.cuda.Stream()
                st.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(st):
                    run(x, s)
                torch.cuda.current_stream().wait_stream(st)
                with torch.cuda.graph(g):
                    run(x, s)
                graphs.append(g)
            times = []
            for r in range(reps):
                ev[0].record()
                graphs[r & 1].replay()
                ev[1].record()
                torch.cuda.synchronize()
                times.append(ev[0].elapsed_time(ev[1]) / 1e3)
            graph = sorted(times)[len(times) // 2] / n
        except RuntimeError as e:
            print(f"   (CUDA graph capture failed: {e}; using eager)")
            graph = eager
        ge, gg = expert_bytes / eager / 1e9, expert_bytes / graph / 1e9
        line = f"{B:4d}   {eager * 1e6:15.2f} {ge:6.1f}   {graph * 1e6:15.2f} {gg:6.1f}"
        print(f"RESULT torch_ffn_bf16_B{B}_eager_gbps={ge:.4g}")
        print(f"RESULT torch_ffn_bf16_B{B}_graph_gbps={gg:.4g}")
        key = f"ffn_bf16_B{B}_gbps"
        if key in ours:
            line += f"   {ours[key] / gg:8.2f}x"
            print(f"RESULT ffn_bf16_B{B}_vs_torch_graph={ours[key] / gg:.4g}")
            print(f"RESULT ffn_bf16_B{B}_vs_torch_eager={ours[key] / ge:.4g}")
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
