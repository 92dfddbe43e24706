"""What the benchmarks share: starting and stopping the release `conclave`
binary, and reading the attempts of its event log."""

import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# CONCLAVE_BIN: another build to measure (say, the one before a change).
BIN = os.environ.get("CONCLAVE_BIN") or os.path.join(ROOT, "target", "release", "conclave")


def start(args, tmp, name):
    """Runs `conclave ARGS` with its stderr in TMP/NAME.log; returns the
    process and the base URL it announced on its first stdout line."""
    log = open(os.path.join(tmp, name + ".log"), "w")
    env = dict(os.environ, RUST_LOG="warn")
    p = subprocess.Popen([BIN] + args, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    line = p.stdout.readline().strip()
    if "http://" not in line:
        sys.exit(f"{name} did not start: {line}; see {log.name}")
    return p, line.rsplit(" ", 1)[-1]


def stop(p):
    """Ends a process this benchmark started, by its PID."""
    p.terminate()
    p.wait()


def attempts(events, n):
    """The `attempt` events of the log at EVENTS, once there are N of them."""
    for _ in range(300):
        try:
            with open(events) as f:
                rows = [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            rows = []
        rows = [r for r in rows if r.get("event") == "attempt"]
        if len(rows) >= n:
            return rows
        time.sleep(0.02)
    sys.exit(f"fewer than {n} attempt events in {events}")


def by_request(rows):
    """Attempt events grouped by their request id."""
    out = {}
    for r in rows:
        out.setdefault(r["request_id"], []).append(r)
    return out


# What the mock-upstream benchmarks (balance.py, state.py, telemetry.py) share: a
# `conclave mock` upstream, a gateway in front of it, and a wrk runner whose Lua `done`
# callback prints one JSON line.
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

# wrk's summary as one JSON line, appended to a wrk request script.
DONE_LUA = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"errors":%d,"status_errors":%d,"p50_us":%d,"p99_us":%d}\\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout,
    e.status, latency:percentile(50), latency:percentile(99)))
end
"""
WRK_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer bench-key"
wrk.body = '{body}'
""" + DONE_LUA.replace("{", "{{").replace("}", "}}")


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


def med(xs):
    xs = list(xs)
    return statistics.median(xs) if xs else float("nan")
