#!/usr/bin/env python3
"""Strategy overhead benchmark: what does a strategy route cost beyond the
same upstream calls made by hand?

Starts `conclave mock` with zero-latency models and one gateway with two
strategy routes and the concrete models they call, each reachable by name:

1. `race3`: a best-of-3 race (candidates c1, c2, c3) scored by the default
   rubric (format, finish, length: no judge call) with `cancel_on_perfect =
   false`, so all three answers are awaited, as by hand. By hand: the client sends the three
   candidate calls at once from three threads and picks one (for free).
2. `chain`: an escalation chain whose first tier (`draft`, on a local lane,
   so verified) is accepted by its verifier: a draft call, then a verifier
   call. By hand: the client calls `draft`, then `verifier` with the
   verifier's prompt (the same system prompt and the conversation and the
   draft rendered as conclave renders them), one after the other.

A single call to c1 through the same gateway is measured alongside, for
scale. Every round sends --requests of each (whole answers, one at a time,
interleaved so the box's noise hits both alike) and prints the p50 and p90
wall time of each, the strategy's overhead (p50 strategy - p50 by hand) in
ms and as a ratio; then, in separate phases of --cpu-requests each, the
gateway's CPU time (utime + stime of its process) per strategy request and
per by-hand set. The summary is the median of --rounds rounds.

    CONCLAVE_BIN=target/release/conclave python3 benches/strategies.py [--requests 200] [--rounds 3]

Traffic stays on 127.0.0.1; the run is bounded by --requests, --cpu-requests
and --rounds (about 10 seconds with the defaults).
"""

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from procs import BIN, cpu_seconds, start, stop

MOCK = """
[upstreams.sim]
kind = "mock"
[upstreams.sim.models.c1]
reply = { text = "Four: two and two make four." }
[upstreams.sim.models.c2]
reply = { text = "The answer is 4, since 2 + 2 = 4." }
[upstreams.sim.models.c3]
reply = { text = "4" }
[upstreams.sim.models.draft]
reply = { text = "Draft answer: two and two make four." }
[upstreams.sim.models.large]
reply = { text = "A complete answer (never asked here)." }
[upstreams.sim.models.verifier]
reply = { json = { accept = true, feedback = "" } }
"""

GATEWAY = """
[server]
request_timeout = "60s"
[upstreams.local]
kind = "openai"
base_url = "{base}/v1"
lane = "local"
[upstreams.cloud]
kind = "openai"
base_url = "{base}/v1"
[models.c1]
upstream = "cloud"
[models.c2]
upstream = "cloud"
[models.c3]
upstream = "cloud"
[models.draft]
upstream = "local"
[models.large]
upstream = "cloud"
[models.verifier]
upstream = "cloud"
[routes.race3]
strategy = "race"
candidates = ["c1", "c2", "c3"]
rubric = {{ format = 0.5, finish = 0.3, length = 0.2 }}
cancel_on_perfect = false
budget_tokens = 0
confirm_threshold_tokens = 0
[routes.chain]
strategy = "chain"
tiers = ["draft", "large"]
verifier = "verifier"
"""

QUESTION = "What are two and two? Answer briefly."
# The chain verifier's prompt (src/strategy/chain/verifier.rs), so the call
# by hand carries what the gateway's own verifier call does.
VERIFIER_SYSTEM = (
    "You are a strict reviewer. You see a conversation and a candidate reply written by another model. "
    "Decide whether the candidate correctly and completely answers the last request, following the "
    "original system prompt. Answer with one JSON object and nothing else. Its key accept is true when "
    "the candidate is good enough and false when it is not. Its key feedback is empty when you accept; "
    "when you reject, it says in your own words which mistake or omission you found in this candidate "
    "and how to fix it. Two examples of complete answers, about other conversations:\n"
    '{"accept": true, "feedback": ""}\n'
    '{"accept": false, "feedback": "The reply gives the tower\'s year of opening, 1889, but the question '
    'asked for its height: it is 330 metres."}'
)
VERIFIER_QUESTION = "Does the candidate reply correctly and completely answer the last request? " \
                    "Answer with the JSON object only."


def chat(model):
    return {"model": model, "messages": [{"role": "user", "content": QUESTION}]}


def verifier_body(answer):
    user = (f"Conversation:\n[user] {QUESTION}\n\nCandidate reply to check:\n<<<\n{answer}\n>>>\n\n"
            f"{VERIFIER_QUESTION}")
    return {"model": "verifier", "max_tokens": 256, "response_format": {"type": "json_object"},
            "messages": [{"role": "system", "content": VERIFIER_SYSTEM}, {"role": "user", "content": user}]}


class Client:
    """One keep-alive connection to the gateway."""

    def __init__(self, host, port):
        self.conn = http.client.HTTPConnection(host, port)

    def post(self, body):
        self.conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                          headers={"content-type": "application/json"})
        r = self.conn.getresponse()
        data = r.read()
        if r.status != 200:
            sys.exit(f"{body['model']}: HTTP {r.status}: {data[:200]!r}")
        return json.loads(data), r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200, help="interleaved requests of each kind, per round")
    ap.add_argument("--cpu-requests", type=int, default=1000, help="requests of each kind per CPU phase")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="conclave-strategies-")
    with open(os.path.join(tmp, "mock.toml"), "w") as f:
        f.write(MOCK)
    mock, mock_base = start(["mock", "--listen", "127.0.0.1:0", "--config", os.path.join(tmp, "mock.toml")],
                            tmp, "mock")
    with open(os.path.join(tmp, "gateway.toml"), "w") as f:
        f.write(GATEWAY.format(base=mock_base))
    gw, base = start(["serve", "--listen", "127.0.0.1:0", "--config", os.path.join(tmp, "gateway.toml")],
                     tmp, "gateway")
    host, port = base.replace("http://", "").split(":")
    port = int(port)
    main_client = Client(host, port)
    local = threading.local()
    pool = ThreadPoolExecutor(3)

    def pooled(body):  # one keep-alive connection per pool thread
        if not hasattr(local, "c"):
            local.c = Client(host, port)
        return local.c.post(body)[0]

    def race3():
        _, r = main_client.post(chat("race3"))
        if r.getheader("x-conclave-attempts") != "3":
            sys.exit(f"race3: {r.getheader('x-conclave-attempts')} attempts, not 3")

    def race_by_hand():
        answers = list(pool.map(pooled, [chat(m) for m in ("c1", "c2", "c3")]))
        min(answers, key=lambda x: x["usage"]["completion_tokens"])  # the pick

    def chain():
        _, r = main_client.post(chat("chain"))
        if (r.getheader("x-conclave-attempts"), r.getheader("x-conclave-served-by")) != ("2", "draft"):
            sys.exit(f"chain: {r.getheader('x-conclave-attempts')} attempts, served by "
                     f"{r.getheader('x-conclave-served-by')}; the draft should be accepted")

    def chain_by_hand():
        draft, _ = main_client.post(chat("draft"))
        v, _ = main_client.post(verifier_body(draft["choices"][0]["message"]["content"]))
        if json.loads(v["choices"][0]["message"]["content"])["accept"] is not True:
            sys.exit("chain by hand: the verifier rejected the draft")

    def one_call():
        main_client.post(chat("c1"))

    kinds = {"one call": one_call, "race3": race3, "race3 by hand": race_by_hand, "chain": chain, "chain by hand": chain_by_hand}
    pairs = (("race3", "race3 by hand"), ("chain", "chain by hand"))
    rounds = []
    try:
        for fn in kinds.values():  # warm up connections, lanes and pools
            for _ in range(20):
                fn()
        for rnd in range(a.rounds):
            walls = {k: [] for k in kinds}
            for i in range(a.requests):
                t0 = time.perf_counter()
                one_call()
                walls["one call"].append((time.perf_counter() - t0) * 1000)
                for s, h in pairs:  # alternate which goes first
                    for k in ((s, h) if i % 2 == 0 else (h, s)):
                        t0 = time.perf_counter()
                        kinds[k]()
                        walls[k].append((time.perf_counter() - t0) * 1000)
            cpu = {}
            for k, fn in kinds.items():  # separate phases: the gateway's CPU per request or set
                c0 = cpu_seconds(gw.pid)
                for _ in range(a.cpu_requests):
                    fn()
                cpu[k] = (cpu_seconds(gw.pid) - c0) / a.cpu_requests * 1e6
            row = {}
            for k, xs in walls.items():
                xs.sort()
                row[k] = (statistics.median(xs), xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))], cpu[k])
            rounds.append(row)
            print(f"round {rnd + 1}: " + "  ".join(f"{k} p50 {v[0]:.3f} ms" for k, v in row.items()))
    finally:
        pool.shutdown()
        stop(gw)
        stop(mock)

    med = lambda k, j: statistics.median(r[k][j] for r in rounds)  # noqa: E731
    print(f"\n{BIN}: medians of {a.rounds} rounds; {a.requests} interleaved requests of each kind a round "
          f"(wall), {a.cpu_requests} a phase (gateway CPU)")
    print(f"{'':<15} {'p50 ms':>8} {'p90 ms':>8} {'gateway CPU µs':>15}")
    for k in kinds:
        print(f"{k:<15} {med(k, 0):>8.3f} {med(k, 1):>8.3f} {med(k, 2):>15.0f}")
    print()
    for s, h in pairs:
        over = statistics.median(r[s][0] - r[h][0] for r in rounds)
        ratio = statistics.median(r[s][0] / r[h][0] for r in rounds)
        cpu = statistics.median(r[s][2] / r[h][2] for r in rounds)
        print(f"{s:<6} overhead p50 {over:+.3f} ms (x{ratio:.2f} of by hand); gateway CPU x{cpu:.2f} of by hand")


if __name__ == "__main__":
    main()
