"""Cache misses per request at 64 connections, under valgrind's callgrind cache simulator:
instructions, and the reads and writes that miss a last-level cache of 1 MiB (one core's
L2 on the development box), per whole request. The wall clock of a shared 2-core box moves
by more than most changes; this figure does not, and at 64 connections it is what the CPU
time follows: a request's own memory (its futures, records, buffers) is out of the cache by
the time its next step runs.

    python3 benches/cachesim.py [BIN ...]    (default: target/release/conclave)

One serving thread (`workers = 1`: callgrind runs one thread at a time) in front of the
zero-delay nginx upstream, wrk at 64 connections for 4 s to warm it, then 8 s counted.
Needs Debian's valgrind, nginx-light and wrk. Loopback only; stops what it started."""

import os
import re
import shutil
import subprocess
import sys

import nginxbench as nb

UPSTREAM = 18170
EVENTS = ["Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw"]


def measure(binary, tmp, seconds=8):
    """Per-request counts for one build: {event: count}, and the requests counted."""
    port = UPSTREAM + 3
    conf = os.path.join(tmp, "cachesim.toml")
    with open(conf, "w") as f:
        f.write(f'[server]\nlisten = "127.0.0.1:{port}"\nworkers = 1\n'
                f'[upstreams.bench]\nkind = "openai"\nbase_url = "http://127.0.0.1:{UPSTREAM}/v1"\n'
                '[models.bench-model]\nupstream = "bench"\n')
    out = os.path.join(tmp, "cachesim.out")
    log = open(out + ".log", "w")
    g = subprocess.Popen(["valgrind", "--tool=callgrind", "--cache-sim=yes", "--LL=1048576,16,64",
                          f"--callgrind-out-file={out}", binary, "serve", "--config", conf],
                         stdout=subprocess.DEVNULL, stderr=log)
    lua = nb.lua_files(tmp)["whole"]
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    env = dict(os.environ, BENCH_KEY="none", BENCH_MODEL="bench-model")
    try:
        nb.wait_up(f"http://127.0.0.1:{port}/healthz", seconds=120)
        subprocess.run(["wrk", "-t1", "-c64", "-d4s", "-s", lua, url], env=env, capture_output=True)
        subprocess.run(["callgrind_control", "-z", str(g.pid)], check=True, capture_output=True)
        text = subprocess.run(["wrk", "-t1", "-c64", f"-d{seconds}s", "-s", lua, url], env=env,
                              capture_output=True, text=True).stdout
        subprocess.run(["callgrind_control", "-d", str(g.pid)], check=True, capture_output=True)
    finally:
        g.terminate()
        g.wait()
    n = int(re.search(r"(\d+) requests in", text).group(1))
    totals = None
    with open(out + ".1") as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                totals = [int(x) for x in line.split()[1:]]
    return {e: v / n for e, v in zip(EVENTS, totals)}, n


def main():
    nb.need_tools()
    if not shutil.which("valgrind"):
        sys.exit("needs valgrind (Debian: valgrind)")
    binaries = sys.argv[1:] or [os.path.join(os.getcwd(), "target/release/conclave")]
    tmp = nb.tmpdir()
    p = nb.start_nginx("upstream", tmp, UPSTREAM, UPSTREAM + 5)
    try:
        for b in binaries:
            d, n = measure(b, tmp)
            print(f"{b}: {n} requests; a request: {d['Ir']:.0f} instructions, "
                  f"{d['DLmr']:.1f} reads and {d['DLmw']:.1f} writes missing 1 MiB "
                  f"({d['D1mr']:.0f} and {d['D1mw']:.0f} missing L1)", flush=True)
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
