#!/usr/bin/env python3
"""Writes tests/chat/byte-tokenizer.json: a byte-level BPE tokenizer with just the 256 byte
tokens (id b = byte b, spelled in the GPT-2 byte-level alphabet) and no merges or special
tokens. It fits the vocabulary of 256 of the tests/fixtures checkpoints, so `strata run --raw`
and `strata chat --chat-template raw` can run on them. Regenerate: python3 tests/chat/make_byte_tokenizer.py
"""
import json
import os


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def main():
    b2u = bytes_to_unicode()
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {b2u[b]: b for b in range(256)}, "merges": []},
    }
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "byte-tokenizer.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
