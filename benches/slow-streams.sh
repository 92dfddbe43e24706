#!/usr/bin/env bash
# Slow streams (issue 29's target: 10,000 concurrent streams, a token every 50 ms for 60 s,
# through conclave in < 200 MiB RSS, added inter-token p99 < 5 ms, none dropped).
#
# Measures, on loopback: a slow OpenAI-compatible upstream (benches/slowstreams, `upstream`
# mode) and a load generator (`load` mode, one HTTP/1.1 connection per stream, ramped over
# SLOW_RAMP seconds) run twice in a row with the same number of streams: directly against the
# upstream, then through conclave. Prints for each: streams completed / dropped, how long the
# streams took against their nominal length, the inter-token gap and the transit time (client
# receive time minus the upstream's send time carried in each token) p50/p99/max; then
# conclave's RSS (idle, peak sampled every second, VmHWM, at the end), bytes per stream, CPU
# per relayed event, and the added p99s (conclave minus direct: the ratio against the direct
# path measured in the same run).
#
# The two paths run one after the other, not at once: 10,000 streams at 50 ms are 200,000
# events/s, more than a 2-core box can generate, relay and read (upstream and load alone take
# about a core; conclave needs ~20 us of CPU per event when events come one at a time), and
# the direct path would otherwise be measured under conclave's load. When the box does not
# keep up the streams stretch past their nominal length and the script says so: then
# SLOW_INTERVAL_MS=500 still holds all the streams (RSS, drops) at a rate the box can carry.
#
#   bash benches/slow-streams.sh                       # 10,000 streams x 60 s, 50 ms (~3 minutes)
#   bash benches/slow-streams.sh 1000 10               # small run
#   SLOW_INTERVAL_MS=500 bash benches/slow-streams.sh  # all 10,000 streams, 20,000 events/s
#   CONCLAVE_BIN=/path/to/conclave SLOW_RAMP=10 SLOW_THREADS=2 SLOW_KEEP=/tmp/logs bash benches/slow-streams.sh
#
# The environment reaches conclave (e.g. MIMALLOC_ALLOW_THP=0: no transparent huge pages).
# Needs: cargo (builds benches/slowstreams), curl (Debian: cargo curl); a release build of
# conclave (`cargo build --release`, or CONCLAVE_BIN). Ports 18100 (upstream) and 18101
# (conclave) on 127.0.0.1. conclave holds two descriptors per stream (client and upstream
# sockets): the script raises `ulimit -n` to the hard limit and, when that cannot hold
# 2 x streams + 256, says so and runs as many streams as fit (SLOW_NOCAP=1: run them all).
set -u
streams=${1:-10000}
secs=${2:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${CONCLAVE_BIN:-$root/target/release/conclave}
ramp=${SLOW_RAMP:-10}
threads=${SLOW_THREADS:-2}
interval_ms=${SLOW_INTERVAL_MS:-50}
up_port=18100
gw_port=18101
tmp=$(mktemp -d /tmp/slow-streams.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 1' INT TERM
mib() { awk -v k="$1" 'BEGIN{printf "%.1f", k/1024}'; }

[ -x "$bin" ] || { echo "no conclave binary at $bin (cargo build --release, or set CONCLAVE_BIN)"; exit 1; }

# --- limits -------------------------------------------------------------------------------
hard=$(ulimit -Hn)
ulimit -n "$hard" 2>/dev/null || true
need=$((2 * streams + 256))
echo "== limits"
echo "ulimit -n: $(ulimit -n) (hard $hard); conclave needs 2 x streams + 256 = $need"
if [ "$hard" != unlimited ] && [ "$hard" -lt "$need" ]; then
  fit=$(((hard - 256) / 2))
  echo "WARNING: the hard fd limit ($hard) cannot hold $streams streams through conclave (needs $need);"
  echo "         raise it (ulimit -Hn as root, LimitNOFILE=, docker --ulimit nofile=) to measure all of them."
  if [ "${SLOW_NOCAP:-0}" != 1 ]; then
    echo "         Running $fit streams (both paths) instead; SLOW_NOCAP=1 runs $streams anyway."
    streams=$fit
  fi
fi
read -r lo hi < /proc/sys/net/ipv4/ip_local_port_range
ports=$((hi - lo + 1))
for k in net.core.somaxconn net.ipv4.tcp_max_syn_backlog net.ipv4.ip_local_port_range net.ipv4.tcp_tw_reuse fs.file-max fs.nr_open; do
  printf '%-30s %s\n' "$k" "$(cat /proc/sys/"${k//.//}" | tr '\t' ' ')"
done
echo "ephemeral ports: $ports per destination; needed: $streams to :$gw_port (or :$up_port direct) and $streams from conclave to :$up_port"
[ "$ports" -ge "$streams" ] || echo "WARNING: fewer ephemeral ports ($ports) than streams ($streams)"
[ "$(cat /proc/sys/net/core/somaxconn)" -ge 1024 ] || echo "WARNING: somaxconn < 1024: raise it or SLOW_RAMP"

# --- build and start ----------------------------------------------------------------------
cargo build --release --quiet --manifest-path "$root/benches/slowstreams/Cargo.toml" || exit 1
ss=$root/benches/slowstreams/target/release/slowstreams
tokens=$((secs * 1000 / interval_ms))

"$ss" upstream --listen 127.0.0.1:$up_port --interval-ms $interval_ms --duration-secs "$secs" \
  --threads "$threads" 2>"$tmp/upstream.log" & up_pid=$!; pids+=($up_pid)

cat > "$tmp/conclave.toml" <<TOML
[server]
listen = "127.0.0.1:$gw_port"
# the default (1024) would hold 10,000 streams back: one slot per connection
max_connections = $((streams + 1024))
request_timeout = "$((secs + 120))s"
[upstreams.slow]
kind = "openai"
base_url = "http://127.0.0.1:$up_port/v1"
timeout = "$((secs + 120))s"
stream_idle_timeout = "30s"
retries = { max = 0 }
eject = false
[models.slow-model]
upstream = "slow"
TOML
"$bin" check --config "$tmp/conclave.toml" >"$tmp/check.log" 2>&1 || { cat "$tmp/check.log"; exit 1; }
"$bin" serve --config "$tmp/conclave.toml" >"$tmp/conclave.log" 2>&1 & gw_pid=$!; pids+=($gw_pid)
for _ in $(seq 1 100); do
  curl -sf -o /dev/null http://127.0.0.1:$up_port/v1/models &&
    curl -sf -o /dev/null http://127.0.0.1:$gw_port/healthz && break
  sleep 0.1
done
curl -sf -o /dev/null http://127.0.0.1:$gw_port/healthz || { echo "conclave did not start:"; tail "$tmp/conclave.log"; exit 1; }

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
sample() { # pid -> "rss_kb hwm_kb fds"
  awk '/^VmRSS/{r=$2} /^VmHWM/{h=$2} END{printf "%s %s", r, h}' "/proc/$1/status" 2>/dev/null
  echo " $(ls "/proc/$1/fd" 2>/dev/null | wc -l)"
}
load() { # url out (run in the background: exec, so $! is the load's own pid)
  exec "$ss" load --url "$1" --streams "$streams" --ramp "$ramp" --tokens "$tokens" \
    --interval-ms $interval_ms --threads "$threads" >"$2" 2>"$2.err"
}
field() { # file key field -> value of key=... on the line starting with field
  awk -v f="$3" -v k="$2" '$1 ~ "^"f {for(i=1;i<=NF;i++){split($i,a,"="); if(a[1]==k){print a[2]; exit}}}' "$1"
}

echo "== $streams streams x ${secs} s, a token every ${interval_ms} ms ($tokens each), ramp ${ramp} s, load/upstream threads $threads"
echo "conclave: $bin ($("$bin" --version 2>/dev/null))"

# --- direct -------------------------------------------------------------------------------
up0=$(cpu $up_pid)
load "http://127.0.0.1:$up_port/v1/chat/completions" "$tmp/direct.out" & ld=$!; pids+=($ld)
ld_cpu=0
while kill -0 $ld 2>/dev/null; do c=$(cpu $ld); [ "$c" -gt 0 ] && ld_cpu=$c; sleep 1; done
wait $ld
up_direct=$(($(cpu $up_pid) - up0))
ld_direct=$ld_cpu

# --- through conclave ---------------------------------------------------------------------
read -r idle_rss _ _ <<<"$(sample $gw_pid)"
up0=$(cpu $up_pid); gw0=$(cpu $gw_pid)
load "http://127.0.0.1:$gw_port/v1/chat/completions" "$tmp/gw.out" & ld=$!; pids+=($ld)
peak=0; peak_fds=0; ld_cpu=0
while kill -0 $ld 2>/dev/null; do
  read -r rss hwm fds <<<"$(sample $gw_pid)"
  echo "$(date +%s) $rss $hwm $fds" >>"$tmp/rss.log"
  [ "${rss:-0}" -gt "$peak" ] && peak=$rss
  [ "${fds:-0}" -gt "$peak_fds" ] && peak_fds=$fds
  c=$(cpu $ld); [ "$c" -gt 0 ] && ld_cpu=$c
  sleep 1
done
wait $ld
gw_cpu=$(($(cpu $gw_pid) - gw0)); up_gw=$(($(cpu $up_pid) - up0)); ld_gw=$ld_cpu
read -r end_rss hwm _ <<<"$(sample $gw_pid)"
kill -0 $gw_pid 2>/dev/null || echo "WARNING: conclave exited during the run"

# --- report -------------------------------------------------------------------------------
for p in direct gw; do
  name=$([ $p = gw ] && echo conclave || echo direct)
  printf '%-9s %s\n' "$name" "$(grep '^completed=' "$tmp/$p.out")"
  printf '%-9s %s\n' "" "$(grep '^events=' "$tmp/$p.out")"
  printf '%-9s %s\n' "" "$(grep -o '^gap_us.*max=[0-9]*' "$tmp/$p.out")"
  printf '%-9s %s\n' "" "$(grep -o '^transit_us.*max=[0-9]*' "$tmp/$p.out")"
  printf '%-9s %s\n' "" "$(grep -o '^steady_gap_us.*max=[0-9]*' "$tmp/$p.out")"
  printf '%-9s %s\n' "" "$(grep -o '^steady_transit_us.*max=[0-9]*' "$tmp/$p.out")"
  grep -q '^completed=' "$tmp/$p.out" || { echo "load failed:"; tail "$tmp/$p.out.err"; }
done
for p in direct gw; do
  awk -v p=$p '/^events=/{for(i=1;i<=NF;i++){split($i,a,"="); v[a[1]]=a[2]} if (v["expected"] > 0 && v["max"] > 1.1 * v["expected"] + 1000)
    printf "WARNING: %s: streams took up to %.1f s against %.1f s: this box did not keep up with %s events/s (see CPU below)\n", p, v["max"]/1000, v["expected"]/1000, v["offered_per_s"]}' "$tmp/$p.out"
done
dg=$(field "$tmp/direct.out" p99 gap_us); cg=$(field "$tmp/gw.out" p99 gap_us)
dt=$(field "$tmp/direct.out" p99 transit_us); ct=$(field "$tmp/gw.out" p99 transit_us)
sdg=$(field "$tmp/direct.out" p99 steady_gap_us); scg=$(field "$tmp/gw.out" p99 steady_gap_us)
sdt=$(field "$tmp/direct.out" p99 steady_transit_us); sct=$(field "$tmp/gw.out" p99 steady_transit_us)
ddrop=$(field "$tmp/direct.out" dropped completed); gdrop=$(field "$tmp/gw.out" dropped completed)
ev=$(field "$tmp/gw.out" events events)
awk -v ticks="$ticks" -v n="$streams" -v idle="$idle_rss" -v peak="$peak" -v hwm="$hwm" -v end="$end_rss" \
  -v fds="$peak_fds" -v gw="$gw_cpu" -v ev="${ev:-0}" -v upd="$up_direct" -v upg="$up_gw" -v ldd="$ld_direct" -v ldg="$ld_gw" \
  -v dg="${dg:-0}" -v cg="${cg:-0}" -v dt="${dt:-0}" -v ct="${ct:-0}" -v sdg="${sdg:-0}" -v scg="${scg:-0}" -v sdt="${sdt:-0}" -v sct="${sct:-0}" -v dd="${ddrop:-?}" -v cd="${gdrop:-?}" 'BEGIN{
  printf "conclave RSS: idle %.1f MiB, peak %.1f MiB (sampled each second; VmHWM %.1f MiB), at the end %.1f MiB; peak fds %d\n", idle/1024, peak/1024, hwm/1024, end/1024, fds
  printf "conclave per stream: %.1f KiB ((peak - idle) / %d streams)\n", (peak-idle)/n, n
  printf "CPU s: conclave %.1f (%.2f us per relayed event); upstream %.1f direct / %.1f via conclave; load %.1f / %.1f\n", gw/ticks, (ev>0 ? gw/ticks*1e6/ev : 0), upd/ticks, upg/ticks, ldd/ticks, ldg/ticks
  printf "added inter-token p99: %+.3f ms (conclave %.3f - direct %.3f)   target < 5 ms: %s\n", (cg-dg)/1000, cg/1000, dg/1000, ((cg-dg) < 5000 ? "ok" : "MISSED")
  printf "added transit p99:     %+.3f ms (conclave %.3f - direct %.3f)\n", (ct-dt)/1000, ct/1000, dt/1000
  printf "steady (all streams open, ramp over): added inter-token p99 %+.3f ms (%.3f - %.3f), added transit p99 %+.3f ms (%.3f - %.3f)\n", (scg-sdg)/1000, scg/1000, sdg/1000, (sct-sdt)/1000, sct/1000, sdt/1000
  printf "dropped: direct %s, conclave %s   target 0: %s\n", dd, cd, (cd == "0" ? "ok" : "MISSED")
  printf "conclave RSS peak %.1f MiB   target < 200 MiB: %s\n", (hwm>peak?hwm:peak)/1024, ((hwm>peak?hwm:peak) < 200*1024 ? "ok" : "MISSED")
}'
grep -ciE "error|warn" "$tmp/conclave.log" | awk '$1>0{print "conclave log: " $1 " error/warning lines"}'
grep -iE "error|warn" "$tmp/conclave.log" | sort | uniq -c | sort -rn | head -5
if [ -n "${SLOW_KEEP:-}" ]; then cp -r "$tmp" "$SLOW_KEEP"; echo "logs kept in $SLOW_KEEP"; fi
