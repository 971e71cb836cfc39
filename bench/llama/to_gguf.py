#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only
"""Write a qwen3_moe Hugging Face checkpoint (config.json + safetensors,
sharded or not; classic per-expert or transformers-5 fused expert tensors)
as a GGUF file llama.cpp loads, for the llama.cpp peer benchmark and the
logits cross-check.

Keys and tensor names are those of llama.cpp's own conversion
(convert_hf_to_gguf.py, Qwen3MoeModel, and gguf-py's constants for
MODEL_ARCH.QWEN3MOE): general.architecture "qwen3moe", qwen3moe.* hyper-
parameters, token_embd / output_norm / output and blk.N.{attn_norm,
attn_q, attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm, ffn_norm,
ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps}; the experts of a
layer stacked into one [E, rows, cols] tensor each. As there, 1-D tensors,
norms and the router (ffn_gate_inp) are F32 and the rest OUTTYPE. The
synthetic models have no tokenizer: tokenizer.ggml.model is "none" with
qwen3moe.vocab_size, which llama.cpp reads as that many placeholder
tokens (token ids in, logits out).

usage: to_gguf.py CKPT_DIR OUT.gguf f32|bf16
"""
import json
import os
import struct
import sys

import numpy as np

GGUF_ALIGN = 32
T_F32, T_BF16 = 0, 30
V_U32, V_F32, V_STRING = 4, 6, 8


def read_safetensors(ckpt):
    """name -> (dtype, shape, memmap'd bytes)."""
    idx = os.path.join(ckpt, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        path = os.path.join(ckpt, fn)
        mm = np.memmap(path, dtype=np.uint8, mode="r")
        n = struct.unpack("<Q", bytes(mm[:8]))[0]
        hdr = json.loads(bytes(mm[8:8 + n]))
        for name, t in hdr.items():
            if name == "__metadata__":
                continue
            a, b = t["data_offsets"]
            out[name] = (t["dtype"], tuple(t["shape"]), mm[8 + n + a:8 + n + b])
    return out


def as_f32(t):
    dtype, shape, raw = t
    if dtype == "BF16":
        u = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
        return u.view(np.float32).reshape(shape)
    if dtype == "F16":
        return np.frombuffer(raw, dtype=np.float16).astype(np.float32).reshape(shape)
    if dtype == "F32":
        return np.frombuffer(raw, dtype=np.float32).reshape(shape)
    raise SystemExit(f"to_gguf: dtype {dtype} not handled")


def as_bf16(t):
    """bf16 bits as uint16 (exact for bf16 sources; round to nearest even else)."""
    if t[0] == "BF16":
        return np.frombuffer(t[2], dtype=np.uint16).reshape(t[1])
    u = as_f32(t).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


class Writer:
    def __init__(self):
        self.kv = []
        self.tensors = []  # (name, ne (gguf order), type, source callable, nbytes)

    def key(self, k, vtype, v):
        self.kv.append((k, vtype, v))

    def tensor(self, name, shape, ttype, make):
        n = int(np.prod(shape))
        nbytes = n * (4 if ttype == T_F32 else 2)
        self.tensors.append((name, list(reversed(shape)), ttype, make, nbytes))

    @staticmethod
    def _str(s):
        b = s.encode()
        return struct.pack("<Q", len(b)) + b

    def write(self, path):
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)))
            for k, vt, v in self.kv:
                f.write(self._str(k) + struct.pack("<I", vt))
                if vt == V_U32:
                    f.write(struct.pack("<I", v))
                elif vt == V_F32:
                    f.write(struct.pack("<f", v))
                else:
                    f.write(self._str(v))
            off = 0
            for name, ne, tt, _, nb in self.tensors:
                f.write(self._str(name) + struct.pack("<I", len(ne)))
                f.write(struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", tt, off))
                off += (nb + GGUF_ALIGN - 1) // GGUF_ALIGN * GGUF_ALIGN
            f.write(b"\0" * (-f.tell() % GGUF_ALIGN))
            for name, ne, tt, make, nb in self.tensors:
                a = make()
                a = np.ascontiguousarray(a.astype(np.float32 if tt == T_F32 else np.uint16))
                assert a.nbytes == nb, name
                f.write(a.tobytes())
                f.write(b"\0" * (-nb % GGUF_ALIGN))
        os.replace(tmp, path)


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in ("f32", "bf16"):
        raise SystemExit(__doc__)
    ckpt, out, outtype = sys.argv[1:]
    with open(os.path.join(ckpt, "config.json")) as f:
        c = json.load(f)
    if c.get("model_type") != "qwen3_moe":
        raise SystemExit("to_gguf: only qwen3_moe checkpoints")
    if c.get("mlp_only_layers") or c.get("decoder_sparse_step", 1) != 1:
        raise SystemExit("to_gguf: only all-MoE checkpoints (no dense layers)")
    st = read_safetensors(ckpt)
    big = T_F32 if outtype == "f32" else T_BF16
    L, E = c["num_hidden_layers"], c["num_experts"]
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    w = Writer()
    a = "qwen3moe"
    w.key("general.architecture", V_STRING, a)
    w.key("general.name", V_STRING, "moem synthetic qwen3_moe")
    w.key(f"{a}.block_count", V_U32, L)
    w.key(f"{a}.context_length", V_U32, c["max_position_embeddings"])
    w.key(f"{a}.embedding_length", V_U32, c["hidden_size"])
    w.key(f"{a}.feed_forward_length", V_U32, c.get("intermediate_size", 0))
    w.key(f"{a}.attention.head_count", V_U32, c["num_attention_heads"])
    w.key(f"{a}.attention.head_count_kv", V_U32, c["num_key_value_heads"])
    w.key(f"{a}.attention.key_length", V_U32, hd)
    w.key(f"{a}.attention.value_length", V_U32, hd)
    w.key(f"{a}.rope.freq_base", V_F32, float(c.get("rope_theta", 1e6)))
    w.key(f"{a}.attention.layer_norm_rms_epsilon", V_F32, float(c["rms_norm_eps"]))
    w.key(f"{a}.expert_count", V_U32, E)
    w.key(f"{a}.expert_used_count", V_U32, c["num_experts_per_tok"])
    w.key(f"{a}.expert_feed_forward_length", V_U32, c["moe_intermediate_size"])
    w.key(f"{a}.vocab_size", V_U32, c["vocab_size"])
    w.key("tokenizer.ggml.model", V_STRING, "none")
    if c.get("rope_scaling"):
        raise SystemExit("to_gguf: rope_scaling is not converted")
    if not c.get("norm_topk_prob", True):
        raise SystemExit("to_gguf: llama.cpp's qwen3moe always normalises the top-k weights")

    def one(hf, gg, force_f32=False):
        t = st[hf]
        tt = T_F32 if force_f32 or len(t[1]) == 1 else big
        w.tensor(gg, t[1], tt, (lambda: as_f32(t)) if tt == T_F32 else (lambda: as_bf16(t)))

    def experts(l, which, rows, cols):
        fused = f"model.layers.{l}.mlp.experts.gate_up_proj"
        conv = as_f32 if big == T_F32 else as_bf16
        if which == "down" and f"model.layers.{l}.mlp.experts.down_proj" in st:
            t = st[f"model.layers.{l}.mlp.experts.down_proj"]
            return t[1], lambda: conv(t)
        if which != "down" and fused in st:
            t = st[fused]
            half = t[1][1] // 2
            sl = slice(0, half) if which == "gate" else slice(half, 2 * half)
            return (t[1][0], half, t[1][2]), lambda: conv(t)[:, sl, :]
        names = [f"model.layers.{l}.mlp.experts.{e}.{which}_proj.weight" for e in range(E)]
        return (E, rows, cols), lambda: np.stack([conv(st[n]) for n in names])

    H, I = c["hidden_size"], c["moe_intermediate_size"]
    one("model.embed_tokens.weight", "token_embd.weight")
    for l in range(L):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        one(p + "input_layernorm.weight", b + "attn_norm.weight", True)
        for hf, gg in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                       ("o_proj", "attn_output")):
            one(p + f"self_attn.{hf}.weight", b + f"{gg}.weight")
        one(p + "self_attn.q_norm.weight", b + "attn_q_norm.weight", True)
        one(p + "self_attn.k_norm.weight", b + "attn_k_norm.weight", True)
        one(p + "post_attention_layernorm.weight", b + "ffn_norm.weight", True)
        one(p + "mlp.gate.weight", b + "ffn_gate_inp.weight", True)
        for which, rows, cols, gg in (("gate", I, H, "ffn_gate_exps"), ("up", I, H, "ffn_up_exps"),
                                      ("down", H, I, "ffn_down_exps")):
            shape, make = experts(l, which, rows, cols)
            w.tensor(b + gg + ".weight", shape, big, make)
    one("model.norm.weight", "output_norm.weight", True)
    if c.get("tie_word_embeddings"):
        one("model.embed_tokens.weight", "output.weight")
    else:
        one("lm_head.weight", "output.weight")
    w.write(out)


if __name__ == "__main__":
    main()
