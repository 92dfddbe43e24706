#!/usr/bin/env python3
"""Renders a Grafana dashboard's panels to a PNG from Prometheus results.

    python3 dashboards/render.py --prometheus http://127.0.0.1:9090 \
        --dashboard dashboards/overview.json --out dashboards/img/overview.png [--minutes 10]

Grafana cannot run everywhere; this draws the panels of the dashboard JSON
where its gridPos puts them, in Grafana's dark theme: timeseries and
state-timeline panels from query_range, stat, bargauge and table panels
from instant queries (a stat with a sparkline from query_range, showing its
last value). $route, $model and $key become .*, $__rate_interval
--rate-interval (1m), $__range the window.
Needs matplotlib.
"""

import argparse
import io
import json
import math
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.font_manager import FontProperties  # noqa: E402
from matplotlib.patches import FancyBboxPatch, Rectangle  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402
from PIL import Image  # noqa: E402  (a dependency of matplotlib)

# Grafana's dark theme and classic palette.
BG, PANEL, BORDER = "#111217", "#181b1f", "#2a2d33"
TEXT, MUTED, GRID = "#ccccdc", "#8e8e9e", "#26292f"
PALETTE = ["#7EB26D", "#EAB839", "#6ED0E0", "#EF843C", "#E24D42", "#1F78C1", "#BA43A9", "#705DA0",
           "#508642", "#CCA300", "#447EBC", "#C15C17", "#890F02", "#0A437C", "#6D1F62", "#584477",
           "#B7DBAB", "#F4D598", "#70DBED", "#F9BA8F", "#F29191", "#82B5D8", "#E5A8E2", "#AEA2E0"]
NAMED = {"green": "#73BF69", "red": "#F2495C", "orange": "#FF9830", "yellow": "#FADE2A",
         "blue": "#5794F2", "purple": "#B877D9", "text": TEXT, "transparent": "#00000000",
         "dark-red": "#C4162A", "dark-green": "#37872D", "super-light-green": "#C8F2C2"}
CELL_H, MARGIN, WIDTH, HEADER = 30, 8, 1800, 64
DPI = 100


def tnum(t):
    """Unix seconds to a matplotlib date number (UTC)."""
    return mdates.date2num(datetime.fromtimestamp(t, timezone.utc))


def time_axis(ax, start, end):
    ax.set_xlim(tnum(start), tnum(end))
    ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=4, maxticks=8))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=timezone.utc))


def px(n):
    """Pixels to points at our DPI (matplotlib font sizes are in points)."""
    return n * 72 / DPI


def color(c):
    return NAMED.get(c, c)


# ---------------------------------------------------------------- values and units

def num(v, decimals=None):
    if decimals is None:
        a = abs(v)
        decimals = 0 if a >= 100 or a == int(a) else 1 if a >= 10 else 2 if a >= 1 else 3
        s = f"{v:.{decimals}f}"
        return s.rstrip("0").rstrip(".") if "." in s else s
    return f"{v:.{decimals}f}"


def scaled(v, steps, decimals):
    """steps: [(factor, suffix)], largest first; the first that fits wins."""
    for factor, suffix in steps:
        if abs(v) >= factor or factor == steps[-1][0]:
            return num(v / factor, decimals) + suffix
    return num(v, decimals)


def fmt(v, unit, decimals=None):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "NaN"
    if isinstance(v, float) and math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if unit == "s":
        if v == 0:
            return "0 s"
        return scaled(v, [(3600, " hour"), (60, " min"), (1, " s"), (1e-3, " ms"), (1e-6, " µs"),
                          (1e-9, " ns")], decimals)
    if unit == "percentunit":
        return num(v * 100, decimals) + "%"
    if unit == "currencyUSD":
        return ("-$" if v < 0 else "$") + scaled(abs(v), [(1e6, "M"), (1e3, "K"), (1, "")], decimals)
    short = scaled(v, [(1e12, " Tri"), (1e9, " Bil"), (1e6, " Mil"), (1e3, " K"), (1, "")], decimals)
    if unit == "reqps":
        return short.replace(" ", "") + " req/s"
    return short.replace(" ", "") if v < 1e6 else short


def legend_name(fmt_str, labels, expr):
    if not fmt_str or fmt_str == "__auto":
        shown = {k: v for k, v in labels.items() if k != "__name__"}
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(shown.items())) + "}" if shown else expr
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt_str)


def mapped(v, mappings):
    """(text, color) from value mappings, or None."""
    for m in mappings:
        if m.get("type") == "value" and v is not None and not math.isnan(v):
            for key, res in m.get("options", {}).items():
                try:
                    if float(key) == v:
                        return res.get("text"), color(res["color"]) if res.get("color") else None
                except ValueError:
                    continue
    return None


def threshold_color(v, thresholds):
    steps = (thresholds or {}).get("steps") or [{"color": "green", "value": None}]
    c = steps[0]["color"]
    for s in steps[1:]:
        if v is not None and not math.isnan(v) and s["value"] is not None and v >= s["value"]:
            c = s["color"]
    return color(c)


# ---------------------------------------------------------------- Prometheus

class Prom:
    def __init__(self, url, end, minutes, rate_interval):
        self.url, self.end = url.rstrip("/"), end
        self.start = end - minutes * 60
        self.vars = {"route": ".*", "model": ".*", "key": ".*", "__rate_interval": rate_interval,
                     "__range": f"{minutes}m", "__interval": rate_interval}
        self.step = max(2, round(minutes * 60 / 240))

    def expr(self, e):
        return re.sub(r"\$(\w+)", lambda m: self.vars.get(m.group(1), ".*"), e)

    def _get(self, path, **params):
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            body = json.load(e)
        except (urllib.error.URLError, OSError) as e:
            sys.exit(f"render: cannot reach Prometheus at {self.url}: {e}")
        if body.get("status") != "success":
            print(f"render: {body.get('error')}: {params['query']}", file=sys.stderr)
            return []
        return body["data"]["result"]

    def range(self, expr):
        """[(labels, [epoch...], [value...])]"""
        out = []
        for r in self._get("/api/v1/query_range", query=self.expr(expr), start=self.start, end=self.end,
                           step=self.step):
            ts = [float(t) for t, _ in r["values"]]
            vs = [float(v) for _, v in r["values"]]
            out.append((r["metric"], ts, vs))
        return out

    def instant(self, expr):
        """[(labels, value)]"""
        return [(r["metric"], float(r["value"][1])) for r in self._get("/api/v1/query", query=self.expr(expr),
                                                                       time=self.end)]


# ---------------------------------------------------------------- canvas

class Canvas:
    """A figure addressed in pixels from the top left, like Grafana's grid."""

    def __init__(self, width, height):
        self.w, self.h = width, height
        self.fig = plt.figure(figsize=(width / DPI, height / DPI), dpi=DPI, facecolor=BG)
        self.renderer = self.fig.canvas.get_renderer()

    def rect(self, x, y, w, h):
        return [x / self.w, 1 - (y + h) / self.h, w / self.w, h / self.h]

    def axes(self, x, y, w, h, frame=False):
        ax = self.fig.add_axes(self.rect(x, y, w, h))
        ax.set_facecolor("none")
        if not frame:
            ax.set_axis_off()
        return ax

    def box(self, x, y, w, h, fc=PANEL, ec=BORDER, radius=3):
        l, b, ww, hh = self.rect(x, y, w, h)
        self.fig.patches.append(FancyBboxPatch((l, b), ww, hh, boxstyle=f"round,pad=0,rounding_size={radius / self.w}",
                                               transform=self.fig.transFigure, fc=fc, ec=ec, lw=0.8,
                                               zorder=-10))

    def text(self, x, y, s, size=12, c=TEXT, weight="normal", ha="left", va="top", **kw):
        return self.fig.text(x / self.w, 1 - y / self.h, s, fontsize=px(size), color=c, weight=weight,
                             ha=ha, va=va, **kw)

    def width_of(self, s, size, weight="normal"):
        w, _, _ = self.renderer.get_text_width_height_descent(
            s, FontProperties(size=px(size), weight=weight), ismath=False)
        return w

    def fit(self, s, size, width, weight="normal"):
        """s cut with an ellipsis to fit width pixels."""
        if self.width_of(s, size, weight) <= width:
            return s
        while s and self.width_of(s + "…", size, weight) > width:
            s = s[:-1]
        return s + "…"


# ---------------------------------------------------------------- panels

def series_colors(n):
    return [PALETTE[i % len(PALETTE)] for i in range(n)]


def style_axes(ax, unit, decimals):
    ax.set_facecolor("none")
    for s in ax.spines.values():
        s.set_visible(False)
    ax.tick_params(colors=MUTED, labelsize=px(11), length=0, pad=4)
    ax.grid(True, color=GRID, lw=0.8)
    ax.set_axisbelow(True)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=5, min_n_ticks=3, integer=decimals == 0))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v, unit, axis_decimals(ax, unit, decimals))))


def axis_decimals(ax, unit, decimals):
    if decimals is not None:
        return decimals
    lo, hi = ax.get_ylim()
    span = abs(hi - lo) or 1
    if unit == "percentunit":
        span *= 100
    if unit == "s":
        return None
    step = span / 5
    return max(0, min(4, -int(math.floor(math.log10(step))) if step < 1 else 0))


def legend_entries(cv, x, y, w, entries, size=11, max_rows=None):
    """Grafana's list legend: wraps entries; returns the height used."""
    row_h = size + 6
    cx, cy, rows = x, y, 1
    for i, (name, c) in enumerate(entries):
        ew = cv.width_of(name, size) + 26
        if cx + ew > x + w and cx > x:
            rows += 1
            if max_rows and rows > max_rows:
                cv.text(cx, cy + 2, f"+{len(entries) - i} more", size=size, c=MUTED)
                return max_rows * row_h
            cx, cy = x, cy + row_h
        cv.fig.patches.append(Rectangle((cx / cv.w, 1 - (cy + size / 2 + 2) / cv.h), 14 / cv.w, 3 / cv.h,
                                        transform=cv.fig.transFigure, fc=c, ec="none"))
        cv.text(cx + 19, cy + 1, cv.fit(name, size, w - 20), size=size, c=TEXT)
        cx += ew
    return rows * row_h


def no_data(cv, x, y, w, h):
    cv.text(x + w / 2, y + h / 2, "No data", size=14, c=MUTED, ha="center", va="center")


def range_series(prom, p):
    """(legend, times, values) of every target of panel P over the window."""
    series = []
    for t in p["targets"]:
        for labels, ts, vs in prom.range(t["expr"]):
            series.append((legend_name(t.get("legendFormat"), labels, t["expr"]), ts, vs))
    return series


def draw_timeseries(cv, prom, p, x, y, w, h):
    d = p["fieldConfig"]["defaults"]
    unit, decimals = d.get("unit", "short"), d.get("decimals")
    custom = d.get("custom", {})
    stacked = custom.get("stacking", {}).get("mode") == "normal"
    series = range_series(prom, p)
    if not series:
        return no_data(cv, x, y, w, h)
    colors = series_colors(len(series))
    legend = p.get("options", {}).get("legend", {})
    right = legend.get("placement") == "right" and legend.get("displayMode") == "table"
    plot_w = w * 0.62 if right else w
    if right:
        draw_legend_table(cv, x + plot_w + 8, y, w - plot_w - 8, h, series, colors, legend.get("calcs", []),
                          unit, decimals)
        lh = 0
    else:
        probe_h = legend_entries_height(cv, w, [s[0] for s in series])
        lh = min(probe_h, h * 0.4)
        legend_entries(cv, x + 8, y + h - lh, w - 16, [(s[0], c) for s, c in zip(series, colors)],
                       max_rows=max(1, int(lh // 17)))
    ax = cv.axes(x + 62, y + 4, plot_w - 72, h - lh - 26, frame=True)
    base = {}  # stacked: the running total per timestamp
    fill = custom.get("fillOpacity", 0) / 100
    for (name, ts, vs), c in zip(series, colors):
        times = [tnum(t) for t in ts]
        vals = vs
        if stacked:
            lower = [base.get(t, 0.0) for t in ts]
            upper = [lo + (0 if math.isnan(v) else v) for lo, v in zip(lower, vals)]
            for t, u in zip(ts, upper):
                base[t] = u
            ax.fill_between(times, lower, upper, color=c, alpha=max(fill, 0.35), lw=0)
            ax.plot(times, upper, color=c, lw=1)
        else:
            ax.plot(times, vals, color=c, lw=1.2)
            if fill:
                ax.fill_between(times, 0, [0 if math.isnan(v) else v for v in vals], color=c, alpha=fill,
                                lw=0, where=[not math.isnan(v) for v in vals])
    time_axis(ax, prom.start, prom.end)
    lo, hi = d.get("min"), d.get("max")
    cur_lo, cur_hi = ax.get_ylim()
    top = hi if hi is not None else max(cur_hi * 1.05, 1e-9 if unit != "percentunit" else 0.01)
    ax.set_ylim(lo if lo is not None else cur_lo, top)
    style_axes(ax, unit, decimals)


def legend_entries_height(cv, w, names, size=11):
    row_h, cx, rows = size + 6, 0, 1
    for n in names:
        ew = cv.width_of(n, size) + 26
        if cx + ew > w - 16 and cx > 0:
            rows, cx = rows + 1, 0
        cx += ew
    return rows * row_h + 4


def calc(name, vs):
    vals = [v for v in vs if not math.isnan(v)]
    if not vals:
        return float("nan")
    return {"mean": sum(vals) / len(vals), "max": max(vals), "min": min(vals), "last": vs[-1],
            "lastNotNull": vals[-1], "sum": sum(vals)}.get(name, float("nan"))


def draw_legend_table(cv, x, y, w, h, series, colors, calcs, unit, decimals, size=11):
    col_w = 70
    name_w = w - col_w * len(calcs) - 8
    row_h = size + 6
    for i, c in enumerate(calcs):
        cv.text(x + name_w + col_w * (i + 1), y + 2, {"mean": "Mean", "max": "Max", "lastNotNull": "Last *",
                                                     "last": "Last"}.get(c, c), size=size, c="#6E9FFF",
                ha="right")
    rows = list(zip(series, colors))
    rows.sort(key=lambda r: -(calc(calcs[0], r[0][2]) if calcs and not math.isnan(calc(calcs[0], r[0][2]))
                              else -1e300))
    fit = int((h - row_h - 6) // row_h)
    for n, ((name, _, vs), c) in enumerate(rows[:fit]):
        ry = y + row_h * (n + 1) + 4
        cv.fig.patches.append(Rectangle((x / cv.w, 1 - (ry + size / 2 + 2) / cv.h), 14 / cv.w, 3 / cv.h,
                                        transform=cv.fig.transFigure, fc=c, ec="none"))
        label = f"+{len(rows) - fit + 1} more" if n == fit - 1 and len(rows) > fit else name
        cv.text(x + 19, ry, cv.fit(label, size, name_w - 20), size=size, c=TEXT if label == name else MUTED)
        if label != name:
            break
        for i, cn in enumerate(calcs):
            cv.text(x + name_w + col_w * (i + 1), ry, fmt(calc(cn, vs), unit, decimals), size=size, ha="right")


def reduce_values(prom, p):
    """[(name, value, sparkline or None)] of a stat panel."""
    out = []
    for t in p["targets"]:
        if t.get("range") and p.get("options", {}).get("graphMode") == "area":
            for labels, ts, vs in prom.range(t["expr"]):
                v = calc("lastNotNull", vs)
                out.append((legend_name(t.get("legendFormat"), labels, t["expr"]), v, (ts, vs)))
        else:
            for labels, v in prom.instant(t["expr"]):
                out.append((legend_name(t.get("legendFormat"), labels, t["expr"]), v, None))
    return out


def draw_stat(cv, prom, p, x, y, w, h):
    d = p["fieldConfig"]["defaults"]
    unit, decimals, mappings = d.get("unit", "short"), d.get("decimals"), d.get("mappings", [])
    opts = p.get("options", {})
    values = reduce_values(prom, p)
    if not values:
        return no_data(cv, x, y, w, h)
    n = len(values)
    orient = opts.get("orientation", "auto")
    horizontal = orient == "horizontal" or (orient == "auto" and h > w)
    show_name = opts.get("textMode") in ("value_and_name", "name") or n > 1
    for i, (name, v, spark) in enumerate(values):
        if horizontal:
            cx, cy, cw, ch = x, y + i * h / n, w, h / n
        else:
            cx, cy, cw, ch = x + i * w / n, y, w / n, h
        m = mapped(v, mappings)
        text = m[0] if m and m[0] else fmt(v, unit, decimals)
        c = (m[1] if m and m[1] else None) or threshold_color(v, d.get("thresholds"))
        if opts.get("colorMode") == "background":
            cv.box(cx + 3, cy + 3, cw - 6, ch - 6, fc=c, ec="none")
            fg = "#ffffff"
        else:
            fg = c
        if spark:
            ts, vs = spark
            ax = cv.axes(cx + 4, cy + ch * 0.55, cw - 8, ch * 0.45 - 4)
            clean = [0 if math.isnan(z) else z for z in vs]
            ax.fill_between(ts, 0, clean, color=c, alpha=0.18, lw=0)
            ax.plot(ts, clean, color=c, lw=1, alpha=0.8)
            ax.set_xlim(prom.start, prom.end)
            ax.set_ylim(min(0, min(clean)), (max(clean) or 1) * 1.15)
        if horizontal and n > 1 and show_name:
            size = min(ch * 0.42, 28)
            cv.text(cx + 14, cy + ch / 2, cv.fit(name, size * 0.6, cw * 0.6), size=size * 0.6,
                    c="#ffffff" if fg == "#ffffff" else TEXT, va="center")
            cv.text(cx + cw - 14, cy + ch / 2, text, size=size, c=fg, weight="bold", ha="right", va="center")
            continue
        size = min(ch * (0.38 if show_name else 0.5), cw / max(4, len(text)) * 1.55, 44)
        vy = cy + ch * (0.52 if show_name else 0.42)
        if show_name:
            cv.text(cx + cw / 2, cy + ch * 0.22, cv.fit(name, 12, cw - 10), size=12, c=TEXT, ha="center",
                    va="center")
        cv.text(cx + cw / 2, vy, text, size=size, c=fg, weight="bold", ha="center", va="center")


def draw_bargauge(cv, prom, p, x, y, w, h):
    d = p["fieldConfig"]["defaults"]
    unit, decimals = d.get("unit", "short"), d.get("decimals")
    mode = d.get("color", {}).get("mode", "thresholds")
    values = []
    for t in p["targets"]:
        for labels, v in prom.instant(t["expr"]):
            values.append((legend_name(t.get("legendFormat"), labels, t["expr"]), v))
    if not values:
        return no_data(cv, x, y, w, h)
    finite = [v for _, v in values if not math.isnan(v)]
    vmin = d.get("min", 0)
    vmax = d.get("max", max(finite) if finite else 1) or 1
    n = len(values)
    row = h / n
    size = max(9, min(13, row * 0.55))
    name_w = min(w * 0.5, max(cv.width_of(nm, size) for nm, _ in values) + 24)
    val_w = max(cv.width_of(fmt(v, unit, decimals), size + 2, "bold") for _, v in values) + 14
    bar_x, bar_w = x + name_w, w - name_w - val_w
    ax = cv.axes(bar_x, y, bar_w, h)
    ax.set_xlim(0, 1)
    ax.set_ylim(h, 0)
    colors = series_colors(n)
    for i, (name, v) in enumerate(values):
        c = colors[i] if mode.startswith("palette") else threshold_color(v, d.get("thresholds"))
        bh = min(row * 0.78, 40)
        by = i * row + (row - bh) / 2
        ax.add_patch(Rectangle((0, by), 1, bh, fc=(0.8, 0.8, 0.86, 0.06), ec="none"))
        frac = 0 if math.isnan(v) else max(0.0, min(1.0, (v - vmin) / ((vmax - vmin) or 1)))
        if frac > 0:
            rgba = to_rgba(c)
            grad = [[(*rgba[:3], 0.25 + 0.75 * k / 63) for k in range(64)]]
            ax.imshow(grad, extent=(0, frac, by + bh, by), aspect="auto", interpolation="bicubic")
        cy = y + i * row + row / 2
        cv.text(x + name_w - 10, cy, cv.fit(name, size, name_w - 14), size=size, c=TEXT, ha="right",
                va="center")
        cv.text(x + w - 6, cy, fmt(v, unit, decimals), size=size + 2, c=c, weight="bold", ha="right",
                va="center")
    ax.set_xlim(0, 1)
    ax.set_ylim(h, 0)


def table_rows(prom, p):
    """Applies the panel's transformations (merge, organize, groupingToMatrix)."""
    frames = []
    for t in p["targets"]:
        frames.append((t["refId"], prom.instant(t["expr"])))
    multi = len(frames) > 1
    rows, order = {}, []
    label_cols = set()
    for ref, res in frames:
        col = f"Value #{ref}" if multi else "Value"
        for labels, v in res:
            labels = {k: v2 for k, v2 in labels.items() if k != "__name__"}
            label_cols.update(labels)
            key = tuple(sorted(labels.items()))
            if key not in rows:
                rows[key] = dict(labels)
                order.append(key)
            rows[key][col] = v
    value_cols = [f"Value #{r}" for r, _ in frames] if multi else ["Value"]
    cols = sorted(label_cols) + value_cols
    table = [rows[k] for k in order]
    for tr in p.get("transformations", []):
        o = tr.get("options", {})
        if tr["id"] == "groupingToMatrix":
            rf, cf, vf = o["rowField"], o["columnField"], o.get("valueField", "Value")
            new, cvals = {}, []
            for r in table:
                new.setdefault(r.get(rf, ""), {f"{rf}\\{cf}": r.get(rf, "")})[r.get(cf, "")] = r.get(vf)
                if r.get(cf, "") not in cvals:
                    cvals.append(r.get(cf, ""))
            cols = [f"{rf}\\{cf}"] + sorted(cvals)
            table = [new[k] for k in sorted(new)]
        elif tr["id"] == "organize":
            cols = [c for c in cols if not o.get("excludeByName", {}).get(c)]
            ren = o.get("renameByName", {})
            table = [{ren.get(k, k): v for k, v in r.items()} for r in table]
            cols = [ren.get(c, c) for c in cols]
    for s in p.get("options", {}).get("sortBy", []):
        key = s["displayName"]
        table.sort(key=lambda r: (r.get(key) is None or (isinstance(r.get(key), float) and math.isnan(r[key])),
                                  -(r.get(key) or 0) if s.get("desc") else (r.get(key) or 0)))
    return cols, table


def draw_table(cv, prom, p, x, y, w, h):
    d = p["fieldConfig"]["defaults"]
    unit, decimals = d.get("unit", "short"), d.get("decimals")
    cols, table = table_rows(prom, p)
    if not table:
        return no_data(cv, x, y, w, h)

    def cell(v):
        if isinstance(v, float):
            return fmt(v, unit, decimals)
        return "" if v is None else str(v)

    size, row_h = 12, 23
    widths = [max([cv.width_of(c, size, "bold")] + [cv.width_of(cell(r.get(c)), size) for r in table]) + 24
              for c in cols]
    scale = w / sum(widths)
    widths = [wd * scale for wd in widths]
    cx = x
    for c, wd in zip(cols, widths):
        numeric = any(isinstance(r.get(c), float) for r in table)
        tx = cx + wd - 10 if numeric else cx + 10
        cv.text(tx, y + row_h / 2, c, size=size, c="#6E9FFF" if c in [
            s["displayName"] for s in p.get("options", {}).get("sortBy", [])] else TEXT, weight="bold",
            ha="right" if numeric else "left", va="center")
        cx += wd
    cv.fig.patches.append(Rectangle((x / cv.w, 1 - (y + row_h) / cv.h), w / cv.w, 1 / cv.h,
                                    transform=cv.fig.transFigure, fc=BORDER, ec="none"))
    fit = int((h - row_h) // row_h)
    for i, r in enumerate(table[:fit]):
        ry = y + row_h * (i + 1)
        if i % 2:
            cv.fig.patches.append(Rectangle((x / cv.w, 1 - (ry + row_h) / cv.h), w / cv.w, row_h / cv.h,
                                            transform=cv.fig.transFigure, fc="#1f2228", ec="none"))
        if i == fit - 1 and len(table) > fit:
            cv.text(x + 10, ry + row_h / 2, f"+{len(table) - fit + 1} more rows", size=size, c=MUTED, va="center")
            break
        cx = x
        for c, wd in zip(cols, widths):
            v = r.get(c)
            numeric = isinstance(v, float) or any(isinstance(rr.get(c), float) for rr in table)
            text = cell(v)
            cv.text(cx + wd - 10 if numeric else cx + 10, ry + row_h / 2, cv.fit(text, size, wd - 16), size=size,
                    c=TEXT, ha="right" if numeric else "left", va="center")
            cx += wd


def draw_timeline(cv, prom, p, x, y, w, h):
    d = p["fieldConfig"]["defaults"]
    mappings = d.get("mappings", [])
    series = range_series(prom, p)
    if not series:
        return no_data(cv, x, y, w, h)
    series.sort()
    name_w = max(cv.width_of(s[0], 12) for s in series) + 16
    legend_h = 22
    ax = cv.axes(x + name_w, y + 4, w - name_w - 8, h - legend_h - 26, frame=True)
    n = len(series)
    seen = {}
    for i, (name, ts, vs) in enumerate(series):
        row_y = n - 1 - i
        cv.text(x + name_w - 8, y + 4 + (h - legend_h - 26) * (i + 0.5) / n, name, size=12, ha="right",
                va="center")
        start = 0
        for j in range(1, len(vs) + 1):
            if j == len(vs) or vs[j] != vs[start] or ts[j] - ts[j - 1] > prom.step * 1.5:
                v = vs[start]
                if not math.isnan(v):
                    m = mapped(v, mappings)
                    c = (m[1] if m and m[1] else None) or threshold_color(v, d.get("thresholds"))
                    label = (m[0] if m and m[0] else None) or fmt(v, "short")
                    seen[label] = c
                    t0, t1 = ts[start], ts[j - 1] + prom.step if j < len(vs) else ts[j - 1]
                    ax.add_patch(Rectangle((tnum(t0), row_y + 0.1), tnum(t1) - tnum(t0), 0.8, fc=c, ec=PANEL,
                                           lw=1, alpha=0.85))
                    span_px = (t1 - t0) / (prom.end - prom.start) * (w - name_w)
                    if span_px > cv.width_of(label, 11) + 8:
                        ax.text(tnum((t0 + t1) / 2), row_y + 0.5, label, ha="center", va="center", fontsize=px(11),
                                color="#ffffff" if c != "#2c3235" else MUTED)
                if j < len(vs):
                    start = j
    time_axis(ax, prom.start, prom.end)
    ax.set_ylim(0, n)
    ax.set_yticks([])
    for s in ax.spines.values():
        s.set_visible(False)
    ax.tick_params(colors=MUTED, labelsize=px(11), length=0)
    legend_entries(cv, x + 8, y + h - legend_h + 2, w - 16, list(seen.items()), max_rows=1)


DRAW = {"timeseries": draw_timeseries, "stat": draw_stat, "bargauge": draw_bargauge, "table": draw_table,
        "state-timeline": draw_timeline}


def flatten(panels):
    for p in panels:
        yield p
        yield from p.get("panels", [])


def render(board, prom, out, minutes):
    panels = list(flatten(board["panels"]))
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    height = HEADER + rows * (CELL_H + MARGIN) + MARGIN
    cv = Canvas(WIDTH, height)
    col = (WIDTH - MARGIN) / 24
    cv.text(16, 14, board["title"], size=20, weight="bold")
    pills = []
    for v in board.get("templating", {}).get("list", []):
        value = v.get("current", {}).get("text", "")
        pills.append(f"{v.get('label') or v['name']}: {'All' if value in (['All'], 'All') else value}")
    px_ = 16
    for pill in pills:
        pw = cv.width_of(pill, 12) + 20
        cv.box(px_, 40, pw, 20, fc="#22252b", ec=BORDER)
        cv.text(px_ + 10, 50, pill, size=12, c=MUTED, va="center")
        px_ += pw + 8
    stamp = datetime.fromtimestamp(prom.end, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cv.text(WIDTH - 16, 18, f"Last {minutes} minutes · to {stamp}", size=12, c=MUTED, ha="right")
    cv.text(WIDTH - 16, 40, "rendered by dashboards/render.py from Prometheus", size=11, c=MUTED, ha="right")
    for p in panels:
        g = p["gridPos"]
        x = MARGIN + g["x"] * col
        y = HEADER + g["y"] * (CELL_H + MARGIN)
        w = g["w"] * col - MARGIN
        h = g["h"] * CELL_H + (g["h"] - 1) * MARGIN
        if p["type"] == "row":
            cv.text(x + 2, y + h / 2 + 2, p["title"], size=15, weight="bold", va="center")
            continue
        cv.box(x, y, w, h)
        cv.text(x + 10, y + 9, cv.fit(p["title"], 13, w - 20, "bold"), size=13, weight="bold")
        draw = DRAW.get(p["type"])
        if draw is None:
            no_data(cv, x, y, w, h)
            continue
        draw(cv, prom, p, x + 6, y + 32, w - 12, h - 38)
    buf = io.BytesIO()
    cv.fig.savefig(buf, format="png", dpi=DPI, facecolor=BG)
    plt.close(cv.fig)
    # Without the alpha channel (Pillow comes with matplotlib): a smaller file, the same picture.
    Image.open(buf).convert("RGB").save(out, optimize=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--dashboard", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=int, default=10, help="the window shown, ending now")
    ap.add_argument("--rate-interval", default="1m", help="what $__rate_interval becomes")
    a = ap.parse_args()
    with open(a.dashboard) as f:
        board = json.load(f)
    prom = Prom(a.prometheus, time.time(), a.minutes, a.rate_interval)
    render(board, prom, a.out, a.minutes)
    print(a.out)


if __name__ == "__main__":
    main()
