#!/usr/bin/env python3
"""llama-swap awareness benchmark: the warm-state probe's cost, a mixed
fan-out's wall time on the two lanes, and the swaps a burst causes.

1. Probe cost. Sequential requests straight to `conclave mock` (the direct
   path), through a gateway whose local lane has no probe, and through one
   that probes the mock's `/running` (warm cache): medians side by side.
   Then the cold case: the first request after start-up against a
   llama-swap whose `/running` never answers (probe_timeout 200 ms), over
   several start-ups, and the requests after it, against the first request
   of a gateway without a probe (which pays for its first connections).
2. Mixed fan-out. Three local calls (three models, 100 ms load each) and two
   cloud calls sent at once; the wall time against max(slowest cloud call,
   sum of the local calls), both taken from the event log.
3. Burst. 20 requests over 4 local models in random order, sent 5 ms apart,
   through the gateway and straight to the mock llama-swap: the models the
   mock loaded (its `/mock/stats` `loads`) and the lane's swap counter.

    python3 benches/lanes.py [--requests 300] [--no-build]

Traffic stays on 127.0.0.1; every part is bounded in count.
"""

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from procs import ROOT, attempts, start, stop

LOCAL_MOCK = """
[upstreams.sim]
kind = "mock"
swap_delay = "100ms"
[upstreams.sim.models.fast]
reply = { text = "ok" }
[upstreams.sim.models.a]
reply = { text = "local a" }
ttft = "150ms"
[upstreams.sim.models.b]
reply = { text = "local b" }
ttft = "150ms"
[upstreams.sim.models.c]
reply = { text = "local c" }
ttft = "150ms"
[upstreams.sim.models.d]
reply = { text = "local d" }
ttft = "150ms"
"""

CLOUD_MOCK = """
[upstreams.sim]
kind = "mock"
[upstreams.sim.models.x]
reply = { text = "cloud x" }
ttft = "400ms"
[upstreams.sim.models.y]
reply = { text = "cloud y" }
ttft = "500ms"
"""

GATEWAY = """
[server]
event_log = "{events}"
[upstreams.local]
kind = "openai"
base_url = "{local}/v1"
{lane}
[upstreams.cloud]
kind = "openai"
base_url = "{cloud}/v1"
[models.fast]
upstream = "local"
[models.a]
upstream = "local"
[models.b]
upstream = "local"
[models.c]
upstream = "local"
[models.d]
upstream = "local"
[models.x]
upstream = "cloud"
[models.y]
upstream = "cloud"
"""

NO_PROBE = 'lane = "local"'
PROBE = 'llama_swap = "{local}"'
BLACK_HOLE = 'llama_swap = "http://127.0.0.1:{port}"\nprobe_timeout = "200ms"'






def mock(tmp, name, text):
    path = os.path.join(tmp, name + ".toml")
    with open(path, "w") as f:
        f.write(text)
    return start(["mock", "--listen", "127.0.0.1:0", "--config", path], tmp, name)


def gateway(tmp, name, local, cloud, lane):
    events = os.path.join(tmp, name + ".jsonl")
    path = os.path.join(tmp, name + ".toml")
    with open(path, "w") as f:
        f.write(GATEWAY.format(events=events, local=local, cloud=cloud, lane=lane))
    p, base = start(["serve", "--listen", "127.0.0.1:0", "--config", path], tmp, name)
    return p, base, events


def hostport(base):
    host, port = base.replace("http://", "").split(":")
    return host, int(port)


def ask(conn, model, text="hi"):
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": text}]})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=body, headers={"content-type": "application/json"})
    r = conn.getresponse()
    r.read()
    if r.status != 200:
        sys.exit(f"{model}: HTTP {r.status}")
    return (time.perf_counter() - t0) * 1000


def latencies(base, model, n):
    conn = http.client.HTTPConnection(*hostport(base))
    for _ in range(20):
        ask(conn, model)
    out = [ask(conn, model) for _ in range(n)]
    conn.close()
    return out


def get_json(base, path):
    conn = http.client.HTTPConnection(*hostport(base))
    conn.request("GET", path)
    r = conn.getresponse()
    v = json.loads(r.read())
    conn.close()
    return v


def metric(base, name):
    conn = http.client.HTTPConnection(*hostport(base))
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    for line in text.splitlines():
        if line.startswith(name):
            return float(line.rsplit(" ", 1)[-1])
    return 0.0


def black_hole():
    """A server that accepts connections and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    held = []

    def accept():
        while True:
            try:
                held.append(s.accept()[0])
            except OSError:
                return
    threading.Thread(target=accept, daemon=True).start()
    return s


def send_all(base, calls, gap_ms=0.0):
    """Sends (model, text) calls from one thread each; returns wall ms."""
    done = []

    def one(model, text):
        conn = http.client.HTTPConnection(*hostport(base))
        ask(conn, model, text)
        conn.close()
        done.append(time.perf_counter())
    t0 = time.perf_counter()
    threads = []
    for model, text in calls:
        t = threading.Thread(target=one, args=(model, text))
        t.start()
        threads.append(t)
        if gap_ms:
            time.sleep(gap_ms / 1000)
    for t in threads:
        t.join()
    return (max(done) - t0) * 1000


def probe_cost(tmp, local, cloud, n):
    print(f"1. probe cost: {n} sequential requests each (a loaded model, no upstream latency)")
    names = ["direct to the mock", "gateway, local lane, no probe", "gateway, llama_swap probe"]
    gws = [gateway(tmp, "probe-off", local, cloud, NO_PROBE),
           gateway(tmp, "probe-on", local, cloud, PROBE.format(local=local))]
    bases = [local] + [base for _, base, _ in gws]
    lat = {name: [] for name in names}
    try:
        # Alternating rounds, so drift on a shared box hits all three alike.
        for _ in range(3):
            for name, base in zip(names, bases):
                lat[name].extend(latencies(base, "fast", n // 3))
    finally:
        for gw, _, _ in gws:
            stop(gw)
    d = statistics.median(lat[names[0]])
    for name in names:
        m = statistics.median(lat[name])
        print(f"   {name:<32} p50 {m:7.3f} ms   added vs direct {m - d:+7.3f} ms   ratio {m / d:5.2f}")
    probe_added = statistics.median(lat[names[2]]) - statistics.median(lat[names[1]])
    print(f"   the probe's warm cache adds {probe_added:+.3f} ms at p50")

    hole = black_hole()
    cold = {}
    for name, lane in (("no probe", NO_PROBE),
                       ("/running never answers (probe_timeout 200 ms)", BLACK_HOLE.format(port=hole.getsockname()[1]))):
        firsts, afters = [], []
        for i in range(5):
            gw, base, _ = gateway(tmp, f"cold-{len(cold)}-{i}", local, cloud, lane)
            try:
                conn = http.client.HTTPConnection(*hostport(base))
                firsts.append(ask(conn, "fast"))
                afters.extend(ask(conn, "fast") for _ in range(50))
                conn.close()
            finally:
                stop(gw)
        cold[name] = statistics.median(firsts)
        print(f"   {name}, 5 start-ups: first request p50 "
              f"{statistics.median(firsts):.1f} ms (max {max(firsts):.1f}), the 250 after it p50 "
              f"{statistics.median(afters):.3f} ms")
    hole.close()
    return probe_added, max(cold.values()) - cold["no probe"]  # medians


def fan_out(tmp, local, cloud, rounds):
    print(f"\n2. mixed fan-out: a, b, c (local, 150 ms + 100 ms load each) and x, y (cloud, 400 and 500 ms) at once, {rounds} rounds")
    gw, base, events = gateway(tmp, "fanout", local, cloud, PROBE.format(local=local))
    ratios = []
    try:
        for r in range(rounds):
            calls = [(m, f"round {r}") for m in ("a", "b", "c", "x", "y")]
            random.shuffle(calls)
            wall = send_all(base, calls)
            rows = [e for e in attempts(events, 5 * (r + 1)) if e["request_id"]][-5:]
            local_sum = sum(e["duration_ms"] for e in rows if e["upstream"] == "local")
            cloud_max = max(e["duration_ms"] for e in rows if e["upstream"] == "cloud")
            expected = max(cloud_max, local_sum)
            ratios.append(wall / expected)
            print(f"   round {r}: wall {wall:6.1f} ms   sum(local) {local_sum:6.1f}   max(cloud) {cloud_max:6.1f}"
                  f"   wall / expected {wall / expected:.3f}")
    finally:
        stop(gw)
    med = statistics.median(ratios)
    print(f"   median wall / max(cloud, sum(local)) = {med:.3f}")
    return med


def burst(tmp, cloud, n_models=4, per_model=5):
    print(f"\n3. burst: {n_models * per_model} requests over {n_models} local models, random order, 5 ms apart")
    models = ["a", "b", "c", "d"][:n_models]
    order = [m for m in models for _ in range(per_model)]
    random.shuffle(order)
    print(f"   order: {' '.join(order)}")
    calls = [(m, f"burst {i}") for i, m in enumerate(order)]
    out = {}
    for how in ("direct", "gateway"):
        lm, local = mock(tmp, f"burst-{how}", LOCAL_MOCK)
        gw = None
        try:
            target = local
            if how == "gateway":
                gw, target, _ = gateway(tmp, "burst", local, cloud, PROBE.format(local=local))
            wall = send_all(target, calls, gap_ms=5)
            loads = get_json(local, "/mock/stats")["loads"]
            swaps = metric(target, 'conclave_llama_swap_swaps_total{upstream="local"}') if gw else None
            out[how] = loads
            extra = f"   lane swaps {swaps:.0f}" if gw else ""
            print(f"   {how:<8} models loaded {loads:3d}   wall {wall:7.1f} ms{extra}")
        finally:
            if gw:
                stop(gw)
            stop(lm)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    random.seed(20261123)
    tmp = tempfile.mkdtemp(prefix="conclave-lanes-")
    lm, local = mock(tmp, "local", LOCAL_MOCK)
    cm, cloud = mock(tmp, "cloud", CLOUD_MOCK)
    try:
        probe_added, cold_added = probe_cost(tmp, local, cloud, a.requests)
        ratio = fan_out(tmp, local, cloud, a.rounds)
        loads = burst(tmp, cloud)
    finally:
        stop(lm)
        stop(cm)
    print()
    checks = [
        (abs(probe_added) < 0.1, f"a warm probe cache adds nothing measurable ({probe_added:+.3f} ms at p50)"),
        (cold_added <= 200 + 25, f"a cold probe costs at most its timeout and a connection (first request +{cold_added:.1f} ms at p50 "
                                 f"over a gateway without a probe, timeout 200 ms)"),
        (abs(ratio - 1) <= 0.05, f"fan-out wall time within 5% of max(cloud, sum(local)) (ratio {ratio:.3f})"),
        (loads["gateway"] <= 4, f"the burst loads at most 4 models through the gateway ({loads['gateway']}; "
                                f"{loads['direct']} straight to the mock)"),
    ]
    for ok, what in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {what}")


if __name__ == "__main__":
    main()
