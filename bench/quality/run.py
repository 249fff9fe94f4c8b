#!/usr/bin/env python3
"""Quality of container precisions against the unquantized model.

For each model and each precision variant: strata convert, then strata eval
(KL divergence, top-1 agreement, perplexity) against the source checkpoint.
Writes a markdown table to --out (default docs/quality.md) with the commands.

    python3 bench/quality/run.py [--model DIR --ids-file F] ...
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
STRATA = os.environ.get("STRATA", os.path.join(ROOT, "build", "strata"))

# f32-scale rows say --scales f32: bf16 is convert's default since 2026-12-04.
VARIANTS = [
    ("int8 per-row (all int8)", "--experts int8 --group-size 0 --scales f32"),
    ("int4 per-row experts", "--experts int4 --group-size 0 --scales f32"),
    ("int4 gs32 experts", "--experts int4 --group-size 32 --scales f32"),
    ("int4 gs64 experts", "--experts int4 --group-size 64 --scales f32"),
    ("int4 gs128 experts", "--experts int4 --group-size 128 --scales f32"),
    ("int4 gs32 everywhere", "--experts int4 --group-size 32 --attn-bits 4 --o-bits 4 --kvb-bits 4 "
                             "--shared-bits 4 --dense-mlp-bits 4 --scales f32"),
    ("int4 gs32 experts, bf16 scales", "--experts int4 --group-size 32 --scales bf16"),
    ("int4 gs32 everywhere, bf16 scales", "--experts int4 --group-size 32 --attn-bits 4 --o-bits 4 --kvb-bits 4 "
                                          "--shared-bits 4 --dense-mlp-bits 4 --scales bf16"),
    ("int8 gs32 (all int8), bf16 scales", "--experts int8 --group-size 32 --scales bf16"),
    ("int8 gs32 (all int8)", "--experts int8 --group-size 32 --scales f32"),
]


def sh(cmd):
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {cmd}\n{r.stderr}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="append", help="HF checkpoint dir (repeatable); default: the fixtures")
    ap.add_argument("--ids-file", action="append", help="token ids per model (default: 512 random ids)")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "quality.md"))
    a = ap.parse_args()
    models = a.model or [os.path.join(ROOT, "tests", "fixtures", n)
                         for n in ("glm5-tiny-bf16", "glm5-tiny-fp8", "glm52-tiny-bf16")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mi, model in enumerate(models):
            ids_file = a.ids_file[mi] if a.ids_file and mi < len(a.ids_file) else None
            if not ids_file:
                vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
                rng = random.Random(7)
                ids_file = os.path.join(tmp, f"ids{mi}.txt")
                with open(ids_file, "w") as f:
                    f.write(",".join(str(rng.randrange(vocab)) for _ in range(512)))
            for label, flags in VARIANTS:
                out = os.path.join(tmp, f"c{mi}")
                sh(f"rm -rf {out} && {STRATA} convert --in {model} --out {out} {flags} --force")
                size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".bin"))
                j = json.loads(sh(f"{STRATA} eval --model {out} --ref {model} --ids-file {ids_file} "
                                  f"--ctx {a.ctx} --json --no-autopin 2>/dev/null"))
                rows.append((os.path.basename(model.rstrip("/")), label, flags, size, j))
                print(f"{rows[-1][0]:18s} {label:24s} KL {j['kl_mean']:.4g} top1 {j['top1_agreement']:.3f} "
                      f"ppl {j['ppl']:.3f} (ref {j['ref_ppl']:.3f})", flush=True)
    lines = ["# Container quality", "",
             "KL divergence (mean over positions, reference || container) and top-1 agreement of converted",
             "containers against the unquantized checkpoint, computed by `strata eval` (both models run by",
             "strata; the unquantized path is checked against the PyTorch reference in the test suite).",
             "",
             "Produced by `python3 bench/quality/run.py" + "".join(f" --model {m}" for m in (a.model or [])) + "`",
             f"(windows of {a.ctx} tokens).",
             "",
             "The fixtures have random weights: their router and indexer selection gaps are tiny, so any",
             "rounding flips expert and key choices and the numbers below overstate what quantization does",
             "to a trained model. The trained default model's rows are the quality yardstick.",
             "",
             "| model | variant | container bytes | KL mean | KL max | top-1 agreement | ppl (ref ppl) |",
             "|---|---|---|---|---|---|---|"]
    for name, label, flags, size, j in rows:
        lines.append(f"| {name} | {label} (`{flags}`) | {size/1e6:.2f} MB | {j['kl_mean']:.4g} | {j['kl_max']:.4g} | "
                     f"{100*j['top1_agreement']:.1f}% | {j['ppl']:.3f} ({j['ref_ppl']:.3f}) |")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(a.out + ".tmp", a.out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
