#!/usr/bin/env bash
# --model accepts a model's config.json (or a container's manifest.json) as its
# directory, with the same output; another file is a usage error (2).
# `convert --in` a container says it is already converted (exit 1).
set -uo pipefail
S=$(realpath "$1")
FX=$(cd "$(dirname "$0")/../fixtures" && pwd)/glm5-tiny-bf16
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
G=(--ids 1,2,3,4 -n 6 --ignore-eos --json -q --threads 2)

"$S" generate --model "$FX" "${G[@]}" >"$tmp/dir.json" || fail "generate --model DIR: exit status $?"
"$S" generate --model "$FX/config.json" "${G[@]}" >"$tmp/cfg.json" 2>"$tmp/err" || fail "--model DIR/config.json: exit status $?: $(cat "$tmp/err")"
grep -q '"ids"' "$tmp/dir.json" && cmp -s "$tmp/dir.json" "$tmp/cfg.json" || fail "--model DIR/config.json output differs: $(cat "$tmp/cfg.json")"
(cd "$FX" && "$S" generate --model config.json "${G[@]}") >"$tmp/rel.json" 2>&1 && cmp -s "$tmp/dir.json" "$tmp/rel.json" ||
  fail "--model config.json (in the directory): $(cat "$tmp/rel.json")"
"$S" generate --model "$FX/reference.json" "${G[@]}" >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] && grep -q "reference.json is a file; give the model's directory" "$tmp/err" || fail "--model FILE: exit $rc: $(cat "$tmp/err")"

"$S" convert --in "$FX" --out "$tmp/c" -q || fail "convert: exit status $?"
"$S" generate --model "$tmp/c/manifest.json" "${G[@]}" >/dev/null 2>"$tmp/err" || fail "--model C/manifest.json: $(cat "$tmp/err")"
"$S" convert --in "$tmp/c" --out "$tmp/c2" -q 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] && grep -q "already a strata container" "$tmp/err" || fail "convert --in CONTAINER: exit $rc: $(cat "$tmp/err")"
[ -e "$tmp/c2" ] && fail "convert --in CONTAINER left $tmp/c2 behind"
[ "$fails" -eq 0 ] && echo "OK: model paths" || exit 1
