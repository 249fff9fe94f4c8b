#!/usr/bin/env python3
"""Two or more strata binaries (or modes) side by side on the speculative
benchmark's prompts (run.py's PROMPTS): greedy decode of every configuration
BINARY:MODE in each repetition, the order reversed every other repetition,
then per prompt the median over repetitions of each configuration's decode
speed over the first configuration's in the same repetition (min-max in
brackets) and its median tokens per step. For a change to the controller or
the engine, give the first configuration --spec off and each binary the same
mode:

  bench/speculative/ab.py --model CONTAINER --tokens 200 --reps 9 \\
      --configs /tmp/old:off,/tmp/old:auto,build/strata:auto,/tmp/old:mtp,build/strata:mtp

Every run: strata generate --ids PROMPT -n TOKENS --ignore-eos -q --spec MODE
--stats-json ENGINE_FLAGS (--pin all for a container). Timing: run it on a
quiet machine and report `uptime` with the numbers.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import PROMPTS, tokenize  # noqa: E402


def decode(binary, model, ids, mode, args):
    cmd = [binary, "generate", "--model", model, "--ids", ",".join(map(str, ids)), "-n", str(args.tokens),
           "--ignore-eos", "-q", "--spec", mode, "--stats-json"] + args.engine_flags.split()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    d = json.loads([line for line in p.stderr.splitlines() if line.startswith("{")][-1])
    return d["decode_tok_s"], d.get("spec", {}).get("tokens_per_step", 1.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", default="models/glm5-strata-tiny")
    ap.add_argument("--configs", required=True, help="BINARY:MODE,... (the first is the baseline)")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--prompts", default="prose,code,json")
    ap.add_argument("--engine-flags", default=None, help="default: --pin all for a container, none otherwise")
    args = ap.parse_args()
    if args.engine_flags is None:
        args.engine_flags = "--pin all" if os.path.exists(os.path.join(args.model, "manifest.json")) else ""
    confs = [tuple(c.rsplit(":", 1)) for c in args.configs.split(",")]
    if len(confs) < 2 or any(len(c) != 2 for c in confs):
        sys.exit("--configs: at least two BINARY:MODE")
    for prompt in args.prompts.split(","):
        ids = tokenize(confs[0][0], args.tokenizer, PROMPTS[prompt])
        speed = {c: [] for c in confs}
        tps = {c: [] for c in confs}
        for i in range(args.reps):
            for c in confs if i % 2 == 0 else confs[::-1]:
                s, t = decode(c[0], args.model, ids, c[1], args)
                speed[c].append(s)
                tps[c].append(t)
        base = confs[0]
        parts = []
        for c in confs[1:]:
            r = [y / x for x, y in zip(speed[base], speed[c])]
            parts.append(f"{c[0]}:{c[1]} {statistics.median(r):.3f}x ({min(r):.2f}-{max(r):.2f}), "
                         f"tok/step {statistics.median(tps[c]):.2f}")
        print(f"{prompt} {args.tokens} tokens, against {base[0]}:{base[1]} "
              f"({statistics.median(speed[base]):.0f} tok/s): " + "; ".join(parts), flush=True)


if __name__ == "__main__":
    main()
