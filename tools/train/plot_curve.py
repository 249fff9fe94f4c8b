#!/usr/bin/env python3
"""Training curve (PNG) and loss table (markdown) from OUT/metrics.jsonl."""
import argparse, json, math

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def ema(xs, a=0.95):
    out, m = [], None
    for x in xs:
        m = x if m is None else a * m + (1 - a) * x
        out.append(m)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--table-every-min", type=float, default=6.0)
    a = ap.parse_args()
    R = [json.loads(l) for l in open(a.metrics)]
    tok = [r["tokens"] / 1e6 for r in R]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    ax[0].plot(tok, ema([r["loss"] for r in R]), label="train loss (EMA)")
    ax[0].plot(tok, ema([r["mtp_loss"] for r in R]), label="train MTP loss (EMA)")
    V = [r for r in R if "val_loss" in r]
    ax[0].plot([r["tokens"] / 1e6 for r in V], [r["val_loss"] for r in V], "o-", label="held-out loss")
    ax[0].plot([r["tokens"] / 1e6 for r in V], [r["val_mtp_loss"] for r in V], "s-", label="held-out MTP loss")
    sw = next((r["tokens"] / 1e6 for r in R if not r["dense"]), None)
    if sw:
        ax[0].axvline(sw, color="gray", ls=":", label="dense -> DSA sparse, ctx 256 -> 512")
    ax[0].set_xlabel("training tokens (M)"); ax[0].set_ylabel("cross-entropy (nats)"); ax[0].legend(); ax[0].grid(alpha=.3)
    ax[1].plot(tok, ema([r["idx_kl"] for r in R]), label="indexer KL (EMA)")
    ax[1].plot(tok, ema([r["max_load_ratio"] for r in R]), label="max expert load / mean (EMA)")
    ax[1].set_xlabel("training tokens (M)"); ax[1].legend(); ax[1].grid(alpha=.3)
    fig.tight_layout(); fig.savefig(a.out, dpi=90)
    print("| step | train min | tokens | lr | attention | train loss | train MTP loss | indexer KL | max load/mean |")
    print("|---|---|---|---|---|---|---|---|---|")
    nxt = 0.0
    for i, r in enumerate(R):
        if r["t_min"] >= nxt or i == len(R) - 1:
            w = R[max(0, i - 9):i + 1]
            m = lambda k: sum(x[k] for x in w) / len(w)
            att = f"dense, ctx {r['ctx']}" if r["dense"] else f"DSA, ctx {r['ctx']}"
            print(f"| {r['step']} | {r['t_min']:.1f} | {r['tokens']} | {r['lr']:.2e} | {att} | {m('loss'):.3f} | {m('mtp_loss'):.3f} | "
                  f"{m('idx_kl'):.3f} | {m('max_load_ratio'):.2f} |")
            nxt = r["t_min"] + a.table_every_min
    print("\n(train columns: mean of the last 10 steps)\n")
    print("| step | tokens | held-out loss | held-out ppl | top-1 | MTP loss | MTP top-1 |")
    print("|---|---|---|---|---|---|---|")
    for r in V:
        print(f"| {r['step']} | {r['tokens']} | {r['val_loss']:.3f} | {math.exp(r['val_loss']):.1f} | {r['val_acc']:.3f} | "
              f"{r['val_mtp_loss']:.3f} | {r['val_mtp_acc']:.3f} |")
    print("\n(held-out during training: 8 fixed windows x 512 tokens of held-out text, DSA on, fp32 training weights)")


if __name__ == "__main__":
    main()
