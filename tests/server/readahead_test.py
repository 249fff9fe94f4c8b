#!/usr/bin/python3
"""strata serve reads experts ahead, and reports what strata run reports for the same prompt.

    python3 tests/server/readahead_test.py STRATA_BINARY

Converts the bundled model into a container, serves it with a RAM budget far below its experts
(--ram 0.002: about a third of them fit), asks /v1/completions for a greedy answer, and reads
/v1/stats. Then `strata run` answers the same prompt with the same budget (--stats-json). Both go
through the same engine and store chain, so the expert requests, hits and read-aheads must be equal:
the read-ahead count must be positive (the server used to drop read-ahead in its counting store) and
the hit rate the same.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

strata = sys.argv[1]
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
model = os.path.join(root, "models", "glm5-strata-tiny")
PROMPT, N, RAM = "The meaning of the word", 24, "0.002"

tmp = tempfile.mkdtemp(prefix="strata-readahead-")
server = None
try:
    c = os.path.join(tmp, "c")
    subprocess.run([strata, "convert", "--in", model, "--out", c, "-q"], check=True)
    # --spec off in both: under the default (auto) each step's number of drafts follows measured
    # times, so which experts a step asks for -- and the counters compared below -- can differ
    # between two identical runs (docs/speculative.md "Deterministic counters"). --prefetch on for
    # the same reason: under the default (auto) read-ahead is on or off by measured step times.
    cache = ["--ram", RAM, "--no-autopin", "--threads", "2", "--spec", "off", "--prefetch", "on"]

    log = open(os.path.join(tmp, "serve.log"), "w+")
    server = subprocess.Popen([strata, "serve", "--model", c, "--port", "0", "--chat-template", "raw", *cache],
                              stderr=log, stdout=subprocess.DEVNULL)
    port = None
    for _ in range(600):
        log.seek(0)
        m = re.search(r"on http://127\.0\.0\.1:(\d+)", log.read())
        if m:
            port = int(m.group(1))
            break
        if server.poll() is not None:
            log.seek(0)
            sys.exit(f"FAIL: strata serve exited: {log.read()}")
        time.sleep(0.05)
    assert port, "strata serve did not print its port"
    base = f"http://127.0.0.1:{port}"

    def call(path, body=None):
        req = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.load(r)

    answer = call("/v1/completions", {"prompt": PROMPT, "max_tokens": N, "temperature": 0})
    # The answer can reach the client before the step after its last token
    # has been counted (the server keeps the session's KV for reuse): read the
    # stats once they have stopped changing (at most 10 s).
    served = call("/v1/stats")["experts"]
    for _ in range(50):
        time.sleep(0.2)
        again = call("/v1/stats")["experts"]
        if again == served:
            break
        served = again
    server.terminate()
    server.wait(timeout=60)
    server = None

    run = subprocess.run([strata, "run", "--model", c, "--raw", "--prompt", PROMPT, "-n", str(N), "--temperature", "0",
                          "--stats-json", "-q", *cache], capture_output=True, text=True, check=True)
    ran = json.loads([l for l in run.stderr.splitlines() if l.startswith("{")][-1])

    text = answer["choices"][0]["text"]
    print(f"served: {answer['usage']['completion_tokens']} tokens, experts {served}")
    print(f"run:    requests {ran['expert_requests']}, hit rate {ran['expert_hit_rate']:.4f}, "
          f"prefetched {ran['experts_prefetched']}, prefetch hits {ran['prefetch_hits']}")
    problems = []
    if run.stdout.rstrip("\n") != text:
        problems.append(f"the answers differ: serve {text!r} vs run {run.stdout!r}")
    if served["prefetched"] <= 0 or served["prefetch_hits"] <= 0:
        problems.append(f"strata serve read nothing ahead: {served}")
    if served["requests"] != ran["expert_requests"] or served["hit_rate"] != ran["expert_hit_rate"]:
        problems.append(f"hit rates differ: serve {served['hits']}/{served['requests']} = {served['hit_rate']}, "
                        f"run {ran['expert_hit_rate']} of {ran['expert_requests']}")
    if served["prefetched"] != ran["experts_prefetched"]:
        problems.append(f"read-aheads differ: serve {served['prefetched']}, run {ran['experts_prefetched']}")
    if served["hit_rate"] >= 1.0:
        problems.append("every expert was a hit: the budget does not make the store read from disk")
    for p in problems:
        print("FAIL:", p)
    sys.exit(1 if problems else 0)
finally:
    if server is not None:
        server.kill()
    shutil.rmtree(tmp, ignore_errors=True)
