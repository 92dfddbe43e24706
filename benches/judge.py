#!/usr/bin/env python3
"""Judge benchmark: is a judge request's wall time what its calls cost?

Starts `conclave mock` with models of known latency and a gateway with two
judge routes: `council` (three panellists of 200, 300 and 250 ms) and
`capped` (the same plus one of 2 s, cut by panel_timeout = 500 ms). The
synthesis takes 100 ms per call (two calls: it ranks, then writes guidance
when given the tool's result) and the default 150 ms. For each request it
compares the client's wall time with

    expected = max(panel calls, capped by panel_timeout) + synthesis + default

taken from the event log (joined on x-request-id), and prints medians and
the ratio, whole and streamed.

    python3 benches/judge.py [--requests 20] [--no-build]

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
[upstreams.sim.models.p200]
reply = { text = "four" }
ttft = "200ms"
[upstreams.sim.models.p300]
reply = { text = "4, I think" }
ttft = "300ms"
[upstreams.sim.models.p250]
reply = { text = "2 + 2 = 4" }
ttft = "250ms"
[upstreams.sim.models.p2000]
reply = { text = "slowly: four" }
ttft = "2s"
[upstreams.sim.models.syn]
reply = { tool_call = { name = "rank_responses", arguments = { rankings = [{ label = "A", rank = 1, score = 8, reason = "plain" }] } } }
ttft = "100ms"
[[upstreams.sim.models.syn.rules]]
when_contains = "Ranking recorded"
then = { reply = { text = "Say four, plainly." } }
[upstreams.sim.models.def]
reply = { text = "The answer is four." }
ttft = "150ms"
"""

GATEWAY = """
[server]
event_log = "{events}"
[upstreams.sim]
kind = "openai"
base_url = "{base}/v1"
[models.p200]
upstream = "sim"
[models.p300]
upstream = "sim"
[models.p250]
upstream = "sim"
[models.p2000]
upstream = "sim"
[models.syn]
upstream = "sim"
[models.def]
upstream = "sim"
[routes.council]
strategy = "judge"
panel = ["p200", "p300", "p250"]
synthesis = "syn"
default = "def"
[routes.capped]
strategy = "judge"
panel = ["p200", "p300", "p250", "p2000"]
synthesis = "syn"
default = "def"
panel_timeout = "500ms"
"""

PANEL_TIMEOUT_MS = {"council": None, "capped": 500.0}


def ask(conn, route, stream):
    body = {"model": route, "messages": [{"role": "user", "content": "what is 2+2?"}]}
    if stream:
        body["stream"] = True
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                 headers={"content-type": "application/json"})
    r = conn.getresponse()
    r.read()
    if r.status != 200:
        sys.exit(f"{route}: HTTP {r.status}")
    return r.getheader("x-request-id"), (time.perf_counter() - t0) * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    tmp = tempfile.mkdtemp(prefix="conclave-judge-")
    with open(os.path.join(tmp, "mock.toml"), "w") as f:
        f.write(MOCK)
    mock, mock_base = start(["mock", "--listen", "127.0.0.1:0", "--config", os.path.join(tmp, "mock.toml")],
                            tmp, "mock")
    ev_path = os.path.join(tmp, "events.jsonl")
    with open(os.path.join(tmp, "gateway.toml"), "w") as f:
        f.write(GATEWAY.format(events=ev_path, base=mock_base))
    gw, base = start(["serve", "--listen", "127.0.0.1:0", "--config", os.path.join(tmp, "gateway.toml")],
                     tmp, "gateway")
    runs = {}
    calls = 0
    try:
        host, port = base.replace("http://", "").split(":")
        conn = http.client.HTTPConnection(host, int(port))
        ask(conn, "council", False)  # warm up the connections
        calls += 6
        for route in ("council", "capped"):
            for stream in (False, True):
                runs[(route, stream)] = [ask(conn, route, stream) for _ in range(a.requests)]
                calls += a.requests * (6 if route == "council" else 7)
        conn.close()
        grouped = by_request(attempts(ev_path, calls))
    finally:
        stop(gw)
        stop(mock)
    print(f"judge wall time vs max(panel, capped by panel_timeout) + synthesis + default "
          f"({a.requests} requests per row, medians)")
    print(f"{'route':<8} {'mode':<7} {'panel':>8} {'synthesis':>10} {'default':>8} {'expected':>9} "
          f"{'wall':>8} {'wall/expected':>14}")
    worst = 0.0
    for (route, stream), rows in runs.items():
        panel, syn, dflt, exp, walls, ratios = [], [], [], [], [], []
        for rid, wall in rows:
            atts = grouped.get(rid, [])
            p = max(e["duration_ms"] for e in atts if e["role"] == "panel")
            cap = PANEL_TIMEOUT_MS[route]
            if cap is not None:
                p = min(p, cap)
            s = sum(e["duration_ms"] for e in atts if e["role"] == "synthesis")
            d = sum(e["duration_ms"] for e in atts if e["role"] == "default")
            panel.append(p)
            syn.append(s)
            dflt.append(d)
            exp.append(p + s + d)
            walls.append(wall)
            ratios.append(wall / (p + s + d))
        r = statistics.median(ratios)
        worst = max(worst, abs(r - 1))
        print(f"{route:<8} {'stream' if stream else 'whole':<7} {statistics.median(panel):6.1f}ms "
              f"{statistics.median(syn):8.1f}ms {statistics.median(dflt):6.1f}ms {statistics.median(exp):7.1f}ms "
              f"{statistics.median(walls):6.1f}ms {r:14.3f}")
    print(f"\n  {'PASS' if worst <= 0.05 else 'FAIL'}  judge wall time within 5% of the sum "
          f"(worst row off by {worst * 100:.1f}%)")


if __name__ == "__main__":
    main()
