#!/usr/bin/env bash
# Streamed requests: conclave's CPU per streamed request and per relayed SSE event, in front
# of nginx serving a 17-event answer (OpenAI-style "usage":null on every chunk, all in one
# write, so it measures per-event processing), side by side with the direct path: wrk -t1
# -c64. CPU is conclave's user+system ticks (/proc/PID/stat) over its run. Each round runs
# direct then conclave; ROUNDS rounds (default 3) then prints the medians. The same settings
# and bodies as the reference harness, so the figures agree with it.
#
#   cargo build --release
#   ROUNDS=3 bash benches/harness/stream-cpu.sh [seconds per run, default 5]
#
# Needs Debian's wrk, nginx-light, curl, python3. CONCLAVE_BIN measures another build.
# Loopback only (ports 18090/18094, or UPSTREAM_PORT/STREAM_PORT); every run is bounded in
# time and the script stops what it started on exit.
set -u
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"
secs=${1:-5}
check_ports "$UPSTREAM_PORT" "$STREAM_PORT"
start_nginx upstream
start_conclave "$STREAM_PORT" /sse17/v1
wait_up "http://127.0.0.1:$STREAM_PORT/healthz" "http://127.0.0.1:$UPSTREAM_PORT/v1/models"
cat > "$tmp/s.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"bench-model","stream":true,"messages":[{"role":"user","content":"Say hello."}]}'
LUA
run() { wrk -t1 -c64 -d"${secs}s" --latency -s "$tmp/s.lua" "$1" 2>&1 | awk '/^ +[0-9]+ requests in/{n=$1} /Requests\/sec/{r=$2} /^ +50%/{p=$2} END{print n, r, p}'; }
ticks() { awk '{print $14+$15}' "/proc/$cpid/stat"; }
for r in $(seq 1 "$ROUNDS"); do
  read -r dn dr dp < <(run "http://127.0.0.1:$UPSTREAM_PORT/sse17/v1/chat/completions")
  t0=$(ticks)
  read -r cn cr cp < <(run "http://127.0.0.1:$STREAM_PORT/v1/chat/completions")
  t1=$(ticks)
  echo "$r $dn $dr $dp $cn $cr $cp $t0 $t1" >> "$tmp/results"
done
python3 - "$tmp/results" "$(getconf CLK_TCK)" "$secs" <<'PY'
import sys, statistics as st
hz = int(sys.argv[2])
rows = []
for line in open(sys.argv[1]):
    r, dn, dr, dp, cn, cr, cp, t0, t1 = line.split()
    per_req = (int(t1) - int(t0)) / hz / max(int(cn), 1) * 1e6
    row = dict(dr=float(dr), cr=float(cr), share=float(cr) / float(dr), req=per_req, ev=per_req / 17)
    rows.append(row)
    print(f"round {r}: direct stream c=64 rps={row['dr']:.0f} p50={dp}; conclave rps={row['cr']:.0f} p50={cp} "
          f"share={row['share']:.1%}; CPU per streamed request {per_req:.1f} us, per relayed event {row['ev']:.2f} us")
m = lambda k: st.median(x[k] for x in rows)
print(f"\nmedians of {len(rows)} rounds ({sys.argv[3]}s runs, wrk -t1 -c64, 17-event streams)")
print(f"direct   stream c=64 rps={m('dr'):.0f}")
print(f"conclave stream c=64 rps={m('cr'):.0f} share={m('share'):.1%}")
print(f"conclave CPU per streamed request {m('req'):.1f} us, per relayed event {m('ev'):.2f} us")
PY
