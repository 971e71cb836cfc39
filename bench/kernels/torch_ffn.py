#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Same-shape PyTorch peer for moem's expert FFN benchmark (make bench-gpu,
run-gpu.sh --bench).

For B = 1, 4, 16, 64 tokens per expert at Qwen3-30B-A3B shapes (H 2048,
I 768), times the SwiGLU expert
    y = (silu(x @ Wg.T) * (x @ Wu.T)) @ Wd.T
in bf16 over enough experts to defeat the L2 cache, three ways:
  - grouped: torch._grouped_mm over all experts at once (gate and up as one
    [E, 2I, H] weight), where this PyTorch has it (2.8+, sm_90);
  - graph: one torch.matmul chain per expert, captured in a CUDA graph;
  - eager: the same without the graph.
The peer is the fastest of those that ran. Given bench_kernels' --out file,
prints moem / torch time ratios (> 1: moem is faster) for every precision
moem measured:
    RESULT ffn_q4_B16_vs_torch=...      (peer time / moem time per expert)
    RESULT torch_ffn_bf16_B16_gbps=...  (weight bytes / s of the peer)
Exit 4 (skip) without torch or a GPU.
With --cpu (make bench-kernels): the same on the CPU, torch.set_num_threads
to bench_kernels' thread count, 64 MiB per expert set as bench_kernels
uses there, eager only; the ratios are moem's us/expert in each
precision against torch's bf16:
    RESULT ffn_q4_B16_vs_torch_cpu=...   (> 1: moem is faster)
Exit 4 (skip) without torch.
usage: torch_ffn.py [--ours FILE] [--quick] [--cpu]
"""
import argparse
import os
import sys
import tempfile
import time

H, I = 2048, 768


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


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
            try:
                ours[k] = float(v)
            except ValueError:
                pass
    dev = torch.device("cuda")
    torch.manual_seed(0)
    expert_bytes = 3 * H * I * 2
    n = (256 << 20) // expert_bytes + 1  # per set, as bench_kernels does
    # Two sets (alternated so that no call finds its weights in L2), each as
    # [E, 2I, H] gate+up and [E, H, I] down, nn.Linear layout.
    sets = [(torch.randn(n, 2 * I, H, device=dev, dtype=torch.bfloat16) * 0.02,
             torch.randn(n, H, I, device=dev, dtype=torch.bfloat16) * 0.02) for _ in range(2)]
    reps = 5 if args.quick else 20
    grouped_ok = hasattr(torch, "_grouped_mm")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}: {n} experts per set, "
          f"2 sets, bf16; torch._grouped_mm {'present' if grouped_ok else 'absent'}")
    print("RESULT torch_ffn_has_grouped_mm=%d" % (1 if grouped_ok else 0))
    print("   B   grouped us/expert   graph us/expert   eager us/expert   peer")

    def loop(x, s):
        gu, dn = sets[s]
        for e in range(n):
            a = torch.matmul(x, gu[e].t())
            a = torch.nn.functional.silu(a[:, :I]) * a[:, I:]
            torch.matmul(a, dn[e].t())

    def grouped(xs, offs, s):
        gu, dn = sets[s]
        a = torch._grouped_mm(xs, gu.transpose(-2, -1), offs=offs)
        a = torch.nn.functional.silu(a[:, :I]) * a[:, I:]
        torch._grouped_mm(a, dn.transpose(-2, -1), offs=offs)

    def timed(fn):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        fn(0)
        fn(1)
        t = []
        for r in range(reps):
            ev[0].record()
            fn(r & 1)
            ev[1].record()
            torch.cuda.synchronize()
            t.append(ev[0].elapsed_time(ev[1]) / 1e3)
        return median(t) / n

    for B in (1, 4, 16, 64):
        x = torch.randn(B, H, device=dev, dtype=torch.bfloat16)
        res = {}
        res["eager"] = timed(lambda s: loop(x, s))
        try:
            graphs = []
            for s in (0, 1):
                g = torch.cuda.CUDAGraph()
                st = torch.cuda.Stream()
                st.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(st):
                    loop(x, s)
                torch.cuda.current_stream().wait_stream(st)
                with torch.cuda.graph(g):
                    loop(x, s)
                graphs.append(g)
            res["graph"] = timed(lambda s: graphs[s].replay())
        except RuntimeError as e:
            print(f"   (CUDA graph capture failed: {e})")
        if grouped_ok:
            try:
                xs = x.repeat(n, 1)
                offs = torch.arange(B, B * n + 1, B, device=dev, dtype=torch.int32)
                res["grouped"] = timed(lambda s: grouped(xs, offs, s))
            except (RuntimeError, TypeError) as e:
                print(f"   (torch._grouped_mm failed: {e})")
        peer = min(res, key=res.get)
        t = res[peer]

        def us(k):
            return f"{res[k] * 1e6:17.2f}" if k in res else f"{'-':>17}"

        print(f"{B:4d}   {us('grouped')} {us('graph')} {us('eager')}   {peer}")
        for k, v in res.items():
            print(f"RESULT torch_ffn_bf16_B{B}_{k}_us_per_expert={v * 1e6:.4g}")
        print(f"RESULT torch_ffn_bf16_B{B}_gbps={expert_bytes / t / 1e9:.4g}")
        print(f"RESULT torch_ffn_bf16_B{B}_us_per_expert={t * 1e6:.4g}")
        for p in ("bf16", "q8", "q4", "q2"):
            key = f"ffn_{p}_B{B}_us_per_expert"
            if key in ours:
                r = t * 1e6 / ours[key]
                print(f"  moem {p:4s} B={B:<3d} {ours[key]:9.2f} us/expert: {r:6.2f}x the peer ({peer})")
                print(f"RESULT ffn_{p}_B{B}_vs_torch={r:.4g}")
    return 0


def onednn_impl(torch, x, w):
    """The oneDNN implementation torch.matmul(x, w.t()) runs, from oneDNN's
    verbose lines on file descriptor 1 (where its C code prints), or None."""
    try:
        with tempfile.TemporaryFile() as f:
            sys.stdout.flush()
            saved = os.dup(1)
            os.dup2(f.fileno(), 1)
            try:
                with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                    torch.matmul(x, w.t())
            finally:
                os.dup2(saved, 1)
                os.close(saved)
            f.seek(0)
            text = f.read().decode(errors="replace")
    except (AttributeError, OSError, RuntimeError):
        return None
    for line in text.splitlines():
        p = line.split(",")
        if len(p) > 4 and p[1] == "exec" and p[3] == "matmul":
            return p[4]
    return None


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
    # What the peer is: Debian's torch reports "CPU capability usage: AVX2"
    # for its own kernels, while its bf16 matmul is oneDNN's, which picks
    # its ISA at run time (AMX where the CPU has it).
    impl = onednn_impl(torch, torch.randn(64, H, dtype=torch.bfloat16), sets[0][0][0])
    print(f"RESULT torch_cpu_version={torch.__version__}")
    if impl:
        print(f"RESULT torch_cpu_matmul_impl={impl}")

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
