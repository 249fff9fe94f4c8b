#!/usr/bin/python3
"""Deterministic generator for tiny random-weight `glm_moe_dsa` checkpoints + reference outputs.

    /usr/bin/python3 tests/reference/make_fixtures.py --out tests/fixtures [--only NAME ...]

Writes tests/fixtures/<name>/{config.json, generation_config.json, *.safetensors
[, model.safetensors.index.json], reference.json}.  Running it again regenerates byte-identical
weights and config files (they come from numpy's PCG64 stream, no BLAS).  reference.json is
computed in fp32 with a fixed torch thread count and deterministic algorithms: byte-identical on
the same BLAS kernels, equal in meaning (ids, top-1s; floats to ~1e-4) on others, whose sums run
in another order (OpenBLAS picks kernels by CPU and by OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE).

For each fixture a list of candidate seeds is tried in order; the first one whose reference passes
the robustness criteria (indexer top-k gaps, router gaps, top-1 margins, DSA-vs-dense difference,
...) is kept and recorded in reference.json as "seed".

    /usr/bin/python3 tests/reference/make_fixtures.py --out DIR --seed glm5-tiny-bf16=1006 ...

pins a fixture's seed instead (the check in check_fixtures.py --regen does this with the committed
seeds): the weights, config files and ids then depend on the seed alone (numpy, no BLAS), while the
search's accept/reject decisions are made on floats that torch's BLAS sums in a kernel-dependent
order.  A pinned seed must still meet the robustness targets.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import glm_moe_dsa_ref as R  # noqa: E402

torch.set_num_threads(2)
torch.manual_seed(0)  # no torch RNG is used (weights come from numpy PCG64); set for good measure
try:
    torch.use_deterministic_algorithms(True)
except Exception:  # pragma: no cover
    pass

SEQ_LEN = 48
LOGIT_POSITIONS = (0, 17, 39)
MTP_POSITIONS = (0, 20)
GREEDY_PROMPT = 8
GREEDY_NEW = 20
EOS_IDS = [253, 254, 255]
PAD_ID = 253

# Robustness targets used to pick the seed (stricter than the hard floors asserted at the end).
TARGET = {
    "min_topk_gap": 1e-3,
    "min_topk_rel_gap": 1e-4,  # gap / max |score| of that query
    "min_router_gap": 1e-4,
    "min_group_gap": 1e-4,
    "min_margin": 1e-2,        # teacher-forced / dense / greedy / MTP top-1 margins (logit units)
    "min_dense_differs": 2,    # positions where DSA top-1 != dense top-1
}
HARD = {"min_topk_gap": 1e-4, "min_router_gap": 1e-5}

# A fixture spec may override: "seq_len", "logit_positions", "mtp_positions" (the reference's length
# and where it stores full logit vectors), "gain" (entries of GAIN below) and "target" (entries of
# TARGET). Defaults are the values above. "rope_positions" adds the oracle's RoPE tables at those
# positions to reference.json ("rope").


# ----------------------------------------------------------------------------------------------
# Configs
# ----------------------------------------------------------------------------------------------


def glm5_config(**over) -> dict:
    cfg = {
        "architectures": ["GlmMoeDsaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "dtype": "bfloat16",
        "eos_token_id": list(EOS_IDS),
        "ep_size": 1,
        "first_k_dense_replace": 1,
        "head_dim": 16,  # unused by the model (HF overwrites it with qk_rope_head_dim)
        "hidden_act": "silu",
        "hidden_size": 192,
        "index_head_dim": 64,
        "index_n_heads": 16,
        "index_topk": 16,
        "indexer_rope_interleave": True,
        "initializer_range": 0.02,
        "intermediate_size": 256,
        "kv_lora_rank": 64,
        "max_position_embeddings": 4096,
        "model_type": "glm_moe_dsa",
        "moe_intermediate_size": 48,
        "moe_layer_freq": 1,
        "n_group": 1,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 4,
        "num_key_value_heads": 4,
        "num_nextn_predict_layers": 1,
        "pad_token_id": PAD_ID,
        "pretraining_tp": 1,
        "q_lora_rank": 64,
        "qk_head_dim": 48,
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
        "torch_dtype": "bfloat16",
        "transformers_version": "5.0.2.dev0",
        "use_cache": True,
        "v_head_dim": 32,
        "vocab_size": 256,
    }
    cfg.update(over)
    cfg["qk_head_dim"] = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    return dict(sorted(cfg.items()))


def fp8_quant_config(config: dict) -> dict:
    """modules_to_not_convert in the style of GLM-5(.2)-FP8 (doc §8): per-layer norms, router,
    indexer k_norm and the (misnamed) `self_attn.indexers_proj` entry, MTP extras, embed/head."""
    c = R.Config(config)
    N = c.num_hidden_layers
    mods = []
    for L in range(N + (1 if c.num_nextn_predict_layers else 0)):
        p = f"model.layers.{L}."
        mods += [p + "input_layernorm", p + "post_attention_layernorm",
                 p + "self_attn.q_a_layernorm", p + "self_attn.kv_a_layernorm"]
        if L == N or c.mlp_layer_types[L] == "sparse":
            mods += [p + "mlp.gate", p + "mlp.gate.e_score_correction_bias"]
        if L == N or c.indexer_types[L] == "full":
            mods += [p + "self_attn.indexers_proj", p + "self_attn.indexer.k_norm",
                     p + "self_attn.indexer.k_norm.bias"]
        if L == N:
            mods += [p + "enorm", p + "hnorm", p + "eh_proj", p + "shared_head.norm"]
    mods += ["model.norm", "lm_head", "model.embed_tokens"]
    return {"activation_scheme": "dynamic", "fmt": "e4m3", "modules_to_not_convert": mods,
            "quant_method": "fp8", "weight_block_size": [128, 128]}


def generation_config(config: dict) -> dict:
    return {"_from_model_config": True, "do_sample": True, "eos_token_id": list(EOS_IDS),
            "pad_token_id": PAD_ID, "temperature": 1.0, "top_p": 0.95,
            "transformers_version": config["transformers_version"]}


FIXTURES = {
    "glm5-tiny-bf16": {
        "config": glm5_config(),
        "fp8": False,
        "shards": 1,
        "seeds": list(range(1000, 1064)),
        "desc": "GLM-5 layout: 4 layers (1 dense + 3 MoE) + MTP layer 4, every layer has an indexer, "
                "n_group 1, bf16 weights, single model.safetensors",
    },
    "glm5-tiny-fp8": {
        "config": None,  # filled below (same architecture + quantization_config)
        "fp8": True,
        "shards": 1,
        "seeds": list(range(2000, 2064)),
        "desc": "same architecture as glm5-tiny-bf16, other seed, GLM-5-FP8 style block-128 "
                "float8_e4m3fn weights + float32 weight_scale_inv (partial edge blocks)",
    },
    "glm52-tiny-bf16": {
        "config": glm5_config(
            num_hidden_layers=7,
            head_dim=32,  # GLM-5.2 ships head_dim = qk_nope_head_dim (unused)
            index_topk_freq=4,
            index_skip_topk_offset=3,
            index_topk_pattern=None,
            index_share_for_mtp_iteration=True,
            moe_router_dtype="float32",
            rope_parameters={"rope_theta": 8000000, "rope_type": "default"},
            n_group=2,
            topk_group=1,
            hidden_size=128,
            moe_intermediate_size=32,
            mlp_layer_types=["dense"] + ["sparse"] * 6,
            transformers_version="5.12.0",
        ),
        "fp8": False,
        "shards": 2,
        "seeds": list(range(3000, 3064)),
        "desc": "GLM-5.2 layout: 7 layers, index_topk_freq 4 / offset 3 (layers 0,1,2,6 full; 3,4,5 "
                "shared with no indexer weights), group-limited routing n_group 2 / topk_group 1, "
                "rope theta 8e6, two shards + model.safetensors.index.json",
    },
    # Long context: 1024 positions, DSA keeping 64 keys (selection active from position 64 on), rope
    # theta 1e6 as GLM-5, rope over half of the indexer head (32 of 64 dims) as GLM-5 (64 of 128).
    # One main layer (+ the MTP layer): each position's keys and indexer scores in layer 0 depend on
    # the token ids only, so a selection near-tie could only change that position (and, through its
    # MTP key, later MTP rows a little), never the keys of every later position.
    #
    # Robustness at this length: a query chooses 64 of up to 1024 keys by continuous scores, so the
    # 64th/65th score gap averages ~2e-3 of the query's max |score| and its minimum over ~1900
    # selecting queries (layer 0 + MTP) is small. strata and the oracle differ on that gap by up to
    # ~1.3e-6 of the max |score| (two OpenBLAS kernel sets under the oracle by about as much), so the
    # seed must keep every gap >= 3e-6 relative (TARGET below); about 1 seed in 10-30 does.
    # weights_proj only scales the scores (selection is scale-invariant): gain 32 puts the absolute
    # gaps above the 1e-4 floor. Top-1 margins: >= 5e-4 logits over ~3000 teacher-forced / dense /
    # MTP positions (fp32 logit noise is ~1e-5).
    # The seed list starts at the first seed that met the targets in a search from 4000 (seeds
    # 4000..4010 were rejected), so that regenerating does not repeat a minutes-long search.
    "glm5-long-bf16": {
        "config": glm5_config(
            num_hidden_layers=1,
            head_dim=32,  # unused (HF overwrites it with qk_rope_head_dim)
            hidden_size=64,
            intermediate_size=128,
            moe_intermediate_size=16,
            q_lora_rank=32,
            qk_rope_head_dim=32,
            index_n_heads=16,
            index_head_dim=64,
            index_topk=64,
        ),
        "fp8": False,
        "shards": 1,
        "seeds": list(range(4011, 4075)),
        "seq_len": 1024,
        "logit_positions": (0, 63, 64, 65, 300, 511, 767, 1023),
        "mtp_positions": (0, 64, 511, 1022),
        "gain": {"weights_proj": 32.0},
        # RoPE cos/sin tables of the fixture's theta and rope dims, up to GLM-5's context (202752).
        "rope_positions": (0, 1, 63, 64, 1023, 4095, 32767, 131071, 202751),
        "target": {"min_topk_gap": 1e-4, "min_topk_rel_gap": 3e-6, "min_router_gap": 1e-5, "min_margin": 5e-4},
        "desc": "long context: 1024 positions, index_topk 64, rope theta 1e6 (GLM-5), 1 dense layer + MTP "
                "layer 1 (MoE), hidden 64, 16 indexer heads of 64 dims (32 roped), bf16 weights",
    },
}
_c = dict(FIXTURES["glm5-tiny-bf16"]["config"])
_c["quantization_config"] = fp8_quant_config(_c)
FIXTURES["glm5-tiny-fp8"]["config"] = dict(sorted(_c.items()))


# ----------------------------------------------------------------------------------------------
# Weights
# ----------------------------------------------------------------------------------------------

GAIN = {  # std = gain / sqrt(fan_in) for Linear weights
    "q_b_proj": 1.5,
    "o_proj": 1.0,
    "lm_head": 6.0,
    "eh_proj": 1.0,
    "weights_proj": 4.0,  # only scales the indexer scores (selection is scale-invariant): larger absolute gaps
}
ROUTER_BIAS_STD = 0.1


def indexer_shape(mod: str, n_heads: int, head_dim: int, q_lora: int, d: int):
    """The shape of a DSA indexer tensor by module name (wq_b, wk, k_norm, weights_proj); None for
    any other module (glm_moe_dsa and deepseek_v32 fixtures alike)."""
    return {"wq_b": (n_heads * head_dim, q_lora), "wk": (head_dim, d), "k_norm": (head_dim,),
            "weights_proj": (n_heads, d)}.get(mod)


def tensor_shape(name: str, c: R.Config) -> tuple:
    d, V = c.hidden_size, c.vocab_size
    H, dn, dr, dv = c.num_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        return (V, d)
    if name == "model.norm.weight":
        return (d,)
    last = name.split(".")
    mod = last[-2]
    if name.endswith("q_a_layernorm.weight"):
        return (c.q_lora_rank,)
    if name.endswith("kv_a_layernorm.weight"):
        return (c.kv_lora_rank,)
    if mod in ("input_layernorm", "post_attention_layernorm", "enorm", "hnorm") or name.endswith("shared_head.norm.weight"):
        return (d,)
    if mod == "q_a_proj":
        return (c.q_lora_rank, d)
    if mod == "q_b_proj":
        return (H * (dn + dr), c.q_lora_rank)
    if mod == "kv_a_proj_with_mqa":
        return (c.kv_lora_rank + dr, d)
    if mod == "kv_b_proj":
        return (H * (dn + dv), c.kv_lora_rank)
    if mod == "o_proj":
        return (d, H * dv)
    if (s := indexer_shape(mod, c.index_n_heads, c.index_head_dim, c.q_lora_rank, d)) is not None:
        return s
    if mod == "eh_proj":
        return (d, 2 * d)
    if mod == "gate" and last[-1] == "weight":
        return (c.n_routed_experts, d)
    if last[-1] == "e_score_correction_bias":
        return (c.n_routed_experts,)
    if mod in ("gate_proj", "up_proj", "down_proj"):
        if ".experts." in name:
            inter = c.moe_intermediate_size
        elif ".shared_experts." in name:
            inter = c.moe_intermediate_size * c.n_shared_experts
        else:
            inter = c.intermediate_size
        return (inter, d) if mod != "down_proj" else (d, inter)
    raise KeyError(name)


def gen_tensor(name: str, shape: tuple, rng: np.random.Generator, gains: dict = GAIN) -> np.ndarray:
    last = name.split(".")
    mod = last[-2]
    if name == "model.embed_tokens.weight":
        w = rng.standard_normal(shape)
    elif last[-1] == "e_score_correction_bias":
        w = ROUTER_BIAS_STD * rng.standard_normal(shape)
    elif name.endswith("k_norm.bias"):
        w = 0.1 * rng.standard_normal(shape)
    elif len(shape) == 1:  # RMSNorm / LayerNorm weights
        w = 1.0 + 0.1 * rng.standard_normal(shape)
    else:
        gain = gains.get(mod if name != "lm_head.weight" else "lm_head", 1.0)
        w = (gain / math.sqrt(shape[1])) * rng.standard_normal(shape)
    return np.asarray(w, dtype=np.float32)


def build_storage(config: dict, seed: int, fp8: bool, gain_over: dict = None):
    """Returns {name: (dtype, storage array)} exactly as it will be written to disk."""
    c = R.Config(config)
    gains = {**GAIN, **(gain_over or {})}
    rng = np.random.Generator(np.random.PCG64(seed))
    out = {}
    block = tuple(config.get("quantization_config", {}).get("weight_block_size", (128, 128)))
    for name in R.expected_tensor_names(config, fp8=False):
        shape = tensor_shape(name, c)
        w = gen_tensor(name, shape, rng, gains)
        if name.endswith("e_score_correction_bias"):
            out[name] = ("F32", w)
            continue
        module = name[: -len(".weight")] if name.endswith(".weight") else None
        if fp8 and module is not None and R.is_fp8_module(module):
            codes, scale = R.quantize_fp8_block(R.round_to_bf16(w), block)  # quantize the bf16 original
            out[name] = ("F8_E4M3", codes)
            out[module + ".weight_scale_inv"] = ("F32", scale)
        else:
            out[name] = ("BF16", R.f32_to_bf16_bits(w))
    return out


# ----------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------


def _layer_of(name: str) -> int:
    parts = name.split(".")
    if len(parts) > 2 and parts[0] == "model" and parts[1] == "layers":
        return int(parts[2])
    return -1


def write_checkpoint(out_dir: str, config: dict, storage: dict, shards: int):
    os.makedirs(out_dir, exist_ok=True)
    for fn in os.listdir(out_dir):
        if fn.endswith(".safetensors") or fn == "model.safetensors.index.json":
            os.remove(os.path.join(out_dir, fn))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(generation_config(config), f, indent=2)
        f.write("\n")
    write_weights(out_dir, storage, shards)


def write_weights(out_dir: str, storage: dict, shards: int):
    """`model.safetensors`, or `shards` files `model-0000i-of-0000n.safetensors` plus
    `model.safetensors.index.json` (also used by make_dsv3_fixture.py)."""
    meta = {"format": "pt"}
    if shards == 1:
        R.write_safetensors(os.path.join(out_dir, "model.safetensors"), storage, meta)
        return
    # Sharded: embed first, then layers in order, then final norm / lm_head; cut by size, so the
    # cut falls inside a layer (a layer's tensors are spread over both files).
    def order_key(n):
        L = _layer_of(n)
        head = 0 if n.startswith("model.embed_tokens") else (2 if L < 0 else 1)
        return (head, L, n)
    names = sorted(storage, key=order_key)
    total = sum(storage[n][1].nbytes for n in names)
    parts = [[] for _ in range(shards)]
    acc = 0
    for n in names:
        i = min(int(acc * shards // total), shards - 1)
        parts[i].append(n)
        acc += storage[n][1].nbytes
    weight_map = {}
    for i, plist in enumerate(parts):
        fn = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        R.write_safetensors(os.path.join(out_dir, fn), {n: storage[n] for n in plist}, meta)
        for n in plist:
            weight_map[n] = fn
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------


def make_ids(seed: int, vocab: int, n: int = SEQ_LEN) -> list:
    rng = np.random.Generator(np.random.PCG64(seed + 7919))
    return [int(x) for x in rng.integers(0, min(vocab, min(EOS_IDS)), n)]


def reference_for(model: R.GlmMoeDsaRef, ids: list, spec: dict) -> dict:
    return R.compute_reference(model, ids, spec.get("logit_positions", LOGIT_POSITIONS),
                               spec.get("mtp_positions", MTP_POSITIONS), GREEDY_PROMPT, GREEDY_NEW)


def quick_failures(model: R.GlmMoeDsaRef, ids: list, target: dict) -> list:
    """The selection gaps and teacher-forced margins of one forward: a subset of what `failures`
    checks over every forward, so a seed rejected here would be rejected there (a cheap early out
    for long fixtures; the chosen seed is the same)."""
    o = model.forward(ids)
    st = o["stats"]
    bad = []
    if st.topk_gaps and min(st.topk_gaps) < target["min_topk_gap"]:
        bad.append(f"min_topk_gap {min(st.topk_gaps)}")
    if st.topk_rel_gaps and min(st.topk_rel_gaps) < target["min_topk_rel_gap"]:
        bad.append(f"min_topk_rel_gap {min(st.topk_rel_gaps)}")
    for what, lg in (("min_top1_margin", o["logits"]), ("min_mtp_top1_margin", o["mtp_logits"])):
        if lg is None:
            continue
        v = lg.topk(2, dim=-1).values
        m = float((v[:, 0] - v[:, 1]).min())
        if m < target["min_margin"]:
            bad.append(f"{what} {m:.3g}")
    return bad


def failures(ref: dict, config: dict, target: dict = TARGET) -> list:
    bad = []
    if ref["min_topk_gap"] is None or ref["min_topk_gap"] < target["min_topk_gap"]:
        bad.append(f"min_topk_gap {ref['min_topk_gap']}")
    if ref["min_topk_rel_gap"] is None or ref["min_topk_rel_gap"] < target["min_topk_rel_gap"]:
        bad.append(f"min_topk_rel_gap {ref['min_topk_rel_gap']}")
    if ref["min_router_gap"] is None or ref["min_router_gap"] < target["min_router_gap"]:
        bad.append(f"min_router_gap {ref['min_router_gap']}")
    if config.get("n_group", 1) > 1 and (ref["min_group_gap"] is None or ref["min_group_gap"] < target["min_group_gap"]):
        bad.append(f"min_group_gap {ref['min_group_gap']}")
    for k in ("min_top1_margin", "min_dense_top1_margin", "min_greedy_margin", "min_mtp_top1_margin"):
        if ref[k] < target["min_margin"]:
            bad.append(f"{k} {ref[k]:.3g}")
    if len(ref["dense_differs_at"]) < target["min_dense_differs"]:
        bad.append(f"dense differs at only {len(ref['dense_differs_at'])} positions")
    if ref["min_chosen_biased_router_score"] <= 0:
        bad.append("a chosen biased router score is <= 0 (0.0 vs -inf group masking would differ)")
    if ref["router_bias_changed_choice_fraction"] <= 0:
        bad.append("router bias never changes the choice")
    if any(t in EOS_IDS for t in ref["greedy"]["ids"]):
        bad.append("greedy output contains an eos id")
    return bad


def rope_reference(config: dict, positions) -> dict:
    """The oracle's cos/sin tables (float32) for the config's theta and qk_rope_head_dim."""
    c = R.Config(config)
    cos, sin = R.rope_tables(c.rope_theta, c.qk_rope_head_dim, torch.tensor(list(positions), dtype=torch.long))
    return {"theta": c.rope_theta, "dim": c.qk_rope_head_dim, "positions": [int(p) for p in positions],
            "cos": [[float(v) for v in row] for row in cos.numpy()],
            "sin": [[float(v) for v in row] for row in sin.numpy()]}


def dims_summary(config: dict) -> dict:
    keys = ["vocab_size", "hidden_size", "num_hidden_layers", "first_k_dense_replace", "intermediate_size",
            "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok", "n_shared_experts", "n_group",
            "topk_group", "num_attention_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
            "qk_rope_head_dim", "v_head_dim", "index_n_heads", "index_head_dim", "index_topk"]
    return {k: config[k] for k in keys}


def make_fixture(name: str, spec: dict, out_root: str, verbose: bool = True, pin_seed: int = None) -> dict:
    config = spec["config"]
    target = {**TARGET, **spec.get("target", {})}
    t0 = time.time()
    chosen = None
    tried = []
    seeds = spec["seeds"]
    if pin_seed is not None:
        if pin_seed not in seeds:
            raise SystemExit(f"{name}: seed {pin_seed} is not in the fixture's seed list {seeds[0]}..{seeds[-1]}")
        # The seeds before it were rejected when the fixture was made: keep the bookkeeping equal.
        tried = [(s, ["(not retried: seed pinned)"]) for s in seeds[:seeds.index(pin_seed)]]
        seeds = [pin_seed]
    for seed in seeds:
        storage = build_storage(config, seed, spec["fp8"], spec.get("gain"))
        model = R.GlmMoeDsaRef(config, R.raw_to_f32_weights(storage, tuple(
            config.get("quantization_config", {}).get("weight_block_size", (128, 128)))))
        ids = make_ids(seed, config["vocab_size"], spec.get("seq_len", SEQ_LEN))
        ref = None
        bad = quick_failures(model, ids, target)
        if not bad:
            ref = reference_for(model, ids, spec)
            bad = failures(ref, config, target)
        tried.append((seed, bad))
        if verbose:
            print(f"  [{name}] seed {seed}: {'OK' if not bad else '; '.join(bad)}", flush=True)
        if not bad:
            chosen = (seed, storage, ids, ref)
            break
    if chosen is None and pin_seed is not None:
        raise SystemExit(f"{name}: pinned seed {pin_seed} no longer meets the robustness targets: {tried[-1][1]}")
    if chosen is None:
        raise SystemExit(f"{name}: no seed met the robustness targets: {tried}")
    seed, storage, ids, ref_mem = chosen
    out_dir = os.path.join(out_root, name)
    write_checkpoint(out_dir, config, storage, spec["shards"])
    # The reference is recomputed from the files just written (own reader, dequantized FP8).
    model = R.load_checkpoint(out_dir)
    ref = reference_for(model, ids, spec)
    assert ref["top1"] == ref_mem["top1"] and ref["logits"] == ref_mem["logits"], "disk/memory mismatch"
    assert ref["min_topk_gap"] >= HARD["min_topk_gap"], ref["min_topk_gap"]
    assert ref["min_router_gap"] >= HARD["min_router_gap"], ref["min_router_gap"]
    assert ref["dense_differs_at"], "DSA selection does not change any top-1"
    payload = {
        "fixture": name,
        "description": spec["desc"],
        "seed": seed,
        "seeds_tried": len(tried),
        "generator": "tests/reference/make_fixtures.py",
        "dims": dims_summary(config),
        **ref,
    }
    if "rope_positions" in spec:
        payload["rope"] = rope_reference(config, spec["rope_positions"])
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(payload, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(out_dir, fn)) for fn in os.listdir(out_dir))
    if verbose:
        print(f"  [{name}] wrote {out_dir} ({size / 1e6:.2f} MB) in {time.time() - t0:.1f}s, seed {seed}; "
              f"min_topk_gap {ref['min_topk_gap']:.3g} (rel {ref['min_topk_rel_gap']:.3g}), "
              f"min_router_gap {ref['min_router_gap']:.3g}, min_group_gap {ref['min_group_gap']}, "
              f"margins tf {ref['min_top1_margin']:.3g} dense {ref['min_dense_top1_margin']:.3g} "
              f"greedy {ref['min_greedy_margin']:.3g} mtp {ref['min_mtp_top1_margin']:.3g}, "
              f"dense differs at {ref['dense_differs_at']}", flush=True)
    return payload


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--seed", action="append", default=[], metavar="NAME=SEED",
                    help="use this seed for fixture NAME instead of searching the seed list")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    pinned = {}
    for kv in args.seed:
        name, _, seed = kv.partition("=")
        if name not in FIXTURES or not seed.isdigit():
            ap.error(f"--seed {kv}: expected NAME=SEED with NAME one of {sorted(FIXTURES)}")
        pinned[name] = int(seed)
    t0 = time.time()
    for name, spec in FIXTURES.items():
        if args.only and name not in args.only:
            continue
        make_fixture(name, spec, args.out, verbose=not args.quiet, pin_seed=pinned.get(name))
    if not args.quiet:
        print(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
