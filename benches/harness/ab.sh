#!/usr/bin/env bash
# Two conclave builds (or one build with two configs) against each other: the nginx hop and
# both builds up at once in front of the same zero-delay nginx upstream, wrk at c=64 turning
# between them (the two builds' order flips each round), and each hop's CPU per request
# counted as compare.sh counts it. Prints each round and the medians of the per-round ratios:
# each build against the nginx hop, and B against A. On a noisy box the B/A ratio of runs a
# few seconds apart moves far less than either build's figure from one run to the next.
#
#   ROUNDS=8 bash benches/harness/ab.sh OLD_BIN NEW_BIN [seconds per run, default 5]   (8 rounds by default)
#   EXTRA_B='[console]\nrecent_requests = 0' bash benches/harness/ab.sh BIN BIN
#
# EXTRA_A and EXTRA_B are appended to each build's config (printf's %b: \n is a newline).
# Needs what compare.sh needs. Loopback only (the upstream and nginx hop on compare.sh's
# ports, the builds on AB_PORT and AB_PORT + 1, default 18097); stops what it started.
set -u
[ $# -ge 2 ] || { echo "usage: $0 BIN_A BIN_B [seconds]" >&2; exit 2; }
a_bin=$1 b_bin=$2 secs=${3:-5} rounds=${ROUNDS:-8}
CONCLAVE_BIN=$a_bin
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"
[ -x "$b_bin" ] || { echo "no conclave binary at $b_bin (cargo build --release)" >&2; exit 1; }
ROUNDS=$rounds
AB_PORT=${AB_PORT:-18097}
check_ports "$UPSTREAM_PORT" "$PROXY_PORT" "$AB_PORT" "$((AB_PORT + 1))"

start_nginx upstream
start_nginx proxy; proxy_pid=${pids[-1]}
bin=$a_bin; start_conclave "$AB_PORT" /v1 "${EXTRA_A:-}"; a_pid=$cpid
bin=$b_bin; start_conclave "$((AB_PORT + 1))" /v1 "${EXTRA_B:-}"; b_pid=$cpid
wait_up "http://127.0.0.1:$PROXY_PORT/v1/models" "http://127.0.0.1:$AB_PORT/healthz" \
  "http://127.0.0.1:$((AB_PORT + 1))/healthz"

for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then
    a_us=$(cpu_c64 "$AB_PORT" "$a_pid" "$secs"); b_us=$(cpu_c64 "$((AB_PORT + 1))" "$b_pid" "$secs")
  else
    b_us=$(cpu_c64 "$((AB_PORT + 1))" "$b_pid" "$secs"); a_us=$(cpu_c64 "$AB_PORT" "$a_pid" "$secs")
  fi
  nginx_us=$(cpu_c64 "$PROXY_PORT" "$proxy_pid" "$secs")
  echo "$r $nginx_us $a_us $b_us" >> "$tmp/results"
  echo "round $r/$ROUNDS: CPU per request, c=64: nginx hop $nginx_us µs, A $a_us, B $b_us"
done
ratio_medians "$tmp/results" A B
python3 - "$tmp/results" <<'PY'
import sys, statistics as st
r = [float(l.split()[3]) / float(l.split()[2]) for l in open(sys.argv[1]) if l.strip()]
print(f"B / A    CPU per request, c=64: {st.median(r):.3f}   (rounds: {' '.join(f'{x:.3f}' for x in r)})")
PY
