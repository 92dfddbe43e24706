"""What the benchmarks share: starting and stopping the release `conclave`
binary, and reading the attempts of its event log."""

import json
import os
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
