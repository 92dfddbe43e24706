//! The report of a run: per route, accuracy with its 95 % Wilson
//! interval, cost, tokens, latency and TTFT percentiles, failed answers,
//! failed calls and samples, and what the strategy did; accuracy per
//! group of tasks; every pair of routes compared on the same tasks with
//! McNemar's exact test; which routes are on the Pareto front of the cost
//! axis the run weighs (a route with more than [`FAIR_SHARE`] of its
//! answers failed or degraded is on none); `report.md`, its cells written
//! by [`cells`] (which `report.html` uses too). The picture is
//! [`super::pareto`]'s, the page [`super::html`]'s.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use super::run::Outcome;
use super::stats::{mcnemar, percentile, wilson};
use super::task::Task;
use super::{CostAxis, Sampling};

pub mod cells;
pub use cells::{accuracy_cell, cost, front_cell, ms, of, route_cell, verdict, winner};

/// The most of a route's answers that may have failed or be degraded for
/// it to stand on the Pareto front: past it, its cost and accuracy are not
/// the strategy's (what it did not answer looks cheap and fast), so it is
/// drawn hollow and marked excluded instead.
pub const FAIR_SHARE: f64 = 0.05;

/// One route's figures.
#[derive(Debug, Clone)]
pub struct RouteRow {
    pub route: String,
    pub n: u64,
    pub correct: u64,
    pub accuracy: f64,
    pub interval: (f64, f64),
    /// Answers that failed: no answer, an error, a cut or empty answer,
    /// every sample of the strategy failed, the judge failed.
    pub errors: u64,
    /// Answers capped at `max_tokens` (`finish_reason` `length`), graded
    /// as they are.
    pub capped: u64,
    /// Answers whose request record the event log had: cost, attempts and
    /// samples are known for these only.
    pub recorded: u64,
    /// The upstream calls of the recorded answers, and how many failed.
    pub calls: u64,
    pub failed_calls: u64,
    /// The strategy's samples (race candidates, judge panellists) over the
    /// recorded answers, and how many gave no answer.
    pub samples: u64,
    pub failed_samples: u64,
    /// Answers made of fewer samples than the strategy asked for (some,
    /// not all, failed).
    pub degraded: u64,
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
    /// Its place on the cost axis the run weighs (cost per task in USD, or
    /// the median latency in ms); none when unknown (no answer recorded).
    pub cost: Option<f64>,
    /// Few enough answers failed or were degraded ([`FAIR_SHARE`]) for it
    /// to be a fair point on the Pareto front.
    pub fair: bool,
    pub on_front: bool,
}

impl RouteRow {
    /// The share of its answers that failed or were degraded.
    pub fn unfair_share(&self) -> f64 {
        if self.n == 0 {
            return 1.0;
        }
        (self.errors + self.degraded) as f64 / self.n as f64
    }
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

/// Figures per route, in the order of `routes`, the front weighed on
/// `axis`.
pub fn routes(outcomes: &[Outcome], routes: &[String], axis: CostAxis) -> Vec<RouteRow> {
    let mut rows: Vec<RouteRow> = routes
        .iter()
        .map(|r| row(r, outcomes.iter().filter(|o| &o.route == r), axis))
        .collect();
    mark_front(&mut rows);
    rows
}

fn row<'a>(route: &str, it: impl Iterator<Item = &'a Outcome>, axis: CostAxis) -> RouteRow {
    let os: Vec<&Outcome> = it.collect();
    let n = os.len() as u64;
    let correct = os.iter().filter(|o| o.correct).count() as u64;
    let cost: f64 = os.iter().map(|o| o.cost_usd).sum();
    let recorded: Vec<&&Outcome> = os.iter().filter(|o| o.recorded).collect();
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
    let errors = os
        .iter()
        .filter(|o| o.failed || !(200..300).contains(&o.status))
        .count() as u64;
    let degraded = os
        .iter()
        .filter(|o| !o.failed && o.failed_samples > 0)
        .count() as u64;
    let cost_per_task = if recorded.is_empty() {
        0.0
    } else {
        cost / recorded.len() as f64
    };
    let latency_p50 = percentile(&mut lat, 50.0);
    let mut r = RouteRow {
        route: route.to_string(),
        n,
        correct,
        accuracy: share(correct),
        interval: wilson(correct, n),
        errors,
        capped: os
            .iter()
            .filter(|o| !o.failed && o.finish_reason.as_deref() == Some("length"))
            .count() as u64,
        recorded: recorded.len() as u64,
        calls: recorded.iter().map(|o| o.attempts).sum(),
        failed_calls: recorded.iter().map(|o| o.failed_calls).sum(),
        samples: recorded.iter().map(|o| o.samples).sum(),
        failed_samples: recorded.iter().map(|o| o.failed_samples).sum(),
        degraded,
        cost_usd: cost,
        cost_per_task,
        input_tokens: os.iter().map(|o| o.input_tokens).sum(),
        output_tokens: os.iter().map(|o| o.output_tokens).sum(),
        latency_p50,
        latency_p95: percentile(&mut lat, 95.0),
        ttft_p50: percentile(&mut ttft, 50.0),
        ttft_p95: percentile(&mut ttft, 95.0),
        served_by,
        strategy,
        cost: match axis {
            CostAxis::Usd => (!recorded.is_empty()).then_some(cost_per_task),
            CostAxis::Latency => latency_p50,
        },
        fair: false,
        on_front: false,
    };
    r.fair = n > 0 && r.unfair_share() <= FAIR_SHARE;
    r
}

/// A route is on the Pareto front when no other is at least as accurate
/// and at most as costly, and better in one of the two. Only fair routes
/// ([`FAIR_SHARE`]) whose cost is known take part: a route whose answers
/// failed is on no front, and does not push a fair one off it.
fn mark_front(rows: &mut [RouteRow]) {
    let points: Vec<Option<(f64, f64)>> = rows
        .iter()
        .map(|r| r.cost.filter(|_| r.fair).map(|c| (c, r.accuracy)))
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

/// What the report says before its figures: the task file, the added
/// baselines, the sampling settings, the cost axis, and whether the run
/// was cut short.
#[derive(Debug, Clone)]
pub struct Head {
    pub title: String,
    pub notes: Vec<String>,
    pub sampling: Sampling,
    pub cost: CostAxis,
    pub partial: bool,
}

/// `report.md`.
pub fn markdown(head: &Head, rows: &[RouteRow], groups: &[GroupRow], pairs: &[PairRow]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# conclave eval: {}\n", head.title);
    if !head.notes.is_empty() {
        let _ = writeln!(s, "Baselines added:\n");
        for n in &head.notes {
            let _ = writeln!(s, "- {n}");
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(
        s,
        "Sampling: {} on every request (the judge's too).\n",
        head.sampling
    );
    if head.partial {
        let _ = writeln!(
            s,
            "**Partial:** the run was interrupted; run it again to resume.\n"
        );
    }
    let axis = match head.cost {
        CostAxis::Usd => "cost",
        CostAxis::Latency => "latency",
    };
    let _ = writeln!(
        s,
        "| route | tasks | accuracy (95 % CI) | cost USD (per task) | tokens in / out | latency p50 / p95 ms | TTFT p50 / p95 ms | errors | failed calls | Pareto ({axis}) |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} / {} | {} / {} | {} / {} | {} | {} | {} |",
            route_cell(r),
            r.n,
            accuracy_cell(r),
            cost(r),
            r.input_tokens,
            r.output_tokens,
            ms(r.latency_p50),
            ms(r.latency_p95),
            ms(r.ttft_p50),
            ms(r.ttft_p95),
            r.errors,
            of(r.failed_calls, r.calls, r.recorded),
            front_cell(r),
        );
    }
    let _ = writeln!(s, "\n## What each route did\n");
    for r in rows {
        let line = cells::did(r, |t| format!("**{t}**"), |t| format!("`{t}`"));
        let _ = writeln!(s, "- **{}**: {line}", r.route);
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
        "\nCost and tokens are the gateway's own records (its event log); a judge's grading is not counted. ![{} against accuracy](pareto.svg)",
        match head.cost {
            CostAxis::Usd => "cost per task",
            CostAxis::Latency => "median latency",
        }
    );
    let _ = writeln!(
        s,
        "\n`errors`: answers that failed (an error, a cut or empty answer, every sample of the strategy failed, the judge failed); they count as wrong. `failed calls`: the upstream calls the gateway recorded with verdict `error`, of all it made. A route with more than {:.0} % of its answers failed or degraded is excluded from the Pareto front.",
        100.0 * FAIR_SHARE
    );
    if rows.iter().any(|r| r.recorded < r.n) {
        let _ = writeln!(
            s,
            "\nSome answers have no record in the event log (a running gateway evaluated without `--events`, or a record it had not written): their cost is unknown (–, or counted over the recorded answers only) and their tokens are the stream's usage chunk; their failed calls and samples are unknown."
        );
    }
    s
}

#[cfg(test)]
mod tests;
