#!/usr/bin/env bash
# strata chat --attach URL against a running strata serve: the same turns
# (two turns, :reset, another turn; greedy, thinking off and on) print exactly
# what `strata chat --model` prints locally, and a server that is not there is
# a clear error ("connection refused at URL") with a non-zero exit.
# Usage: tests/chat/attach_test.sh path/to/strata
set -euo pipefail
STRATA=${1:-build/strata}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MODEL=$ROOT/models/glm5-strata-tiny
T=$(mktemp -d)
SRV=
cleanup() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT

"$STRATA" serve --model "$MODEL" --port 0 --threads 1 --ctx 1024 2>"$T/serve.err" &
SRV=$!
PORT=
for _ in $(seq 1 300); do
  PORT=$(grep -o 'http://127.0.0.1:[0-9]*' "$T/serve.err" | head -1 | sed 's/.*://') || true
  [ -n "$PORT" ] && break
  kill -0 "$SRV" 2>/dev/null || { cat "$T/serve.err"; echo "FAIL: strata serve exited"; exit 1; }
  sleep 0.1
done
[ -n "$PORT" ] || { echo "FAIL: no port in: $(cat "$T/serve.err")"; exit 1; }

INPUT=$'What is the moon made of?\nAnd the sun?\n:reset\nHello there\n:q\n'
printf '%s' "$INPUT" | "$STRATA" chat --attach "http://127.0.0.1:$PORT" -n 20 --temperature 0 --no-think \
  >"$T/attach.out" 2>"$T/attach.err"
printf '%s' "$INPUT" | "$STRATA" chat --model "$MODEL" -n 20 --temperature 0 --no-think --ctx 1024 \
  >"$T/local.out" 2>"$T/local.err"
if ! diff "$T/local.out" "$T/attach.out"; then
  echo "FAIL: attached chat differs from the local one"; cat "$T/attach.err"; exit 1
fi
turns=$(grep -c '^\[.*tokens' "$T/attach.err")
[ "$turns" = 3 ] || { echo "FAIL: expected 3 turn footers, got $turns"; cat "$T/attach.err"; exit 1; }
grep -q 'cached' "$T/attach.err"
echo "ok - attached chat prints what the local chat prints ($(wc -c <"$T/attach.out") bytes, 3 turns)"

# Thinking on: the reasoning between the same marker lines, locally and attached.
printf '%s' "$INPUT" | "$STRATA" chat --attach "http://127.0.0.1:$PORT" -n 20 --temperature 0 --think on \
  >"$T/attach-think.out" 2>"$T/attach-think.err"
printf '%s' "$INPUT" | "$STRATA" chat --model "$MODEL" -n 20 --temperature 0 --think on --ctx 1024 \
  >"$T/local-think.out" 2>"$T/local-think.err"
if ! diff "$T/local-think.out" "$T/attach-think.out"; then
  echo "FAIL: attached chat differs from the local one with thinking on"; cat "$T/attach-think.err"; exit 1
fi
grep -q '^Thinking\.\.\.$' "$T/attach-think.out" && grep -q '^\.\.\.done thinking\.$' "$T/attach-think.out" ||
  { echo "FAIL: no reasoning markers with thinking on:"; cat "$T/attach-think.out"; exit 1; }
if grep -q '<think>\|</think>' "$T/attach-think.out"; then
  echo "FAIL: a literal think tag in the output:"; cat "$T/attach-think.out"; exit 1
fi
echo "ok - thinking on: attached and local print the same ($(wc -c <"$T/attach-think.out") bytes)"

# Nothing listening: a clear error, non-zero exit.
kill "$SRV"; wait "$SRV" 2>/dev/null || true; SRV=
if printf 'hi\n' | "$STRATA" chat --attach "http://127.0.0.1:$PORT" >"$T/down.out" 2>"$T/down.err"; then
  echo "FAIL: attaching to a stopped server succeeded"; exit 1
fi
grep -qF "connection refused at http://127.0.0.1:$PORT" "$T/down.err" || { echo "FAIL: unclear error: $(cat "$T/down.err")"; exit 1; }
echo "ok - a stopped server: $(head -1 "$T/down.err")"
