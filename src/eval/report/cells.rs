//! How `report.md` and `report.html` write a figure: one function per
//! kind of cell, so both say the same.

use std::fmt::Write;

use super::{PairRow, RouteRow};

/// A route's cost: total (per task), or a dash when no answer of it has
/// a record in the event log.
pub fn cost(r: &RouteRow) -> String {
    if r.recorded == 0 {
        return "–".into();
    }
    let mut s = format!("{:.6} ({:.6})", r.cost_usd, r.cost_per_task);
    if r.recorded < r.n {
        let _ = write!(s, " of {} recorded", r.recorded);
    }
    s
}

/// What a pair's test lets one say.
pub fn verdict(p: &PairRow) -> String {
    match winner(p) {
        Some((w, l)) => format!("**{w}** beats {l}"),
        None => "no significant difference".into(),
    }
}

/// The pair's winner and loser when the difference is significant.
pub fn winner(p: &PairRow) -> Option<(&str, &str)> {
    if p.p_value >= 0.05 {
        None
    } else if p.a_only > p.b_only {
        Some((&p.a, &p.b))
    } else {
        Some((&p.b, &p.a))
    }
}

pub fn ms(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.0}"))
}

/// What a route's Pareto cell says: on the front, excluded for its
/// failed or degraded answers, or nothing.
pub fn front_cell(r: &RouteRow) -> String {
    if r.on_front {
        "★".into()
    } else if !r.fair && r.n > 0 {
        format!(
            "excluded ({:.0} % failed or degraded)",
            100.0 * r.unfair_share()
        )
    } else {
        String::new()
    }
}

/// The route's name, marked when some answers were made of fewer samples
/// than its strategy asks for.
pub fn route_cell(r: &RouteRow) -> String {
    if r.degraded > 0 {
        format!("{} (degraded)", r.route)
    } else {
        r.route.clone()
    }
}

/// Accuracy with its interval, in percent: `75.0 % (46.8–91.1)`.
pub fn accuracy_cell(r: &RouteRow) -> String {
    format!(
        "{:.1} % ({:.1}–{:.1})",
        100.0 * r.accuracy,
        100.0 * r.interval.0,
        100.0 * r.interval.1
    )
}

/// `k of N`, or a dash when nothing is recorded.
pub fn of(k: u64, n: u64, recorded: u64) -> String {
    if recorded == 0 {
        "–".into()
    } else {
        format!("{k} of {n}")
    }
}

/// What a route did, after its name in the reports' "What each route
/// did" list: who answered, its strategy's figures and its failures.
/// `strong` and `code` mark words the way the report's format does
/// (markdown's `**…**` and backticks; plain in the page, which escapes).
pub fn did(r: &RouteRow, strong: fn(&str) -> String, code: fn(&str) -> String) -> String {
    let served: Vec<String> = r
        .served_by
        .iter()
        .map(|(m, x)| format!("{m} {:.0} %", 100.0 * x))
        .collect();
    let mut line = format!("answered by {}", served.join(", "));
    for f in &r.strategy {
        let _ = write!(line, "; {f}");
    }
    if r.errors > 0 {
        let _ = write!(line, "; {} of {} answers failed", r.errors, r.n);
    }
    if r.samples > 0 {
        let _ = write!(
            line,
            "; {} of {} samples failed",
            r.failed_samples, r.samples
        );
    }
    if r.degraded > 0 {
        let _ = write!(
            line,
            "; {}: {} of {} answers made of fewer samples than asked",
            strong("degraded"),
            r.degraded,
            r.n
        );
    }
    if r.capped > 0 {
        let _ = write!(
            line,
            "; {} answers capped at max_tokens (finish_reason {}), graded as they are",
            r.capped,
            code("length")
        );
    }
    line
}
