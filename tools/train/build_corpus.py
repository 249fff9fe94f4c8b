#!/usr/bin/env python3
"""Build the strata training corpus from freely licensed English text in Debian packages.

Sources (install with apt-get; licences recorded from /usr/share/doc/<pkg>/copyright):
  dict-gcide   GCIDE 0.48 (Webster 1913 + WordNet + additions)        GPL-2+
  dict-jargon  The Jargon File 4.4.7                                   public domain
  dict-devil   Ambrose Bierce, The Devil's Dictionary                  public domain
  dict-foldoc  Free On-line Dictionary of Computing                    GFDL-1.1+
  dict-vera    V.E.R.A. (computer acronyms)                            GFDL-1.1+
  fortunes, fortunes-min  BSD fortune(6) data files (not fortunes-off) BSD-4-Clause (Regents of the Univ. of California, per the Debian copyright file)

Output (default tools/train/data/): train.txt, heldout.txt -- UTF-8, documents separated by a line
holding only <|endoftext|>.  Document = one dictionary entry or one fortune.  Held-out = documents whose
sha1(source + text) mod 100 == 0 (about 1%), deterministic.  Prints sizes and sha256.

    apt-get install dict-gcide dict-jargon dict-devil dict-foldoc dict-vera fortunes fortunes-min
    /usr/bin/python3 tools/train/build_corpus.py --out tools/train/data
"""
import argparse, gzip, hashlib, os, re, sys

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
EOT = "<|endoftext|>"


def b64num(s):
    n = 0
    for ch in s:
        n = n * 64 + B64.index(ch)
    return n


def dict_entries(name):
    data = gzip.open(f"/usr/share/dictd/{name}.dict.dz").read()
    seen = set()
    for line in open(f"/usr/share/dictd/{name}.index", encoding="utf-8", errors="replace"):
        parts = line.rstrip("\n").split("\t")
        if len(parts) < 3 or parts[0].startswith("00-database") or parts[0].startswith("00database"):
            continue
        off, ln = b64num(parts[1]), b64num(parts[2])
        if (off, ln) in seen:
            continue
        seen.add((off, ln))
        yield off, data[off:off + ln].decode("utf-8", errors="replace")


SRC_TAG = re.compile(r"^\s*\[(1913 Webster|WordNet[^\]]*|PJC|Webster 1913 Suppl\.|Century Dict\.|[A-Za-z0-9 .]*Webster[^\]]*)\]\s*$")


def unwrap(text, keep_verse=False):
    """Dedent, drop GCIDE source tags, join wrapped lines into paragraphs."""
    paras, cur = [], []
    for raw in text.split("\n"):
        if SRC_TAG.match(raw):
            continue
        s = raw.strip()
        if not s:
            if cur:
                paras.append(" ".join(cur))
                cur = []
            continue
        cur.append(s)
    if cur:
        paras.append(" ".join(cur))
    return "\n".join(p for p in paras if p)


def clean_markup(t):
    t = t.replace("{", "").replace("}", "")
    t = re.sub(r"\\([^\\\n]{1,60})\\", r"", t)       # GCIDE pronunciations \Af*fect"\
    t = re.sub(r"[ \t]+", " ", t)
    t = re.sub(r" +([,.;:])", r"\1", t)
    return t.strip()


def fortunes():
    d = "/usr/share/games/fortunes"
    for fn in sorted(os.listdir(d)):
        p = os.path.join(d, fn)
        if fn.endswith((".dat", ".u8")) or os.path.islink(p) or fn in ("art", "ascii-art"):
            continue
        txt = open(p, encoding="utf-8", errors="replace").read()
        for i, f in enumerate(re.split(r"\n%\n", txt)):
            f = "\n".join(l.rstrip() for l in f.strip("\n%").split("\n")).strip()
            if len(f) >= 20:
                yield fn, f


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    docs = []  # (source, text)
    for name in ("gcide", "jargon", "devil", "foldoc", "vera"):
        n0 = len(docs)
        for _, e in dict_entries(name):
            t = clean_markup(unwrap(e))
            if len(t) >= 20:
                docs.append((name, t))
        print(f"{name}: {len(docs) - n0} documents", file=sys.stderr)
    n0 = len(docs)
    for fn, f in fortunes():
        docs.append(("fortunes/" + fn, f))
    print(f"fortunes: {len(docs) - n0} documents", file=sys.stderr)
    tr = open(os.path.join(a.out, "train.txt"), "w", encoding="utf-8")
    ho = open(os.path.join(a.out, "heldout.txt"), "w", encoding="utf-8")
    stats = {}
    for src, t in docs:
        assert EOT not in t
        h = int(hashlib.sha1((src + "\0" + t).encode()).hexdigest(), 16) % 100
        f = ho if h == 0 else tr
        f.write(t + "\n" + EOT + "\n")
        k = src.split("/")[0]
        s = stats.setdefault(k, [0, 0])
        s[h == 0] += len(t.encode()) + 1
    tr.close(); ho.close()
    for k, (a_, b_) in stats.items():
        print(f"  {k:10s} train {a_:>10d} B  heldout {b_:>8d} B")
    for fn in ("train.txt", "heldout.txt"):
        p = os.path.join(a.out, fn)
        print(fn, os.path.getsize(p), hashlib.sha256(open(p, "rb").read()).hexdigest())


if __name__ == "__main__":
    main()
