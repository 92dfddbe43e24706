//! Running the tasks: every task through every route, `repeat` times,
//! in-process through the gateway's own router (so auth, strategies,
//! budgets, metrics and the event log are the server's) or to a running
//! gateway ([`super::ask`]), with bounded concurrency. Each finished
//! result is appended to `results.jsonl` at once, so an interrupted run
//! resumes where it stopped; Ctrl-C stops taking new work and keeps what
//! finished.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::time::Instant;

use super::ask::{MAX_ANSWER, Sender};
use super::task::{Check, Task};
use super::{EvalError, Sampling};

/// The longest line of `results.jsonl` read back: an answer (at most
/// `MAX_ANSWER`, escaped) and its figures.
const MAX_RESULT: usize = 8 * MAX_ANSWER;

/// One task through one route, once: what `results.jsonl` holds per line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    pub id: String,
    pub route: String,
    pub repeat: u32,
    pub correct: bool,
    /// Why the checker said so, or what failed.
    pub detail: String,
    /// No answer to grade: an error status, an error event in the stream,
    /// no connection, a timeout, a cut answer (no `finish_reason`), an
    /// empty answer, a strategy every one of whose samples failed, or the
    /// judge failed (`detail` says what).
    #[serde(default)]
    pub failed: bool,
    /// The answer's `finish_reason`: `length` is an answer capped at
    /// `max_tokens`, graded as it is.
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// The sampling settings it was asked with (none: an earlier version's
    /// result, whose settings are unknown).
    #[serde(default)]
    pub sampling: Option<Sampling>,
    pub answer: String,
    /// The HTTP status of the gateway's answer.
    pub status: u16,
    pub request_id: String,
    /// The concrete model that wrote the answer (`x-conclave-served-by`,
    /// else the event log's).
    pub served_by: Option<String>,
    pub latency_ms: f64,
    /// Time to the first content of the streamed answer.
    pub ttft_ms: Option<f64>,
    /// The gateway's event log had the request's record: cost, tokens and
    /// attempts are its figures (else tokens are the stream's usage chunk
    /// and the cost is unknown).
    #[serde(default)]
    pub recorded: bool,
    /// From the gateway's event log (the request's own record).
    #[serde(default)]
    pub cost_usd: f64,
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub attempts: u64,
    /// Of `attempts`, the calls the gateway recorded with verdict `error`.
    #[serde(default)]
    pub failed_calls: u64,
    /// The strategy's samples (a race's candidates, a judge's panel), and
    /// how many of them failed or were skipped: an answer made of fewer
    /// samples than asked is degraded.
    #[serde(default)]
    pub samples: u64,
    #[serde(default)]
    pub failed_samples: u64,
    /// What the strategy did, from the event log: `escalations`,
    /// `consults`, `top_ranked` (a panel's first), `race_winner`.
    #[serde(default)]
    pub strategy: serde_json::Map<String, Value>,
}

/// What is left to run, given what `results.jsonl` already holds.
pub fn pending<'a>(
    tasks: &'a [Task],
    routes: &'a [String],
    repeat: u32,
    done: &HashSet<(String, String, u32)>,
) -> Vec<(&'a Task, &'a str, u32)> {
    let mut jobs = Vec::new();
    for r in 0..repeat {
        for task in tasks {
            for route in routes {
                if !done.contains(&(task.id.clone(), route.clone(), r)) {
                    jobs.push((task, route.as_str(), r));
                }
            }
        }
    }
    jobs
}

/// The results an earlier run left (a line cut by a kill is skipped); none
/// when there is no file yet.
pub fn cached(path: &Path) -> std::io::Result<Vec<Outcome>> {
    let mut out = Vec::new();
    match super::jsonl::each_line(path, MAX_RESULT, |l| {
        out.extend(serde_json::from_slice::<Outcome>(l).ok());
    }) {
        Ok(()) => Ok(out),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Runs `jobs` with at most `concurrency` at once, appending each result
/// to `results` and reporting progress; stops early when `stop` fires.
pub async fn run_all(
    sender: &Sender,
    jobs: Vec<(&Task, &str, u32)>,
    concurrency: usize,
    results: &Path,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(Vec<Outcome>, bool), EvalError> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(results)
        .map_err(|e| EvalError::Io(results.display().to_string(), e))?;
    // A line a kill cut short gets its end, so the next result starts a
    // line of its own.
    if ends_mid_line(results) {
        writeln!(file).map_err(|e| EvalError::Io(results.display().to_string(), e))?;
    }
    let total = jobs.len();
    let mut stream = futures::stream::iter(jobs)
        .map(|(task, route, r)| one(sender, task, route, r))
        .buffer_unordered(concurrency.max(1));
    let mut out = Vec::with_capacity(total);
    let progress = Progress::new(total);
    tokio::pin!(stop);
    let interrupted = loop {
        tokio::select! {
            next = stream.next() => match next {
                Some(o) => {
                    let line = serde_json::to_string(&o).unwrap_or_default();
                    writeln!(file, "{line}")
                        .map_err(|e| EvalError::Io(results.display().to_string(), e))?;
                    out.push(o);
                    progress.tick(out.len(), out.iter().filter(|o| o.correct).count());
                }
                None => break false,
            },
            () = &mut stop => break true,
        }
    };
    progress.done();
    Ok((out, interrupted))
}

/// Whether the file's last byte is not a line end.
fn ends_mid_line(path: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let mut last = [0u8];
    f.seek(SeekFrom::End(-1)).is_ok() && f.read_exact(&mut last).is_ok() && last[0] != b'\n'
}

/// One task through one route, graded.
async fn one(sender: &Sender, task: &Task, route: &str, repeat: u32) -> Outcome {
    let user = format!("conclave-eval/{route}/{}/{repeat}", task.id);
    let asked = sender.ask(route, &task.messages, &user).await;
    let mut judge_failed = false;
    let (correct, detail) = match (&asked.error, &task.check) {
        (Some(e), _) => (false, e.clone()),
        (
            None,
            Check::Judge {
                route: judge,
                rubric,
            },
        ) => {
            let messages = super::check::judge_messages(rubric, task, &asked.answer);
            let verdict = sender.ask(judge, &messages, &format!("{user}/judge")).await;
            match verdict.error {
                Some(e) => {
                    judge_failed = true;
                    (false, format!("the judge failed: {e}"))
                }
                None => {
                    let g = super::check::judge_verdict(&verdict.answer);
                    (g.correct, g.detail)
                }
            }
        }
        (None, check) => match check.grade(&asked.answer) {
            Some(g) => (g.correct, g.detail),
            None => (false, "no checker".into()),
        },
    };
    let (input_tokens, output_tokens) = asked.usage.unwrap_or_default();
    let failed = asked.error.is_some() || judge_failed;
    Outcome {
        id: task.id.clone(),
        route: route.to_string(),
        repeat,
        correct,
        detail,
        failed,
        finish_reason: asked.finish_reason,
        sampling: Some(sender.sampling.clone()),
        answer: asked.answer,
        status: asked.status,
        request_id: asked.request_id,
        served_by: asked.served_by,
        latency_ms: asked.latency_ms,
        ttft_ms: asked.ttft_ms,
        recorded: false,
        cost_usd: 0.0,
        input_tokens,
        output_tokens,
        attempts: 0,
        failed_calls: 0,
        samples: 0,
        failed_samples: 0,
        strategy: serde_json::Map::new(),
    }
}

/// A progress line on stderr, when it is a terminal.
struct Progress {
    total: usize,
    tty: bool,
    started: Instant,
}

impl Progress {
    fn new(total: usize) -> Self {
        use std::io::IsTerminal;
        Progress {
            total,
            tty: std::io::stderr().is_terminal(),
            started: Instant::now(),
        }
    }

    fn tick(&self, done: usize, correct: usize) {
        if !self.tty {
            return;
        }
        let width = 30;
        let filled = (done * width).checked_div(self.total).unwrap_or(width);
        let secs = self.started.elapsed().as_secs_f64();
        let eta = if done > 0 {
            secs / done as f64 * (self.total - done) as f64
        } else {
            0.0
        };
        eprint!(
            "\r[{}{}] {done}/{} correct {correct} · {secs:.0}s, about {eta:.0}s left ",
            "#".repeat(filled),
            " ".repeat(width - filled),
            self.total
        );
    }

    fn done(&self) {
        if self.tty {
            eprintln!();
        }
    }
}
