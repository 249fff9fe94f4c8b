"""Independent float32 PyTorch reference ("oracle") for `qwen3_moe` models (Qwen3-30B-A3B,
Qwen3-235B-A22B, Qwen3-Coder-480B).

Written from the facts of the Hugging Face transformers `qwen3_moe` modeling code (read for
facts; no code was copied) and independent of strata's C++ code.  Plain torch, float32
throughout; weights are upcast exactly from their stored dtype (the safetensors reader and the
bf16 codec are shared with glm_moe_dsa_ref.py: file format only, no model math).

    model = load_checkpoint(dir)                  # -> Qwen3MoeRef
    out = model.forward(ids)                      # dict: logits [T,V], router_gaps (list)
    ref = compute_reference(model, ids, ...)      # the reference.json payload

The model, per decoder layer (pre-norm residual):
  * x = RMSNorm(h, input_layernorm, rms_norm_eps)
  * q = q_proj(x) as [T, heads, head_dim], k / v = k_proj / v_proj(x) as [T, kv_heads, head_dim]
    (no bias); q and k each RMSNorm'ed over head_dim (self_attn.q_norm / k_norm, rms_norm_eps)
    BEFORE RoPE.
  * RoPE: the rotate_half form (pairs (i, i + head_dim/2)) over the whole head, inv_freq[i] =
    theta^(-2i/head_dim) in float32, positions from 0, no scaling.
  * causal softmax attention, scale head_dim^-0.5; query head h uses kv head h // (heads/kv_heads).
  * h += o_proj(attn);  x = RMSNorm(h, post_attention_layernorm)
  * MoE layer (not in mlp_only_layers and (layer+1) % decoder_sparse_step == 0): router logits
    = gate(x) ([num_experts, hidden], no bias); p = softmax over ALL experts (float32); the top
    num_experts_per_tok by p; renormalised to sum 1 when norm_topk_prob; y = sum_k p_k *
    expert_k(x), expert = down(silu(gate(x)) * up(x)); no shared expert.  Dense layer: the same
    SwiGLU MLP with intermediate_size.
  * h += y.  After the last layer: RMSNorm(model.norm), lm_head (untied).
"""

from __future__ import annotations

import json
import os
from typing import Dict, List

import numpy as np
import torch
import torch.nn.functional as F

import glm_moe_dsa_ref as fmt  # safetensors reader / bf16 codec only


class Config:
    def __init__(self, cfg: dict):
        if cfg.get("model_type") != "qwen3_moe":
            raise ValueError(f"model_type {cfg.get('model_type')!r} is not qwen3_moe")
        self.raw = cfg
        self.vocab_size = int(cfg["vocab_size"])
        self.hidden_size = int(cfg["hidden_size"])
        self.num_layers = int(cfg["num_hidden_layers"])
        self.intermediate_size = int(cfg["intermediate_size"])
        self.moe_intermediate_size = int(cfg["moe_intermediate_size"])
        self.num_experts = int(cfg["num_experts"])
        self.top_k = int(cfg["num_experts_per_tok"])
        self.norm_topk_prob = bool(cfg.get("norm_topk_prob", False))
        self.num_heads = int(cfg["num_attention_heads"])
        self.num_kv_heads = int(cfg["num_key_value_heads"])
        self.head_dim = int(cfg.get("head_dim", self.hidden_size // self.num_heads))
        self.rope_theta = float(cfg.get("rope_theta", 10000.0))
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        step = int(cfg.get("decoder_sparse_step", 1))
        only = set(int(i) for i in cfg.get("mlp_only_layers", []) or [])
        self.is_moe = [(i not in only) and (i + 1) % step == 0 for i in range(self.num_layers)]


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_tables(theta: float, dim: int, T: int):
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim))
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq[None, :]  # [T, dim/2]
    emb = torch.cat((ang, ang), dim=-1)
    return emb.cos(), emb.sin()  # [T, dim]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Qwen3MoeRef:
    def __init__(self, cfg: Config, w: Dict[str, torch.Tensor]):
        self.cfg = cfg
        self.w = w

    def mlp(self, p: str, x: torch.Tensor) -> torch.Tensor:
        w = self.w
        return F.linear(F.silu(F.linear(x, w[p + ".gate_proj.weight"])) * F.linear(x, w[p + ".up_proj.weight"]),
                        w[p + ".down_proj.weight"])

    def forward(self, ids: List[int]) -> dict:
        c, w = self.cfg, self.w
        T = len(ids)
        H, KH, hd = c.num_heads, c.num_kv_heads, c.head_dim
        h = w["model.embed_tokens.weight"][torch.tensor(ids, dtype=torch.long)]
        cos, sin = rope_tables(c.rope_theta, hd, T)
        cos, sin = cos[:, None, :], sin[:, None, :]
        causal = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        gaps = []
        for L in range(c.num_layers):
            p = f"model.layers.{L}"
            x = rmsnorm(h, w[p + ".input_layernorm.weight"], c.eps)
            q = F.linear(x, w[p + ".self_attn.q_proj.weight"]).view(T, H, hd)
            k = F.linear(x, w[p + ".self_attn.k_proj.weight"]).view(T, KH, hd)
            v = F.linear(x, w[p + ".self_attn.v_proj.weight"]).view(T, KH, hd)
            q = rmsnorm(q, w[p + ".self_attn.q_norm.weight"], c.eps)
            k = rmsnorm(k, w[p + ".self_attn.k_norm.weight"], c.eps)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            rep = H // KH
            k = k.repeat_interleave(rep, dim=1)  # query head i -> kv head i // rep
            v = v.repeat_interleave(rep, dim=1)
            s = torch.einsum("thd,shd->hts", q, k) * (hd ** -0.5) + causal
            a = torch.einsum("hts,shd->thd", torch.softmax(s, dim=-1), v).reshape(T, H * hd)
            h = h + F.linear(a, w[p + ".self_attn.o_proj.weight"])
            x = rmsnorm(h, w[p + ".post_attention_layernorm.weight"], c.eps)
            if c.is_moe[L]:
                probs = torch.softmax(F.linear(x, w[p + ".mlp.gate.weight"]), dim=-1)
                srt = probs.sort(dim=-1, descending=True).values
                gaps.extend((srt[:, c.top_k - 1] - srt[:, c.top_k]).tolist())
                topv, topi = probs.topk(c.top_k, dim=-1)
                if c.norm_topk_prob:
                    topv = topv / topv.sum(-1, keepdim=True)
                y = torch.zeros_like(x)
                for t in range(T):
                    for j in range(c.top_k):
                        e = int(topi[t, j])
                        y[t] += topv[t, j] * self.mlp(f"{p}.mlp.experts.{e}", x[t:t + 1])[0]
            else:
                y = self.mlp(p + ".mlp", x)
            h = h + y
        hn = rmsnorm(h, w["model.norm.weight"], c.eps)
        return {"logits": F.linear(hn, w["lm_head.weight"]), "router_gaps": gaps}


def expected_tensor_names(cfg: dict) -> List[str]:
    c = Config(cfg)
    names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    for L in range(c.num_layers):
        p = f"model.layers.{L}"
        names += [p + ".input_layernorm.weight", p + ".post_attention_layernorm.weight"]
        names += [f"{p}.self_attn.{m}.weight" for m in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")]
        if c.is_moe[L]:
            names.append(p + ".mlp.gate.weight")
            for e in range(c.num_experts):
                names += [f"{p}.mlp.experts.{e}.{m}.weight" for m in ("gate_proj", "up_proj", "down_proj")]
        else:
            names += [f"{p}.mlp.{m}.weight" for m in ("gate_proj", "up_proj", "down_proj")]
    return names


def load_checkpoint(ckpt_dir: str) -> Qwen3MoeRef:
    with open(os.path.join(ckpt_dir, "config.json")) as f:
        cfg = json.load(f)
    raw = fmt.read_safetensors(os.path.join(ckpt_dir, "model.safetensors"))
    want = set(expected_tensor_names(cfg))
    if set(raw) != want:
        raise ValueError(f"{ckpt_dir}: tensors differ from the config: missing {sorted(want - set(raw))[:5]}, "
                         f"extra {sorted(set(raw) - want)[:5]}")
    w = {n: torch.from_numpy(fmt.storage_to_f32(dt, a).copy()) for n, (dt, a) in raw.items()}
    return Qwen3MoeRef(Config(cfg), w)


def _top2(logits: torch.Tensor):
    v, i = logits.topk(2, dim=-1)
    return i[:, 0].tolist(), (v[:, 0] - v[:, 1]).tolist()


def compute_reference(model: Qwen3MoeRef, ids: List[int], logit_positions=(0, 17, 39),
                      greedy_prompt_len: int = 8, greedy_new: int = 20) -> dict:
    ids = [int(i) for i in ids]
    o = model.forward(ids)
    gaps = list(o["router_gaps"])
    top1, margin = _top2(o["logits"])
    seq = ids[:greedy_prompt_len]
    gmargins = []
    for _ in range(greedy_new):  # full recompute each step
        og = model.forward(seq)
        gaps += og["router_gaps"]
        t1, m1 = _top2(og["logits"][-1:])
        seq.append(t1[0])
        gmargins.append(m1[0])
    return {
        "ids": ids,
        "top1": top1,
        "top1_margin": margin,
        "logits": {str(p): [float(v) for v in o["logits"][p].numpy().astype(np.float32)] for p in logit_positions},
        "greedy": {"prompt": ids[:greedy_prompt_len], "ids": seq[greedy_prompt_len:], "margins": gmargins},
        "min_router_gap": min(gaps),
        "min_top1_margin": min(margin),
        "min_greedy_margin": min(gmargins),
        "mlp_layer_types": ["sparse" if m else "dense" for m in model.cfg.is_moe],
    }
