"""bench/compare/report.py --write-docs on a synthetic run (ctest bench_report_head): a page that exists keeps
everything after its end-of-head line and gets this run's head; a missing page is written whole from the
template; the raw results are copied beside it. No engine, no data, no matplotlib (the plot is stubbed)."""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, finish  # noqa: E402
import report  # noqa: E402


def strata_run(prefill, decode, load):
    ms = {"attention": 10.0, "router": 0.1, "expert_wait": 0.0, "expert_matmul": 9.0, "other": 4.0, "total": 23.1}
    raw = {"decode": {"ms_per_token": ms, "weight_bytes_per_token": 1.119e9, "weight_gb_s": 47.5,
                      "mem_bw_fraction": 0.8, "disk_bytes_per_token": 0.0, "disk_gb_s_during_wait": 0.0,
                      "expert_hit_rate": 1.0, "generated_ids": [1, 2, 3]},
           "prefill": {"ms_per_token": ms}, "memory_bandwidth": {"gb_s": 59.4},
           "config": {"kernels": "avx512vnni"}}
    return {"engine": "strata", "prefill_tok_s": prefill, "decode_tok_s": decode, "raw": raw, "load_before": load}


def llama_run(prefill, decode, load):
    raw = {"llama": {"cpu_backend": "zen4", "repack_mib": 2490, "flash_attention": False}}
    return {"engine": "llama.cpp", "prefill_tok_s": prefill, "decode_tok_s": decode, "raw": raw, "load_before": load,
            "stderr": "llama.cpp's log"}


results = {
    "machine": {"date_utc": "2031-01-02 03:04 UTC", "cpu": "Test CPU", "flags": "avx512f", "cores": 2,
                "ram_gib": 24.0, "kernel": "6.0"},
    "args": {"rounds": 3, "threads": 2, "prompt_tokens": 512, "gen_tokens": 32, "capped_prompt_tokens": 32,
             "capped_gen_tokens": 8, "cap_allowance_gb": 0.5},
    "configs": {"int4": {"label": "int4 gs32 vs Q4_0", "gguf": {"per_token": 1.119e9},
                         "runs": {"strata": [strata_run(140.0, 41.0, 1.1), strata_run(130.0, 40.0, 1.3),
                                             strata_run(135.0, 42.0, 1.2)],
                                  "llama.cpp": [llama_run(55.0, 21.0, 1.4), llama_run(56.0, 20.0, 1.5),
                                                llama_run(54.0, 22.0, 1.6)]}}},
}
args = argparse.Namespace(**results["args"], write_docs=True)
report.plot = lambda res, path: open(path, "w").close()  # matplotlib is not a test dependency

with tempfile.TemporaryDirectory() as root:
    os.makedirs(os.path.join(root, "docs"))
    page = os.path.join(root, "docs", "benchmarks.md")

    # No page yet: the whole template, rendered.
    report.write(results, args, root)
    text = open(page).read()
    check(text.startswith("# strata vs llama.cpp"), "a new page starts with the template's title")
    check("2031-01-02 03:04 UTC" in text, "the new page names the run's date")
    check("| int4 gs32 vs Q4_0 | prefill | 135.00 | 55.00 | **2.45×**" in text, "the new page has the median row")
    check(report.HEAD_END in text, "the new page has the end-of-head line")
    check("## Machine" in text, "the new page has the template's later sections")
    check("{{" not in text, "no placeholder is left unfilled")
    check(not os.path.exists(page + ".partial"), "no .partial file is left")
    saved = json.load(open(os.path.join(root, "docs", "benchmarks-results.json")))
    check(saved["configs"]["int4"]["runs"]["strata"][1]["decode_tok_s"] == 40.0, "the results are copied to docs/")
    check("stderr" not in saved["configs"]["int4"]["runs"]["llama.cpp"][0], "the copy leaves out each run's stderr")
    check("generated_ids" not in saved["configs"]["int4"]["runs"]["strata"][0]["raw"]["decode"],
          "the copy leaves out the token ids")

    # A page with measurements written after its head: they survive, the head is replaced.
    kept = "\n## Written by hand\n\nA measurement that no run regenerates.\n"
    with open(page, "w") as f:
        f.write("# an old head\n\n| old table |\n\n" + report.HEAD_END + " old wording -->\n" + kept)
    results["machine"]["date_utc"] = "2031-02-03 04:05 UTC"
    report.write(results, args, root)
    text = open(page).read()
    check("# an old head" not in text and "| old table |" not in text, "the old head is gone")
    check("2031-02-03 04:05 UTC" in text, "the head is this run's")
    check(text.endswith(report.HEAD_END + " old wording -->\n" + kept), "everything from the end-of-head line on is kept")
    check(text.count("## Machine") == 0, "the template's later sections are not added to an existing page")

    # A page without the line (written by hand from scratch): replaced whole, as before.
    with open(page, "w") as f:
        f.write("# a page without the line\n")
    report.write(results, args, root)
    text = open(page).read()
    check("# a page without the line" not in text and "## Machine" in text, "a page without the line is rewritten")

finish("report head")
