#!/usr/bin/env bash
# Regenerates dashboards/img/*.png from a real run on this machine:
# two gateways (config/demo.toml and config/governed.toml) on free loopback
# ports, a local Prometheus scraping them every 2 s, traffic.py for N
# minutes, then render.py for each dashboard. Everything it starts is
# stopped (by PID) when it exits; its state lives in a temporary directory.
#
#   dashboards/snapshot.sh [MINUTES]          (default 5, or $SNAPSHOT_MINUTES)
#   CONCLAVE_BIN=/path/to/conclave dashboards/snapshot.sh
#
# Needs: a release build (target/release/conclave), prometheus on PATH,
# python3 with matplotlib.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
minutes=${1:-${SNAPSHOT_MINUTES:-5}}
bin=${CONCLAVE_BIN:-$repo/target/release/conclave}
[[ -x $bin ]] || { echo "snapshot: no conclave binary at $bin (cargo build --release, or set CONCLAVE_BIN)" >&2; exit 1; }
command -v prometheus >/dev/null || { echo "snapshot: prometheus is not on PATH" >&2; exit 1; }
# The interpreter itself, not a version manager's shim, so PIDs are its own.
py=$(python3 -c 'import sys; print(sys.executable)')
"$py" -c 'import matplotlib' 2>/dev/null || { echo "snapshot: python3 needs matplotlib (pip install matplotlib)" >&2; exit 1; }

tmp=$(mktemp -d -t conclave-snapshot.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [[ -n ${KEEP_TMP:-} ]]; then echo "snapshot: kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_http() {  # URL: until it answers 200, at most 30 s
  for _ in $(seq 150); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.2; done
  echo "snapshot: $1 did not answer; logs in $tmp" >&2; KEEP_TMP=1; exit 1
}

demo_port=$(free_port); gov_port=$(free_port); prom_port=$(free_port)
for name in demo governed; do
  mkdir -p "$tmp/$name"
  port=$demo_port; [[ $name == governed ]] && port=$gov_port
  # The configs' relative event_log and state_path land in $tmp/$name.
  (cd "$tmp/$name" && exec "$bin" serve --config "$repo/config/$name.toml" --listen "127.0.0.1:$port") \
    >"$tmp/$name.log" 2>&1 &
  pids+=($!)
done

cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 2s
  evaluation_interval: 2s
scrape_configs:
  - job_name: conclave
    static_configs:
      - targets: ["127.0.0.1:$demo_port"]
        labels: {gateway: demo}
  - job_name: conclave-governed
    static_configs:
      - targets: ["127.0.0.1:$gov_port"]
        labels: {gateway: governed}
EOF
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$tmp/prometheus.log" 2>&1 &
pids+=($!)

demo=http://127.0.0.1:$demo_port governed=http://127.0.0.1:$gov_port prom=http://127.0.0.1:$prom_port
wait_http "$demo/healthz"; wait_http "$governed/healthz"; wait_http "$prom/-/ready"
echo "snapshot: gateways $demo and $governed, prometheus $prom; traffic for $minutes min"

"$py" "$here/traffic.py" --demo "$demo" --governed "$governed" --rounds 0 --pause 1 \
  --duration $((minutes * 60)) >"$tmp/traffic.log" 2>&1 \
  || { echo "snapshot: traffic.py failed:" >&2; tail "$tmp/traffic.log" >&2; exit 1; }
echo "snapshot: $(grep -c '^round' "$tmp/traffic.log") rounds; the last: $(tail -n 1 "$tmp/traffic.log")"
sleep 5  # a few more scrapes

mkdir -p "$here/img"
for board in overview strategies local-models governors; do
  "$py" "$here/render.py" --prometheus "$prom" --dashboard "$here/$board.json" \
    --out "$here/img/$board.png" --minutes "$minutes"
done
