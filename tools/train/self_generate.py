#!/usr/bin/env python3
"""Windows of the model's own greedy output, for MTP-only distillation (train.py --selfgen).

A speculative drafter is verified against the main model's greedy choice on the main model's own
output, which is far more repetitive than the training text. This writes N windows of ctx+1 token ids:
a prompt of --prompt tokens taken at a random place of train.bin, then strata's greedy continuation
(`strata generate --ignore-eos`) up to ctx+1 tokens. Output: a flat uint16 file of N * (ctx+1) ids,
written to a temporary name and renamed when complete.

    /usr/bin/python3 tools/train/self_generate.py --strata build/strata --model models/glm5-strata-tiny \\
        --data tools/train/data --n 400 --out tools/train/data/selfgen.bin
"""
import argparse, json, os, subprocess, sys, time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default="build/strata")
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True, help="directory with train.bin (the prompts)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=400, help="windows")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    if not 1 <= a.prompt < a.ctx:
        sys.exit(f"--prompt must be in [1, ctx): {a.prompt}")
    train = np.memmap(os.path.join(a.data, "train.bin"), dtype=np.uint16, mode="r")
    rng = np.random.default_rng(a.seed)
    gen = a.ctx + 1 - a.prompt
    tmp = a.out + ".tmp"
    t0 = time.time()
    with open(tmp, "wb") as f:
        for i in range(a.n):
            s = int(rng.integers(0, len(train) - a.prompt))
            prompt = train[s:s + a.prompt].astype(np.int64).tolist()
            cmd = [a.strata, "generate", "--model", a.model, "--ids", ",".join(map(str, prompt)), "-n", str(gen),
                   "--ignore-eos", "--json", "-q", "--threads", "1"]
            out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["ids"]
            if len(out) != gen:
                sys.exit(f"strata generate returned {len(out)} ids, expected {gen}")
            f.write(np.asarray(prompt + out, dtype=np.uint16).tobytes())
            if (i + 1) % 50 == 0:
                print(f"{i + 1}/{a.n} windows ({time.time() - t0:.0f}s)", flush=True)
    os.replace(tmp, a.out)
    print(f"wrote {a.out}: {a.n} windows x {a.ctx + 1} ids", flush=True)


if __name__ == "__main__":
    main()
