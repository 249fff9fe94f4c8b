#!/usr/bin/env python3
"""Check that model.py (eval forward, DSA on) reproduces the oracle tests/reference/glm_moe_dsa_ref.py.
Random weights, small dims; also bias-perturbed routers.  Prints max |diff| of logits / MTP logits."""
import os, sys
import torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import GlmMoeDsaForCausalLM, make_config
from glm_moe_dsa_ref import GlmMoeDsaRef

torch.manual_seed(0)
torch.set_num_threads(2)
cfg = make_config(512, [509, 510, 511], 509, hidden_size=64, num_hidden_layers=3, n_routed_experts=8,
                  num_experts_per_tok=2, moe_intermediate_size=32, intermediate_size=96, q_lora_rank=32,
                  kv_lora_rank=16, num_attention_heads=4, num_key_value_heads=4, index_topk=8)
m = GlmMoeDsaForCausalLM(cfg)
m.init_weights(std=0.2)
with torch.no_grad():
    for mo in m.moe_layers():
        mo.gate.e_score_correction_bias.normal_(0, 0.1)
m.eval()
ids = torch.randint(0, 509, (2, 40))
with torch.no_grad():
    lg, hn, ml = m(ids, dense=False)
    lgd, _, _ = m(ids, dense=True)
ref = GlmMoeDsaRef(cfg, {k: v.detach().clone() for k, v in m.state_dict().items()})
worst = 0.0
for b in range(2):
    o = ref.forward(ids[b].tolist(), dense=False)
    od = ref.forward(ids[b].tolist(), dense=True)
    d = max((o["logits"] - lg[b]).abs().max().item(), (o["mtp_logits"] - ml[b]).abs().max().item(),
            (od["logits"] - lgd[b]).abs().max().item())
    print(f"seq {b}: max|diff| {d:.2e}  (logit scale {o['logits'].abs().max().item():.2f}) "
          f"dense-vs-sparse top1 differ at {(o['logits'].argmax(-1) != od['logits'].argmax(-1)).sum().item()} positions")
    worst = max(worst, d)
assert worst < 1e-4, worst
print("OK")
