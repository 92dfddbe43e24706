#!/usr/bin/env python3
"""What observability costs: the event log and OTLP traces, on and off.

Starts `conclave mock` (a zero-delay simulated upstream) and three gateways
in front of it: "plain" (no event log, no traces: the default), "logged"
(the JSONL event log on) and "traced" (the event log and OTLP traces on,
sent to a local OTLP/HTTP sink this script runs). Alternates wrk runs
against the direct path and each gateway, whole answers at 1 and 64
connections, for several rounds, and prints medians: requests/s (and the
ratio to the direct path), the p50 each setting adds over "plain", and what
the sink received (export calls and bytes) for the spans expected.

    python3 benches/telemetry.py [--rounds 3] [--seconds 5]

Needs wrk (Debian: apt-get install wrk). Traffic stays on 127.0.0.1 and every
run is bounded in time.
"""

import argparse
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

from procs import MOCK_TOML, PROMPT, WRK_LUA, med, wrk
from procs import ROOT, start, stop

GATEWAY = """
[server]
request_timeout = "60s"
{log}
{telemetry}
[upstreams.mock]
kind = "openai"
base_url = "{base}/v1"
[models.bench]
upstream = "mock"
"""

PATHS = ("direct", "plain", "logged", "traced")


class Sink(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that counts what it gets and answers 200."""
    batches = 0
    bytes = 0

    def do_POST(self):
        n = int(self.headers.get("content-length", 0))
        self.rfile.read(n)
        Sink.batches += 1
        Sink.bytes += n
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


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

    sink = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    otlp = f"http://127.0.0.1:{sink.server_address[1]}"

    tmp = tempfile.mkdtemp(prefix="conclave-bench-")
    with open(os.path.join(tmp, "mock.toml"), "w") as f:
        f.write(MOCK_TOML)
    procs = {}
    mock, base = start(["mock", "--listen", "127.0.0.1:0", "--config", os.path.join(tmp, "mock.toml")], tmp, "mock")
    procs["direct"] = (mock, base)
    log = f'event_log = "{os.path.join(tmp, "events.jsonl")}"'
    settings = {
        "plain": ("", ""),
        "logged": (log, ""),
        "traced": (log.replace("events", "events-traced"), f'[telemetry]\notlp_endpoint = "{otlp}"'),
    }
    for name, (log_line, telemetry) in settings.items():
        path = os.path.join(tmp, name + ".toml")
        with open(path, "w") as f:
            f.write(GATEWAY.format(base=base, log=log_line, telemetry=telemetry))
        procs[name] = start(["serve", "--listen", "127.0.0.1:0", "--config", path], tmp, name)

    body = {"model": "bench", "messages": [{"role": "user", "content": PROMPT}]}
    lua = os.path.join(tmp, "whole.lua")
    with open(lua, "w") as f:
        f.write(WRK_LUA.format(body=json.dumps(body, separators=(",", ":"))))

    results = {}
    traced_requests = 0
    try:
        for r in range(a.rounds):
            for conns in (1, 64):
                for name in PATHS:
                    run = wrk(procs[name][1] + "/v1/chat/completions", lua, conns, a.seconds)
                    results.setdefault((conns, name), []).append(run)
                    if name == "traced":
                        traced_requests += run["requests"]
                    if run["errors"] or run["status_errors"]:
                        print(f"warning: {name} c{conns}: {run['errors']} socket errors, "
                              f"{run['status_errors']} bad statuses", file=sys.stderr)
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    finally:
        for name in ("plain", "logged", "traced", "direct"):
            stop(procs[name][0])
        sink.shutdown()

    print()
    print(f"telemetry cost (median of {a.rounds} rounds, {a.seconds}s wrk runs, whole answers, loopback)")
    print(f"{'conns':>5} {'path':<8} {'rps':>9} {'vs direct':>10} {'p50':>9} {'added p50 vs plain':>19}")
    rows = []
    for conns in (1, 64):
        direct = med([x["rps"] for x in results[(conns, "direct")]])
        for name in PATHS:
            runs = results[(conns, name)]
            rps = med([x["rps"] for x in runs])
            added = med([x["p50_us"] - p["p50_us"] for x, p in zip(runs, results[(conns, "plain")])]) / 1000
            row = {"conns": conns, "path": name, "rps": rps, "ratio": rps / direct,
                   "p50_ms": med([x["p50_us"] for x in runs]) / 1000, "added_p50_ms": added}
            rows.append(row)
            print(f"{conns:>5} {name:<8} {rps:>9.0f} {row['ratio']:>10.2f} {row['p50_ms']:>7.3f}ms "
                  f"{'' if name in ('direct', 'plain') else f'{added:+.3f}ms':>19}")
    print()
    print(f"OTLP sink: {Sink.batches} export calls, {Sink.bytes / 1e6:.1f} MB, "
          f"for {traced_requests} traced requests ({2 * traced_requests} spans)")
    os.makedirs(os.path.join(ROOT, "benches", "results"), exist_ok=True)
    out = os.path.join(ROOT, "benches", "results", "telemetry-latest.json")
    with open(out, "w") as f:
        json.dump({"rows": rows, "sink_batches": Sink.batches, "sink_bytes": Sink.bytes,
                   "traced_requests": traced_requests}, f, indent=1)
    print(f"raw results: {out}")


if __name__ == "__main__":
    main()
