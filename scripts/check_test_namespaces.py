#!/usr/bin/python3
"""Unit test files keep their names to themselves (ctest `unit_test_namespaces`).

    /usr/bin/python3 scripts/check_test_namespaces.py [--root DIR]

The unit tests are compiled as unity sources (CMake STRATA_UNITY): six files
of tests/unit to one translation unit, grouped by CMake in an order that
shifts as files are added. Two files' helpers with one name (an anonymous
namespace's `fixture()`, a `using` at namespace scope) then collide, and the
compile error lands on whoever added an unrelated file. So every namespace a
test file opens at file scope must end in the file's stem:
`namespace strata::<stem> {` (or `strata::server::<stem>`). Fails naming the
file and line of any other.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile

OPEN = re.compile(r"^namespace\s+([\w:]*)\s*\{")
CLOSE = re.compile(r"^\}\s*//\s*namespace\s+strata::")  # the file namespace's closing comment


def problems_in(path: str) -> list[str]:
    stem = os.path.splitext(os.path.basename(path))[0]
    out, opened, inside = [], 0, False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if CLOSE.match(line):
                inside = False
                continue
            m = OPEN.match(line)
            if not m:
                continue
            name = m.group(1)
            if not name and inside:
                continue  # an anonymous namespace inside the file's own
            opened += 1
            inside = True
            if not name.startswith("strata::") or name.split("::")[-1] != stem:
                out.append(f"{path}:{n}: file-scope `namespace {name or '(anonymous)'}`: "
                           f"open `namespace strata::{stem} {{` instead (unity build: names must not collide)")
    if opened == 0:
        out.append(f"{path}: no `namespace strata::{stem} {{` at file scope")
    return out


def self_test() -> None:
    """The check catches what it is for: a bare `namespace strata`, no file
    namespace at all, another file's stem; and passes the convention."""
    cases = {
        "good_test.cpp": ("namespace strata::good_test {\nnamespace {\n}  // namespace\n}  // namespace strata::good_test\n", 0),
        "server_good_test.cpp": ("namespace strata::server::server_good_test {\nnamespace {\n}\n}\n", 0),
        "bare_test.cpp": ("namespace strata {\nnamespace {\n}  // namespace\n}  // namespace strata\n", 1),
        "none_test.cpp": ("int x;\n", 1),
        "other_test.cpp": ("namespace strata::good_test {\n}\n", 1),
        "after_test.cpp": ("namespace strata::after_test {\n}  // namespace strata::after_test\nnamespace {\n}\n", 1),
    }
    with tempfile.TemporaryDirectory() as d:
        for name, (text, want) in cases.items():
            path = os.path.join(d, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            got = len(problems_in(path))
            if got != want:
                raise SystemExit(f"self-test: {name}: {got} problem(s), expected {want}")
    print(f"self-test: {len(cases)} cases as expected")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = ap.parse_args()
    self_test()
    d = os.path.join(args.root, "tests", "unit")
    files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".cpp"))
    problems = [p for f in files for p in problems_in(f)]
    for p in problems:
        print(p)
    print(f"unit test namespaces: {len(files)} files, {len(problems)} problem(s)")
    return 1 if problems or not files else 0


if __name__ == "__main__":
    sys.exit(main())
