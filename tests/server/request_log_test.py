#!/usr/bin/python3
"""strata serve logs one line per request on stderr, and a line when it stops (docs/server.md).

    python3 tests/server/request_log_test.py STRATA_BINARY

Text format: a chat completion (plain and streamed) logs method, path, status 200, its prompt and
completion token counts (as the response's usage says) and ms; a 404 and a /v1/models GET are
logged, a successful /health poll is not. --log-format json: the same fields as one JSON object
per line. SIGTERM: a "stopped" line.
"""
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

strata = sys.argv[1]
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
model = os.path.join(root, "models", "glm5-strata-tiny")
failures = []


def start(args):
    log = ""
    p = subprocess.Popen([strata, "serve", "--model", model, "--port", "0", "--threads", "1", "-q", *args],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        log += line
        m = re.search(r"on http://[^:]+:(\d+)", line)
        if m:
            return p, int(m.group(1))
    p.kill()
    failures.append(f"serve {' '.join(args)} did not start: {log}{p.stderr.read()}")
    print("\n".join("FAIL: " + f for f in failures))
    sys.exit(1)


def call(port, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def stop(p):
    p.terminate()
    try:
        rest = p.stderr.read()
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        rest = ""
    return rest


chat = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 5, "temperature": 0,
        "ignore_eos": True}

# Text.
p, port = start([])
st, body = call(port, "POST", "/v1/chat/completions", chat)
usage = json.loads(body)["usage"] if st == 200 else {}
st2, sbody = call(port, "POST", "/v1/chat/completions", {**chat, "stream": True,
                                                        "stream_options": {"include_usage": True}})
call(port, "GET", "/health")
call(port, "GET", "/v1/models")
call(port, "GET", "/nope")
time.sleep(0.3)
log = stop(p)
lines = [l for l in log.splitlines() if re.match(r"^\d{4}-\d\d-\d\dT", l)]
want = f"POST /v1/chat/completions 200 prompt={usage.get('prompt_tokens')}"
posts = [l for l in lines if want in l]
if len(posts) != 2:
    failures.append(f"text: expected 2 lines with '{want}', got {lines}")
for l in posts:
    if not re.search(rf"completion={usage.get('completion_tokens')} \w+ [0-9.]+ ms", l):
        failures.append(f"text: no 'completion={usage.get('completion_tokens')} FINISH N ms' in: {l}")
if not any(" GET /v1/models 200 " in l for l in lines):
    failures.append(f"text: no line for GET /v1/models: {lines}")
if not any(" GET /nope 404 " in l for l in lines):
    failures.append(f"text: no line for the 404: {lines}")
if any("/health" in l for l in lines):
    failures.append(f"text: a successful /health poll was logged: {lines}")
if not re.search(r"strata: serve: stopped on http://127\.0\.0\.1:\d+ after", log):
    failures.append(f"no shutdown line: {log}")

# JSON.
p, port = start(["--log-format", "json"])
st, body = call(port, "POST", "/v1/chat/completions", chat)
usage = json.loads(body)["usage"] if st == 200 else {}
time.sleep(0.3)
log = stop(p)
objs = []
for l in log.splitlines():
    if l.startswith("{"):
        try:
            objs.append(json.loads(l))
        except ValueError as e:
            failures.append(f"json: not JSON: {l}: {e}")
if len(objs) != 1:
    failures.append(f"json: expected 1 line, got {objs}")
else:
    o = objs[0]
    for k, v in {"method": "POST", "path": "/v1/chat/completions", "status": 200,
                 "prompt_tokens": usage.get("prompt_tokens"),
                 "completion_tokens": usage.get("completion_tokens")}.items():
        if o.get(k) != v:
            failures.append(f"json: {k} = {o.get(k)!r}, expected {v!r}: {o}")
    if not isinstance(o.get("ms"), (int, float)) or o["ms"] < 0:
        failures.append(f"json: ms missing: {o}")

if failures:
    print("\n".join("FAIL: " + f for f in failures))
    sys.exit(1)
print("OK: request log")
