#!/usr/bin/env python3
"""strata plan's prediction against a measured strata bench (docs/plan.md "Validation").

Converts MODEL (a checkpoint directory) to a container (or uses one), measures this machine with
`strata doctor` under the container's directory, then for each expert budget B runs
  strata bench --model C --ram B --no-autopin --no-prefetch --json ...
  strata plan  --model C --ram DENSE+B --headroom 0 --disk-gbps QD1 --disk-qd4-gbps QD4 --disk-qd16-gbps QD16
               --disk-read-kib EXPERT --mem-gbps MEMBW --matmul-call-us U --region-us R --dot-gmadds G
               --context PROMPT+GEN/2 --json
(doctor's random reads of one expert at queue depths 1/4/16: plan reads its disk term at the bytes
the store keeps in flight for a request's misses; doctor's compute probe: the fixed cost per
projection and per parallel region and attention's dot rate, docs/plan.md)
and prints predicted vs measured decode tok/s and hit rate, with the error, then a markdown table
of the run to paste into docs/plan.md.

With --trace (the default), the first bench's prompt and greedy continuation are recorded with
`strata trace record` and plan replays that trace (--trace-warmup = the prompt); plan's
independent-draw prediction (from --usage, or uniform) is printed next to it.

With --throttle-bps N the whole run (doctor's probe, bench, trace record) runs inside a cgroup-v1
blkio child that limits reads of the container's disk to N bytes/s (root only; the child is
removed afterwards), so the disk, not the loaded CPUs, dominates; --drop-caches empties the page
cache before the probe and before each bench.

With --resident 1 (the default for a pool under 256 MB) one more bench runs with the whole pool cached
(--ram twice the pool) and its time besides the expert wait is printed next to plan --calibrate's: the
capped runs' non-wait time without misses, measured by the bench's own method (docs/plan.md, "The
trained model: per-miss costs").

Usage: bench/plan/validate.py STRATA MODEL_DIR [--budgets 0.25,0.5,1.0] [--experts int8] [--usage FILE]
       [--throttle-bps 300e6 [--blkdev MAJ:MIN]] [--drop-caches] [--no-trace] [--reps N] [--resident 0|1]
Budgets are fractions of the container's expert pool. Timing: the load (/proc/loadavg) is printed
with the results.
"""
import argparse, json, os, shutil, subprocess, sys, tempfile

BLKIO = "/sys/fs/cgroup/blkio"


def run_out(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def disk_of(path):
    """MAJ:MIN of the whole disk holding `path` (a partition's parent disk)."""
    st = os.stat(path).st_dev
    maj, mnr = os.major(st), os.minor(st)
    sysdir = os.path.realpath(f"/sys/dev/block/{maj}:{mnr}")
    if os.path.exists(os.path.join(sysdir, "partition")):
        with open(os.path.join(os.path.dirname(sysdir), "dev")) as f:
            return f.read().strip()
    return f"{maj}:{mnr}"


class Throttle:
    """A blkio child limiting reads of one device; this process (and so its children) moves into it."""

    def __init__(self, dev, bps):
        self.dir = os.path.join(BLKIO, f"strata-plan-validate-{os.getpid()}")
        os.mkdir(self.dir)
        try:
            with open(os.path.join(self.dir, "blkio.throttle.read_bps_device"), "w") as f:
                f.write(f"{dev} {int(bps)}\n")
            with open(os.path.join(self.dir, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        except Exception:
            os.rmdir(self.dir)
            raise

    def close(self):
        with open(os.path.join(BLKIO, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        os.rmdir(self.dir)


def plan_row(base, ram):
    p = json.loads(run_out(base + ["--ram", str(ram / 1e9)]))
    here = [r for r in p["rows"] if abs(r["ram_bytes"] - ram) <= 1e-6 * ram + 1]
    return p, here[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("strata")
    ap.add_argument("model")
    ap.add_argument("--budgets", default="0.25,0.5,1.0")
    ap.add_argument("--experts", default="int8")
    ap.add_argument("--usage", default="")
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--no-trace", action="store_true", help="only the independent-draw prediction")
    ap.add_argument("--calibrate", type=int, default=16,
                    help="decode tokens of plan --calibrate: a third prediction with the measured compute (0: none)")
    ap.add_argument("--throttle-bps", type=float, default=0, help="cgroup blkio read limit (bytes/s) on the disk")
    ap.add_argument("--blkdev", default="", help="MAJ:MIN to throttle (default: the container's disk)")
    ap.add_argument("--drop-caches", action="store_true", help="drop the page cache before the probe and each bench")
    ap.add_argument("--out", default="", help="write the results as JSON here (default: a temp dir)")
    ap.add_argument("--resident", type=int, default=-1,
                    help="1: also bench with the whole pool cached (budget 2x the pool), the non-wait time of a run "
                         "without misses by the same method; 0: not; default: when the pool is under 256 MB")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="strata-plan-validate-")
    c = a.model
    if not os.path.exists(os.path.join(c, "manifest.json")):
        c = os.path.join(tmp, "c")
        subprocess.run([a.strata, "convert", "--in", a.model, "--out", c, "--experts", a.experts, "-q"], check=True)
    throttle = Throttle(a.blkdev or disk_of(c), a.throttle_bps) if a.throttle_bps > 0 else None
    try:
        result = validate(a, c, tmp, throttle)
    finally:
        if throttle:
            throttle.close()
    out = a.out or os.path.join(tmp, "result.json")
    with open(out + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(out + ".tmp", out)
    print(f"(details: {out})")
    if a.out:  # the temp dir held the ids, the trace (and a container converted here)
        shutil.rmtree(tmp)


def validate(a, c, tmp, throttle):
    s0 = json.loads(run_out([a.strata, "plan", "--model", c, "--experts", a.experts, "--json", "--headroom", "0",
                             "--disk-gbps", "1", "--mem-gbps", "1", "--ram", "1", "--trace-tokens", "8"]))
    s = s0["sizes"][a.experts]
    pool, dense, read_kib = s["expert_pool_bytes"], s["dense_bytes"], s["expert_read_bytes"] // 1024
    if a.drop_caches:
        drop_caches()
    doc = json.loads(run_out([a.strata, "doctor", "--dir", c, "--json", "--probe-mib", "256", "--seconds", "2",
                              "--read-kib", str(read_kib)]))
    membw = doc["memory"]["read_gb_s"]
    reads = {r["queue_depth"]: r for r in doc["disk"]["random_read"]}
    if 1 not in reads:
        raise SystemExit(f"doctor measured no queue-depth-1 reads: {doc['disk']}")
    qd1 = reads[1]["gb_s"]
    qd_flags = ["--disk-gbps", str(qd1), "--disk-read-kib", str(reads[1]["read_bytes"] // 1024)]
    for q in (4, 16):
        if q in reads:
            qd_flags += [f"--disk-qd{q}-gbps", str(reads[q]["gb_s"])]
    cp = doc["compute"]
    # plan runs the compute probe itself, at the bench's thread count and with a working set of the
    # model's per-token weights (doctor's probe uses 64 MiB: a full-size model's, from memory)
    compute_flags = ["--context", str(a.prompt_tokens + a.gen_tokens // 2)]
    if a.threads:
        compute_flags += ["--threads", str(a.threads)]
    load0 = open("/proc/loadavg").read().split()[:3]
    print(f"container {c}: dense {dense/1e6:.1f} MB, expert pool {pool/1e6:.1f} MB ({a.experts}), "
          f"one expert {read_kib} KiB")
    qds = ", ".join(f"QD{q} {reads[q]['gb_s']:.3f}" for q in sorted(reads))
    print(f"machine: memory {membw:.1f} GB/s, disk {qds} GB/s ({doc['disk']['filesystem']}, "
          f"O_DIRECT {doc['disk']['o_direct']}{', throttled to %.0f MB/s' % (a.throttle_bps / 1e6) if throttle else ''}), "
          f"load {load0}")
    print(f"doctor's compute probe ({cp['threads']} threads, {cp['working_set_bytes'] >> 20} MiB): "
          f"{cp['matmul_call_us']:.2f} us + {cp['matmul_madd_ns']:.3f} ns/multiply-add per small projection, "
          f"{cp['region_us']:.2f} us per region, attention dots {cp['dot_gmadd_s']:.2f} G multiply-adds/s")
    ck = doc.get("checksum")
    if ck:
        print(f"doctor's checksum probe: {ck['us_per_read']:.1f} us per {ck['read_bytes'] >> 10} KiB expert from memory "
              f"({ck['gb_s']:.2f} GB/s; plan measures its own and adds it per miss)")
    base = [a.strata, "plan", "--model", c, "--headroom", "0", *qd_flags, "--mem-gbps", str(membw),
            *compute_flags, "--experts", a.experts, "--json"]
    indep = base + ["--trace-tokens", "1024"] + (["--usage", a.usage] if a.usage else [])
    calibrated = None
    if a.calibrate > 0:  # measured once, resident-or-as-RAM-allows, the expert-read wait taken out
        cj = json.loads(run_out([a.strata, "plan", "--model", c, "--headroom", "0", *qd_flags, "--mem-gbps", str(membw),
                                 *compute_flags, "--experts", a.experts, "--json", "--trace-tokens", "8",
                                 "--calibrate", str(a.calibrate)]))
        calibrated = cj["machine"]["calibration"]
        print(f"plan --calibrate {a.calibrate}: compute {calibrated['compute_ms']:.3f} ms/token at "
              f"{calibrated['context']} keys ({calibrated['expert_wait_ms']:.3f} ms/token of expert-read wait taken out)")
    def bench(budget):
        bench_cmd = [a.strata, "bench", "--model", c, "--ram", str(max(budget, 1) / 1e9), "--no-autopin",
                     "--no-prefetch", "--json", "--prompt-tokens", str(a.prompt_tokens), "--gen-tokens",
                     str(a.gen_tokens), "--reps", str(a.reps), "--warmup", str(a.warmup), "--membw-mib", "0",
                     "--disk-mib", "0", "-q"]
        if a.threads:
            bench_cmd += ["--threads", str(a.threads)]
        if a.drop_caches:
            drop_caches()
        lines = [json.loads(l) for l in run_out(bench_cmd).splitlines() if l.strip()]
        return [l for l in lines if l["bench"] == "decode"][0]

    resident = None
    if a.resident == 1 or (a.resident < 0 and pool < 256e6):
        # The same bench with every expert cached (misses only while the prompt fills it): what the capped
        # runs' time besides the expert wait would be without misses, measured as they are.
        r = bench(2 * pool)
        ms = r["ms_per_token"]
        resident = dict(tok_s=r["tok_s"], hit_rate=r["expert_hit_rate"], ms_per_token=ms,
                        rest_ms=ms["total"] - ms["expert_wait"])
        print(f"resident bench (budget 2x the pool): {r['tok_s']:.3f} tok/s at {100*r['expert_hit_rate']:.1f}% hits; "
              f"ms/token: total {ms['total']:.3f}, expert wait {ms['expert_wait']:.3f}, everything but the wait "
              f"{resident['rest_ms']:.3f}")
    trace = None
    rows = []
    for frac in [float(x) for x in a.budgets.split(",")]:
        budget = int(frac * pool)
        d = bench(budget)
        if trace is None and not a.no_trace:
            ids = d["prompt_ids"] + d["generated_ids"]
            with open(os.path.join(tmp, "ids.txt"), "w") as f:
                f.write(",".join(str(i) for i in ids))
            trace = os.path.join(tmp, "trace.jsonl")
            subprocess.run([a.strata, "trace", "record", "--model", c, "--ids-file", os.path.join(tmp, "ids.txt"),
                            "--out", trace, "--chunk", str(len(ids)), "--ram", str(pool / 1e9), "-q"], check=True)
        row = dict(fraction=frac, budget_bytes=budget, measured={k: v for k, v in d.items()
                                                                 if k not in ("prompt_ids", "generated_ids")},
                   load=open("/proc/loadavg").read().split()[:3])
        pj, row["independent"] = plan_row(indep, dense + budget)
        row["plan_compute"] = pj["machine"]["compute"]
        if trace:
            _, row["recorded"] = plan_row(base + ["--trace", trace, "--trace-warmup", str(len(d["prompt_ids"]))],
                                          dense + budget)
        if trace and calibrated:
            _, row["calibrated"] = plan_row(base + ["--trace", trace, "--trace-warmup", str(len(d["prompt_ids"])),
                                                    "--compute-ms", str(calibrated["compute_ms"])], dense + budget)
        rows.append(row)
        pc = row["plan_compute"]
        print(f"  plan's compute probe: {pc['matmul_call_us']:.2f} us + {pc['matmul_madd_ns']:.3f} ns/multiply-add per "
              f"small projection, {pc['region_us']:.2f} us per region ({pc['source']})")
        ms = d["ms_per_token"]
        print(f"budget {frac:.2f} of the pool ({budget/1e6:.0f} MB), load {row['load']}: measured {d['tok_s']:.3f} tok/s "
              f"at {100*d['expert_hit_rate']:.1f}% hits ({d['disk_bytes_per_token']/1e6:.1f} MB/token read)")
        print(f"  measured ms/token: total {ms['total']:.1f} = attention {ms['attention']:.1f} + router "
              f"{ms['router']:.1f} + expert wait {ms['expert_wait']:.1f} + expert matmul {ms['expert_matmul']:.1f} + "
              f"other {ms['other']:.1f}; everything but the wait {ms['total'] - ms['expert_wait']:.2f}")
        for kind in ("recorded", "independent", "calibrated"):
            if kind not in row:
                continue
            p = row[kind]
            err = (p["tok_s"] - d["tok_s"]) / d["tok_s"]
            row[kind + "_error"] = err
            label = kind + " trace" if kind != "calibrated" else "recorded, calibrated"
            print(f"  plan ({label:>20}): {p['tok_s']:.3f} tok/s at {100*p['hit_rate']:.1f}% hits "
                  f"(compute {p['compute_ms']:.2f} = weights {p['weights_ms']:.2f} + fixed {p['fixed_ms']:.2f} + "
                  f"attention {p['attention_ms']:.2f}; disk {p['disk_ms']:.2f} ms of which checksums "
                  f"{p.get('checksum_ms', 0):.3f}), error {100*err:+.0f}%")
    load1 = open("/proc/loadavg").read().split()[:3]
    print_table(rows, load0, load1, membw, reads, cp)
    if resident:
        print(f"\nresident bench (whole pool cached): {resident['tok_s']:.4g} tok/s, everything but the expert wait "
              f"{resident['rest_ms']:.3g} ms/token" + (f"; plan --calibrate: {calibrated['compute_ms']:.3g} ms/token"
                                                       if calibrated else ""))
    return dict(container=c, membw=membw, disk_qd1=qd1, disk_reads=[reads[q] for q in sorted(reads)],
                compute=cp, checksum=doc.get("checksum"), compute_flags=compute_flags, throttle_bps=a.throttle_bps,
                load_start=load0, load_end=load1, trace=trace, resident=resident, calibration=calibrated, rows=rows)


def print_table(rows, load0, load1, membw, reads, cp):
    """The run as markdown, to paste into docs/plan.md."""
    qds = ", ".join(f"QD{q} {reads[q]['gb_s']:.3f}" for q in sorted(reads))
    print(f"\nload average {' '.join(load0)} at the start, {' '.join(load1)} at the end; doctor: memory "
          f"{membw:.1f} GB/s, reads of one expert {qds} GB/s; plan's compute probe per budget: "
          + "; ".join(f"{r['plan_compute']['matmul_call_us']:.2f} us + {r['plan_compute']['matmul_madd_ns']:.3f} ns/madd, "
                      f"{r['plan_compute']['region_us']:.1f} us/region" for r in rows) + "\n")
    rec = all("recorded" in r for r in rows)
    kind = "recorded" if rec else "independent"
    cal = all("calibrated" in r for r in rows)
    print(f"| budget (of pool) | measured hit | plan hit ({kind}) | measured tok/s | plan tok/s, {kind} (error) | "
          "plan tok/s, independent (error) | measured ms/token: wait / rest | plan ms: disk / compute "
          "(weights + fixed + attention) |" + (" plan tok/s, recorded + calibrated compute (error) |" if cal else ""))
    print("|---|---|---|---|---|---|---|---|" + ("---|" if cal else ""))
    for r in rows:
        d, p, q = r["measured"], r[kind], r["independent"]
        ms = d["ms_per_token"]
        print(f"| {r['fraction']:.2f} ({r['budget_bytes']/1e6:.3g} MB) | {100*d['expert_hit_rate']:.1f}% | "
              f"{100*p['hit_rate']:.1f}% | {d['tok_s']:.4g} | {p['tok_s']:.4g} (**{100*r[kind + '_error']:+.0f}%**) | "
              f"{q['tok_s']:.4g} ({100*r['independent_error']:+.0f}%) | {ms['expert_wait']:.3g} / "
              f"{ms['total'] - ms['expert_wait']:.3g} | {p['disk_ms']:.3g} / {p['compute_ms']:.3g} "
              f"({p['weights_ms']:.3g} + {p['fixed_ms']:.3g} + {p['attention_ms']:.3g}) |"
              + (f" {r['calibrated']['tok_s']:.4g} (**{100*r['calibrated_error']:+.0f}%**) |" if cal else ""))


if __name__ == "__main__":
    sys.exit(main())
