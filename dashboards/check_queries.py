#!/usr/bin/env python3
"""Runs every panel query of the conclave dashboards against a Prometheus.

    python3 dashboards/check_queries.py --prometheus http://127.0.0.1:9090 \
        [--allow-empty METRIC ...] [DASHBOARD.json ...]

Variables are substituted as the tests do ($route, $model, $key -> .*,
$__rate_interval -> 1m, $__range -> 5m). Each query must be valid PromQL and
return at least one series; a query that names a metric given with
--allow-empty may come back empty. Also checks that every panel and target
uses the ${datasource} variable and no other template variable, and that
each dashboard has a uid, the tag conclave and that variable. Exits 1
listing what failed. Standard library only.
"""

import argparse
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

SUBST = {"route": ".*", "model": ".*", "key": ".*", "__rate_interval": "1m", "__range": "5m"}
DS = {"type": "prometheus", "uid": "${datasource}"}


def substitute(expr):
    return re.sub(r"\$(\w+)", lambda m: SUBST[m.group(1)], expr)


def targets(dashboard):
    """(panel title, target) of every query panel, rows' nested panels too."""
    for p in dashboard["panels"]:
        for q in p.get("panels", []) + [p]:
            for t in q.get("targets", []):
                yield q, t


def query(prom, expr):
    url = f"{prom.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        return json.load(e)


def main():
    here = Path(__file__).resolve().parent
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prometheus", required=True)
    p.add_argument("--allow-empty", action="append", default=[], metavar="METRIC",
                   help="a metric whose queries may return nothing (repeatable)")
    p.add_argument("dashboards", nargs="*", type=Path,
                   default=sorted(f for f in here.glob("*.json")))
    a = p.parse_args()
    failed, empty_ok, n = [], [], 0
    for path in a.dashboards:
        board = json.loads(path.read_text())
        variables = {v["name"]: v for v in board.get("templating", {}).get("list", [])}
        ds = variables.get("datasource", {})
        if not board.get("uid") or "conclave" not in board.get("tags", []):
            failed.append(f"{path.name}: needs a uid and the tag conclave")
        if ds.get("type") != "datasource" or ds.get("query") != "prometheus":
            failed.append(f"{path.name}: needs a datasource variable of type datasource, query prometheus")
        for panel, t in targets(board):
            n += 1
            where = f"{path.name} / {panel['title']} / {t['refId']}"
            expr = t["expr"]
            unknown = set(re.findall(r"\$(\w+)", expr)) - set(SUBST)
            if unknown:
                failed.append(f"{where}: unknown variables {sorted(unknown)}: {expr}")
                continue
            if panel.get("datasource") != DS or t.get("datasource") != DS:
                failed.append(f"{where}: datasource is not {DS}")
            try:
                res = query(a.prometheus, substitute(expr))
            except (urllib.error.URLError, OSError) as e:
                sys.exit(f"check_queries: cannot reach Prometheus at {a.prometheus}: {e}")
            if res.get("status") != "success":
                failed.append(f"{where}: {res.get('errorType')}: {res.get('error')}: {expr}")
            elif not res["data"]["result"]:
                if any(m in expr for m in a.allow_empty):
                    empty_ok.append(f"{where}: {expr}")
                else:
                    failed.append(f"{where}: empty result: {expr}")
    for line in empty_ok:
        print(f"empty (allowed): {line}")
    for line in failed:
        print(f"FAIL {line}")
    print(f"{n} queries, {len(failed)} failed, {len(empty_ok)} empty but allowed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
