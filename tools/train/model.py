"""Trainable glm_moe_dsa (GLM-5 architecture) in PyTorch, for training the strata default model.

Same math as the fp32 oracle tests/reference/glm_moe_dsa_ref.py (its rmsnorm / rope_interleaved /
rope_tables are imported, not re-implemented); parameters are named exactly like the Hugging Face
checkpoint tensors, so `state_dict()` maps 1:1 onto model.safetensors (MTP layer = model.layers.N).

Differences from the oracle are training-only:
  * batched [B, T] inputs;
  * the DSA indexer is fed DETACHED inputs (x, q_lat) and trained only through an auxiliary
    KL(main attention || indexer) loss, as in DeepSeek-V3.2's indexer training; the top-k mask is
    non-differentiable.  `dense=True` (warm-up) = attention over all causal keys, indexer still trained;
  * MoE routing returns per-expert token counts for aux-loss-free bias balancing (DeepSeek-V3).
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "reference"))
from glm_moe_dsa_ref import Config, rmsnorm, rope_interleaved, rope_tables  # noqa: E402


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return rmsnorm(x, self.weight, self.eps)


def lin(i, o):
    return nn.Linear(i, o, bias=False)


class MLP(nn.Module):
    def __init__(self, d, inter):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = lin(d, inter), lin(d, inter), lin(inter, d)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Router(nn.Module):
    def __init__(self, d, E):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(E, d))
        self.register_buffer("e_score_correction_bias", torch.zeros(E))


class MoE(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.gate = Router(c.hidden_size, c.n_routed_experts)
        self.experts = nn.ModuleList(MLP(c.hidden_size, c.moe_intermediate_size) for _ in range(c.n_routed_experts))
        if c.n_shared_experts > 0:
            self.shared_experts = MLP(c.hidden_size, c.moe_intermediate_size * c.n_shared_experts)

    def route(self, x):
        c = self.c
        s = torch.sigmoid(x.float() @ self.gate.weight.float().t())
        choice = (s + self.gate.e_score_correction_bias).detach()
        assert c.n_group == 1
        idx = choice.topk(c.num_experts_per_tok, dim=-1).indices
        wts = s.gather(1, idx)
        if c.norm_topk_prob:
            wts = wts / (wts.sum(-1, keepdim=True) + 1e-20)
        return idx, wts * c.routed_scaling_factor

    def forward(self, x, aux):
        shp = x.shape
        x = x.reshape(-1, shp[-1])
        E, K = self.c.n_routed_experts, self.c.num_experts_per_tok
        idx, wts = self.route(x)
        flat = idx.reshape(-1)
        order = torch.argsort(flat)
        tok = order // K
        counts = torch.bincount(flat, minlength=E)
        if aux is not None:
            aux.setdefault("load", []).append(counts)
        xs = x[tok]
        outs, st = [], 0
        for e, n in enumerate(counts.tolist()):
            if n:
                outs.append(self.experts[e](xs[st:st + n]))
                st += n
        out = torch.cat(outs) * wts.reshape(-1)[order][:, None]
        y = torch.zeros_like(x).index_add_(0, tok, out)
        if self.c.n_shared_experts > 0:
            y = y + self.shared_experts(x)
        return y.reshape(shp)


class Indexer(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.wq_b = lin(c.q_lora_rank, c.index_n_heads * c.index_head_dim)
        self.wk = lin(c.hidden_size, c.index_head_dim)
        self.k_norm = nn.LayerNorm(c.index_head_dim, eps=1e-6)
        self.weights_proj = lin(c.hidden_size, c.index_n_heads)

    def forward(self, x, q_lat, cos, sin):
        """x [B,T,d], q_lat [B,T,q_lora] -> scores [B,T(query),T(key)] (not causally masked)."""
        c = self.c
        B, T, _ = x.shape
        nH, D, dr = c.index_n_heads, c.index_head_dim, c.qk_rope_head_dim
        q = self.wq_b(q_lat).view(B, T, nH, D)
        q = torch.cat((rope_interleaved(q[..., :dr], cos[:, None, :], sin[:, None, :]), q[..., dr:]), -1)
        k = self.k_norm(self.wk(x))
        k = torch.cat((rope_interleaved(k[..., :dr], cos, sin), k[..., dr:]), -1)
        w = self.weights_proj(x) * (nH ** -0.5)
        dots = torch.einsum("bshd,btd->bsht", q, k) * (D ** -0.5)
        return (F.relu(dots) * w[..., None]).sum(2)


class Attention(nn.Module):
    def __init__(self, c: Config, has_indexer: bool):
        super().__init__()
        self.c = c
        H = c.num_heads
        self.q_a_proj = lin(c.hidden_size, c.q_lora_rank)
        self.q_a_layernorm = RMSNorm(c.q_lora_rank, 1e-6)
        self.q_b_proj = lin(c.q_lora_rank, H * (c.qk_nope_head_dim + c.qk_rope_head_dim))
        self.kv_a_proj_with_mqa = lin(c.hidden_size, c.kv_lora_rank + c.qk_rope_head_dim)
        self.kv_a_layernorm = RMSNorm(c.kv_lora_rank, 1e-6)
        self.kv_b_proj = lin(c.kv_lora_rank, H * (c.qk_nope_head_dim + c.v_head_dim))
        self.o_proj = lin(H * c.v_head_dim, c.hidden_size)
        if has_indexer:
            self.indexer = Indexer(c)

    def forward(self, x, cos, sin, prev_sel, dense, aux, mask=None):
        """mask (optional, bool [T(query), T(key)]): the keys each row may see instead of the causal
        triangle (the MTP chain's rows, see GlmMoeDsaForCausalLM.mtp_chain)."""
        c = self.c
        B, T, _ = x.shape
        H, dn, dr, dv, R = c.num_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank
        q_lat = self.q_a_layernorm(self.q_a_proj(x))
        q = self.q_b_proj(q_lat).view(B, T, H, dn + dr)
        kv = self.kv_a_proj_with_mqa(x)
        c_kv, k_pe = kv[..., :R], kv[..., R:]
        cl = self.kv_a_layernorm(c_kv)
        q_pe = rope_interleaved(q[..., dn:], cos[:, None, :], sin[:, None, :])
        k_pe = rope_interleaved(k_pe, cos, sin)
        kvu = self.kv_b_proj(cl).view(B, T, H, dn + dv)
        k_nope, v = kvu[..., :dn], kvu[..., dn:]
        S = (torch.einsum("bshd,bthd->bhst", q[..., :dn], k_nope)
             + torch.einsum("bshd,btd->bhst", q_pe, k_pe)) * ((dn + dr) ** -0.5)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril() if mask is None else mask
        sel = prev_sel
        if hasattr(self, "indexer"):
            kk = min(c.index_topk, T)
            # rows [0, kl_rows) feed the indexer KL loss (with grad, indexer params only); the others
            # only need the selection (no grad), and not at all in dense mode.
            kl_rows = min(aux.get("idx_rows", B), B) if (aux is not None and torch.is_grad_enabled()) else 0
            parts = []
            if kl_rows > 0:
                sc = self.indexer(x[:kl_rows].detach(), q_lat[:kl_rows].detach(), cos, sin)
                sc = sc.masked_fill(~causal, float("-inf"))
                # DeepSeek-V3.2-style indexer loss: KL(p_main || softmax(indexer scores)), p_main = head-mean
                # of the causal (dense) main attention distribution, detached.
                with torch.no_grad():
                    p = torch.softmax(S[:kl_rows].masked_fill(~causal, float("-inf")), -1).mean(1)  # [b,T,T]
                logq = torch.log_softmax(sc, -1).masked_fill(~causal, 0.0)
                kl = (p * (torch.log(p.clamp_min(1e-12)) - logq)).masked_fill(~causal, 0.0).sum(-1).mean()
                aux.setdefault("idx_kl", []).append(kl)
                parts.append(sc.detach())
            if not dense:
                if kl_rows < B:
                    with torch.no_grad():
                        parts.append(self.indexer(x[kl_rows:], q_lat[kl_rows:], cos, sin).masked_fill(~causal, float("-inf")))
                score = torch.cat(parts) if len(parts) > 1 else parts[0]
                top = score.topk(kk, dim=-1).indices
                sel = torch.zeros(B, T, T, dtype=torch.bool, device=x.device).scatter_(2, top, True)
        if dense:
            allowed = causal.expand(B, T, T)
        else:
            allowed = causal & sel
        S = S.masked_fill(~allowed[:, None], float("-inf"))
        A = torch.softmax(S, dim=-1)
        O = torch.einsum("bhst,bthd->bshd", A, v).reshape(B, T, H * dv)
        return self.o_proj(O), sel


class DecoderLayer(nn.Module):
    def __init__(self, c: Config, moe: bool, has_indexer: bool, mtp: bool = False):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c, has_indexer)
        self.mlp = MoE(c) if moe else MLP(c.hidden_size, c.intermediate_size)
        self.is_moe = moe
        if mtp:
            self.enorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
            self.hnorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
            self.eh_proj = lin(2 * c.hidden_size, c.hidden_size)
            self.shared_head = nn.Module()
            self.shared_head.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, h, cos, sin, prev_sel, dense, aux, mask=None):
        a, sel = self.self_attn(self.input_layernorm(h), cos, sin, prev_sel, dense, aux, mask)
        h = h + a
        x = self.post_attention_layernorm(h)
        f = self.mlp(x, aux) if self.is_moe else self.mlp(x)
        return h + f, sel


class Inner(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        layers = [DecoderLayer(c, c.mlp_layer_types[i] == "sparse", c.indexer_types[i] == "full")
                  for i in range(c.num_hidden_layers)]
        if c.num_nextn_predict_layers > 0:
            layers.append(DecoderLayer(c, True, True, mtp=True))
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class GlmMoeDsaForCausalLM(nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        self.config = config
        self.c = c = Config(config)
        self.model = Inner(c)
        self.lm_head = lin(c.hidden_size, c.vocab_size)
        self.init_weights()

    def init_weights(self, std=0.02):
        c = self.c
        for n, p in self.named_parameters():
            if n.endswith("norm.weight"):
                nn.init.ones_(p)
            elif n.endswith("k_norm.bias"):
                nn.init.zeros_(p)
            else:
                s = std
                if n.endswith(("o_proj.weight", "down_proj.weight")):
                    s = std / math.sqrt(2 * (c.num_hidden_layers + 1))
                nn.init.normal_(p, 0.0, s)

    def forward(self, ids, dense=False, mtp=True, aux=None, frozen_trunk=False, mtp_depth=1):
        """ids [B,T] long.  Returns (logits [B,T,V], hn [B,T,d], mtp_logits [B,T-1,V] or None);
        row i of mtp_logits predicts ids[:, i+2].  frozen_trunk: the main model (embedding, layers,
        final norm, lm_head) runs without autograd and without aux, so aux only collects the MTP
        layer's load and indexer KL (MTP-only training).  mtp_depth > 1: aux["mtp_chain"] holds the
        logits of every depth of the chained MTP layer (mtp_chain)."""
        c = self.c
        B, T = ids.shape
        cos, sin = rope_tables(c.rope_theta, c.qk_rope_head_dim, torch.arange(T))
        with torch.set_grad_enabled(torch.is_grad_enabled() and not frozen_trunk):
            trunk_aux = None if frozen_trunk else aux
            h = self.model.embed_tokens(ids)
            sel = None
            for L in range(c.num_hidden_layers):
                h, sel = self.model.layers[L](h, cos, sin, sel, dense, trunk_aux)
            hn = self.model.norm(h)
            logits = self.lm_head(hn)
        mtp_logits = None
        if mtp and c.num_nextn_predict_layers > 0 and T >= 2:
            chain = self.mtp_chain(ids, hn, cos, sin, dense, aux, mtp_depth)
            mtp_logits = chain[0]
            if aux is not None and mtp_depth > 1:
                aux["mtp_chain"] = chain
        return logits, hn, mtp_logits

    def mtp_chain(self, ids, hn, cos, sin, dense, aux, depth):
        """The MTP layer chained on its own output, exactly as a speculative drafter runs it.  The chain
        that starts at position r: depth 1 feeds the main model's hn[r] with token ids[r+1] at position r;
        depth m feeds depth m-1's output (after shared_head.norm) with token ids[r+m] at position r+m-1
        and predicts ids[r+m+1].  Its attention sees what the drafter's MTP cache holds then: the depth-1
        rows of positions <= r and the chain's own rows of depths 2..m.  Returns one logits tensor per
        depth; depth m's row r is the chain that starts at r (rows 0 .. T-1-m)."""
        T = ids.shape[1]
        lay = self.model.layers[self.c.num_hidden_layers]
        h_in = hn[:, :-1]
        us, out = [], []
        for d in range(depth):
            if T - 1 - d < 1:
                break
            e = lay.enorm(self.model.embed_tokens(ids[:, 1 + d:]))
            us.append(lay.eh_proj(torch.cat((e, lay.hnorm(h_in)), -1)))
            lens = [u.shape[1] for u in us]
            dep = torch.cat([torch.full((n,), m + 1) for m, n in enumerate(lens)])
            row = torch.cat([torch.arange(n) for n in lens])
            pos = row + dep - 1
            mask = (((dep[None] == 1) & (row[None] <= row[:, None]))
                    | ((dep[None] >= 2) & (dep[None] <= dep[:, None]) & (row[None] == row[:, None])))
            g, _ = lay(torch.cat(us, 1), cos[pos], sin[pos], None, dense, aux, mask)
            s = lay.shared_head.norm(g[:, -lens[-1]:])
            out.append(self.lm_head(s))
            h_in = s[:, :-1]
        return out

    def moe_layers(self):
        return [l.mlp for l in self.model.layers if l.is_moe]

    def mtp_prefix(self):
        """Name prefix of the MTP layer's parameters (model.layers.{num_hidden_layers}.)."""
        return f"model.layers.{self.c.num_hidden_layers}."


def make_config(vocab_size, eos_ids, pad_id, **over):
    cfg = {
        "architectures": ["GlmMoeDsaForCausalLM"],
        "model_type": "glm_moe_dsa",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "dtype": "bfloat16",
        "torch_dtype": "bfloat16",
        "eos_token_id": list(eos_ids),
        "pad_token_id": pad_id,
        "ep_size": 1,
        "first_k_dense_replace": 1,
        "hidden_act": "silu",
        "hidden_size": 256,
        "index_head_dim": 64,
        "index_n_heads": 16,
        "index_topk": 64,
        "indexer_rope_interleave": True,
        "initializer_range": 0.02,
        "intermediate_size": 768,
        "kv_lora_rank": 64,
        "max_position_embeddings": 4096,
        "moe_intermediate_size": 192,
        "moe_layer_freq": 1,
        "n_group": 1,
        "n_routed_experts": 16,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": 8,
        "num_experts_per_tok": 4,
        "num_hidden_layers": 6,
        "num_key_value_heads": 8,
        "num_nextn_predict_layers": 1,
        "pretraining_tp": 1,
        "q_lora_rank": 128,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16,
        "rms_norm_eps": 1e-05,
        "rope_interleave": True,
        "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "tie_word_embeddings": False,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "transformers_version": "5.0.2.dev0",
        "use_cache": True,
        "v_head_dim": 32,
        "vocab_size": vocab_size,
    }
    cfg.update(over)
    cfg["qk_head_dim"] = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    cfg["head_dim"] = cfg["qk_rope_head_dim"]
    return dict(sorted(cfg.items()))
