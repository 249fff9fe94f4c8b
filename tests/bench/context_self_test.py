"""bench/compare/context_self.py (strata's long-context decode against its own short-context decode): the run
order, the bracketed ratios and the argument refusals, then one end-to-end invocation on the trained tiny model
converted to an int8 container (contexts 64 and 200/300, 4 decoded tokens): the JSON lines, the results file and
its summary recomputed from its own runs (ctest bench_context_self).
Usage: context_self_test.py STRATA_BINARY"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import ROOT, check, finish  # noqa: E402
import context_self as CS  # noqa: E402

# The order: every long run between two base runs.
check(CS.schedule(512, [32768], 2) == [512, 32768, 512, 32768, 512], f"schedule {CS.schedule(512, [32768], 2)}")
check(CS.schedule(64, [200, 300], 1) == [64, 200, 64, 300, 64], f"schedule {CS.schedule(64, [200, 300], 1)}")

# Bracketed ratios: each long run over the mean of its two neighbours.
runs = [{"context": 512, "decode_tok_s": 40.0}, {"context": 32768, "decode_tok_s": 30.0},
        {"context": 512, "decode_tok_s": 44.0}, {"context": 32768, "decode_tok_s": 33.0},
        {"context": 512, "decode_tok_s": 46.0}]
r = CS.bracket_ratios(runs, 512)
check(set(r) == {32768} and len(r[32768]) == 2, f"ratios {r}")
check(abs(r[32768][0] - 30.0 / 42.0) < 1e-12 and abs(r[32768][1] - 33.0 / 45.0) < 1e-12, f"ratios {r}")
s = CS.summary(runs, 512)[32768]
check(abs(s["median_ratio"] - (30 / 42 + 33 / 45) / 2) < 1e-12, f"median {s}")
check(abs(s["ratio_of_medians"] - 31.5 / 44.0) < 1e-12 and s["min_ratio"] == r[32768][0], f"summary {s}")
# A long run with a base run on one side only (an interrupted invocation) takes that one.
check(CS.bracket_ratios(runs[:2], 512) == {32768: [0.75]}, f"one side {CS.bracket_ratios(runs[:2], 512)}")
try:
    CS.bracket_ratios([{"context": 300, "decode_tok_s": 1.0}], 64)
    check(False, "a long run without a base run should raise")
except ValueError as e:
    check("no base-context run" in str(e), f"error {e}")

check(CS.parse_contexts("16384, 32768") == [16384, 32768], "parse two contexts")
for bad, needle in (("16k", "'16k'"), ("0", "'0'"), ("4096,4096", "given twice"), ("", "''")):
    try:
        CS.parse_contexts(bad)
        check(False, f"parse_contexts({bad!r}) should refuse")
    except ValueError as e:
        check(needle in str(e), f"parse_contexts({bad!r}): {e}")

# End to end on the trained tiny model.
strata = sys.argv[1]
script = os.path.join(ROOT, "bench", "compare", "context_self.py")
with tempfile.TemporaryDirectory() as tmp:
    cont = os.path.join(tmp, "c")
    subprocess.run([strata, "convert", "--in", os.path.join(ROOT, "models", "glm5-strata-tiny"), "--out", cont,
                    "--experts", "int8", "-q"], check=True)
    # Refusals before any run: a base that is also a long context, a missing model.
    p = subprocess.run([sys.executable, script, "--strata", strata, "--model", cont, "--base", "64",
                        "--contexts", "64,200"], capture_output=True, text=True)
    check(p.returncode != 0 and "--base 64 is also in --contexts" in p.stderr, f"base in contexts: {p.stderr}")
    p = subprocess.run([sys.executable, script, "--strata", strata, "--model", os.path.join(tmp, "none")],
                       capture_output=True, text=True)
    check(p.returncode != 0 and "does not exist" in p.stderr, f"missing model: {p.stderr}")

    results = os.path.join(tmp, "r.json")
    p = subprocess.run([sys.executable, script, "--strata", strata, "--model", cont, "--base", "64",
                        "--contexts", "200,300", "--rounds", "1", "--gen-tokens", "4", "--membw-mib", "0",
                        "--results", results], capture_output=True, text=True, timeout=600)
    check(p.returncode == 0, f"exit {p.returncode}: {p.stderr[-2000:]}")
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    run_lines = [l for l in lines if l["bench"] == "context_self_run"]
    check([l["context"] for l in run_lines] == [64, 200, 64, 300, 64], f"run order {[l['context'] for l in run_lines]}")
    check(all(l["decode_tok_s"] > 0 and l["prefill_s"] > 0 for l in run_lines), "positive speeds")
    check(all(set(l["decode_split_ms_per_token"]) == {"total", "attention", "indexer", "experts", "other"}
              for l in run_lines), "decode split fields")
    sums = {l["context"]: l for l in lines if l["bench"] == "context_self"}
    check(set(sums) == {200, 300}, f"summary lines {sorted(sums)}")
    check(not os.path.exists(results + ".tmp"), "no temporary file left")
    with open(results) as f:
        saved = json.load(f)
    check(saved["runs"] == [{k: v for k, v in l.items() if k != "bench"} for l in run_lines], "results file runs")
    want = CS.summary(saved["runs"], 64)
    for n in (200, 300):
        got = saved["summary"][str(n)]
        check(got == want[n] == {k: v for k, v in sums[n].items() if k not in ("bench", "context", "base")},
              f"summary {n}: {got} / {want[n]}")
        i = [l["context"] for l in run_lines].index(n)
        expect = run_lines[i]["decode_tok_s"] / ((run_lines[i - 1]["decode_tok_s"] + run_lines[i + 1]["decode_tok_s"]) / 2)
        check(abs(got["ratios"][0] - expect) < 1e-12, f"ratio {n}: {got['ratios']} vs {expect}")
    check("context 300 against 64" in p.stderr, f"human summary: {p.stderr[-800:]}")

finish("bench_context_self")
