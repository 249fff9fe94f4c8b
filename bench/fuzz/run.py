#!/usr/bin/env python3
"""Builds the libFuzzer targets (tests/fuzz) in their own build directory and
runs each one, one at a time, printing one JSON line per target:

  {"target": "config", "execs": 1000000, "seconds": 212.4, "exec_per_s": 4708,
   "crashes": 0, "result": "ok"}

result is ok, crash (a sanitizer report, an abort, an escaped exception),
timeout (one input ran past --timeout seconds), leak or oom; the exit status
is 1 when any target did not end ok. Crashing inputs are kept under
BUILD/fuzz-artifacts/<target>/. The committed corpus (tests/fuzz/corpus) is
read, never written: what a run discovers goes to BUILD/fuzz-work/<target>/.

  bench/fuzz/run.py --runs 1000000            # the campaign (docs/security.md)
  bench/fuzz/run.py --seconds 10              # the bounded CI phase (scripts/test.sh)
  bench/fuzz/run.py --seconds 60 config gguf  # some targets
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGETS = ["safetensors", "config", "tokenizer_text", "tokenizer_json", "chat_template", "openai_request",
           "json_schema", "container", "kv_file", "gguf"]
# Longest input each target is given (libFuzzer's -max_len): the text
# targets are short, the file formats a little longer.
MAX_LEN = {"tokenizer_json": 16384, "container": 8192, "safetensors": 8192, "tokenizer_text": 2048}


def build(build_dir):
    env = dict(os.environ)
    # -O1 with line tables only: reports keep file:line, and the cold build
    # (it runs in CI) costs about half the CPU time of -O2 -g.
    cfg = ["cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
           "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only",
           "-DCMAKE_CXX_COMPILER=clang++", "-DSTRATA_FUZZ=ON", "-DSTRATA_PY_TESTS=OFF", "-DSTRATA_NODE_TESTS=OFF"]
    if shutil.which("ccache"):
        cfg.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
    subprocess.run(cfg, check=True, stdout=subprocess.DEVNULL, env=env)
    # Build output on stderr: stdout is the JSON lines.
    subprocess.run(["ninja", "-C", build_dir, "fuzz"], check=True, env=env, stdout=sys.stderr)


def classify(rc, log):
    if rc == 0:
        return "ok"
    if "ERROR: libFuzzer: timeout" in log:
        return "timeout"
    if "out-of-memory" in log:
        return "oom"
    if "LeakSanitizer" in log:
        return "leak"
    return "crash"


def run_target(name, build_dir, args):
    exe = os.path.join(build_dir, "fuzz", "fuzz_" + name)
    work = os.path.join(build_dir, "fuzz-work", name)
    art = os.path.join(build_dir, "fuzz-artifacts", name)
    os.makedirs(work, exist_ok=True)
    os.makedirs(art, exist_ok=True)
    corpus = os.path.join(ROOT, "tests", "fuzz", "corpus", name)
    cmd = [exe, work, corpus, f"-artifact_prefix={art}/", f"-timeout={args.timeout}",
           f"-rss_limit_mb={args.rss_limit_mb}", f"-max_len={MAX_LEN.get(name, 4096)}", "-print_final_stats=1"]
    dict_path = os.path.join(ROOT, "tests", "fuzz", name + ".dict")
    if os.path.exists(dict_path):
        cmd.append(f"-dict={dict_path}")
    if args.runs:
        cmd.append(f"-runs={args.runs}")
    if args.seconds:
        cmd.append(f"-max_total_time={args.seconds}")
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    before = set(glob.glob(os.path.join(art, "*")))
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    seconds = time.time() - t0
    log = p.stdout.decode("utf-8", "replace")
    with open(os.path.join(build_dir, "fuzz-work", name + ".log"), "w") as f:
        f.write(log)
    m = re.findall(r"stat::number_of_executed_units:\s*(\d+)", log)
    execs = int(m[-1]) if m else 0
    found = sorted(set(glob.glob(os.path.join(art, "*"))) - before)
    result = classify(p.returncode, log)
    rec = {"target": name, "execs": execs, "seconds": round(seconds, 1),
           "exec_per_s": int(execs / seconds) if seconds > 0 else 0, "crashes": len(found), "result": result}
    if result != "ok":
        rec["artifacts"] = found
        # The report itself, so CI logs show what broke.
        tail = log[log.find("==ERROR") if "==ERROR" in log else max(0, len(log) - 4000):]
        sys.stderr.write(f"--- fuzz_{name}: {result}\n{tail[:6000]}\n")
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="*", help=f"targets to run (default: all of {', '.join(TARGETS)})")
    ap.add_argument("--runs", type=int, default=0, help="executions per target (libFuzzer -runs)")
    ap.add_argument("--seconds", type=int, default=0, help="seconds per target (libFuzzer -max_total_time)")
    ap.add_argument("--timeout", type=int, default=10, help="seconds one input may take before it is a hang")
    ap.add_argument("--rss-limit-mb", type=int, default=2048)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build-fuzz"))
    ap.add_argument("--no-build", action="store_true", help="use the targets already built")
    args = ap.parse_args()
    if not args.runs and not args.seconds:
        ap.error("give --runs N and/or --seconds T")
    names = args.targets or TARGETS
    for n in names:
        if n not in TARGETS:
            ap.error(f"unknown target {n} (targets: {', '.join(TARGETS)})")
    if not args.no_build:
        t0 = time.time()
        build(args.build_dir)
        sys.stderr.write(f"fuzz targets built in {time.time() - t0:.0f} s ({args.build_dir})\n")
    bad = 0
    for n in names:
        rec = run_target(n, args.build_dir, args)
        print(json.dumps(rec), flush=True)
        bad += rec["result"] != "ok"
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
