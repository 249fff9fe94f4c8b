"""Table, docs/benchmarks.md's generated head and docs/benchmarks.png from bench/compare/run.py's results.

    /usr/bin/python3 bench/compare/report.py /work/benchdata/compare-results.json   # re-render
"""
import json
import os
import re
import statistics
import sys


# The line ending the generated head of docs/benchmarks.md (benchmarks.md.in): --write-docs replaces the
# page up to it and keeps what follows.
HEAD_END = "<!-- end of the generated head:"


def med(rs, key):
    return statistics.median(r[key] for r in rs) if rs else float("nan")


def rows_of(results):
    out = []
    for key, c in results["configs"].items():
        s, l = c["runs"]["strata"], c["runs"]["llama.cpp"]
        phases = ("decode",) if key.startswith("capped") else ("prefill", "decode")
        if "context" in c:  # --context runs: their own table (context_table)
            continue
        for ph in phases:
            k = ph + "_tok_s"
            ms, ml = med(s, k), med(l, k)
            out.append({"config": key, "label": c["label"], "phase": ph, "strata": ms, "llama": ml,
                        "ratio": ms / ml if ml else float("nan"),
                        "strata_reps": [r[k] for r in s], "llama_reps": [r[k] for r in l]})
    return out


def strata_decode_detail(results, key):
    c = results["configs"].get(key)
    if not c:
        return None
    runs = c["runs"]["strata"]
    dec = [r["raw"]["decode"] for r in runs]
    mem = [r["raw"]["memory_bandwidth"]["gb_s"] for r in runs if "memory_bandwidth" in r["raw"]]
    disk = [r["raw"]["disk_read"]["gb_s"] for r in runs if "disk_read" in r["raw"]]
    pre = [r["raw"]["prefill"] for r in runs]
    ph = {k: statistics.median(d["ms_per_token"][k] for d in dec) for k in dec[0]["ms_per_token"]}
    pph = {k: statistics.median(p["ms_per_token"][k] for p in pre) for k in pre[0]["ms_per_token"]}
    return {"bytes": dec[0]["weight_bytes_per_token"], "gb_s": statistics.median(d["weight_gb_s"] for d in dec),
            "mem": statistics.median(mem) if mem else 0.0, "disk": statistics.median(disk) if disk else 0.0,
            "frac": statistics.median(d["mem_bw_fraction"] for d in dec) if mem else 0.0, "phases": ph,
            "prefill_phases": pph, "disk_per_tok": statistics.median(d["disk_bytes_per_token"] for d in dec),
            "disk_wait_gb_s": statistics.median(d["disk_gb_s_during_wait"] for d in dec),
            "hit": statistics.median(d["expert_hit_rate"] for d in dec), "kernels": runs[0]["raw"]["config"]["kernels"]}


def fmt_phases(p):
    t = p["total"] or 1.0
    return ", ".join(f"{k.replace('_', ' ')} {p[k]:.1f} ms ({100 * p[k] / t:.0f}%)"
                     for k in ("attention", "router", "expert_wait", "expert_matmul", "other"))


def table(results):
    lines = ["| configuration | phase | strata tok/s (median) | llama.cpp tok/s (median) | strata / llama.cpp | "
             "strata runs | llama.cpp runs |", "|---|---|---|---|---|---|---|"]
    for r in rows_of(results):
        lines.append(f"| {r['label']} | {r['phase']} | {r['strata']:.2f} | {r['llama']:.2f} | **{r['ratio']:.2f}×** | "
                     f"{', '.join(f'{x:.2f}' for x in r['strata_reps'])} | "
                     f"{', '.join(f'{x:.2f}' for x in r['llama_reps'])} |")
    return "\n".join(lines)


def context_table(results):
    """The --context runs: prefill time and decode speed of both engines at each context, strata's split and
    KV bytes per context token (strata's session; llama.cpp's f16 K/V by formula, see docs/benchmarks.md)."""
    ctx = [(k, c) for k, c in results["configs"].items() if "context" in c]
    if not ctx:
        return ("(No `--context` runs in this invocation: `bench/compare/run.py --only none --context "
                "512,4096,16384,32768` runs them.)")
    lines = ["| configuration | context | prefill s: strata / llama.cpp | prefill ratio | decode tok/s: strata / "
             "llama.cpp | decode ratio | strata decode split (attention+indexer / experts / other, ms/tok) | "
             "KV MiB at context: strata / llama.cpp (formula) | llama.cpp KV allocated (its log, context cells) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key, c in ctx:
        s, l, n = c["runs"]["strata"], c["runs"]["llama.cpp"], c["context"]
        sp, lp = n / med(s, "prefill_tok_s"), n / med(l, "prefill_tok_s")
        sd, ld = med(s, "decode_tok_s"), med(l, "decode_tok_s")
        lines_ = [r["raw"]["context"] for r in s]
        sp_ms = {k: statistics.median(x["decode_split_ms_per_token"][k] for x in lines_)
                 for k in ("attention", "experts", "other")}
        kv, lkv = lines_[0]["kv_bytes_at_context"], lines_[0]["llama_cpp_kv_bytes_at_context"]
        lines.append(f"| {c['label']} | {n} | {sp:.1f} / {lp:.1f} | **{lp / sp:.2f}×** | {sd:.2f} / {ld:.2f} | "
                     f"**{sd / ld:.2f}×** | {' / '.join(f'{sp_ms[k]:.1f}' for k in sp_ms)} | "
                     f"{kv / 2**20:.1f} / {lkv / 2**20:.1f} | "
                     f"{l[0]['raw']['llama'].get('kv_cache_mib', '?')} MiB ({l[0]['raw']['llama'].get('context_size')}) |")
    return "\n".join(lines)


def context_rows(results):
    """The --context runs as bars: decode tok/s of both engines at each context (prefill is in the table)."""
    out = []
    for key, c in results["configs"].items():
        if "context" not in c:
            continue
        s, l = med(c["runs"]["strata"], "decode_tok_s"), med(c["runs"]["llama.cpp"], "decode_tok_s")
        out.append({"label": f"{c['label'].split(',')[0]}\ncontext {c['context']}", "phase": "decode",
                    "strata": s, "llama": l, "ratio": s / l if l else float("nan")})
    return out


def plot(results, path):
    try:
        import matplotlib
    except ImportError:
        sys.exit("bench/compare/report.py: drawing docs/benchmarks.png needs matplotlib "
                 "(apt-get install python3-matplotlib; run it with /usr/bin/python3)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = [(rows_of(results), "resident and memory-capped runs")]
    if context_rows(results):
        panels.append((context_rows(results), "decode at a context (after prefilling it)"))
    widths = [max(len(p[0]), 1) for p in panels]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 + 1.3 * sum(widths), 4.6), squeeze=False,
                             gridspec_kw={"width_ratios": widths})
    w = 0.38
    for ax, (rows, title) in zip(axes[0], panels):
        x = range(len(rows))
        ax.bar([i - w / 2 for i in x], [r["strata"] for r in rows], w, label="strata", color="#2a7ab9")
        ax.bar([i + w / 2 for i in x], [r["llama"] for r in rows], w, label="llama.cpp (node-llama-cpp 3.21.1)",
               color="#c9772b")
        for i, r in zip(x, rows):
            ax.text(i, max(r["strata"], r["llama"]) * 1.08, f"{r['ratio']:.2f}×", ha="center", fontsize=8.5)
        ax.set_xticks(list(x))
        ax.set_xticklabels([f"{r['label'].replace(', ', chr(10))}\n{r['phase']}" for r in rows], fontsize=7)
        top = max(max(r["strata"], r["llama"]) for r in rows)
        if ax is axes[0][0]:
            ax.set_yscale("log")
            ax.set_ylim(top=top * 2)
        else:  # one phase at a few contexts: a linear axis from 0 reads better
            ax.set_ylim(0, top * 1.2)
            ax.set_ylabel("tokens/s (median)")
        ax.set_title(title, fontsize=8.5)
    axes[0][0].set_ylabel("tokens/s (log scale, median)")
    axes[0][0].legend(fontsize=7.5, loc="upper right")
    m = results["machine"]
    fig.suptitle(f"GLM-5.2-shaped slice, {m['cores']} threads, {m['cpu']} — {m['date_utc']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write(results, a, root):
    print(table(results))
    print(context_table(results))
    det = strata_decode_detail(results, "int8")
    det4 = strata_decode_detail(results, "int4")
    if det:
        print(f"strata int8 resident decode: {det['bytes'] / 1e9:.3f} GB/token, {det['gb_s']:.1f} GB/s = "
              f"{100 * det['frac']:.0f}% of {det['mem']:.1f} GB/s")
    if not getattr(a, "write_docs", False):
        return
    plot(results, os.path.join(root, "docs", "benchmarks.png"))
    tmpl = os.path.join(os.path.dirname(os.path.abspath(__file__)), "benchmarks.md.in")
    with open(tmpl) as f:
        doc = f.read()
    m = results["machine"]
    cap = results["configs"].get("capped", results["configs"].get("capped4", {}))
    capdet = strata_decode_detail(results, "capped")
    cap4 = results["configs"].get("capped4", {})
    cap4det = strata_decode_detail(results, "capped4")
    loads = [r["load_before"] for c in results["configs"].values() for e in c["runs"].values() for r in e]
    gg8 = results["configs"].get("int8", {}).get("gguf", {})
    gg4 = results["configs"].get("int4", {}).get("gguf", {})
    lb = [r["raw"]["llama"]["cpu_backend"] for c in results["configs"].values() for r in c["runs"]["llama.cpp"]]
    rep = [f'{k}: {c["runs"]["llama.cpp"][0]["raw"]["llama"].get("repack_mib")} MiB' for k, c in results["configs"].items()
           if c["runs"]["llama.cpp"]]
    fa = [r["raw"]["llama"].get("flash_attention") for c in results["configs"].values() for r in c["runs"]["llama.cpp"]]
    subs = {
        "TABLE": table(results),
        "CONTEXT": context_table(results),
        "DATE": m["date_utc"], "CPU": m["cpu"], "FLAGS": m["flags"], "CORES": str(m["cores"]),
        "RAM": f"{m['ram_gib']} GiB", "KERNEL": m["kernel"],
        "LOAD": f"{min(loads):.1f}–{max(loads):.1f} (median {statistics.median(loads):.1f})" if loads else "?",
        "ROUNDS": str(a.rounds), "THREADS": str(a.threads), "PROMPT": str(a.prompt_tokens), "GEN": str(a.gen_tokens),
        "CPROMPT": str(a.capped_prompt_tokens), "CGEN": str(a.capped_gen_tokens),
        "MEMBW": f"{det['mem']:.1f}" if det else "?",
        "DISKBW": f"{capdet['disk']:.2f}" if capdet and capdet["disk"] else (f"{det['disk']:.2f}" if det else "?"),
        "S8_BYTES": f"{det['bytes'] / 1e9:.3f}" if det else "?", "S8_GBS": f"{det['gb_s']:.1f}" if det else "?",
        "S8_FRAC": f"{100 * det['frac']:.0f}" if det else "?",
        "S4_BYTES": f"{det4['bytes'] / 1e9:.3f}" if det4 else "?", "S4_GBS": f"{det4['gb_s']:.1f}" if det4 else "?",
        "S4_FRAC": f"{100 * det4['frac']:.0f}" if det4 else "?",
        "S4_MEM": f"{det4['mem']:.1f}" if det4 else "?",
        "L8_BYTES": f"{gg8.get('per_token', 0) / 1e9:.3f}", "L4_BYTES": f"{gg4.get('per_token', 0) / 1e9:.3f}",
        "S8_PHASES": fmt_phases(det["phases"]) if det else "?",
        "S8_PPHASES": fmt_phases(det["prefill_phases"]) if det else "?",
        "S4_PHASES": fmt_phases(det4["phases"]) if det4 else "?",
        "S4_PPHASES": fmt_phases(det4["prefill_phases"]) if det4 else "?",
        "C_PHASES": fmt_phases(capdet["phases"]) if capdet else "?",
        "C_LIMIT": f"{cap.get('limit_bytes', 0) / 1e9:.2f}", "C_RAM": f"{cap.get('strata_ram_bytes', 0) / 1e9:.2f}",
        "C_DISKTOK": f"{capdet['disk_per_tok'] / 1e9:.3f}" if capdet else "?",
        "C_WAITBW": f"{capdet['disk_wait_gb_s']:.2f}" if capdet else "?",
        "C_HIT": f"{100 * capdet['hit']:.0f}" if capdet else "?",
        "C4_PHASES": fmt_phases(cap4det["phases"]) if cap4det else "not run in this invocation",
        "C4_DISKTOK": f"{cap4det['disk_per_tok'] / 1e9:.3f}" if cap4det else "?",
        "C4_WAITBW": f"{cap4det['disk_wait_gb_s']:.2f}" if cap4det else "?",
        "C4_HIT": f"{100 * cap4det['hit']:.0f}" if cap4det else "?",
        "C4_POOLPCT": (f"{100 * cap4['strata_ram_bytes'] / cap4['strata_pool_bytes']:.0f}"
                       if cap4.get("strata_pool_bytes") else "?"),
        "KERNELS": det["kernels"] if det else "?",
        "LLAMA_BACKEND": ", ".join(sorted(set(str(x) for x in lb))),
        "LLAMA_REPACK": "; ".join(rep),
        "LLAMA_FA": ", ".join(sorted(set(str(x) for x in fa))),
    }
    an = os.path.join(os.path.dirname(os.path.abspath(__file__)), "analysis.md")
    doc = doc.replace("{{ANALYSIS}}", open(an).read() if os.path.exists(an) else "")
    tag = {("int8", "prefill"): "8P", ("int8", "decode"): "8D", ("int4", "prefill"): "4P", ("int4", "decode"): "4D",
           ("capped", "decode"): "CD", ("capped4", "decode"): "C4D"}
    for t in tag.values():  # a section not run in this invocation
        subs["R" + t] = subs["S" + t] = subs["L" + t] = "?"
    for r in rows_of(results):
        t = tag.get((r["config"], r["phase"]))
        if t is None:
            continue
        subs["R" + t], subs["S" + t], subs["L" + t] = f"{r['ratio']:.2f}", f"{r['strata']:.2f}", f"{r['llama']:.2f}"
    for name, dd in (("S8", det), ("S4", det4), ("C", capdet), ("C4", cap4det)):
        if dd:
            for k in ("attention", "expert_wait", "expert_matmul", "other"):
                subs[f"{name}_{k.upper()}_MS"] = f"{dd['phases'][k]:.0f}"
                subs[f"{name}_{k.upper()}_PCT"] = f"{100 * dd['phases'][k] / dd['phases']['total']:.0f}"
                subs[f"{name}_P{k.upper()}_PCT"] = f"{100 * dd['prefill_phases'][k] / dd['prefill_phases']['total']:.0f}"
    if subs["L8D"] != "?":  # llama.cpp's int8 decode memory traffic, from its GGUF's bytes per token
        subs["L8_GBS_EST"] = f"{gg8.get('per_token', 0) / 1e9 * float(subs['L8D']):.1f}"
    if det and det4:
        subs["S4_FRAC_OF_MEMBW"] = f"{100 * det4['gb_s'] / det['mem']:.0f}"
    subs["ALLOW"] = f"{a.cap_allowance_gb:.1f}"
    subs["MEMBW_ALL"] = ", ".join(f"{r['raw']['memory_bandwidth']['gb_s']:.1f}" for c in results["configs"].values()
                                  for r in c["runs"]["strata"] if "memory_bandwidth" in r["raw"])
    for k, v in subs.items():
        doc = doc.replace("{{" + k + "}}", v)
    doc = re.sub(r"\{\{[A-Z0-9_]+\}\}", "?", doc)  # a figure from a section not run in this invocation
    # A page that exists keeps everything after its generated head (the measurements written by hand
    # since: re-runs, A/B pairs, analyses); only the head is this run's. Temp file, then rename.
    page = os.path.join(root, "docs", "benchmarks.md")
    if os.path.exists(page) and HEAD_END in doc:
        with open(page) as f:
            old = f.read()
        if HEAD_END in old:
            doc = doc[:doc.index(HEAD_END)] + old[old.index(HEAD_END):]
    write_atomic(page, doc)
    write_atomic(os.path.join(root, "docs", "benchmarks-results.json"), json.dumps(slim(results), indent=1) + "\n")
    print("wrote docs/benchmarks.md (its generated head), docs/benchmarks.png and docs/benchmarks-results.json")


# Left out of the docs/ copy of the results (DATA/compare-results.json keeps them): each run's captured stderr
# and the token id lists, most of the file's bytes.
SLIM_DROP = ("stderr", "generated_ids", "prompt_ids")


def slim(x):
    if isinstance(x, dict):
        return {k: slim(v) for k, v in x.items() if k not in SLIM_DROP}
    if isinstance(x, list):
        return [slim(v) for v in x]
    return x


def write_atomic(path, text):
    tmp = path + ".partial"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    import argparse
    res = json.load(open(sys.argv[1]))
    ns = argparse.Namespace(**res["args"])
    ns.write_docs = "--write-docs" in sys.argv
    write(res, ns, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")))
