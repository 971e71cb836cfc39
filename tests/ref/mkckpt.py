#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only
"""Tiny random Hugging Face checkpoints (config.json + model.safetensors in
the real HF layout and names) of qwen3_moe, mixtral, olmoe and deepseek_v2,
written here without moem, for the reference test (tests/ref/check.sh).

usage: mkckpt.py VARIANT OUTDIR SEED
"""
import json
import os
import struct
import sys

import torch

H, NH, NKV, HD, V, E, K, I = 64, 4, 2, 16, 256, 8, 2, 32

VARIANTS = {
    "qwen3_moe": dict(model_type="qwen3_moe", num_experts=E, moe_intermediate_size=I,
                      intermediate_size=128, decoder_sparse_step=1, norm_topk_prob=True,
                      head_dim=HD, mlp_only_layers=[], use_sliding_window=False,
                      rope_theta=1000000.0, rms_norm_eps=1e-6, num_hidden_layers=3,
                      eos_token_id=None),
    "mixtral_swa": dict(model_type="mixtral", num_local_experts=E, intermediate_size=I,
                        sliding_window=12, rope_theta=1000000.0, rms_norm_eps=1e-5,
                        num_hidden_layers=2, eos_token_id=None),
    "olmoe": dict(model_type="olmoe", num_experts=E, intermediate_size=I, norm_topk_prob=False,
                  clip_qkv=1.5, rope_theta=10000.0, rms_norm_eps=1e-5, num_hidden_layers=2,
                  eos_token_id=None, tie_word_embeddings=True),
    "deepseek_v2_yarn": dict(model_type="deepseek_v2", n_routed_experts=E,
                             moe_intermediate_size=I, intermediate_size=96, n_shared_experts=1,
                             first_k_dense_replace=1, moe_layer_freq=1, norm_topk_prob=False,
                             routed_scaling_factor=2.0, topk_method="greedy",
                             scoring_func="softmax", q_lora_rank=48, kv_lora_rank=32,
                             qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                             rope_theta=10000.0, rms_norm_eps=1e-6, num_hidden_layers=3,
                             max_position_embeddings=1024,
                             rope_scaling=dict(type="yarn", factor=40.0,
                                               original_max_position_embeddings=16,
                                               beta_fast=32, beta_slow=1, mscale=0.707,
                                               mscale_all_dim=0.707),
                             eos_token_id=None),
    # DeepSeek-V2 (236B) style: group-limited routing, scaled weights
    "deepseek_v2_groups": dict(model_type="deepseek_v2", n_routed_experts=16,
                               num_experts_per_tok=3, moe_intermediate_size=I,
                               intermediate_size=96, n_shared_experts=2, first_k_dense_replace=1,
                               moe_layer_freq=1, norm_topk_prob=False, routed_scaling_factor=16.0,
                               topk_method="group_limited_greedy", n_group=4, topk_group=2,
                               scoring_func="softmax", q_lora_rank=48, kv_lora_rank=32,
                               qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                               rope_theta=10000.0, rms_norm_eps=1e-6, num_hidden_layers=3,
                               rope_scaling=None, eos_token_id=None),
    "deepseek_v2_lite": dict(model_type="deepseek_v2", n_routed_experts=E,
                             moe_intermediate_size=I, intermediate_size=96, n_shared_experts=2,
                             first_k_dense_replace=1, moe_layer_freq=1, norm_topk_prob=True,
                             routed_scaling_factor=1.0, topk_method="greedy",
                             scoring_func="softmax", q_lora_rank=None, kv_lora_rank=32,
                             qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                             rope_theta=10000.0, rms_norm_eps=1e-6, num_hidden_layers=2,
                             rope_scaling=None, eos_token_id=None),
}


def config(variant):
    c = dict(hidden_size=H, num_attention_heads=NH, num_key_value_heads=NKV,
             num_experts_per_tok=K, vocab_size=V, hidden_act="silu", torch_dtype="bfloat16",
             max_position_embeddings=512, tie_word_embeddings=False, attention_bias=False)
    c.update(VARIANTS[variant])
    if c["model_type"] == "deepseek_v2":
        c["num_key_value_heads"] = NH
    return c


def tensors(c, g):
    def rnd(*shape, std):
        return (torch.randn(*shape, generator=g) * std).to(torch.bfloat16)

    def norm(n):
        return (1.0 + 0.2 * torch.randn(n, generator=g)).to(torch.bfloat16)

    t = {}
    arch = c["model_type"]
    L = c["num_hidden_layers"]
    t["model.embed_tokens.weight"] = rnd(V, H, std=1.0)
    for l in range(L):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = norm(H)
        t[p + "post_attention_layernorm.weight"] = norm(H)
        a = p + "self_attn."
        if arch == "deepseek_v2":
            qd = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
            r, rd = c["kv_lora_rank"], c["qk_rope_head_dim"]
            if c["q_lora_rank"]:
                t[a + "q_a_proj.weight"] = rnd(c["q_lora_rank"], H, std=H ** -0.5)
                t[a + "q_a_layernorm.weight"] = norm(c["q_lora_rank"])
                t[a + "q_b_proj.weight"] = rnd(NH * qd, c["q_lora_rank"],
                                               std=c["q_lora_rank"] ** -0.5)
            else:
                t[a + "q_proj.weight"] = rnd(NH * qd, H, std=H ** -0.5)
            t[a + "kv_a_proj_with_mqa.weight"] = rnd(r + rd, H, std=H ** -0.5)
            t[a + "kv_a_layernorm.weight"] = norm(r)
            t[a + "kv_b_proj.weight"] = rnd(NH * (c["qk_nope_head_dim"] + c["v_head_dim"]), r,
                                            std=r ** -0.5)
            t[a + "o_proj.weight"] = rnd(H, NH * c["v_head_dim"], std=0.5 * H ** -0.5)
        else:
            t[a + "q_proj.weight"] = rnd(NH * HD, H, std=H ** -0.5)
            t[a + "k_proj.weight"] = rnd(NKV * HD, H, std=H ** -0.5)
            t[a + "v_proj.weight"] = rnd(NKV * HD, H, std=H ** -0.5)
            t[a + "o_proj.weight"] = rnd(H, NH * HD, std=0.5 * H ** -0.5)
            if arch == "qwen3_moe":
                t[a + "q_norm.weight"] = norm(HD)
                t[a + "k_norm.weight"] = norm(HD)
            if arch == "olmoe":
                t[a + "q_norm.weight"] = norm(NH * HD)
                t[a + "k_norm.weight"] = norm(NKV * HD)
        dense = arch == "deepseek_v2" and l < c["first_k_dense_replace"]
        blk = p + ("block_sparse_moe." if arch == "mixtral" else "mlp.")
        names = ("w1", "w3", "w2") if arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")

        def mlp(prefix, inter):
            t[prefix + names[0] + ".weight"] = rnd(inter, H, std=H ** -0.5)
            t[prefix + names[1] + ".weight"] = rnd(inter, H, std=H ** -0.5)
            t[prefix + names[2] + ".weight"] = rnd(H, inter, std=0.5 * inter ** -0.5)
        if dense:
            mlp(p + "mlp.", c["intermediate_size"])
            continue
        ne = c.get("n_routed_experts") or c.get("num_experts") or c["num_local_experts"]
        t[blk + "gate.weight"] = rnd(ne, H, std=2.0 * H ** -0.5)
        for e in range(ne):
            mlp(blk + f"experts.{e}.", I)
        if arch == "deepseek_v2":
            mlp(p + "mlp.shared_experts.", I * c["n_shared_experts"])
    t["model.norm.weight"] = norm(H)
    if not c.get("tie_word_embeddings"):
        t["lm_head.weight"] = rnd(V, H, std=0.6)
    return t


def write_safetensors(path, t):
    header, off, blobs = {}, 0, []
    for name in sorted(t):
        b = t[name].contiguous().view(torch.int16).numpy().tobytes()
        header[name] = dict(dtype="BF16", shape=list(t[name].shape),
                            data_offsets=[off, off + len(b)])
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    variant, out, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    os.makedirs(out, exist_ok=True)
    c = config(variant)
    g = torch.Generator().manual_seed(seed)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=1, sort_keys=True)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors(c, g))


if __name__ == "__main__":
    main()
