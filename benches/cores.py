#!/usr/bin/env python3
"""The hop on equal cores: conclave against nginx as a plain proxy, each pinned to the same
cores of a quiet many-core machine, the way issue 46's table was measured.

The nginx upstream of the reference harness (benches/harness/nginx-upstream.conf) runs on
its own cores (--upstream, 4 workers by default), wrk on others (--wrk, one thread a core,
--conns connections), and the hop under test on N more (--hop-cores, say 1,2,4): nginx with
N worker processes (nginx-proxy.conf otherwise unchanged), each conclave build with its
default of one worker a core it may run on. Per N, each round runs every hop once, in turn:

  whole   requests/s, the hop's CPU per request (user + system time of the process and its
          children over the run, and each apart: the ratio that does not depend on the load
          generator), and each build's rps and CPU against nginx's in the same round; medians
          of the rounds
  c=1     one connection, hop on the first N: the p50 each hop adds over direct
  stream  17-event SSE answers (stream-cpu.sh's request) on the largest N: CPU per event

    cargo build --release
    python3 benches/cores.py [--bin new=target/release/conclave --bin old=PATH] \\
        [--hop-cores 1,2,4] [--rounds 3] [--seconds 4]

Needs Debian's wrk and nginx-light (on PATH) and enough cores for the layout (16 by
default: upstream 0-3, hop from 4, wrk 8-15). Loopback only (ports from --port-base); every
run is bounded in time and it stops what it started, by PID, on exit.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import nginxbench as nb
from procs import ROOT, TICK, med

CONCLAVE_TOML = """
[upstreams.bench]
kind = "openai"
base_url = "http://127.0.0.1:{port}/v1"
[upstreams.sse]
kind = "openai"
base_url = "http://127.0.0.1:{port}/sse17/v1"
[models.bench-model]
upstream = "bench"
[models.bench-stream]
upstream = "sse"
model = "bench-model"
"""
STREAM_LUA = nb.STREAM_LUA.replace('"model":"bench-model"', '"model":"bench-stream"')


def cores(spec):
    """'0-3' or '4,5' -> a set of core numbers."""
    out = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def pinned(cpus):
    """A preexec_fn that pins the child (and what it starts) to CPUS."""
    return lambda: os.sched_setaffinity(0, cpus)


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                if d.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d))
        except OSError:
            pass
    return out


def cpu_of(pid):
    """(user, system) CPU seconds of PID and its children (nginx's master and workers)."""
    user = system = 0
    for p in [pid, *children(pid)]:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        user, system = user + int(fields[11]), system + int(fields[12])
    return user / TICK, system / TICK


class Hops:
    """nginx proxy and each conclave build, started pinned to one set of cores."""

    def __init__(self, a, tmp, hop_cpus, n):
        self.procs, self.urls = {}, {}
        port = a.port_base + 10 + 10 * n
        self.procs["nginx"] = nb.start_nginx("proxy", tmp, a.port_base, port, workers=n, preexec_fn=pinned(hop_cpus))
        self.urls["nginx"] = f"http://127.0.0.1:{port}"
        conf = os.path.join(tmp, "conclave.toml")
        for i, (name, path) in enumerate(a.bins):
            listen = f"127.0.0.1:{port + 1 + i}"
            log = open(os.path.join(tmp, f"{name}-{n}.log"), "w")
            self.procs[name] = subprocess.Popen(
                [path, "serve", "--listen", listen, "--config", conf], stdout=log, stderr=log,
                env=dict(os.environ, RUST_LOG="warn"), preexec_fn=pinned(hop_cpus))
            self.urls[name] = f"http://{listen}"
        nb.wait_up(*(u + "/v1/models" for u in self.urls.values()))

    def stop(self):
        for p in self.procs.values():
            p.terminate()
            p.wait()


def run(hops, name, path, lua, conns, a, wrk_cpus, threads):
    pid = hops.procs[name].pid
    (u0, s0) = cpu_of(pid)
    r = nb.wrk(hops.urls[name] + path, lua, conns, a.seconds, threads=threads, preexec_fn=pinned(wrk_cpus))
    (u1, s1) = cpu_of(pid)
    per = 1e6 / max(r["requests"], 1)
    r["user_us"], r["sys_us"] = (u1 - u0) * per, (s1 - s0) * per
    r["cpu_us"] = r["user_us"] + r["sys_us"]
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", default=[], help="NAME=PATH of a build (repeatable)")
    ap.add_argument("--hop-cores", default="1,2,4")
    ap.add_argument("--upstream", default="0-3", help="cores of the nginx upstream")
    ap.add_argument("--hop-first", type=int, default=4, help="first core of the hop")
    ap.add_argument("--wrk", default="8-15", help="cores of wrk (one thread each)")
    ap.add_argument("--conns", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--port-base", type=int, default=18300)
    ap.add_argument("--json", help="write every run here")
    a = ap.parse_args()
    a.bins = [tuple(b.split("=", 1)) for b in a.bin] or [("conclave", os.path.join(ROOT, "target/release/conclave"))]
    ns = [int(n) for n in a.hop_cores.split(",")]
    up_cpus, wrk_cpus = cores(a.upstream), cores(a.wrk)
    have = os.sched_getaffinity(0)
    need = up_cpus | wrk_cpus | set(range(a.hop_first, a.hop_first + max(ns)))
    if not need <= have:
        sys.exit(f"this layout needs cores {sorted(need)}; this machine has {sorted(have)}")
    nb.need_tools()
    names = ["nginx"] + [n for n, _ in a.bins]
    tmp = nb.tmpdir()
    with open(os.path.join(tmp, "conclave.toml"), "w") as f:
        f.write(CONCLAVE_TOML.format(port=a.port_base))
    lua = nb.lua_files(tmp)
    stream_lua = os.path.join(tmp, "stream.lua")
    with open(stream_lua, "w") as f:
        f.write(STREAM_LUA + nb.DONE_LUA)
    res = {}  # (scenario, n, name) -> [runs]
    upstream = nb.start_nginx("upstream", tmp, a.port_base, a.port_base + 5, workers=len(up_cpus),
                              preexec_fn=pinned(up_cpus))
    try:
        nb.wait_up(f"http://127.0.0.1:{a.port_base}/v1/models")
        direct = f"http://127.0.0.1:{a.port_base}/v1/chat/completions"
        for n in ns:
            hop_cpus = set(range(a.hop_first, a.hop_first + n))
            hops = Hops(a, tmp, hop_cpus, n)
            try:
                for r in range(a.rounds):
                    for name in names:
                        res.setdefault(("whole", n, name), []).append(
                            run(hops, name, "/v1/chat/completions", lua["whole"], a.conns, a, wrk_cpus, len(wrk_cpus)))
                    if n == ns[0]:
                        d = nb.wrk(direct, lua["whole"], 1, a.seconds, preexec_fn=pinned(wrk_cpus))
                        res.setdefault(("c1", n, "direct"), []).append(d)
                        for name in names:
                            res.setdefault(("c1", n, name), []).append(
                                run(hops, name, "/v1/chat/completions", lua["whole"], 1, a, wrk_cpus, 1))
                    if n == ns[-1]:
                        for name in names:
                            path = "/sse17/v1/chat/completions" if name == "nginx" else "/v1/chat/completions"
                            res.setdefault(("stream", n, name), []).append(
                                run(hops, name, path, stream_lua, a.conns, a, wrk_cpus, len(wrk_cpus)))
                    print(f"hop on {n} cores: round {r + 1}/{a.rounds}", file=sys.stderr, flush=True)
            finally:
                hops.stop()
    finally:
        upstream.terminate()
        upstream.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    report(a, ns, names, res)


def report(a, ns, names, res):
    col = lambda key, name, k: [x[k] for x in res[key[:2] + (name,)]]

    def vs(key, name, k):  # median over rounds of NAME's K / nginx's K in the same round
        return med(x / y for x, y in zip(col(key, name, k), col(key, "nginx", k)))

    print(f"\nhop pinned to N cores; upstream on {a.upstream}, wrk -t{len(cores(a.wrk))} on {a.wrk}, "
          f"c={a.conns}; medians of {a.rounds} rounds of {a.seconds} s")
    print(f"{'N':>2} {'hop':<10} {'rps':>9} {'÷nginx':>7} {'CPU µs/req':>11} {'÷nginx':>7} {'user+sys µs':>12} {'p50':>9}")
    for n in ns:
        for name in names:
            k = ("whole", n)
            rel = name != "nginx"
            print(f"{n:>2} {name:<10} {med(col(k, name, 'rps')):>9.0f} {vs(k, name, 'rps') if rel else 1:>7.2f} "
                  f"{med(col(k, name, 'cpu_us')):>11.1f} {vs(k, name, 'cpu_us') if rel else 1:>7.2f} "
                  f"{med(col(k, name, 'user_us')):>6.1f}+{med(col(k, name, 'sys_us')):<5.1f} "
                  f"{med(col(k, name, 'p50_us')) / 1000:>7.3f}ms")
    k = ("c1", ns[0])
    direct = col(k, "direct", "p50_us")
    print(f"\nc=1, hop on {ns[0]} core(s): direct p50 {med(direct):.0f} µs")
    for name in names:
        added = med(x - d for x, d in zip(col(k, name, "p50_us"), direct))
        print(f"   {name:<10} p50 {med(col(k, name, 'p50_us')):>5.0f} µs, added {added:>4.0f} µs, "
              f"CPU {med(col(k, name, 'cpu_us')):.1f} µs/req")
    k = ("stream", ns[-1])
    print(f"\nstreams (17 events), hop on {ns[-1]} cores, c={a.conns}")
    for name in names:
        per_event = med(col(k, name, "cpu_us")) / nb.STREAM_EVENTS
        print(f"   {name:<10} {med(col(k, name, 'rps')):>8.0f} streams/s, CPU {per_event:.2f} µs/event")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"|".join(map(str, k)): v for k, v in res.items()}, f, indent=1)


if __name__ == "__main__":
    main()
