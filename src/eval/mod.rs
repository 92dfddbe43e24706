//! `conclave eval`: run a checkable task set through routes and report
//! whether a strategy pays off: accuracy with its interval, cost, tokens,
//! latency, what each strategy did, and which differences are
//! significant.
//!
//! - [`task`]: the JSONL task file and its checkers' settings;
//! - [`baselines`]: each strategy's strongest member and its Self-MoA;
//! - [`check`]: grading an answer (and a judge route's verdict);
//! - [`stats`]: Wilson intervals, McNemar's exact test, percentiles;
//! - [`run`]: the tasks through the gateway's router, resumable;
//! - [`events`]: the gateway's event log read back per request;
//! - [`report`]: `report.md` and `pareto.svg`.

pub mod baselines;
pub mod check;
pub mod events;
pub mod report;
pub mod run;
pub mod stats;
pub mod task;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::config::Config;

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error(transparent)]
    Tasks(#[from] task::TaskError),
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    #[error(transparent)]
    Serve(#[from] crate::ServeError),
    #[error("unknown route \"{0}\"; the config has: {1}")]
    UnknownRoute(String, String),
    #[error("no routes given (--routes a,b,c)")]
    NoRoutes,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub tasks: PathBuf,
    pub routes: Vec<String>,
    pub repeat: u32,
    pub concurrency: usize,
    pub out: PathBuf,
    /// What the added baselines are, one line each (`--baselines`).
    pub notes: Vec<String>,
}

/// What a run ends with.
#[derive(Debug)]
pub struct Summary {
    pub rows: Vec<report::RouteRow>,
    pub pairs: Vec<report::PairRow>,
    /// Stopped by Ctrl-C before every task was run.
    pub partial: bool,
    /// Results taken from an earlier run of the same `--out`.
    pub resumed: usize,
}

/// Runs `plan` in-process on `config` (its event log goes to
/// `OUT/events.jsonl`, its metrics at the end to `OUT/metrics.prom`), then
/// writes `report.md` and `pareto.svg` beside `results.jsonl`.
pub async fn run(
    mut config: Config,
    plan: &Plan,
    stop: impl std::future::Future<Output = ()>,
) -> Result<Summary, EvalError> {
    if plan.routes.is_empty() {
        return Err(EvalError::NoRoutes);
    }
    let tasks = task::read_tasks(&plan.tasks)?;
    let names: Vec<String> = config
        .models
        .keys()
        .chain(config.routes.keys())
        .cloned()
        .collect();
    for r in &plan.routes {
        if !names.iter().any(|n| n == r) {
            return Err(EvalError::UnknownRoute(r.clone(), names.join(", ")));
        }
    }
    for t in &tasks {
        if let task::Check::Judge { route, .. } = &t.check
            && !names.iter().any(|n| n == route)
        {
            return Err(EvalError::UnknownRoute(route.clone(), names.join(", ")));
        }
    }
    let io = |p: &Path, e| EvalError::Io(p.display().to_string(), e);
    std::fs::create_dir_all(&plan.out).map_err(|e| io(&plan.out, e))?;
    let results = plan.out.join("results.jsonl");
    let log = plan.out.join("events.jsonl");
    config.server.event_log = Some(log.clone());

    // Results of other routes, tasks or repeats in the same folder stay
    // in `results.jsonl`; the report is of this plan's.
    let ids: HashSet<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    let in_plan = |o: &run::Outcome| {
        ids.contains(o.id.as_str()) && plan.routes.contains(&o.route) && o.repeat < plan.repeat
    };
    let mut all = run::cached(&results);
    let done = all
        .iter()
        .filter(|o| in_plan(o))
        .map(|o| (o.id.clone(), o.route.clone(), o.repeat))
        .collect();
    let resumed = all.iter().filter(|o| in_plan(o)).count();
    let jobs = run::pending(&tasks, &plan.routes, plan.repeat, &done);

    let prepared = crate::prepare(config)?;
    let router = prepared.router();
    let (mut fresh, partial) =
        run::run_all(&router, jobs, plan.concurrency, &results, stop).await?;
    // The gateway's own metrics of the run, beside its event log.
    let prom = plan.out.join("metrics.prom");
    std::fs::write(&prom, prepared.metrics()).map_err(|e| io(&prom, e))?;
    let flush = prepared.flusher();
    let _ = tokio::task::spawn_blocking(flush).await;
    // The event log holds an interrupted run's requests too (appended).
    all.append(&mut fresh);
    if log.exists() {
        events::attach(&mut all, &log).map_err(|e| io(&log, e))?;
    }
    // The figures from the event log go into `results.jsonl` too: it is
    // written again whole, earlier results first.
    let mut lines = String::new();
    for o in &all {
        lines.push_str(&serde_json::to_string(o).unwrap_or_default());
        lines.push('\n');
    }
    std::fs::write(&results, lines).map_err(|e| io(&results, e))?;
    let this: Vec<run::Outcome> = all.into_iter().filter(|o| in_plan(o)).collect();

    let rows = report::routes(&this, &plan.routes);
    let pairs = report::pairs(&this, &plan.routes);
    let title = plan.tasks.display().to_string();
    let md = report::markdown(&title, &plan.notes, &rows, &pairs, partial);
    let md_path = plan.out.join("report.md");
    std::fs::write(&md_path, md).map_err(|e| io(&md_path, e))?;
    let svg_path = plan.out.join("pareto.svg");
    std::fs::write(&svg_path, report::svg(&rows)).map_err(|e| io(&svg_path, e))?;
    Ok(Summary {
        rows,
        pairs,
        partial,
        resumed,
    })
}
