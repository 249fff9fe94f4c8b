#!/usr/bin/env python3
"""Encode the corpus with the trained tokenizer into flat uint16 token files.

Each document is encoded as tokens(doc) + [<|endoftext|>].  Training documents are shuffled with a
fixed seed first, so any prefix of train.bin is a random sample of the corpus.

    /usr/bin/python3 tools/train/prepare_data.py --tok DIR/tokenizer.json --data tools/train/data
"""
import argparse, os, random, sys, time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bpe import Tokenizer, read_docs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok", required=True)
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-train-docs", type=int, default=0,
                    help="encode only the first N shuffled training documents (0 = all): train.bin is then a prefix "
                         "of the full file, enough for a short MTP-only phase")
    a = ap.parse_args()
    tok = Tokenizer(a.tok)
    eot = tok.special["<|endoftext|>"]
    for split in ("heldout", "train"):
        docs = list(read_docs(os.path.join(a.data, split + ".txt")))
        if split == "train":
            random.Random(a.seed).shuffle(docs)
            if a.max_train_docs:
                docs = docs[:a.max_train_docs]
        t0 = time.time()
        out = open(os.path.join(a.data, split + ".bin"), "wb")
        n_tok = n_bytes = 0
        for i, d in enumerate(docs):
            ids = tok.encode_ordinary(d) + [eot]
            out.write(np.asarray(ids, dtype=np.uint16).tobytes())
            n_tok += len(ids)
            n_bytes += len(d.encode("utf-8")) + 1
            if i % 20000 == 0:
                out.flush()
                print(f"{split}: {i}/{len(docs)} docs {n_tok} tokens ({time.time() - t0:.0f}s)", flush=True)
        out.close()
        print(f"{split}: {len(docs)} docs, {n_tok} tokens, {n_bytes} bytes, {n_bytes / n_tok:.3f} bytes/token", flush=True)


if __name__ == "__main__":
    main()
