#!/usr/bin/env bash
# What a proxy hop costs with hyper and tokio alone: the floor (benches/floor, a minimal
# HTTP/1 proxy on hyper, thread per core like conclave's, doing nothing a gateway does)
# beside the nginx hop and conclave, in front of the same zero-delay nginx upstream, whole
# requests at c=64 (post.lua). Prints each hop's CPU per request (user + system ticks of its
# process over its run) and its ratio to the nginx hop's, per round and the median: the part
# of conclave's cost that is hyper's, and the part that is its own.
#
#   cargo build --release
#   cargo build --release --manifest-path benches/floor/Cargo.toml
#   ROUNDS=3 bash benches/harness/floor.sh [seconds per run, default 10]
#
# Needs what compare.sh needs. FLOOR_BIN and CONCLAVE_BIN measure other builds. Loopback only
# (ports as compare.sh's, the floor on FLOOR_PORT, default 18096); stops what it started.
set -u
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"
secs=${1:-10}
FLOOR_PORT=${FLOOR_PORT:-18096}
floor=${FLOOR_BIN:-$root/benches/floor/target/release/floor}
[ -x "$floor" ] || { echo "no floor binary at $floor (cargo build --release --manifest-path benches/floor/Cargo.toml)" >&2; exit 1; }
check_ports "$UPSTREAM_PORT" "$PROXY_PORT" "$CONCLAVE_PORT" "$FLOOR_PORT"
start_nginx upstream
start_nginx proxy; proxy_pid=${pids[-1]}
start_conclave "$CONCLAVE_PORT" /v1
"$floor" "127.0.0.1:$FLOOR_PORT" "127.0.0.1:$UPSTREAM_PORT" "$(nproc)" & fpid=$!; pids+=($fpid)
wait_up "http://127.0.0.1:$UPSTREAM_PORT/v1/models" "http://127.0.0.1:$PROXY_PORT/v1/models" \
  "http://127.0.0.1:$CONCLAVE_PORT/healthz" "http://127.0.0.1:$FLOOR_PORT/v1/models"

for r in $(seq 1 "$ROUNDS"); do
  nginx_us=$(cpu_c64 "$PROXY_PORT" "$proxy_pid" "$secs")
  floor_us=$(cpu_c64 "$FLOOR_PORT" "$fpid" "$secs")
  conclave_us=$(cpu_c64 "$CONCLAVE_PORT" "$cpid" "$secs")
  echo "$r $nginx_us $floor_us $conclave_us" >> "$tmp/results"
  echo "round $r/$ROUNDS: CPU per request, c=64: nginx hop $nginx_us µs, floor $floor_us, conclave $conclave_us"
done
ratio_medians "$tmp/results" floor conclave
