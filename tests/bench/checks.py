"""What the bench tooling's Python tests share: the repository root on the import path (bench/compare), a
check that records and prints a failure, and the summary that ends a test with its exit status."""
import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "compare"))

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")


def finish(name):
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print(f"{name}: all checks passed")
