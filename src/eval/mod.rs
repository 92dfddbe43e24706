//! `conclave eval`: run a checkable task set through routes and report
//! whether a strategy pays off: accuracy with its interval, cost, tokens,
//! latency, what each strategy did, and which differences are
//! significant.
//!
//! - [`task`]: the JSONL task file and its checkers' settings;
//! - [`baselines`]: each strategy's strongest member and its Self-MoA;
//! - [`check`]: grading an answer (and a judge route's verdict);
//! - [`stats`]: Wilson intervals, McNemar's exact test, percentiles;
//! - [`run`]: the tasks through the gateway, resumable;
//! - [`ask`]: one request, in-process or to a running gateway (`--url`);
//! - [`events`]: the gateway's event log read back per request;
//! - [`jsonl`]: bounded line reading of files being written or cut;
//! - [`report`]: `report.md`: each route's figures, the pairs' tests;
//! - [`pareto`]: `pareto.svg`: cost or latency against accuracy;
//! - [`html`]: `report.html`: the report's tables, an interactive Pareto
//!   chart and each task's answers side by side, in one offline page;
//! - [`cli`]: the command's arguments, config, output and exit status.

pub mod ask;
pub mod baselines;
pub mod check;
pub mod cli;
pub mod events;
pub mod html;
pub mod jsonl;
pub mod pareto;
pub mod report;
pub mod run;
pub mod stats;
pub mod task;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Config;

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error(transparent)]
    Tasks(#[from] task::TaskError),
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    #[error(transparent)]
    Serve(#[from] crate::ServeError),
    #[error("unknown route \"{0}\"; the gateway has: {1}")]
    UnknownRoute(String, String),
    #[error("no routes given (--routes a,b,c)")]
    NoRoutes,
    #[error("the gateway at {0} did not list its models: {1}")]
    Remote(String, String),
    #[error("the config has [[keys]]: name one with --key (or CONCLAVE_EVAL_KEY)")]
    NoKey,
}

/// Where the tasks go.
pub enum Gateway {
    /// In this process, on this config: its event log goes to
    /// `OUT/events.jsonl` and its metrics at the end to `OUT/metrics.prom`.
    Config(Box<Config>),
    /// A running gateway at this base URL (without `/v1`). `events` is its
    /// event log, where this machine can read it: the report's cost,
    /// attempts and strategy figures come from there. Its `/metrics` at the
    /// end go to `OUT/metrics.prom`.
    Url {
        base: String,
        events: Option<PathBuf>,
    },
}

/// What to run. No `Debug`: it holds the API key.
#[derive(Clone)]
pub struct Plan {
    pub tasks: PathBuf,
    pub routes: Vec<String>,
    pub repeat: u32,
    pub concurrency: usize,
    pub out: PathBuf,
    /// What the added baselines are, one line each (`--baselines`).
    pub notes: Vec<String>,
    /// The API key every request carries (`Authorization: Bearer`).
    pub key: Option<String>,
    /// The longest one request may take.
    pub timeout: Duration,
    /// The sampling settings every request carries (the judge's too).
    pub sampling: Sampling,
    /// What the Pareto front and picture weigh accuracy against.
    pub cost: CostAxis,
}

/// The sampling settings every request of a run carries, the judge's
/// too, recorded on every result. Results of other settings are another
/// plan's: a run resumes only the results of its own settings.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sampling {
    /// `temperature`; `None`: none is sent, so the server's default
    /// applies (0.8 on llama-cpp-python, 1 on OpenAI's).
    pub temperature: Option<f64>,
    /// `seed`, when set.
    pub seed: Option<u64>,
    /// `max_tokens`, when set.
    pub max_tokens: Option<u32>,
}

impl Default for Sampling {
    /// Greedy: temperature 0, no seed, no cap.
    fn default() -> Self {
        Sampling {
            temperature: Some(0.0),
            seed: None,
            max_tokens: None,
        }
    }
}

impl std::fmt::Display for Sampling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.temperature {
            Some(t) => write!(f, "temperature {t}")?,
            None => write!(f, "temperature not sent (the server's default)")?,
        }
        match self.seed {
            Some(s) => write!(f, ", seed {s}")?,
            None => write!(f, ", no seed")?,
        }
        match self.max_tokens {
            Some(n) => write!(f, ", max_tokens {n}"),
            None => write!(f, ", no max_tokens"),
        }
    }
}

/// What accuracy is weighed against on the Pareto front (`--cost`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum CostAxis {
    /// The gateway's recorded cost per task, in USD.
    #[default]
    Usd,
    /// The median latency per task, in milliseconds, as the eval saw it:
    /// for local models, whose price is zero.
    Latency,
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
    /// What could not be had (a running gateway's metrics or event log).
    pub warnings: Vec<String>,
}

/// How long the event log is waited for: the gateway writes a request's
/// record just after the answer's last byte (a race's cancelled
/// candidates after that).
const SETTLE: Duration = Duration::from_secs(5);

/// Runs `plan` on `gateway`, then writes `report.md`, `pareto.svg` and
/// `report.html` beside `results.jsonl`.
pub async fn run(
    gateway: Gateway,
    plan: &Plan,
    stop: impl std::future::Future<Output = ()>,
) -> Result<Summary, EvalError> {
    if plan.routes.is_empty() {
        return Err(EvalError::NoRoutes);
    }
    let tasks = task::read_tasks(&plan.tasks)?;
    let results = plan.out.join("results.jsonl");

    // Results of other routes, tasks or repeats in the same folder stay
    // in `results.jsonl`; the report is of this plan's.
    let ids: HashSet<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    let in_plan = |o: &run::Outcome| {
        ids.contains(o.id.as_str())
            && plan.routes.contains(&o.route)
            && o.repeat < plan.repeat
            && o.sampling.as_ref() == Some(&plan.sampling)
    };
    let mut warnings = Vec::new();
    let ran = match gateway {
        Gateway::Config(config) => {
            in_process(*config, plan, &tasks, &in_plan, stop, &mut warnings).await?
        }
        Gateway::Url { base, events } => {
            remote(&base, events, plan, &tasks, &in_plan, stop, &mut warnings).await?
        }
    };
    let Ran {
        all,
        resumed,
        partial,
        ..
    } = ran;
    // The figures from the event log go into `results.jsonl` too: it is
    // written again whole, earlier results first.
    let mut lines = String::new();
    for o in &all {
        lines.push_str(&serde_json::to_string(o).unwrap_or_default());
        lines.push('\n');
    }
    // Written beside and renamed over, so a kill now loses nothing.
    let fresh_file = plan.out.join("results.jsonl.new");
    std::fs::write(&fresh_file, lines).map_err(|e| io_error(&fresh_file, e))?;
    std::fs::rename(&fresh_file, &results).map_err(|e| io_error(&results, e))?;
    let this: Vec<run::Outcome> = all.into_iter().filter(|o| in_plan(o)).collect();

    let rows = report::routes(&this, &plan.routes, plan.cost);
    let pairs = report::pairs(&this, &plan.routes);
    let groups = report::groups(&this, &plan.routes, &tasks);
    let head = report::Head {
        title: plan.tasks.display().to_string(),
        notes: plan.notes.clone(),
        sampling: plan.sampling.clone(),
        cost: plan.cost,
        partial,
    };
    let md = report::markdown(&head, &rows, &groups, &pairs);
    let md_path = plan.out.join("report.md");
    std::fs::write(&md_path, md).map_err(|e| io_error(&md_path, e))?;
    let svg_path = plan.out.join("pareto.svg");
    let svg = pareto::svg(&rows, plan.cost);
    std::fs::write(&svg_path, svg).map_err(|e| io_error(&svg_path, e))?;
    let page = html::page(&html::Input {
        head: &head,
        rows: &rows,
        groups: &groups,
        pairs: &pairs,
        routes: &plan.routes,
        tasks: &tasks,
        outcomes: &this,
    });
    let html_path = plan.out.join("report.html");
    std::fs::write(&html_path, page).map_err(|e| io_error(&html_path, e))?;
    Ok(Summary {
        rows,
        pairs,
        partial,
        resumed,
        warnings,
    })
}

/// What running the plan left: every result (earlier ones first), how
/// many of this plan's were there already, whether `stop` cut it short.
struct Ran {
    all: Vec<run::Outcome>,
    /// Where this run's own results start in `all`.
    fresh_from: usize,
    resumed: usize,
    partial: bool,
}

/// How every request of the plan is sent to `target`.
fn sender(plan: &Plan, target: ask::Target) -> ask::Sender {
    ask::Sender {
        target,
        key: plan.key.clone(),
        timeout: plan.timeout,
        sampling: plan.sampling.clone(),
    }
}

fn io_error(p: &Path, e: std::io::Error) -> EvalError {
    EvalError::Io(p.display().to_string(), e)
}

/// The plan in-process on `config`: its event log to `OUT/events.jsonl`
/// (read back into the results), its metrics at the end to
/// `OUT/metrics.prom`.
async fn in_process(
    mut config: Config,
    plan: &Plan,
    tasks: &[task::Task],
    in_plan: &impl Fn(&run::Outcome) -> bool,
    stop: impl std::future::Future<Output = ()>,
    warnings: &mut Vec<String>,
) -> Result<Ran, EvalError> {
    let names: Vec<String> = config
        .models
        .keys()
        .chain(config.routes.keys())
        .cloned()
        .collect();
    check_routes(&names, plan, tasks)?;
    if !config.keys.is_empty() && plan.key.is_none() {
        return Err(EvalError::NoKey);
    }
    std::fs::create_dir_all(&plan.out).map_err(|e| io_error(&plan.out, e))?;
    let log = plan.out.join("events.jsonl");
    config.server.event_log = Some(log.clone());
    let prepared = crate::prepare(config)?;
    let sender = sender(plan, ask::Target::Router(prepared.router()));
    let mut ran = execute(&sender, plan, tasks, in_plan, stop).await?;
    // Before the metrics are taken, so they and the event log hold the
    // same requests.
    attach_settled(&mut ran, &log, warnings).await?;
    let prom = plan.out.join("metrics.prom");
    std::fs::write(&prom, prepared.metrics()).map_err(|e| io_error(&prom, e))?;
    let flush = prepared.flusher();
    let _ = tokio::task::spawn_blocking(flush).await;
    Ok(ran)
}

/// The plan against the running gateway at `base`: its `/metrics` at the
/// end to `OUT/metrics.prom`; its event log, when named, read back into
/// the results.
async fn remote(
    base: &str,
    events: Option<PathBuf>,
    plan: &Plan,
    tasks: &[task::Task],
    in_plan: &impl Fn(&run::Outcome) -> bool,
    stop: impl std::future::Future<Output = ()>,
    warnings: &mut Vec<String>,
) -> Result<Ran, EvalError> {
    let base = base
        .trim_end_matches('/')
        .trim_end_matches("/v1")
        .to_string();
    // What errors and warnings show: the URL without a password in it.
    let shown = match reqwest::Url::parse(&base) {
        Ok(mut url) if url.password().is_some() => {
            let _ = url.set_password(None);
            url.to_string().trim_end_matches('/').to_string()
        }
        _ => base.clone(),
    };
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| EvalError::Remote(shown.clone(), e.to_string()))?;
    let target = ask::Target::Remote {
        client,
        base: base.clone(),
    };
    let sender = sender(plan, target);
    let names = remote_names(&sender)
        .await
        .map_err(|e| EvalError::Remote(shown.clone(), e))?;
    check_routes(&names, plan, tasks)?;
    std::fs::create_dir_all(&plan.out).map_err(|e| io_error(&plan.out, e))?;
    let mut ran = execute(&sender, plan, tasks, in_plan, stop).await?;
    match &events {
        Some(log) => attach_settled(&mut ran, log, warnings).await?,
        None => warnings.push(
            "no --events: cost, attempts and what each strategy did are unknown; \
             tokens are the streams' usage"
                .into(),
        ),
    }
    let prom = plan.out.join("metrics.prom");
    match sender.get("/metrics").await {
        Ok(text) => std::fs::write(&prom, text).map_err(|e| io_error(&prom, e))?,
        Err(e) => warnings.push(format!("{shown}/metrics: {e}; metrics.prom not written")),
    }
    Ok(ran)
}

/// Fills the event log's figures into every result (earlier runs' too),
/// waiting up to `SETTLE` for the gateway to write the records of this
/// run's answers.
async fn attach_settled(
    ran: &mut Ran,
    log: &Path,
    warnings: &mut Vec<String>,
) -> Result<(), EvalError> {
    let fresh_from = ran.fresh_from;
    let all = &mut ran.all;
    let fresh = |all: &[run::Outcome]| {
        let mine = all.get(fresh_from..).unwrap_or_default();
        let asked = mine.iter().filter(|o| !o.request_id.is_empty());
        let want = asked.clone().count();
        (want, asked.filter(|o| o.recorded).count())
    };
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let exists = match events::attach(all, log) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(io_error(log, e)),
        };
        let (want, got) = fresh(all);
        if got >= want || tokio::time::Instant::now() >= deadline {
            if got < want {
                let missing = want - got;
                warnings.push(if exists {
                    format!(
                        "{}: {missing} of this run's {want} answers have no request record",
                        log.display()
                    )
                } else {
                    format!("{}: no such file; no answer is recorded", log.display())
                });
            }
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every route asked for, and every judge route a task names, is one the
/// gateway has.
fn check_routes(names: &[String], plan: &Plan, tasks: &[task::Task]) -> Result<(), EvalError> {
    let judges = tasks.iter().filter_map(|t| match &t.check {
        task::Check::Judge { route, .. } => Some(route),
        _ => None,
    });
    for r in plan.routes.iter().chain(judges) {
        if !names.iter().any(|n| n == r) {
            return Err(EvalError::UnknownRoute(r.clone(), names.join(", ")));
        }
    }
    Ok(())
}

/// The models and routes a running gateway lists on `/v1/models`.
async fn remote_names(sender: &ask::Sender) -> Result<Vec<String>, String> {
    let text = sender.get("/v1/models").await?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let data = v
        .get("data")
        .and_then(serde_json::Value::as_array)
        .ok_or("no \"data\" list")?;
    Ok(data
        .iter()
        .filter_map(|m| Some(m.get("id")?.as_str()?.to_string()))
        .collect())
}

/// Runs what `results.jsonl` does not hold yet. A result that never got
/// an answer (status 0: no connection, a timeout, a run cut short) is run
/// again.
async fn execute(
    sender: &ask::Sender,
    plan: &Plan,
    tasks: &[task::Task],
    in_plan: &impl Fn(&run::Outcome) -> bool,
    stop: impl std::future::Future<Output = ()>,
) -> Result<Ran, EvalError> {
    let results = plan.out.join("results.jsonl");
    let mut all = run::cached(&results).map_err(|e| io_error(&results, e))?;
    all.retain(|o| !(in_plan(o) && o.failed && o.status == 0));
    let done = all
        .iter()
        .filter(|o| in_plan(o))
        .map(|o| (o.id.clone(), o.route.clone(), o.repeat))
        .collect();
    let resumed = all.iter().filter(|o| in_plan(o)).count();
    let jobs = run::pending(tasks, &plan.routes, plan.repeat, &done);
    let (mut fresh, partial) = run::run_all(sender, jobs, plan.concurrency, &results, stop).await?;
    let fresh_from = all.len();
    all.append(&mut fresh);
    Ok(Ran {
        all,
        fresh_from,
        resumed,
        partial,
    })
}
