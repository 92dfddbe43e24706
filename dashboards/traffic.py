#!/usr/bin/env python3
"""Demo traffic for the conclave dashboards (standard library only).

    python3 dashboards/traffic.py --demo http://127.0.0.1:4000 \
        [--governed http://127.0.0.1:4001] [--rounds N] [--pause SECONDS] [--duration SECONDS]

One round touches every route of config/demo.toml (whole and streamed, a
chain escalation, a failover, a judge panel, best-of-3 races raced and
downgraded, a streamed hedge, an arena and its vote, an oracle consult,
local models alternating so the lane swaps, a 404 and a 400) and, with
--governed, config/governed.toml's keys past their rpm and tpm limits.
--rounds 0 runs forever. Exits 2 when a gateway cannot be reached.
"""

import argparse
import collections
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

DEMO_KEY, OPS_KEY = "demo-key", "ops-key"


class Unreachable(Exception):
    pass


class Gateway:
    """One gateway's base URL and the statuses it answered this round."""

    def __init__(self, name, url):
        self.name, self.url = name, url.rstrip("/")
        self.counts = collections.Counter()
        self.lock = threading.Lock()

    def call(self, method, path, body=None, headers=None, key=None, raw=None):
        """Sends one request, reads the whole answer; returns (status, body)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("content-type", "application/json")
        if key:
            req.add_header("authorization", f"Bearer {key}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                status, text = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read()
        except (urllib.error.URLError, ConnectionError) as e:
            raise Unreachable(f"{self.name} gateway at {self.url}: {getattr(e, 'reason', e)}")
        if path != "/healthz":
            with self.lock:
                self.counts[status] += 1
        return status, text

    def chat(self, model, content, stream=False, max_tokens=None, headers=None, key=None):
        body = {"model": model, "messages": [{"role": "user", "content": content}]}
        if stream:
            body["stream"] = True
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        return self.call("POST", "/v1/chat/completions", body, headers, key)

    def wait_ready(self, seconds):
        deadline = time.monotonic() + seconds
        while True:
            try:
                return self.call("GET", "/healthz")
            except Unreachable:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(1)


def arena(gw, n):
    """An A/B arena, then its vote (A, B or tie, turn by turn)."""
    status, text = gw.chat("ab", "explain a mutex in one line")
    if status == 200:
        arena_id = json.loads(text)["arena_id"]
        gw.call("POST", f"/v1/arena/{arena_id}/vote", {"pick": ["A", "B", "tie"][n % 3]})


def lane_burst(gw):
    """Local models alternating, sent together: the lane queues and swaps."""
    jobs = [("qwen-small", False), ("gemma-large", True), ("qwen-small", True),
            ("gemma-large", False), ("qwen-small", False), ("gemma-large", True)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        for f in [pool.submit(gw.chat, m, "hello, local model", s) for m, s in jobs]:
            f.result()


def demo_round(gw, n):
    # A race's estimate is about 6 x max_tokens (3 candidates, and the judge
    # reads each answer): 50k is over confirm_threshold_tokens (200k), 100k
    # over budget_tokens (500k).
    big = {"max_tokens": 50_000}
    jobs = [
        lambda: gw.chat("fast", "hello"),
        lambda: gw.chat("fast", "stream this", stream=True),
        lambda: gw.chat("review", "what is 2+2?"),
        lambda: gw.chat("review", "what is 2+2?", stream=True),
        lambda: gw.chat("failover", "hi"),
        lambda: gw.chat("council", "what is 2+2?"),
        lambda: gw.chat("best-of-3", "what is 2+2?"),
        lambda: gw.chat("best-of-3", "what is 3+3?", **big),  # downgraded: needs_confirmation
        lambda: gw.chat("best-of-3", "what is 3+3?", headers={"x-conclave-confirm": "yes"}, **big),
        lambda: gw.chat("best-of-3", "what is 4+4?", max_tokens=100_000),  # downgraded: over_budget
        lambda: gw.chat("hedge", "hi", stream=True),
        lambda: gw.chat("hedge", "hi again", stream=True),
        lambda: arena(gw, n),
        lambda: gw.chat("wise", "a hard one: spinlock or mutex?"),
        lambda: gw.chat("wise", "an easy one: what is a lock?", stream=True),
        lambda: lane_burst(gw),
        lambda: gw.chat("no-such-model", "hi"),  # 404
        lambda: gw.call("POST", "/v1/chat/completions", raw=b'{"model": "fast", "messages": '),  # 400
    ]
    with ThreadPoolExecutor(4) as pool:
        for f in [pool.submit(j) for j in jobs]:
            f.result()
    for _ in range(2):  # at rest the lane shows a model loaded (the gauge is set as a call starts)
        gw.chat("qwen-small", "one more")


def governed_round(gw):
    """demo-key: 5 rpm, 2000 tpm, models fast and best-of-3; ops-key: admin."""
    gw.chat("fast", "too big for a minute", max_tokens=3000, key=DEMO_KEY)  # 429 tpm: can never fit
    with ThreadPoolExecutor(2) as pool:  # together over 2000 tpm: one may be 429 tpm
        list(pool.map(lambda _: gw.chat("fast", "a long one", max_tokens=1200, key=DEMO_KEY), range(2)))
    for i in range(6):  # past rpm 5: 429 rpm
        gw.chat("fast", f"question {i}", max_tokens=50, key=DEMO_KEY)
    gw.chat("small", "not my model", key=DEMO_KEY)  # 403
    gw.chat("fast", "who am I?")  # 401
    gw.chat("fast", "hello", key=OPS_KEY)
    gw.chat("fast", "stream this", stream=True, key=OPS_KEY)
    gw.chat("best-of-3", "what is 2+2?", key=OPS_KEY)
    gw.call("GET", "/v1/keys/usage", key=OPS_KEY)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--demo", required=True, help="gateway on config/demo.toml")
    p.add_argument("--governed", help="gateway on config/governed.toml")
    p.add_argument("--rounds", type=int, default=1, help="0: forever")
    p.add_argument("--pause", type=float, default=2.0, help="seconds between rounds")
    p.add_argument("--duration", type=float, default=0, help="seconds: no new round after this (0: no limit)")
    p.add_argument("--wait", type=float, default=0, help="seconds to wait for the gateways to start")
    a = p.parse_args()
    gws = [Gateway("demo", a.demo)] + ([Gateway("governed", a.governed)] if a.governed else [])
    try:
        for gw in gws:
            gw.wait_ready(a.wait)
        n, began = 0, time.monotonic()
        while (a.rounds == 0 or n < a.rounds) and not (a.duration and time.monotonic() - began >= a.duration):
            n += 1
            for gw in gws:
                gw.counts.clear()
            start = time.monotonic()
            with ThreadPoolExecutor(2) as pool:
                rounds = [pool.submit(demo_round, gws[0], n)]
                if len(gws) > 1:
                    rounds.append(pool.submit(governed_round, gws[1]))
                for f in rounds:
                    f.result()
            parts = [f"{gw.name} " + " ".join(f"{s}:{c}" for s, c in sorted(gw.counts.items())) for gw in gws]
            print(f"round {n}: {time.monotonic() - start:.1f}s  " + "  ".join(parts), flush=True)
            if a.rounds == 0 or n < a.rounds:
                time.sleep(a.pause)
    except Unreachable as e:
        print(f"traffic: cannot reach the {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
