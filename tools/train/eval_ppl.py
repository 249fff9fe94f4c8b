#!/usr/bin/env python3
"""Held-out perplexity of a glm_moe_dsa checkpoint with the fp32 oracle (tests/reference/glm_moe_dsa_ref.py).

The id file is cut into non-overlapping windows of --ctx tokens; each window is one forward from
position 0 (DSA sparse attention unless --dense); every position except the window's first is scored.
Also reports teacher-forced top-1 accuracy and, when the model has an MTP layer, the MTP loss / top-1
accuracy (row i predicts ids[i+2]) and how often the MTP top-1 equals the main model's top-1 for the same
token (its logits at i+1: what a speculative draft is verified against).  Prints one JSON object.

    /usr/bin/python3 tools/train/eval_ppl.py --model models/glm5-strata-tiny --ids models/glm5-strata-tiny/heldout_ids.txt
ID files: .bin = raw little-endian uint16, .npy, or text with integers separated by commas/whitespace.
Compare strata: `build/strata score --model DIR --ids <window> --logits-at ...` on the same windows.
"""
import argparse, json, math, os, re, sys, time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "reference"))
from glm_moe_dsa_ref import load_checkpoint  # noqa: E402


def read_ids(path):
    if path.endswith(".bin"):
        return np.fromfile(path, dtype="<u2").astype(np.int64)
    if path.endswith(".npy"):
        return np.load(path).astype(np.int64).ravel()
    return np.array([int(t) for t in re.split(r"[\s,]+", open(path).read().strip()) if t], dtype=np.int64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--max-windows", type=int, default=0, help="0 = all windows")
    ap.add_argument("--dense", action="store_true", help="disable the DSA selection (all causal keys)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    m = load_checkpoint(a.model)
    ids = read_ids(a.ids)
    nwin = len(ids) // a.ctx
    if a.max_windows:
        nwin = min(nwin, a.max_windows)
    nll = mnll = 0.0
    n = mn = hit = mhit = magree = 0
    t0 = time.time()
    for w in range(nwin):
        x = ids[w * a.ctx:(w + 1) * a.ctx]
        o = m.forward(x.tolist(), dense=a.dense, mtp=True)
        t = torch.from_numpy(x)
        lg = o["logits"][:-1]
        nll += F.cross_entropy(lg, t[1:], reduction="sum").item()
        hit += (lg.argmax(-1) == t[1:]).sum().item()
        n += len(x) - 1
        if o["mtp_logits"] is not None:
            ml = o["mtp_logits"][:-1]  # rows 0..T-3 predict ids[2..T-1]
            mnll += F.cross_entropy(ml, t[2:], reduction="sum").item()
            mhit += (ml.argmax(-1) == t[2:]).sum().item()
            magree += (ml.argmax(-1) == o["logits"][1:-1].argmax(-1)).sum().item()  # both predict ids[i+2]
            mn += len(x) - 2
        if (w + 1) % 10 == 0:
            print(f"[{w + 1}/{nwin}] ppl so far {math.exp(nll / n):.3f} ({time.time() - t0:.0f}s)", file=sys.stderr)
    res = {"model": a.model, "ids": a.ids, "ctx": a.ctx, "windows": nwin, "scored_tokens": n,
           "dense": a.dense, "loss": nll / n, "ppl": math.exp(nll / n), "top1_acc": hit / n}
    if mn:
        res.update({"mtp_loss": mnll / mn, "mtp_ppl": math.exp(mnll / mn), "mtp_top1_acc": mhit / mn,
                    "mtp_agree_main_top1": magree / mn,
                    "mtp_scored_tokens": mn})
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
