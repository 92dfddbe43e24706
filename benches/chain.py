#!/usr/bin/env python3
"""Chain overhead benchmark: does an escalation chain cost anything beyond
its upstream calls?

Starts `conclave mock` with tiers of known latency and a gateway whose
`review` chain escalates once (small draft rejected -> large accepted: four
upstream calls, ~80 ms of upstream time) and whose `failover` chain moves
past a provider that is down. For every request it compares the wall time
the client saw with the sum of the durations of that request's attempts in
the event log (joined on x-request-id), and prints the p50/p99 of the
difference, whole and streamed, at 1 and 8 concurrent clients. The
`frontier` rows (one concrete model, no strategy) are the baseline: what the
client, HTTP and the gateway cost for a single call.

    python3 benches/chain.py [--requests 200]

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
import threading
import time

from procs import ROOT, start

MOCK = """
[upstreams.sim]
kind = "mock"
[upstreams.sim.models.small]
reply = { text = "Draft answer: a first go at it" }
ttft = "20ms"
[upstreams.sim.models.large]
reply = { text = "A complete answer with every detail the question needs" }
ttft = "30ms"
tokens_per_second = 1000
[upstreams.sim.models.judge]
reply = { json = { accept = true, feedback = "" } }
ttft = "10ms"
[[upstreams.sim.models.judge.rules]]
when_contains = "Draft answer"
then = { reply = { json = { accept = false, feedback = "expand the draft" } } }
[upstreams.sim.models.frontier]
reply = { text = "Frontier answer" }
ttft = "15ms"
[upstreams.sim.models.down]
status = 503
"""

GATEWAY = """
[server]
event_log = "{events}"
[upstreams.local]
kind = "openai"
base_url = "{base}/v1"
lane = "local"
[upstreams.cloud]
kind = "openai"
base_url = "{base}/v1"
[models.small]
upstream = "local"
[models.large]
upstream = "local"
[models.judge]
upstream = "cloud"
[models.frontier]
upstream = "cloud"
[models.down]
upstream = "cloud"
[routes.review]
strategy = "chain"
tiers = ["small", "large", "frontier"]
verifier = "judge"
[routes.failover]
strategy = "chain"
tiers = ["down", "frontier"]
"""




def client(host, port, route, stream, n, out, lock):
    conn = http.client.HTTPConnection(host, port)
    body = {"model": route, "messages": [{"role": "user", "content": "Explain the chain"}]}
    if stream:
        body["stream"] = True
    data = json.dumps(body)
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", body=data, headers={"content-type": "application/json"})
        r = conn.getresponse()
        r.read()
        wall = (time.perf_counter() - t0) * 1000
        if r.status != 200:
            sys.exit(f"{route}: HTTP {r.status}")
        with lock:
            out.append((r.getheader("x-request-id"), wall, int(r.getheader("x-conclave-attempts") or 0)))
    conn.close()


def run(base, route, stream, requests, conc):
    host, port = base.replace("http://", "").split(":")
    out, lock = [], threading.Lock()
    threads = [threading.Thread(target=client, args=(host, int(port), route, stream, requests // conc, out, lock))
               for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    tmp = tempfile.mkdtemp(prefix="conclave-chain-")
    with open(os.path.join(tmp, "mock.toml"), "w") as f:
        f.write(MOCK)
    mock, mock_base = start(["mock", "--listen", "127.0.0.1:0", "--config", os.path.join(tmp, "mock.toml")], tmp, "mock")
    events = os.path.join(tmp, "events.jsonl")
    with open(os.path.join(tmp, "gateway.toml"), "w") as f:
        f.write(GATEWAY.format(events=events, base=mock_base))
    gw, base = start(["serve", "--listen", "127.0.0.1:0", "--config", os.path.join(tmp, "gateway.toml")], tmp, "gateway")
    runs = {}
    try:
        run(base, "review", False, 16, 1)  # warm up connections
        for route in ("frontier", "review", "failover"):
            for stream in (False, True):
                for conc in (1, 8):
                    runs[(route, stream, conc)] = run(base, route, stream, a.requests, conc)
        time.sleep(0.5)  # let the event log writer flush
    finally:
        gw.terminate()
        gw.wait()
        mock.terminate()
    attempts = {}
    with open(events) as f:
        for line in f:
            ev = json.loads(line)
            if ev.get("event") == "attempt":
                attempts.setdefault(ev["request_id"], []).append(ev["duration_ms"])
    print(f"chain wall time minus the sum of its attempts' durations ({a.requests} requests per row)")
    print(f"{'route':<9} {'mode':<7} {'conc':>4} {'attempts':>8} {'upstream p50':>13} {'wall p50':>9} "
          f"{'extra p50':>10} {'extra p99':>10}")
    worst = 0.0
    for (route, stream, conc), rows in runs.items():
        extra, ups, walls = [], [], []
        for rid, wall, n in rows:
            durs = attempts.get(rid, [])
            if len(durs) != n:
                sys.exit(f"request {rid}: {len(durs)} attempt events, header says {n}")
            extra.append(wall - sum(durs))
            ups.append(sum(durs))
            walls.append(wall)
        extra.sort()
        p50 = statistics.median(extra)
        p99 = extra[min(len(extra) - 1, round(0.99 * (len(extra) - 1)))]
        worst = max(worst, p50)
        print(f"{route:<9} {'stream' if stream else 'whole':<7} {conc:>4} {rows[0][2]:>8} "
              f"{statistics.median(ups):>11.2f}ms {statistics.median(walls):>7.2f}ms {p50:>8.3f}ms {p99:>8.3f}ms")
    print(f"\n  {'PASS' if worst < 2.0 else 'FAIL'}  chain wall time within 2 ms of the sum of its attempts at p50 "
          f"(worst row: {worst:.3f} ms)")


if __name__ == "__main__":
    main()
