"""Independent float32 PyTorch reference ("oracle") for `glm_moe_dsa` (GLM-5 / 5.1 / 5.2) models.

Written from the spec in docs/glm5-architecture.md (shared docs) and checked against the public
Hugging Face `glm_moe_dsa` / `deepseek_v32` modeling code for facts; no code was copied.

Everything is computed in float32.  Weights are upcast exactly from their stored dtype
(bf16 / f16 / f32 / float8_e4m3fn * weight_scale_inv).  The naive (non-absorbed) MLA form is used.

Public API (other tools import this module):

    model = load_checkpoint(dir)                  # -> GlmMoeDsaRef
    out = model.forward(ids, dense=False)         # dict: logits [T,V], hidden [T,d] (after model.norm),
                                                  #       mtp_logits [T-1,V] (row i predicts ids[i+2]),
                                                  #       stats (selection / routing gaps)
    logits, hn, mtp = model(ids)                  # same, as a tuple
    ref = compute_reference(model, ids, ...)      # the reference.json payload

Also exported: safetensors reader/writer (`read_safetensors`, `write_safetensors`), bf16 and
float8_e4m3fn codecs (`f32_to_bf16_bits`, `bf16_bits_to_f32`, `f32_to_fp8_e4m3fn`,
`fp8_e4m3fn_to_f32`) and the block quantizer (`quantize_fp8_block`).

Conventions (see the module comments for the why):
  * RMSNorm in fp32; q_a_layernorm / kv_a_layernorm eps = 1e-6 (HF builds them with the class
    default), all other RMSNorms use config.rms_norm_eps.
  * RoPE: interleaved (GPT-J, adjacent pairs), inv_freq[i] = theta^(-2i/qk_rope_head_dim), positions
    from 0, no YaRN / mscale.  MLA: rope dims are the LAST qk_rope_head_dim dims of each q head and
    k_pe = last qk_rope_head_dim of kv_a_proj_with_mqa.  Indexer: rope dims are the FIRST
    qk_rope_head_dim dims of each index-q head and of kI.
  * DSA: causal mask applied to the indexer scores BEFORE top-k; attention mask = causal AND selected;
    the same selection for all heads; "shared" layers reuse the selection of the most recent full
    layer; the MTP layer always runs its own indexer.
  * MoE: sigmoid scores, bias for choice only, group-limited choice with excluded groups at -inf
    (as HF GlmMoeDsa / DeepseekV32 routers and the DeepSeek reference `Gate`; some older
    DeepseekV3 ports mask with 0.0 instead -- `compute_reference` asserts every chosen biased
    score is > 0 so both conventions pick the same experts on the fixtures).
"""

from __future__ import annotations

import json
import math
import os
import struct
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------------------------------
# Numeric formats
# ----------------------------------------------------------------------------------------------


def f32_to_bf16_bits(a) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), round-to-nearest-even (NaN -> 0x7fc0)."""
    a = np.ascontiguousarray(np.asarray(a, dtype=np.float32))
    u = a.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    r[np.isnan(a)] = 0x7FC0
    return r


def bf16_bits_to_f32(b) -> np.ndarray:
    b = np.asarray(b, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)


def round_to_bf16(a) -> np.ndarray:
    """float32 values rounded (RNE) to the nearest bf16, returned as float32."""
    return bf16_bits_to_f32(f32_to_bf16_bits(a))


def _fp8_e4m3fn_table() -> np.ndarray:
    vals = np.zeros(256, dtype=np.float64)
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 0xF, c & 0x7
        if e == 0xF and m == 0x7:
            v = float("nan")
        elif e == 0:
            v = m * 2.0 ** -9  # subnormal: m/8 * 2^(1-7)
        else:
            v = (1.0 + m / 8.0) * 2.0 ** (e - 7)
        vals[c] = -v if s else v
    return vals


FP8_E4M3FN_TABLE = _fp8_e4m3fn_table()  # float64, index = code
FP8_E4M3FN_MAX = 448.0
_FP8_POS = FP8_E4M3FN_TABLE[:127]  # codes 0x00..0x7e, strictly increasing, 0 .. 448


def fp8_e4m3fn_to_f32(codes) -> np.ndarray:
    return FP8_E4M3FN_TABLE[np.asarray(codes, dtype=np.uint8)].astype(np.float32)


def f32_to_fp8_e4m3fn(x) -> np.ndarray:
    """float32 -> float8_e4m3fn codes (uint8): round-to-nearest-even, saturating at +-448
    (the format has no inf), NaN -> 0x7f / 0xff, subnormals supported."""
    x = np.asarray(x, dtype=np.float32).astype(np.float64)
    sign = np.signbit(x)
    a = np.minimum(np.abs(x), FP8_E4M3FN_MAX)
    hi = np.searchsorted(_FP8_POS, a, side="left")  # _FP8_POS[hi-1] < a <= _FP8_POS[hi]
    hi = np.clip(hi, 0, 126)
    lo = np.clip(hi - 1, 0, 126)
    d_lo = a - _FP8_POS[lo]
    d_hi = _FP8_POS[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))  # tie -> even code (mantissa LSB 0)
    code = np.where(pick_hi, hi, lo).astype(np.uint8)
    code = np.where(a == _FP8_POS[hi], hi, code).astype(np.uint8)
    code = code | np.where(sign, 0x80, 0).astype(np.uint8)
    nan = np.isnan(x)
    code[nan] = np.where(sign[nan], 0xFF, 0x7F).astype(np.uint8)
    return code


def quantize_fp8_block(w: np.ndarray, block=(128, 128)) -> Tuple[np.ndarray, np.ndarray]:
    """Block-wise FP8 quantization as in the GLM-5-FP8 / DeepSeek checkpoints.
    Returns (codes uint8 [out,in], scale_inv float32 [ceil(out/bo), ceil(in/bi)]) with
    scale = amax(|block|)/448 and W ~= fp8(code) * scale (scale is multiplied when dequantizing)."""
    w = np.asarray(w, dtype=np.float32)
    out_f, in_f = w.shape
    bo, bi = block
    nbo, nbi = -(-out_f // bo), -(-in_f // bi)
    scale = np.zeros((nbo, nbi), dtype=np.float32)
    codes = np.zeros((out_f, in_f), dtype=np.uint8)
    for i in range(nbo):
        for j in range(nbi):
            blk = w[i * bo:(i + 1) * bo, j * bi:(j + 1) * bi]
            amax = np.float32(np.abs(blk).max())
            s = np.float32(amax / np.float32(FP8_E4M3FN_MAX))
            if s == 0:
                s = np.float32(1.0)
            scale[i, j] = s
            codes[i * bo:(i + 1) * bo, j * bi:(j + 1) * bi] = f32_to_fp8_e4m3fn(
                (blk / s).astype(np.float32))
    return codes, scale


def dequantize_fp8_block(codes: np.ndarray, scale_inv: np.ndarray, block=(128, 128)) -> np.ndarray:
    """W[i,j] = fp8(codes[i,j]) * scale_inv[i // bo, j // bi] (float32 multiply)."""
    bo, bi = block
    out_f, in_f = codes.shape
    assert scale_inv.shape == (-(-out_f // bo), -(-in_f // bi)), (codes.shape, scale_inv.shape)
    s = np.repeat(np.repeat(scale_inv.astype(np.float32), bo, axis=0), bi, axis=1)[:out_f, :in_f]
    return (fp8_e4m3fn_to_f32(codes) * s).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# safetensors (own implementation; no `safetensors` package needed)
# ----------------------------------------------------------------------------------------------

_ST_NP = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F8_E4M3": np.uint8,
          "I64": np.int64, "I32": np.int32, "U8": np.uint8, "F64": np.float64}


def read_safetensors(path: str) -> Dict[str, Tuple[str, np.ndarray]]:
    """Returns {name: (dtype_string, raw numpy array)}; BF16 comes back as uint16 bits and
    F8_E4M3 as uint8 codes."""
    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen].decode("utf-8"))
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        if dt not in _ST_NP:
            raise ValueError(f"{path}: unsupported dtype {dt} for {name}")
        b0, b1 = info["data_offsets"]
        npdt = np.dtype(_ST_NP[dt]).newbyteorder("<")
        arr = np.frombuffer(data, dtype=npdt, count=(b1 - b0) // npdt.itemsize, offset=base + b0)
        out[name] = (dt, arr.reshape(info["shape"]).copy())
    return out


def write_safetensors(path: str, tensors: Dict[str, Tuple[str, np.ndarray]],
                      metadata: Optional[Dict[str, str]] = None) -> int:
    """tensors: {name: (dtype_string, numpy array in the storage representation)}.
    Tensors are laid out in sorted-name order.  Returns the number of tensor-data bytes."""
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        dt, arr = tensors[name]
        npdt = np.dtype(_ST_NP[dt]).newbyteorder("<")
        arr = np.ascontiguousarray(arr)
        assert arr.dtype.itemsize == npdt.itemsize and arr.dtype.kind == npdt.kind, (name, dt, arr.dtype)
        b = arr.astype(npdt, copy=False).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata is not None:
        header = {"__metadata__": metadata, **header}
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((-len(hb)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)
    return off


def storage_to_f32(dt: str, arr: np.ndarray) -> np.ndarray:
    if dt == "BF16":
        return bf16_bits_to_f32(arr)
    if dt == "F8_E4M3":
        return fp8_e4m3fn_to_f32(arr)
    if dt in ("F32", "F16", "F64"):
        return arr.astype(np.float32)
    raise ValueError(dt)


# ----------------------------------------------------------------------------------------------
# Config
# ----------------------------------------------------------------------------------------------


def indexer_types_from_config(cfg: dict) -> List[str]:
    """Per-layer 'full' / 'shared' (HF GlmMoeDsaConfig.__post_init__ / vLLM rule)."""
    n = cfg["num_hidden_layers"]
    if cfg.get("indexer_types") is not None:
        types = list(cfg["indexer_types"])
    elif cfg.get("index_topk_pattern") is not None:
        pat = cfg["index_topk_pattern"]
        types = [{"F": "full", "S": "shared"}[c] for c in pat] if isinstance(pat, str) else list(pat)
    else:
        freq = max(cfg.get("index_topk_freq", 1) or 1, 1)
        offset = cfg.get("index_skip_topk_offset", 2)
        if offset is None:
            offset = 2
        types = ["full" if (max(i - offset + 1, 0) % freq) == 0 else "shared" for i in range(n)]
    assert len(types) == n, (len(types), n)
    assert types[0] == "full", "a shared layer needs a preceding full layer"
    return types


class Config:
    def __init__(self, cfg: dict):
        self.raw = cfg
        g = cfg.get
        self.vocab_size = cfg["vocab_size"]
        self.hidden_size = cfg["hidden_size"]
        self.num_hidden_layers = cfg["num_hidden_layers"]
        self.intermediate_size = cfg["intermediate_size"]
        self.moe_intermediate_size = cfg["moe_intermediate_size"]
        self.first_k_dense_replace = g("first_k_dense_replace", 0)
        self.n_routed_experts = cfg["n_routed_experts"]
        self.num_experts_per_tok = cfg["num_experts_per_tok"]
        self.n_shared_experts = g("n_shared_experts", 0) or 0
        self.n_group = g("n_group", 1) or 1
        self.topk_group = g("topk_group", 1) or 1
        self.norm_topk_prob = bool(g("norm_topk_prob", True))
        self.routed_scaling_factor = float(g("routed_scaling_factor", 1.0))
        self.num_heads = cfg["num_attention_heads"]
        self.q_lora_rank = cfg["q_lora_rank"]
        self.kv_lora_rank = cfg["kv_lora_rank"]
        self.qk_nope_head_dim = cfg["qk_nope_head_dim"]
        self.qk_rope_head_dim = cfg["qk_rope_head_dim"]
        self.v_head_dim = cfg["v_head_dim"]
        self.rms_norm_eps = float(g("rms_norm_eps", 1e-6))
        rp = g("rope_parameters") or {}
        theta = rp.get("rope_theta", g("rope_theta"))
        assert theta is not None, "rope_theta missing"
        self.rope_theta = float(theta)
        rtype = rp.get("rope_type", (g("rope_scaling") or {}).get("rope_type", "default"))
        assert rtype in ("default", None), f"rope_type {rtype} not supported by this reference"
        assert g("rope_interleave", True) is not False, "reference implements interleaved MLA RoPE only"
        assert g("indexer_rope_interleave", True) is not False, "reference implements interleaved indexer RoPE only"
        self.index_n_heads = cfg["index_n_heads"]
        self.index_head_dim = cfg["index_head_dim"]
        self.index_topk = cfg["index_topk"]
        self.indexer_types = indexer_types_from_config(cfg)
        mlp_types = g("mlp_layer_types")
        if mlp_types is None:
            mlp_types = ["dense" if i < self.first_k_dense_replace else "sparse"
                         for i in range(self.num_hidden_layers)]
        self.mlp_layer_types = list(mlp_types)
        self.num_nextn_predict_layers = g("num_nextn_predict_layers", 0) or 0
        assert not g("tie_word_embeddings", False), "reference expects an untied lm_head"
        assert g("scoring_func", "sigmoid") == "sigmoid"
        assert not g("attention_bias", False)
        qc = g("quantization_config") or {}
        self.fp8_block = tuple(qc.get("weight_block_size", (128, 128)))


# ----------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """GPT-J / adjacent-pair rotary embedding on the last dim of x; output kept interleaved.
    cos/sin: [..., d/2], broadcastable against x[..., 0::2]."""
    x1 = x[..., 0::2]
    x2 = x[..., 1::2]
    y1 = x1 * cos - x2 * sin
    y2 = x1 * sin + x2 * cos
    return torch.stack((y1, y2), dim=-1).flatten(-2)


def rope_tables(theta: float, dim: int, positions: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    ang = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # [T, dim/2]
    return torch.cos(ang), torch.sin(ang)


class Stats:
    """Robustness diagnostics gathered during a forward."""

    def __init__(self):
        self.topk_gaps: List[float] = []       # k-th minus (k+1)-th indexer score (selection active)
        self.topk_rel_gaps: List[float] = []   # same / max |visible score| of that query
        self.router_gaps: List[float] = []     # top_k-th minus (top_k+1)-th (group-masked) biased score
        self.group_gaps: List[float] = []      # topk_group-th minus next group score (n_group > 1)
        self.min_chosen_biased: float = float("inf")  # smallest biased score among chosen experts
        self.bias_changed_choices = 0           # tokens whose expert set differs without the bias
        self.routed_tokens = 0
        self.selection_active_queries = 0

    def merge(self, o: "Stats"):
        self.topk_gaps += o.topk_gaps
        self.topk_rel_gaps += o.topk_rel_gaps
        self.router_gaps += o.router_gaps
        self.group_gaps += o.group_gaps
        self.min_chosen_biased = min(self.min_chosen_biased, o.min_chosen_biased)
        self.bias_changed_choices += o.bias_changed_choices
        self.routed_tokens += o.routed_tokens
        self.selection_active_queries += o.selection_active_queries


def rope_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """NeoX / split-half rotary embedding on the last dim of x: (x[i], x[i + d/2]) by angle i.
    cos/sin: [..., d/2]."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def dsa_select(W, p: str, x: torch.Tensor, q_lat: torch.Tensor, cos, sin, causal: torch.Tensor, nH: int, D: int,
               dr: int, topk: int, st: "Stats", rope) -> torch.Tensor:
    """The DSA lightning indexer of one layer (tensors `p` + wq_b / wk / k_norm / weights_proj, W(name) ->
    fp32 tensor): the selection mask [T, T] (True = key selected for that query). `rope` rotates the
    first dr dims of every indexer q head and of k: rope_interleaved (glm_moe_dsa) or rope_half
    (deepseek_v32); cos / sin are the attention's (YaRN included)."""
    T = x.shape[0]
    q = (q_lat @ W(p + "wq_b.weight").t()).view(T, nH, D)
    q = torch.cat((rope(q[..., :dr], cos[:, None, :], sin[:, None, :]), q[..., dr:]), -1)
    k = F.layer_norm(x @ W(p + "wk.weight").t(), (D,), W(p + "k_norm.weight"), W(p + "k_norm.bias"), 1e-6)
    k = torch.cat((rope(k[..., :dr], cos, sin), k[..., dr:]), -1)
    wts = (x @ W(p + "weights_proj.weight").t()) * (nH ** -0.5)  # [T, nH]
    dots = torch.einsum("shd,td->sht", q, k) * (D ** -0.5)
    score = torch.einsum("sht,sh->st", F.relu(dots), wts)
    score = score.masked_fill(~causal, float("-inf"))
    kk = min(topk, T)
    idx = score.topk(kk, dim=-1).indices
    sel = torch.zeros(T, T, dtype=torch.bool).scatter(1, idx, True)
    # Robustness stats over the queries whose selection actually drops visible keys (s + 1 > topk):
    # the kk-th minus the (kk+1)-th visible score, alone and over the query's max |visible score|.
    # All rows at once (a per-query loop is quadratic in Python at thousands of positions); the
    # same floats as sorting each row's visible scores.
    if T > topk:
        active = torch.arange(topk, T)
        part = score[active]
        top = part.topk(kk + 1, dim=-1).values  # the row has >= kk+1 visible (finite) scores
        gaps = (top[:, kk - 1] - top[:, kk]).tolist()
        amax = part.masked_fill(~causal[active], 0.0).abs().amax(dim=-1).tolist()
        st.topk_gaps += gaps
        st.topk_rel_gaps += [g / max(a, 1e-30) for g, a in zip(gaps, amax)]
        st.selection_active_queries += len(gaps)
    return sel


class GlmMoeDsaRef:
    def __init__(self, config: dict, weights: Dict[str, torch.Tensor], strict: bool = True):
        self.cfg = Config(config)
        self.w = weights
        c = self.cfg
        self.mtp_layer = c.num_hidden_layers if c.num_nextn_predict_layers > 0 else None
        if strict:
            expected = set(expected_tensor_names(config, fp8=False))
            got = set(weights)
            missing = sorted(expected - got)
            extra = sorted(got - expected)
            assert not missing, f"missing tensors: {missing[:10]}"
            assert not extra, f"unexpected tensors: {extra[:10]}"

    # -- helpers --
    def W(self, name: str) -> torch.Tensor:
        return self.w[name]

    def __call__(self, ids, dense: bool = False):
        o = self.forward(ids, dense=dense)
        return o["logits"], o["hidden"], o["mtp_logits"]

    # -- blocks --
    def mlp(self, p: str, x: torch.Tensor) -> torch.Tensor:
        g = x @ self.W(p + "gate_proj.weight").t()
        u = x @ self.W(p + "up_proj.weight").t()
        return (F.silu(g) * u) @ self.W(p + "down_proj.weight").t()

    def moe(self, L: int, x: torch.Tensor, st: Stats, tr: Optional[dict] = None) -> torch.Tensor:
        c = self.cfg
        p = f"model.layers.{L}.mlp."
        T = x.shape[0]
        E, K = c.n_routed_experts, c.num_experts_per_tok
        logits = x.float() @ self.W(p + "gate.weight").float().t()  # fp32 router
        s = torch.sigmoid(logits)
        bias = self.W(p + "gate.e_score_correction_bias")
        choice = s + bias

        def choose(ch: torch.Tensor, record: bool):
            if c.n_group > 1:
                G = c.n_group
                gs = ch.view(T, G, E // G).topk(2, dim=-1).values.sum(-1)  # [T, G]
                if record and c.topk_group < G:
                    srt = gs.sort(dim=-1, descending=True).values
                    st.group_gaps += (srt[:, c.topk_group - 1] - srt[:, c.topk_group]).tolist()
                gidx = gs.topk(c.topk_group, dim=-1).indices
                gmask = torch.zeros(T, G, dtype=torch.bool).scatter(1, gidx, True)
                emask = gmask.repeat_interleave(E // G, dim=1)
                # Excluded groups at -inf (HF GlmMoeDsa/DeepseekV32 router, DeepSeek ref Gate).
                ch = ch.masked_fill(~emask, float("-inf"))
            top = ch.topk(K, dim=-1)
            if record:
                srt = ch.sort(dim=-1, descending=True).values
                if K < E:
                    gap = srt[:, K - 1] - srt[:, K]
                    st.router_gaps += [g for g in gap.tolist() if math.isfinite(g)]
                st.min_chosen_biased = min(st.min_chosen_biased, float(top.values.min()))
            return top.indices

        idx = choose(choice, True)
        idx_nobias = choose(s, False)
        st.routed_tokens += T
        st.bias_changed_choices += int(
            (idx.sort(-1).values != idx_nobias.sort(-1).values).any(-1).sum())
        wts = s.gather(1, idx)
        if c.norm_topk_prob:
            wts = wts / (wts.sum(-1, keepdim=True) + 1e-20)
        wts = wts * c.routed_scaling_factor
        if tr is not None:
            tr["router_logits"], tr["experts"], tr["expert_weights"] = logits, idx, wts
        y = torch.zeros_like(x)
        for e in range(E):
            rows, kpos = (idx == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            ye = self.mlp(p + f"experts.{e}.", x[rows])
            y.index_add_(0, rows, ye * wts[rows, kpos][:, None])
        if c.n_shared_experts > 0:
            y = y + self.mlp(p + "shared_experts.", x)
        return y

    def indexer(self, L: int, x: torch.Tensor, q_lat: torch.Tensor, cos, sin, causal: torch.Tensor,
                st: Stats) -> torch.Tensor:
        """Returns the selection mask [T, T] (True = key selected for that query)."""
        c = self.cfg
        return dsa_select(self.W, f"model.layers.{L}.self_attn.indexer.", x, q_lat, cos, sin, causal,
                          c.index_n_heads, c.index_head_dim, c.qk_rope_head_dim, c.index_topk, st, rope_interleaved)

    def attention(self, L: int, x: torch.Tensor, cos, sin, prev_sel, full_indexer: bool,
                  dense: bool, st: Stats):
        c = self.cfg
        p = f"model.layers.{L}.self_attn."
        T = x.shape[0]
        H, dn, dr, dv, R = c.num_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank
        q_lat = rmsnorm(x @ self.W(p + "q_a_proj.weight").t(), self.W(p + "q_a_layernorm.weight"), 1e-6)
        q = (q_lat @ self.W(p + "q_b_proj.weight").t()).view(T, H, dn + dr)
        q_nope, q_pe = q[..., :dn], q[..., dn:]
        kv = x @ self.W(p + "kv_a_proj_with_mqa.weight").t()
        c_kv, k_pe = kv[:, :R], kv[:, R:]
        cl = rmsnorm(c_kv, self.W(p + "kv_a_layernorm.weight"), 1e-6)
        q_pe = rope_interleaved(q_pe, cos[:, None, :], sin[:, None, :])
        k_pe = rope_interleaved(k_pe, cos, sin)
        kvu = (cl @ self.W(p + "kv_b_proj.weight").t()).view(T, H, dn + dv)
        k_nope, v = kvu[..., :dn], kvu[..., dn:]
        Q = torch.cat((q_nope, q_pe), -1)                                   # [T,H,dn+dr]
        K = torch.cat((k_nope, k_pe[:, None, :].expand(T, H, dr)), -1)      # [T,H,dn+dr]
        S = torch.einsum("shd,thd->hst", Q, K) * ((dn + dr) ** -0.5)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        sel = None
        if dense:
            allowed = causal
        else:
            if full_indexer:
                sel = self.indexer(L, x, q_lat, cos, sin, causal, st)
            else:
                assert prev_sel is not None, "shared layer without a preceding full layer"
                sel = prev_sel
            allowed = causal & sel
        S = S.masked_fill(~allowed[None], float("-inf"))
        A = torch.softmax(S, dim=-1)
        O = torch.einsum("hst,thd->shd", A, v).reshape(T, H * dv)
        return O @ self.W(p + "o_proj.weight").t(), sel

    def decoder_layer(self, L: int, h: torch.Tensor, cos, sin, prev_sel, full_indexer: bool,
                      moe: bool, dense: bool, st: Stats, trace: Optional[list] = None):
        c = self.cfg
        p = f"model.layers.{L}."
        tr = {"layer": L} if trace is not None else None
        x = rmsnorm(h, self.W(p + "input_layernorm.weight"), c.rms_norm_eps)
        a, sel = self.attention(L, x, cos, sin, prev_sel, full_indexer, dense, st)
        h = h + a
        x = rmsnorm(h, self.W(p + "post_attention_layernorm.weight"), c.rms_norm_eps)
        f = self.moe(L, x, st, tr) if moe else self.mlp(p + "mlp.", x)
        h = h + f
        if tr is not None:
            tr.update({"attn_out": a, "ffn_out": f, "h": h,
                       "selected": None if sel is None else [torch.nonzero(r).flatten().tolist() for r in (sel & torch.ones_like(sel).tril())],
                       "indexer": "dense" if dense else ("full" if full_indexer else "shared")})
            trace.append(tr)
        return h, sel

    @torch.no_grad()
    def forward(self, ids, dense: bool = False, mtp: bool = True, trace: bool = False) -> dict:
        """ids: token ids (positions 0..T-1).  dense=True disables the DSA selection (all causal keys).
        Returns {"logits" [T,V], "hidden" [T,d] (after model.norm), "mtp_logits" [T-1,V] (row i
        predicts ids[i+2] from hidden[i] and ids[i+1]) or None, "stats": Stats, and with trace=True
        "trace": per-layer dicts (MTP layer last) with attn_out, ffn_out, h (residual stream after
        the layer), selected (per query: causally visible selected key indices, None when dense),
        router_logits / experts / expert_weights on MoE layers}."""
        c = self.cfg
        ids = torch.as_tensor(list(ids), dtype=torch.long)
        T = ids.shape[0]
        st = Stats()
        emb = self.W("model.embed_tokens.weight")
        lm = self.W("lm_head.weight")
        pos = torch.arange(T)
        cos, sin = rope_tables(c.rope_theta, c.qk_rope_head_dim, pos)
        h = emb[ids]
        sel = None
        tl = [] if trace else None
        for L in range(c.num_hidden_layers):
            h, sel = self.decoder_layer(L, h, cos, sin, sel, c.indexer_types[L] == "full",
                                        c.mlp_layer_types[L] == "sparse", dense, st, tl)
        hn = rmsnorm(h, self.W("model.norm.weight"), c.rms_norm_eps)
        logits = hn @ lm.t()
        mtp_logits = None
        if mtp and self.mtp_layer is not None and T >= 2:
            N = self.mtp_layer
            p = f"model.layers.{N}."
            e = rmsnorm(emb[ids[1:]], self.W(p + "enorm.weight"), c.rms_norm_eps)  # embedding of t_{i+1}
            hh = rmsnorm(hn[:-1], self.W(p + "hnorm.weight"), c.rms_norm_eps)      # main hidden after model.norm
            u = torch.cat((e, hh), -1) @ self.W(p + "eh_proj.weight").t()
            g, _ = self.decoder_layer(N, u, cos[:T - 1], sin[:T - 1], None, True, True, dense, st, tl)
            mtp_logits = rmsnorm(g, self.W(p + "shared_head.norm.weight"), c.rms_norm_eps) @ lm.t()
        out = {"logits": logits, "hidden": hn, "mtp_logits": mtp_logits, "stats": st}
        if trace:
            out["trace"] = tl
        return out


# ----------------------------------------------------------------------------------------------
# Checkpoint layout
# ----------------------------------------------------------------------------------------------

FP8_SUFFIXES = (
    "self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa", "self_attn.kv_b_proj",
    "self_attn.o_proj", "self_attn.indexer.wq_b", "self_attn.indexer.wk",
)


def is_fp8_module(module: str) -> bool:
    """Which Linear modules are stored as float8_e4m3fn in GLM-5-FP8 style checkpoints (doc §8)."""
    if any(module.endswith(s) for s in FP8_SUFFIXES):
        return True
    if ".mlp." in module and module.rsplit(".", 1)[-1] in ("gate_proj", "up_proj", "down_proj"):
        return True  # dense MLP, shared experts, routed experts (incl. MTP layer)
    return False


def expected_tensor_names(config: dict, fp8: bool = False) -> List[str]:
    c = Config(config)
    names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    layers = list(range(c.num_hidden_layers))
    if c.num_nextn_predict_layers > 0:
        layers.append(c.num_hidden_layers)

    def lin(module):
        names.append(module + ".weight")
        if fp8 and is_fp8_module(module):
            names.append(module + ".weight_scale_inv")

    for L in layers:
        p = f"model.layers.{L}."
        is_mtp = L == c.num_hidden_layers
        names += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight",
                  p + "self_attn.q_a_layernorm.weight", p + "self_attn.kv_a_layernorm.weight"]
        for m in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"):
            lin(p + "self_attn." + m)
        if is_mtp or c.indexer_types[L] == "full":
            lin(p + "self_attn.indexer.wq_b")
            lin(p + "self_attn.indexer.wk")
            lin(p + "self_attn.indexer.weights_proj")
            names += [p + "self_attn.indexer.k_norm.weight", p + "self_attn.indexer.k_norm.bias"]
        if is_mtp or c.mlp_layer_types[L] == "sparse":
            names += [p + "mlp.gate.weight", p + "mlp.gate.e_score_correction_bias"]
            for e in range(c.n_routed_experts):
                for m in ("gate_proj", "up_proj", "down_proj"):
                    lin(p + f"mlp.experts.{e}.{m}")
            if c.n_shared_experts > 0:
                for m in ("gate_proj", "up_proj", "down_proj"):
                    lin(p + f"mlp.shared_experts.{m}")
        else:
            for m in ("gate_proj", "up_proj", "down_proj"):
                lin(p + f"mlp.{m}")
        if is_mtp:
            names += [p + "enorm.weight", p + "hnorm.weight", p + "eh_proj.weight",
                      p + "shared_head.norm.weight"]
    return names


def load_raw_tensors(ckpt_dir: str) -> Dict[str, Tuple[str, np.ndarray]]:
    idx_path = os.path.join(ckpt_dir, "model.safetensors.index.json")
    if os.path.exists(idx_path):
        with open(idx_path) as f:
            index = json.load(f)
        files = sorted(set(index["weight_map"].values()))
        raw = {}
        for fn in files:
            part = read_safetensors(os.path.join(ckpt_dir, fn))
            for k, v in part.items():
                assert index["weight_map"].get(k) == fn, f"{k} found in {fn}, index says {index['weight_map'].get(k)}"
                assert k not in raw
                raw[k] = v
        assert set(raw) == set(index["weight_map"]), "index weight_map does not match shard contents"
        total = sum(a.nbytes for _, a in raw.values())
        assert index["metadata"]["total_size"] == total, (index["metadata"]["total_size"], total)
        return raw
    return read_safetensors(os.path.join(ckpt_dir, "model.safetensors"))


def raw_to_f32_weights(raw: Dict[str, Tuple[str, np.ndarray]], block=(128, 128)) -> Dict[str, torch.Tensor]:
    out = {}
    for name, (dt, arr) in raw.items():
        if name.endswith(".weight_scale_inv"):
            base = name[: -len("_scale_inv")]
            assert base in raw and raw[base][0] == "F8_E4M3", f"orphan scale {name}"
            continue
        if dt == "F8_E4M3":
            sdt, scale = raw[name + "_scale_inv"]
            assert sdt == "F32", f"{name}_scale_inv must be F32"
            w = dequantize_fp8_block(arr, scale, block)
        else:
            w = storage_to_f32(dt, arr)
        out[name] = torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32))
    return out


def load_checkpoint(ckpt_dir: str, strict: bool = True) -> GlmMoeDsaRef:
    with open(os.path.join(ckpt_dir, "config.json")) as f:
        config = json.load(f)
    raw = load_raw_tensors(ckpt_dir)
    if strict:
        fp8 = "quantization_config" in config
        exp = set(expected_tensor_names(config, fp8=fp8))
        missing, extra = sorted(exp - set(raw)), sorted(set(raw) - exp)
        assert not missing and not extra, f"missing {missing[:8]} extra {extra[:8]}"
    block = tuple((config.get("quantization_config") or {}).get("weight_block_size", (128, 128)))
    return GlmMoeDsaRef(config, raw_to_f32_weights(raw, block), strict=strict)


# ----------------------------------------------------------------------------------------------
# Reference payload
# ----------------------------------------------------------------------------------------------


def _f32list(t: torch.Tensor) -> List[float]:
    return [float(v) for v in t.to(torch.float32).numpy().astype(np.float32)]


def _top2(logits: torch.Tensor):
    v, i = logits.topk(2, dim=-1)
    return i[:, 0].tolist(), (v[:, 0] - v[:, 1]).tolist()


def compute_reference(model: GlmMoeDsaRef, ids: List[int], logit_positions=(0, 17, 39),
                      mtp_positions=(0, 20), greedy_prompt_len: int = 8, greedy_new: int = 20) -> dict:
    ids = [int(i) for i in ids]
    T = len(ids)
    st = Stats()
    o = model.forward(ids, dense=False)
    st.merge(o["stats"])
    od = model.forward(ids, dense=True)
    st.merge(od["stats"])
    top1, margin = _top2(o["logits"])
    dtop1, dmargin = _top2(od["logits"])
    mtop1, mmargin = _top2(o["mtp_logits"])
    # greedy, full recompute each step (DSA on)
    seq = ids[:greedy_prompt_len]
    gmargins = []
    for _ in range(greedy_new):
        og = model.forward(seq, dense=False, mtp=False)
        st.merge(og["stats"])
        t1, m1 = _top2(og["logits"][-1:])
        seq.append(t1[0])
        gmargins.append(m1[0])
    ref = {
        "ids": ids,
        "top1": top1,
        "top1_margin": margin,
        "logits": {str(p): _f32list(o["logits"][p]) for p in logit_positions},
        "dense_top1": dtop1,
        "dense_top1_margin": dmargin,
        "dense_logits": {str(p): _f32list(od["logits"][p]) for p in logit_positions},
        "dense_differs_at": [i for i in range(T) if top1[i] != dtop1[i]],
        "greedy": {"prompt": ids[:greedy_prompt_len], "ids": seq[greedy_prompt_len:],
                   "margins": gmargins},
        "mtp_top1": mtop1,
        "mtp_top1_margin": mmargin,
        "mtp_logits": {str(p): _f32list(o["mtp_logits"][p]) for p in mtp_positions},
        "min_topk_gap": min(st.topk_gaps) if st.topk_gaps else None,
        "min_topk_rel_gap": min(st.topk_rel_gaps) if st.topk_rel_gaps else None,
        "min_router_gap": min(st.router_gaps) if st.router_gaps else None,
        "min_group_gap": min(st.group_gaps) if st.group_gaps else None,
        "min_chosen_biased_router_score": st.min_chosen_biased,
        "router_bias_changed_choice_fraction": st.bias_changed_choices / max(st.routed_tokens, 1),
        "selection_active_queries": st.selection_active_queries,
        "min_top1_margin": min(margin),
        "min_dense_top1_margin": min(dmargin),
        "min_greedy_margin": min(gmargins),
        "min_mtp_top1_margin": min(mmargin),
        "indexer_types": model.cfg.indexer_types,
        "mlp_layer_types": model.cfg.mlp_layer_types,
    }
    return ref
