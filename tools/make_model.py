#!/usr/bin/env python3
"""Writes a random-weight glm_moe_dsa (or, with a deepseek_v3 preset, deepseek_v3) checkpoint in
Hugging Face layout, for tests and benchmarks that need a model bigger than the fixtures (no
reference outputs).

    /usr/bin/python3 tools/make_model.py --preset rss --out /tmp/m [--fp8] [--seed 1]
    /usr/bin/python3 tools/make_model.py --set hidden_size=512 --set n_routed_experts=64 --out /tmp/m
    /usr/bin/python3 tools/make_model.py --preset dsv3-slice --out /tmp/dsv3   # ~13 GB, streamed
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import make_fixtures as F  # noqa: E402
import deepseek_v3_ref as DS  # noqa: E402
import make_dsv3_fixture as DF  # noqa: E402

PRESETS = {
    # The real GLM-5.2 per-layer shapes with fewer layers and experts and a small vocabulary
    # (issue 5's benchmark model; see /work/shared/docs/benchmark-anchors.md). ~14 GB as bf16:
    # written with --stream, one tensor at a time, one shard per layer.
    "glm52-slice": dict(hidden_size=6144, num_attention_heads=64, num_key_value_heads=64, q_lora_rank=2048,
                        kv_lora_rank=512, qk_nope_head_dim=192, qk_rope_head_dim=64, v_head_dim=256,
                        head_dim=192, moe_intermediate_size=2048, intermediate_size=12288, index_n_heads=32,
                        index_head_dim=128, index_topk=2048, num_hidden_layers=5, first_k_dense_replace=1,
                        n_routed_experts=32, num_experts_per_tok=8, n_shared_experts=1, vocab_size=8192,
                        index_topk_freq=4, index_skip_topk_offset=3, index_share_for_mtp_iteration=True,
                        rope_parameters={"rope_theta": 8000000, "rope_type": "default"},
                        max_position_embeddings=8192),
    # DeepSeek-V3 / R1 / V3.1's per-layer shapes (hidden 7168, 128 heads, q_lora 1536, kv_lora 512,
    # nope 128, rope 64, v 128, experts of 2048, dense MLP 18432, 8 groups of which 4 kept, top-8,
    # routed scaling 2.5, YaRN factor 40 over 4096) with 4 layers (1 dense) + the MTP layer, 32
    # experts (4 per group) and a small vocabulary. ~13 GB as bf16, written with --stream.
    "dsv3-slice": dict(model_type="deepseek_v3", hidden_size=7168, num_attention_heads=128, q_lora_rank=1536,
                       kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                       moe_intermediate_size=2048, intermediate_size=18432, num_hidden_layers=4,
                       first_k_dense_replace=1, n_routed_experts=32, num_experts_per_tok=8, n_group=8, topk_group=4,
                       n_shared_experts=1, routed_scaling_factor=2.5, vocab_size=8192, rope_theta=10000,
                       max_position_embeddings=163840,
                       rope_scaling={"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}),
    # Expert pool ~200 MB as int8 (64 experts x 4 MoE layers incl. MTP), dense part small:
    # the peak-RSS test runs it with a budget a fraction of the pool.
    "rss": dict(hidden_size=512, moe_intermediate_size=512, n_routed_experts=64, num_experts_per_tok=4,
                num_hidden_layers=4, first_k_dense_replace=1, vocab_size=1024, intermediate_size=512,
                index_topk=64),
}


def write_streaming(out_dir, config, seed, fp8):
    """The same tensors and init distribution as make_fixtures.build_storage, generated and written one tensor
    at a time into one shard per layer, so memory stays at the largest tensor."""
    import numpy as np
    R = F.R
    os.makedirs(out_dir, exist_ok=True)
    block = tuple(config.get("quantization_config", {}).get("weight_block_size", (128, 128)))
    if config["model_type"] == "deepseek_v3":
        dc = DS.Config(config)
        names = DS.expected_tensor_names(config)
        shape_of = lambda n: DF.shape(n, dc)  # noqa: E731
    else:
        c = R.Config(config)
        names = R.expected_tensor_names(config, fp8=False)
        shape_of = lambda n: F.tensor_shape(n, c)  # noqa: E731
    groups = {}
    for n in names:
        L = F._layer_of(n)
        groups.setdefault(L, []).append(n)
    rng = np.random.Generator(np.random.PCG64(seed))
    weight_map, total = {}, 0
    keys = sorted(groups)
    for gi, L in enumerate(keys):
        fn = f"model-{gi + 1:05d}-of-{len(keys):05d}.safetensors"
        # Shapes and dtypes first (for the header), then data in the same order.
        plan = []
        for n in sorted(groups[L]):
            shape = shape_of(n)
            module = n[: -len(".weight")] if n.endswith(".weight") else None
            if n.endswith("e_score_correction_bias"):
                plan.append((n, "F32", shape, None))
            elif fp8 and module is not None and R.is_fp8_module(module):
                plan.append((n, "F8_E4M3", shape, None))
                sshape = (-(-shape[0] // block[0]), -(-shape[1] // block[1]))
                plan.append((module + ".weight_scale_inv", "F32", sshape, n))
            else:
                plan.append((n, "BF16", shape, None))
        size = {"F32": 4, "BF16": 2, "F8_E4M3": 1}
        header, off = {}, 0
        for n, dt, shape, _ in sorted(plan):
            nb = int(np.prod(shape)) * size[dt]
            header[n] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + nb]}
            off += nb
        hb = json.dumps({"__metadata__": {"format": "pt"}, **header}, separators=(",", ":")).encode()
        hb += b" " * ((-len(hb)) % 8)
        pending = {}
        with open(os.path.join(out_dir, fn + ".tmp"), "wb") as f:
            f.write(len(hb).to_bytes(8, "little"))
            f.write(hb)
            for n, dt, shape, owner in sorted(plan):
                if owner is not None:  # a scale computed with its weight
                    f.write(pending.pop(n).astype("<f4").tobytes())
                    continue
                w = F.gen_tensor(n, shape, rng)
                if dt == "F32":
                    f.write(w.astype("<f4").tobytes())
                elif dt == "BF16":
                    f.write(R.f32_to_bf16_bits(w).astype("<u2").tobytes())
                else:
                    codes, scale = R.quantize_fp8_block(R.round_to_bf16(w), block)
                    f.write(codes.astype(np.uint8).tobytes())
                    pending[n[: -len(".weight")] + ".weight_scale_inv"] = scale
                del w
        os.replace(os.path.join(out_dir, fn + ".tmp"), os.path.join(out_dir, fn))
        for n, *_ in plan:
            weight_map[n] = fn
        total += off
        print(f"make_model: {fn} ({off / 1e9:.2f} GB)", flush=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(F.generation_config(config) if config["model_type"] != "deepseek_v3" else
                  {"eos_token_id": DF.EOS_IDS, "pad_token_id": DF.PAD_ID, "do_sample": False}, f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=1)
        f.write("\n")
    print(f"make_model: wrote {out_dir} ({total / 1e9:.2f} GB)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", choices=sorted(PRESETS))
    ap.add_argument("--set", action="append", default=[], help="config override KEY=JSON_VALUE")
    ap.add_argument("--fp8", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--stream", action="store_true", help="generate and write one tensor at a time (big models)")
    a = ap.parse_args(argv)
    over = dict(PRESETS.get(a.preset, {}))
    for kv in a.set:
        k, _, v = kv.partition("=")
        over[k] = json.loads(v)
    if over.get("model_type") == "deepseek_v3":
        config = {**DF.config(), **over}  # the fixture's config with the preset's shapes
    else:
        config = F.glm5_config(**over)
    if a.fp8:
        config = dict(config, quantization_config=F.fp8_quant_config(config))
    if config["model_type"] == "deepseek_v3" and not (a.stream or a.preset == "dsv3-slice"):
        ap.error("deepseek_v3 checkpoints are written with --stream")
    if a.stream or a.preset in ("glm52-slice", "dsv3-slice"):
        write_streaming(a.out, config, a.seed, a.fp8)
        return
    storage = F.build_storage(config, a.seed, a.fp8)
    F.write_checkpoint(a.out, config, storage, a.shards)
    total = sum(v[1].nbytes for v in storage.values())
    print(f"make_model: wrote {a.out} ({total / 1e6:.1f} MB, {len(storage)} tensors)")


if __name__ == "__main__":
    main()
