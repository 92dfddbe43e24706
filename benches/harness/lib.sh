# Shared by compare.sh and stream-cpu.sh (sourced, not run): the ports, starting the nginx
# upstream and proxy hop from this folder's configs, waiting for them, and stopping only the
# processes this script started (by PID). Ports default to the reference harness's; set
# UPSTREAM_PORT, PROXY_PORT, CONCLAVE_PORT, STREAM_PORT to run beside another copy of it.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
UPSTREAM_PORT=${UPSTREAM_PORT:-18090}
PROXY_PORT=${PROXY_PORT:-18095}
CONCLAVE_PORT=${CONCLAVE_PORT:-18091}
STREAM_PORT=${STREAM_PORT:-18094}
ROUNDS=${ROUNDS:-3}
bin=${CONCLAVE_BIN:-$root/target/release/conclave}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

need() { command -v "$1" >/dev/null || { echo "$1 not found (Debian: apt-get install $2)" >&2; exit 1; }; }
need wrk wrk
need nginx nginx-light
need curl curl
need python3 python3
[ -x "$bin" ] || { echo "no conclave binary at $bin (cargo build --release, or set CONCLAVE_BIN)" >&2; exit 1; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
check_ports() { for p in "$@"; do port_free "$p" || { echo "port $p is in use: another benchmark running? (set *_PORT)" >&2; exit 1; }; done; }

# start_nginx NAME: runs this folder's nginx-NAME.conf on our ports, its pid file and error
# log in $tmp (nothing shared with another run), in the foreground (daemon off) as our child.
start_nginx() {
  sed -e "s/127\.0\.0\.1:18090/127.0.0.1:$UPSTREAM_PORT/; s/127\.0\.0\.1:18095/127.0.0.1:$PROXY_PORT/" \
      -e "s#^pid .*#pid $tmp/nginx-$1.pid;#; s#^error_log [^ ]*#error_log $tmp/nginx-$1.err#" \
      "$here/nginx-$1.conf" > "$tmp/nginx-$1.conf"
  nginx -e "$tmp/nginx-$1.err" -c "$tmp/nginx-$1.conf" & pids+=($!)
}

# ticks PID...: the CPU time (user + system clock ticks) of these processes and their
# children, as the reference harness counts it (an nginx hop's CPU is its worker's).
ticks() { local s=0 p; for p in "$@" $(for q in "$@"; do pgrep -P "$q"; done); do
  s=$((s + $(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done; echo "$s"; }

# cpu_c64 PORT PID SECS: one wrk run at c=64 (the harness's whole-request POST) against the hop
# on PORT; prints the CPU µs per request of PID and its children over it (floor.sh, ab.sh).
cpu_c64() {
  local t0 n; t0=$(ticks "$2")
  BENCH_KEY=none BENCH_MODEL=bench-model wrk -t1 -c64 -d"${3}s" -s "$here/post.lua" \
    "http://127.0.0.1:$1/v1/chat/completions" > "$tmp/wrk.out" 2>&1
  n=$(awk '/requests in/{print $1}' "$tmp/wrk.out")
  awk -v t="$(( $(ticks "$2") - t0 ))" -v hz="$(getconf CLK_TCK)" -v n="$n" 'BEGIN{printf "%.2f", t / hz / n * 1e6}'
}

# ratio_medians FILE NAME...: FILE holds lines "round nginx_us hop_us..."; prints each named
# hop's CPU per request over the nginx hop's at c=64: the median, and each round's.
ratio_medians() {
  python3 - "$@" <<'PY'
import sys, statistics as st
rows = [[float(x) for x in l.split()[1:]] for l in open(sys.argv[1]) if l.strip()]
for i, name in enumerate(sys.argv[2:], 1):
    ratios = [r[i] / r[0] for r in rows]
    print(f"{name:<8} CPU per request / the nginx hop's, c=64: {st.median(ratios):.3f}"
          f"   (rounds: {' '.join(f'{x:.3f}' for x in ratios)})")
PY
}

# wait_up URL...: until every URL answers 2xx (at most 30 s).
wait_up() {
  for _ in $(seq 1 150); do
    ok=1; for u in "$@"; do curl -sf -o /dev/null "$u" || ok=0; done
    [ $ok = 1 ] && return 0; sleep 0.2
  done
  echo "not up after 30 s: $*" >&2; exit 1
}

# start_conclave PORT PATH [EXTRA]: conclave on PORT, its model bench-model on the nginx upstream's
# PATH (`/v1` for whole answers, `/sse17/v1` for 17-event streams) and bench-stream on its
# `/sse/v1`; EXTRA (printf's %b: \n is a newline) appended to its config; its pid in $cpid.
start_conclave() {
  cat > "$tmp/conclave-$1.toml" <<TOML
[server]
listen = "127.0.0.1:$1"
[upstreams.bench]
kind = "openai"
base_url = "http://127.0.0.1:$UPSTREAM_PORT$2"
[upstreams.benchsse]
kind = "openai"
base_url = "http://127.0.0.1:$UPSTREAM_PORT/sse/v1"
[models.bench-model]
upstream = "bench"
[models.bench-stream]
upstream = "benchsse"
model = "bench-model"
TOML
  [ -n "${3:-}" ] && printf '%b\n' "$3" >> "$tmp/conclave-$1.toml"
  "$bin" serve --config "$tmp/conclave-$1.toml" >"$tmp/conclave-$1.log" 2>&1 & cpid=$!; pids+=($cpid)
}
