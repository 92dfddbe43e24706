#!/usr/bin/env python3
"""Gateway overhead benchmark: conclave vs the direct path, in one run.

Starts `conclave mock` (a zero-delay simulated upstream) and `conclave serve`
in front of it, then alternates wrk runs against both (whole and streamed
requests, 1 and 64 connections) for several rounds, plus TTFT runs with
benches/ttft.rs (wrk cannot see the first token). Prints requests/s, the
latency conclave adds (p50/p99), the time to first token it adds, its CPU time
and RSS per 1,000 requests, and its RSS after --total requests.

A third path, "governed", is a second gateway whose API key has rpm, tpm, a
daily token and cost budget and a state store on (limits high enough never to
refuse): its added p50 against the ungoverned gateway, in the same rounds, is
what the governors cost.

    python3 benches/overhead.py [--rounds 3] [--seconds 5] [--total 100000]

Needs wrk (Debian: apt-get install wrk). Traffic stays on 127.0.0.1 and every
run is bounded in time.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from procs import ROOT, start
TICK = os.sysconf("SC_CLK_TCK")
REPLY = "The quick brown fox jumps over the lazy dog and keeps running far away"
PROMPT = "Benchmark the gateway overhead please"

MOCK_TOML = f"""
[upstreams.sim]
kind = "mock"
[upstreams.sim.models.bench]
reply = {{ text = "{REPLY}" }}
"""

GATEWAY_TOML = """
[server]
request_timeout = "60s"
{server_extra}
{keys}
[upstreams.mock]
kind = "openai"
base_url = "{base}/v1"
api_key_env = "BENCH_UPSTREAM_KEY"
[models.bench]
upstream = "mock"
"""

KEY = "bench-key"
# A cloud upstream has a key, and every answer is scanned for it (and for
# the client keys): the benchmark measures that path too.
UPSTREAM_KEY = "sk-bench-upstream-7Qz9Xk2Lm4Pn8Rt0Vb6Yc3"
GOVERNED_KEYS = """
[[keys]]
name = "bench"
key_env = "BENCH_KEY"
rpm = 4000000000
tpm = 4000000000
daily_tokens = 1000000000000000
daily_cost_usd = 1000000000.0
"""

WRK_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer bench-key"
wrk.body = '{body}'
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{{"requests":%d,"duration_us":%d,"errors":%d,"status_errors":%d,"p50_us":%d,"p99_us":%d}}\\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout,
    e.status, latency:percentile(50), latency:percentile(99)))
end
"""




def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def memory_kib(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                k, v = line.split(":")
                out[k] = int(v.split()[0])
    return out


def wrk(url, lua, conns, seconds):
    threads = 1 if conns == 1 else 2
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "-s", lua, url],
        capture_output=True, text=True, timeout=seconds + 30,
    ).stdout
    line = [l for l in out.splitlines() if l.startswith("{")][-1]
    r = json.loads(line)
    r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
    return r


def ttft(url, conns, seconds):
    out = subprocess.run(
        ["cargo", "bench", "-q", "--bench", "ttft", "--", "--url", url, "--model", "bench",
         "--concurrency", str(conns), "--seconds", str(seconds)],
        capture_output=True, text=True, cwd=ROOT, timeout=seconds + 600,
    )
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if not lines:
        sys.exit(f"ttft client failed: {out.stderr[-2000:]}")
    return json.loads(lines[-1])


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--total", type=int, default=100_000, help="requests before the final RSS reading")
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk not found (Debian: apt-get install wrk)")
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
        subprocess.run(["cargo", "bench", "-q", "--bench", "ttft", "--no-run"], cwd=ROOT, check=True)

    os.environ["BENCH_UPSTREAM_KEY"] = UPSTREAM_KEY
    tmp = tempfile.mkdtemp(prefix="conclave-bench-")
    with open(os.path.join(tmp, "mock.toml"), "w") as f:
        f.write(MOCK_TOML)
    mock, mock_base = start(["mock", "--listen", "127.0.0.1:0", "--config", os.path.join(tmp, "mock.toml")], tmp, "mock")
    with open(os.path.join(tmp, "gateway.toml"), "w") as f:
        f.write(GATEWAY_TOML.format(base=mock_base, server_extra="", keys=""))
    gw, gw_base = start(["serve", "--listen", "127.0.0.1:0", "--config", os.path.join(tmp, "gateway.toml")], tmp, "gateway")
    with open(os.path.join(tmp, "governed.toml"), "w") as f:
        state = os.path.join(tmp, "state.db")
        f.write(GATEWAY_TOML.format(base=mock_base, server_extra=f'state_path = "{state}"', keys=GOVERNED_KEYS))
    os.environ["BENCH_KEY"] = KEY
    gov, gov_base = start(["serve", "--listen", "127.0.0.1:0", "--config", os.path.join(tmp, "governed.toml")],
                          tmp, "governed")
    paths = {"direct": mock_base, "conclave": gw_base, "governed": gov_base}
    url = lambda base: base + "/v1/chat/completions"

    luas = {}
    for scenario, stream in (("whole", False), ("stream", True)):
        body = {"model": "bench", "messages": [{"role": "user", "content": PROMPT}]}
        if stream:
            body["stream"] = True
        path = os.path.join(tmp, scenario + ".lua")
        with open(path, "w") as f:
            f.write(WRK_LUA.format(body=json.dumps(body, separators=(",", ":"))))
        luas[scenario] = path

    gw_requests = 0
    results = {}  # (scenario, conns, path) -> list of runs
    cpu = {}  # (scenario, conns) -> list of ms CPU per 1000 requests
    try:
        for r in range(a.rounds):
            for scenario in ("whole", "stream"):
                for conns in (1, 64):
                    for name in ("direct", "conclave", "governed"):
                        before = cpu_seconds(gw.pid)
                        run = wrk(url(paths[name]), luas[scenario], conns, a.seconds)
                        if name == "conclave":
                            gw_requests += run["requests"]
                            used = cpu_seconds(gw.pid) - before
                            cpu.setdefault((scenario, conns), []).append(used * 1000 / run["requests"] * 1000)
                        results.setdefault((scenario, conns, name), []).append(run)
                        if run["errors"] or run["status_errors"]:
                            print(f"warning: {name} {scenario} c{conns}: {run['errors']} socket errors, "
                                  f"{run['status_errors']} bad statuses", file=sys.stderr)
            for conns in (1, 64):
                for name in ("direct", "conclave"):
                    t = ttft(url(paths[name]), conns, a.seconds)
                    if name == "conclave":
                        gw_requests += t["requests"]
                    results.setdefault(("ttft", conns, name), []).append(t)
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)

        while gw_requests < a.total:
            gw_requests += wrk(url(gw_base), luas["whole"], 64, a.seconds)["requests"]
        mem = memory_kib(gw.pid)
    finally:
        gw.terminate()
        gov.terminate()
        mock.terminate()

    def added(scenario, conns, key, base="direct", path="conclave"):
        d = results[(scenario, conns, base)]
        c = results[(scenario, conns, path)]
        return med([ci[key] - di[key] for di, ci in zip(d, c)]) / 1000

    rows = []
    print()
    print(f"conclave overhead vs direct (median of {a.rounds} rounds, {a.seconds}s runs, wrk, loopback)")
    print(f"{'scenario':<8} {'conns':>5} {'direct rps':>11} {'conclave rps':>13} {'ratio':>6} "
          f"{'direct p50':>11} {'added p50':>10} {'added p99':>10} {'CPU ms/1k':>10}")
    for scenario in ("whole", "stream"):
        for conns in (1, 64):
            d = med([x["rps"] for x in results[(scenario, conns, "direct")]])
            c = med([x["rps"] for x in results[(scenario, conns, "conclave")]])
            row = {
                "scenario": scenario, "conns": conns, "direct_rps": d, "conclave_rps": c,
                "direct_p50_ms": med([x["p50_us"] for x in results[(scenario, conns, "direct")]]) / 1000,
                "added_p50_ms": added(scenario, conns, "p50_us"),
                "added_p99_ms": added(scenario, conns, "p99_us"),
                "cpu_ms_per_1k": med(cpu[(scenario, conns)]),
            }
            rows.append(row)
            print(f"{scenario:<8} {conns:>5} {d:>11.0f} {c:>13.0f} {c / d:>6.2f} "
                  f"{row['direct_p50_ms']:>9.3f}ms {row['added_p50_ms']:>8.3f}ms {row['added_p99_ms']:>8.3f}ms "
                  f"{row['cpu_ms_per_1k']:>10.1f}")
    print()
    print(f"{'TTFT':<8} {'conns':>5} {'direct p50':>11} {'conclave p50':>13} {'added p50':>10} {'added p99':>10}")
    ttft_rows = []
    for conns in (1, 64):
        d50 = med([x["ttft_p50_us"] for x in results[("ttft", conns, "direct")]]) / 1000
        c50 = med([x["ttft_p50_us"] for x in results[("ttft", conns, "conclave")]]) / 1000
        row = {"conns": conns, "direct_p50_ms": d50, "conclave_p50_ms": c50,
               "added_p50_ms": added("ttft", conns, "ttft_p50_us"),
               "added_p99_ms": added("ttft", conns, "ttft_p99_us")}
        ttft_rows.append(row)
        print(f"{'stream':<8} {conns:>5} {d50:>9.3f}ms {c50:>11.3f}ms {row['added_p50_ms']:>8.3f}ms "
              f"{row['added_p99_ms']:>8.3f}ms")
    print()
    print("governors on (key with rpm, tpm, daily tokens and cost, state store) vs off, same rounds")
    print(f"{'scenario':<8} {'conns':>5} {'off rps':>10} {'on rps':>10} {'ratio':>6} {'added p50':>10} {'added p99':>10}")
    gov_rows = []
    for scenario in ("whole", "stream"):
        for conns in (1, 64):
            off = med([x["rps"] for x in results[(scenario, conns, "conclave")]])
            on = med([x["rps"] for x in results[(scenario, conns, "governed")]])
            row = {"scenario": scenario, "conns": conns, "off_rps": off, "on_rps": on,
                   "added_p50_ms": added(scenario, conns, "p50_us", "conclave", "governed"),
                   "added_p99_ms": added(scenario, conns, "p99_us", "conclave", "governed")}
            gov_rows.append(row)
            print(f"{scenario:<8} {conns:>5} {off:>10.0f} {on:>10.0f} {on / off:>6.2f} "
                  f"{row['added_p50_ms']:>8.3f}ms {row['added_p99_ms']:>8.3f}ms")
    rss = mem.get("VmRSS", 0) / 1024
    peak = mem.get("VmHWM", 0) / 1024
    print()
    print(f"conclave RSS after {gw_requests} requests: {rss:.1f} MiB (peak {peak:.1f} MiB, "
          f"{peak * 1024 / gw_requests * 1000:.1f} KiB per 1,000 requests at peak)")
    one = {r["scenario"]: r for r in rows if r["conns"] == 1}
    checks = [
        ("added p50 < 0.3 ms (whole, 1 conn)", one["whole"]["added_p50_ms"] < 0.3),
        ("added p99 < 2 ms (whole, 1 conn)", one["whole"]["added_p99_ms"] < 2.0),
        ("added TTFT p50 < 1 ms (1 conn)", ttft_rows[0]["added_p50_ms"] < 1.0),
        ("RSS < 50 MiB after the run", rss < 50),
        ("governors add < 0.05 ms p50 (whole, 1 conn)",
         [r for r in gov_rows if r["scenario"] == "whole" and r["conns"] == 1][0]["added_p50_ms"] < 0.05),
    ]
    for name, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    os.makedirs(os.path.join(ROOT, "benches", "results"), exist_ok=True)
    out = os.path.join(ROOT, "benches", "results", time.strftime("overhead-%Y%m%d-%H%M%S.json"))
    with open(out, "w") as f:
        json.dump({"rows": rows, "ttft": ttft_rows, "governors": gov_rows, "rss_mib": rss, "peak_rss_mib": peak,
                   "requests": gw_requests, "raw": {"|".join(map(str, k)): v for k, v in results.items()}}, f, indent=1)
    print(f"\nraw results: {out}")


if __name__ == "__main__":
    main()
