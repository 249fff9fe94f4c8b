"""Independent float32 PyTorch reference ("oracle") for `glm4_moe` models (GLM-4.5, GLM-4.6,
GLM-4.7, GLM-4.5-Air).

Written from the facts of the Hugging Face transformers `glm4_moe` modeling and configuration
code (read for facts; no code was copied) and independent of strata's C++ code.  Plain torch,
float32 throughout; weights are upcast exactly from their stored dtype (the safetensors reader
and the bf16 codec are shared with glm_moe_dsa_ref.py: file format only, no model math).

    model = load_checkpoint(dir)                  # -> Glm4MoeRef
    out = model.forward(ids)                      # dict: logits [T,V], hidden [T,d] (after
                                                  #   model.norm), mtp_logits [T-1,V] or None,
                                                  #   router_gaps, group_gaps (lists)
    ref = compute_reference(model, ids, ...)      # the reference.json payload

The model, per decoder layer (pre-norm residual):
  * x = RMSNorm(h, input_layernorm, rms_norm_eps)
  * q = q_proj(x) as [T, heads, head_dim], k / v = k_proj / v_proj(x) as [T, kv_heads, head_dim];
    q_proj / k_proj / v_proj carry a bias when attention_bias (o_proj never does).
  * use_qk_norm: q and k each RMSNorm'ed over the whole head_dim (self_attn.q_norm / k_norm) BEFORE
    RoPE.  v is never normed.
  * partial RoPE: rotary_dim = int(head_dim * partial_rotary_factor); only the FIRST rotary_dim
    dims of each q / k head rotate, in the rotate_half form WITHIN those dims (pairs (i, i +
    rotary_dim/2)); inv_freq[i] = theta^(-2i/rotary_dim) in float32; dims rotary_dim.. pass
    through unchanged.  Positions from 0, no scaling.
  * causal softmax attention, scale head_dim^-0.5; query head h uses kv head h // (heads/kv_heads).
  * h += o_proj(attn);  x = RMSNorm(h, post_attention_layernorm)
  * layers < first_k_dense_replace: SwiGLU MLP (intermediate_size).  Others: MoE
      s = sigmoid(x @ gate.weight^T) (float32); choice = s + e_score_correction_bias;
      group score = sum of the two best `choice` in each of n_group equal groups; keep the
      topk_group best groups, every expert outside them gets choice 0.0 (a masked fill with
      zero, not -inf); the num_experts_per_tok best `choice` are the experts; their weights are
      s (not choice), divided by (sum + 1e-20) when norm_topk_prob, times routed_scaling_factor;
      y = sum_k w_k * expert_k(x) + shared_experts(x) (a SwiGLU MLP of width
      moe_intermediate_size * n_shared_experts).
  * h += y.  After the last layer: RMSNorm(model.norm), lm_head (untied).
  * MTP layer (num_nextn_predict_layers = 1, index num_hidden_layers; transformers does not run
    it, the layout is the DeepSeek-V3 one GLM-5 shares): row i = eh_proj(cat(RMSNorm(embed(
    ids[i+1]), enorm), RMSNorm(hidden[i], hnorm))) with hidden after model.norm, then a MoE
    decoder layer at position i, RMSNorm(shared_head.norm), lm_head -> predicts ids[i+2].
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
        if cfg.get("model_type") != "glm4_moe":
            raise ValueError(f"model_type {cfg.get('model_type')!r} is not glm4_moe")
        self.raw = cfg
        self.vocab_size = int(cfg["vocab_size"])
        self.hidden_size = int(cfg["hidden_size"])
        self.num_layers = int(cfg["num_hidden_layers"])
        self.intermediate_size = int(cfg["intermediate_size"])
        self.moe_intermediate_size = int(cfg["moe_intermediate_size"])
        self.num_experts = int(cfg["n_routed_experts"])
        self.top_k = int(cfg["num_experts_per_tok"])
        self.n_shared = int(cfg.get("n_shared_experts", 1))
        self.n_group = int(cfg.get("n_group", 1))
        self.topk_group = int(cfg.get("topk_group", 1))
        self.norm_topk_prob = bool(cfg.get("norm_topk_prob", True))
        self.routed_scaling = float(cfg.get("routed_scaling_factor", 1.0))
        self.num_heads = int(cfg["num_attention_heads"])
        self.num_kv_heads = int(cfg["num_key_value_heads"])
        self.head_dim = int(cfg.get("head_dim") or self.hidden_size // self.num_heads)
        factor = float(cfg.get("partial_rotary_factor", 0.5))
        self.rotary_dim = int(self.head_dim * factor)
        self.attention_bias = bool(cfg.get("attention_bias", False))
        self.qk_norm = bool(cfg.get("use_qk_norm", False))
        self.rope_theta = float(cfg.get("rope_theta", 10000.0))
        self.eps = float(cfg.get("rms_norm_eps", 1e-5))
        k = int(cfg.get("first_k_dense_replace", 1))
        self.is_moe = [i >= k for i in range(self.num_layers)]
        self.mtp = int(cfg.get("num_nextn_predict_layers", 0)) > 0


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


def partial_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rd: int) -> torch.Tensor:
    xr, xp = x[..., :rd], x[..., rd:]
    return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)


def _kth_gap(v: torch.Tensor, k: int) -> List[float]:
    """Per row: the k-th best minus the (k+1)-th best value (what decides a top-k)."""
    if k >= v.shape[-1]:
        return []
    srt = v.sort(dim=-1, descending=True).values
    return (srt[:, k - 1] - srt[:, k]).tolist()


class Glm4MoeRef:
    def __init__(self, cfg: Config, w: Dict[str, torch.Tensor]):
        self.cfg = cfg
        self.w = w
        self.min_choice = float("inf")  # smallest router choice score seen (sigmoid + correction bias)

    def mlp(self, p: str, x: torch.Tensor) -> torch.Tensor:
        w = self.w
        return F.linear(F.silu(F.linear(x, w[p + ".gate_proj.weight"])) * F.linear(x, w[p + ".up_proj.weight"]),
                        w[p + ".down_proj.weight"])

    def lin(self, x: torch.Tensor, name: str, bias: bool) -> torch.Tensor:
        return F.linear(x, self.w[name + ".weight"], self.w[name + ".bias"] if bias else None)

    def moe(self, p: str, x: torch.Tensor, gaps: list, ggaps: list) -> torch.Tensor:
        c, w = self.cfg, self.w
        T, E, G = x.shape[0], c.num_experts, c.n_group
        s = torch.sigmoid(F.linear(x, w[p + ".mlp.gate.weight"]))
        choice = s + w[p + ".mlp.gate.e_score_correction_bias"]
        # Masking experts outside the kept groups with 0.0 (transformers) or -inf (strata) picks the
        # same experts while every choice score is positive: recorded so a fixture can assert it.
        self.min_choice = min(self.min_choice, float(choice.min()))
        gs = choice.view(T, G, E // G).topk(2, dim=-1).values.sum(-1)  # [T, G]
        ggaps.extend(_kth_gap(gs, c.topk_group))
        gidx = gs.topk(c.topk_group, dim=-1).indices
        gmask = torch.zeros_like(gs).scatter_(1, gidx, 1.0)
        emask = gmask[:, :, None].expand(T, G, E // G).reshape(T, E)
        masked = choice.masked_fill(emask == 0, 0.0)
        gaps.extend(_kth_gap(masked, c.top_k))
        idx = masked.topk(c.top_k, dim=-1).indices
        wts = s.gather(1, idx)
        if c.norm_topk_prob:
            wts = wts / (wts.sum(-1, keepdim=True) + 1e-20)
        wts = wts * c.routed_scaling
        y = torch.zeros_like(x)
        for t in range(T):
            for j in range(c.top_k):
                e = int(idx[t, j])
                y[t] += wts[t, j] * self.mlp(f"{p}.mlp.experts.{e}", x[t:t + 1])[0]
        return y + self.mlp(p + ".mlp.shared_experts", x)

    def layer(self, L: int, h: torch.Tensor, cos, sin, moe: bool, gaps: list, ggaps: list) -> torch.Tensor:
        c, w = self.cfg, self.w
        T = h.shape[0]
        H, KH, hd, rd = c.num_heads, c.num_kv_heads, c.head_dim, c.rotary_dim
        p = f"model.layers.{L}"
        a = p + ".self_attn"
        x = rmsnorm(h, w[p + ".input_layernorm.weight"], c.eps)
        q = self.lin(x, a + ".q_proj", c.attention_bias).view(T, H, hd)
        k = self.lin(x, a + ".k_proj", c.attention_bias).view(T, KH, hd)
        v = self.lin(x, a + ".v_proj", c.attention_bias).view(T, KH, hd)
        if c.qk_norm:
            q = rmsnorm(q, w[a + ".q_norm.weight"], c.eps)
            k = rmsnorm(k, w[a + ".k_norm.weight"], c.eps)
        q = partial_rope(q, cos, sin, rd)
        k = partial_rope(k, cos, sin, rd)
        rep = H // KH
        k = k.repeat_interleave(rep, dim=1)  # query head i -> kv head i // rep
        v = v.repeat_interleave(rep, dim=1)
        causal = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        sc = torch.einsum("thd,shd->hts", q, k) * (hd ** -0.5) + causal
        o = torch.einsum("hts,shd->thd", torch.softmax(sc, dim=-1), v).reshape(T, H * hd)
        h = h + F.linear(o, w[a + ".o_proj.weight"])
        x = rmsnorm(h, w[p + ".post_attention_layernorm.weight"], c.eps)
        y = self.moe(p, x, gaps, ggaps) if moe else self.mlp(p + ".mlp", x)
        return h + y

    @torch.no_grad()
    def forward(self, ids: List[int], mtp: bool = True) -> dict:
        c, w = self.cfg, self.w
        T = len(ids)
        idt = torch.tensor(ids, dtype=torch.long)
        emb = w["model.embed_tokens.weight"]
        h = emb[idt]
        cos, sin = rope_tables(c.rope_theta, c.rotary_dim, T)
        cos, sin = cos[:, None, :], sin[:, None, :]
        gaps, ggaps = [], []
        for L in range(c.num_layers):
            h = self.layer(L, h, cos, sin, c.is_moe[L], gaps, ggaps)
        hn = rmsnorm(h, w["model.norm.weight"], c.eps)
        logits = F.linear(hn, w["lm_head.weight"])
        mtp_logits = None
        if mtp and c.mtp and T >= 2:
            N = c.num_layers
            p = f"model.layers.{N}"
            e = rmsnorm(emb[idt[1:]], w[p + ".enorm.weight"], c.eps)
            hh = rmsnorm(hn[:-1], w[p + ".hnorm.weight"], c.eps)
            u = F.linear(torch.cat((e, hh), -1), w[p + ".eh_proj.weight"])
            g = self.layer(N, u, cos[:T - 1], sin[:T - 1], True, gaps, ggaps)
            mtp_logits = F.linear(rmsnorm(g, w[p + ".shared_head.norm.weight"], c.eps), w["lm_head.weight"])
        return {"logits": logits, "hidden": hn, "mtp_logits": mtp_logits, "router_gaps": gaps, "group_gaps": ggaps}


def expected_tensor_names(cfg: dict) -> List[str]:
    c = Config(cfg)
    names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    for L in range(c.num_layers + (1 if c.mtp else 0)):
        p = f"model.layers.{L}"
        names += [p + ".input_layernorm.weight", p + ".post_attention_layernorm.weight"]
        names += [f"{p}.self_attn.{m}.weight" for m in ("q_proj", "k_proj", "v_proj", "o_proj")]
        if c.attention_bias:
            names += [f"{p}.self_attn.{m}.bias" for m in ("q_proj", "k_proj", "v_proj")]
        if c.qk_norm:
            names += [f"{p}.self_attn.{m}.weight" for m in ("q_norm", "k_norm")]
        if L >= c.num_layers or c.is_moe[L]:
            names += [p + ".mlp.gate.weight", p + ".mlp.gate.e_score_correction_bias"]
            for e in range(c.num_experts):
                names += [f"{p}.mlp.experts.{e}.{m}.weight" for m in ("gate_proj", "up_proj", "down_proj")]
            names += [f"{p}.mlp.shared_experts.{m}.weight" for m in ("gate_proj", "up_proj", "down_proj")]
        else:
            names += [f"{p}.mlp.{m}.weight" for m in ("gate_proj", "up_proj", "down_proj")]
        if L >= c.num_layers:
            names += [p + ".enorm.weight", p + ".hnorm.weight", p + ".eh_proj.weight", p + ".shared_head.norm.weight"]
    return names


def load_checkpoint(ckpt_dir: str) -> Glm4MoeRef:
    with open(os.path.join(ckpt_dir, "config.json")) as f:
        cfg = json.load(f)
    raw = fmt.read_safetensors(os.path.join(ckpt_dir, "model.safetensors"))
    want = set(expected_tensor_names(cfg))
    if set(raw) != want:
        raise ValueError(f"{ckpt_dir}: tensors differ from the config: missing {sorted(want - set(raw))[:5]}, "
                         f"extra {sorted(set(raw) - want)[:5]}")
    w = {n: torch.from_numpy(fmt.storage_to_f32(dt, a).copy()) for n, (dt, a) in raw.items()}
    return Glm4MoeRef(Config(cfg), w)


def _top2(logits: torch.Tensor):
    v, i = logits.topk(2, dim=-1)
    return i[:, 0].tolist(), (v[:, 0] - v[:, 1]).tolist()


def compute_reference(model: Glm4MoeRef, ids: List[int], logit_positions=(0, 17, 39), mtp_positions=(0, 20),
                      greedy_prompt_len: int = 8, greedy_new: int = 20) -> dict:
    ids = [int(i) for i in ids]
    o = model.forward(ids)
    gaps, ggaps = list(o["router_gaps"]), list(o["group_gaps"])
    top1, margin = _top2(o["logits"])
    seq = ids[:greedy_prompt_len]
    gmargins = []
    for _ in range(greedy_new):  # full recompute each step
        og = model.forward(seq, mtp=False)
        gaps += og["router_gaps"]
        ggaps += og["group_gaps"]
        t1, m1 = _top2(og["logits"][-1:])
        seq.append(t1[0])
        gmargins.append(m1[0])
    out = {
        "ids": ids,
        "top1": top1,
        "top1_margin": margin,
        "logits": {str(p): [float(v) for v in o["logits"][p].numpy().astype(np.float32)] for p in logit_positions},
        "greedy": {"prompt": ids[:greedy_prompt_len], "ids": seq[greedy_prompt_len:], "margins": gmargins},
        "min_router_gap": min(gaps),
        "min_group_gap": min(ggaps) if ggaps else None,
        "min_choice_score": model.min_choice,
        "min_top1_margin": min(margin),
        "min_greedy_margin": min(gmargins),
        "mlp_layer_types": ["sparse" if m else "dense" for m in model.cfg.is_moe],
    }
    if o["mtp_logits"] is not None:
        mtop1, mmargin = _top2(o["mtp_logits"])
        out["mtp_top1"] = mtop1
        out["mtp_top1_margin"] = mmargin
        out["mtp_logits"] = {str(p): [float(v) for v in o["mtp_logits"][p].numpy().astype(np.float32)]
                             for p in mtp_positions}
        out["min_mtp_top1_margin"] = min(mmargin)
    return out
