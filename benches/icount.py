"""Instructions per request, counted under valgrind's callgrind: a figure the noise of a
shared box does not move. A gateway runs under callgrind and answers N requests sent one
after another on one keep-alive connection; two runs with different N, subtracted, leave
start-up and shutdown out. Used by `governed.py --callgrind` (Debian: valgrind)."""

import collections
import http.client
import os
import subprocess
import sys

import nginxbench as nb
from procs import BIN

FEW, MANY = 200, 2200


def counted_run(conf, port, n, tmp, key):
    """Runs `conclave serve --config CONF` under callgrind, sends it N whole requests
    (post.lua's body, with KEY), stops it; returns the callgrind output file."""
    out = os.path.join(tmp, f"callgrind-{os.path.basename(conf)}-{n}.out")
    log = open(out + ".log", "w")
    p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", BIN, "serve",
                          "--listen", f"127.0.0.1:{port}", "--config", conf], stdout=subprocess.DEVNULL, stderr=log)
    try:
        nb.wait_up(f"http://127.0.0.1:{port}/healthz", seconds=120)
        body = '{"model":"bench-model","messages":[{"role":"user","content":"Say hello."}],"max_tokens":16}'
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for _ in range(n):
            c.request("POST", "/v1/chat/completions", body, headers)
            r = c.getresponse()
            r.read()
            if r.status != 200:
                sys.exit(f"{conf}: status {r.status} under callgrind")
        c.close()
    finally:
        p.terminate()
        p.wait()
    return out


def functions(path):
    """Exclusive instructions by function (callgrind_annotate's flat list)."""
    text = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100", path],
                          capture_output=True, text=True, check=True).stdout
    out = collections.Counter()
    for line in text.splitlines():
        parts = line.split(None, 2)
        if len(parts) < 3 or not parts[0].replace(",", "").isdigit() or not parts[1].startswith("("):
            continue
        name = parts[2].rsplit(" [", 1)[0]
        if "PROGRAM TOTALS" in name:
            out["TOTAL"] += int(parts[0].replace(",", ""))
            continue
        if ":" in name and "/" in name.split(":", 1)[0]:
            name = name.split(":", 1)[1]  # drop the source file
        out[name.split(" (", 1)[0]] += int(parts[0].replace(",", ""))
    return out


def per_request(conf, port, tmp, key):
    """Instructions per request by function (and "TOTAL"), from a FEW- and a MANY-request run."""
    few = functions(counted_run(conf, port, FEW, tmp, key))
    many = functions(counted_run(conf, port, MANY, tmp, key))
    return {k: (many[k] - few[k]) / (MANY - FEW) for k in set(few) | set(many)}
