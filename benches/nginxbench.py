"""What the benchmarks measured like the reference harness share (benches/harness/):
the nginx upstream serving fixed answers and nginx as a plain proxy hop, started from
the harness's own configs on ports of our choosing; wrk run with the harness's
settings (-t1, --latency, post.lua's request); and the conclave configs in front of
that upstream. Loopback only; every process is stopped by its PID."""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from procs import DONE_LUA  # wrk's summary as one JSON line

HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "harness")
STREAM_EVENTS = 17  # events in one /sse17 answer (nginx-upstream.conf)

# stream-cpu.sh's request, word for word.
STREAM_LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"bench-model","stream":true,"messages":[{"role":"user","content":"Say hello."}]}'
"""


def port_free(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def start_nginx(name, tmp, upstream_port, proxy_port, workers=1, preexec_fn=None):
    """Runs benches/harness/nginx-NAME.conf on our ports with WORKERS worker processes, its
    pid file and error log in TMP, in the foreground as our child; returns the process."""
    port = upstream_port if name == "upstream" else proxy_port
    if not port_free(port):
        sys.exit(f"port {port} is in use: another benchmark running? (--port-base)")
    conf = open(os.path.join(HARNESS, f"nginx-{name}.conf")).read()
    conf = conf.replace("127.0.0.1:18090", f"127.0.0.1:{upstream_port}")
    conf = conf.replace("127.0.0.1:18095", f"127.0.0.1:{proxy_port}")
    err = os.path.join(tmp, f"nginx-{name}.err")
    conf = re.sub(r"(?m)^pid .*$", f"pid {tmp}/nginx-{name}.pid;", conf)
    conf = re.sub(r"(?m)^error_log \S+", f"error_log {err}", conf)
    conf = re.sub(r"(?m)^worker_processes \d+;", f"worker_processes {workers};", conf)
    if os.geteuid() == 0:  # workers as root too: a bare machine may lack nginx's `nobody`
        conf = "user root;\n" + conf
    path = os.path.join(tmp, f"nginx-{name}.conf")
    with open(path, "w") as f:
        f.write(conf)
    return subprocess.Popen(["nginx", "-e", err, "-c", path], preexec_fn=preexec_fn)


def wait_up(*urls, seconds=30):
    end = time.time() + seconds
    for url in urls:
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status < 300:
                        break
            except OSError:
                pass
            if time.time() > end:
                sys.exit(f"not up after {seconds} s: {url}")
            time.sleep(0.1)


def lua_files(tmp):
    """The harness's request scripts plus DONE_LUA: {"whole": post.lua, "stream": the
    17-event request of stream-cpu.sh}."""
    out = {}
    for name, text in (("whole", open(os.path.join(HARNESS, "post.lua")).read()), ("stream", STREAM_LUA)):
        out[name] = os.path.join(tmp, f"{name}.lua")
        with open(out[name], "w") as f:
            f.write(text + DONE_LUA)
    return out


def wrk(url, lua, conns, seconds, key="none", threads=1, preexec_fn=None):
    """One wrk run with the harness's settings (THREADS threads); the JSON summary plus rps."""
    env = dict(os.environ, BENCH_KEY=key, BENCH_MODEL="bench-model")
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "--latency", "-s", lua, url],
        capture_output=True, text=True, timeout=seconds + 30, env=env, preexec_fn=preexec_fn,
    ).stdout
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        sys.exit(f"wrk printed no summary for {url}: {out[-2000:]}")
    r = json.loads(lines[-1])
    r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
    if r["errors"] or r["status_errors"]:
        print(f"warning: {url} c={conns}: {r['errors']} socket errors, {r['status_errors']} bad statuses",
              file=sys.stderr)
    return r


# compare.sh's gateway (whole answers at /v1), a price on the model so a cost budget
# has something to count; {server} and {keys} are empty for the ungoverned gateway.
GATEWAY_TOML = """
[server]
{server}
{keys}
[upstreams.bench]
kind = "openai"
base_url = "http://127.0.0.1:{port}/v1"
[models.bench-model]
upstream = "bench"
price = {{ input_per_mtok = 1.0, output_per_mtok = 2.0 }}
"""
# stream-cpu.sh's gateway, word for word.
STREAM_TOML = """
[upstreams.sse]
kind = "openai"
base_url = "http://127.0.0.1:{port}/sse17/v1"
[models.bench-model]
upstream = "sse"
"""
BENCH_KEY = "sk-bench-governed-0123456789abcdef"
# rpm, tpm, a daily token and cost budget, all too high ever to refuse.
GOVERNED_KEYS = """
[[keys]]
name = "bench"
key_env = "BENCH_GOVERNED_KEY"
rpm = 4000000000
tpm = 4000000000
daily_tokens = 1000000000000000
daily_cost_usd = 1000000000.0
"""


def gateway_configs(tmp, upstream_port):
    """Writes off.toml (no keys), on.toml (the governed key, SQLite state store) and
    stream.toml; returns their paths by name."""
    state = os.path.join(tmp, "state.db")
    texts = {
        "off": GATEWAY_TOML.format(server="", keys="", port=upstream_port),
        "on": GATEWAY_TOML.format(server=f'state_path = "{state}"', keys=GOVERNED_KEYS, port=upstream_port),
        "stream": STREAM_TOML.format(port=upstream_port),
    }
    out = {}
    for name, text in texts.items():
        out[name] = os.path.join(tmp, name + ".toml")
        with open(out[name], "w") as f:
            f.write(text)
    return out


def need_tools():
    for tool, pkg in (("wrk", "wrk"), ("nginx", "nginx-light")):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode:
            sys.exit(f"{tool} not found (Debian: apt-get install {pkg})")


def tmpdir():
    return tempfile.mkdtemp(prefix="conclave-bench-")
