#!/usr/bin/env bash
# Experts over MPI on one machine (docs/distributed.md "Measured"): the trained
# model as an int8 container; per-rank --ram so that one rank cannot hold the
# expert pool but three can. Alternates, ROUNDS times: one process streaming
# with one rank's budget, one process holding every expert (three budgets),
# mpirun --oversubscribe -np 3 with one budget per rank. Prints prefill/decode
# tok/s, bytes exchanged per token, rank 0's wait and each rank's compute/idle.
# Usage: bench/mpi_experts.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
S=${1:-$here/build}/strata
rounds=${2:-3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
C=$tmp/c
"$S" convert --in "$here/models/glm5-strata-tiny" --out "$C" --experts int8 >/dev/null 2>&1
A=(bench --model "$C" --prompt-tokens 32 --gen-tokens 64 --threads 1 --no-autopin --json --stats)
get() { python3 - "$1" <<'PY'
import json, sys
r = {}
for l in open(sys.argv[1]):
    if l.startswith('{"bench"'):
        j = json.loads(l)
        r[j["bench"]] = j.get("tok_s")
print(f"prefill {r.get('prefill', 0):.0f} tok/s, decode {r.get('decode', 0):.0f} tok/s")
PY
}
for i in $(seq 1 "$rounds"); do
  echo "== round $i, $(uptime | sed 's/.*load/load/')"
  "$S" "${A[@]}" --ram 0.0033 >"$tmp/s1.out" 2>"$tmp/s1.err"
  echo "one process, --ram 3.3 MB (streams): $(get "$tmp/s1.out") | $(grep 'experts hit' "$tmp/s1.err")"
  "$S" "${A[@]}" --ram 0.0099 --pin all >"$tmp/s2.out" 2>"$tmp/s2.err"
  echo "one process, --ram 9.9 MB (holds all): $(get "$tmp/s2.out")"
  mpirun --oversubscribe -np 3 "$S" "${A[@]}" --ram 0.0033 --pin all --experts-over mpi >"$tmp/s3.out" 2>"$tmp/s3.err"
  echo "mpirun -np 3, --ram 3.3 MB each: $(get "$tmp/s3.out") | $(grep 'experts over MPI: exchanged' "$tmp/s3.err")"
  grep "^strata: rank [12]:" "$tmp/s3.err" || true
done
