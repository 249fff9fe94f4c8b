#!/usr/bin/env python3
"""Cross-check bpe.Tokenizer against a standard tokenizer.json consumer (tokenizers.js, the tokenizer
library of transformers.js).  Writes the cases with our ids, then runs tokenizer_crosscheck.mjs.

    mkdir -p /tmp/tokjs && (cd /tmp/tokjs && npm install @huggingface/tokenizers@0.2.0)
    /usr/bin/python3 tools/train/tokenizer_crosscheck.py --model models/glm5-strata-tiny --node-modules /tmp/tokjs/node_modules
"""
import argparse, json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bpe import Tokenizer, read_docs  # noqa: E402

TRICKY = [
    "Hello world", "  leading spaces", "trailing spaces   ", "tabs\tand\n\nnewlines\r\n", "DON'T you're I'LL we've",
    "numbers 1234567 3.14159 1,000,000", "emoji 😀👍🏽 and CJK 漢字かな한국어", "café naïve Ωmega ß", "a\u00a0b\u2003c",
    "<|user|>hi<|assistant|><think>x</think>y<|endoftext|>", "[gMASK]<sop><|system|>sys", "<|user|", "x<tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>",
    "", " ", "\n", "    \n   \n", "!!!???...", "foo.bar_baz-qux/quux", "A" * 300, "ab" * 100 + " " + "xyz" * 50,
    "Zero-width\u200bjoiner\u200d", "\x00\x01\x1f control", "mixed CASE Words AND 's 'S",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--node-modules", default="/tmp/tokjs/node_modules")
    ap.add_argument("--heldout", default=os.path.join(HERE, "data", "heldout.txt"))
    a = ap.parse_args()
    tok = Tokenizer(os.path.join(a.model, "tokenizer.json"))
    texts = TRICKY + list(read_docs(a.heldout))
    cases = [{"text": t, "ids": tok.encode(t)} for t in texts]
    for c in cases:
        assert tok.decode(c["ids"]) == c["text"], repr(c["text"])
    path = "/tmp/tok_cases.json"
    json.dump(cases, open(path, "w", encoding="utf-8"), ensure_ascii=False)
    env = dict(os.environ, NODE_PATH=a.node_modules)
    r = subprocess.run(["node", os.path.join(HERE, "tokenizer_crosscheck.mjs"), a.model, path, a.node_modules],
                       env=env, capture_output=True, text=True)
    print(r.stdout, r.stderr)
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()
