#!/usr/bin/env python3
"""Shared-state benchmark: what a governed request costs with its limits in
Redis, against the embedded SQLite store and against no governor, and what
two replicas on one Redis serve against one, in one run.

Starts a real `redis-server` (Debian's package) on a free loopback port,
`conclave mock` (a zero-delay simulated upstream), and four gateways in
front of it: no keys ("off"), a key with rpm, tpm and a daily token and
cost budget on SQLite ("sqlite"), the same key on Redis ("redis"), and a
second replica on the same Redis ("redis-b"). Limits are high enough never
to refuse. wrk runs alternate between the paths for several rounds; the
table gives medians and the added p50 against "off" and the direct path.

    python3 benches/state.py [--rounds 3] [--seconds 5]

Needs wrk and redis-server (Debian: apt-get install wrk redis-server).
Traffic stays on 127.0.0.1, every run is bounded in time, and every
process it started is ended by its PID.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from procs import MOCK_TOML, GATEWAY_TOML, GOVERNED_KEYS, KEY, UPSTREAM_KEY, WRK_LUA, PROMPT, wrk
from procs import ROOT, med, start, stop


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(tmp):
    port = free_port()
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", tmp],
                         stdout=open(os.path.join(tmp, "redis.log"), "w"), stderr=subprocess.STDOUT)
    for _ in range(250):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(7) == b"+PONG\r\n":
                    return p, f"redis://127.0.0.1:{port}/0"
        except OSError:
            pass
        time.sleep(0.02)
    p.kill()
    sys.exit("redis-server did not start")


def both(urls, lua, conns, seconds):
    """wrk against every url at once (conns each); their summed rps."""
    out = [None] * len(urls)

    def run(i, u):
        out[i] = wrk(u, lua, conns, seconds)

    ts = [threading.Thread(target=run, args=(i, u)) for i, u in enumerate(urls)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(r["rps"] for r in out), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    for tool in ("wrk", "redis-server"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found (Debian: apt-get install {tool})")
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)

    os.environ["BENCH_UPSTREAM_KEY"] = UPSTREAM_KEY
    os.environ["BENCH_KEY"] = KEY
    tmp = tempfile.mkdtemp(prefix="conclave-state-bench-")
    procs = []
    try:
        redis, redis_url = start_redis(tmp)
        procs.append(redis)
        with open(os.path.join(tmp, "mock.toml"), "w") as f:
            f.write(MOCK_TOML)
        mock, mock_base = start(["mock", "--listen", "127.0.0.1:0", "--config", os.path.join(tmp, "mock.toml")],
                                tmp, "mock")
        procs.append(mock)
        gateways = {
            "off": GATEWAY_TOML.format(base=mock_base, server_extra="", keys=""),
            "sqlite": GATEWAY_TOML.format(base=mock_base, keys=GOVERNED_KEYS,
                                          server_extra=f'state_path = "{os.path.join(tmp, "state.db")}"'),
            "redis": GATEWAY_TOML.format(base=mock_base, server_extra="", keys=GOVERNED_KEYS)
            + f'\n[state]\nurl = "{redis_url}"\ntimeout = "200ms"\n',
        }
        gateways["redis-b"] = gateways["redis"]
        bases = {"direct": mock_base}
        for name, toml in gateways.items():
            path = os.path.join(tmp, name + ".toml")
            with open(path, "w") as f:
                f.write(toml)
            p, base = start(["serve", "--listen", "127.0.0.1:0", "--config", path], tmp, name)
            procs.append(p)
            bases[name] = base
        lua = os.path.join(tmp, "whole.lua")
        body = {"model": "bench", "messages": [{"role": "user", "content": PROMPT}]}
        with open(lua, "w") as f:
            f.write(WRK_LUA.format(body=json.dumps(body, separators=(",", ":"))))
        url = lambda name: bases[name] + "/v1/chat/completions"

        results = {}
        replicas = {"one": [], "two": []}
        for r in range(a.rounds):
            for conns in (1, 64):
                for name in ("direct", "off", "sqlite", "redis"):
                    run = wrk(url(name), lua, conns, a.seconds)
                    if run["errors"] or run["status_errors"]:
                        print(f"warning: {name} c{conns}: {run['errors']} socket errors, "
                              f"{run['status_errors']} bad statuses", file=sys.stderr)
                    results.setdefault((conns, name), []).append(run)
            one, _ = both([url("redis")], lua, 64, a.seconds)
            two, runs = both([url("redis"), url("redis-b")], lua, 32, a.seconds)
            if any(x["errors"] or x["status_errors"] for x in runs):
                print("warning: errors in the two-replica run", file=sys.stderr)
            replicas["one"].append(one)
            replicas["two"].append(two)
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    finally:
        for p in reversed(procs):
            stop(p)

    def added(conns, path, base):
        b = results[(conns, base)]
        c = results[(conns, path)]
        return med([ci["p50_us"] - bi["p50_us"] for bi, ci in zip(b, c)]) / 1000

    print()
    print(f"governed requests by state backend (median of {a.rounds} rounds, {a.seconds}s wrk runs, "
          "loopback, whole answers)")
    print(f"{'path':<8} {'conns':>5} {'rps':>9} {'p50':>9} {'vs direct':>10} {'added p50 vs off':>17}")
    rows = []
    for conns in (1, 64):
        d = med([x["rps"] for x in results[(conns, "direct")]])
        for name in ("direct", "off", "sqlite", "redis"):
            rps = med([x["rps"] for x in results[(conns, name)]])
            p50 = med([x["p50_us"] for x in results[(conns, name)]]) / 1000
            add = added(conns, name, "off") if name not in ("direct", "off") else 0.0
            rows.append({"conns": conns, "path": name, "rps": rps, "p50_ms": p50, "ratio_direct": rps / d,
                         "added_p50_vs_off_ms": add})
            print(f"{name:<8} {conns:>5} {rps:>9.0f} {p50:>7.3f}ms {rps / d:>10.2f} "
                  f"{add if name not in ('direct', 'off') else float('nan'):>15.3f}ms")
    one, two = med(replicas["one"]), med(replicas["two"])
    print()
    print(f"replicas on one Redis, 64 connections in all: one {one:.0f} rps, two {two:.0f} rps "
          f"(ratio {two / one:.2f}; {os.cpu_count()} CPUs shared by wrk, the mock, Redis and the gateways)")
    os.makedirs(os.path.join(ROOT, "benches", "results"), exist_ok=True)
    out = os.path.join(ROOT, "benches", "results", time.strftime("state-%Y%m%d-%H%M%S.json"))
    with open(out, "w") as f:
        json.dump({"rows": rows, "replicas": {"one_rps": one, "two_rps": two, "raw": replicas},
                   "raw": {f"{k[0]}|{k[1]}": v for k, v in results.items()}}, f, indent=1)
    print(f"\nraw results: {out}")


if __name__ == "__main__":
    main()
