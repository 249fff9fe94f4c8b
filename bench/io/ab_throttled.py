#!/usr/bin/env python3
"""Two strata binaries (or two flag sets) decoding a container on a throttled disk, alternating.

    bench/io/ab_throttled.py --a build/strata --b /work/old/build/strata --model /work/benchdata/slice-int8 \\
        --throttle-bps 1.5e9 --pairs 4 -- --ram 1.02 --no-autopin --gen-tokens 8

Root: every run happens inside a cgroup-v1 blkio child limiting reads of the model's disk
(bench/plan/validate.py's Throttle; the expert store reads with O_DIRECT, so every miss reaches the
throttled device). Each pair runs A and B back to back (the order swapped every other pair) with
the same `strata bench` arguments (--a-flags / --b-flags add to one side; --b-model gives B another container), the page cache dropped
before each run. Prints one JSON line per run (decode tok/s, disk bytes per token, hit rate) and a
summary line: the median of the per-pair ratios A/B and their range.

--ram-disk copies the container onto a RAM-backed loop device first (bench/compare's disk-class
method, for classes faster than this VM's disk) and throttles that device; it is removed at the end.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plan"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compare"))
import disk_class  # noqa: E402
import validate  # noqa: E402


def fixed_ids(n, vocab, seed):
    """The ids of bench/compare (splitmix64): the same prompt for both sides."""
    spec = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compare", "run.py")
    import importlib.util

    s = importlib.util.spec_from_file_location("compare_run", spec)
    m = importlib.util.module_from_spec(s)
    s.loader.exec_module(m)
    return m.fixed_ids(n, vocab, seed)


def drop_caches():
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass


def run(binary, model, ids, extra):
    cmd = [binary, "bench", "--model", model, "--ids", ",".join(map(str, ids)), "--threads", "2", "--reps", "1",
           "--warmup", "1", "--warmup-tokens", "8", "--membw-mib", "0", "--disk-mib", "0", "--json"] + extra
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    for line in out.stdout.splitlines():
        j = json.loads(line)
        if j.get("bench") == "decode":
            return j
    sys.exit(f"{' '.join(cmd)}: no decode line")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="strata binary A")
    ap.add_argument("--b", required=True, help="strata binary B (the baseline)")
    ap.add_argument("--a-flags", default="", help="flags for A only (space-separated)")
    ap.add_argument("--b-flags", default="", help="flags for B only")
    ap.add_argument("--model", required=True)
    ap.add_argument("--b-model", default="", help="B decodes this container instead of --model (e.g. the same "
                    "weights converted another way; on the same disk)")
    ap.add_argument("--throttle-bps", type=float, default=1.5e9)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--ram-disk", action="store_true", help="run from a throttled RAM-backed loop device holding a "
                    "copy of the container")
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="-- then strata bench flags for both")
    a = ap.parse_args()
    rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
    with open(os.path.join(a.model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    ids = fixed_ids(a.prompt_tokens, vocab, 1)
    ram = None
    b_model = a.b_model or a.model
    if a.ram_disk:
        models = [a.model] + ([b_model] if b_model != a.model else [])
        ram = disk_class.RamDisk(models, "ab", lambda m: print(m, file=sys.stderr, flush=True))
        a.model, b_model = ram.copies[a.model], ram.copies[b_model]
    ratios = []
    try:
        dev = validate.disk_of(a.model)
        if validate.disk_of(b_model) != dev:
            raise SystemExit(f"--model and --b-model are on different disks ({dev}, {validate.disk_of(b_model)})")
        throttle = validate.Throttle(dev, a.throttle_bps)
    except BaseException:
        if ram:
            ram.close()
        raise
    try:
        for p in range(a.pairs):
            res = {}
            for side in (("A", "B") if p % 2 == 0 else ("B", "A")):
                binary = a.a if side == "A" else a.b
                flags = (a.a_flags if side == "A" else a.b_flags).split()
                drop_caches()
                j = run(binary, a.model if side == "A" else b_model, ids, rest + flags)
                res[side] = j
                print(json.dumps({"pair": p + 1, "side": side, "tok_s": round(j["tok_s"], 3),
                                  "disk_gb_per_token": round(j["disk_bytes_per_token"] / 1e9, 4),
                                  "hit_rate": round(j["expert_hit_rate"], 4),
                                  "expert_wait_ms_per_token": round(j["ms_per_token"].get("expert_wait", 0.0), 2),
                                  # CPU seconds per wall second besides strata's (a loop device's copies)
                                  "cores_other": round(j.get("cores_busy", {}).get("other", -1.0), 2),
                                  "load": os.getloadavg()[0]}), flush=True)
            ratios.append(res["A"]["tok_s"] / res["B"]["tok_s"])
    finally:
        throttle.close()
        if ram:
            ram.close()
    print(json.dumps({"summary": True, "device": dev, "throttle_bps": a.throttle_bps,
                      "ratio_a_over_b_median": round(statistics.median(ratios), 3),
                      "ratio_min": round(min(ratios), 3), "ratio_max": round(max(ratios), 3),
                      "ratios": [round(r, 3) for r in ratios]}))


if __name__ == "__main__":
    main()
