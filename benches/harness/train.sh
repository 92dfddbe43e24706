#!/usr/bin/env bash
# The training load of a profile-guided build (scripts/pgo-build): the harness's nginx upstream,
# CONCLAVE_BIN (an instrumented build) twice in front of it (open, and behind API keys with
# limits), and a mix of requests, on loopback, bounded in count and time. Each conclave is
# stopped with SIGTERM, so that it drains and writes its profile on the way out.
#
#   CONCLAVE_BIN=... TRAIN_SECS=4 bash benches/harness/train.sh
set -u
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"
secs=${TRAIN_SECS:-4}
KEYED_PORT=${KEYED_PORT:-18092}
check_ports "$UPSTREAM_PORT" "$CONCLAVE_PORT" "$KEYED_PORT"
start_nginx upstream
routes='[upstreams.bench17]\nkind = "openai"\nbase_url = "http://127.0.0.1:'$UPSTREAM_PORT'/sse17/v1"
[models.bench-17]\nupstream = "bench17"\nmodel = "bench-model"
[models.bench-2]\nupstream = "bench"\nmodel = "bench-model"
[routes.best-of-2]\nstrategy = "race"\ncandidates = ["bench-model", "bench-2"]
[routes.first-of-2]\nstrategy = "race"\nmode = "first"\ncandidates = ["bench-model", "bench-2"]\nhedge_delay = "1ms"
[routes.chain]\nstrategy = "chain"\ntiers = ["bench-model", "bench-2"]'
start_conclave "$CONCLAVE_PORT" /v1 "$routes"; open_pid=$cpid
# The key is "train-key" (its SHA-256 below).
start_conclave "$KEYED_PORT" /v1 '[[keys]]\nname = "train"
key_sha256 = "'"$(printf train-key | sha256sum | cut -d" " -f1)"'"\nrpm = 100000000\ntpm = 1000000000
daily_tokens = 100000000000'; keyed_pid=$cpid
wait_up "http://127.0.0.1:$UPSTREAM_PORT/v1/models" "http://127.0.0.1:$CONCLAVE_PORT/healthz" \
  "http://127.0.0.1:$KEYED_PORT/healthz"

# load PORT C MODEL STREAM KEY: wrk for $secs seconds.
load() {
  cat > "$tmp/t.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $5"
wrk.body = '{"model":"$3","stream":$4,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Say hello."}],"max_tokens":16,"temperature":0.2}'
LUA
  wrk -t1 -c"$2" -d"${secs}s" -s "$tmp/t.lua" "http://127.0.0.1:$1/v1/chat/completions" \
    | awk -v m="$3 c=$2 stream=$4" '/requests in/{n=$1} /Non-2xx/{bad=$NF}
        END{print "  " m ": " n " requests" (bad ? ", " bad " not 2xx" : "")}'
}
load "$CONCLAVE_PORT" 64 bench-model false none
load "$CONCLAVE_PORT" 1 bench-model false none
load "$CONCLAVE_PORT" 64 bench-17 true none
load "$CONCLAVE_PORT" 64 bench-stream true none
load "$KEYED_PORT" 64 bench-model false train-key
load "$CONCLAVE_PORT" 16 best-of-2 false none
load "$CONCLAVE_PORT" 16 first-of-2 true none
load "$CONCLAVE_PORT" 16 chain false none

# The paths off the fast one, a few hundred each.
python3 - "$CONCLAVE_PORT" "$KEYED_PORT" <<'PY'
import http.client, json, sys
open_port, keyed_port = int(sys.argv[1]), int(sys.argv[2])
def ask(port, method, path, body=None, key="none"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path, body=body, headers={"content-type": "application/json",
                                               "authorization": f"Bearer {key}"})
    r = c.getresponse(); r.read(); c.close(); return r.status
msg = lambda m: json.dumps({"model": m, "messages": [{"role": "user", "content": "hi"}]})
seen = {}
for _ in range(200):
    for name, port, method, path, body, key in [
        ("unknown model", open_port, "POST", "/v1/chat/completions", msg("nope"), "none"),
        ("bad json", open_port, "POST", "/v1/chat/completions", "{", "none"),
        ("no messages", open_port, "POST", "/v1/chat/completions", '{"model":"bench-model"}', "none"),
        ("wrong key", keyed_port, "POST", "/v1/chat/completions", msg("bench-model"), "nope"),
        ("models", open_port, "GET", "/v1/models", None, "none"),
        ("completions", open_port, "POST", "/v1/completions",
         json.dumps({"model": "bench-model", "prompt": "hi"}), "none"),
    ]:
        s = ask(port, method, path, body, key)
        seen.setdefault(name, set()).add(s)
for _ in range(20):
    ask(open_port, "GET", "/metrics")
print("  other paths:", ", ".join(f"{k} {sorted(v)}" for k, v in seen.items()))
PY
# SIGTERM and wait: each writes its profile as it exits.
kill "$open_pid" "$keyed_pid"
wait "$open_pid" "$keyed_pid" 2>/dev/null || true
