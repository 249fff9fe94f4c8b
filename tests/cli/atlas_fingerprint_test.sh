#!/usr/bin/env bash
# `strata atlas --model M --trace T`: a trace recorded from another model is
# refused naming both (the model's fingerprint computed from its directory,
# without loading it, against the one trace record wrote); a trace of M itself
# is accepted.
# Usage: atlas_fingerprint_test.sh STRATA_BINARY
set -euo pipefail
strata=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
a=$here/tests/fixtures/glm5-tiny-bf16
b=$here/tests/fixtures/glm52-tiny-bf16
echo "1,2,3,4,5,6,7,8,9,10,11,12" >"$tmp/ids.txt"
"$strata" trace record --model "$a" --ids-file "$tmp/ids.txt" --out "$tmp/t.jsonl" -q
"$strata" atlas --model "$a" --trace "$tmp/t.jsonl" --out "$tmp/same" >/dev/null
[ -s "$tmp/same/atlas.json" ] || { echo "no atlas.json for a trace of --model"; exit 1; }
# Given as its config.json: the same directory, the same fingerprint.
"$strata" atlas --model "$a/config.json" --trace "$tmp/t.jsonl" --out "$tmp/same2" >/dev/null
set +e
"$strata" atlas --model "$b" --trace "$tmp/t.jsonl" --out "$tmp/other" >/dev/null 2>"$tmp/err.txt"; rc=$?
set -e
[ "$rc" = 1 ] || { echo "a trace of another model: exit $rc"; cat "$tmp/err.txt"; exit 1; }
fp=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["fingerprint"])' "$tmp/t.jsonl")
for want in "--trace $tmp/t.jsonl was recorded from model" "$a" "$fp" "not from --model $b"; do
  grep -qF -- "$want" "$tmp/err.txt" || { echo "message lacks '$want':"; cat "$tmp/err.txt"; exit 1; }
done
[ ! -e "$tmp/other/atlas.json" ] || { echo "refused, but atlas.json written"; exit 1; }
echo "atlas fingerprint ok"
