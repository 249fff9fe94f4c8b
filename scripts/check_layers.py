#!/usr/bin/python3
"""The layering check (ctest `layering`, docs/architecture.md "Layers").

    /usr/bin/python3 scripts/check_layers.py [--root DIR] [--summary]

Every folder under src/ is a layer with a rank; a file may include headers
of its own folder and of folders with a LOWER rank only. Folders of equal
rank are independent (neither includes the other). Fails, naming the file,
line and include, on any include that points up or sideways, on an include
of an unknown folder, on a src/ folder this table does not know, and on any
cycle between folders. bench/ programs may include only the layers they
measure (their own rank is given below). --summary prints the folder graph.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

# rank: a folder may include folders of lower rank.
LAYERS = {
    "core": 0,     # errors, JSON, io, clock, numerics, quantization, thread pool, config, weights
    "kernels": 1,  # CPU features, matmul and the per-ISA kernels, small ops
    "text": 1,     # tokenizer, chat template, sampler, constraints (a leaf beside kernels)
    "format": 2,   # safetensors, containers (convert, verify), GGUF
    "experts": 3,  # the expert store interface and its implementations
    "model": 4,    # model weights and loading, sessions, the forward pass
    "runtime": 5,  # the engine, generation, scoring, statistics
    "dist": 5,     # experts over MPI: placement, start-up checks, the MPI transport (beside runtime)
    "server": 6,   # the HTTP server and its scheduler
    "cli": 7,      # the front ends
}
# Other trees whose includes are checked: (path, the rank they sit at).
OTHER = {"bench/kernels": 2, "bench/constraints": 2}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def scan(root: str, rel_dir: str, rank: int, own: str | None, problems: list, edges: set):
    base = os.path.join(root, rel_dir)
    for dirpath, _, files in os.walk(base):
        for fn in sorted(files):
            if not fn.endswith((".h", ".cpp", ".inc", ".in")):
                continue
            path = os.path.join(dirpath, fn)
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8", errors="replace") as f:
                for no, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    folder = inc.split("/")[0] if "/" in inc else None
                    if folder is None:
                        continue  # a file of its own folder (or, for bench/, a test helper header)
                    if folder not in LAYERS:
                        problems.append(f"{rel}:{no}: #include \"{inc}\": unknown layer folder '{folder}'")
                        continue
                    if folder == own:
                        continue
                    edges.add((own or rel_dir, folder))
                    r = LAYERS[folder]
                    if r > rank:
                        problems.append(f"{rel}:{no}: #include \"{inc}\" points UP ({own or rel_dir} rank {rank} -> {folder} rank {r})")
                    elif r == rank:
                        problems.append(f"{rel}:{no}: #include \"{inc}\" points SIDEWAYS ({own or rel_dir} and {folder} share rank {r})")


def cycles(edges: set) -> list:
    graph: dict = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    found, state = [], {}

    def visit(n, stack):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                found.append(stack[stack.index(m):] + [m])
            elif not state.get(m):
                visit(m, stack)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if not state.get(n):
            visit(n, [])
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--summary", action="store_true")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    problems: list = []
    edges: set = set()
    src = os.path.join(root, "src")
    for d in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, d)):
            continue
        if d not in LAYERS:
            problems.append(f"src/{d}: a folder with no rank in scripts/check_layers.py LAYERS")
            continue
        scan(root, os.path.join("src", d), LAYERS[d], d, problems, edges)
    for d, rank in OTHER.items():
        if os.path.isdir(os.path.join(root, d)):
            scan(root, d, rank, None, problems, edges)
    for c in cycles(edges):
        problems.append("folder cycle: " + " -> ".join(c))
    if args.summary:
        for a, b in sorted(edges):
            print(f"  {a} -> {b}")
    if problems:
        print(f"layering: {len(problems)} problem(s)")
        for p in problems:
            print("  " + p)
        sys.exit(1)
    print(f"layering: OK ({len(edges)} folder edges, all pointing down; no cycles)")


if __name__ == "__main__":
    main()
