#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only
"""The PyTorch peer of the decode benchmark: a qwen3_moe checkpoint (the
directory `moem mkmodel` writes) decoded greedily in bf16 with a KV cache,
the way Hugging Face's eager Qwen3MoeForCausalLM does it: RMSNorm in float,
per-head q/k norms, rotate-half RoPE, grouped-query attention through
scaled_dot_product_attention, softmax top-k routing and a loop over the
experts the batch routed to (Qwen3MoeSparseMoeBlock). All experts are on
the device: this is the all-resident peer, not an offloading one.

usage: torch_decode.py CKPT_DIR --prompts FILE --max-new N [--device cuda|cpu]
  FILE: one prompt a line, token ids separated by commas, all of one length.
Prints one JSON line: prompt_tokens_per_s (prompt tokens over the prefill,
first token included), decode_tokens_per_s (the other tokens over the time
after the first), median_decode_step_ms, the tokens of each sequence, the
device and the torch version. The same definitions as `moem decode --json`.
"""
import argparse
import json
import os
import struct
import sys
import time

import torch

torch.set_grad_enabled(False)


def load(ckpt, dev):
    with open(os.path.join(ckpt, "config.json")) as f:
        c = json.load(f)
    if c["model_type"] != "qwen3_moe":
        sys.exit(f"torch_decode.py: {c['model_type']}: only qwen3_moe is written here")
    w = {}
    with open(os.path.join(ckpt, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        base = 8 + n
        for name, h in hdr.items():
            if name == "__metadata__":
                continue
            if h["dtype"] != "BF16":
                sys.exit(f"torch_decode.py: {name}: dtype {h['dtype']}, expected BF16")
            a, b = h["data_offsets"]
            f.seek(base + a)
            t = torch.frombuffer(bytearray(f.read(b - a)), dtype=torch.bfloat16)
            w[name] = t.reshape(h["shape"]).to(dev)
    return c, w


def rms(x, wt, eps):
    dt = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return wt * x.to(dt)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


class Model:
    def __init__(self, c, w, batch, max_len, dev):
        self.c, self.w, self.dev = c, w, dev
        self.L = c["num_hidden_layers"]
        self.NH, self.NKV = c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = c.get("head_dim") or c["hidden_size"] // self.NH
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.E, self.K = c["num_experts"], c["num_experts_per_tok"]
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, self.hd, 2, dtype=torch.float32,
                                                      device=dev) / self.hd))
        f = torch.outer(torch.arange(max_len, dtype=torch.float32, device=dev), inv)
        emb = torch.cat((f, f), -1)
        self.cos, self.sin = emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)
        shape = (batch, self.NKV, max_len, self.hd)
        self.kc = [torch.zeros(shape, dtype=torch.bfloat16, device=dev) for _ in range(self.L)]
        self.vc = [torch.zeros(shape, dtype=torch.bfloat16, device=dev) for _ in range(self.L)]
        self.sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)

    def attn(self, l, h, pos):
        B, n, _ = h.shape
        w, a = self.w, f"model.layers.{l}.self_attn."
        q = (h @ w[a + "q_proj.weight"].T).view(B, n, self.NH, self.hd)
        k = (h @ w[a + "k_proj.weight"].T).view(B, n, self.NKV, self.hd)
        v = (h @ w[a + "v_proj.weight"].T).view(B, n, self.NKV, self.hd)
        q = rms(q, w[a + "q_norm.weight"], self.eps).transpose(1, 2)
        k = rms(k, w[a + "k_norm.weight"], self.eps).transpose(1, 2)
        v = v.transpose(1, 2)
        cos, sin = self.cos[pos:pos + n], self.sin[pos:pos + n]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        self.kc[l][:, :, pos:pos + n] = k
        self.vc[l][:, :, pos:pos + n] = v
        kk, vv = self.kc[l][:, :, :pos + n], self.vc[l][:, :, :pos + n]
        rep = self.NH // self.NKV
        kk, vv = kk.repeat_interleave(rep, 1), vv.repeat_interleave(rep, 1)
        if self.sdpa is not None:
            o = self.sdpa(q, kk, vv, is_causal=n > 1)
        else:  # torch < 2.0: the same arithmetic by hand
            s = (q @ kk.transpose(-1, -2)).float() * self.hd ** -0.5
            if n > 1:
                m = torch.ones(n, pos + n, dtype=torch.bool, device=self.dev).tril(pos)
                s = s.masked_fill(~m, float("-inf"))
            o = torch.softmax(s, -1).to(q.dtype) @ vv
        o = o.transpose(1, 2).reshape(B, n, -1)
        return o @ w[a + "o_proj.weight"].T

    def moe(self, l, h):
        w, p = self.w, f"model.layers.{l}.mlp."
        shape = h.shape
        h = h.reshape(-1, shape[-1])
        z = h @ w[p + "gate.weight"].T
        probs = torch.softmax(z, -1, dtype=torch.float)
        tw, ti = torch.topk(probs, self.K, -1)
        if self.c.get("norm_topk_prob"):
            tw = tw / tw.sum(-1, keepdim=True)
        tw = tw.to(h.dtype)
        out = torch.zeros_like(h)
        mask = torch.nn.functional.one_hot(ti, self.E).permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for e in hit.flatten().tolist():
            idx, top = torch.where(mask[e])
            x = h[top]
            e_ = p + f"experts.{e}."
            y = torch.nn.functional.silu(x @ w[e_ + "gate_proj.weight"].T) * \
                (x @ w[e_ + "up_proj.weight"].T)
            y = (y @ w[e_ + "down_proj.weight"].T) * tw[top, idx, None]
            out.index_add_(0, top, y)
        return out.view(shape)

    def forward(self, ids, pos):
        w = self.w
        x = w["model.embed_tokens.weight"][ids]
        for l in range(self.L):
            p = f"model.layers.{l}."
            x = x + self.attn(l, rms(x, w[p + "input_layernorm.weight"], self.eps), pos)
            x = x + self.moe(l, rms(x, w[p + "post_attention_layernorm.weight"], self.eps))
        x = rms(x[:, -1], w["model.norm.weight"], self.eps)
        head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
        return (x @ head.T).float()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--max-new", type=int, required=True)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    if a.max_new < 2:
        sys.exit("torch_decode.py: --max-new must be at least 2")
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_decode.py: torch has no CUDA device here")
    with open(a.prompts) as f:
        prompts = [[int(t) for t in ln.split(",")] for ln in f if ln.strip()]
    P = len(prompts[0])
    if not prompts or any(len(p) != P for p in prompts):
        sys.exit("torch_decode.py: the prompts must all be of one length")
    c, w = load(a.ckpt, dev)
    B = len(prompts)
    m = Model(c, w, B, P + a.max_new, dev)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    ids = torch.tensor(prompts, device=dev)
    # Warm-up (cuBLAS handles, kernels' first loads) on a throwaway pass.
    m.forward(ids, 0)
    sync()
    t0 = time.perf_counter()
    tok = m.forward(ids, 0).argmax(-1)
    out = [tok]
    sync()
    t1 = time.perf_counter()
    steps = []
    for i in range(1, a.max_new):
        s = time.perf_counter()
        tok = m.forward(tok.view(B, 1), P + i - 1).argmax(-1)
        out.append(tok)
        sync()
        steps.append(time.perf_counter() - s)
    t2 = time.perf_counter()
    toks = torch.stack(out, 1).tolist()
    steps.sort()
    print(json.dumps({
        "peer": "pytorch",
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "batch": B,
        "prompt_tokens": B * P,
        "prompt_tokens_per_s": B * P / (t1 - t0),
        "decode_tokens_per_s": B * (a.max_new - 1) / (t2 - t1),
        "median_decode_step_ms": steps[len(steps) // 2] * 1e3,
        "sequences": [{"tokens": t} for t in toks],
    }))


if __name__ == "__main__":
    main()
