#!/usr/bin/env python3
"""Balance benchmark: what `strategy = "balance"` adds to a request, against
a passthrough to one of its members and against the direct path, in one
run, for each policy.

Starts `conclave mock` (a zero-delay simulated upstream) and one gateway in
front of it with three upstreams on that mock (three deployments of one
model, as a balance would spread over) and a balance route per policy.
wrk runs alternate between the paths for several rounds; the table gives
medians and the added p50 against the passthrough.

    python3 benches/balance.py [--rounds 3] [--seconds 5]

Needs wrk (Debian: apt-get install wrk). Traffic stays on 127.0.0.1,
every run is bounded in time, and every process it started is ended by
its PID.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from procs import MOCK_TOML, KEY, UPSTREAM_KEY, WRK_LUA, PROMPT, wrk
from procs import ROOT, med, start, stop

POLICIES = ("weighted", "least_busy", "latency")

GATEWAY_TOML = """
[server]
request_timeout = "60s"
[[keys]]
name = "bench"
key_env = "BENCH_KEY"
"""


def gateway_toml(base):
    out = [GATEWAY_TOML]
    for u in ("a", "b", "c"):
        out.append(f'[upstreams.{u}]\nkind = "openai"\nbase_url = "{base}/v1"\n'
                   f'api_key_env = "BENCH_UPSTREAM_KEY"\n')
        out.append(f'[models.bench-{u}]\nupstream = "{u}"\nmodel = "bench"\n')
    for p in POLICIES:
        out.append(f'[routes.pool-{p}]\nstrategy = "balance"\n'
                   f'members = ["bench-a", "bench-b", "bench-c"]\npolicy = "{p}"\n')
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk not found (Debian: apt-get install wrk)")
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)

    os.environ["BENCH_UPSTREAM_KEY"] = UPSTREAM_KEY
    os.environ["BENCH_KEY"] = KEY
    tmp = tempfile.mkdtemp(prefix="conclave-balance-bench-")
    procs = []
    paths = ("direct", "passthrough") + tuple("pool-" + p for p in POLICIES)
    results = {}
    try:
        with open(os.path.join(tmp, "mock.toml"), "w") as f:
            f.write(MOCK_TOML)
        mock, mock_base = start(["mock", "--listen", "127.0.0.1:0", "--config", os.path.join(tmp, "mock.toml")],
                                tmp, "mock")
        procs.append(mock)
        path = os.path.join(tmp, "gateway.toml")
        with open(path, "w") as f:
            f.write(gateway_toml(mock_base))
        gw, gw_base = start(["serve", "--listen", "127.0.0.1:0", "--config", path], tmp, "gateway")
        procs.append(gw)
        luas = {}
        for name in paths:
            model = {"direct": "bench", "passthrough": "bench-a"}.get(name, name)
            body = {"model": model, "messages": [{"role": "user", "content": PROMPT}]}
            luas[name] = os.path.join(tmp, name + ".lua")
            with open(luas[name], "w") as f:
                f.write(WRK_LUA.format(body=json.dumps(body, separators=(",", ":"))))
        for r in range(a.rounds):
            for conns in (1, 64):
                for name in paths:
                    base = mock_base if name == "direct" else gw_base
                    run = wrk(base + "/v1/chat/completions", luas[name], conns, a.seconds)
                    if run["errors"] or run["status_errors"]:
                        print(f"warning: {name} c{conns}: {run['errors']} socket errors, "
                              f"{run['status_errors']} bad statuses", file=sys.stderr)
                    results.setdefault((conns, name), []).append(run)
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    finally:
        for p in reversed(procs):
            stop(p)

    print()
    print(f"balance against a passthrough (median of {a.rounds} rounds, {a.seconds}s wrk runs, "
          "loopback, whole answers)")
    print(f"{'path':<16} {'conns':>5} {'rps':>9} {'p50':>9} {'vs direct':>10} {'added p50 vs passthrough':>25}")
    rows = []
    for conns in (1, 64):
        d = med([x["rps"] for x in results[(conns, "direct")]])
        pt = results[(conns, "passthrough")]
        for name in paths:
            runs = results[(conns, name)]
            rps = med([x["rps"] for x in runs])
            p50 = med([x["p50_us"] for x in runs]) / 1000
            add = med([c["p50_us"] - b["p50_us"] for b, c in zip(pt, runs)]) / 1000
            rows.append({"conns": conns, "path": name, "rps": rps, "p50_ms": p50, "ratio_direct": rps / d,
                         "added_p50_vs_passthrough_ms": add})
            shown = f"{add:>23.3f}ms" if name.startswith("pool") else f"{'':>25}"
            print(f"{name:<16} {conns:>5} {rps:>9.0f} {p50:>7.3f}ms {rps / d:>10.2f} {shown}")
    os.makedirs(os.path.join(ROOT, "benches", "results"), exist_ok=True)
    out = os.path.join(ROOT, "benches", "results", time.strftime("balance-%Y%m%d-%H%M%S.json"))
    with open(out, "w") as f:
        json.dump({"rows": rows, "raw": {f"{k[0]}|{k[1]}": v for k, v in results.items()}}, f, indent=1)
    print(f"\nraw results: {out}")


if __name__ == "__main__":
    main()
