"""The pure parts of bench/compare/run.py --disk-class (bench/compare/disk_class.py): argument parsing, the
bound arithmetic, the probe's output parsing, the cgroup wrapper and the refusals (not root, no blkio).
Needs no root, no data and no engine (ctest bench_disk_class)."""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import ROOT, check, finish  # noqa: E402
import disk_class as DC  # noqa: E402


def refuses(fn, needle):
    try:
        fn()
    except DC.DiskClassError as e:
        check(needle in str(e), f"error {str(e)!r} should mention {needle!r}")
        return
    check(False, f"expected a refusal mentioning {needle!r}")


# Where a class runs: the disk up to --ram-disk-above; above it, the disk only when its unthrottled probe
# read at least DISK_MARGIN x the class (and --no-prefer-disk was not given), else the RAM-backed device.
check(DC.choose_device(1.5, 2.0, 0.5)[0] == "disk", "a slow class runs on the disk whatever it read")
check(DC.choose_device(2.0, 2.0, None)[0] == "disk", "a class at --ram-disk-above runs on the disk")
check(DC.choose_device(3.5, 2.0, 4.8)[0] == "disk", "3.5 GB/s on a disk reading 4.8 unthrottled")
check(DC.choose_device(3.5, 2.0, 4.1)[0] == "ram", "3.5 GB/s on a disk reading 4.1 (< 1.2 x 3.5)")
check(DC.choose_device(3.5, 2.0, 1.2 * 3.5)[0] == "disk", "exactly the margin is enough")
check(DC.choose_device(7, 2.0, 4.8)[0] == "ram", "7 GB/s on a disk reading 4.8")
check(DC.choose_device(7, 2.0, None)[0] == "ram", "not probed: the RAM-backed device")
check(DC.choose_device(3.5, 2.0, 9.0, prefer_disk=False)[0] == "ram", "--no-prefer-disk")
why = DC.choose_device(7, 2.0, 4.8)[1]
check("4.80" in why and "1.2" in why, f"the reason names the probe and the margin: {why!r}")

# Parsing.
check(DC.parse_classes("1.5,3.5,7") == [1.5, 3.5, 7.0], "parse 1.5,3.5,7")
check(DC.parse_classes(" 7 ") == [7.0], "parse one class with spaces")
refuses(lambda: DC.parse_classes("1.5,,7"), "empty entry")
refuses(lambda: DC.parse_classes("fast"), "'fast' is not a number")
refuses(lambda: DC.parse_classes("0"), "outside")
refuses(lambda: DC.parse_classes("-2"), "outside")
refuses(lambda: DC.parse_classes("7,7"), "given twice")

# The bound of issue 12: 1 / max(bytes per token / throughput, 1 / resident tok/s).
# The issue's own example: 0.566 GB/token at 1.5 GB/s bounds decode at 2.65 tok/s; 2.60 tok/s is 98% of it.
b = DC.bound(0.566e9, 1.5e9, 20.0)
check(abs(b["bound_tok_s"] - 1.5 / 0.566) < 1e-9, f"disk-bound bound {b['bound_tok_s']}")
check(b["limited_by"] == "disk", "limited by the disk")
check(abs(b["target_tok_s"] - 0.9 * 1.5 / 0.566) < 1e-9, "target is 90% of the bound")
check(round(100 * DC.fraction_of_bound(2.60, b)) == 98, f"fraction {DC.fraction_of_bound(2.60, b)}")
# Compute-bound: 0.566 GB/token at 7 GB/s is 81 ms, a resident 5 tok/s is 200 ms.
b = DC.bound(0.566e9, 7e9, 5.0)
check(abs(b["bound_tok_s"] - 5.0) < 1e-9 and b["limited_by"] == "compute", f"compute-bound {b}")
check(abs(b["disk_s_per_token"] - 0.566 / 7) < 1e-12, "disk seconds per token")
try:
    DC.bound(1e9, 0, 5)
    check(False, "bound with zero throughput should raise")
except ValueError:
    pass

# The probe's output (bench/io/read_engine_bench.cpp).
out = """file /x/slice-q8_0.gguf, O_DIRECT, experts 22.5 MiB in 1.00 MiB chunks, 128 experts per run
round 1  uring  depth 16    6.912 GB/s  (3020 MB in 0.437 s)
round 2  uring  depth 16    7.104 GB/s  (3020 MB in 0.425 s)
round 3  uring  depth 16    6.998 GB/s  (3020 MB in 0.431 s)
page cache dropped before each run: yes
median GB/s:  uring:16 6.998
"""
g, rounds = DC.parse_probe(out)
check(g == 6.998 and rounds == [6.912, 7.104, 6.998], f"parse_probe {g} {rounds}")
try:
    DC.parse_probe("nothing")
    check(False, "parse_probe of garbage should raise")
except RuntimeError:
    pass
with tempfile.TemporaryDirectory() as t:
    f = os.path.join(t, "f.bin")
    with open(f, "wb") as fh:
        fh.truncate(100 << 20)
    argv = DC.probe_argv("io", f, 20 << 20, 16, 1 << 20, target_bytes=3e9)
    check(argv[argv.index("--experts") + 1] == "5", f"probe experts capped by the file: {argv}")
    argv = DC.probe_argv("io", f, 4 << 20, 8, 1 << 20, target_bytes=10 << 20)
    check(argv[argv.index("--experts") + 1] == "3" and argv[-1] == "uring:8", f"probe experts for the target: {argv}")

# The cgroup wrapper moves the shell into each cgroup, then execs the command with its arguments intact.
with tempfile.TemporaryDirectory() as t:
    p1, p2 = os.path.join(t, "a.procs"), os.path.join(t, "b.procs")
    r = subprocess.run(DC.enter_cgroups_argv([p1, p2], ["sh", "-c", 'echo "$1|$2"', "x", "a b", "c"]),
                       capture_output=True, text=True)
    check(r.stdout == "a b|c\n", f"wrapped command output {r.stdout!r}")
    pids = [open(p).read().strip() for p in (p1, p2)]
    check(pids[0] == pids[1] and pids[0].isdigit(), f"both cgroups got the shell's pid {pids}")

# Refusals.
refuses(lambda: DC.check_privileges(euid=1000), "needs root")
with tempfile.TemporaryDirectory() as t:
    refuses(lambda: DC.check_privileges(euid=0, blkio=t), "blkio.throttle.read_bps_device does not exist")

# The script itself refuses a bad class and, run as an unprivileged user, refuses before touching anything.
run = ["/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable, os.path.join(ROOT, "bench", "compare", "run.py"), "--data", "/nonexistent"]
r = subprocess.run(run + ["--disk-class", "1.5,fast"], capture_output=True, text=True)
check(r.returncode != 0 and "'fast' is not a number" in r.stderr, f"bad class: rc {r.returncode} {r.stderr[-300:]}")
if os.geteuid() != 0:
    r = subprocess.run(run + ["--disk-class", "7"], capture_output=True, text=True)
    check(r.returncode != 0 and "needs root" in r.stderr, f"not root: rc {r.returncode} {r.stderr[-300:]}")
elif shutil.which("setpriv"):
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + run + ["--disk-class", "7"],
                       capture_output=True, text=True)
    check(r.returncode != 0 and "needs root" in r.stderr, f"as nobody: rc {r.returncode} {r.stderr[-300:]}")
else:
    print("note: root and no setpriv: the script-level not-root refusal is checked only through check_privileges")

finish("disk_class")
