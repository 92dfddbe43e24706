#!/usr/bin/env python3
"""Race benchmark: does a race cost what its calls cost?

Starts `conclave mock` with models of known latency and a gateway with
three race routes, and compares, per request, the client's wall time with
the calls the event log recorded (joined on x-request-id):

1. `best`: candidates of 200, 400 and 300 ms, each scored by a 50 ms judge
   (never perfect): wall vs the slowest candidate plus its judge call.
2. `perfect`: a candidate of 200 ms that scores 1.0 (valid JSON, judge 10/10)
   and one of 2 s: wall vs the perfect candidate plus its judge call (the
   slow one is cancelled).
3. `hedge`: first-of-N, streamed, candidates with a first token at 100 and
   300 ms: the client's time to first token through the race vs the fastest
   candidate asked alone through conclave and straight from the mock, in
   alternating requests of the same run.

    python3 benches/race.py [--requests 20] [--no-build]

Traffic stays on 127.0.0.1; the run is bounded by --requests.
"""

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from procs import ROOT, attempts, by_request, start, stop

MOCK = """
[upstreams.sim]
kind = "mock"
[upstreams.sim.models.c200]
reply = { text = "{\\"n\\": 4}" }
ttft = "200ms"
[upstreams.sim.models.c300]
reply = { text = "{\\"n\\": 4, \\"why\\": \\"sum\\"}" }
ttft = "300ms"
[upstreams.sim.models.c400]
reply = { text = "{\\"n\\": 4, \\"why\\": \\"two and two\\"}" }
ttft = "400ms"
[upstreams.sim.models.c2000]
reply = { text = "{\\"n\\": 4}" }
ttft = "2s"
[upstreams.sim.models.t100]
reply = { text = "fast first token" }
ttft = "100ms"
[upstreams.sim.models.t300]
reply = { text = "slow first token" }
ttft = "300ms"
[upstreams.sim.models.judge7]
reply = { json = { score = 7, reason = "fine" } }
ttft = "50ms"
[upstreams.sim.models.judge10]
reply = { json = { score = 10, reason = "perfect" } }
ttft = "50ms"
"""

GATEWAY = """
[server]
event_log = "{events}"
[upstreams.sim]
kind = "openai"
base_url = "{base}/v1"
{models}
[routes.best]
strategy = "race"
candidates = ["c200", "c400", "c300"]
judge = "judge7"
rubric = {{ judge = 0.6, length = 0.4 }}
budget_tokens = 0
confirm_threshold_tokens = 0
[routes.perfect]
strategy = "race"
candidates = ["c200", "c2000"]
judge = "judge10"
rubric = {{ judge = 0.5, format = 0.5 }}
budget_tokens = 0
confirm_threshold_tokens = 0
[routes.hedge]
strategy = "race"
mode = "first"
candidates = ["t300", "t100"]
budget_tokens = 0
confirm_threshold_tokens = 0
"""

NAMES = ["c200", "c300", "c400", "c2000", "t100", "t300", "judge7", "judge10"]


def post(conn, body):
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                 headers={"content-type": "application/json"})
    r = conn.getresponse()
    first = None
    if body.get("stream"):
        # Line by line (chunked decoding included) until the body ends.
        while True:
            line = r.readline()
            if not line:
                break
            if first is None and b'"content":"' in line and b'"content":""' not in line:
                first = (time.perf_counter() - t0) * 1000
    else:
        r.read()
    if r.status != 200:
        sys.exit(f"{body['model']}: HTTP {r.status}")
    return r.getheader("x-request-id"), (time.perf_counter() - t0) * 1000, first


def json_body(model, stream=False):
    b = {"model": model, "messages": [{"role": "user", "content": "2+2 as JSON"}],
         "response_format": {"type": "json_object"}}
    if stream:
        b["stream"] = True
    return b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    tmp = tempfile.mkdtemp(prefix="conclave-race-")
    with open(os.path.join(tmp, "mock.toml"), "w") as f:
        f.write(MOCK)
    mock, mock_base = start(["mock", "--listen", "127.0.0.1:0", "--config", os.path.join(tmp, "mock.toml")],
                            tmp, "mock")
    ev = os.path.join(tmp, "events.jsonl")
    models = "".join(f'[models.{m}]\nupstream = "sim"\n' for m in NAMES)
    with open(os.path.join(tmp, "gateway.toml"), "w") as f:
        f.write(GATEWAY.format(events=ev, base=mock_base, models=models))
    gw, base = start(["serve", "--listen", "127.0.0.1:0", "--config", os.path.join(tmp, "gateway.toml")],
                     tmp, "gateway")
    hp = lambda b: b.replace("http://", "").split(":")  # noqa: E731
    try:
        g = http.client.HTTPConnection(hp(base)[0], int(hp(base)[1]))
        post(g, json_body("best"))  # warm up
        best = [post(g, json_body("best")) for _ in range(a.requests)]
        perfect = [post(g, json_body("perfect")) for _ in range(a.requests)]
        hedge, direct, alone = [], [], []
        d = http.client.HTTPConnection(hp(mock_base)[0], int(hp(mock_base)[1]))
        streamed = lambda m: {"model": m, "stream": True, "messages": [{"role": "user", "content": "hi"}]}  # noqa: E731
        post(d, streamed("t100"))  # warm up
        post(g, streamed("hedge"))
        for _ in range(a.requests):  # alternate, so drift hits all alike
            for out, conn, model in ((hedge, g, "hedge"), (direct, d, "t100"), (alone, g, "t100")):
                out.append(post(conn, streamed(model)))
        calls = 6 + a.requests * (6 + 3) + a.requests * 3 + 2
        by_req = by_request(attempts(ev, calls))
    finally:
        stop(gw)
        stop(mock)

    def critical(rid):
        atts = by_req.get(rid, [])
        cands = [x for x in atts if x["role"] == "candidate" and x["verdict"] != "cancelled"]
        judges = sorted((x for x in atts if x["role"] == "judge"), key=lambda x: x["ts"])
        slowest = max(x["duration_ms"] for x in cands)
        return slowest + (judges[-1]["duration_ms"] if judges else 0.0)

    print(f"race wall time vs its critical calls ({a.requests} requests per row, medians)")
    checks = []
    for name, rows in (("best", best), ("perfect", perfect)):
        ratios = [wall / critical(rid) for rid, wall, _ in rows]
        exp = statistics.median(critical(rid) for rid, _, _ in rows)
        wall = statistics.median(w for _, w, _ in rows)
        r = statistics.median(ratios)
        what = "slowest candidate + its judge call" if name == "best" else "perfect candidate + its judge call"
        print(f"  {name:<8} expected ({what}) {exp:7.1f} ms   wall {wall:7.1f} ms   ratio {r:.3f}")
        checks.append((abs(r - 1) <= 0.05, f"{name}: wall within 5% of the {what} (ratio {r:.3f})"))
    h = statistics.median(f for _, _, f in hedge)
    dd = statistics.median(f for _, _, f in direct)
    al = statistics.median(f for _, _, f in alone)
    print(f"  hedge    time to first token through the race {h:7.2f} ms, straight from the fastest "
          f"candidate {dd:7.2f} ms: +{h - dd:.2f} ms (the fastest candidate alone through conclave: "
          f"{al:.2f} ms, +{al - dd:.2f})")
    checks.append((h - al <= 1.0, f"first-of-N streamed TTFT within 1 ms of the fastest candidate's through conclave "
                                  f"(+{h - al:.2f} ms; +{h - dd:.2f} ms over the mock directly)"))
    print()
    for ok, what in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {what}")


if __name__ == "__main__":
    main()
