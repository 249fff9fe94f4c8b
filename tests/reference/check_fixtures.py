#!/usr/bin/python3
"""Regeneration check for the glm_moe_dsa fixtures.

    /usr/bin/python3 tests/reference/check_fixtures.py [--fixtures tests/fixtures] [--regen] [NAME ...]

For every fixture: reloads the checkpoint from disk with the oracle's own safetensors reader
(sharded or not, FP8 dequantized), validates the tensor inventory / dtypes / FP8 scale shapes against
the GLM-5 layout rules, recomputes everything in reference.json and compares (integer outputs
exactly, floats within a small tolerance).  With --regen it also re-runs make_fixtures.py into a
temporary directory and checks that every file is byte-identical to the committed one.
Exit status 0 = all good.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import glm_moe_dsa_ref as R  # noqa: E402

torch.set_num_threads(2)

FLOAT_ATOL = 1e-4
FLOAT_RTOL = 1e-5


class Checker:
    def __init__(self, name):
        self.name = name
        self.errors = []
        self.n = 0

    def ok(self, cond, msg):
        self.n += 1
        if not cond:
            self.errors.append(msg)
            print(f"  FAIL [{self.name}] {msg}")

    def close(self, a, b, what):
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        good = a.shape == b.shape and np.allclose(a, b, atol=FLOAT_ATOL, rtol=FLOAT_RTOL)
        d = float(np.max(np.abs(a - b))) if a.shape == b.shape and a.size else float("nan")
        self.ok(good, f"{what}: max abs diff {d:.3g}")
        return d


def check_layout(ck: Checker, d: str, config: dict):
    raw = R.load_raw_tensors(d)  # also verifies index.json <-> shard contents and total_size
    fp8 = "quantization_config" in config
    exp = set(R.expected_tensor_names(config, fp8=fp8))
    ck.ok(set(raw) == exp, f"tensor inventory (missing {sorted(exp - set(raw))[:5]}, extra {sorted(set(raw) - exp)[:5]})")
    N = config["num_hidden_layers"]
    ck.ok(not any(k.startswith(f"model.layers.{N}.embed_tokens") or k.startswith(f"model.layers.{N}.shared_head.head")
                  for k in raw), "MTP layer has no embed_tokens / shared_head.head copies")
    block = tuple((config.get("quantization_config") or {}).get("weight_block_size", (128, 128)))
    for name, (dt, arr) in raw.items():
        if name.endswith("e_score_correction_bias") or name.endswith("weight_scale_inv"):
            ck.ok(dt == "F32", f"{name} is F32 (got {dt})")
            if name.endswith("weight_scale_inv"):
                w = raw[name[: -len("_scale_inv")]][1]
                exp_shape = (-(-w.shape[0] // block[0]), -(-w.shape[1] // block[1]))
                ck.ok(tuple(arr.shape) == exp_shape, f"{name} shape {arr.shape} == {exp_shape}")
                ck.ok(bool(np.all(arr > 0)), f"{name} positive")
            continue
        module = name[: -len(".weight")] if name.endswith(".weight") else None
        want = "F8_E4M3" if (fp8 and module is not None and R.is_fp8_module(module)) else "BF16"
        ck.ok(dt == want, f"{name} dtype {dt} == {want}")
        if dt == "F8_E4M3":
            ck.ok(not np.any((arr & 0x7F) == 0x7F), f"{name} has no NaN codes")
    types = R.indexer_types_from_config(config)
    for L, t in enumerate(types):
        has = f"model.layers.{L}.self_attn.indexer.wk.weight" in raw
        ck.ok(has == (t == "full"), f"layer {L} ({t}) indexer weights present == {t == 'full'}")
    ck.ok(f"model.layers.{N}.self_attn.indexer.wk.weight" in raw, "MTP layer has its own indexer")


def check_fixture(d: str) -> Checker:
    name = os.path.basename(os.path.normpath(d))
    ck = Checker(name)
    config = json.load(open(os.path.join(d, "config.json")))
    ref = json.load(open(os.path.join(d, "reference.json")))
    ck.ok(config.get("model_type") == "glm_moe_dsa" and config.get("architectures") == ["GlmMoeDsaForCausalLM"],
          "model_type / architectures")
    ck.ok(os.path.exists(os.path.join(d, "generation_config.json")), "generation_config.json present")
    check_layout(ck, d, config)
    model = R.load_checkpoint(d)
    new = R.compute_reference(
        model, ref["ids"],
        logit_positions=tuple(int(k) for k in ref["logits"]),
        mtp_positions=tuple(int(k) for k in ref["mtp_logits"]),
        greedy_prompt_len=len(ref["greedy"]["prompt"]),
        greedy_new=len(ref["greedy"]["ids"]))
    for k in ("ids", "top1", "dense_top1", "mtp_top1", "dense_differs_at", "indexer_types", "mlp_layer_types"):
        ck.ok(new[k] == ref[k], f"{k} identical")
    ck.ok(new["greedy"]["prompt"] == ref["greedy"]["prompt"] and new["greedy"]["ids"] == ref["greedy"]["ids"],
          "greedy ids identical")
    worst = 0.0
    for k in ("logits", "dense_logits", "mtp_logits"):
        ck.ok(set(new[k]) == set(ref[k]), f"{k} positions")
        for p in ref[k]:
            worst = max(worst, ck.close(new[k][p], ref[k][p], f"{k}[{p}]"))
    for k in ("top1_margin", "dense_top1_margin", "mtp_top1_margin"):
        ck.close(new[k], ref[k], k)
    ck.close(new["greedy"]["margins"], ref["greedy"]["margins"], "greedy margins")
    for k in ("min_topk_gap", "min_router_gap", "min_group_gap"):
        a, b = new[k], ref[k]
        ck.ok((a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-7)),
              f"{k} {a} vs {b}")
    if "rope" in ref:  # RoPE tables (long-context fixture)
        rp = ref["rope"]
        cos, sin = R.rope_tables(rp["theta"], rp["dim"], torch.tensor(rp["positions"], dtype=torch.long))
        ck.ok(rp["theta"] == model.cfg.rope_theta and rp["dim"] == model.cfg.qk_rope_head_dim, "rope theta / dim")
        ck.close(cos.numpy(), rp["cos"], "rope cos")
        ck.close(sin.numpy(), rp["sin"], "rope sin")
    ck.ok(ref["min_topk_gap"] >= 1e-4, f"min_topk_gap {ref['min_topk_gap']} >= 1e-4")
    ck.ok(ref["min_router_gap"] >= 1e-5, f"min_router_gap {ref['min_router_gap']} >= 1e-5")
    ck.ok(len(ref["dense_differs_at"]) > 0, "DSA result differs from dense somewhere")
    ck.ok(len(ref["ids"]) >= 40 and len(ref["mtp_top1"]) == len(ref["ids"]) - 1, "sequence lengths")
    print(f"  [{name}] {ck.n} checks, {len(ck.errors)} failures, worst logit diff {worst:.3g}")
    return ck


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def regen_check(fixtures: str, names) -> list:
    import make_fixtures as M
    errs = []
    with tempfile.TemporaryDirectory() as tmp:
        M.main(["--out", tmp, "-q"] + (["--only"] + list(names) if names else []))
        for n in sorted(os.listdir(tmp)):
            a, b = os.path.join(fixtures, n), os.path.join(tmp, n)
            fa = sorted(os.listdir(a)) if os.path.isdir(a) else []
            fb = sorted(os.listdir(b))
            if fa != fb:
                errs.append(f"{n}: file lists differ {fa} vs {fb}")
                continue
            for fn in fb:
                if sha256(os.path.join(a, fn)) != sha256(os.path.join(b, fn)):
                    errs.append(f"{n}/{fn} not byte-identical on regeneration")
            print(f"  [{n}] regeneration: {len(fb)} files compared")
    return errs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--fixtures", default=os.path.join(HERE, "..", "fixtures"))
    ap.add_argument("--regen", action="store_true", help="also regenerate into a temp dir and compare bytes")
    args = ap.parse_args()
    fx = os.path.abspath(args.fixtures)
    names = args.names or sorted(n for n in os.listdir(fx) if os.path.exists(os.path.join(fx, n, "reference.json")))
    errors = []
    for n in names:
        print(f"checking {n}")
        errors += check_fixture(os.path.join(fx, n)).errors
    if args.regen:
        print("regenerating")
        errors += regen_check(fx, args.names)
    if errors:
        print(f"FAILED: {len(errors)} problems")
        for e in errors[:50]:
            print("  ", e)
        sys.exit(1)
    print("ALL FIXTURES OK")


if __name__ == "__main__":
    main()
