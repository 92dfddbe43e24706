#!/usr/bin/env python3
"""Gateway overhead, measured the way the reference harness (benches/harness/) measures it.

One nginx upstream serving fixed answers (benches/harness/nginx-upstream.conf: whole
answers, and 17-event SSE answers with "usage":null on every chunk) and, in the same
rounds, every path in front of it:

  direct      wrk straight to nginx (the physical limit of the box)
  nginxproxy  nginx as a plain reverse proxy (nginx-proxy.conf): one well-built hop
  conclave    compare.sh's gateway (whole) / stream-cpu.sh's gateway (stream)
  governed    whole only: the same gateway with a key that has rpm, tpm, a daily token
              and cost budget (too high to refuse) and the SQLite state store on

wrk -t1 with the harness's requests (post.lua; stream-cpu.sh's streamed request), at 1
and 64 connections, --rounds rounds, medians of per-round figures. It prints requests/s,
conclave's rps / the nginx hop's, the p50/p99 each adds over direct, conclave's CPU per
1,000 requests (and per relayed event for streams), what the governors add, and
conclave's RSS after --total requests; then PASS/FAIL against issue 29's targets.
With --ttft it adds time-to-first-token runs (benches/ttft.rs; wrk sees whole responses
only); nginx sends a streamed answer in one write, so TTFT there is nearly the whole
answer. For the governors alone: benches/governed.py; the harness's own scripts:
benches/harness/compare.sh and stream-cpu.sh.

    cargo build --release
    python3 benches/overhead.py [--rounds 3] [--seconds 5] [--total 100000] [--ttft]

Needs Debian's wrk and nginx-light. CONCLAVE_BIN measures another build. Loopback only
(nginx on --port-base and --port-base + 5, the gateways on ports after --port-base);
every run is bounded in time and it stops what it started on exit.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import nginxbench as nb
from procs import ROOT, cpu_seconds, med, memory_kib, start, stop

WHOLE = ("direct", "nginxproxy", "conclave", "governed")
STREAM = ("direct", "nginxproxy", "conclave")


def ttft(url, conns, seconds):
    out = subprocess.run(
        ["cargo", "bench", "-q", "--bench", "ttft", "--", "--url", url, "--model", "bench-model",
         "--concurrency", str(conns), "--seconds", str(seconds)],
        capture_output=True, text=True, cwd=ROOT, timeout=seconds + 600,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        sys.exit(f"ttft client failed: {out.stderr[-2000:]}")
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--total", type=int, default=100_000, help="requests before the final RSS reading")
    ap.add_argument("--port-base", type=int, default=18110)
    ap.add_argument("--ttft", action="store_true", help="add TTFT runs (builds benches/ttft.rs)")
    a = ap.parse_args()
    nb.need_tools()
    if a.ttft:
        subprocess.run(["cargo", "bench", "-q", "--bench", "ttft", "--no-run"], cwd=ROOT, check=True)
    tmp = nb.tmpdir()
    up, hop = a.port_base, a.port_base + 5
    procs = []
    results = {}  # (scenario, conns, path) -> [run per round]
    gw_requests = 0
    try:
        procs.append(nb.start_nginx("upstream", tmp, up, hop))
        procs.append(nb.start_nginx("proxy", tmp, up, hop))
        confs = nb.gateway_configs(tmp, up)
        os.environ["BENCH_GOVERNED_KEY"] = nb.BENCH_KEY
        gw = {}
        for i, (name, conf) in enumerate((("conclave", "off"), ("governed", "on"), ("stream", "stream"))):
            p, base = start(["serve", "--listen", f"127.0.0.1:{up + 1 + i}", "--config", confs[conf]], tmp, name)
            procs.append(p)
            gw[name] = (p, base + "/v1/chat/completions")
        nb.wait_up(f"http://127.0.0.1:{up}/v1/models", f"http://127.0.0.1:{hop}/v1/models")
        lua = nb.lua_files(tmp)
        urls = {
            "whole": {"direct": f"http://127.0.0.1:{up}/v1/chat/completions",
                      "nginxproxy": f"http://127.0.0.1:{hop}/v1/chat/completions",
                      "conclave": gw["conclave"][1], "governed": gw["governed"][1]},
            "stream": {"direct": f"http://127.0.0.1:{up}/sse17/v1/chat/completions",
                       "nginxproxy": f"http://127.0.0.1:{hop}/sse17/v1/chat/completions",
                       "conclave": gw["stream"][1]},
        }
        for r in range(a.rounds):
            for scenario, paths in (("whole", WHOLE), ("stream", STREAM)):
                for conns in (1, 64):
                    for name in paths:
                        g = gw["stream" if scenario == "stream" else name][0] if name in ("conclave", "governed") else None
                        before = cpu_seconds(g.pid) if g else 0
                        run = nb.wrk(urls[scenario][name], lua[scenario], conns, a.seconds, key=nb.BENCH_KEY)
                        if g:
                            run["cpu_ms_per_1k"] = (cpu_seconds(g.pid) - before) * 1e6 / max(run["requests"], 1)
                        if scenario == "whole" and name == "conclave":
                            gw_requests += run["requests"]
                        results.setdefault((scenario, conns, name), []).append(run)
            if a.ttft:
                for conns in (1, 64):
                    for name in ("direct", "conclave"):
                        results.setdefault(("ttft", conns, name), []).append(ttft(urls["stream"][name], conns, a.seconds))
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
        while gw_requests < a.total:
            gw_requests += nb.wrk(gw["conclave"][1], lua["whole"], 64, a.seconds)["requests"]
        mem = memory_kib(gw["conclave"][0].pid)
    finally:
        for p in reversed(procs):
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)

    def col(scenario, conns, name, key):
        return [x[key] for x in results[(scenario, conns, name)]]

    def added(scenario, conns, key, name, base="direct"):
        """Median over rounds of NAME's KEY minus BASE's in the same round, in ms."""
        return med(c - d for d, c in zip(col(scenario, conns, base, key), col(scenario, conns, name, key))) / 1000

    def ratio(scenario, conns, name, base):
        return med(c / d for d, c in zip(col(scenario, conns, base, "rps"), col(scenario, conns, name, "rps")))

    rows = []
    print(f"\noverhead vs direct, nginx upstream (medians of {a.rounds} rounds, {a.seconds}s runs, wrk -t1, loopback)")
    print(f"{'scenario':<8} {'conns':>5} {'path':<10} {'rps':>8} {'÷direct':>8} {'÷nginx':>7} "
          f"{'p50':>9} {'added p50':>10} {'added p99':>10} {'CPU ms/1k':>10}")
    for scenario, paths in (("whole", WHOLE), ("stream", STREAM)):
        for conns in (1, 64):
            for name in paths:
                row = {"scenario": scenario, "conns": conns, "path": name,
                       "rps": med(col(scenario, conns, name, "rps")),
                       "p50_ms": med(col(scenario, conns, name, "p50_us")) / 1000}
                if name != "direct":
                    row.update(per_direct=ratio(scenario, conns, name, "direct"),
                               added_p50_ms=added(scenario, conns, "p50_us", name),
                               added_p99_ms=added(scenario, conns, "p99_us", name))
                if name not in ("direct", "nginxproxy"):
                    row.update(per_nginx=ratio(scenario, conns, name, "nginxproxy"),
                               cpu_ms_per_1k=med(col(scenario, conns, name, "cpu_ms_per_1k")))
                rows.append(row)
                f = lambda k, fmt, w, unit="": (format(row[k], fmt) + unit if k in row else "").rjust(w)
                print(f"{scenario:<8} {conns:>5} {name:<10} {row['rps']:>8.0f} {f('per_direct', '.2f', 8)} "
                      f"{f('per_nginx', '.2f', 7)} {row['p50_ms']:>7.3f}ms {f('added_p50_ms', '.3f', 10, 'ms')} "
                      f"{f('added_p99_ms', '.3f', 10, 'ms')} {f('cpu_ms_per_1k', '.1f', 10)}")
    stream64 = [r for r in rows if r["scenario"] == "stream" and r["conns"] == 64 and r["path"] == "conclave"][0]
    per_event_us = stream64["cpu_ms_per_1k"] / nb.STREAM_EVENTS
    print(f"\nconclave CPU per relayed event (stream, c=64, {nb.STREAM_EVENTS} events an answer): {per_event_us:.2f} us")
    gov = {c: {"added_p50_ms": added("whole", c, "p50_us", "governed", "conclave"),
               "added_p99_ms": added("whole", c, "p99_us", "governed", "conclave"),
               "rps_ratio": ratio("whole", c, "governed", "conclave")} for c in (1, 64)}
    print(f"governed - ungoverned p50: c=1 {gov[1]['added_p50_ms']:.3f}ms, c=64 {gov[64]['added_p50_ms']:.3f}ms; "
          f"governed / ungoverned rps c=64: {gov[64]['rps_ratio']:.2f}")
    ttft_rows = []
    if a.ttft:
        print(f"\n{'TTFT':<8} {'conns':>5} {'direct p50':>11} {'conclave p50':>13} {'added p50':>10} {'added p99':>10}")
        for conns in (1, 64):
            row = {"conns": conns,
                   "direct_p50_ms": med(col("ttft", conns, "direct", "ttft_p50_us")) / 1000,
                   "conclave_p50_ms": med(col("ttft", conns, "conclave", "ttft_p50_us")) / 1000,
                   "added_p50_ms": added("ttft", conns, "ttft_p50_us", "conclave"),
                   "added_p99_ms": added("ttft", conns, "ttft_p99_us", "conclave")}
            ttft_rows.append(row)
            print(f"{'stream':<8} {conns:>5} {row['direct_p50_ms']:>9.3f}ms {row['conclave_p50_ms']:>11.3f}ms "
                  f"{row['added_p50_ms']:>8.3f}ms {row['added_p99_ms']:>8.3f}ms")
    rss, peak = mem.get("VmRSS", 0) / 1024, mem.get("VmHWM", 0) / 1024
    print(f"\nconclave RSS after {gw_requests} requests: {rss:.1f} MiB (peak {peak:.1f} MiB)")
    whole = {(r["conns"], r["path"]): r for r in rows if r["scenario"] == "whole"}
    checks = [  # issue 29's targets
        ("conclave rps / nginx proxy rps >= 0.60 (whole, c=64)", whole[(64, "conclave")]["per_nginx"] >= 0.60),
        ("added p50 over direct <= 0.06 ms (whole, c=1)", whole[(1, "conclave")]["added_p50_ms"] <= 0.06),
        ("CPU per relayed event <= 5 us (stream, c=64)", per_event_us <= 5.0),
        ("governors add <= 0.05 ms p50 (whole, c=1)", gov[1]["added_p50_ms"] <= 0.05),
        ("RSS < 50 MiB after the run", rss < 50),
    ]
    for name, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    os.makedirs(os.path.join(ROOT, "benches", "results"), exist_ok=True)
    out = os.path.join(ROOT, "benches", "results", time.strftime("overhead-%Y%m%d-%H%M%S.json"))
    with open(out, "w") as f:
        json.dump({"rows": rows, "cpu_us_per_event": per_event_us, "governors": gov, "ttft": ttft_rows,
                   "rss_mib": rss, "peak_rss_mib": peak, "requests": gw_requests,
                   "raw": {"|".join(map(str, k)): v for k, v in results.items()}}, f, indent=1)
    print(f"\nraw results: {out}")


if __name__ == "__main__":
    main()
