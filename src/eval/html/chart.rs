//! The page's Pareto chart: an inline SVG of each route's cost (per task
//! in USD, or its median latency) against its accuracy, its 95 % interval
//! as a bar, the front joined and drawn red, a route excluded from the
//! front drawn hollow. Each point is numbered (the list under the chart
//! names them), focusable (`tabindex`), carries its figures in a `<title>`
//! (the browser's tooltip, without JavaScript) and in `data-` attributes
//! that the page's script shows beside the chart on hover or focus. The
//! figures are the markdown report's, formatted the same way.

use std::fmt::Write;

use super::super::CostAxis;
use super::super::report::RouteRow;
use super::escape::escape;

const W: f64 = 640.0;
const H: f64 = 360.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 20.0;
const BOTTOM: f64 = 48.0;

/// One point as the chart draws it: the row's figures as the markdown
/// report writes them.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub route: String,
    /// `{:.1}` percent, as in `report.md`.
    pub accuracy: String,
    /// Cost per task `{:.6}` USD, or the median latency `{:.0}` ms.
    pub cost: String,
    pub on_front: bool,
    pub fair: bool,
    pub x: f64,
    pub y: f64,
}

/// The points of `rows` whose cost is known, in the order of the rows.
pub fn points(rows: &[RouteRow], axis: CostAxis) -> Vec<Point> {
    let known: Vec<(&RouteRow, f64)> = rows
        .iter()
        .filter_map(|r| Some((r, r.cost.filter(|c| c.is_finite())?)))
        .collect();
    let span = span(known.iter().map(|&(_, c)| c));
    known
        .into_iter()
        .map(|(r, c)| Point {
            route: r.route.clone(),
            accuracy: format!("{:.1}", 100.0 * r.accuracy),
            cost: match axis {
                CostAxis::Usd => format!("{c:.6}"),
                CostAxis::Latency => format!("{c:.0}"),
            },
            on_front: r.on_front,
            fair: r.fair,
            x: LEFT + (W - LEFT - RIGHT) * (c / span),
            y: y_of(r.accuracy),
        })
        .collect()
}

/// The cost axis runs from 0 to a little past the dearest route.
fn span(costs: impl Iterator<Item = f64>) -> f64 {
    let max = costs.fold(0.0_f64, f64::max);
    if max > 0.0 { max * 1.05 } else { 1.0 }
}

/// A tick's value with two significant digits.
fn tick(v: f64) -> String {
    if v <= 0.0 {
        return "0".into();
    }
    let digits = (1.0 - v.log10().floor()).clamp(0.0, 12.0) as usize;
    format!("{v:.digits$}")
}

fn y_of(accuracy: f64) -> f64 {
    TOP + (H - TOP - BOTTOM) * (1.0 - accuracy.clamp(0.0, 1.0))
}

fn unit(axis: CostAxis) -> (&'static str, &'static str) {
    match axis {
        CostAxis::Usd => ("cost per task (USD)", "USD per task"),
        CostAxis::Latency => ("median latency (ms)", "ms median latency"),
    }
}

/// The chart, the list that names its points, and the box the script
/// fills on hover or focus.
pub fn chart(rows: &[RouteRow], axis: CostAxis) -> String {
    let pts = points(rows, axis);
    let (axis_name, unit) = unit(axis);
    let mut s = String::new();
    if pts.is_empty() {
        let _ = writeln!(
            s,
            "<p>No route has a known {axis_name}: nothing to plot (the tables have every figure).</p>"
        );
        return s;
    }
    let _ = writeln!(
        s,
        "<figure class=\"chart\"><svg id=\"pareto\" viewBox=\"0 0 {W} {H}\" role=\"group\" \
         aria-label=\"accuracy against {axis_name}, one point per route\" \
         xmlns=\"http://www.w3.org/2000/svg\">"
    );
    // Axes, grid and ticks.
    let (x0, x1, y1) = (LEFT, W - RIGHT, H - BOTTOM);
    for i in 0..=5 {
        let a = f64::from(i) / 5.0;
        let y = y_of(a);
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{x0}\" y1=\"{y:.1}\" x2=\"{x1}\" y2=\"{y:.1}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{:.0} %</text>",
            x0 - 6.0,
            y + 4.0,
            100.0 * a
        );
    }
    let span = span(rows.iter().filter_map(|r| r.cost.filter(|c| c.is_finite())));
    for i in 0..=4 {
        let v = span * f64::from(i) / 4.0;
        let x = x0 + (x1 - x0) * f64::from(i) / 4.0;
        let _ = writeln!(
            s,
            "<line class=\"axis\" x1=\"{x:.1}\" y1=\"{y1}\" x2=\"{x:.1}\" y2=\"{:.1}\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            y1 + 4.0,
            y1 + 16.0,
            tick(v)
        );
    }
    let _ = writeln!(
        s,
        "<line class=\"axis\" x1=\"{x0}\" y1=\"{y1}\" x2=\"{x1}\" y2=\"{y1}\"/>\
         <line class=\"axis\" x1=\"{x0}\" y1=\"{TOP}\" x2=\"{x0}\" y2=\"{y1}\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{axis_name} →</text>\
         <text x=\"14\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {:.1})\">accuracy →</text>",
        (x0 + x1) / 2.0,
        H - 12.0,
        (TOP + y1) / 2.0,
        (TOP + y1) / 2.0,
    );
    // The front, cheapest first.
    let mut front: Vec<&Point> = pts.iter().filter(|p| p.on_front).collect();
    front.sort_by(|a, b| a.x.total_cmp(&b.x));
    if front.len() > 1 {
        let line: Vec<String> = front
            .iter()
            .map(|p| format!("{:.1},{:.1}", p.x, p.y))
            .collect();
        let _ = writeln!(
            s,
            "<polyline class=\"front\" points=\"{}\"/>",
            line.join(" ")
        );
    }
    // Intervals, then points above them.
    for (r, p) in rows.iter().filter(|r| r.cost.is_some()).zip(&pts) {
        let _ = writeln!(
            s,
            "<line class=\"ci\" x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\"/>",
            y_of(r.interval.0),
            y_of(r.interval.1),
            x = p.x,
        );
    }
    for (i, p) in pts.iter().enumerate() {
        let class = if p.on_front {
            "pt front"
        } else if !p.fair {
            "pt excluded"
        } else {
            "pt"
        };
        let mark = if p.on_front {
            ", on the Pareto front"
        } else if !p.fair {
            ", excluded from the front (failed or degraded answers)"
        } else {
            ""
        };
        let label = escape(&format!(
            "{}: accuracy {} %, {} {unit}{mark}",
            p.route, p.accuracy, p.cost
        ));
        let _ = writeln!(
            s,
            "<g class=\"{class}\" tabindex=\"0\" role=\"img\" aria-label=\"{label}\" \
             data-route=\"{}\" data-accuracy=\"{}\" data-cost=\"{}\">\
             <title>{label}</title>\
             <circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"6\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text></g>",
            escape(&p.route),
            escape(&p.accuracy),
            escape(&p.cost),
            p.x,
            p.y,
            p.x + 9.0,
            p.y - 8.0,
            i + 1,
        );
    }
    let _ = writeln!(s, "</svg>");
    let _ = writeln!(
        s,
        "<figcaption><output id=\"pareto-info\" aria-live=\"polite\">\
         Hover over or focus (Tab) a point for its figures.</output>\
         <ol class=\"legend\">"
    );
    for p in &pts {
        let _ = writeln!(
            s,
            "<li>{}{}: {} %, {} {unit}</li>",
            escape(&p.route),
            if p.on_front { " ★" } else { "" },
            escape(&p.accuracy),
            escape(&p.cost),
        );
    }
    let _ = writeln!(
        s,
        "</ol>Red: the Pareto front (★); hollow: excluded from it; bars: 95 % intervals.</figcaption></figure>"
    );
    s
}
