#!/usr/bin/env python3
"""Writes a random-weight checkpoint in Hugging Face layout, for tests and benchmarks
that need a model bigger than the fixtures (no reference outputs). glm_moe_dsa by default;
the qwen3 / glm4 presets write qwen3_moe / glm4_moe (bf16, streamed, one shard per layer), the
dsv3 preset deepseek_v3 (streamed; --fp8: DeepSeek-V3's block-FP8 layout, 128 x 128 blocks, as
tests/fixtures/dsv3-tiny-fp8 at the released block size), the dsv32 preset deepseek_v32 (the same
plus DeepSeek-V3.2's indexer; --fp8: V3.2's layout, the indexer's wq_b / wk FP8 too and its k_norm
f32, as tests/fixtures/dsv32-tiny-fp8).

    /usr/bin/python3 tools/make_model.py --preset rss --out /tmp/m [--fp8] [--seed 1]
    /usr/bin/python3 tools/make_model.py --set hidden_size=512 --set n_routed_experts=64 --out /tmp/m
    /usr/bin/python3 tools/make_model.py --preset qwen3-30b-a3b-slice --out /tmp/q
    /usr/bin/python3 tools/make_model.py --preset glm45-air-slice --out /tmp/g
    /usr/bin/python3 tools/make_model.py --preset dsv3-slice --out /tmp/dsv3   # ~13 GB, streamed
    /usr/bin/python3 tools/make_model.py --preset dsv3-slice --fp8 --out /tmp/dsv3-fp8   # ~7 GB
    /usr/bin/python3 tools/make_model.py --preset dsv32-slice --fp8 --out /tmp/dsv32-fp8   # ~7 GB

--fill periodic (with --stream, or the glm52-slice preset): every matrix of 1M elements or more is one
block of PERIOD normal draws of its scale, repeated from a random start, instead of fresh draws: the same
sizes and per-tensor scale in minutes instead of hours on a busy machine, for disk/speed benchmarks
(routers, norms, biases and small matrices keep the fixtures' init; outputs are not meaningful text).
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
import make_glm4_fixture as MG  # noqa: E402
import make_qwen3_fixture as MQ  # noqa: E402

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
    # Qwen3-30B-A3B's per-layer shapes (hidden 2048, 32 q / 4 kv heads of 128, 128-wide q/k norm,
    # experts 768 wide, top-8, softmax router renormalised) with 5 layers, 32 of its 128 experts and a
    # small vocabulary. ~1.1 GB as bf16.
    "qwen3-30b-a3b-slice": dict(family="qwen3_moe", hidden_size=2048, num_attention_heads=32,
                                num_key_value_heads=4, head_dim=128, intermediate_size=6144,
                                moe_intermediate_size=768, num_experts=32, num_experts_per_tok=8,
                                norm_topk_prob=True, mlp_only_layers=[], decoder_sparse_step=1,
                                num_hidden_layers=5, vocab_size=8192, rope_theta=1000000.0,
                                max_position_embeddings=8192, rms_norm_eps=1e-06),
    # GLM-4.5-Air's per-layer shapes (hidden 4096, 96 q / 8 kv heads of 128, partial rotary 0.5,
    # q/k/v bias, no q/k norm, experts 1408 wide, top-8, one group, routed scaling 1.0, one shared
    # expert, dense layer 0 10944 wide, an MTP layer) with 5 layers, 32 of its 128 experts and a
    # small vocabulary. ~3.7 GB as bf16.
    "glm45-air-slice": dict(family="glm4_moe", hidden_size=4096, num_attention_heads=96, num_key_value_heads=8,
                            head_dim=128, partial_rotary_factor=0.5, attention_bias=True, use_qk_norm=False,
                            intermediate_size=10944, moe_intermediate_size=1408, n_routed_experts=32,
                            num_experts_per_tok=8, n_group=1, topk_group=1, routed_scaling_factor=1.0,
                            n_shared_experts=1, first_k_dense_replace=1, num_hidden_layers=5,
                            num_nextn_predict_layers=1, vocab_size=8192, rope_theta=1000000.0,
                            max_position_embeddings=8192),
    "rss": dict(hidden_size=512, moe_intermediate_size=512, n_routed_experts=64, num_experts_per_tok=4,
                num_hidden_layers=4, first_k_dense_replace=1, vocab_size=1024, intermediate_size=512,
                index_topk=64),
}
# DeepSeek-V3.2's: dsv3-slice plus its DSA indexer (64 heads of 128, top 2048) in every layer and the MTP
# layer.
PRESETS["dsv32-slice"] = dict(PRESETS["dsv3-slice"], model_type="deepseek_v32",
                              architectures=["DeepseekV32ForCausalLM"], index_n_heads=64, index_head_dim=128,
                              index_topk=2048)


def gqa_family(family):
    """(base config, tensor names, shape, init) of a GQA family, from its fixture generator: the same
    init distribution as the fixtures (norms 1 + 0.1 N, biases 0.2 N, matrices gain / sqrt(fan_in) N,
    the router correction bias f32)."""
    import numpy as np
    gen, ref = (MQ, MQ.Q) if family == "qwen3_moe" else (MG, MG.Q)
    base = gen.config() if family == "qwen3_moe" else MG.air_config()

    def init(name, shape, rng):
        if name == "model.embed_tokens.weight":
            return rng.standard_normal(shape, dtype=np.float32)
        if name.endswith("e_score_correction_bias"):
            return np.asarray(0.02 * rng.standard_normal(shape), dtype=np.float32)
        if name.endswith(".bias"):
            return np.asarray(0.2 * rng.standard_normal(shape), dtype=np.float32)
        if len(shape) == 1:
            return np.asarray(1.0 + 0.1 * rng.standard_normal(shape), dtype=np.float32)
        mod = "lm_head" if name == "lm_head.weight" else name.split(".")[-2]
        w = rng.standard_normal(shape, dtype=np.float32)
        w *= np.float32(gen.GAIN.get(mod, 1.0) / np.sqrt(shape[1]))
        return w

    return base, ref.expected_tensor_names, lambda n, cfg: gen.shape(n, ref.Config(cfg)), init


DEEPSEEK = ("deepseek_v3", "deepseek_v32")  # written from make_dsv3_fixture's layout (deepseek_v3_ref)
PERIOD = 4194301  # elements of the repeated block of --fill periodic (odd: rows do not line up with it)


def write_streaming(out_dir, config, seed, fp8, family=None, fill="normal"):
    """The same tensors and init distribution as make_fixtures.build_storage (or, for a GQA family, its
    fixture generator), generated and written one tensor at a time into one shard per layer, so memory
    stays at the largest tensor. fill="periodic": see --fill above."""
    import numpy as np
    R = F.R
    os.makedirs(out_dir, exist_ok=True)
    block = tuple(config.get("quantization_config", {}).get("weight_block_size", (128, 128)))
    deepseek = family is None and config["model_type"] in DEEPSEEK
    if family is not None:
        _, names_of, shape_fn, init = gqa_family(family)
        names = names_of(config)
        shape_of = lambda n: shape_fn(n, config)  # noqa: E731
    elif config["model_type"] in DEEPSEEK:
        dc = DS.Config(config)
        names = DS.weight_names(config)  # the scales are planned with their weights below
        shape_of = lambda n: DF.shape(n, dc)  # noqa: E731
        init = F.gen_tensor
    else:
        c = R.Config(config)
        names = R.expected_tensor_names(config, fp8=False)
        shape_of = lambda n: F.tensor_shape(n, c)  # noqa: E731
        init = F.gen_tensor
    groups = {}
    for n in names:
        L = F._layer_of(n)
        groups.setdefault(L, []).append(n)
    rng = np.random.Generator(np.random.PCG64(seed))
    weight_map, total = {}, 0
    unit = rng.standard_normal(PERIOD).astype(np.float32) if fill == "periodic" else None
    blocks = {}  # scale -> the block as bf16 bits, twice (a window from any start)
    keys = sorted(groups)
    for gi, L in enumerate(keys):
        fn = f"model-{gi + 1:05d}-of-{len(keys):05d}.safetensors"
        # Shapes and dtypes first (for the header), then data in the same order.
        plan = []
        for n in sorted(groups[L]):
            shape = tuple(shape_of(n))
            module = n[: -len(".weight")] if n.endswith(".weight") else None
            if n.endswith("e_score_correction_bias") or (fp8 and deepseek and DS.is_f32_in_fp8(n)):
                plan.append((n, "F32", shape, None))
            elif fp8 and module is not None and (DS.is_fp8_weight(n) if deepseek else R.is_fp8_module(module)):
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
                nel = int(np.prod(shape))
                if unit is not None and dt == "BF16" and len(shape) == 2 and nel >= (1 << 20):
                    mod = n.split(".")[-2]
                    if n == "model.embed_tokens.weight":
                        scale = 1.0
                    else:
                        scale = F.GAIN.get(mod if n != "lm_head.weight" else "lm_head", 1.0) / np.sqrt(shape[1])
                    if scale not in blocks:
                        b = R.f32_to_bf16_bits(unit * np.float32(scale)).astype("<u2")
                        blocks[scale] = np.concatenate([b, b])
                    b2, at, left = blocks[scale], int(rng.integers(0, PERIOD)), nel
                    while left > 0:
                        m = min(left, PERIOD)
                        f.write(b2[at:at + m].tobytes())
                        left -= m
                    continue
                w = init(n, shape, rng)
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
        if family is not None:
            gc = {"eos_token_id": config["eos_token_id"], "pad_token_id": config["pad_token_id"], "do_sample": False}
        elif deepseek:
            gc = {"eos_token_id": DF.EOS_IDS, "pad_token_id": DF.PAD_ID, "do_sample": False}
        else:
            gc = F.generation_config(config)
        json.dump(gc, f, indent=2)
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
    ap.add_argument("--fill", choices=["normal", "periodic"], default="normal",
                    help="periodic: big matrices repeat one random block (fast; --stream only, see above)")
    a = ap.parse_args(argv)
    over = dict(PRESETS.get(a.preset, {}))
    family = over.pop("family", None)
    for kv in a.set:
        k, _, v = kv.partition("=")
        over[k] = json.loads(v)
    if family is not None:
        if a.fp8:
            sys.exit("make_model: --fp8 is for glm_moe_dsa models only")
        if a.fill != "normal":
            sys.exit("make_model: --fill periodic is for glm_moe_dsa models only")
        config = dict(gqa_family(family)[0], **over)
        write_streaming(a.out, config, a.seed, False, family)
        return
    if over.get("model_type") in DEEPSEEK:
        config = {**DF.config(), **over}  # the fixture's config with the preset's shapes
    else:
        config = F.glm5_config(**over)
    if a.fp8 and config["model_type"] in DEEPSEEK:
        config = dict(config, quantization_config=DS.released_fp8_quant_config())
    elif a.fp8:
        config = dict(config, quantization_config=F.fp8_quant_config(config))
    if config["model_type"] in DEEPSEEK and not (a.stream or a.preset in ("dsv3-slice", "dsv32-slice")):
        ap.error(f"{config['model_type']} checkpoints are written with --stream")
    if a.stream or a.preset in ("glm52-slice", "dsv3-slice", "dsv32-slice"):
        write_streaming(a.out, config, a.seed, a.fp8, fill=a.fill)
        return
    if a.fill != "normal":
        ap.error("--fill periodic needs --stream")
    storage = F.build_storage(config, a.seed, a.fp8)
    F.write_checkpoint(a.out, config, storage, a.shards)
    total = sum(v[1].nbytes for v in storage.values())
    print(f"make_model: wrote {a.out} ({total / 1e6:.1f} MB, {len(storage)} tensors)")


if __name__ == "__main__":
    main()
