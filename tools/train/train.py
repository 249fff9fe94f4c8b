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

MTP-only distillation (`--init DIR --mtp_only`): start from a model directory's weights and config,
train only the MTP layer (model.layers.{num_hidden_layers}.*) and keep everything else frozen and
bit-identical (embedding and lm_head included; the trunk's router biases are not nudged). The loss is
  distill * KL(p_main(. | ids[..i+1]) || p_mtp(row i)) + mtp_weight * CE(MTP, ids[i+2]) + idx_weight * KL(MTP indexer),
i.e. the MTP head learns to predict the main model's own next-token distribution one step ahead,
which is what a speculative drafter is verified against (the main model's greedy choice).

    nice -n 19 /usr/bin/python3 tools/train/train.py --out tools/train/runs/mtp-distill \
        --init models/glm5-strata-tiny --mtp_only --distill 1 --mtp_weight 0 --dense_frac 0 --minutes 30
"""
import argparse, json, math, os, sys, time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import GlmMoeDsaForCausalLM, make_config  # noqa: E402
from glm_moe_dsa_ref import load_raw_tensors, storage_to_f32  # noqa: E402

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
    ap.add_argument("--init", default=None, help="start from this model directory (config.json + model.safetensors)")
    ap.add_argument("--mtp_only", action="store_true", help="train only the MTP layer; the rest stays frozen")
    ap.add_argument("--distill", type=float, default=0.0,
                    help="weight of KL(main model's next-token distribution one step ahead || MTP)")
    ap.add_argument("--mtp_depth", type=int, default=1,
                    help="distil the MTP layer chained on its own output this many times (mean over depths)")
    ap.add_argument("--selfgen", default=None,
                    help="uint16 windows of ctx2+1 ids of the model's own greedy output (self_generate.py); "
                         "the last --selfgen_eval windows are held out for evaluation")
    ap.add_argument("--selfgen_frac", type=float, default=0.5, help="fraction of batch rows drawn from --selfgen")
    ap.add_argument("--selfgen_eval", type=int, default=16)
    return ap.parse_args()


def special_ids(tok_path):
    j = json.load(open(tok_path, encoding="utf-8"))
    return {t["content"]: t["id"] for t in j["added_tokens"]}, len(j["model"]["vocab"]) + len(j["added_tokens"])


@torch.no_grad()
def evaluate(model, held, ctx, n_win=8, depth=1, selfgen=None):
    """Mean held-out CE (main, MTP) over n_win fixed windows, DSA sparse attention; with depth > 1 or
    held-out self-generated windows also the MTP chain's agreement with the main model's greedy token."""
    model.eval()
    starts = np.linspace(0, len(held) - ctx - 2, n_win).astype(np.int64)
    x = torch.from_numpy(np.stack([held[s:s + ctx + 1] for s in starts]).astype(np.int64))
    res = {f"val_{k}": v for k, v in chain_agreement(model, x[:, :-1], depth).items()} if depth > 1 else {}
    if selfgen is not None:
        res.update({f"selfgen_{k}": v for k, v in chain_agreement(model, torch.from_numpy(selfgen[:, :-1]), depth).items()})
    lg, _, ml = model(x[:, :-1], dense=False)
    V = lg.shape[-1]
    ce = F.cross_entropy(lg.reshape(-1, V), x[:, 1:].reshape(-1)).item()
    mce = F.cross_entropy(ml.reshape(-1, V), x[:, 2:].reshape(-1)).item()
    macc = (ml.argmax(-1) == x[:, 2:]).float().mean().item()
    acc = (lg.argmax(-1) == x[:, 1:]).float().mean().item()
    agree = (ml.argmax(-1) == lg[:, 1:].argmax(-1)).float().mean().item()
    dkl = distill_kl(lg, ml).item()
    model.train()
    return {"val_loss": ce, "val_mtp_loss": mce, "val_acc": acc, "val_mtp_acc": macc,
            "val_mtp_agree": agree, "val_distill_kl": dkl, **res}


def chain_agreement(model, ids, depth):
    """Per depth of the MTP chain: the fraction of rows whose MTP top-1 is the main model's top-1 for the
    same token, and the fraction of positions where the whole chain up to that depth agrees (what a
    k-draft chain gets accepted, with teacher-forced inputs)."""
    aux = {"idx_rows": 0}
    lg, _, _ = model(ids, dense=False, aux=aux, frozen_trunk=True, mtp_depth=max(depth, 2))
    chain = aux["mtp_chain"][:depth]
    res, run = {}, None
    for d, ml in enumerate(chain):
        hit = ml.argmax(-1) == lg[:, 1 + d:].argmax(-1)  # row r of depth d: position r + d
        res[f"agree_d{d + 1}"] = hit.float().mean().item()
        run = hit if run is None else run[:, :hit.shape[1]] & hit
        res[f"chain_agree_d{d + 1}"] = run.float().mean().item()
    return res


def distill_kl(lg, ml, d=0):
    """Mean KL(p_main || p_mtp) where MTP row i of depth d+1 (position i+d) is compared with the main
    model's logits at i+d+1 (both predict token i+d+2); the main model's side is detached."""
    logp = torch.log_softmax(lg[:, 1 + d:].detach().float(), -1)
    logq = torch.log_softmax(ml.float(), -1)
    return (logp.exp() * (logp - logq)).sum(-1).mean()


def load_init(model, init_dir):
    """Load a model directory's tensors into `model` (strict). bf16 -> fp32 is exact, and the export's
    fp32 -> bf16 rounding gives the same bits back for every tensor that was not trained."""
    raw = load_raw_tensors(init_dir)
    sd = model.state_dict()
    assert set(raw) == set(sd), (sorted(set(raw) ^ set(sd))[:5])
    model.load_state_dict({k: torch.from_numpy(storage_to_f32(dt, arr).copy()).reshape(sd[k].shape)
                           for k, (dt, arr) in raw.items()})


def main():
    a = get_args()
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    spec, vocab = special_ids(a.tok)
    eos = [spec["<|endoftext|>"], spec["<|user|>"], spec["<|observation|>"]]
    over = json.loads(a.config) if a.config else {}
    if a.init:
        assert not over, "--config does not apply with --init (the config comes from the model directory)"
        cfg = json.load(open(os.path.join(a.init, "config.json")))
    else:
        cfg = make_config(vocab, eos, spec["<|endoftext|>"], **over)
    json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    torch.manual_seed(a.seed)
    model = GlmMoeDsaForCausalLM(cfg)
    if a.init:
        load_init(model, a.init)
    if a.mtp_only:
        assert a.init, "--mtp_only needs --init"
        for n, p in model.named_parameters():
            p.requires_grad_(n.startswith(model.mtp_prefix()))
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    n_params = sum(p.numel() for _, p in trainable)
    decay = [p for n, p in trainable if p.dim() >= 2]
    nodecay = [p for n, p in trainable if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    train = np.memmap(os.path.join(a.data, "train.bin"), dtype=np.uint16, mode="r")
    held = np.fromfile(os.path.join(a.data, "heldout.bin"), dtype=np.uint16)
    sg = sg_eval = None
    if a.selfgen:
        sg = np.fromfile(a.selfgen, dtype=np.uint16).astype(np.int64)
        assert sg.size % (a.ctx2 + 1) == 0, f"{a.selfgen}: not a whole number of windows of ctx2+1 = {a.ctx2 + 1} ids"
        sg = sg.reshape(-1, a.ctx2 + 1)
        assert len(sg) > a.selfgen_eval, f"{a.selfgen}: {len(sg)} windows, needs more than --selfgen_eval {a.selfgen_eval}"
        sg, sg_eval = sg[:-a.selfgen_eval], sg[-a.selfgen_eval:]
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
    if a.mtp_only:
        moe = moe[-1:]  # only the MTP layer's router bias is balanced; the trunk's stays as loaded
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
        rows = [train[s:s + ctx + 1] for s in starts]
        if sg is not None:
            assert ctx == a.ctx2, "--selfgen windows are ctx2+1 ids: use --dense_frac 0"
            pick = rng.random(B) < a.selfgen_frac
            rows = [sg[rng.integers(0, len(sg))] if p_ else r for r, p_ in zip(rows, pick)]
        x = torch.from_numpy(np.stack(rows).astype(np.int64))
        aux = {"idx_rows": a.idx_rows}
        lg, _, ml = model(x[:, :-1], dense=dense, aux=aux, frozen_trunk=a.mtp_only, mtp_depth=a.mtp_depth)
        V = lg.shape[-1]
        ce = F.cross_entropy(lg.reshape(-1, V), x[:, 1:].reshape(-1))
        mce = F.cross_entropy(ml.reshape(-1, V), x[:, 2:].reshape(-1))
        kl = torch.stack(aux["idx_kl"]).mean()
        chain = aux.get("mtp_chain", [ml])
        dkl = torch.stack([distill_kl(lg, m_, d) for d, m_ in enumerate(chain)]).mean()
        loss = (0.0 if a.mtp_only else ce) + a.mtp_weight * mce + a.idx_weight * kl + a.distill * dkl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_([p for _, p in trainable], 1.0)
        opt.step()
        # aux-loss-free load balancing (DeepSeek-V3): bias += rate * sign(mean_load - load)
        loads = aux["load"]
        if a.mtp_only:  # one count per depth of the chain, all of the MTP layer
            loads = [torch.stack(loads).sum(0)]
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
               "distill_kl": dkl.item(), "mtp_agree": (ml.argmax(-1) == lg[:, 1:].argmax(-1)).float().mean().item(),
               "gnorm": float(gn), "max_load_ratio": round(max(imb), 3), "tok_s": round(B * ctx / dt, 1)}
        if t_train - last_ev >= a.eval_every_s or t_train >= budget:
            rec.update(evaluate(model, held, a.ctx2, depth=a.mtp_depth, selfgen=sg_eval))
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
