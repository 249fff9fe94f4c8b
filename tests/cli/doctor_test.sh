#!/usr/bin/env bash
# `strata doctor --json`: the documented schema (docs/doctor.md) with its
# keys and types, probes bounded by the flags (bytes written, seconds per
# read probe), and nothing left in --dir. The human table runs too.
# Usage: doctor_test.sh STRATA_BINARY
set -euo pipefail
strata=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/dir"
"$strata" doctor --dir "$tmp/dir" --json --probe-mib 8 --read-kib 1024 --seconds 0.05 --membw-mib 16 >"$tmp/out.json"
left=$(ls -A "$tmp/dir")
[ -z "$left" ] || { echo "doctor left files in --dir: $left"; exit 1; }
/usr/bin/python3 - "$tmp/out.json" "$tmp/dir" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
def check(obj, spec, where):
    assert set(obj) == set(spec), f"{where}: keys {sorted(obj)} != {sorted(spec)}"
    for k, t in spec.items():
        if isinstance(t, dict):
            check(obj[k], t, f"{where}.{k}")
        else:
            ok = isinstance(obj[k], t) and not (t in (int, (int, float)) and isinstance(obj[k], bool))
            assert ok, f"{where}.{k} = {obj[k]!r} is not {t}"
num = (int, float)
check(d, {"schema": int, "strata_version": str, "warnings": list,
          "cpu": {"model": str, "cores": int, "kernel_path": str, "kernel_description": str, "features": list},
          "compute": {"threads": int, "matmul_call_us": num, "matmul_madd_ns": num, "working_set_bytes": int,
                      "region_us": num, "dot_gmadd_s": num, "seconds": num},
          "checksum": {"read_bytes": int, "working_set_bytes": int, "hashes": int, "seconds": num, "gb_s": num,
                       "us_per_read": num},
          "memory": {"total_bytes": int, "available_bytes": int, "cgroup_version": str, "cgroup_limit_bytes": int,
                     "swap_total_bytes": int, "swap_free_bytes": int, "thp": str, "read_gb_s": num, "read_threads": int},
          "disk": {"dir": str, "filesystem": str, "free_bytes": int, "total_bytes": int, "o_direct": bool,
                   "o_direct_error": str, "io_uring": bool, "io_uring_error": str, "read_method": str,
                   "reads_direct": bool, "probe_file_bytes": int, "probe_write_gb_s": num, "probe_file_removed": bool,
                   "random_read": list, "error": str}}, "doctor")
assert d["schema"] == 1
assert d["cpu"]["cores"] >= 1 and d["cpu"]["kernel_path"] in ("scalar", "avx2", "avx512", "avx512-vnni", "neon", "neon-dotprod", "neon-i8mm")
assert d["memory"]["total_bytes"] > 0 and 0 < d["memory"]["read_gb_s"]
c = d["compute"]
assert c["threads"] == d["cpu"]["cores"] and c["region_us"] > 0 and c["dot_gmadd_s"] > 0, c
assert c["matmul_call_us"] >= 0 and c["matmul_madd_ns"] >= 0 and c["matmul_call_us"] + c["matmul_madd_ns"] * 16.384 > 0, c
assert c["working_set_bytes"] == 64 << 20, c
assert c["seconds"] < 5.0, c  # bounded: about 0.3 s of probing, slack for a loaded machine
k = d["checksum"]  # the store's XXH3 of one --read-kib expert, from a 64 MiB buffer
assert k["read_bytes"] == 1 << 20 and k["working_set_bytes"] == 64 << 20 and k["hashes"] >= 8, k
assert k["gb_s"] > 0 and abs(k["us_per_read"] - k["read_bytes"] / (k["gb_s"] * 1e3)) <= 1e-6 * k["us_per_read"], k
assert k["seconds"] < 5.0, k  # bounded: about 0.2 s
assert d["memory"]["cgroup_version"] in ("v1", "v2", "none") and d["memory"]["thp"]
disk = d["disk"]
assert disk["dir"] == sys.argv[2], disk["dir"]
assert disk["probe_file_removed"] is True
assert disk["error"] == "", disk["error"]
assert 0 < disk["probe_file_bytes"] <= 8 << 20, disk["probe_file_bytes"]
assert disk["read_method"] in ("io_uring", "threads")
assert [r["queue_depth"] for r in disk["random_read"]] == [1, 4, 16]
for r in disk["random_read"]:
    assert set(r) == {"queue_depth", "read_bytes", "reads", "seconds", "gb_s"}, r
    assert r["read_bytes"] == 1 << 20 and r["reads"] >= 1 and r["gb_s"] > 0
    # bounded: each probe stops issuing reads after --seconds (slack for the reads in flight on a loaded machine)
    assert r["seconds"] < 0.05 + 5.0, r
ids = {"no_o_direct", "io_uring_blocked", "swap_on", "thp", "cgroup_limit", "low_free_space", "reads_cached"}
for w in d["warnings"]:
    assert set(w) == {"id", "message", "fix"} and w["id"] in ids and w["message"] and w["fix"], w
assert ("no_o_direct" in [w["id"] for w in d["warnings"]]) == (not disk["o_direct"])
PY
"$strata" doctor --dir "$tmp/dir" --probe-mib 4 --read-kib 1024 --seconds 0.02 --membw-mib 16 >"$tmp/table.txt"
grep -q "^cpu" "$tmp/table.txt" && grep -q "random read QD16" "$tmp/table.txt" && grep -q "kernel path" "$tmp/table.txt"
grep -q "checksum per read" "$tmp/table.txt"
[ -z "$(ls -A "$tmp/dir")" ]
# A missing directory is a runtime error naming it.
if "$strata" doctor --dir "$tmp/nope" --json >/dev/null 2>"$tmp/err.txt"; then echo "doctor accepted a missing --dir"; exit 1; fi
grep -q "nope: not a directory" "$tmp/err.txt"
echo "doctor ok"
