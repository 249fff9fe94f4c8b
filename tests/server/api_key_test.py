#!/usr/bin/python3
"""strata serve takes its API key from a file or the environment (issue 15, docs/security.md).

    python3 tests/server/api_key_test.py STRATA_BINARY

--api-key-file F (one key per line, '#' lines skipped) and STRATA_API_KEY each make /v1/models
answer 401 without a key and 200 with each key; --api-key-file together with --api-key is
refused; a key file holding a key with a space is refused naming the line; --host 0.0.0.0
without a key prints a warning; the removed `--http httplib` and `--prefix-reuse off` with
`--kv-dir` are refused saying why.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

strata = sys.argv[1]
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
model = os.path.join(root, "models", "glm5-strata-tiny")
failures = []


def start(args, env=None):
    """Starts strata serve; returns (process, port or None, stderr so far)."""
    p = subprocess.Popen([strata, "serve", "--model", model, "--port", "0", "--threads", "1",
                          "--chat-template", "raw", *args],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    log = ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        log += line
        m = re.search(r"on http://[^:]+:(\d+)", line)
        if m:
            return p, int(m.group(1)), log
    p.wait()
    return p, None, log + p.stderr.read()


def status(port, key):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def stop(p):
    p.terminate()
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


tmp = tempfile.mkdtemp(prefix="strata-apikey-")
try:
    keyfile = os.path.join(tmp, "key")
    with open(keyfile, "w") as f:
        f.write("s3cret-from-file \n# a comment, skipped\n\n  second-key\r\n")
    env_no_key = {k: v for k, v in os.environ.items() if k != "STRATA_API_KEY"}

    cases = [("--api-key-file", ["--api-key-file", keyfile], env_no_key, "s3cret-from-file"),
             ("--api-key-file, second key", ["--api-key-file", keyfile], env_no_key, "second-key"),
             ("STRATA_API_KEY", [], dict(env_no_key, STRATA_API_KEY="s3cret-from-env"), "s3cret-from-env")]
    for name, args, env, key in cases:
        p, port, log = start(args, env)
        if port is None:
            failures.append(f"{name}: strata serve did not start: {log}")
            continue
        try:
            got = (status(port, None), status(port, "wrong"), status(port, key))
            if got != (401, 401, 200):
                failures.append(f"{name}: no key / wrong key / right key answered {got}, expected (401, 401, 200)")
            else:
                print(f"ok: {name}: 401 without the key, 200 with it")
        finally:
            stop(p)

    p, port, log = start(["--api-key-file", keyfile, "--api-key", "x"], env_no_key)
    if port is not None:
        stop(p)
        failures.append("--api-key-file with --api-key was accepted")
    elif "not both" not in log:
        failures.append(f"--api-key-file with --api-key: unexpected error: {log}")
    else:
        print("ok: --api-key-file with --api-key is refused")

    badfile = os.path.join(tmp, "bad")
    with open(badfile, "w") as f:
        f.write("good-key\ntwo words\n")
    refusals = [("a key with a space", ["--api-key-file", badfile], "line 2"),
                ("--http httplib", ["--http", "httplib"], "removed"),
                ("--prefix-reuse off with --kv-dir", ["--prefix-reuse", "off", "--kv-dir", os.path.join(tmp, "kv")],
                 "--prefix-reuse off")]
    for name, args, why in refusals:
        p, port, log = start(args, env_no_key)
        if port is not None:
            stop(p)
            failures.append(f"{name} was accepted")
        elif why not in log:
            failures.append(f"{name}: the error does not say '{why}': {log}")
        else:
            print(f"ok: {name} is refused ({why})")

    p, port, log = start(["--host", "0.0.0.0"], env_no_key)
    if port is None:
        failures.append(f"--host 0.0.0.0: strata serve did not start: {log}")
    else:
        stop(p)
        if "without an API key" not in log:
            failures.append(f"--host 0.0.0.0 without a key: no warning: {log}")
        else:
            print("ok: --host 0.0.0.0 without a key warns")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
