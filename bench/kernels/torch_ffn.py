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
With --cpu (make bench-kernels): the same on the CPU, torch.set_num_threads
to bench_kernels' thread count, 64 MiB per expert set as bench_kernels
uses there, eager only; the ratios are moem's us/expert in each
precision against torch's bf16:
    RESULT ffn_q4_B16_vs_torch_cpu=...   (> 1: moem is faster)
Exit 4 (skip) without torch.
usage: torch_ffn.py [--ours FILE] [--quick] [--cpu]
"""
import time
import argparse
import sys

H, I = 2048, 768


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", help="bench_kernels --out file (key=value lines)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cpu", action="store_true")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("SKIP python3 has no torch")
        return 4
    if args.cpu:
        return cpu_main(torch, args)
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


def cpu_main(torch, args):
    ours = {}
    if args.ours:
        for line in open(args.ours):
            k, _, v = line.strip().partition("=")
            if v:
                try:
                    ours[k] = float(v)
                except ValueError:
                    ours[k] = v
    threads = int(ours.get("threads", 0)) or torch.get_num_threads()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    expert_bytes = 3 * H * I * 2
    n = (64 << 20) // expert_bytes + 1           # per set, as bench_kernels does on the CPU
    sets = [[tuple(torch.randn(s, dtype=torch.bfloat16) * 0.02
                   for s in ((I, H), (I, H), (H, I))) for _ in range(n)] for _ in range(2)]
    print(f"torch {torch.__version__} on the CPU, {threads} threads: {n} experts per set, "
          f"2 sets, bf16 torch.matmul, eager")
    print("   B   torch us/expert   GB/s   moem/torch speed: " +
          "  ".join(f"{p:>5}" for p in ("bf16", "q8", "q4", "q2")))
    reps = 3 if args.quick else 7

    def run(x, s):
        for wg, wu, wd in sets[s]:
            a = torch.nn.functional.silu(torch.matmul(x, wg.t())) * torch.matmul(x, wu.t())
            torch.matmul(a, wd.t())

    with torch.no_grad():
        for B in (1, 4, 16, 64):
            x = torch.randn(B, H, dtype=torch.bfloat16)
            run(x, 0)
            times = []
            for r in range(reps):
                t0 = time.perf_counter()
                run(x, (r + 1) & 1)
                times.append(time.perf_counter() - t0)
            t = sorted(times)[len(times) // 2] / n
            line = f"{B:4d}   {t * 1e6:15.1f} {expert_bytes / t / 1e9:6.1f}   " + " " * 19
            print(f"RESULT torch_cpu_ffn_bf16_B{B}_us_per_expert={t * 1e6:.4g}")
            for p in ("bf16", "q8", "q4", "q2"):
                key = f"ffn_{p}_B{B}_us_per_expert"
                if key in ours:
                    r = t * 1e6 / ours[key]
                    line += f"{r:7.2f}"
                    print(f"RESULT ffn_{p}_B{B}_vs_torch_cpu={r:.4g}")
                else:
                    line += "      -"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
