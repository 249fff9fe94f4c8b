#!/usr/bin/env python3
"""Routing statistics of a glm_moe_dsa checkpoint on held-out text, with the fp32 oracle.

* per MoE layer: normalised expert-usage entropy H(p)/ln(E) (1 = perfectly uniform), max/min load;
  how often the bias changes the chosen set;
* next-layer predictability: apply layer L+1's router (sigmoid + e_score_correction_bias, top-k) to
  layer L's post-attention-normed input (the input of layer L's MLP) and measure the recall of
  layer L+1's actual top-k; baselines: the k globally most used experts of layer L+1, and k/E.

    /usr/bin/python3 tools/train/eval_routing.py --model models/glm5-strata-tiny --ids tools/train/data/heldout.bin
"""
import argparse, json, math, os, sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from eval_ppl import read_ids  # noqa: E402
from glm_moe_dsa_ref import load_checkpoint, rmsnorm  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--max-windows", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    m = load_checkpoint(a.model)
    c = m.cfg
    E, K, N = c.n_routed_experts, c.num_experts_per_tok, c.num_hidden_layers
    ids = read_ids(a.ids)
    nwin = min(len(ids) // a.ctx, a.max_windows)
    moe_layers = [L for L in range(N) if c.mlp_layer_types[L] == "sparse"]
    counts = {L: np.zeros(E) for L in moe_layers + [N]}
    xs = {L: [] for L in range(N)}
    chosen = {L: [] for L in moe_layers + [N]}
    max_dev = 0.0
    for w in range(nwin):
        x = ids[w * a.ctx:(w + 1) * a.ctx].tolist()
        o = m.forward(x, trace=True)
        tr = o["trace"]
        h_prev = m.W("model.embed_tokens.weight")[torch.tensor(x)]
        for L in range(N):
            t = tr[L]
            assert t["layer"] == L
            hm = h_prev + t["attn_out"]
            xin = rmsnorm(hm, m.W(f"model.layers.{L}.post_attention_layernorm.weight"), c.rms_norm_eps)
            xs[L].append(xin)
            if L in counts:
                rl = xin @ m.W(f"model.layers.{L}.mlp.gate.weight").t()
                max_dev = max(max_dev, (rl - t["router_logits"]).abs().max().item())
                chosen[L].append(t["experts"])
            h_prev = t["h"]
        tm = tr[N]
        chosen[N].append(tm["experts"])
    res = {"model": a.model, "windows": nwin, "tokens": nwin * a.ctx, "router_input_recompute_max_dev": max_dev,
           "layers": {}, "next_layer_prediction": {}}
    for L in counts:
        idx = torch.cat(chosen[L])
        cnt = np.bincount(idx.flatten().numpy(), minlength=E).astype(np.float64)
        p = cnt / cnt.sum()
        ent = -(p[p > 0] * np.log(p[p > 0])).sum() / math.log(E)
        res["layers"][str(L) + (" (MTP)" if L == N else "")] = {
            "usage_entropy_norm": round(float(ent), 4), "max_over_mean_load": round(float(p.max() * E), 3),
            "min_over_mean_load": round(float(p.min() * E), 3),
            "usage_fraction": [round(float(v), 4) for v in p * K]}  # fraction of tokens using each expert
    for L in range(N - 1):
        if L + 1 not in moe_layers:
            continue
        X = torch.cat(xs[L])
        act = torch.cat(chosen[L + 1])
        s = torch.sigmoid(X @ m.W(f"model.layers.{L + 1}.mlp.gate.weight").t())
        pred = (s + m.W(f"model.layers.{L + 1}.mlp.gate.e_score_correction_bias")).topk(K, -1).indices
        hit = (pred[:, :, None] == act[:, None, :]).any(-1).float().sum(-1) / K
        cnt = np.bincount(act.flatten().numpy(), minlength=E)
        pop = torch.from_numpy(np.argsort(-cnt, kind="stable")[:K].copy())
        pop_hit = (act[:, :, None] == pop[None, None, :]).any(-1).float().sum(-1) / K
        res["next_layer_prediction"][f"{L}->{L + 1}"] = {
            "topk_recall": round(hit.mean().item(), 4), "all_k_correct": round((hit == 1).float().mean().item(), 4),
            "popularity_baseline_recall": round(pop_hit.mean().item(), 4), "random_baseline_recall": K / E}
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
