//! The report of a run: per route, accuracy with its 95 % Wilson
//! interval, cost, tokens, latency and TTFT percentiles and what the
//! strategy did; accuracy per group of tasks; every pair of routes
//! compared on the same tasks with McNemar's exact test; `report.md` and
//! `pareto.svg` (cost against accuracy from a tenth below the lowest
//! interval, the Pareto front marked).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use super::run::Outcome;
use super::stats::{mcnemar, percentile, wilson};
use super::task::Task;

/// One route's figures.
#[derive(Debug, Clone)]
pub struct RouteRow {
    pub route: String,
    pub n: u64,
    pub correct: u64,
    pub accuracy: f64,
    pub interval: (f64, f64),
    pub errors: u64,
    /// Answers whose request record the event log had: cost and attempts
    /// are known for these only.
    pub recorded: u64,
    /// Total cost of the route's answers, and per task (mean).
    pub cost_usd: f64,
    pub cost_per_task: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub latency_p50: Option<f64>,
    pub latency_p95: Option<f64>,
    pub ttft_p50: Option<f64>,
    pub ttft_p95: Option<f64>,
    /// Which model wrote the answers, as shares.
    pub served_by: Vec<(String, f64)>,
    /// Strategy facts: escalation rate, consults per task, race winners,
    /// panels' first ranked.
    pub strategy: Vec<String>,
    pub on_front: bool,
}

/// Two routes on the same tasks.
#[derive(Debug, Clone)]
pub struct PairRow {
    pub a: String,
    pub b: String,
    pub pairs: u64,
    pub a_only: u64,
    pub b_only: u64,
    pub p_value: f64,
}

/// Figures per route, in the order of `routes`.
pub fn routes(outcomes: &[Outcome], routes: &[String]) -> Vec<RouteRow> {
    let mut rows: Vec<RouteRow> = routes
        .iter()
        .map(|r| row(r, outcomes.iter().filter(|o| &o.route == r)))
        .collect();
    mark_front(&mut rows);
    rows
}

fn row<'a>(route: &str, it: impl Iterator<Item = &'a Outcome>) -> RouteRow {
    let os: Vec<&Outcome> = it.collect();
    let n = os.len() as u64;
    let correct = os.iter().filter(|o| o.correct).count() as u64;
    let cost: f64 = os.iter().map(|o| o.cost_usd).sum();
    let recorded = os.iter().filter(|o| o.recorded).count() as u64;
    let mut lat: Vec<f64> = os.iter().map(|o| o.latency_ms).collect();
    let mut ttft: Vec<f64> = os.iter().filter_map(|o| o.ttft_ms).collect();
    let mut served: BTreeMap<String, u64> = BTreeMap::new();
    for o in &os {
        let m = o.served_by.clone().unwrap_or_else(|| "(none)".into());
        *served.entry(m).or_default() += 1;
    }
    let share = |k: u64| if n == 0 { 0.0 } else { k as f64 / n as f64 };
    let mut served_by: Vec<(String, f64)> =
        served.into_iter().map(|(m, k)| (m, share(k))).collect();
    served_by.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut strategy = Vec::new();
    let escalated = os
        .iter()
        .filter(|o| o.strategy.contains_key("escalations"))
        .count();
    if escalated > 0 {
        strategy.push(format!(
            "escalated {:.0} %",
            100.0 * share(escalated as u64)
        ));
    }
    let consults: u64 = os
        .iter()
        .filter_map(|o| o.strategy.get("consults")?.as_u64())
        .sum();
    if consults > 0 {
        strategy.push(format!("{:.2} consults a task", share(consults)));
    }
    for (key, what) in [
        ("race_winner", "race won by"),
        ("top_ranked", "ranked first"),
    ] {
        let mut by: BTreeMap<&str, u64> = BTreeMap::new();
        for o in &os {
            if let Some(m) = o.strategy.get(key).and_then(|v| v.as_str()) {
                *by.entry(m).or_default() += 1;
            }
        }
        if !by.is_empty() {
            let list: Vec<String> = by
                .iter()
                .map(|(m, k)| format!("{m} {:.0} %", 100.0 * share(*k)))
                .collect();
            strategy.push(format!("{what} {}", list.join(", ")));
        }
    }
    RouteRow {
        route: route.to_string(),
        n,
        correct,
        accuracy: share(correct),
        interval: wilson(correct, n),
        errors: os
            .iter()
            .filter(|o| o.failed || !(200..300).contains(&o.status))
            .count() as u64,
        recorded,
        cost_usd: cost,
        cost_per_task: if recorded == 0 {
            0.0
        } else {
            cost / recorded as f64
        },
        input_tokens: os.iter().map(|o| o.input_tokens).sum(),
        output_tokens: os.iter().map(|o| o.output_tokens).sum(),
        latency_p50: percentile(&mut lat, 50.0),
        latency_p95: percentile(&mut lat, 95.0),
        ttft_p50: percentile(&mut ttft, 50.0),
        ttft_p95: percentile(&mut ttft, 95.0),
        served_by,
        strategy,
        on_front: false,
    }
}

/// A route is on the Pareto front when no other is at least as accurate
/// and at most as costly, and better in one of the two. A route whose
/// cost is unknown (no answer recorded) is on no front.
fn mark_front(rows: &mut [RouteRow]) {
    let points: Vec<Option<(f64, f64)>> = rows
        .iter()
        .map(|r| (r.recorded > 0).then_some((r.cost_per_task, r.accuracy)))
        .collect();
    for (i, r) in rows.iter_mut().enumerate() {
        let Some((c, a)) = points[i] else {
            r.on_front = false;
            continue;
        };
        r.on_front = !points.iter().enumerate().any(|(j, p)| {
            p.is_some_and(|(c2, a2)| j != i && c2 <= c && a2 >= a && (c2 < c || a2 > a))
        });
    }
}

/// A route's cost: total (per task), or a dash when no answer of it has
/// a record in the event log.
fn cost(r: &RouteRow) -> String {
    if r.recorded == 0 {
        return "–".into();
    }
    let mut s = format!("{:.6} ({:.6})", r.cost_usd, r.cost_per_task);
    if r.recorded < r.n {
        let _ = write!(s, " of {} recorded", r.recorded);
    }
    s
}

/// Every pair of routes, on the (task, repeat) both answered.
pub fn pairs(outcomes: &[Outcome], routes: &[String]) -> Vec<PairRow> {
    let by: HashMap<(&str, &str, u32), bool> = outcomes
        .iter()
        .map(|o| ((o.route.as_str(), o.id.as_str(), o.repeat), o.correct))
        .collect();
    let mut rows = Vec::new();
    for (i, a) in routes.iter().enumerate() {
        for b in routes.iter().skip(i + 1) {
            let both: Vec<(bool, bool)> = outcomes
                .iter()
                .filter(|o| &o.route == a)
                .filter_map(|o| Some((o.correct, *by.get(&(b.as_str(), o.id.as_str(), o.repeat))?)))
                .collect();
            let t = mcnemar(&both);
            rows.push(PairRow {
                a: a.clone(),
                b: b.clone(),
                pairs: both.len() as u64,
                a_only: t.a_only,
                b_only: t.b_only,
                p_value: t.p_value,
            });
        }
    }
    rows
}

/// One group of tasks: each route's right answers and answers, in the
/// order of the routes.
#[derive(Debug, Clone)]
pub struct GroupRow {
    pub group: String,
    pub cells: Vec<(u64, u64)>,
}

/// Accuracy per group of tasks, groups in the order of the task file.
pub fn groups(outcomes: &[Outcome], routes: &[String], tasks: &[Task]) -> Vec<GroupRow> {
    let mut rows: Vec<GroupRow> = Vec::new();
    let mut group_row: HashMap<&str, usize> = HashMap::new();
    let mut task_row: HashMap<&str, usize> = HashMap::new();
    for t in tasks {
        let at = *group_row.entry(t.group()).or_insert_with(|| {
            rows.push(GroupRow {
                group: t.group().to_string(),
                cells: vec![(0, 0); routes.len()],
            });
            rows.len() - 1
        });
        task_row.insert(t.id.as_str(), at);
    }
    for o in outcomes {
        let (Some(&at), Some(col)) = (
            task_row.get(o.id.as_str()),
            routes.iter().position(|r| r == &o.route),
        ) else {
            continue;
        };
        if let Some(cell) = rows.get_mut(at).and_then(|r| r.cells.get_mut(col)) {
            cell.0 += u64::from(o.correct);
            cell.1 += 1;
        }
    }
    rows
}

/// What a pair's test lets one say.
pub fn verdict(p: &PairRow) -> String {
    if p.p_value >= 0.05 {
        return "no significant difference".into();
    }
    let (winner, loser) = if p.a_only > p.b_only {
        (&p.a, &p.b)
    } else {
        (&p.b, &p.a)
    };
    format!("**{winner}** beats {loser}")
}

fn ms(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.0}"))
}

/// `report.md`.
pub fn markdown(
    title: &str,
    notes: &[String],
    rows: &[RouteRow],
    groups: &[GroupRow],
    pairs: &[PairRow],
    partial: bool,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# conclave eval: {title}\n");
    if !notes.is_empty() {
        let _ = writeln!(s, "Baselines added:\n");
        for n in notes {
            let _ = writeln!(s, "- {n}");
        }
        let _ = writeln!(s);
    }
    if partial {
        let _ = writeln!(
            s,
            "**Partial:** the run was interrupted; run it again to resume.\n"
        );
    }
    let _ = writeln!(
        s,
        "| route | tasks | accuracy (95 % CI) | cost USD (per task) | tokens in / out | latency p50 / p95 ms | TTFT p50 / p95 ms | errors | Pareto |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} % ({:.1}–{:.1}) | {} | {} / {} | {} / {} | {} / {} | {} | {} |",
            r.route,
            r.n,
            100.0 * r.accuracy,
            100.0 * r.interval.0,
            100.0 * r.interval.1,
            cost(r),
            r.input_tokens,
            r.output_tokens,
            ms(r.latency_p50),
            ms(r.latency_p95),
            ms(r.ttft_p50),
            ms(r.ttft_p95),
            r.errors,
            if r.on_front { "★" } else { "" }
        );
    }
    let _ = writeln!(s, "\n## What each route did\n");
    for r in rows {
        let served: Vec<String> = r
            .served_by
            .iter()
            .map(|(m, x)| format!("{m} {:.0} %", 100.0 * x))
            .collect();
        let _ = write!(s, "- **{}**: answered by {}", r.route, served.join(", "));
        for f in &r.strategy {
            let _ = write!(s, "; {f}");
        }
        let _ = writeln!(s);
    }
    if groups.len() > 1 {
        let _ = writeln!(s, "\n## Accuracy by group\n");
        let names: Vec<&str> = rows.iter().map(|r| r.route.as_str()).collect();
        let _ = writeln!(s, "| group | {} |", names.join(" | "));
        let _ = writeln!(s, "|---|{}", "---|".repeat(names.len()));
        for g in groups {
            let cells: Vec<String> = g
                .cells
                .iter()
                .map(|&(k, n)| match n {
                    0 => "–".to_string(),
                    n => format!("{k}/{n} ({:.0} %)", 100.0 * k as f64 / n as f64),
                })
                .collect();
            let group = g.group.replace('|', "\\|");
            let _ = writeln!(s, "| {group} | {} |", cells.join(" | "));
        }
    }
    if !pairs.is_empty() {
        let _ = writeln!(s, "\n## Pairs (McNemar's exact test on the same tasks)\n");
        let _ = writeln!(
            s,
            "| A | B | pairs | only A right | only B right | p | verdict |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for p in pairs {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {:.4} | {} |",
                p.a,
                p.b,
                p.pairs,
                p.a_only,
                p.b_only,
                p.p_value,
                verdict(p)
            );
        }
    }
    let _ = writeln!(
        s,
        "\nCost and tokens are the gateway's own records (its event log); a judge's grading is not counted. ![cost against accuracy](pareto.svg)"
    );
    if rows.iter().any(|r| r.recorded < r.n) {
        let _ = writeln!(
            s,
            "\nSome answers have no record in the event log (a running gateway evaluated without `--events`, or a record it had not written): their cost is unknown (–, or counted over the recorded answers only) and their tokens are the stream's usage chunk."
        );
    }
    s
}

/// `pareto.svg`: one point per route, cost per task (x) against accuracy
/// (y) with its interval, the Pareto front joined.
pub fn svg(rows: &[RouteRow]) -> String {
    let (w, h, pad) = (640.0, 420.0, 60.0);
    // A route whose cost is unknown has no place on the cost axis.
    let rows: Vec<&RouteRow> = rows.iter().filter(|r| r.recorded > 0).collect();
    let max_cost = rows
        .iter()
        .map(|r| r.cost_per_task)
        .fold(0.0_f64, f64::max)
        .max(1e-9)
        * 1.1;
    // Accuracy from the lowest interval (to a tenth below) up to 100 %.
    let floor = rows.iter().map(|r| r.interval.0).fold(1.0_f64, f64::min);
    let lo = ((floor * 10.0).floor() / 10.0).clamp(0.0, 0.9);
    let x = |c: f64| pad + (w - 2.0 * pad) * c / max_cost;
    let y = |a: f64| h - pad - (h - 2.0 * pad) * (a - lo) / (1.0 - lo);
    let mut s = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<line x1="{pad}" y1="{}" x2="{}" y2="{}" stroke="black"/>
<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{}" stroke="black"/>
<text x="{}" y="{}" text-anchor="middle">cost per task (USD, up to {max_cost:.6})</text>
<text x="15" y="{}" transform="rotate(-90 15 {})" text-anchor="middle">accuracy</text>
"##,
        h - pad,
        w - pad,
        h - pad,
        h - pad,
        w / 2.0,
        h - 15.0,
        h / 2.0,
        h / 2.0
    );
    for a in (0..=4).map(|i| lo + (1.0 - lo) * f64::from(i) / 4.0) {
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{:.1}" text-anchor="end">{:.0} %</text><line x1="{pad}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="#ddd"/>"##,
            pad - 5.0,
            y(a) + 4.0,
            a * 100.0,
            y(a),
            w - pad,
            y(a)
        );
    }
    let mut front: Vec<&RouteRow> = rows.iter().copied().filter(|r| r.on_front).collect();
    front.sort_by(|a, b| a.cost_per_task.total_cmp(&b.cost_per_task));
    let path: Vec<String> = front
        .iter()
        .map(|r| format!("{:.1},{:.1}", x(r.cost_per_task), y(r.accuracy)))
        .collect();
    if path.len() > 1 {
        let _ = writeln!(
            s,
            r##"<polyline points="{}" fill="none" stroke="#c33" stroke-dasharray="5,3"/>"##,
            path.join(" ")
        );
    }
    for r in &rows {
        let (cx, cy) = (x(r.cost_per_task), y(r.accuracy));
        let color = if r.on_front { "#c33" } else { "#336" };
        let _ = writeln!(
            s,
            r##"<line x1="{cx:.1}" y1="{:.1}" x2="{cx:.1}" y2="{:.1}" stroke="{color}"/><circle cx="{cx:.1}" cy="{cy:.1}" r="5" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"##,
            y(r.interval.0),
            y(r.interval.1),
            cx + 8.0,
            cy - 6.0,
            escape(&r.route)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
