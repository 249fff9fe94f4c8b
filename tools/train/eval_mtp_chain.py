#!/usr/bin/env python3
"""How well the MTP layer drafts for the main model: per depth of its chain (the MTP layer fed its own
output, as `--spec mtp` runs it), the fraction of positions where its top-1 equals the main model's
top-1 for the same token (agree), and where the whole chain up to that depth does (chain: what a
k-draft chain would get accepted with these inputs). Teacher-forced, DSA on, fp32 (the training model,
tools/train/model.py, which equals the oracle). Prints one JSON object.

    /usr/bin/python3 tools/train/eval_mtp_chain.py --model models/glm5-strata-tiny \\
        --ids models/glm5-strata-tiny/eval/heldout_ids.txt --ctx 512 --max-windows 16 --depth 4
ID files as eval_ppl.py reads them; --selfgen FILE: windows of ctx+1 ids (self_generate.py), the last
--max-windows of them.
"""
import argparse, json, os, sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from eval_ppl import read_ids  # noqa: E402
from model import GlmMoeDsaForCausalLM  # noqa: E402
from train import chain_agreement, load_init  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", help="id file, cut into windows of --ctx")
    ap.add_argument("--selfgen", help="uint16 windows of ctx+1 ids (self_generate.py)")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--max-windows", type=int, default=16)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if bool(a.ids) == bool(a.selfgen):
        sys.exit("give one of --ids, --selfgen")
    torch.set_num_threads(a.threads)
    m = GlmMoeDsaForCausalLM(json.load(open(os.path.join(a.model, "config.json"))))
    load_init(m, a.model)
    m.eval()
    if a.ids:
        ids = read_ids(a.ids)
        n = min(len(ids) // a.ctx, a.max_windows)
        x = ids[:n * a.ctx].reshape(n, a.ctx)
    else:
        w = np.fromfile(a.selfgen, dtype=np.uint16).astype(np.int64)
        if w.size % (a.ctx + 1):
            sys.exit(f"{a.selfgen}: not a whole number of windows of ctx+1 = {a.ctx + 1} ids")
        x = w.reshape(-1, a.ctx + 1)[-a.max_windows:, :-1]
    res = {"model": a.model, "ids": a.ids or a.selfgen, "ctx": a.ctx, "windows": len(x), "depth": a.depth}
    sums = {}
    with torch.no_grad():
        for i in range(len(x)):  # one window at a time: the chain's attention is [depth*ctx]^2 per window
            for k, v in chain_agreement(m, torch.from_numpy(np.ascontiguousarray(x[i:i + 1])), a.depth).items():
                sums[k] = sums.get(k, 0.0) + v / len(x)
    res.update({k: round(v, 4) for k, v in sums.items()})
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
