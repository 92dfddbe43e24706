#!/usr/bin/env python3
"""The governed-request benchmark: what a key's governors cost per request.

Two gateways in front of the same nginx upstream (benches/harness/nginx-upstream.conf,
fixed whole answers): "off" has no keys; "on" has one key with rpm, tpm, a daily token
and a daily cost budget (limits too high ever to refuse) and the SQLite state store on
(`server.state_path`). Both get the same wrk request (the harness's post.lua, with
`Authorization: Bearer $BENCH_KEY`, wrk -t1). Rounds interleave them (the order flips
each round) at c=1 and c=64, with the direct path as a reference; it prints the medians,
governed minus ungoverned p50 at c=1 (target: <= 0.05 ms) and the rps ratio at c=64,
each a median of per-round figures, plus each gateway's CPU per request.

    cargo build --release
    python3 benches/governed.py [--rounds 3] [--seconds 5] [--port-base 18110] [--callgrind]

--callgrind then also counts instructions per request of each gateway under valgrind
(benches/icount.py: 200 and 2,200 requests on one connection, subtracted), which the
noise of a shared box does not move, and prints the functions the governors add most to.

Needs Debian's wrk and nginx-light (and valgrind for --callgrind). CONCLAVE_BIN measures another build. Loopback only
(nginx on --port-base, the gateways on the two ports after it); every run is bounded in
time and it stops what it started on exit.
"""

import argparse
import os
import shutil
import sys
import urllib.request

import icount
import nginxbench as nb
from procs import cpu_seconds, med, start, stop


def check_governed(base, key):
    """The governed gateway refuses a request without the key and answers one with it,
    with its x-ratelimit-* headers: the governors are really on the path measured."""
    body = b'{"model":"bench-model","messages":[{"role":"user","content":"hi"}]}'
    url = base + "/v1/chat/completions"
    try:
        urllib.request.urlopen(urllib.request.Request(url, body, {"Content-Type": "application/json"}), timeout=5)
        sys.exit("the governed gateway answered a request without a key")
    except urllib.error.HTTPError as e:
        if e.code != 401:
            sys.exit(f"the governed gateway answered {e.code} to a request without a key, not 401")
    req = urllib.request.Request(url, body, {"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        limits = sorted(h for h in r.headers if h.lower().startswith("x-ratelimit"))
    if not limits:
        sys.exit("the governed gateway sent no x-ratelimit-* headers")
    return limits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--port-base", type=int, default=18110)
    ap.add_argument("--callgrind", action="store_true", help="also count instructions per request (valgrind)")
    a = ap.parse_args()
    nb.need_tools()
    tmp = nb.tmpdir()
    up = a.port_base
    procs = []
    try:
        procs.append(nb.start_nginx("upstream", tmp, up, up + 5))
        confs = nb.gateway_configs(tmp, up)
        os.environ["BENCH_GOVERNED_KEY"] = nb.BENCH_KEY
        gw = {}
        for i, name in enumerate(("off", "on")):
            p, base = start(["serve", "--listen", f"127.0.0.1:{up + 1 + i}", "--config", confs[name]], tmp, name)
            procs.append(p)
            gw[name] = (p, base)
        nb.wait_up(f"http://127.0.0.1:{up}/v1/models", gw["off"][1] + "/healthz", gw["on"][1] + "/healthz")
        limits = check_governed(gw["on"][1], nb.BENCH_KEY)
        print(f"governed gateway: 401 without the key; with it, {', '.join(limits)}", flush=True)
        lua = nb.lua_files(tmp)["whole"]
        urls = {"direct": f"http://127.0.0.1:{up}/v1/chat/completions",
                "off": gw["off"][1] + "/v1/chat/completions", "on": gw["on"][1] + "/v1/chat/completions"}
        res = {}  # (path, conns) -> [run per round]
        for r in range(a.rounds):
            order = ("direct", "off", "on") if r % 2 == 0 else ("direct", "on", "off")
            for conns in (1, 64):
                for name in order:
                    pid = gw[name][0].pid if name in gw else None
                    before = cpu_seconds(pid) if pid else 0
                    run = nb.wrk(urls[name], lua, conns, a.seconds, key=nb.BENCH_KEY)
                    run["cpu_us"] = (cpu_seconds(pid) - before) / max(run["requests"], 1) * 1e6 if pid else 0
                    res.setdefault((name, conns), []).append(run)
                    print(f"round {r + 1} {name:<6} c={conns:<3} rps={run['rps']:<9.0f} p50={run['p50_us'] / 1000:.3f}ms "
                          f"p99={run['p99_us'] / 1000:.3f}ms"
                          + (f" cpu/req={run['cpu_us']:.1f}us" if pid else ""), flush=True)
        db = os.path.join(tmp, "state.db")
        db_kib = os.path.getsize(db) / 1024 if os.path.exists(db) else 0
        counts = None
        if a.callgrind:
            for p, _ in gw.values():
                stop(p)
            counts = {name: icount.per_request(confs[name], up + 3, tmp, nb.BENCH_KEY) for name in ("off", "on")}
    finally:
        for p in reversed(procs):
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\nmedians of {a.rounds} rounds ({a.seconds}s runs, wrk -t1, whole requests, nginx upstream)")
    for conns in (1, 64):
        for name in ("direct", "off", "on"):
            v = res[(name, conns)]
            print(f"{name:<6} c={conns:<3} rps={med(x['rps'] for x in v):<9.0f} p50={med(x['p50_us'] for x in v) / 1000:.3f}ms "
                  f"p99={med(x['p99_us'] for x in v) / 1000:.3f}ms"
                  + (f" cpu/req={med(x['cpu_us'] for x in v):.1f}us" if name != "direct" else ""))

    def per_round(f, conns):
        return [f(on, off) for on, off in zip(res[("on", conns)], res[("off", conns)])]

    def show(label, xs, fmt):
        print(f"{label}: {fmt.format(med(xs))}   (rounds: {' '.join(fmt.format(x) for x in xs)})")

    print()
    d50 = per_round(lambda on, off: (on["p50_us"] - off["p50_us"]) / 1000, 1)
    show("governed - ungoverned p50, c=1", d50, "{:.3f}ms")
    show("governed - ungoverned p99, c=1", per_round(lambda on, off: (on["p99_us"] - off["p99_us"]) / 1000, 1), "{:.3f}ms")
    show("governed / ungoverned rps, c=64", per_round(lambda on, off: on["rps"] / off["rps"], 64), "{:.2f}")
    show("governed - ungoverned p50, c=64", per_round(lambda on, off: (on["p50_us"] - off["p50_us"]) / 1000, 64), "{:.3f}ms")
    show("governed - ungoverned CPU per request, c=64",
         per_round(lambda on, off: on["cpu_us"] - off["cpu_us"], 64), "{:.1f}us")
    print(f"state store after the run: {db_kib:.0f} KiB")
    if counts:
        off, on = counts["off"], counts["on"]
        print(f"\ninstructions per request (callgrind, {icount.MANY - icount.FEW} requests, one connection): "
              f"off {off['TOTAL']:.0f}, on {on['TOTAL']:.0f}, governors add {on['TOTAL'] - off['TOTAL']:.0f} "
              f"({on['TOTAL'] / off['TOTAL'] - 1:+.1%}); most of it in:")
        diff = sorted(((on.get(k, 0) - off.get(k, 0), k) for k in set(on) | set(off) if k != "TOTAL"), reverse=True)
        for v, k in diff[:15]:
            print(f"  {v:8.0f}  {k[:140]}")
    print(f"  {'PASS' if med(d50) <= 0.05 else 'FAIL'}  governors add <= 0.05 ms p50 (c=1)")


if __name__ == "__main__":
    main()
