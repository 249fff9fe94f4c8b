#!/usr/bin/env bash
# Peak RSS under a RAM budget: a model whose routed-expert pool is more than
# 4x the budget runs with --ram, and the process's peak RSS must stay within
# the resident (dense) part + the budget + a fixed allowance for the program
# itself and its scratch. Loading the whole pool would exceed it by >100 MB.
# Usage: rss_test.sh STRATA_BINARY
set -euo pipefail
strata=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

/usr/bin/python3 "$here/tools/make_model.py" --preset rss --out "$tmp/hf" >/dev/null
"$strata" convert --in "$tmp/hf" --out "$tmp/c" --experts int8 >/dev/null 2>&1
ids=$(/usr/bin/python3 -c "print(','.join(str((i*37)%1000+3) for i in range(96)))")
budget_gb=0.04
"$strata" score --model "$tmp/c" --ids "$ids" --ram $budget_gb --no-autopin --stats-json --json \
  >"$tmp/out.json" 2>"$tmp/stats.txt"
"$strata" score --model "$tmp/c" --ids "$ids" --ram 10 --pin all --no-autopin --json >"$tmp/out_all.json" 2>/dev/null
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
stats = json.loads([l for l in open(f"{tmp}/stats.txt") if l.startswith("{")][-1])
allowance = 24e6
budget, resident, peak = stats["ram_budget_bytes"], stats["resident_bytes"], stats["peak_rss_bytes"]
import os
pool = sum(os.path.getsize(os.path.join(f"{tmp}/c", f)) for f in os.listdir(f"{tmp}/c") if f.startswith("experts-"))
limit = resident + budget + allowance
print(f"expert pool {pool/1e6:.1f} MB = {pool/budget:.1f}x the {budget/1e6:.1f} MB budget; resident {resident/1e6:.1f} MB; "
      f"peak RSS {peak/1e6:.1f} MB, limit {limit/1e6:.1f} MB; read {stats['bytes_read']/1e6:.1f} MB from disk")
assert pool >= 4 * budget, "the test model's expert pool must be >= 4x the budget"
assert peak <= limit, "peak RSS exceeds resident + budget + allowance"
assert stats["bytes_read"] > 0
same = open(f"{tmp}/out.json").read() == open(f"{tmp}/out_all.json").read()
assert same, "budgeted and all-pinned runs must print identical results"
print("1 passed, 0 failed")
PY
