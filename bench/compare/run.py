#!/usr/bin/python3
"""strata vs llama.cpp on the GLM-5.2-shaped slice, side by side (docs/benchmarks.md).

    /usr/bin/python3 bench/compare/run.py [--data /work/benchdata] [--rounds 3] [--write-docs]
                                          [--context 512,4096,16384,32768 [--context-models int8,int4]]
    /usr/bin/python3 bench/compare/run.py --disk-class 1.5,3.5,7 [--disk-models int4,int8] [--rounds 1]
    /usr/bin/python3 bench/compare/run.py --pair qwen3-slice [--pair NAME=CONTAINER,GGUF ...] [--no-warm-runs]
                                          [--context 4096,...] [--results FILE]

Runs, alternately and after one warm-up invocation of each, `strata bench` and llama.cpp
(bench/compare/llama_bench.mjs, npm node-llama-cpp) on the same prompt token ids:
  resident  int8 container (--pin all) vs Q8_0 GGUF, and int4-gs32 container vs Q4_0 GGUF:
            prefill of --prompt-tokens and decode of --gen-tokens after it;
  capped    memory capped (cgroup v1 child of this process's memory cgroup) at the non-expert
            bytes + 25% of the expert pool: strata int8 with --ram, llama.cpp Q8_0 with mmap
            (Q4_0 cannot stream in llama.cpp: it repacks experts into anonymous memory). The
            model files are dropped from the page cache (posix_fadvise DONTNEED) before each run.
  capped4   the same cgroup limit and the same --ram bytes: strata int4 experts streaming vs
            llama.cpp Q8_0 mmap again (alternating with it, like the int8 row).
  pairs     (--pair NAME[=CONTAINER,GGUF], repeatable: any model, e.g. the family slices of bench/make_data)
            resident only, like int8: CONTAINER (--pin all) vs GGUF; NAME alone means DATA/NAME-int8 and
            DATA/NAME-q8_0.gguf. With --pair only the pairs run (the slice sections are left out) and the
            raw results go to --results (default DATA/compare-pairs-results.json). With --context N,... each
            pair runs at those contexts instead, as the context rows below.
  context   (--context N,...) resident, per N and --context-models: `strata bench --context N` and
            llama.cpp on the same N ids (--ids-file), prefill of N then decode of --context-gen-tokens;
            strata's context line (attention+indexer / experts / other, KV bytes) is kept. strata's key
            cache is f32 unless --kv-type f16 (the cache type llama.cpp keeps by default).
  disk      (--disk-class 1.5,3.5,7: needs root; runs only these rows) per class and strata container
            (--disk-models int4,int8): the capped row (the same memory cgroup and --ram) with both engines also
            in a cgroup-v1 blkio child whose read_bps throttle is the class, on the disk holding DATA or, for
            classes above --ram-disk-above (2 GB/s), on a RAM-backed loop device (ext4 image in /dev/shm) holding
            a copy of that row's container and Q8_0 GGUF (removed after the row, whatever happens). Per row: the
            throttled device's O_DIRECT random-read throughput at strata's queue depth and 1 MiB chunks
            (build/strata_io_bench in the same child), resident decode of each container (this invocation) and
            the bound 1 / max(bytes read per token / throughput, 1 / resident tok/s); results in --results
            (default DATA/compare-disk-results.json).
Prints a table of medians and strata/llama.cpp ratios; --write-docs writes docs/benchmarks.png,
docs/benchmarks-results.json and the generated head of docs/benchmarks.md (bench/compare/benchmarks.md.in
up to its end-of-head line; an existing page keeps everything after that line). Every raw result goes to
DATA/compare-results.json.
"""
import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import disk_class as DC  # noqa: E402


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def fixed_ids(n, vocab, seed):
    """Pseudo-random prompt ids (splitmix64), the same formula as `strata bench --seed`."""
    M = (1 << 64) - 1
    out = []
    for i in range(n):
        z = (seed * 0x9E3779B97F4A7C15 + (i + 1) * 0xBF58476D1CE4E5B9) & M
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
        z ^= z >> 31
        out.append(1 + z % (vocab - 1))
    return out


# --- GGUF header: tensor names, types and sizes (for bytes touched per token) ---
GGML_BLOCK = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18)}  # type: (elements, bytes)


def gguf_tensors(path):
    with open(path, "rb") as f:
        data = f.read(64 << 20)
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from("<" + fmt, data, off)
        off += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal off
        n = take("Q")
        s = data[off:off + n].decode()
        off += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(scalar[t])

    assert data[:4] == b"GGUF"
    off = 4
    take("I")
    nt, nkv = take("Q"), take("Q")
    kv = {}
    for _ in range(nkv):
        k = string()
        kv[k] = value(take("I"))
    tensors = {}
    for _ in range(nt):
        name = string()
        dims = [take("Q") for _ in range(take("I"))]
        t = take("I")
        take("Q")
        n = 1
        for d in dims:
            n *= d
        el, by = GGML_BLOCK[t]
        tensors[name] = (dims, n // el * by)
    return kv, tensors


def gguf_bytes_per_token(path):
    """Weight bytes one decoded token reads in llama.cpp: every matrix but the embedding table (one row) and
    routed experts (top-k of n per MoE layer); the MTP block is not run."""
    kv, ts = gguf_tensors(path)
    arch = kv["general.architecture"]
    k, n = kv[arch + ".expert_used_count"], kv[arch + ".expert_count"]
    dense = experts = pool = 0
    vocab = kv[arch + ".vocab_size"] if arch + ".vocab_size" in kv else len(kv["tokenizer.ggml.tokens"])
    for name, (dims, b) in ts.items():
        if "_exps." in name:
            experts += b * k // n
            pool += b
        elif name == "token_embd.weight":
            dense += b // vocab
        else:
            dense += b
    total = sum(b for _, b in ts.values())
    return {"dense": dense, "experts": experts, "per_token": dense + experts, "expert_pool": pool,
            "non_expert": total - pool, "file": os.path.getsize(path)}


# --- running things ---
def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def drop_cache(paths):
    for p in paths:
        files = [p] if os.path.isfile(p) else [os.path.join(p, f) for f in os.listdir(p)]
        for fn in files:
            if os.path.isfile(fn):
                fd = os.open(fn, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


class MemCgroup:
    """A cgroup-v1 memory child under this process's own memory cgroup."""

    def __init__(self, limit_bytes):
        rel = None
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, ctrl, p = line.rstrip("\n").split(":", 2)
                if "memory" in ctrl.split(","):
                    rel = p
        if rel is None:
            raise RuntimeError("no cgroup-v1 memory controller in /proc/self/cgroup")
        self.path = os.path.join("/sys/fs/cgroup/memory" + rel, f"strata-bench-{os.getpid()}")
        os.mkdir(self.path)
        with open(os.path.join(self.path, "memory.limit_in_bytes"), "w") as f:
            f.write(str(int(limit_bytes)))
        self.limit = int(limit_bytes)

    def wrap(self, argv):
        # The child shell moves itself into the cgroup, then becomes the engine.
        return DC.enter_cgroups_argv([os.path.join(self.path, "cgroup.procs")], argv)

    def stat(self, key):
        with open(os.path.join(self.path, key)) as f:
            return int(f.read())

    def reset_peak(self):
        with open(os.path.join(self.path, "memory.max_usage_in_bytes"), "w") as f:
            f.write("0")

    def close(self):
        DC.remove_cgroup(self.path)


def run_json(argv, timeout=3600):
    t0 = time.time()
    la = loadavg()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:6])} ... exited {p.returncode}:\n{p.stderr[-3000:]}")
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    return lines, {"wall_s": time.time() - t0, "load_before": la, "load_after": loadavg(), "stderr": p.stderr[-2000:]}


def context_timeout(n):
    """Seconds a --context N run may take: an hour, or 0.3 s per context token above that (llama.cpp prefilled
    16384 tokens in 1770 s on the 2-core VM; its per-token prefill cost grows with the context)."""
    return max(3600, int(0.3 * n))


def strata_run(a, model, ids, gen, extra, wrap=None, warmup_tokens=0, context=0):
    # --context N prefills strata bench's own --seed 1 ids: the same list as fixed_ids(N, vocab, 1).
    prompt = ["--context", str(context)] if context else ["--ids", ",".join(map(str, ids))]
    argv = [a.strata, "bench", "--model", model] + prompt + ["--gen-tokens", str(gen),
            "--threads", str(a.threads), "--reps", "1", "--warmup", "1", "--warmup-tokens", str(warmup_tokens),
            "--json", "--no-autopin"] + extra
    lines, meta = run_json(wrap(argv) if wrap else argv, timeout=context_timeout(context))
    by = {l["bench"]: l for l in lines}
    r = {"engine": "strata", "prefill_tok_s": by["prefill"]["tok_s"], "decode_tok_s": by["decode"]["tok_s"],
         "raw": by, **meta}
    r["kernels_line"] = next((l for l in meta["stderr"].splitlines() if "kernels:" in l), "")
    return r


def llama_run(a, gguf, ids, gen, wrap=None, warmup_tokens=0, ids_file=None):
    prompt = ["--ids-file", ids_file] if ids_file else ["--ids", ",".join(map(str, ids))]
    # The context holds the prompt and the decoded tokens (at least the 4096 the resident runs use).
    ctx = max(4096, len(ids) + gen + 256)
    argv = ["node", os.path.join(HERE, "llama_bench.mjs"), "--gguf", gguf] + prompt + [
            "--gen", str(gen), "--threads", str(a.threads), "--ctx", str(ctx), "--batch", "512", "--reps", "1",
            "--warmup", "1", "--warmup-tokens", str(warmup_tokens)]
    lines, meta = run_json(wrap(argv) if wrap else argv, timeout=context_timeout(len(ids)))
    j = lines[-1]
    return {"engine": "llama.cpp", "prefill_tok_s": j["prefill_tok_s"], "decode_tok_s": j["decode_tok_s"], "raw": j,
            **meta}


def strata_sizes(a, model):
    """(resident bytes, expert pool bytes) of a container, from `strata bench`'s config line."""
    probe, _ = run_json([a.strata, "bench", "--model", model, "--prompt-tokens", "1", "--gen-tokens", "0",
                         "--reps", "1", "--warmup", "0", "--json", "--membw-mib", "0", "--disk-mib", "0",
                         "--no-autopin", "-q", "--ram", "1"])
    cfg = next(l for l in probe if l["bench"] == "config")
    return cfg["resident_bytes"], cfg["expert_pool_bytes"]


def cap_sizes(a, models, strata_models, gb):
    """The capped rows' sizes: ({model: (resident, pool)}, strata --ram bytes, cgroup limit bytes). One memory limit
    for every capped row and both engines: the larger non-expert bytes + 25% of the larger expert pool (of the
    strata containers run and the Q8_0 GGUF) + the allowance; strata's expert cache (--ram) is the same number of
    bytes in each row: 25% of the largest strata pool."""
    sizes = {m: strata_sizes(a, models[m][0]) for m in strata_models}
    s_dense = max(d for d, _ in sizes.values())
    s_pool = max(p for _, p in sizes.values())
    limit = max(s_dense, gb["non_expert"]) + 0.25 * max(s_pool, gb["expert_pool"]) + a.cap_allowance_gb * 1e9
    return sizes, 0.25 * s_pool, limit


def alternate(a, name, fs, fl, warm=None, before=None):
    """Warm-up invocation of each (`warm` = (strata, llama) callables, discarded), then a.rounds rounds, the
    engine order alternating."""
    res = {"strata": [], "llama.cpp": []}
    if warm:
        log(f"[{name}] warm-up")
        for w in warm:
            r = w()
            log(f"[{name}] warm-up {r['engine']}: prefill {r['prefill_tok_s']:.2f}, decode {r['decode_tok_s']:.2f} tok/s")
    for i in range(a.rounds):
        order = [("strata", fs), ("llama.cpp", fl)] if i % 2 == 0 else [("llama.cpp", fl), ("strata", fs)]
        for eng, fn in order:
            if before:
                before()
            r = fn()
            res[eng].append(r)
            log(f"[{name}] round {i + 1} {eng}: prefill {r['prefill_tok_s']:.2f} tok/s, decode "
                f"{r['decode_tok_s']:.2f} tok/s (load {r['load_before']:.1f}, {r['wall_s']:.0f} s)")
    return res


def med(rs, key):
    return statistics.median(r[key] for r in rs)


def machine_info():
    info = {"date_utc": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), "kernel": platform.release()}
    with open("/proc/cpuinfo") as f:
        txt = f.read()
    for line in txt.splitlines():
        if line.startswith("model name") and "cpu" not in info:
            info["cpu"] = line.split(":", 1)[1].strip()
        if line.startswith("flags") and "flags" not in info:
            fl = line.split(":", 1)[1].split()
            info["flags"] = " ".join(x for x in fl if x.startswith(("avx", "amx", "fma", "f16c")))
    info["cores"] = os.cpu_count()
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                info["ram_gib"] = round(int(line.split()[1]) / 2**20, 1)
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/work/benchdata")
    ap.add_argument("--strata", default=os.path.join(ROOT, "build-bench", "strata"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=32)
    ap.add_argument("--warmup-tokens", type=int, default=32, help="prompt tokens of the in-process warm-up repetition")
    ap.add_argument("--capped-prompt-tokens", type=int, default=32)
    ap.add_argument("--capped-gen-tokens", type=int, default=8)
    ap.add_argument("--capped-warmup-tokens", type=int, default=8)
    ap.add_argument("--disk-gen-tokens", type=int, default=16,
                    help="--disk-class rows: decoded tokens per repetition (the warm-up repetition decodes as many, "
                    "so strata's --prefetch auto has timed both windows before the measured one)")
    ap.add_argument("--cap-allowance-gb", type=float, default=0.5,
                    help="added to the cgroup limit for each engine's own buffers (KV, scratch)")
    ap.add_argument("--only", default="int8,int4,capped,capped4", help="sections to run (none: only --context)")
    ap.add_argument("--context", default="", help="long-context runs at these contexts, comma-separated (e.g. "
                    "512,4096,16384,32768)")
    ap.add_argument("--context-models", default="int8", help="int8 and/or int4, for the --context runs")
    ap.add_argument("--context-gen-tokens", type=int, default=16)
    ap.add_argument("--kv-type", default="f32", choices=["f32", "f16"],
                    help="strata's key cache in the --context runs (llama.cpp's is its default, f16)")
    ap.add_argument("--context-warmup-tokens", type=int, default=32,
                    help="prompt tokens of the in-process warm-up repetition of a --context run")
    ap.add_argument("--pair", action="append", default=[], metavar="NAME[=CONTAINER,GGUF]",
                    help="resident int8-style run of a named container / GGUF pair (repeatable; see above)")
    ap.add_argument("--no-warm-runs", action="store_true",
                    help="--pair: leave out the discarded warm-up invocation of each engine (each run still does its "
                    "own unmeasured repetition)")
    ap.add_argument("--results", default="", help="--pair runs' raw results (default DATA/compare-pairs-results.json)")
    ap.add_argument("--disk-class", default="", metavar="GBPS,...",
                    help="capped rows per emulated disk class (GB/s, e.g. 1.5,3.5,7): a cgroup-v1 blkio read "
                    "throttle on the disk holding the data, or on a RAM-backed loop device holding a copy for "
                    "classes above --ram-disk-above (see above); runs only these rows, results in --results "
                    "(default DATA/compare-disk-results.json); needs root")
    ap.add_argument("--ram-disk-above", type=float, default=2.0,
                    help="--disk-class: classes above this many GB/s run from a RAM-backed loop device, unless the "
                    "disk holding the data reads at least 1.2x the class unthrottled (then on that disk: its reads "
                    "take no guest core, the loop device's copies do)")
    ap.add_argument("--no-prefer-disk", action="store_true",
                    help="--disk-class: classes above --ram-disk-above always run from the RAM-backed loop device")
    ap.add_argument("--disk-models", default="int4,int8", help="--disk-class: the strata containers of each class "
                    "(each alternates with llama.cpp Q8_0 mmap)")
    ap.add_argument("--io-depth", type=int, default=16,
                    help="--disk-class: strata's reads in flight (--io-depth), also the probe's queue depth")
    ap.add_argument("--nice", type=int, default=0,
                    help="--disk-class: run the probe and both engines under `nice -n N` (e.g. -10 on a machine shared "
                    "with builds; the same for both engines)")
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    d = a.data
    if a.disk_class:
        if a.pair or a.write_docs or a.context:
            sys.exit("--disk-class runs only the disk-class rows: no --pair, --write-docs or --context with it")
        try:
            classes = DC.parse_classes(a.disk_class)
            DC.check_privileges(need_loop=any(c > a.ram_disk_above for c in classes))
        except DC.DiskClassError as e:
            sys.exit(f"run.py: {e}")
        run_disk_classes(a, classes)
        return
    if a.pair:
        if a.write_docs:
            sys.exit("--pair runs only the pairs: no --write-docs with it")
        run_pairs(a, parse_pairs(d, a.pair))
        return
    models = {
        "int8": (os.path.join(d, "slice-int8"), os.path.join(d, "slice-q8_0.gguf"), "int8 (gs32) vs Q8_0"),
        "int4": (os.path.join(d, "slice-int4"), os.path.join(d, "slice-q4_0.gguf"), "int4 gs32 vs Q4_0"),
    }
    with open(os.path.join(d, "slice-bf16", "config.json")) as f:
        slice_cfg = json.load(f)
    vocab = slice_cfg["vocab_size"]
    for n in [int(x) for x in a.context.split(",") if x]:
        if n + a.context_gen_tokens > slice_cfg["max_position_embeddings"]:
            sys.exit(f"--context {n} + --context-gen-tokens {a.context_gen_tokens} exceeds the slice's "
                     f"max_position_embeddings {slice_cfg['max_position_embeddings']}: remake the slice with bench/make_data "
                     "(whose slice allows GLM-5's 202752 since 2026-12-07; docs/benchmarks.md, Long context)")
    ids = fixed_ids(a.prompt_tokens, vocab, 1)
    cids = ids[: a.capped_prompt_tokens]
    info = machine_info()
    results = {"machine": info, "args": vars(a), "configs": {}}
    only = a.only.split(",")
    for key in ("int8", "int4"):
        if key not in only:
            continue
        cont, gguf, label = models[key]
        gb = gguf_bytes_per_token(gguf)
        res = resident_pair(a, key, cont, gguf, ids)
        results["configs"][key] = {"label": label, "gguf": gb, "runs": res}
    capped = [(k, m) for k, m in (("capped", "int8"), ("capped4", "int4")) if k in only]
    if capped:
        _, gguf, _ = models["int8"]
        gb = gguf_bytes_per_token(gguf)
        sizes, ram, limit = cap_sizes(a, models, [m for _, m in capped], gb)
        cg = MemCgroup(limit)
        log(f"[capped] cgroup {cg.path}: limit {limit / 1e9:.2f} GB; strata --ram {ram / 1e9:.2f} GB")
        try:
            for key, m in capped:
                cont = models[m][0]
                res = alternate(
                    a, key,
                    lambda cont=cont: strata_run(
                        a, cont, cids, a.capped_gen_tokens,
                        ["--ram", f"{ram / 1e9:.3f}", "--membw-mib", "0", "--disk-mib", "1024"], cg.wrap,
                        warmup_tokens=a.capped_warmup_tokens),
                    lambda: llama_run(a, gguf, cids, a.capped_gen_tokens, cg.wrap,
                                      warmup_tokens=a.capped_warmup_tokens),
                    before=lambda cont=cont: drop_cache([cont, gguf]))
                results["configs"][key] = {"label": f"{m} vs Q8_0, memory capped", "gguf": gb, "runs": res,
                                           "limit_bytes": limit, "strata_ram_bytes": ram,
                                           "strata_pool_bytes": sizes[m][1]}
        finally:
            cg.close()
    for n in [int(x) for x in a.context.split(",") if x]:
        for key in a.context_models.split(","):
            cont, gguf, label = models[key]
            cids = fixed_ids(n, vocab, 1)
            ids_file = os.path.join(d, f"context-ids-{n}.txt")
            with open(ids_file + ".tmp", "w") as f:
                f.write(",".join(map(str, cids)))
            os.replace(ids_file + ".tmp", ids_file)
            name = f"{key}-ctx{n}"
            res = alternate(
                a, name,
                lambda: strata_run(a, cont, cids, a.context_gen_tokens,
                                   ["--pin", "all", "--ram", "1000", "--kv-type", a.kv_type],
                                   warmup_tokens=a.context_warmup_tokens, context=n),
                lambda: llama_run(a, gguf, cids, a.context_gen_tokens, warmup_tokens=a.context_warmup_tokens,
                                  ids_file=ids_file))
            results["configs"][name] = {"label": f"{label}, context {n}, strata keys {a.kv_type}", "context": n,
                                        "gguf": gguf_bytes_per_token(gguf), "runs": res}
    with open(os.path.join(d, "compare-results.json"), "w") as f:
        json.dump(results, f, indent=1)
    report(results, a)


def parse_pairs(d, specs):
    """[(name, container, gguf)] from --pair NAME or NAME=CONTAINER,GGUF; checks the files exist."""
    out = []
    for spec in specs:
        name, eq, rest = spec.partition("=")
        if eq:
            cont, _, gguf = rest.partition(",")
        else:
            cont, gguf = os.path.join(d, name + "-int8"), os.path.join(d, name + "-q8_0.gguf")
        for p in (cont, gguf):
            if not p or not os.path.exists(p):
                sys.exit(f"--pair {spec}: {p or '(empty path)'} does not exist (bench/make_data makes the family "
                         "slices)")
        out.append((name, cont, gguf))
    return out


def resident_pair(a, key, cont, gguf, ids, warm_runs=True):
    """Alternating resident runs of a strata container (everything pinned) and a GGUF on the same ids."""
    return alternate(
        a, key,
        lambda: strata_run(a, cont, ids, a.gen_tokens, ["--pin", "all", "--ram", "1000"], warmup_tokens=a.warmup_tokens),
        lambda: llama_run(a, gguf, ids, a.gen_tokens, warmup_tokens=a.warmup_tokens),
        warm=(lambda: strata_run(a, cont, ids[:32], 4, ["--pin", "all", "--ram", "1000", "--membw-mib", "0",
                                                         "--disk-mib", "0"]),
              lambda: llama_run(a, gguf, ids[:32], 4)) if warm_runs else None)


def run_pairs(a, pairs):
    results = {"machine": machine_info(), "args": vars(a), "configs": {}}
    contexts = [int(x) for x in a.context.split(",") if x]
    for name, cont, gguf in pairs:
        with open(os.path.join(cont, "config.json")) as f:
            vocab = json.load(f)["vocab_size"]
        label = f"{name}: {os.path.basename(cont)} vs {os.path.basename(gguf)}"
        if not contexts:
            ids = fixed_ids(a.prompt_tokens, vocab, 1)
            res = resident_pair(a, name, cont, gguf, ids, warm_runs=not a.no_warm_runs)
            results["configs"][name] = {"label": label, "container": cont, "gguf_path": gguf,
                                        "gguf": gguf_bytes_per_token(gguf), "runs": res}
        # With --context N,...: each pair at each context, as the slice's context rows (prefill of N, then
        # --context-gen-tokens decoded; strata's context line kept).
        for n in contexts:
            cids = fixed_ids(n, vocab, 1)
            ids_file = os.path.join(a.data, f"context-ids-{name}-{n}.txt")
            with open(ids_file + ".tmp", "w") as f:
                f.write(",".join(map(str, cids)))
            os.replace(ids_file + ".tmp", ids_file)
            res = alternate(
                a, f"{name}-ctx{n}",
                lambda: strata_run(a, cont, cids, a.context_gen_tokens,
                                   ["--pin", "all", "--ram", "1000", "--kv-type", a.kv_type],
                                   warmup_tokens=a.context_warmup_tokens, context=n),
                lambda: llama_run(a, gguf, cids, a.context_gen_tokens, warmup_tokens=a.context_warmup_tokens,
                                  ids_file=ids_file))
            results["configs"][f"{name}-ctx{n}"] = {"label": f"{label}, context {n}, strata keys {a.kv_type}",
                                                    "context": n, "container": cont,
                                                    "gguf_path": gguf, "gguf": gguf_bytes_per_token(gguf), "runs": res}
    out = a.results or os.path.join(a.data, "compare-pairs-results.json")
    with open(out + ".tmp", "w") as f:
        json.dump(results, f, indent=1)
    os.replace(out + ".tmp", out)
    sys.path.insert(0, HERE)
    import report as R  # noqa: E402
    print(R.table(results))
    if contexts:
        print(R.context_table(results))
    loads = [r["load_before"] for c in results["configs"].values() for e in c["runs"].values() for r in e]
    print(f"load average (1 min) before each run: {min(loads):.1f}-{max(loads):.1f}; raw results: {out}")
    for name in results["configs"]:
        det = R.strata_decode_detail(results, name)
        gg = results["configs"][name]["gguf"]
        print(f"{name}: strata {det['bytes'] / 1e9:.3f} GB/token ({det['gb_s']:.1f} GB/s), llama.cpp "
              f"{gg['per_token'] / 1e9:.3f} GB/token; strata decode split: {R.fmt_phases(det['phases'])}")


def run_disk_classes(a, classes):
    """Per disk class and strata model: the capped row (strata vs llama.cpp Q8_0 mmap, alternating, the same memory
    cgroup as the capped rows) inside a blkio child throttling the data's device to the class, with that device's
    O_DIRECT random-read throughput at strata's queue depth and chunk size measured in the same child, and the
    bound of issue 12 (docs/benchmarks.md, "Disk classes")."""
    d = a.data
    # SIGTERM unwinds like Ctrl-C, so the finally blocks detach the loop device and remove the cgroups.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    conts = {"int8": os.path.join(d, "slice-int8"), "int4": os.path.join(d, "slice-int4")}
    gguf = os.path.join(d, "slice-q8_0.gguf")
    strata_models = [m for m in a.disk_models.split(",") if m]
    for m in strata_models:
        if m not in conts:
            sys.exit(f"--disk-models: unknown {m!r} (int4, int8)")
    for p in [gguf] + [conts[m] for m in strata_models]:
        if not os.path.exists(p):
            sys.exit(f"--disk-class: {p} does not exist (bench/make_data makes it)")
    io_bench = os.path.join(os.path.dirname(os.path.abspath(a.strata)), "strata_io_bench")
    if not os.access(io_bench, os.X_OK):
        sys.exit(f"--disk-class: no {io_bench} (the disk probe; `ninja -C build strata_io_bench`)")
    with open(os.path.join(d, "slice-bf16", "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    cids = fixed_ids(a.capped_prompt_tokens, vocab, 1)
    gb = gguf_bytes_per_token(gguf)
    # The limit and --ram of the capped rows whatever --disk-models picks: from every slice container there is.
    sized = [m for m in ("int8", "int4") if os.path.exists(conts[m])]
    sizes, ram, limit = cap_sizes(a, {m: (conts[m],) for m in sized}, sized, gb)
    biggest = max(DC.tree_bytes(conts[m]) for m in strata_models) + DC.tree_bytes(gguf)
    if any(c > a.ram_disk_above for c in classes) and DC.mem_available() < biggest + limit + 2e9:
        sys.exit(f"--disk-class: a RAM-backed class needs {biggest / 1e9:.1f} GB in /dev/shm + the {limit / 1e9:.1f} GB "
                 f"cap + 2 GB; only {DC.mem_available() / 1e9:.1f} GB available")
    results = {"machine": machine_info(), "args": vars(a), "limit_bytes": limit, "strata_ram_bytes": ram,
               "resident": {}, "classes": []}
    log(f"[disk] memory cgroup limit {limit / 1e9:.2f} GB for both engines; strata --ram {ram / 1e9:.2f} GB")
    # The compute side of the bound: resident decode (every expert pinned, files page-cached), this invocation.
    for m in strata_models:
        r = strata_run(a, conts[m], cids, a.disk_gen_tokens, ["--pin", "all", "--ram", "1000", "--membw-mib", "0",
                                                                 "--disk-mib", "0"],
                       (lambda argv: ["nice", "-n", str(a.nice)] + argv) if a.nice else None,
                       warmup_tokens=a.capped_warmup_tokens)
        results["resident"][m] = r
        log(f"[disk] resident {m}: decode {r['decode_tok_s']:.2f} tok/s (load {r['load_before']:.1f})")
    cg = MemCgroup(limit)
    try:
        for ci, cls in enumerate(classes):
            for m in strata_models:
                results["classes"].append(disk_class_row(a, ci, cls, m, conts[m], gguf, cg, ram, cids, io_bench))
                write_json(results, a.results or os.path.join(d, "compare-disk-results.json"))
    finally:
        cg.close()
    out = a.results or os.path.join(d, "compare-disk-results.json")
    write_json(results, out)
    print(disk_table(results))
    loads = [r["load_before"] for row in results["classes"] for e in row["runs"].values() for r in e]
    print(f"load average (1 min) before each run: {min(loads):.1f}-{max(loads):.1f}; raw results: {out}")


def write_json(results, path):
    with open(path + ".tmp", "w") as f:
        json.dump(results, f, indent=1)
    os.replace(path + ".tmp", path)


def disk_class_row(a, ci, cls, m, cont, gguf, cg, ram, cids, io_bench):
    rd = blk = None
    nice = ["nice", "-n", str(a.nice)] if a.nice else []

    def probe_of(gguf_path):
        return nice + DC.probe_argv(io_bench, gguf_path, DC.expert_blob_bytes(cont), a.io_depth, 1 << 20)

    def run_probe(argv, procs):
        p = subprocess.run(DC.enter_cgroups_argv(procs, argv) if procs else argv, capture_output=True,
                           text=True, timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}:\n{p.stderr[-2000:]}")
        return DC.parse_probe(p.stdout)

    try:
        # Above --ram-disk-above, the disk holding the data is probed unthrottled first: where it reads well
        # above the class (the host's cache answering), the row runs there (DC.choose_device).
        disk_free = None
        if cls > a.ram_disk_above and not a.no_prefer_disk:
            disk_free = run_probe(probe_of(gguf), [])
        device, why = DC.choose_device(cls, a.ram_disk_above, disk_free[0] if disk_free else None,
                                       prefer_disk=not a.no_prefer_disk)
        log(f"[disk {cls:g}] {m}: runs on the {'disk holding the data' if device == 'disk' else 'RAM-backed loop device'}"
            f" ({why})")
        if device == "ram":
            rd = DC.RamDisk([cont, gguf], f"{ci}-{m}", log)
            cont, gguf, devs, where = rd.copies[cont], rd.copies[gguf], [rd.dev], f"RAM-backed {rd.loop}"
        else:
            devs = sorted({DC.device_of(cont), DC.device_of(gguf)})
            where = "disk " + ",".join(devs)
        blk = DC.BlkioCgroup(devs, cls * 1e9, f"{ci}-{m}")
        probe = probe_of(gguf)

        # The device unthrottled (outside the blkio child), then throttled: what the class gets is the latter.
        free_gbps, free_rounds = disk_free if (device == "disk" and disk_free) else run_probe(probe, [])
        gbps, rounds = run_probe(probe, [blk.procs])
        log(f"[disk {cls:g}] {where}: probe (O_DIRECT random {m} experts, 1 MiB chunks, {a.io_depth} in flight): "
            f"unthrottled {free_gbps:.2f} GB/s (rounds {', '.join(f'{x:.2f}' for x in free_rounds)}); throttled to "
            f"{cls:g} GB/s: {gbps:.2f} GB/s (rounds {', '.join(f'{x:.2f}' for x in rounds)})")

        def wrap(argv):
            return DC.enter_cgroups_argv([os.path.join(cg.path, "cgroup.procs"), blk.procs], nice + argv)

        def counted(fn):
            b0 = blk.read_bytes()
            r = fn()
            r["device_read_bytes"] = blk.read_bytes() - b0
            return r

        name = f"disk{cls:g}-{m}"
        res = alternate(
            a, name,
            lambda: counted(lambda: strata_run(
                a, cont, cids, a.disk_gen_tokens,
                ["--ram", f"{ram / 1e9:.3f}", "--io-depth", str(a.io_depth), "--membw-mib", "0", "--disk-mib", "0"],
                wrap, warmup_tokens=a.capped_warmup_tokens)),
            lambda: counted(lambda: llama_run(a, gguf, cids, a.disk_gen_tokens, wrap,
                                              warmup_tokens=a.capped_warmup_tokens)),
            before=lambda: drop_cache([cont, gguf]))
        return {"class_gb_s": cls, "model": m, "where": where, "device_choice": why, "devices": devs,
                "disk_unthrottled_gb_s": disk_free[0] if disk_free else None, "probe_gb_s": gbps,
                "probe_rounds": rounds, "unthrottled_gb_s": free_gbps, "unthrottled_rounds": free_rounds,
                "probe_argv": probe, "runs": res}
    finally:
        if blk:
            blk.close()
        if rd:
            rd.close()


def disk_rows(results):
    """One dict per (class, model): medians, ratio, bytes per token, the bound and the fraction reached."""
    out = []
    for row in results["classes"]:
        s, l = row["runs"]["strata"], row["runs"]["llama.cpp"]
        dec = [r["raw"]["decode"] for r in s]
        st, lt = med(s, "decode_tok_s"), med(l, "decode_tok_s")
        bpt = statistics.median(x["disk_bytes_per_token"] for x in dec)
        wait_gbs = statistics.median(x["disk_gb_s_during_wait"] for x in dec)
        res = results["resident"][row["model"]]["decode_tok_s"]
        b = DC.bound(bpt, row["probe_gb_s"] * 1e9, res)
        out.append({"class": row["class_gb_s"], "model": row["model"], "where": row["where"],
                    "probe": row["probe_gb_s"], "unthrottled": row.get("unthrottled_gb_s"), "strata": st, "llama": lt, "ratio": st / lt if lt else float("nan"),
                    "bpt": bpt, "hit": statistics.median(x["expert_hit_rate"] for x in dec), "wait_gbs": wait_gbs,
                    "resident": res, "bound": b, "frac": DC.fraction_of_bound(st, b),
                    "strata_reps": [r["decode_tok_s"] for r in s], "llama_reps": [r["decode_tok_s"] for r in l],
                    "llama_read_gb": [r.get("device_read_bytes", 0) / 1e9 for r in l]})
    return out


def disk_table(results):
    lines = ["| disk class | device | probe GB/s: throttled (unthrottled) | strata | strata tok/s | llama.cpp Q8_0 tok/s | strata / llama.cpp | "
             "strata GB read / token | hit rate | strata GB/s while waiting (of probe) | resident tok/s | "
             "bound tok/s (limit) | strata / bound |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in disk_rows(results):
        b = r["bound"]
        free = f" ({r['unthrottled']:.2f})" if r["unthrottled"] else ""
        lines.append(f"| {r['class']:g} GB/s | {r['where']} | {r['probe']:.2f}{free} | {r['model']} | "
                     f"{r['strata']:.2f} ({', '.join(f'{x:.2f}' for x in r['strata_reps'])}) | "
                     f"{r['llama']:.2f} ({', '.join(f'{x:.2f}' for x in r['llama_reps'])}) | **{r['ratio']:.2f}×** | "
                     f"{r['bpt'] / 1e9:.3f} | {100 * r['hit']:.0f}% | {r['wait_gbs']:.2f} "
                     f"({100 * r['wait_gbs'] / r['probe']:.0f}%) | {r['resident']:.2f} | "
                     f"{b['bound_tok_s']:.2f} ({b['limited_by']}) | **{100 * r['frac']:.0f}%** |")
    return "\n".join(lines)


def report(results, a):
    sys.path.insert(0, HERE)
    import report as R  # noqa: E402
    R.write(results, a, ROOT)


if __name__ == "__main__":
    main()
