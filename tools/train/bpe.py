#!/usr/bin/env python3
"""Byte-level BPE tokenizer: trainer, Hugging Face tokenizer.json writer, and a reference encoder.

The encoder implements exactly what a standard tokenizer.json consumer (HF tokenizers,
transformers.js) does with the file written here:
  1. split the input on the added (special) tokens (exact string match, leftmost-longest);
  2. no normalizer; pre-tokenizer = Sequence[Split(PAT, Isolated), ByteLevel(use_regex=false)];
     the GPT-2 bytes_to_unicode table maps each UTF-8 byte to one printable char;
  3. BPE on every pre-token: repeatedly merge the adjacent pair with the lowest merge rank.
decode = concatenate token strings, map chars back to bytes (ByteLevel decoder), UTF-8 decode
(invalid sequences -> U+FFFD); special tokens decode to their content.

    /usr/bin/python3 tools/train/bpe.py train --text tools/train/data/train.txt --vocab 8192 --out DIR
    /usr/bin/python3 tools/train/bpe.py encode --tok DIR/tokenizer.json "Hello world"
"""
import argparse, collections, heapq, json, os, sys, time

import regex

# GLM-4 / Qwen2-style pre-tokenizer regex (as in the GLM-4.x tokenizer.json Split pre-tokenizer)
PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
       r"|\s*[\r\n]+|\s+(?!\S)|\s+")

SPECIAL_TOKENS = [
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
    "<|assistant|>", "<|observation|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<tool_response>", "</tool_response>",
]


def bytes_to_unicode():
    """The GPT-2 byte -> unicode char table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


B2U = bytes_to_unicode()
U2B = {v: k for k, v in B2U.items()}
_pat = regex.compile(PAT)


def pretokenize(text):
    return _pat.findall(text)


# ----------------------------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------------------------

def train(texts, n_bpe, log=sys.stderr):
    """texts: iterable of strings (documents, special tokens already removed).
    Returns (vocab list of token strings, merges list of (a, b) strings).  Base vocab = 256 byte
    chars in byte order (id i = byte i); then one token per merge, in merge order."""
    t0 = time.time()
    wc = collections.Counter()
    for t in texts:
        wc.update(pretokenize(t))
    print(f"bpe: {len(wc)} distinct pre-tokens ({time.time() - t0:.0f}s)", file=log)
    vocab = [B2U[b] for b in range(256)]
    words = []   # list of symbol-id lists
    freqs = []
    for w, f in wc.items():
        words.append([b for b in w.encode("utf-8")])
        freqs.append(f)
    pair_cnt = collections.Counter()
    where = collections.defaultdict(set)
    for wi, (w, f) in enumerate(zip(words, freqs)):
        for a, b in zip(w, w[1:]):
            pair_cnt[(a, b)] += f
            where[(a, b)].add(wi)
    # heap key: (-count, token string a, token string b) -> deterministic tie-break
    heap = [(-c, vocab[p[0]], vocab[p[1]], p) for p, c in pair_cnt.items()]
    heapq.heapify(heap)
    merges = []
    while len(vocab) < n_bpe and heap:
        negc, _, _, p = heapq.heappop(heap)
        if pair_cnt.get(p, 0) != -negc or negc == 0:
            continue
        a, b = p
        new_id = len(vocab)
        vocab.append(vocab[a] + vocab[b])
        merges.append((vocab[a], vocab[b]))
        changed = set()
        for wi in list(where[p]):
            w, f = words[wi], freqs[wi]
            if len(w) < 2:
                continue
            for x, y in zip(w, w[1:]):
                pair_cnt[(x, y)] -= f
                changed.add((x, y))
            nw, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    nw.append(new_id)
                    i += 2
                else:
                    nw.append(w[i])
                    i += 1
            words[wi] = nw
            for x, y in zip(nw, nw[1:]):
                pair_cnt[(x, y)] += f
                where[(x, y)].add(wi)
                changed.add((x, y))
        del pair_cnt[p]
        where.pop(p, None)
        for q in changed:
            c = pair_cnt.get(q, 0)
            if c > 0:
                heapq.heappush(heap, (-c, vocab[q[0]], vocab[q[1]], q))
            elif q in pair_cnt:
                del pair_cnt[q]
        if len(merges) % 1000 == 0:
            print(f"bpe: {len(merges)} merges ({time.time() - t0:.0f}s) last {merges[-1]} n={-negc}", file=log)
    return vocab, merges


# ----------------------------------------------------------------------------------------------
# tokenizer.json
# ----------------------------------------------------------------------------------------------

def tokenizer_json(vocab, merges, specials=SPECIAL_TOKENS):
    n = len(vocab)
    added = [{"id": n + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(specials)]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PAT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        ]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(vocab)},
                  "merges": [a + " " + b for a, b in merges]},
    }


class Tokenizer:
    def __init__(self, path):
        j = json.load(open(path, encoding="utf-8"))
        m = j["model"]
        assert m["type"] == "BPE"
        self.vocab = dict(m["vocab"])
        merges = [tuple(x.split(" ")) if isinstance(x, str) else tuple(x) for x in m["merges"]]
        self.ranks = {p: i for i, p in enumerate(merges)}
        self.special = {t["content"]: t["id"] for t in j["added_tokens"]}
        self.id_to_tok = {i: t for t, i in self.vocab.items()}
        self.id_to_tok.update({i: t for t, i in self.special.items()})
        self.cache = {}
        specs = sorted(self.special, key=len, reverse=True)
        self._spec_re = regex.compile("(" + "|".join(regex.escape(s) for s in specs) + ")") if specs else None

    def _bpe(self, word):
        syms = list(word)
        ranks = self.ranks
        while len(syms) > 1:
            best, bi = None, -1
            for i in range(len(syms) - 1):
                r = ranks.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            a, b = syms[bi], syms[bi + 1]
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            syms = out
        return [self.vocab[s] for s in syms]

    def encode_ordinary(self, text):
        ids = []
        cache = self.cache
        for pt in pretokenize(text):
            r = cache.get(pt)
            if r is None:
                r = self._bpe("".join(B2U[b] for b in pt.encode("utf-8")))
                if len(cache) < 1_000_000:
                    cache[pt] = r
            ids.extend(r)
        return ids

    def encode(self, text):
        """Special tokens in the text are recognised (as HF tokenizers does for added tokens)."""
        if self._spec_re is None:
            return self.encode_ordinary(text)
        ids = []
        for k, part in enumerate(self._spec_re.split(text)):
            if k % 2 == 1:
                ids.append(self.special[part])
            elif part:
                ids.extend(self.encode_ordinary(part))
        return ids

    def decode(self, ids):
        out, buf = [], bytearray()
        for i in ids:
            t = self.id_to_tok[int(i)]
            if t in self.special:
                out.append(buf.decode("utf-8", errors="replace")); buf = bytearray()
                out.append(t)
            else:
                buf.extend(U2B[c] for c in t)
        out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)


def read_docs(path, eot="<|endoftext|>"):
    doc = []
    for line in open(path, encoding="utf-8"):
        if line.rstrip("\n") == eot:
            yield "".join(doc).rstrip("\n")
            doc = []
        else:
            doc.append(line)
    if doc:
        yield "".join(doc).rstrip("\n")


def main():
    ap = argparse.ArgumentParser()
    sp = ap.add_subparsers(dest="cmd", required=True)
    t = sp.add_parser("train")
    t.add_argument("--text", required=True)
    t.add_argument("--vocab", type=int, default=8192, help="total vocab incl. the special tokens")
    t.add_argument("--out", required=True)
    e = sp.add_parser("encode")
    e.add_argument("--tok", required=True)
    e.add_argument("text")
    a = ap.parse_args()
    if a.cmd == "train":
        vocab, merges = train(read_docs(a.text), a.vocab - len(SPECIAL_TOKENS))
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tokenizer_json(vocab, merges), f, ensure_ascii=False, indent=1)
        print(f"wrote {a.out}/tokenizer.json: {len(vocab)} BPE tokens + {len(SPECIAL_TOKENS)} special")
    else:
        tok = Tokenizer(a.tok)
        ids = tok.encode(a.text)
        print(ids)
        print(repr(tok.decode(ids)))


if __name__ == "__main__":
    main()
