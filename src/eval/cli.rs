//! `conclave eval` on the command line: its arguments, the config it runs
//! on (with `--baselines` added), and what it prints and exits with.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use super::{CostAxis, EvalError, Gateway, Plan, Sampling};
use crate::config::Config;

/// No `Debug`: it holds the API key.
#[derive(clap::Args)]
pub struct EvalArgs {
    /// The config whose routes and models are compared, in-process
    /// [default: config/conclave.toml].
    #[arg(long, conflicts_with = "url")]
    config: Option<PathBuf>,
    /// A running gateway's base URL (`http://host:4000`) instead of the
    /// config in-process.
    #[arg(long, conflicts_with = "baselines")]
    url: Option<String>,
    /// With --url: the gateway's event log, read for the cost, attempts
    /// and what each strategy did.
    #[arg(long, requires = "url")]
    events: Option<PathBuf>,
    /// The API key every request carries, for a config with `[[keys]]`
    /// (prefer the environment variable: a flag shows in `ps`).
    #[arg(long, env = "CONCLAVE_EVAL_KEY", hide_env_values = true)]
    key: Option<String>,
    /// The longest one request may take.
    #[arg(long, default_value = "10m", value_parser = positive_duration)]
    timeout: Duration,
    /// Cap every answer (and judge verdict) at this many tokens.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_tokens: Option<u32>,
    /// The temperature every request (and judge verdict) is asked with,
    /// 0 to 2; `server` sends none, so each server's default applies.
    #[arg(long, default_value = "0", value_parser = temperature)]
    temperature: Temperature,
    /// The seed every request (and judge verdict) carries.
    #[arg(long)]
    seed: Option<u64>,
    /// What accuracy is weighed against on the Pareto front and picture:
    /// the recorded cost per task, or the median latency (for local
    /// models, whose price is zero).
    #[arg(long, value_enum, default_value_t = CostAxis::Usd)]
    cost: CostAxis,
    /// The task file: one JSON object a line (see eval/README.md).
    #[arg(long)]
    tasks: PathBuf,
    /// The routes or models to compare, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    routes: Vec<String>,
    /// Run every task this many times per route.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    repeat: u32,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    concurrency: u64,
    /// Add, for every strategy route, its strongest member alone and
    /// that member sampled three times (Self-MoA's baseline).
    #[arg(long)]
    baselines: bool,
    /// Where results.jsonl, events.jsonl, report.md and pareto.svg go;
    /// a run into the same folder resumes where the last one stopped.
    #[arg(long, default_value = "eval-out")]
    out: PathBuf,
}

/// Runs the eval `args` ask for (in-process on `default_config` when
/// neither `--config` nor `--url` is given), prints its report, and
/// exits 0, 130 (cut short by Ctrl-C), 2 (bad input) or 1.
pub async fn command(args: EvalArgs, default_config: &Path) -> ExitCode {
    let (gateway, routes, notes) = match args.url {
        Some(base) => {
            let events = args.events;
            (Gateway::Url { base, events }, args.routes, Vec::new())
        }
        None => {
            let path = args.config.unwrap_or_else(|| default_config.to_path_buf());
            match config(&path, args.routes, args.baselines) {
                Ok((cfg, routes, notes)) => (Gateway::Config(Box::new(cfg)), routes, notes),
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            }
        }
    };
    let plan = Plan {
        tasks: args.tasks,
        routes,
        repeat: args.repeat,
        concurrency: usize::try_from(args.concurrency).unwrap_or(8),
        out: args.out,
        notes,
        key: args.key,
        timeout: args.timeout,
        sampling: Sampling {
            temperature: args.temperature.0,
            seed: args.seed,
            max_tokens: args.max_tokens,
        },
        cost: args.cost,
    };
    let stop = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    match super::run(gateway, &plan, stop).await {
        Ok(summary) => {
            for w in &summary.warnings {
                eprintln!("warning: {w}");
            }
            let report = plan.out.join("report.md");
            let md = std::fs::read_to_string(&report).unwrap_or_default();
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "{md}");
            let _ = writeln!(out, "\nwritten to {}", plan.out.display());
            if summary.resumed > 0 {
                let resumed = summary.resumed;
                let _ = writeln!(out, "({resumed} results taken from the earlier run)");
            }
            if summary.partial {
                ExitCode::from(130)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(
            e @ (EvalError::Tasks(_)
            | EvalError::UnknownRoute(..)
            | EvalError::NoRoutes
            | EvalError::NoKey),
        ) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// `--temperature`: a number, or none sent (`server`).
#[derive(Debug, Clone, Copy)]
struct Temperature(Option<f64>);

/// A temperature from 0 to 2, or `server` (none sent).
fn temperature(text: &str) -> Result<Temperature, String> {
    if text == "server" {
        return Ok(Temperature(None));
    }
    match text.parse::<f64>() {
        Ok(t) if (0.0..=2.0).contains(&t) => Ok(Temperature(Some(t))),
        _ => Err("a number from 0 to 2, or `server` to send none".into()),
    }
}

/// A duration above zero (`10m`, `90s`).
fn positive_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(d) if d.is_zero() => Err("must be more than zero".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

/// The config an eval runs on, with `--baselines` added to it, the
/// routes to compare and what the baselines are.
fn config(
    path: &Path,
    routes: Vec<String>,
    baselines: bool,
) -> Result<(Config, Vec<String>, Vec<String>), String> {
    let all = &crate::strategy::ALL;
    if !baselines {
        let cfg = crate::config::load(path, all).map_err(|e| e.to_string())?;
        return Ok((cfg, routes, Vec::new()));
    }
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{file}: {e}"))?;
    let (text, routes, notes) =
        super::baselines::add(&text, &routes).map_err(|e| format!("{file}: {e}"))?;
    let env = |name: &str| std::env::var(name).ok();
    let cfg = crate::config::parse_file(&text, path, &env, all).map_err(|e| e.to_string())?;
    Ok((cfg, routes, notes))
}
