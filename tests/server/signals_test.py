#!/usr/bin/python3
"""strata serve obeys SIGTERM/SIGINT at every stage (issue 15, docs/security.md).

    python3 tests/server/signals_test.py STRATA_BINARY

1. During start-up: the bundled model's generation_config.json is a FIFO nobody writes, so start-up blocks on it
   for as long as the test likes (a stand-in for a long model load). SIGTERM must end the process
   within a second (it used to be blocked until the listener started: ignored).
2. While serving: SIGTERM stops the server gracefully (exit status 0) within a few seconds.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

strata = sys.argv[1]
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
fixture = os.path.join(root, "models", "glm5-strata-tiny")
failures = []


def wait_exit(p, seconds):
    try:
        return p.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


tmp = tempfile.mkdtemp(prefix="strata-signals-")
procs = []
try:
    # 1. A signal during start-up.
    model = os.path.join(tmp, "model")
    os.mkdir(model)
    for name in os.listdir(fixture):
        if name != "generation_config.json":
            os.symlink(os.path.join(os.path.abspath(fixture), name), os.path.join(model, name))
    os.mkfifo(os.path.join(model, "generation_config.json"))
    for sig in (signal.SIGTERM, signal.SIGINT):
        p = subprocess.Popen([strata, "serve", "--model", model, "--port", "0", "--threads", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        procs.append(p)
        time.sleep(1.0)  # start-up is now blocked opening the FIFO
        if p.poll() is not None:
            failures.append(f"start-up did not block (exit {p.returncode}): {p.stderr.read().decode()}")
            continue
        sent = time.monotonic()
        p.send_signal(sig)
        rc = wait_exit(p, 1.0)
        if rc is None:
            failures.append(f"{sig.name} during start-up: still running after 1 s")
            p.kill()
            p.wait()
        elif rc != 128 + sig.value:
            failures.append(f"{sig.name} during start-up: exit status {rc}, expected {128 + sig.value}")
        else:
            print(f"ok: {sig.name} during start-up ended the process in {time.monotonic() - sent:.2f} s")

    # 2. A signal while serving.
    p = subprocess.Popen([strata, "serve", "--model", fixture, "--port", "0", "--threads", "1"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    procs.append(p)
    port = None
    log = ""
    deadline = time.monotonic() + 60
    while port is None and time.monotonic() < deadline and p.poll() is None:
        line = p.stderr.readline()
        log += line
        m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
    if port is None:
        failures.append(f"strata serve did not start: {log}")
    else:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
            assert r.status == 200
        p.send_signal(signal.SIGTERM)
        rc = wait_exit(p, 10.0)
        if rc != 0:
            failures.append(f"SIGTERM while serving: exit status {rc}, expected 0")
        else:
            print("ok: SIGTERM while serving stopped the server (exit 0)")
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(tmp, ignore_errors=True)

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
