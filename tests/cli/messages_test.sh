#!/usr/bin/env bash
# Runtime messages a new user meets first (docs/cli.md "Messages"): a port in
# use is named with EADDRINUSE and --port (exit 1); chat --attach to a port
# nobody listens on says "connection refused at URL" (exit 1); the start-up
# lines ("strata: kernels: ...") come only once everything loaded: never
# before an error, never with -q; serve --think off is the default of requests
# that do not say.
set -uo pipefail
S=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MODEL=$ROOT/models/glm5-strata-tiny
FX=$ROOT/tests/fixtures/glm5-tiny-bf16  # weights, no tokenizer
tmp=$(mktemp -d)
HOLD=
cleanup() { [ -n "$HOLD" ] && kill "$HOLD" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# A port held by another listener (python3 binds it and prints the number).
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True); time.sleep(120)' >"$tmp/port" &
HOLD=$!
for _ in $(seq 1 50); do [ -s "$tmp/port" ] && break; sleep 0.1; done
PORT=$(head -1 "$tmp/port")
[ -n "$PORT" ] || { echo "FAIL: no port held"; exit 1; }

"$S" serve --model "$MODEL" --port "$PORT" --threads 1 >"$tmp/out" 2>"$tmp/err" </dev/null; rc=$?
[ "$rc" -eq 1 ] || fail "serve on a port in use: exit status $rc, expected 1: $(cat "$tmp/err")"
grep -qF "port $PORT on 127.0.0.1 is in use (EADDRINUSE); choose another with --port" "$tmp/err" ||
  fail "serve on a port in use: $(cat "$tmp/err")"
grep -q "kernels:" "$tmp/err" && fail "serve on a port in use printed the start-up lines before the error: $(cat "$tmp/err")"

# A port nobody listens on: take one, then let it go.
FREE=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf 'hi\n' | "$S" chat --attach "http://127.0.0.1:$FREE" >"$tmp/out" 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "chat --attach to a dead port: exit status $rc, expected 1: $(cat "$tmp/err")"
grep -qF "connection refused at http://127.0.0.1:$FREE" "$tmp/err" || fail "chat --attach to a dead port: $(cat "$tmp/err")"

# Start-up lines: after a successful load, not before a failure, not with -q.
"$S" run --model "$MODEL" -n 2 --temperature 0 --threads 1 hi >"$tmp/out" 2>"$tmp/err" ||
  fail "run: exit status $?: $(cat "$tmp/err")"
grep -q "^strata: kernels: " "$tmp/err" || fail "run: no start-up line: $(cat "$tmp/err")"
"$S" run --model "$MODEL" -n 2 --temperature 0 --threads 1 -q hi >"$tmp/out" 2>"$tmp/err" ||
  fail "run -q: exit status $?: $(cat "$tmp/err")"
[ -s "$tmp/err" ] && fail "run -q printed on stderr: $(cat "$tmp/err")"
"$S" run --model "$FX" -n 2 hi >"$tmp/out" 2>"$tmp/err"; rc=$?  # loads, then finds no tokenizer
[ "$rc" -eq 1 ] || fail "run without a tokenizer: exit status $rc, expected 1: $(cat "$tmp/err")"
grep -q "kernels:" "$tmp/err" && fail "run without a tokenizer printed the start-up lines: $(cat "$tmp/err")"
grep -q "^strata: error: " "$tmp/err" || fail "run without a tokenizer: no error line: $(cat "$tmp/err")"
"$S" generate --model "$tmp/nonexistent" --ids 1 >"$tmp/out" 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] && ! grep -q "kernels:" "$tmp/err" || fail "generate on a missing model: exit $rc: $(cat "$tmp/err")"

# serve --think off: a request that does not say gets the no-think prompt (the
# short answer is content); one that asks for thinking still gets reasoning.
"$S" serve --model "$MODEL" --port 0 --threads 1 --think off -q 2>"$tmp/serve.err" &
SRV=$!
URL=
for _ in $(seq 1 300); do
  URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$tmp/serve.err" | head -1) && [ -n "$URL" ] && break
  kill -0 "$SRV" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$URL" ]; then
  fail "serve --think off did not start: $(cat "$tmp/serve.err")"
else
  python3 - "$URL" <<'PY' || fail "serve --think off"
import json, sys, urllib.request
def ask(extra):
    body = {"messages": [{"role": "user", "content": "What is the moon made of?"}], "max_tokens": 8, "temperature": 0}
    body.update(extra)
    req = urllib.request.Request(sys.argv[1] + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["message"]
off, on = ask({}), ask({"enable_thinking": True})
assert off["content"] and not off.get("reasoning_content"), f"--think off: {off}"
assert on.get("reasoning_content"), f"enable_thinking true under --think off: {on}"
PY
fi
kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null

[ "$fails" -eq 0 ] && echo "OK: messages" || exit 1
