#!/usr/bin/env python3
"""Experts over MPI on one machine (docs/distributed.md, "Measured").

Per-rank --ram is set so that one rank cannot hold the routed-expert pool but
RANKS ranks together can (pool / RANKS x --slack). Alternates, ROUNDS times,
in one invocation:

  single_stream  one process with ONE rank's budget: streams experts from disk
                 (what one box does today)
  single_all     one process with the TOTAL budget (RANKS x per rank): holds
                 every expert (the upper bound of RAM alone)
  mpi            mpirun --oversubscribe -np RANKS, each rank its budget, pin all
  mpi_replicate  the same with --mpi-replicate N

Before the rounds one single-process `generate` teaches the container its
routing usage (usage.json), so placement and replication follow measured use.
The container is never modified: a trained checkpoint is converted into a temp
dir; a given container is mirrored as symlinks in a temp dir (usage.json is
written there).

Prints one JSON line per run ({"run": ...}) and a summary line per config
({"summary": ...}: median tok/s and the median of per-round ratios to
single_stream). Every line carries the 1-minute load average.

Usage: bench/mpi_experts.py [--strata build/strata] [--model models/glm5-strata-tiny
       --convert int8 | --container DIR] [--ranks 3] [--rounds 3] [--replicate N] ...
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALIGN = 4096


def load1():
    return float(open("/proc/loadavg").read().split()[0])


def pool_bytes(container):
    m = json.load(open(os.path.join(container, "manifest.json")))
    return sum(e["count"] * ((e["blob_bytes"] + ALIGN - 1) // ALIGN * ALIGN) for e in m["experts"]), sum(
        e["count"] for e in m["experts"])


def bench_json(out):
    r = {}
    for line in out.splitlines():
        if line.startswith('{"bench"') or line.startswith('{"schema"'):
            j = json.loads(line)
            if "bench" in j:
                r[j["bench"]] = j
    return r


def stats_json(err):
    for line in err.splitlines():
        if line.startswith("{") and '"time_s"' in line:
            return json.loads(line)
    return {}


WORKER = re.compile(r"strata: rank (\d+): (\d+) layer messages, (\d+) experts over (\d+) rows; compute ([\d.]+) s "
                    r"\(expert store ([\d.]+), matmul ([\d.]+)\), waiting for rank 0 ([\d.]+) s; exchanged ([\d.]+) MB; "
                    r"read ([\d.]+) MB")


def run(cmd, env):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    return p.stdout, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default=os.path.join(HERE, "build", "strata"))
    ap.add_argument("--model", default=os.path.join(HERE, "models", "glm5-strata-tiny"))
    ap.add_argument("--convert", default="int8", help="experts format when --model is a checkpoint")
    ap.add_argument("--container", help="an existing container (read only; mirrored as symlinks)")
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--slack", type=float, default=1.12, help="per-rank budget = pool / ranks x slack")
    ap.add_argument("--replicate", type=int, default=-1, help="--mpi-replicate N (default: a fifth of the experts)")
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--learn-tokens", type=int, default=128, help="tokens generated to learn usage.json")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--configs", default="single_stream,single_all,mpi,mpi_replicate")
    a = ap.parse_args()

    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    tmp = tempfile.TemporaryDirectory(prefix="mpi_experts.")
    C = os.path.join(tmp.name, "c")
    if a.container:
        os.mkdir(C)
        for name in os.listdir(a.container):
            if name != "usage.json":
                os.symlink(os.path.join(os.path.abspath(a.container), name), os.path.join(C, name))
    else:
        run([a.strata, "convert", "--in", a.model, "--out", C, "--experts", a.convert], env)
    pool, n_experts = pool_bytes(C)
    per_rank = pool / a.ranks * a.slack
    assert per_rank < pool <= per_rank * a.ranks, "no budget where one rank cannot hold the pool but all can"
    replicate = a.replicate if a.replicate >= 0 else n_experts // 5
    ram = f"{per_rank / 1e9:.6f}"
    total = f"{per_rank * a.ranks / 1e9:.6f}"
    print(json.dumps({"setup": {"model": a.container or a.model, "pool_bytes": pool, "experts": n_experts,
                                "ranks": a.ranks, "ram_per_rank_bytes": int(per_rank), "replicate": replicate,
                                "threads": a.threads, "prompt_tokens": a.prompt_tokens, "gen_tokens": a.gen_tokens,
                                "load1": load1(), "cpus": os.cpu_count()}}), flush=True)
    # Learn the routing usage once (single process, streaming; --spec off: one row per step, so the
    # usage learnt does not follow auto's timing-dependent drafts).
    ids = ",".join(str((i * 37) % 200 + 3) for i in range(16))
    run([a.strata, "generate", "--model", C, "--ids", ids, "-n", str(a.learn_tokens), "--ignore-eos", "--ram", ram,
         "--threads", str(a.threads), "-q", "--spec", "off"], env)

    B = [a.strata, "bench", "--model", C, "--prompt-tokens", str(a.prompt_tokens), "--gen-tokens", str(a.gen_tokens),
         "--threads", str(a.threads), "--reps", str(a.reps), "--membw-mib", "0", "--disk-mib", "0", "--no-autopin",
         "--json", "--stats", "--stats-json"]
    mpi = ["mpirun", "--oversubscribe", "-np", str(a.ranks)]
    cmds = {
        "single_stream": B + ["--ram", ram],
        "single_all": B + ["--ram", total, "--pin", "all"],
        "mpi": mpi + B + ["--ram", ram, "--pin", "all", "--experts-over", "mpi"],
        "mpi_replicate": mpi + B + ["--ram", ram, "--pin", "all", "--experts-over", "mpi", "--mpi-replicate",
                                    str(replicate)],
    }
    configs = a.configs.split(",")
    res = {c: [] for c in configs}
    for rnd in range(1, a.rounds + 1):
        for c in configs:
            l0 = load1()
            out, err = run(cmds[c], env)
            b, s = bench_json(out), stats_json(err)
            tok = s.get("prompt_tokens", 0) + s.get("decode_tokens", 0)
            line = {"run": c, "round": rnd, "load1": l0,
                    "prefill_tok_s": b.get("prefill", {}).get("tok_s"), "decode_tok_s": b.get("decode", {}).get("tok_s"),
                    "decode_hit_rate": b.get("decode", {}).get("expert_hit_rate"),
                    "disk_bytes_per_token": b.get("decode", {}).get("disk_bytes_per_token"),
                    "tokens": tok, "time_s": s.get("time_s")}
            if "peer_bytes" in s:
                line["peer_bytes"] = s["peer_bytes"]
                line["peer_bytes_per_token"] = s["peer_bytes"] / tok if tok else None
                place = [l for l in err.splitlines() if "experts over MPI" in l or re.match(r"strata:   rank \d", l)]
                line["placement"] = [p.replace("strata: ", "").strip() for p in place if "exchanged" not in p]
                line["workers"] = [{"rank": int(m[0]), "layer_messages": int(m[1]), "experts": int(m[2]),
                                    "rows": int(m[3]), "compute_s": float(m[4]), "store_s": float(m[5]),
                                    "matmul_s": float(m[6]), "idle_s": float(m[7]), "exchanged_mb": float(m[8]),
                                    "read_mb": float(m[9])} for m in WORKER.findall(err)]
            print(json.dumps(line), flush=True)
            res[c].append(line)
    base = res.get("single_stream")
    for c in configs:
        d = [r["decode_tok_s"] for r in res[c]]
        p = [r["prefill_tok_s"] for r in res[c]]
        summ = {"summary": c, "decode_tok_s_median": statistics.median(d), "prefill_tok_s_median": statistics.median(p),
                "load1": [r["load1"] for r in res[c]]}
        if base and c != "single_stream":
            summ["decode_ratio_to_single_stream"] = statistics.median(
                r["decode_tok_s"] / b0["decode_tok_s"] for r, b0 in zip(res[c], base))
            summ["prefill_ratio_to_single_stream"] = statistics.median(
                r["prefill_tok_s"] / b0["prefill_tok_s"] for r, b0 in zip(res[c], base))
        if res[c] and "peer_bytes_per_token" in res[c][0]:
            summ["peer_bytes_per_token"] = statistics.median(r["peer_bytes_per_token"] for r in res[c])
            summ["peer_wait_s_median"] = statistics.median(r["time_s"].get("peer_wait", 0) for r in res[c])
            summ["total_s_median"] = statistics.median(r["time_s"]["total"] for r in res[c])
        print(json.dumps(summ), flush=True)


if __name__ == "__main__":
    main()
