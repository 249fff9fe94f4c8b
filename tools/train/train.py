#!/usr/bin/env python3
"""Train the strata default model (glm_moe_dsa at small scale) on CPU.

Recipe (all knobs below are CLI flags; the defaults are what the released model used):
  * data: random windows of tools/train/data/train.bin (uint16 ids, docs separated by <|endoftext|>);
  * loss = CE(next token) + mtp_weight * CE(MTP, token i+2) + idx_weight * KL(main attn || indexer);
    the indexer sees detached inputs, so its KL only trains indexer weights (DeepSeek-V3.2 style);
  * phase 1 (first `dense_frac` of the time budget): dense causal attention, context ctx1 / batch b1;
    phase 2: DSA sparse attention (indexer top-k, as at inference), context ctx2 / batch b2;
  * router: sigmoid scores, top-k on (score + e_score_correction_bias); the bias is not trained by
    gradient but nudged by +-bias_rate each step towards balanced expert load (DeepSeek-V3
    aux-loss-free balancing);
  * AdamW (0.9, 0.95), weight decay on matrices, grad clip 1.0, linear warmup then cosine decay to
    10%, where the schedule runs on elapsed TRAINING TIME (the machine is shared, so throughput varies);
  * checkpoint every `ckpt_every_s` to OUT/ckpt.pt; rerunning the same command resumes.

    nice -n 19 /usr/bin/python3 tools/train/train.py --out tools/train/runs/glm5-strata-tiny --minutes 70
"""
import argparse, json, math, os, sys, time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import GlmMoeDsaForCausalLM, make_config  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def get_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--tok", default=os.path.join(HERE, "runs", "tok4k", "tokenizer.json"))
    ap.add_argument("--minutes", type=float, default=70.0, help="training-time budget")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--ctx1", type=int, default=256)
    ap.add_argument("--b1", type=int, default=8)
    ap.add_argument("--ctx2", type=int, default=512)
    ap.add_argument("--b2", type=int, default=4)
    ap.add_argument("--dense_frac", type=float, default=0.55)
    ap.add_argument("--idx_rows", type=int, default=2, help="sequences per step used for the indexer KL")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min_lr_frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--mtp_weight", type=float, default=0.3)
    ap.add_argument("--idx_weight", type=float, default=1.0)
    ap.add_argument("--bias_rate", type=float, default=1e-3)
    ap.add_argument("--ckpt_every_s", type=float, default=300)
    ap.add_argument("--eval_every_s", type=float, default=480)
    ap.add_argument("--max_steps", type=int, default=10 ** 9)
    ap.add_argument("--config", default=None, help="JSON dict of config overrides")
    return ap.parse_args()


def special_ids(tok_path):
    j = json.load(open(tok_path, encoding="utf-8"))
    return {t["content"]: t["id"] for t in j["added_tokens"]}, len(j["model"]["vocab"]) + len(j["added_tokens"])


@torch.no_grad()
def evaluate(model, held, ctx, n_win=8):
    """Mean held-out CE (main, MTP) over n_win fixed windows, DSA sparse attention."""
    model.eval()
    starts = np.linspace(0, len(held) - ctx - 2, n_win).astype(np.int64)
    x = torch.from_numpy(np.stack([held[s:s + ctx + 1] for s in starts]).astype(np.int64))
    lg, _, ml = model(x[:, :-1], dense=False)
    V = lg.shape[-1]
    ce = F.cross_entropy(lg.reshape(-1, V), x[:, 1:].reshape(-1)).item()
    mce = F.cross_entropy(ml.reshape(-1, V), x[:, 2:].reshape(-1)).item()
    macc = (ml.argmax(-1) == x[:, 2:]).float().mean().item()
    acc = (lg.argmax(-1) == x[:, 1:]).float().mean().item()
    model.train()
    return {"val_loss": ce, "val_mtp_loss": mce, "val_acc": acc, "val_mtp_acc": macc}


def main():
    a = get_args()
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    spec, vocab = special_ids(a.tok)
    eos = [spec["<|endoftext|>"], spec["<|user|>"], spec["<|observation|>"]]
    over = json.loads(a.config) if a.config else {}
    cfg = make_config(vocab, eos, spec["<|endoftext|>"], **over)
    json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    torch.manual_seed(a.seed)
    model = GlmMoeDsaForCausalLM(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    nodecay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    train = np.memmap(os.path.join(a.data, "train.bin"), dtype=np.uint16, mode="r")
    held = np.fromfile(os.path.join(a.data, "heldout.bin"), dtype=np.uint16)
    ck = os.path.join(a.out, "ckpt.pt")
    step, t_train, tokens = 0, 0.0, 0
    rng = np.random.default_rng(a.seed)
    if os.path.exists(ck):
        st = torch.load(ck)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, t_train, tokens = st["step"], st["t_train"], st["tokens"]
        rng.bit_generator.state = st["rng"]
        torch.set_rng_state(st["torch_rng"])
        print(f"resumed at step {step}, {t_train / 60:.1f} min, {tokens} tokens", flush=True)
    else:
        print(f"params {n_params} ({n_params / 1e6:.2f}M); train tokens {len(train)}; held-out {len(held)}", flush=True)
    budget = a.minutes * 60
    mlog = open(os.path.join(a.out, "metrics.jsonl"), "a")
    moe = model.moe_layers()
    last_ck = last_ev = t_train
    model.train()
    while t_train < budget and step < a.max_steps:
        t0 = time.time()
        frac = t_train / budget
        dense = frac < a.dense_frac
        ctx, B = (a.ctx1, a.b1) if dense else (a.ctx2, a.b2)
        if step < a.warmup:
            lr = a.lr * (step + 1) / a.warmup
        else:
            lr = a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = rng.integers(0, len(train) - ctx - 2, size=B)
        x = torch.from_numpy(np.stack([train[s:s + ctx + 1] for s in starts]).astype(np.int64))
        aux = {"idx_rows": a.idx_rows}
        lg, _, ml = model(x[:, :-1], dense=dense, aux=aux)
        V = lg.shape[-1]
        ce = F.cross_entropy(lg.reshape(-1, V), x[:, 1:].reshape(-1))
        mce = F.cross_entropy(ml.reshape(-1, V), x[:, 2:].reshape(-1))
        kl = torch.stack(aux["idx_kl"]).mean()
        loss = ce + a.mtp_weight * mce + a.idx_weight * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        # aux-loss-free load balancing (DeepSeek-V3): bias += rate * sign(mean_load - load)
        loads = aux["load"]
        assert len(loads) == len(moe)
        imb = []
        with torch.no_grad():
            for m_, cnt in zip(moe, loads):
                cnt = cnt.float()
                m_.gate.e_score_correction_bias += a.bias_rate * torch.sign(cnt.mean() - cnt)
                imb.append((cnt.max() / cnt.mean()).item())
        dt = time.time() - t0
        t_train += dt
        step += 1
        tokens += B * ctx
        rec = {"step": step, "t_min": round(t_train / 60, 3), "tokens": tokens, "lr": lr, "dense": dense,
               "ctx": ctx, "loss": ce.item(), "mtp_loss": mce.item(), "idx_kl": kl.item(),
               "gnorm": float(gn), "max_load_ratio": round(max(imb), 3), "tok_s": round(B * ctx / dt, 1)}
        if t_train - last_ev >= a.eval_every_s or t_train >= budget:
            rec.update(evaluate(model, held, a.ctx2))
            last_ev = t_train
        mlog.write(json.dumps(rec) + "\n")
        mlog.flush()
        if step % 5 == 0 or "val_loss" in rec:
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in rec.items()), flush=True)
        if t_train - last_ck >= a.ckpt_every_s or t_train >= budget or step >= a.max_steps:
            st = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "t_train": t_train,
                  "tokens": tokens, "rng": rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
                  "config": cfg, "args": vars(a)}
            torch.save(st, ck + ".tmp")
            os.replace(ck + ".tmp", ck)
            last_ck = t_train
            print(f"checkpoint step {step} ({t_train / 60:.1f} min)", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
