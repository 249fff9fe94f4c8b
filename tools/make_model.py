#!/usr/bin/env python3
"""Writes a random-weight glm_moe_dsa checkpoint in Hugging Face layout, for tests
and benchmarks that need a model bigger than the fixtures (no reference outputs).

    /usr/bin/python3 tools/make_model.py --preset rss --out /tmp/m [--fp8] [--seed 1]
    /usr/bin/python3 tools/make_model.py --set hidden_size=512 --set n_routed_experts=64 --out /tmp/m
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import make_fixtures as F  # noqa: E402

PRESETS = {
    # Expert pool ~200 MB as int8 (64 experts x 4 MoE layers incl. MTP), dense part small:
    # the peak-RSS test runs it with a budget a fraction of the pool.
    "rss": dict(hidden_size=512, moe_intermediate_size=512, n_routed_experts=64, num_experts_per_tok=4,
                num_hidden_layers=4, first_k_dense_replace=1, vocab_size=1024, intermediate_size=512,
                index_topk=64),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", choices=sorted(PRESETS))
    ap.add_argument("--set", action="append", default=[], help="config override KEY=JSON_VALUE")
    ap.add_argument("--fp8", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shards", type=int, default=1)
    a = ap.parse_args(argv)
    over = dict(PRESETS.get(a.preset, {}))
    for kv in a.set:
        k, _, v = kv.partition("=")
        over[k] = json.loads(v)
    config = F.glm5_config(**over)
    if a.fp8:
        config = F.fp8_quant_config(config)
    storage = F.build_storage(config, a.seed, a.fp8)
    F.write_checkpoint(a.out, config, storage, a.shards)
    total = sum(v[1].nbytes for v in storage.values())
    print(f"make_model: wrote {a.out} ({total / 1e6:.1f} MB, {len(storage)} tensors)")


if __name__ == "__main__":
    main()
