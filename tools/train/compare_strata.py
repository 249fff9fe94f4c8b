#!/usr/bin/env python3
"""Check that `strata score` reproduces the fp32 oracle on a checkpoint directory.

Takes --n tokens of held-out ids (from --offset), runs
    build/strata score --model DIR --ids ... --mtp --json --logits-at P1,P2,... [--attn FORM] [--dense-attention]
and the oracle forward, and reports max |logit diff| at the chosen positions (main and MTP) and the
top-1 / MTP top-1 agreement over all positions.  Exit status 1 if the logits differ by more than --tol.

    /usr/bin/python3 tools/train/compare_strata.py --model models/glm5-strata-tiny --ids tools/train/data/heldout.bin
"""
import argparse, json, os, subprocess, sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from eval_ppl import read_ids  # noqa: E402
from glm_moe_dsa_ref import load_checkpoint  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--positions", default="0,5,63,64,65,150,299")
    ap.add_argument("--strata", default=os.path.join(HERE, "..", "..", "build", "strata"))
    ap.add_argument("--attn", nargs="*", default=["default", "naive", "absorbed"])
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    torch.set_num_threads(2)
    ids = read_ids(a.ids)[a.offset:a.offset + a.n].tolist()
    pos = [int(p) for p in a.positions.split(",") if int(p) < len(ids)]
    m = load_checkpoint(a.model)
    results, worst = [], 0.0
    for dense in (False, True):
        o = m.forward(ids, dense=dense)
        for form in a.attn:
            cmd = [a.strata, "score", "--model", a.model, "--ids", ",".join(map(str, ids)), "--mtp", "--json",
                   "--logits-at", ",".join(map(str, pos))]
            if form != "default":
                cmd += ["--attn", form]
            if dense:
                cmd += ["--dense-attention"]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                results.append({"attn": form, "dense": dense, "error": r.stderr.strip()[-300:]})
                continue
            s = json.loads(r.stdout)
            d = max(float(np.abs(np.array(s["logits"][str(p)]) - o["logits"][p].numpy()).max()) for p in pos)
            md = max(float(np.abs(np.array(s["mtp_logits"][str(p)]) - o["mtp_logits"][p].numpy()).max())
                     for p in pos if p < len(ids) - 1)
            t1 = o["logits"].argmax(-1).tolist()
            mt1 = o["mtp_logits"].argmax(-1).tolist()
            res = {"attn": form, "dense": dense, "tokens": len(ids), "max_abs_logit_diff": d,
                   "max_abs_mtp_logit_diff": md, "logit_absmax": float(o["logits"][pos].abs().max()),
                   "top1_agree": sum(x == y for x, y in zip(s["top1"], t1)) / len(t1),
                   "mtp_top1_agree": sum(x == y for x, y in zip(s["mtp_top1"], mt1)) / len(mt1)}
            worst = max(worst, d, md)
            results.append(res)
    print(json.dumps({"model": a.model, "positions": pos, "results": results, "worst": worst}, indent=1))
    sys.exit(0 if worst <= a.tol and all("error" not in r for r in results) else 1)


if __name__ == "__main__":
    main()
