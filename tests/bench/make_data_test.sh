#!/usr/bin/env bash
# bench/make_data on its tiny family: the three entries are made and load (the
# container verifies and runs in `strata bench`, the GGUF's header parses with
# bench/compare's reader and holds the model's tensors); a second run skips
# everything; an interrupted step (a leftover .partial, the final entry
# missing) is redone; a deleted source is not remade while its outputs exist;
# --only makes an entry's input first; the GLM-5.2 slice is made long-context ready.
# Usage: make_data_test.sh STRATA_BINARY
set -euo pipefail
strata=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
md=("$here/bench/make_data" --family tiny --strata "$strata")
"${md[@]}" --dir "$tmp/d" 2>"$tmp/first.err" || { cat "$tmp/first.err"; exit 1; }
for e in tiny-bf16 tiny-int8 tiny-q8_0.gguf; do
  [ -e "$tmp/d/$e" ] || { echo "missing $e"; exit 1; }
done
if ls "$tmp/d" | grep -q partial; then echo "leftover .partial: $(ls "$tmp/d")"; exit 1; fi
"$strata" convert --verify "$tmp/d/tiny-int8" -q
"$strata" bench --model "$tmp/d/tiny-int8" --pin all --prompt-tokens 4 --gen-tokens 2 --reps 1 --warmup 0 \
  --membw-mib 0 --disk-mib 0 --json --no-autopin -q >"$tmp/bench.jsonl"
grep -q '"bench":"decode"' "$tmp/bench.jsonl" || { echo "no decode line"; cat "$tmp/bench.jsonl"; exit 1; }
/usr/bin/python3 - "$here" "$tmp/d/tiny-q8_0.gguf" <<'PY'
import sys
sys.path.insert(0, sys.argv[1] + "/bench/compare")
import run
kv, ts = run.gguf_tensors(sys.argv[2])
assert kv["general.architecture"] == "glm-dsa", kv["general.architecture"]
assert "token_embd.weight" in ts and any("_exps." in n for n in ts), sorted(ts)[:10]
PY
# A second run makes nothing.
"${md[@]}" --dir "$tmp/d" 2>"$tmp/second.err"
[ "$(grep -c 'exists, skipped' "$tmp/second.err")" = 3 ] || { cat "$tmp/second.err"; exit 1; }
# An interrupted export: the final file absent, a truncated .partial left behind.
cp "$tmp/d/tiny-q8_0.gguf" "$tmp/full.gguf"
rm "$tmp/d/tiny-q8_0.gguf"; head -c 1000 "$tmp/full.gguf" >"$tmp/d/tiny-q8_0.gguf.partial"
"${md[@]}" --dir "$tmp/d" 2>"$tmp/third.err"
grep -q 'tiny-q8_0.gguf: done' "$tmp/third.err" || { cat "$tmp/third.err"; exit 1; }
cmp "$tmp/d/tiny-q8_0.gguf" "$tmp/full.gguf"
[ ! -e "$tmp/d/tiny-q8_0.gguf.partial" ]
# The bf16 source deleted to save disk: not remade while what is made from it exists.
rm -rf "$tmp/d/tiny-bf16"
"${md[@]}" --dir "$tmp/d" 2>"$tmp/fourth.err"
grep -q 'tiny-bf16: not needed' "$tmp/fourth.err" || { cat "$tmp/fourth.err"; exit 1; }
[ ! -e "$tmp/d/tiny-bf16" ]
# --only an entry whose input is missing: the input is made first.
"${md[@]}" --dir "$tmp/e" --only tiny-int8 2>"$tmp/only.err"
[ -d "$tmp/e/tiny-bf16" ] && [ -d "$tmp/e/tiny-int8" ] && [ ! -e "$tmp/e/tiny-q8_0.gguf" ]
# A failing step leaves no complete-looking entry and a non-zero exit.
if "$here/bench/make_data" --family tiny --strata /bin/false --dir "$tmp/f" 2>"$tmp/fail.err"; then
  echo "a failing convert exited 0"; exit 1
fi
[ -d "$tmp/f/tiny-bf16" ] && [ ! -e "$tmp/f/tiny-int8" ]
# The GLM-5.2 slice allows bench/compare's long contexts (16384, 32768) as it is made: GLM-5's limit.
"$here/bench/make_data" --only slice-bf16 --dry-run --dir "$tmp/g" 2>"$tmp/dry.err"
grep -q -- '--set max_position_embeddings=202752' "$tmp/dry.err" || { cat "$tmp/dry.err"; exit 1; }
echo "make_data_test: ok"
