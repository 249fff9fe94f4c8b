#!/usr/bin/env python3
"""strata's long-context decode against its own short-context decode (issue 16's "at 16k and 32k, decode >= 70% of
strata's own 512-context decode"), measured as ratios of bracketing runs in one invocation, strata only.

    /usr/bin/python3 bench/compare/context_self.py [--data /work/benchdata] [--model DATA/slice-int4]
                                                   [--contexts 32768] [--base 512] [--rounds 3] [--kv-type f16]

Runs `strata bench --context N` (prefill N pseudo-random ids, then decode --gen-tokens) in the order
base, long, base, long, ..., base: every long run sits between two base runs, and its ratio is its decode
speed over the mean of those two neighbours' (a host that drifts over the minutes a 32k prefill takes moves
both neighbours with it). Prints per long context each run's ratio, their median and the ratio of the
medians, and each run's decode split and bandwidth probe; writes every run to --results (default
DATA/context-self-results.json, written to a temporary file and renamed). llama.cpp is not run: its 32k
prefill takes over an hour on the 2-core VM (bench/compare/run.py --context runs both engines).
"""
import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run import context_timeout, loadavg, log, run_json  # noqa: E402


def parse_contexts(s):
    """'16384,32768' -> [16384, 32768]; ValueError naming the bad entry."""
    out = []
    for x in s.split(","):
        x = x.strip()
        if not x.isdigit() or int(x) < 1:
            raise ValueError(f"--contexts: {x!r} is not a positive whole number of tokens")
        if int(x) in out:
            raise ValueError(f"--contexts: {x} given twice")
        out.append(int(x))
    return out


def schedule(base, longs, rounds):
    """The run order: base, then per round and long context N: N, base. Every long run has a base run on each
    side."""
    order = [base]
    for _ in range(rounds):
        for n in longs:
            order += [n, base]
    return order


def bracket_ratios(runs, base):
    """{N: [decode(long run) / mean(decode of the base runs just before and after it)]} over a list of
    {'context': N, 'decode_tok_s': x} in run order."""
    out = {}
    for i, r in enumerate(runs):
        if r["context"] == base:
            continue
        before = next((runs[j] for j in range(i - 1, -1, -1) if runs[j]["context"] == base), None)
        after = next((runs[j] for j in range(i + 1, len(runs)) if runs[j]["context"] == base), None)
        sides = [x["decode_tok_s"] for x in (before, after) if x is not None]
        if not sides:
            raise ValueError(f"the run at context {r['context']} has no base-context run beside it")
        out.setdefault(r["context"], []).append(r["decode_tok_s"] / (sum(sides) / len(sides)))
    return out


def summary(runs, base):
    """Per long context: the bracketed ratios, their median and the ratio of the decode medians."""
    base_med = statistics.median(r["decode_tok_s"] for r in runs if r["context"] == base)
    res = {}
    for n, ratios in bracket_ratios(runs, base).items():
        dec = [r["decode_tok_s"] for r in runs if r["context"] == n]
        res[n] = {"ratios": ratios, "median_ratio": statistics.median(ratios), "min_ratio": min(ratios),
                  "decode_median": statistics.median(dec), "base_decode_median": base_med,
                  "ratio_of_medians": statistics.median(dec) / base_med}
    return res


def strata_context_run(a, n):
    argv = [a.strata, "bench", "--model", a.model, "--context", str(n), "--gen-tokens", str(a.gen_tokens),
            "--threads", str(a.threads), "--reps", "1", "--warmup", "1", "--warmup-tokens", str(a.warmup_tokens),
            "--json", "--no-autopin", "--pin", "all", "--membw-mib", str(a.membw_mib), "--disk-mib", "0",
            "--kv-type", a.kv_type, "-q"]
    lines, meta = run_json(argv, timeout=context_timeout(n))
    by = {l["bench"]: l for l in lines}
    if "context" not in by:
        raise RuntimeError(f"strata bench --context {n} printed no context line: {sorted(by)}")
    c = by["context"]
    return {"context": n, "decode_tok_s": c["decode_tok_s"], "prefill_s": c["prefill_s"],
            "decode_split_ms_per_token": c["decode_split_ms_per_token"],
            "membw_gb_s": by.get("memory_bandwidth", {}).get("gb_s"), "wall_s": meta["wall_s"],
            "load_before": meta["load_before"], "load_after": meta["load_after"]}


def write_json(obj, path):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/work/benchdata")
    ap.add_argument("--strata", default=os.path.join(HERE, "..", "..", "build", "strata"))
    ap.add_argument("--model", help="container (default DATA/slice-int4)")
    ap.add_argument("--contexts", default="32768", help="long contexts, comma-separated")
    ap.add_argument("--base", type=int, default=512, help="the short context every long run is compared with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gen-tokens", type=int, default=256)
    ap.add_argument("--warmup-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-type", choices=["f32", "f16"], default="f16")
    ap.add_argument("--membw-mib", type=int, default=1024, help="strata bench's bandwidth probe per run (0: none)")
    ap.add_argument("--results", help="default DATA/context-self-results.json")
    a = ap.parse_args()
    try:
        longs = parse_contexts(a.contexts)
    except ValueError as e:
        sys.exit(str(e))
    if a.base in longs:
        sys.exit(f"--base {a.base} is also in --contexts")
    if a.rounds < 1:
        sys.exit("--rounds must be at least 1")
    a.model = a.model or os.path.join(a.data, "slice-int4")
    if not os.path.exists(a.model):
        sys.exit(f"--model {a.model} does not exist (bench/make_data makes the slice containers)")
    results = a.results or os.path.join(a.data, "context-self-results.json")
    order = schedule(a.base, longs, a.rounds)
    runs = []
    for i, n in enumerate(order):
        log(f"[{i + 1}/{len(order)}] context {n} (load {loadavg():.1f})")
        r = strata_context_run(a, n)
        runs.append(r)
        print(json.dumps({"bench": "context_self_run", **r}), flush=True)
        write_json({"model": a.model, "kv_type": a.kv_type, "base": a.base, "runs": runs}, results)
    s = summary(runs, a.base)
    write_json({"model": a.model, "kv_type": a.kv_type, "base": a.base, "runs": runs,
                "summary": {str(k): v for k, v in s.items()}}, results)
    for n, v in s.items():
        print(json.dumps({"bench": "context_self", "context": n, "base": a.base, **v}), flush=True)
        log(f"context {n} against {a.base}: bracketed ratios " + ", ".join(f"{100 * x:.1f}%" for x in v["ratios"])
            + f"; median {100 * v['median_ratio']:.1f}%, ratio of medians {100 * v['ratio_of_medians']:.1f}% "
            f"({v['decode_median']:.2f} against {v['base_decode_median']:.2f} tok/s)")
    log(f"results: {results}")


if __name__ == "__main__":
    main()
