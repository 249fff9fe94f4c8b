#!/usr/bin/env python3
"""Export a training checkpoint (OUT/ckpt.pt) as a Hugging Face style glm_moe_dsa model directory.

Writes config.json, model.safetensors (bf16, RNE; router e_score_correction_bias in F32; MTP layer as
model.layers.{num_hidden_layers}.* without embed/head copies; routed experts unfused per expert),
tokenizer.json, tokenizer_config.json (GLM special tokens + GLM-4.7/GLM-5-style chat_template),
generation_config.json.  Then reloads the directory with the oracle (strict tensor inventory).

    /usr/bin/python3 tools/train/export.py --ckpt tools/train/runs/glm5-strata-tiny/ckpt.pt \
        --tok tools/train/runs/tok4k/tokenizer.json --out models/glm5-strata-tiny
"""
import argparse, json, os, shutil, sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import model as _model  # noqa: E402,F401  (puts tests/reference on sys.path)
from glm_moe_dsa_ref import (expected_tensor_names, f32_to_bf16_bits, load_checkpoint, load_raw_tensors,  # noqa: E402
                             write_safetensors)

CHAT_TEMPLATE = open(os.path.join(HERE, "chat_template.jinja"), encoding="utf-8").read()


def tokenizer_config(tok_json):
    added = {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
             for t in tok_json["added_tokens"]}
    return {
        "added_tokens_decoder": added,
        "additional_special_tokens": [t["content"] for t in tok_json["added_tokens"] if t["content"] != "<|endoftext|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "do_lower_case": False,
        "eos_token": "<|endoftext|>",
        "extra_special_tokens": {},
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 4096,
        "pad_token": "<|endoftext|>",
        "padding_side": "left",
        "remove_space": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def check_same_trunk(tensors, ref_dir, mtp_prefix):
    """Every tensor outside the MTP layer byte-equal (dtype, shape, bits) to ref_dir's; exits naming the first
    that is not.  Prints how many MTP tensors changed."""
    ref = load_raw_tensors(ref_dir)
    if set(ref) != set(tensors):
        sys.exit(f"--same-trunk-as {ref_dir}: tensor names differ: {sorted(set(ref) ^ set(tensors))[:5]}")
    changed = 0
    for k, (dt, arr) in sorted(tensors.items()):
        rdt, rarr = ref[k]
        same = dt == rdt and arr.shape == rarr.shape and arr.tobytes() == rarr.tobytes()
        if k.startswith(mtp_prefix):
            changed += not same
        elif not same:
            sys.exit(f"--same-trunk-as {ref_dir}: {k} differs ({dt} {arr.shape} vs {rdt} {rarr.shape}); "
                     f"only {mtp_prefix}* may change")
    n_trunk = sum(not k.startswith(mtp_prefix) for k in tensors)
    print(f"trunk byte-identical to {ref_dir}: {n_trunk} tensors; MTP tensors changed: "
          f"{changed} of {len(tensors) - n_trunk}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--tok", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--same-trunk-as", default=None,
                    help="model directory whose tensors must be byte-identical to the export's, except the MTP "
                         "layer's (model.layers.{num_hidden_layers}.*): checks an MTP-only training run")
    a = ap.parse_args()
    st = torch.load(a.ckpt, map_location="cpu")
    cfg = st["config"]
    sd = st["model"]
    os.makedirs(a.out, exist_ok=True)
    tensors = {}
    for k, v in sd.items():
        v = v.detach().to(torch.float32).contiguous().numpy()
        if k.endswith("e_score_correction_bias"):
            tensors[k] = ("F32", v.astype(np.float32))
        else:
            tensors[k] = ("BF16", f32_to_bf16_bits(v))
    exp = set(expected_tensor_names(cfg))
    assert set(tensors) == exp, (sorted(set(tensors) - exp)[:5], sorted(exp - set(tensors))[:5])
    if a.same_trunk_as:
        check_same_trunk(tensors, a.same_trunk_as, f"model.layers.{cfg['num_hidden_layers']}.")
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensors, metadata={"format": "pt"})
    json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    gen = {"_from_model_config": True, "do_sample": True, "eos_token_id": cfg["eos_token_id"],
           "pad_token_id": cfg["pad_token_id"], "temperature": 1.0, "top_p": 0.95,
           "transformers_version": cfg["transformers_version"]}
    json.dump(gen, open(os.path.join(a.out, "generation_config.json"), "w"), indent=2)
    shutil.copyfile(a.tok, os.path.join(a.out, "tokenizer.json"))
    tj = json.load(open(a.tok, encoding="utf-8"))
    json.dump(tokenizer_config(tj), open(os.path.join(a.out, "tokenizer_config.json"), "w", encoding="utf-8"),
              indent=2, ensure_ascii=False)
    m = load_checkpoint(a.out)  # strict inventory check
    n = sum(int(np.prod(v[1].shape)) for v in tensors.values())
    print(f"wrote {a.out}: {len(tensors)} tensors, {n} parameters, step {st['step']}, tokens {st['tokens']}")
    for f in sorted(os.listdir(a.out)):
        print(f"  {f:28s} {os.path.getsize(os.path.join(a.out, f)):>10d}")


if __name__ == "__main__":
    main()
