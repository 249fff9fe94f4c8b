"""Independent float32 PyTorch reference ("oracle") for `deepseek_v3` models (DeepSeek-V3, R1, V3.1,
Kimi-K2) and `deepseek_v32` (DeepSeek-V3.2: the same plus the DSA indexer).

Written from the facts of the Hugging Face transformers `deepseek_v3` modeling / configuration code
and its YaRN rope parameters (read for facts; no code was copied), independent of strata's C++
code.  Plain torch, float32 throughout; weights are upcast exactly from their stored dtype (the
safetensors reader and the bf16 codec are shared with glm_moe_dsa_ref.py: file format only, no
model math).  The attention is computed in its plain (expanded) form: every key and value
expanded per head from the latent, no absorption.

    model = load_checkpoint(dir)                  # -> DeepseekV3Ref
    out = model.forward(ids)                      # dict: logits [T,V], hidden [T,d] (after
                                                  #   model.norm), mtp_logits [T-1,V] or None,
                                                  #   router_gaps, group_gaps (lists)
    ref = compute_reference(model, ids, ...)      # the reference.json payload

The model, per decoder layer (pre-norm residual):
  * x = RMSNorm(h, input_layernorm, rms_norm_eps)
  * MLA: q = q_b_proj(RMSNorm(q_a_proj(x), q_a_layernorm, 1e-6)) as [T, heads, nope + rope];
    kv = kv_a_proj_with_mqa(x) = [latent (kv_lora_rank) | k_rope (qk_rope_head_dim)];
    k_nope | v = kv_b_proj(RMSNorm(latent, kv_a_layernorm, 1e-6)) per head; k_rope is one
    key shared by every head.
  * RoPE on the rope part of q and of k_rope, rotating ADJACENT pairs (2i, 2i+1) by angle i
    (transformers' rope_interleave, on by default).
  * YaRN (rope_scaling type yarn): with d = qk_rope_head_dim, base = rope_theta,
      extrap[i] = base^(-2i/d), interp[i] = 1 / (factor * base^(2i/d)),
      corr(r) = d * ln(orig / (2 pi r)) / (2 ln base), low = max(floor(corr(beta_fast)), 0),
      high = min(ceil(corr(beta_slow)), d - 1) (high += 0.001 if equal),
      ramp[i] = clamp((i - low) / (high - low), 0, 1), e = 1 - ramp,
      inv_freq = interp * (1 - e) + extrap * e;
      cos / sin multiplied by attention_factor = mscale(f, mscale) / mscale(f, mscale_all_dim)
      (when both are set; else mscale(f, 1)) with mscale(s, m) = 0.1 m ln s + 1 (1 if s <= 1);
      the softmax scale (nope + rope)^-0.5 multiplied by mscale(factor, mscale_all_dim)^2 when
      mscale_all_dim is set.
  * causal softmax attention per head over cat(q_nope, q_rope) . cat(k_nope, k_rope); the
    output [T, heads * v_head_dim] through o_proj.
  * h += attn;  x = RMSNorm(h, post_attention_layernorm)
  * layers < first_k_dense_replace: SwiGLU MLP (intermediate_size).  Others: MoE (noaux_tc)
      s = sigmoid(x @ gate.weight^T) (float32); choice = s + e_score_correction_bias;
      group score = sum of the two best `choice` in each of n_group equal groups; keep the
      topk_group best groups, every expert outside them gets choice 0.0 (a masked fill with
      zero); the num_experts_per_tok best `choice` are the experts; their weights are s (not
      choice), divided by (sum + 1e-20) when norm_topk_prob, times routed_scaling_factor;
      y = sum_k w_k * expert_k(x) + shared_experts(x) (width moe_intermediate_size *
      n_shared_experts).
  * h += y.  After the last layer: RMSNorm(model.norm), lm_head (untied).
  * MTP layer (num_nextn_predict_layers = 1, index num_hidden_layers; transformers does not run
    it): row i = eh_proj(cat(RMSNorm(embed(ids[i+1]), enorm), RMSNorm(hidden[i], hnorm))) with
    hidden after model.norm, then a MoE decoder layer at position i, RMSNorm(shared_head.norm),
    lm_head -> predicts ids[i+2].
  * deepseek_v32 (transformers' DeepseekV32Attention / DeepseekV32Indexer): every layer (the MTP
    layer too) also runs the DSA lightning indexer of glm_moe_dsa_ref.dsa_select on the same x and
    q latent (index_n_heads heads of index_head_dim, LayerNorm'd key, weights_proj * heads^-0.5,
    score = sum_h w_h relu(q_h . k / sqrt(index_head_dim))), with one difference from GLM-5: its
    rope rotates SPLIT HALVES (x[i], x[i + d/2]) of the first qk_rope_head_dim dims (transformers'
    apply_rotary_pos_emb, not the interleaved form MLA uses), with MLA's cos / sin (YaRN and its
    attention factor included).  A query with more than index_topk causal keys attends only to its
    index_topk best-scoring keys.  What is computed is transformers' fp32 form: DeepSeek's own
    inference code also applies a Hadamard rotation to the indexer q / k (orthogonal: the same dot
    products in exact arithmetic) and scores them in FP8 (a kernel precision choice; only rounding,
    which could flip near-ties at the cut: the fixtures record the smallest gap there).
"""

from __future__ import annotations

import json
import math
import os
from typing import Dict, List

import numpy as np
import torch
import torch.nn.functional as F

import glm_moe_dsa_ref as fmt  # safetensors reader / bf16 codec only

LATENT_EPS = 1e-6  # the q_a / kv_a RMSNorms' eps (their module default)


def yarn_mscale(s: float, m: float) -> float:
    return 1.0 if s <= 1.0 else 0.1 * m * math.log(s) + 1.0


class Config:
    def __init__(self, cfg: dict):
        if cfg.get("model_type") not in ("deepseek_v3", "deepseek_v32"):
            raise ValueError(f"model_type {cfg.get('model_type')!r} is not deepseek_v3 / deepseek_v32")
        self.raw = cfg
        self.vocab_size = int(cfg["vocab_size"])
        self.hidden_size = int(cfg["hidden_size"])
        self.num_layers = int(cfg["num_hidden_layers"])
        self.intermediate_size = int(cfg["intermediate_size"])
        self.moe_intermediate_size = int(cfg["moe_intermediate_size"])
        self.num_experts = int(cfg["n_routed_experts"])
        self.top_k = int(cfg["num_experts_per_tok"])
        self.n_shared = int(cfg.get("n_shared_experts", 1))
        self.n_group = int(cfg["n_group"])
        self.topk_group = int(cfg["topk_group"])
        self.norm_topk_prob = bool(cfg.get("norm_topk_prob", True))
        self.routed_scaling = float(cfg["routed_scaling_factor"])
        self.num_heads = int(cfg["num_attention_heads"])
        self.q_lora = int(cfg["q_lora_rank"])
        self.kv_lora = int(cfg["kv_lora_rank"])
        self.nope = int(cfg["qk_nope_head_dim"])
        self.rope = int(cfg["qk_rope_head_dim"])
        self.v_dim = int(cfg["v_head_dim"])
        self.rope_theta = float(cfg.get("rope_theta", 10000.0))
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.max_pos = int(cfg.get("max_position_embeddings", 4096))
        k = int(cfg.get("first_k_dense_replace", 3))
        self.is_moe = [i >= k for i in range(self.num_layers)]
        if cfg.get("mlp_layer_types") is not None:
            self.is_moe = [t == "sparse" for t in cfg["mlp_layer_types"]]
        self.dsa = cfg["model_type"] == "deepseek_v32"
        if self.dsa:
            self.index_n_heads = int(cfg["index_n_heads"])
            self.index_head_dim = int(cfg["index_head_dim"])
            self.index_topk = int(cfg["index_topk"])
            self.index_rope_half = True  # the generator flips it to show that the rope style matters
        self.mtp = int(cfg.get("num_nextn_predict_layers", 0)) > 0
        self.softmax_scale = (self.nope + self.rope) ** -0.5
        rs = cfg.get("rope_scaling") or {}
        self.yarn = (rs.get("rope_type") or rs.get("type")) == "yarn"
        if self.yarn:
            self.factor = float(rs["factor"])
            self.orig = int(rs.get("original_max_position_embeddings") or self.max_pos)
            self.beta_fast = float(rs.get("beta_fast") or 32)
            self.beta_slow = float(rs.get("beta_slow") or 1)
            ms, msa = rs.get("mscale"), rs.get("mscale_all_dim")
            if rs.get("attention_factor") is not None:
                self.attention_factor = float(rs["attention_factor"])
            elif ms and msa:
                self.attention_factor = yarn_mscale(self.factor, ms) / yarn_mscale(self.factor, msa)
            else:
                self.attention_factor = yarn_mscale(self.factor, 1.0)
            if msa:
                m = yarn_mscale(self.factor, msa)
                self.softmax_scale = self.softmax_scale * m * m


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def inv_freq_of(c: Config) -> torch.Tensor:
    d, base = c.rope, c.rope_theta
    pos_freqs = base ** (torch.arange(0, d, 2, dtype=torch.int64).to(torch.float32) / d)
    extrap = 1.0 / pos_freqs
    if not c.yarn:
        return extrap
    interp = 1.0 / (c.factor * pos_freqs)

    def corr(rot: float) -> float:
        return d * math.log(c.orig / (rot * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(corr(c.beta_fast)), 0)
    high = min(math.ceil(corr(c.beta_slow)), d - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    e = 1 - ramp
    return interp * (1 - e) + extrap * e


def rope_tables(c: Config, T: int):
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq_of(c)[None, :]  # [T, d/2]
    cos, sin = ang.cos(), ang.sin()
    if c.yarn:
        cos, sin = cos * c.attention_factor, sin * c.attention_factor
    return cos, sin


def rope_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotates (x[..., 2i], x[..., 2i+1]) by angle i; cos / sin broadcast to [..., d/2]."""
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def _kth_gap(v: torch.Tensor, k: int) -> List[float]:
    """Per row: the k-th best minus the (k+1)-th best value (what decides a top-k)."""
    if k >= v.shape[-1]:
        return []
    srt = v.sort(dim=-1, descending=True).values
    return (srt[:, k - 1] - srt[:, k]).tolist()


class DeepseekV3Ref:
    def __init__(self, cfg: Config, w: Dict[str, torch.Tensor]):
        self.cfg = cfg
        self.w = w
        self.min_choice = float("inf")  # smallest router choice score seen (sigmoid + correction bias)
        self.dense = False  # deepseek_v32: True attends every causal key (no indexer selection)
        self.stats = fmt.Stats()  # deepseek_v32: the indexer's gaps at the top-k cut

    def mlp(self, p: str, x: torch.Tensor) -> torch.Tensor:
        w = self.w
        return F.linear(F.silu(F.linear(x, w[p + ".gate_proj.weight"])) * F.linear(x, w[p + ".up_proj.weight"]),
                        w[p + ".down_proj.weight"])

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

    def attention(self, a: str, x: torch.Tensor, cos, sin) -> torch.Tensor:
        c, w = self.cfg, self.w
        T, H, nope, rd, vd = x.shape[0], c.num_heads, c.nope, c.rope, c.v_dim
        ql = rmsnorm(F.linear(x, w[a + ".q_a_proj.weight"]), w[a + ".q_a_layernorm.weight"], LATENT_EPS)
        q = F.linear(ql, w[a + ".q_b_proj.weight"]).view(T, H, nope + rd)
        kv = F.linear(x, w[a + ".kv_a_proj_with_mqa.weight"])
        lat, k_rope = kv[:, :c.kv_lora], kv[:, c.kv_lora:]
        kvb = F.linear(rmsnorm(lat, w[a + ".kv_a_layernorm.weight"], LATENT_EPS), w[a + ".kv_b_proj.weight"])
        kvb = kvb.view(T, H, nope + vd)
        k_nope, v = kvb[..., :nope], kvb[..., nope:]
        q_rope = rope_pairs(q[..., nope:], cos[:, None, :], sin[:, None, :])
        k_rope = rope_pairs(k_rope, cos, sin)[:, None, :].expand(T, H, rd)
        qf = torch.cat((q[..., :nope], q_rope), -1)
        kf = torch.cat((k_nope, k_rope), -1)
        causal = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        if c.dsa and not self.dense:
            rope = fmt.rope_half if c.index_rope_half else fmt.rope_interleaved
            sel = fmt.dsa_select(lambda n: w[n], a + ".indexer.", x, ql, cos, sin, causal == 0, c.index_n_heads,
                                 c.index_head_dim, rd, c.index_topk, self.stats, rope)
            causal = causal.masked_fill(~sel, float("-inf"))
        sc = torch.einsum("thd,shd->hts", qf, kf) * c.softmax_scale + causal
        o = torch.einsum("hts,shd->thd", torch.softmax(sc, dim=-1), v).reshape(T, H * vd)
        return F.linear(o, w[a + ".o_proj.weight"])

    def layer(self, L: int, h: torch.Tensor, cos, sin, moe: bool, gaps: list, ggaps: list) -> torch.Tensor:
        c, w = self.cfg, self.w
        p = f"model.layers.{L}"
        x = rmsnorm(h, w[p + ".input_layernorm.weight"], c.eps)
        h = h + self.attention(p + ".self_attn", x, cos, sin)
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
        cos, sin = rope_tables(c, T)
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


# The Linear modules a DeepSeek-V3 FP8 checkpoint (quantization_config: fp8, e4m3, block-wise)
# stores as float8_e4m3fn with a float32 `weight_scale_inv` of [ceil(out / block_rows),
# ceil(in / block_cols)]: every attention projection, the dense MLP, the shared and routed
# experts and the MTP layer's eh_proj. Embeddings, lm_head, norms, the router (mlp.gate) and its
# correction bias stay bf16 / f32.
FP8_MODULES = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "gate_proj", "up_proj",
               "down_proj", "eh_proj")
# deepseek_v32 (DeepSeek-V3.2's FP8 checkpoints): the DSA indexer's two projections are FP8 too
# (`self_attn.indexer.wq_b` [heads * head_dim, q_lora] and `self_attn.indexer.wk` [head_dim, hidden],
# each with its weight_scale_inv); its `weights_proj` stays bf16 and its LayerNorm `k_norm` (weight
# and bias) f32.
FP8_INDEXER_MODULES = ("wq_b", "wk")


def is_fp8_weight(name: str) -> bool:
    parts = name.split(".")
    if len(parts) < 3 or parts[-1] != "weight" or parts[0] != "model":
        return False
    if parts[-3] == "indexer":
        return parts[-2] in FP8_INDEXER_MODULES
    return parts[-2] in FP8_MODULES


def is_f32_in_fp8(name: str) -> bool:
    """Tensors an FP8 DeepSeek checkpoint keeps in float32 besides the scales: the router's correction
    bias and (deepseek_v32) the indexer's k_norm weight and bias."""
    return name.endswith("e_score_correction_bias") or ".indexer.k_norm." in name


def released_fp8_quant_config(block=(128, 128)) -> dict:
    """The quantization_config of the DeepSeek-V3 / R1 / V3.1 FP8 checkpoints (block 128 x 128)."""
    return {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": list(block)}


def fp8_block(cfg: dict):
    """(block_rows, block_cols) of an FP8 checkpoint's quantization_config, None when unquantized."""
    q = cfg.get("quantization_config")
    if not q:
        return None
    if q.get("quant_method") != "fp8" or q.get("fmt", "e4m3") != "e4m3":
        raise ValueError(f"quantization_config {q!r} is not block fp8 e4m3")
    return tuple(int(b) for b in q.get("weight_block_size", (128, 128)))


def expected_tensor_names(cfg: dict) -> List[str]:
    """Every tensor of the checkpoint (with the `weight_scale_inv` of each FP8 weight when the
    config has a quantization_config)."""
    names = weight_names(cfg)
    if fp8_block(cfg) is None:
        return names
    return names + [n + "_scale_inv" for n in names if is_fp8_weight(n)]


def weight_names(cfg: dict) -> List[str]:
    c = Config(cfg)
    names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    for L in range(c.num_layers + (1 if c.mtp else 0)):
        p = f"model.layers.{L}"
        a = p + ".self_attn"
        names += [p + ".input_layernorm.weight", p + ".post_attention_layernorm.weight"]
        names += [f"{a}.{m}.weight" for m in ("q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa",
                                             "kv_a_layernorm", "kv_b_proj", "o_proj")]
        if c.dsa:
            names += [f"{a}.indexer.{m}" for m in ("wq_b.weight", "wk.weight", "k_norm.weight", "k_norm.bias",
                                                   "weights_proj.weight")]
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


def load_checkpoint(ckpt_dir: str) -> DeepseekV3Ref:
    with open(os.path.join(ckpt_dir, "config.json")) as f:
        cfg = json.load(f)
    raw = fmt.load_raw_tensors(ckpt_dir)  # model.safetensors or the shards of model.safetensors.index.json
    want = set(expected_tensor_names(cfg))
    if set(raw) != want:
        raise ValueError(f"{ckpt_dir}: tensors differ from the config: missing {sorted(want - set(raw))[:5]}, "
                         f"extra {sorted(set(raw) - want)[:5]}")
    return DeepseekV3Ref(Config(cfg), weights_of(raw, cfg))


def weights_of(raw: dict, cfg: dict) -> Dict[str, torch.Tensor]:
    """fp32 weights of {name: (dtype, stored array)}: bf16 / f32 upcast exactly, FP8 weights
    dequantized as fp8(code) * weight_scale_inv[i // block_rows, j // block_cols]."""
    block = fp8_block(cfg)
    for n, (dt, _) in raw.items():
        if dt == "F8_E4M3" and not is_fp8_weight(n):
            raise ValueError(f"{n} is stored as F8_E4M3 but DeepSeek-V3 keeps it unquantized")
        if block is not None and is_fp8_weight(n) and dt != "F8_E4M3":
            raise ValueError(f"{n} is {dt}, expected F8_E4M3 in an FP8 checkpoint")
    return fmt.raw_to_f32_weights(raw, block or (128, 128))


def _top2(logits: torch.Tensor):
    v, i = logits.topk(2, dim=-1)
    return i[:, 0].tolist(), (v[:, 0] - v[:, 1]).tolist()


def compute_reference(model: DeepseekV3Ref, ids: List[int], logit_positions=(0, 17, 39), mtp_positions=(0, 20),
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
    if model.cfg.dsa:
        st = model.stats
        out["index_selection_active_queries"] = st.selection_active_queries
        out["min_index_topk_gap"] = min(st.topk_gaps)
        out["min_index_topk_rel_gap"] = min(st.topk_rel_gaps)
    if o["mtp_logits"] is not None:
        mtop1, mmargin = _top2(o["mtp_logits"])
        out["mtp_top1"] = mtop1
        out["mtp_top1_margin"] = mmargin
        out["mtp_logits"] = {str(p): [float(v) for v in o["mtp_logits"][p].numpy().astype(np.float32)]
                             for p in mtp_positions}
        out["min_mtp_top1_margin"] = min(mmargin)
    return out
