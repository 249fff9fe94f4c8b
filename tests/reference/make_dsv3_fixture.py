#!/usr/bin/python3
"""Deterministic generator for the tiny random-weight `deepseek_v3` / `deepseek_v32` fixtures + reference
outputs.

    /usr/bin/python3 tests/reference/make_dsv3_fixture.py --out tests/fixtures [--variant fp8|v32] [--seed N]

Writes <out>/dsv3-tiny-bf16/{config.json, generation_config.json, model.safetensors,
reference.json}; with --variant fp8, <out>/dsv3-tiny-fp8/ (same architecture, other seeds): the
weights block-quantized to float8_e4m3fn as the DeepSeek-V3 FP8 checkpoints store them (see
VARIANTS), in two shards with model.safetensors.index.json.  Weights come from numpy's PCG64 stream (no BLAS): the same seed gives
byte-identical weights.  Candidate seeds are tried in order; the first whose reference has router
gaps (k-th minus (k+1)-th expert choice score, and the same for the group scores) of at least
1e-4, top-1 / greedy / MTP top-1 margins of at least 1e-2 and every router choice score positive
(so masking the dropped groups with 0.0, as transformers does, or -inf, as strata does, selects
the same experts) is kept (recorded as "seed"), so a float reordering cannot flip a routing choice
or a top-1; the seed must also be one where YaRN matters: dropping the softmax mscale, or using
plain RoPE frequencies, each change some teacher-forced top-1 (recorded).  YaRN is on with factor
8 over an original context of 32, so the 48 positions run past it.  The reference is computed by
deepseek_v3_ref.py in float32.

With --variant v32, <out>/dsv32-tiny-bf16/: the same layout as model_type deepseek_v32, i.e. with the
DSA indexer in every layer and the MTP layer (16 heads of dim 64, index_topk 16 of the 48
positions, split-half indexer rope).  Its seed must also show that the indexer decides top-1s
(attending every causal key instead changes some) and that its rope style does (the interleaved
rotation instead changes some), and keep the indexer's gap at the top-k cut (k-th minus (k+1)-th
score over every query that drops keys) at least 1e-4, so a float reordering cannot flip a
selection (recorded as min_index_topk_gap).

With --variant v32fp8, <out>/dsv32-tiny-fp8/: deepseek_v32 in DeepSeek-V3.2's FP8 layout (the fp8
variant's plus the indexer's wq_b / wk in block FP8, its k_norm float32), two shards, the same seed
targets as v32.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import glm_moe_dsa_ref as fmt  # noqa: E402  (safetensors writer, bf16 codec)
import deepseek_v3_ref as Q  # noqa: E402
import make_fixtures  # noqa: E402  (write_weights: one file or shards + index)

torch.set_num_threads(2)
try:
    torch.use_deterministic_algorithms(True)
except Exception:  # pragma: no cover
    pass

# bf16: the released layout in bf16. fp8: the same architecture with DeepSeek-V3's
# quantization_config (fp8, e4m3, dynamic activations, weight_block_size); every attention
# projection, dense MLP, shared / routed expert and the MTP eh_proj stored as float8_e4m3fn with a
# float32 weight_scale_inv per block (deepseek_v3_ref.FP8_MODULES). The block is the real
# checkpoints' 128 x 128 scaled to the tiny shapes: 32 rows x 48 columns, so most matrices hold
# several blocks and every one a partial edge block (hidden 64 = 48 + 16 columns, kv_a 48 = 32 + 16
# rows, experts 16 of 32 rows), and a transposed block or scale index cannot pass unnoticed.
# Written as two shards with model.safetensors.index.json; the cut falls inside layer 2, between
# model.layers.2.mlp.experts.2.down_proj.weight and its weight_scale_inv (checked by --check), so a
# reader must find a scale in another file than its weight.
# v32fp8: deepseek_v32 as DeepSeek-V3.2's FP8 checkpoints store it: the fp8 variant's layout plus the
# indexer's wq_b and wk as float8_e4m3fn with their weight_scale_inv (weights_proj bf16, k_norm weight
# and bias float32; deepseek_v3_ref.FP8_INDEXER_MODULES). wq_b [1024, 32] is 32 row blocks by one
# partial column block, wk [64, 64] two by two with partial edges.
VARIANTS = {
    "bf16": {"name": "dsv3-tiny-bf16", "block": None, "shards": 1, "seeds": list(range(4000, 4060))},
    "fp8": {"name": "dsv3-tiny-fp8", "block": [32, 48], "shards": 2, "seeds": list(range(4100, 4160))},
    "v32": {"name": "dsv32-tiny-bf16", "block": None, "shards": 1, "seeds": list(range(4200, 4260)), "v32": True},
    "v32fp8": {"name": "dsv32-tiny-fp8", "block": [32, 48], "shards": 2, "seeds": list(range(4300, 4360)),
               "v32": True},
}
# deepseek_v32's indexer, shrunk from DeepSeek-V3.2's 64 heads x 128 / top 2048: 16 heads of 64 (so
# its scores rarely tie, docs: testing notes) and a top-k of 16 of the 48 positions.
V32_INDEXER = {"index_n_heads": 16, "index_head_dim": 64, "index_topk": 16}
SEQ_LEN = 48
EOS_IDS = [253, 254, 255]
PAD_ID = 253
TARGET = {"min_router_gap": 1e-4, "min_margin": 1e-2}
GAIN = {"lm_head": 6.0, "q_b_proj": 1.5, "kv_a_proj_with_mqa": 1.5}


def config() -> dict:
    # DeepSeek-V3's layout, shrunk: MLA (q_lora 32, kv_lora 32, nope 16, rope 16, v 16), YaRN
    # (factor 8 = 256 / 32, beta 32 / 1 as released; mscale_all_dim 0.707 instead of 1.0 so that
    # the cos / sin attention factor differs from 1 too), 8 experts in 4 groups of which 2 are
    # kept, top-2, routed scaling 2.5, one shared expert, layer 0 dense, an MTP layer.
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "eos_token_id": EOS_IDS,
        "first_k_dense_replace": 1,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 128,
        "kv_lora_rank": 32,
        "max_position_embeddings": 256,
        "model_type": "deepseek_v3",
        "moe_intermediate_size": 16,
        "moe_layer_freq": 1,
        "n_group": 4,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 3,
        "num_nextn_predict_layers": 1,
        "pad_token_id": PAD_ID,
        "q_lora_rank": 32,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 16,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {
            "beta_fast": 32,
            "beta_slow": 1,
            "factor": 8.0,
            "mscale": 1.0,
            "mscale_all_dim": 0.707,
            "original_max_position_embeddings": 32,
            "type": "yarn",
        },
        "rope_theta": 10000,
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "tie_word_embeddings": False,
        "topk_group": 2,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "v_head_dim": 16,
        "vocab_size": 256,
    }


def shape(name: str, c: Q.Config) -> tuple:
    d, V, H = c.hidden_size, c.vocab_size, c.num_heads
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        return (V, d)
    mod = name.split(".")[-2]
    if name.endswith("e_score_correction_bias"):
        return (c.num_experts,)
    if mod == "q_a_layernorm":
        return (c.q_lora,)
    if mod == "kv_a_layernorm":
        return (c.kv_lora,)
    if mod.endswith("layernorm") or mod in ("enorm", "hnorm", "norm"):
        return (d,)
    if mod == "eh_proj":
        return (d, 2 * d)
    if mod == "q_a_proj":
        return (c.q_lora, d)
    if mod == "q_b_proj":
        return (H * (c.nope + c.rope), c.q_lora)
    if mod == "kv_a_proj_with_mqa":
        return (c.kv_lora + c.rope, d)
    if mod == "kv_b_proj":
        return (H * (c.nope + c.v_dim), c.kv_lora)
    if mod == "o_proj":
        return (d, H * c.v_dim)
    if mod == "gate":
        return (c.num_experts, d)
    if c.dsa and (s := make_fixtures.indexer_shape(mod, c.index_n_heads, c.index_head_dim, c.q_lora, d)):
        return s
    if ".experts." in name:
        inter = c.moe_intermediate_size
    elif ".shared_experts." in name:
        inter = c.moe_intermediate_size * c.n_shared
    else:
        inter = c.intermediate_size
    return (inter, d) if mod != "down_proj" else (d, inter)


def build_storage(cfg: dict, seed: int) -> dict:
    """{name: (dtype, stored array)}: the same numpy draws for every variant; an FP8 config
    block-quantizes the bf16-rounded draw of each FP8 weight (amax / 448 per block)."""
    c = Q.Config(cfg)
    block = Q.fp8_block(cfg)
    rng = np.random.Generator(np.random.PCG64(seed))
    out = {}
    for name in Q.weight_names(cfg):  # the scales are not drawn
        s = shape(name, c)
        if name.endswith("e_score_correction_bias"):  # kept f32 as in the real checkpoints
            out[name] = ("F32", np.asarray(0.02 * rng.standard_normal(s), dtype=np.float32))
            continue
        if name == "model.embed_tokens.weight":
            w = rng.standard_normal(s)
        elif name.endswith(".bias"):  # the indexer's k_norm bias
            w = 0.1 * rng.standard_normal(s)
        elif len(s) == 1:
            w = 1.0 + 0.1 * rng.standard_normal(s)
        else:
            mod = "lm_head" if name == "lm_head.weight" else name.split(".")[-2]
            w = (GAIN.get(mod, 1.0) / math.sqrt(s[1])) * rng.standard_normal(s)
        w = np.asarray(w, dtype=np.float32)
        if block is not None and Q.is_f32_in_fp8(name):  # deepseek_v32's indexer k_norm
            out[name] = ("F32", w)
        elif block is not None and Q.is_fp8_weight(name):
            codes, scale = fmt.quantize_fp8_block(fmt.round_to_bf16(w), block)
            out[name] = ("F8_E4M3", codes)
            out[name + "_scale_inv"] = ("F32", scale)
        else:
            out[name] = ("BF16", fmt.f32_to_bf16_bits(w))
    return out


def yarn_effects(cfg: dict, w: dict, ids: list, top1: list) -> dict:
    """How many teacher-forced top-1 change without the softmax mscale, and with plain RoPE
    frequencies (no YaRN at all): evidence that the fixture exercises YaRN."""
    out = {}
    for key, edit in (("top1_changed_without_softmax_mscale", "softmax"), ("top1_changed_with_plain_rope", "rope")):
        c = Q.Config(cfg)
        if edit == "softmax":
            c.softmax_scale = (c.nope + c.rope) ** -0.5
        else:
            c.yarn = False
        t = Q.DeepseekV3Ref(c, w).forward(ids, mtp=False)["logits"].argmax(-1).tolist()
        out[key] = sum(int(a != b) for a, b in zip(t, top1))
    return out


def indexer_effects(cfg: dict, w: dict, ids: list, top1: list) -> dict:
    """deepseek_v32: how many teacher-forced top-1 change when every causal key is attended (no
    selection), and when the indexer rotates adjacent pairs (GLM-5's rope) instead of split halves:
    evidence that the fixture exercises the indexer and its rope style."""
    out = {}
    for key, edit in (("top1_changed_without_index_selection", "dense"),
                      ("top1_changed_with_interleaved_indexer_rope", "rope")):
        c = Q.Config(cfg)
        m = Q.DeepseekV3Ref(c, w)
        if edit == "dense":
            m.dense = True
        else:
            c.index_rope_half = False
        t = m.forward(ids, mtp=False)["logits"].argmax(-1).tolist()
        out[key] = sum(int(a != b) for a, b in zip(t, top1))
    return out


def make_ids(seed: int, vocab: int) -> list:
    rng = np.random.Generator(np.random.PCG64(seed + 7919))
    return [int(x) for x in rng.integers(0, min(vocab, min(EOS_IDS)), SEQ_LEN)]


def variant_config(variant: str) -> dict:
    cfg = config()
    v = VARIANTS[variant]
    if v.get("v32"):
        cfg.update(V32_INDEXER, model_type="deepseek_v32", architectures=["DeepseekV32ForCausalLM"])
    if v["block"] is not None:
        cfg["quantization_config"] = Q.released_fp8_quant_config(v["block"])
    return cfg if variant == "bf16" else dict(sorted(cfg.items()))


def weight_files(d: str) -> list:
    return sorted(fn for fn in os.listdir(d) if fn.endswith(".safetensors") or fn == "model.safetensors.index.json")


def write(out_dir: str, cfg: dict, storage: dict, ref: dict, shards: int):
    os.makedirs(out_dir, exist_ok=True)
    for fn in weight_files(out_dir):  # a previous layout's files
        os.remove(os.path.join(out_dir, fn))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": EOS_IDS, "pad_token_id": PAD_ID, "do_sample": False}, f, indent=2)
        f.write("\n")
    make_fixtures.write_weights(out_dir, storage, shards)
    tmp = os.path.join(out_dir, "reference.json.tmp")
    with open(tmp, "w") as f:
        json.dump(ref, f)
        f.write("\n")
    os.replace(tmp, os.path.join(out_dir, "reference.json"))


def check(committed: str, variant: str) -> int:
    import tempfile
    name = VARIANTS[variant]["name"]
    with open(os.path.join(committed, "reference.json")) as f:
        want = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        if main(["--out", tmp, "--variant", variant, "--seed", str(want["seed"])]) != 0:
            return 1
        errs = []
        files = weight_files(committed)
        if files != weight_files(os.path.join(tmp, name)):
            errs.append(f"weight files {files} differ from the regenerated {weight_files(os.path.join(tmp, name))}")
        for fn in ["config.json", "generation_config.json"] + files:
            if not os.path.exists(os.path.join(tmp, name, fn)):
                continue
            with open(os.path.join(committed, fn), "rb") as a, open(os.path.join(tmp, name, fn), "rb") as b:
                if a.read() != b.read():
                    errs.append(f"{fn} differs from the regenerated one")
        with open(os.path.join(tmp, name, "reference.json")) as f:
            got = json.load(f)
        for k in ("ids", "top1", "greedy", "mlp_layer_types", "mtp_top1"):
            if (got[k]["ids"] if k == "greedy" else got[k]) != (want[k]["ids"] if k == "greedy" else want[k]):
                errs.append(f"reference.json {k} differs")
        for key in ("logits", "mtp_logits"):
            for p, v in want[key].items():
                d = max(abs(x - y) for x, y in zip(v, got[key][p]))
                if d > 1e-4:
                    errs.append(f"reference.json {key}@{p} differ by {d:.3g}")
        # The committed files, read back by the oracle's own loader (shards, FP8 dequantization),
        # give the committed top-1s.
        if VARIANTS[variant]["shards"] > 1 and VARIANTS[variant]["block"] is not None:
            with open(os.path.join(committed, "model.safetensors.index.json")) as f:
                wm = json.load(f)["weight_map"]
            if not any(n.endswith("_scale_inv") and wm[n] != wm[n[:-len("_scale_inv")]] for n in wm):
                errs.append("no FP8 weight_scale_inv lies in another shard than its weight any more")
        o = Q.load_checkpoint(committed).forward(want["ids"])
        if o["logits"].argmax(-1).tolist() != want["top1"]:
            errs.append("the committed checkpoint, loaded back, does not give the committed top1")
    for e in errs:
        print("FAILED:", e, file=sys.stderr)
    print(f"{name} regenerates" if not errs else f"{len(errs)} problems", file=sys.stderr)
    return 1 if errs else 0


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="bf16",
                    help="bf16: dsv3-tiny-bf16 (default); fp8: dsv3-tiny-fp8 (block FP8, two shards); "
                         "v32: dsv32-tiny-bf16 (deepseek_v32, the DSA indexer); v32fp8: dsv32-tiny-fp8 "
                         "(deepseek_v32 in block FP8 incl. the indexer's wq_b / wk, two shards)")
    ap.add_argument("--seed", type=int, help="pin the seed (must still meet the targets)")
    ap.add_argument("--check", action="store_true",
                    help="regenerate <out>/<the variant's fixture> with its committed seed into a temp dir and "
                         "compare: files byte for byte, ids / top-1 / greedy exactly, logits within 1e-4")
    a = ap.parse_args(argv)
    v = VARIANTS[a.variant]
    name = v["name"]
    if a.check:
        return check(os.path.join(a.out, name), a.variant)
    cfg = variant_config(a.variant)
    seeds = [a.seed] if a.seed is not None else v["seeds"]
    for tried, seed in enumerate(seeds, 1):
        storage = build_storage(cfg, seed)
        w = Q.weights_of(storage, cfg)  # FP8: dequantized, as the loader does
        model = Q.DeepseekV3Ref(Q.Config(cfg), w)
        ids = make_ids(seed, cfg["vocab_size"])
        ref = Q.compute_reference(model, ids)
        ref.update(yarn_effects(cfg, w, ids, ref["top1"]))
        v32 = bool(v.get("v32"))
        if v32:
            ref.update(indexer_effects(cfg, w, ids, ref["top1"]))
        ok = (not v32 or (ref["min_index_topk_gap"] >= TARGET["min_router_gap"]
                          and ref["top1_changed_without_index_selection"] > 0
                          and ref["top1_changed_with_interleaved_indexer_rope"] > 0)) and (ref["min_router_gap"] >= TARGET["min_router_gap"] and ref["min_group_gap"] >= TARGET["min_router_gap"]
              and ref["min_top1_margin"] >= TARGET["min_margin"] and ref["min_greedy_margin"] >= TARGET["min_margin"]
              and ref["min_mtp_top1_margin"] >= TARGET["min_margin"] and ref["min_choice_score"] > 0
              and ref["top1_changed_without_softmax_mscale"] > 0 and ref["top1_changed_with_plain_rope"] > 0)
        print(f"seed {seed}: router gap {ref['min_router_gap']:.3g}, group gap {ref['min_group_gap']:.3g}, "
              f"top1 margin {ref['min_top1_margin']:.3g}, greedy margin {ref['min_greedy_margin']:.3g}, "
              f"mtp margin {ref['min_mtp_top1_margin']:.3g}, yarn effects "
              f"{ref['top1_changed_without_softmax_mscale']}/{ref['top1_changed_with_plain_rope']}"
              + (f", index gap {ref['min_index_topk_gap']:.3g}, indexer effects "
                 f"{ref['top1_changed_without_index_selection']}/{ref['top1_changed_with_interleaved_indexer_rope']}"
                 if v32 else "")
              + f"{'' if ok else ' (rejected)'}", file=sys.stderr)
        if ok:
            weights = "bf16 weights"
            if v["block"] is not None:
                weights = (f"float8_e4m3fn weights with float32 weight_scale_inv per {v['block'][0]}x{v['block'][1]} "
                           f"block (attention{', indexer wq_b / wk' if v32 else ''}, dense MLP, experts, eh_proj; "
                           f"bf16 embed / lm_head / norms / router{' / indexer weights_proj' if v32 else ''}, "
                           f"f32 router bias{' and indexer k_norm' if v32 else ''}), {v['shards']} shards")
            if v32:
                weights += (", model_type deepseek_v32: DSA indexer in every layer and the MTP layer (16 heads "
                            "of dim 64, index_topk 16, split-half indexer rope)")
            ref = {"fixture": name, "seed": seed, "seeds_tried": tried,
                   "generator": "tests/reference/make_dsv3_fixture.py",
                   "description": "deepseek_v3 layout: 3 layers (layer 0 dense via first_k_dense_replace, 2 MoE) "
                                  "+ MTP layer, MLA 4 heads (q_lora 32, kv_lora 32, nope 16, rope 16, v 16), "
                                  "YaRN factor 8 over original context 32 (beta 32/1, mscale 1, mscale_all_dim "
                                  "0.707), 8 experts in 4 groups (2 kept) top-2 sigmoid with correction bias "
                                  "(noaux_tc), routed scaling 2.5, 1 shared expert, " + weights, **ref}
            write(os.path.join(a.out, name), cfg, storage, ref, v["shards"])
            return 0
    print("no seed met the targets", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
