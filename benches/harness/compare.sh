#!/usr/bin/env bash
# Whole requests, one run, three paths in front of the same zero-delay nginx upstream
# (nginx-upstream.conf): direct (the physical limit of the box), nginx as a plain reverse
# proxy (nginx-proxy.conf: what one well-built hop costs) and conclave; wrk -t1 at c=1 and
# c=64 with post.lua. Each round runs every path once; ROUNDS rounds (default 3) then prints
# the medians, conclave's rps / nginx proxy's rps (per round, then the median), the p50
# that conclave and the nginx hop add over direct, and the CPU time per request of the nginx
# hop and of conclave (user + system ticks of each process and its children over its run:
# fair on a busy box, where rps depends on what wrk and the upstream take) with their ratio.
# The same settings and bodies as the reference harness, so the figures agree with it.
#
#   cargo build --release
#   ROUNDS=3 bash benches/harness/compare.sh [seconds per run, default 10]
#
# Needs Debian's wrk, nginx-light, curl, python3. CONCLAVE_BIN measures another build.
# Loopback only (ports 18090/18095/18091, or UPSTREAM_PORT/PROXY_PORT/CONCLAVE_PORT);
# every run is bounded in time and the script stops what it started on exit.
set -u
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"
secs=${1:-10}
check_ports "$UPSTREAM_PORT" "$PROXY_PORT" "$CONCLAVE_PORT"
start_nginx upstream
start_nginx proxy; proxy_pid=${pids[-1]}
start_conclave "$CONCLAVE_PORT" /v1
wait_up "http://127.0.0.1:$UPSTREAM_PORT/v1/models" "http://127.0.0.1:$PROXY_PORT/v1/models" \
  "http://127.0.0.1:$CONCLAVE_PORT/healthz"

run() { # name url conc round [pid whose CPU per request is counted]
  local t0; t0=$(ticks ${5:-})
  BENCH_KEY=none BENCH_MODEL=bench-model wrk -t1 -c"$3" -d"${secs}s" --latency -s "$here/post.lua" "$2" > "$tmp/wrk.out" 2>&1
  awk -v n="$1" -v c="$3" -v r="$4" -v t="$(( $(ticks ${5:-}) - t0 ))" -v hz="$(getconf CLK_TCK)" -v counted="${5:-}" '
      function ms(s) { if (s ~ /us$/) return s/1000; if (s ~ /ms$/) return s+0; if (s ~ /s$/) return s*1000; return s }
      /^ +[0-9]+ requests in/{q=$1} /Requests\/sec/{rps=$2} /^ +50%/{p50=$2} /^ +99%/{p99=$2} /Non-2xx/{bad=$NF} /Socket errors/{err=$0}
      END{cpu = (counted != "" && q > 0) ? t / hz / q * 1e6 : -1
          printf "%-10s c=%-3s rps=%-10s p50=%-9s p99=%-9s non2xx=%s%s%s\n", n, c, rps, p50, p99, (bad==""?0:bad),
            (cpu < 0 ? "" : sprintf(" cpu_us_per_req=%.1f", cpu)), (err==""?"":"  " err)
          printf "%s %s %s %s %s %s %s\n", r, n, c, rps, ms(p50), ms(p99), cpu > "/dev/stderr"}' "$tmp/wrk.out" 2>>"$tmp/results"
}
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r/$ROUNDS (${secs}s runs)"
  for c in 1 64; do
    run direct     "http://127.0.0.1:$UPSTREAM_PORT/v1/chat/completions" "$c" "$r"
    run nginxproxy "http://127.0.0.1:$PROXY_PORT/v1/chat/completions" "$c" "$r" "$proxy_pid"
    run conclave   "http://127.0.0.1:$CONCLAVE_PORT/v1/chat/completions" "$c" "$r" "$cpid"
  done
done
echo "conclave RSS after run: $(ps -o rss= -p "$cpid" 2>/dev/null | tr -d ' ') KiB"
python3 - "$tmp/results" "$ROUNDS" "$secs" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
runs = {}  # (name, c) -> {round: (rps, p50, p99)}
for r, n, c, rps, p50, p99, cpu in rows:
    runs.setdefault((n, int(c)), {})[int(r)] = (float(rps), float(p50), float(p99), float(cpu))
med = st.median
print(f"\nmedians of {sys.argv[2]} rounds ({sys.argv[3]}s runs, wrk -t1, whole requests)")
for c in (1, 64):
    for n in ("direct", "nginxproxy", "conclave"):
        v = list(runs[(n, c)].values())
        cpu = [x[3] for x in v if x[3] >= 0]
        print(f"{n:<10} c={c:<3} rps={med(x[0] for x in v):<9.0f} p50={med(x[1] for x in v):.3f}ms "
              f"p99={med(x[2] for x in v):.3f}ms" + (f" cpu_us_per_req={med(cpu):.1f}" if cpu else ""))
def per_round(f, a, b, c):
    return [f(runs[(a, c)][r], runs[(b, c)][r]) for r in runs[(a, c)] if r in runs[(b, c)]]
def show(label, xs, fmt):
    print(f"{label}: {fmt.format(med(xs))}   (rounds: {' '.join(fmt.format(x) for x in xs)})")
print()
for c in (64, 1):
    show(f"conclave CPU per request / nginx proxy's, c={c}", per_round(lambda a, b: a[3] / b[3], "conclave", "nginxproxy", c), "{:.2f}")
    show(f"conclave rps / nginx proxy rps, c={c}", per_round(lambda a, b: a[0] / b[0], "conclave", "nginxproxy", c), "{:.2f}")
    show(f"conclave rps / direct rps, c={c}", per_round(lambda a, b: a[0] / b[0], "conclave", "direct", c), "{:.2f}")
show("conclave added p50 over direct, c=1", per_round(lambda a, b: a[1] - b[1], "conclave", "direct", 1), "{:.3f}ms")
show("nginx proxy added p50 over direct, c=1", per_round(lambda a, b: a[1] - b[1], "nginxproxy", "direct", 1), "{:.3f}ms")
PY
