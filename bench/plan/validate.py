#!/usr/bin/env python3
"""strata plan's prediction against a measured strata bench (docs/plan.md "Validation").

Converts MODEL (a checkpoint directory) to a container (or uses one), measures this machine with
`strata doctor` under the container's directory, then for each expert budget B runs
  strata plan  --model C --ram DENSE+B --headroom 0 --disk-gbps QD1 --mem-gbps MEMBW --json
  strata bench --model C --ram B --no-autopin --json ...
and prints predicted vs measured decode tok/s and hit rate, with the error.

Usage: bench/plan/validate.py STRATA MODEL_DIR [--budgets 0.25,0.5,1.0] [--experts int8] [--usage FILE]
Budgets are fractions of the container's expert pool. Timing: run on a quiet machine; the load
(/proc/loadavg) is printed with the results.
"""
import argparse, json, os, subprocess, sys, tempfile


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("strata")
    ap.add_argument("model")
    ap.add_argument("--budgets", default="0.25,0.5,1.0")
    ap.add_argument("--experts", default="int8")
    ap.add_argument("--usage", default="")
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="strata-plan-validate-")
    c = a.model
    if not os.path.exists(os.path.join(c, "manifest.json")):
        c = os.path.join(tmp, "c")
        subprocess.run([a.strata, "convert", "--in", a.model, "--out", c, "--experts", a.experts, "-q"], check=True)
    doc = json.loads(run_json([a.strata, "doctor", "--dir", c, "--json", "--probe-mib", "128", "--seconds", "0.5"]))
    membw = doc["memory"]["read_gb_s"]
    qd1 = [r for r in doc["disk"]["random_read"] if r["queue_depth"] == 1][0]["gb_s"]
    base = [a.strata, "plan", "--model", c, "--headroom", "0", "--disk-gbps", str(qd1), "--mem-gbps", str(membw),
            "--experts", a.experts, "--json", "--trace-tokens", "1024"]
    if a.usage:
        base += ["--usage", a.usage]
    p0 = json.loads(run_json(base + ["--ram", "1"]))
    s = p0["sizes"][a.experts]
    pool, dense = s["expert_pool_bytes"], s["dense_bytes"]
    print(f"container {c}: dense {dense/1e6:.1f} MB, expert pool {pool/1e6:.1f} MB ({a.experts})")
    print(f"machine: memory {membw:.1f} GB/s, disk QD1 {qd1:.2f} GB/s ({doc['disk']['filesystem']}, "
          f"O_DIRECT {doc['disk']['o_direct']}), load {open('/proc/loadavg').read().split()[:3]}")
    print(f"{'budget':>8} {'pred hit':>9} {'meas hit':>9} {'pred tok/s':>11} {'meas tok/s':>11} {'error':>8}")
    rows = []
    for frac in [float(x) for x in a.budgets.split(",")]:
        budget = int(frac * pool)
        p = json.loads(run_json(base + ["--ram", str((dense + budget) / 1e9)]))
        here = [r for r in p["rows"] if abs(r["ram_bytes"] - (dense + budget)) <= 1e-6 * (dense + budget) + 1]
        pred = here[0]
        bench_cmd = [a.strata, "bench", "--model", c, "--ram", str(max(budget, 1) / 1e9), "--no-autopin", "--json",
                     "--prompt-tokens", str(a.prompt_tokens), "--gen-tokens", str(a.gen_tokens), "--reps", "3",
                     "--warmup", "1", "--membw-mib", "0", "--disk-mib", "0", "-q"]
        if a.threads:
            bench_cmd += ["--threads", str(a.threads)]
        lines = [json.loads(l) for l in run_json(bench_cmd).splitlines() if l.strip()]
        d = [l for l in lines if l["bench"] == "decode"][0]
        err = (pred["tok_s"] - d["tok_s"]) / d["tok_s"]
        rows.append(dict(fraction=frac, budget_bytes=budget, predicted=pred, measured=d, error=err))
        print(f"{frac:>8.2f} {100*pred['hit_rate']:>8.1f}% {100*d['expert_hit_rate']:>8.1f}% {pred['tok_s']:>11.1f} "
              f"{d['tok_s']:>11.1f} {100*err:>+7.0f}%")
        ms = d["ms_per_token"]
        print(f"         measured ms/token: total {ms['total']:.2f} = attention {ms['attention']:.2f} + router "
              f"{ms['router']:.2f} + expert wait {ms['expert_wait']:.2f} + expert matmul {ms['expert_matmul']:.2f} + "
              f"other {ms['other']:.2f}; predicted compute {pred['compute_ms']:.3f} + disk {pred['disk_ms']:.3f}")
    json.dump(dict(container=c, membw=membw, disk_qd1=qd1, rows=rows), open(os.path.join(tmp, "result.json"), "w"), indent=1)
    print(f"(details: {tmp}/result.json)")


if __name__ == "__main__":
    sys.exit(main())
