#!/usr/bin/env python3
"""Speculative decoding benchmark (docs/speculative.md): greedy decode with
--spec off and each other mode, alternating within every repetition (off,
ngram, mtp, auto, off, ...), on prose, code and JSON prompts. Prints per prompt
and mode the median decode speed-up over off (ratios of the runs of one
repetition), tokens per step and acceptance per source, from --stats-json, and the distribution of the drafts chosen per step.

  bench/speculative/run.py --strata build/strata --model models/glm5-strata-tiny
  bench/speculative/run.py --strata build/strata --model CONTAINER --engine-flags "--ram 0.5 --no-autopin"
  bench/speculative/run.py ... --throttle-bps 300e6   # root: a cgroup-v1 blkio limit on the model's disk
  bench/speculative/run.py ... --modes mtp,mtp/dv1024,auto,auto/dv1024   # MODE/dvN: with --draft-vocab N

With --throttle-bps every run happens inside a blkio child limiting reads of the model's disk (the
expert store reads with O_DIRECT, so every miss reaches the throttled device): capped runs are then
bound by the disk, not by a loaded CPU (bench/plan/validate.py's Throttle).

Timing: run it on a quiet machine; report `uptime` with the numbers.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PROMPTS = {
    "prose": "The meaning of the word",
    "code": "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "json": '{"name": "Alice", "age": 30, "city": "Paris"}\n{"name": "Bob", "age": 25, "city": ',
}


def tokenize(strata, model, text):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as f:
        f.write(json.dumps(text) + "\n")
        f.flush()
        out = subprocess.run([strata, "tokenize", "--tokenizer", model, "--jsonl", f.name, "--add-special"],
                             check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[0])


def run(strata, model, ids, mode, args):
    mode, _, dv = mode.partition("/dv")
    cmd = [strata, "generate", "--model", model, "--ids", ",".join(map(str, ids)), "-n", str(args.tokens),
           "--ignore-eos", "--json", "-q", "--spec", mode, "--spec-k", str(args.k), "--stats-json"]
    if dv:
        cmd += ["--draft-vocab", dv]
    cmd += args.engine_flags.split()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    stats = json.loads([l for l in p.stderr.splitlines() if l.startswith("{")][-1])
    return json.loads(p.stdout)["ids"], stats


def throttled(args):
    """The blkio child of bench/plan/validate.py (one implementation), or None."""
    if args.throttle_bps <= 0:
        return None
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plan"))
    import validate  # noqa: E402
    return validate.Throttle(args.blkdev or validate.disk_of(args.model), args.throttle_bps)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strata", default="build/strata")
    ap.add_argument("--model", required=True)
    ap.add_argument("--modes", default="ngram,mtp,auto",
                    help="compared with off; MODE/dvN runs MODE with --draft-vocab N")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("-k", type=int, default=4)
    ap.add_argument("--engine-flags", default="", help="passed to every run, e.g. '--ram 0.5 --no-autopin'")
    ap.add_argument("--json", action="store_true", help="print the results as one JSON object")
    ap.add_argument("--tokenizer", help="tokenize the prompts with this model's tokenizer (for a model "
                    "without one, e.g. the GLM-5.2 slice: its ids must fit the model's vocabulary)")
    ap.add_argument("--throttle-bps", type=float, default=0, help="cgroup-v1 blkio read limit (bytes/s, root)")
    ap.add_argument("--blkdev", default="", help="MAJ:MIN to throttle (default: the model's disk)")
    args = ap.parse_args()
    throttle = throttled(args)
    try:
        bench(args)
    finally:
        if throttle:
            throttle.close()


def bench(args):
    modes = args.modes.split(",")
    results = {}
    for name, text in PROMPTS.items():
        ids = tokenize(args.strata, args.tokenizer or args.model, text)
        ratios = {m: [] for m in modes}
        last = {}
        for _ in range(args.reps):
            want, off = run(args.strata, args.model, ids, "off", args)
            for m in modes:
                got, st = run(args.strata, args.model, ids, m, args)
                if got != want:
                    sys.exit(f"{name} --spec {m}: greedy output differs from --spec off")
                ratios[m].append(st["decode_tok_s"] / off["decode_tok_s"])
                last[m] = st["spec"]
        results[name] = {
            m: {"speedup_median": statistics.median(ratios[m]), "speedups": ratios[m],
                "tokens_per_step": last[m]["tokens_per_step"], "acceptance": last[m]["acceptance"],
                "sources": {s: f"{v['accepted']}/{v['drafted']}" for s, v in last[m]["sources"].items() if v["drafted"]},
                "k_chosen": last[m].get("k_chosen", [])}
            for m in modes}
    if args.json:
        print(json.dumps(results))
        return
    print(f"{'prompt':6} {'mode':11} {'speed-up':>9} {'tok/step':>9} {'accept':>7}  sources (accepted/drafted); "
          "k chosen (drafts:steps, last run)")
    for name, r in results.items():
        for m, x in r.items():
            src = ", ".join(f"{s} {v}" for s, v in x["sources"].items())
            ks = " ".join(f"{k}:{n}" for k, n in enumerate(x["k_chosen"]) if n)
            print(f"{name:6} {m:11} {x['speedup_median']:8.2f}x {x['tokens_per_step']:9.2f} "
                  f"{100 * x['acceptance']:6.1f}%  {src}; k {ks}")


if __name__ == "__main__":
    main()
