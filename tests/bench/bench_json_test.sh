#!/usr/bin/env bash
# `strata bench --json` on the tiny fixture, as a container (experts streamed,
# then all pinned) and as a checkpoint: every documented line and field is
# there and sane. No timing thresholds: only that rates are positive and
# finite and the byte counts add up.
# Usage: bench_json_test.sh STRATA_BINARY
set -euo pipefail
strata=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rc=$?; if [ $rc -ne 0 ]; then for f in "$tmp"/*.err; do [ -f "$f" ] && { echo "== $f"; tail -n 20 "$f"; }; done; fi; rm -rf "$tmp"' EXIT
fx=$here/tests/fixtures/glm5-tiny-bf16
"$strata" convert --in "$fx" --out "$tmp/c" --experts int8 -q
common=(--prompt-tokens 8 --gen-tokens 4 --reps 2 --warmup 1 --membw-mib 64 --disk-mib 4 --threads 2 --json --no-autopin)
"$strata" bench --model "$tmp/c" --ram 0.001 "${common[@]}" >"$tmp/stream.jsonl" 2>"$tmp/stream.err"
"$strata" bench --model "$tmp/c" --pin all "${common[@]}" -q >"$tmp/pinned.jsonl" 2>"$tmp/pinned.err"
"$strata" bench --model "$fx" "${common[@]}" >"$tmp/hf.jsonl" 2>"$tmp/hf.err"
/usr/bin/python3 - "$tmp" <<'PY'
import json, math, sys
tmp = sys.argv[1]
def load(name):
    lines = [json.loads(l) for l in open(f"{tmp}/{name}.jsonl")]
    for l in lines:
        assert l["schema"] == 1, l
    return {l["bench"]: l for l in lines}
def pos(x, what):
    assert isinstance(x, (int, float)) and math.isfinite(x) and x > 0, f"{what} = {x!r}"
phases = {"total", "attention", "router", "expert_wait", "expert_matmul", "other"}
for name, container in (("stream", True), ("pinned", True), ("hf", False)):
    b = load(name)
    need = {"config", "prefill", "decode", "memory_bandwidth"} | ({"disk_read"} if container else set())
    assert need <= set(b), f"{name}: lines {sorted(b)}"
    c = b["config"]
    assert c["container"] is container and c["prompt_tokens"] == 8 and c["gen_tokens"] == 4 and c["reps"] == 2
    assert c["kernels"] and c["threads"] == 2
    pos(c["resident_bytes"], "resident_bytes")
    for ph in ("prefill", "decode"):
        pos(b[ph]["tok_s"], f"{name} {ph} tok_s")
        assert len(b[ph]["tok_s_reps"]) == 2
        ms = b[ph]["ms_per_token"]
        assert set(ms) == phases, ms
        parts = sum(ms[k] for k in phases - {"total"})
        assert abs(parts - ms["total"]) <= 1e-6 + 1e-9 * ms["total"] * 1e6, (ms, parts)
    d = b["decode"]
    assert d["weight_bytes_per_token"] == d["dense_bytes_per_token"] + d["expert_bytes_per_token"]
    pos(d["expert_bytes_per_token"], "expert bytes/token"); pos(d["weight_gb_s"], "weight_gb_s")
    pos(d["mem_bw_fraction"], "mem_bw_fraction")
    assert 0 <= d["expert_hit_rate"] <= 1
    pos(b["memory_bandwidth"]["gb_s"], "memory bandwidth")
    if container:
        pos(b["disk_read"]["gb_s"], "disk gb_s"); pos(b["disk_read"]["bytes"], "disk bytes")
        assert c["expert_pool_bytes"] > 0
stream, pinned = load("stream"), load("pinned")
# (The fixture's whole expert pool fits the one-slot-per-layer minimum, so decode may read nothing.)
assert stream["decode"]["disk_bytes_per_token"] >= 0 and stream["config"]["ram_budget_bytes"] > 0
assert pinned["decode"]["disk_bytes_per_token"] == 0 and pinned["decode"]["expert_hit_rate"] == 1
assert "kernels:" in open(f"{tmp}/stream.err").read() and "kernels:" not in open(f"{tmp}/pinned.err").read()
print("bench json: 3 runs, every field present and sane")
PY
