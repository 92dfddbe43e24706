#!/usr/bin/env python3
"""The response cache's benchmark (issue 45), three measures in one run:

1. A hit against a passthrough, on the reference harness: the nginx upstream
   (benches/harness, fixed whole answers), a gateway without a cache ("pass") and
   one whose model has `cache = {ttl = "1h", max_temperature = 2}` ("hit", warmed
   with one request, so every measured request is a hit). Both get the harness's
   wrk request at c=1 and c=64, in rounds whose order flips; it prints medians of
   rps, p50 and the gateways' CPU per request, and hit minus pass per round.
   Target: a hit costs no more CPU than a passthrough.
2. Coalescing: 100 concurrent identical requests (no entry yet) to a gateway in
   front of a `conclave mock` upstream that takes 1 s to answer: how many calls
   reached the upstream (target: 1), and how many of the 100 got the answer.
3. A judge panel on a repeated task set (10 prompts, 3 passes) with and without
   `cache` on the route: the upstream calls and the cost each gateway reports
   (`GET /v1/usage`).

    cargo build --release
    python3 benches/cache.py [--rounds 3] [--seconds 5] [--port-base 18140]

Needs Debian's wrk and nginx-light. CONCLAVE_BIN measures another build. Loopback
only; every run is bounded in time; it stops what it started, by PID, on exit.
"""

import argparse
import json
import os
import shutil
import sys
import threading
import urllib.request

import nginxbench as nb
from procs import cpu_seconds, med, start, stop

CACHED = '\ncache = { ttl = "1h", max_temperature = 2 }\n'

MOCK = """
[upstreams.sim]
kind = "mock"
[upstreams.sim.models.slow]
reply = { text = "A slow, careful answer." }
ttft = "1s"
[upstreams.sim.models.pa]
reply = { text = "Panel answer A to: {last_user}" }
[upstreams.sim.models.pb]
reply = { text = "Panel answer B to: {last_user}" }
[upstreams.sim.models.judge]
reply = { tool_call = { name = "rank_responses", arguments = { rankings = [
  { label = "A", rank = 1, score = 8, reason = "clear" },
  { label = "B", rank = 2, score = 5, reason = "vague" },
] } } }
[[upstreams.sim.models.judge.rules]]
when_contains = "Ranking recorded"
then = { reply = { text = "Answer plainly." } }
[upstreams.sim.models.final]
reply = { text = "The final answer to: {last_user}" }
"""

GATEWAY = """
[upstreams.sim]
kind = "openai"
base_url = "{mock}/v1"
{models}
[routes.panel]
strategy = "judge"
panel = ["pa", "pb"]
synthesis = "judge"
default = "final"
{panel_cache}
"""


def post(url, body, headers=None, timeout=30):
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.headers, json.load(r)


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def upstream_calls(mock):
    return len(get(mock + "/mock/requests")["requests"])


def clear(mock):
    urllib.request.urlopen(urllib.request.Request(mock + "/mock/requests", method="DELETE"), timeout=10).read()


def hit_vs_pass(a, tmp, procs):
    up = a.port_base
    procs.append(nb.start_nginx("upstream", tmp, up, up + 5))
    confs = nb.gateway_configs(tmp, up)
    hit_conf = os.path.join(tmp, "hit.toml")
    with open(confs["off"]) as f, open(hit_conf, "w") as g:
        g.write(f.read().replace("[models.bench-model]", "[models.bench-model]" + CACHED))
    gw = {}
    for i, (name, conf) in enumerate((("pass", confs["off"]), ("hit", hit_conf))):
        p, base = start(["serve", "--listen", f"127.0.0.1:{up + 1 + i}", "--config", conf], tmp, name)
        procs.append(p)
        gw[name] = (p, base)
    nb.wait_up(f"http://127.0.0.1:{up}/v1/models", gw["pass"][1] + "/healthz", gw["hit"][1] + "/healthz")
    body = {"model": "bench-model", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}
    states = [post(gw["hit"][1] + "/v1/chat/completions", body)[0].get("x-conclave-cache") for _ in range(2)]
    if states != ["miss", "hit"]:
        sys.exit(f"the cached gateway answered {states}, not a miss then a hit: is `cache` on the path?")
    print("cached gateway: a miss, then hits", flush=True)
    lua = nb.lua_files(tmp)["whole"]
    urls = {"direct": f"http://127.0.0.1:{up}/v1/chat/completions",
            "pass": gw["pass"][1] + "/v1/chat/completions", "hit": gw["hit"][1] + "/v1/chat/completions"}
    res = {}
    for r in range(a.rounds):
        order = ("direct", "pass", "hit") if r % 2 == 0 else ("direct", "hit", "pass")
        for conns in (1, 64):
            for name in order:
                pid = gw[name][0].pid if name in gw else None
                before = cpu_seconds(pid) if pid else 0
                run = nb.wrk(urls[name], lua, conns, a.seconds)
                run["cpu_us"] = (cpu_seconds(pid) - before) / max(run["requests"], 1) * 1e6 if pid else 0
                res.setdefault((name, conns), []).append(run)
                print(f"round {r + 1} {name:<6} c={conns:<3} rps={run['rps']:<9.0f} p50={run['p50_us'] / 1000:.3f}ms"
                      + (f" cpu/req={run['cpu_us']:.1f}us" if pid else ""), flush=True)
    print(f"\nmedians of {a.rounds} rounds ({a.seconds}s runs, wrk -t1, whole requests, nginx upstream)")
    for conns in (1, 64):
        for name in ("direct", "pass", "hit"):
            v = res[(name, conns)]
            print(f"{name:<6} c={conns:<3} rps={med(x['rps'] for x in v):<9.0f} p50={med(x['p50_us'] for x in v) / 1000:.3f}ms"
                  + (f" cpu/req={med(x['cpu_us'] for x in v):.1f}us" if name != "direct" else ""))
    for conns in (1, 64):
        d = [h["cpu_us"] - p["cpu_us"] for h, p in zip(res[("hit", conns)], res[("pass", conns)])]
        l50 = [(h["p50_us"] - p["p50_us"]) / 1000 for h, p in zip(res[("hit", conns)], res[("pass", conns)])]
        print(f"hit - pass, c={conns}: CPU per request {med(d):+.1f}us, p50 {med(l50):+.3f}ms "
              f"(rounds: {' '.join(f'{x:+.1f}' for x in d)})")
    return med(h["cpu_us"] - p["cpu_us"] for h, p in zip(res[("hit", 64)], res[("pass", 64)]))


def mock_world(a, tmp, procs, panel_cache):
    mock_conf = os.path.join(tmp, "mock.toml")
    with open(mock_conf, "w") as f:
        f.write(MOCK)
    mp, mock = start(["mock", "--listen", "127.0.0.1:0", "--config", mock_conf], tmp, "mock")
    procs.append(mp)
    models = "".join(f"[models.{m}]\nupstream = \"sim\"\n" + (CACHED if m == "slow" else "") for m in ("slow", "pa", "pb", "judge", "final"))
    conf = os.path.join(tmp, f"gw-{panel_cache}.toml")
    with open(conf, "w") as f:
        f.write(GATEWAY.format(mock=mock, models=models, panel_cache=CACHED if panel_cache else ""))
    gp, base = start(["serve", "--listen", "127.0.0.1:0", "--config", conf], tmp, f"gw-{panel_cache}")
    procs.append(gp)
    nb.wait_up(mock + "/mock/requests", base + "/healthz")
    return mock, base, (mp, gp)


def coalescing(a, tmp, procs):
    mock, base, (mp, gp) = mock_world(a, tmp, procs, False)
    clear(mock)
    answers = []
    body = {"model": "slow", "messages": [{"role": "user", "content": "One question, asked 100 times."}]}

    def ask():
        try:
            answers.append(post(base + "/v1/chat/completions", body, timeout=60)[1]["choices"][0]["message"]["content"])
        except Exception as e:  # noqa: BLE001 -- counted as a failure below
            answers.append(f"failed: {e}")

    threads = [threading.Thread(target=ask) for _ in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    calls = upstream_calls(mock)
    good = sum(1 for x in answers if x == "A slow, careful answer.")
    print(f"\ncoalescing: 100 concurrent identical requests -> {calls} upstream call(s); {good} of 100 answered")
    for p in (gp, mp):
        stop(p)
        procs.remove(p)
    return calls, good


def panel(a, tmp, procs):
    out = {}
    for cached in (False, True):
        mock, base, (mp, gp) = mock_world(a, tmp, procs, cached)
        clear(mock)
        for _ in range(3):
            for i in range(10):
                post(base + "/v1/chat/completions",
                     {"model": "panel", "temperature": 0, "messages": [{"role": "user", "content": f"Task {i}: explain it."}]})
        usage = get(base + "/v1/usage")
        cost = sum(r["cost_usd"] for r in usage["routes"])
        tokens = sum(r["input_tokens"] + r["output_tokens"] for r in usage["routes"])
        out[cached] = (upstream_calls(mock), tokens)
        print(f"judge panel, 10 tasks x 3 passes, cache {'on' if cached else 'off'}: "
              f"{out[cached][0]} upstream calls, {tokens} tokens, ${cost:.6f}")
        for p in (gp, mp):
            stop(p)
            procs.remove(p)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--port-base", type=int, default=18140)
    a = ap.parse_args()
    nb.need_tools()
    tmp = nb.tmpdir()
    procs = []
    try:
        d = hit_vs_pass(a, tmp, procs)
        calls, good = coalescing(a, tmp, procs)
        panel(a, tmp, procs)
    finally:
        for p in reversed(procs):
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n  {'PASS' if d <= 0 else 'FAIL'}  a hit costs no more CPU than a passthrough (c=64: {d:+.1f}us)")
    print(f"  {'PASS' if calls == 1 and good == 100 else 'FAIL'}  100 identical misses: {calls} upstream call(s), {good} answered")


if __name__ == "__main__":
    main()
