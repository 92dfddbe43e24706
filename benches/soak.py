#!/usr/bin/env python3
"""Soak test: a mixed workload at a steady rate against a gateway in front of
`conclave mock`, on loopback, for a bounded time (default 10 minutes).

Mix: whole and streamed passthrough, an escalation chain, a fallback chain
past a failing provider, upstream faults (5xx, garbage, a cut stream, a hang
past the upstream timeout), clients that disconnect mid-stream, and slow
clients that send half a request head and stall.

Every 30 s it prints the gateway's RSS and open file descriptors, requests
by outcome, and p50/p99 latency of the interval; at the end it says whether
RSS stayed flat (within +-10% of its mean after the warm-up).

    python3 benches/soak.py                  # 10 minutes at 100 req/s
    python3 benches/soak.py --seconds 120 --rate 50

Uses only the standard library; builds the release binary first.
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
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "conclave")

MOCK = """
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.fast]
reply = { text = "a short answer of about ten words for the soak test" }

[upstreams.sim.models.streamy]
reply = { text = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen" }
ttft = "20ms"
tokens_per_second = 400

[upstreams.sim.models.draft]
reply = { text = "Draft answer: {last_user}" }
ttft = "5ms"

[upstreams.sim.models.good]
reply = { text = "A careful, complete answer." }
ttft = "10ms"

[upstreams.sim.models.judge]
reply = { json = { accept = true, feedback = "" } }

[[upstreams.sim.models.judge.rules]]
when_contains = "Draft answer:"
then = { reply = { json = { accept = false, feedback = "only a draft" } } }

[upstreams.sim.models.down]
status = 503
error_message = "simulated outage"

[upstreams.sim.models.garbage]
fail = "garbage"

[upstreams.sim.models.cut]
reply = { text = "one two three four five six seven eight nine ten" }
tokens_per_second = 500
fail = "cut"

[upstreams.sim.models.hang]
fail = "hang"
"""

GATEWAY = """
[server]
request_timeout = "10s"
header_read_timeout = "2s"
idle_timeout = "5s"
event_log = "{dir}/events.jsonl"

[upstreams.up]
kind = "openai"
base_url = "{mock}"
timeout = "1s"

[upstreams.local]
kind = "openai"
base_url = "{mock}"
lane = "local"
timeout = "2s"

[models.fast]
upstream = "up"
[models.streamy]
upstream = "up"
[models.good]
upstream = "local"
[models.draft]
upstream = "local"
[models.judge]
upstream = "up"
[models.down]
upstream = "up"
[models.garbage]
upstream = "up"
[models.cut]
upstream = "up"
[models.hang]
upstream = "up"

[routes.review]
strategy = "chain"
tiers = ["draft", "good"]
verifier = "judge"

[routes.failover]
strategy = "chain"
tiers = ["down", "fast"]
"""

# (weight, kind, model, streamed)
MIX = [
    (30, "request", "fast", False),
    (25, "request", "streamy", True),
    (10, "request", "review", False),
    (5, "request", "review", True),
    (8, "request", "failover", False),
    (4, "request", "garbage", False),
    (4, "request", "cut", True),
    (1, "request", "hang", False),
    (8, "disconnect", "streamy", True),
    (5, "slowloris", None, False),
]


def start(args, cwd):
    p = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    return p, line.strip().rsplit(" ", 1)[-1].replace("http://", "")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.outcomes = Counter()
        self.latencies = []

    def add(self, outcome, latency=None):
        with self.lock:
            self.outcomes[outcome] += 1
            if latency is not None:
                self.latencies.append(latency)

    def take(self):
        with self.lock:
            o, l = self.outcomes, self.latencies
            self.outcomes, self.latencies = Counter(), []
            return o, l


def request(addr, model, stream, stats):
    host, port = addr.split(":")
    body = {"model": model, "messages": [{"role": "user", "content": "soak " + str(random.random())}]}
    if stream:
        body["stream"] = True
    t0 = time.monotonic()
    try:
        c = http.client.HTTPConnection(host, int(port), timeout=15)
        c.request("POST", "/v1/chat/completions", json.dumps(body), {"content-type": "application/json"})
        r = c.getresponse()
        text = r.read()
        c.close()
    except Exception as e:  # a broken connection is an outcome too
        stats.add("client_error:" + type(e).__name__)
        return
    latency = time.monotonic() - t0
    if r.status != 200:
        stats.add(f"http_{r.status}", latency)
    elif stream and b"data: [DONE]" not in text:
        stats.add("stream_error_event", latency)
    else:
        stats.add("ok", latency)


def disconnect(addr, model, stats):
    host, port = addr.split(":")
    body = json.dumps({"model": model, "stream": True, "messages": [{"role": "user", "content": "bye"}]})
    try:
        s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        s.recv(512)
        s.close()
        stats.add("disconnected")
    except Exception as e:
        stats.add("client_error:" + type(e).__name__)


def slowloris(addr, stats):
    host, port = addr.split(":")
    try:
        s = socket.create_connection((host, int(port)), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        # The gateway must close it (header_read_timeout = 2s).
        closed = s.recv(16) == b""
        s.close()
        stats.add("slow_client_closed" if closed else "slow_client_answered")
    except socket.timeout:
        stats.add("slow_client_kept_open")
    except Exception:
        stats.add("slow_client_closed")


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--rate", type=float, default=100.0, help="requests per second")
    ap.add_argument("--every", type=int, default=30, help="report interval, seconds")
    ap.add_argument("--warmup", type=int, default=60, help="seconds before RSS counts")
    args = ap.parse_args()

    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    tmp = tempfile.mkdtemp(prefix="conclave-soak-")
    with open(os.path.join(tmp, "mock.toml"), "w") as f:
        f.write(MOCK)
    mock, mock_addr = start([BIN, "mock", "--listen", "127.0.0.1:0", "--config", "mock.toml"], tmp)
    with open(os.path.join(tmp, "gateway.toml"), "w") as f:
        f.write(GATEWAY.replace("{mock}", f"http://{mock_addr}/v1").replace("{dir}", tmp))
    gw, addr = start([BIN, "serve", "--listen", "127.0.0.1:0", "--config", "gateway.toml"], tmp)
    print(f"soak: {args.seconds}s at {args.rate}/s; gateway pid {gw.pid} on {addr}, files in {tmp}", flush=True)

    weights = [m[0] for m in MIX]
    stats = Stats()
    pool = ThreadPoolExecutor(max_workers=256)
    samples = []
    totals = Counter()
    t_start = time.monotonic()
    next_report = t_start + args.every
    n = 0
    print(f"{'t':>5} {'rss MiB':>8} {'fds':>5} {'req/s':>6} {'p50 ms':>7} {'p99 ms':>7}  outcomes", flush=True)
    try:
        while True:
            now = time.monotonic()
            if now - t_start >= args.seconds:
                break
            due = t_start + n / args.rate
            if due > now:
                time.sleep(min(due - now, next_report - now if next_report > now else 0.001))
            if time.monotonic() >= due:
                _, kind, model, stream = random.choices(MIX, weights)[0]
                if kind == "request":
                    pool.submit(request, addr, model, stream, stats)
                elif kind == "disconnect":
                    pool.submit(disconnect, addr, model, stats)
                else:
                    pool.submit(slowloris, addr, stats)
                n += 1
            if time.monotonic() >= next_report:
                outcomes, lat = stats.take()
                totals.update(outcomes)
                t = time.monotonic() - t_start
                rss = rss_kib(gw.pid) / 1024
                samples.append((t, rss))
                done = sum(outcomes.values())
                print(
                    f"{t:5.0f} {rss:8.1f} {fds(gw.pid):5d} {done / args.every:6.1f} "
                    f"{pct(lat, 0.5) * 1000:7.1f} {pct(lat, 0.99) * 1000:7.1f}  "
                    + ", ".join(f"{k}={v}" for k, v in sorted(outcomes.items())),
                    flush=True,
                )
                next_report += args.every
    finally:
        pool.shutdown(wait=True, cancel_futures=False)
        outcomes, _ = stats.take()
        totals.update(outcomes)
        gw.terminate()
        code = gw.wait(timeout=40)
        mock.terminate()
        mock.wait(timeout=10)

    print("totals: " + ", ".join(f"{k}={v}" for k, v in sorted(totals.items())))
    print(f"gateway exit code after SIGTERM: {code}")
    steady = [r for t, r in samples if t >= args.warmup]
    if len(steady) >= 2:
        mean = statistics.mean(steady)
        lo, hi = min(steady), max(steady)
        flat = lo >= 0.9 * mean and hi <= 1.1 * mean
        print(f"RSS after warm-up: mean {mean:.1f} MiB, min {lo:.1f}, max {hi:.1f} -> {'flat' if flat else 'NOT FLAT'} (+-10%)")
        bad = [k for k in totals if k.startswith("client_error") or k == "slow_client_kept_open"]
        sys.exit(0 if flat and not bad and code == 0 else 1)


if __name__ == "__main__":
    main()
