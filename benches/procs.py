"""Starting and stopping the release `conclave` binary for the benchmarks."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "conclave")


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
