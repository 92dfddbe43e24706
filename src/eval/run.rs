//! Running the tasks: every task through every route, `repeat` times,
//! in-process through the gateway's own router (so auth, strategies,
//! budgets, metrics and the event log are the server's), with bounded
//! concurrency. Each finished result is appended to `results.jsonl` at
//! once, so an interrupted run resumes where it stopped; Ctrl-C stops
//! taking new work and keeps what finished.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use axum::Router;
use axum::body::Body;
use futures::StreamExt;
use http_body_util::BodyExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::time::Instant;
use tower::ServiceExt;

use super::EvalError;
use super::task::{Check, Task};

/// The most of an answer kept (and graded).
const MAX_ANSWER: usize = 1 << 20;

/// One task through one route, once: what `results.jsonl` holds per line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    pub id: String,
    pub route: String,
    pub repeat: u32,
    pub correct: bool,
    /// Why the checker said so, or what failed.
    pub detail: String,
    pub answer: String,
    /// The HTTP status of the gateway's answer.
    pub status: u16,
    pub request_id: String,
    /// The concrete model that wrote the answer (`x-conclave-served-by`).
    pub served_by: Option<String>,
    pub latency_ms: f64,
    /// Time to the first content of the streamed answer.
    pub ttft_ms: Option<f64>,
    /// From the gateway's event log (the request's own record).
    #[serde(default)]
    pub cost_usd: f64,
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub attempts: u64,
    /// What the strategy did, from the event log: `escalated`,
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

/// The results an earlier run left (a line cut by a kill is skipped).
pub fn cached(path: &Path) -> Vec<Outcome> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Runs `jobs` with at most `concurrency` at once, appending each result
/// to `results` and reporting progress; stops early when `stop` fires.
pub async fn run_all(
    router: &Router,
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
    let total = jobs.len();
    let mut stream = futures::stream::iter(jobs)
        .map(|(task, route, r)| one(router, task, route, r))
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

/// One task through one route, graded.
async fn one(router: &Router, task: &Task, route: &str, repeat: u32) -> Outcome {
    let user = format!("conclave-eval/{route}/{}/{repeat}", task.id);
    let asked = ask(router, route, &task.messages, &user).await;
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
            let verdict = ask(router, judge, &messages, &format!("{user}/judge")).await;
            match verdict.error {
                Some(e) => (false, format!("the judge failed: {e}")),
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
    Outcome {
        id: task.id.clone(),
        route: route.to_string(),
        repeat,
        correct,
        detail,
        answer: asked.answer,
        status: asked.status,
        request_id: asked.request_id,
        served_by: asked.served_by,
        latency_ms: asked.latency_ms,
        ttft_ms: asked.ttft_ms,
        cost_usd: 0.0,
        input_tokens: 0,
        output_tokens: 0,
        attempts: 0,
        strategy: serde_json::Map::new(),
    }
}

/// What one streamed request got.
struct Asked {
    answer: String,
    error: Option<String>,
    status: u16,
    request_id: String,
    served_by: Option<String>,
    latency_ms: f64,
    ttft_ms: Option<f64>,
}

/// Sends one streamed chat request through the router and reads the
/// answer's text and its time to first content. `user` names the run of
/// the task (route, id, repeat), as OpenAI's `user` field.
async fn ask(router: &Router, route: &str, messages: &[Value], user: &str) -> Asked {
    let body = json!({"model": route, "messages": messages, "stream": true,
        "stream_options": {"include_usage": true}, "user": user});
    let started = Instant::now();
    let req = axum::http::Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()));
    let mut asked = Asked {
        answer: String::new(),
        error: None,
        status: 0,
        request_id: String::new(),
        served_by: None,
        latency_ms: 0.0,
        ttft_ms: None,
    };
    let resp = match req {
        Ok(req) => match router.clone().oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        },
        Err(e) => {
            asked.error = Some(e.to_string());
            return asked;
        }
    };
    asked.status = resp.status().as_u16();
    let header = |n: &str| {
        resp.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    asked.request_id = header("x-request-id").unwrap_or_default();
    asked.served_by = header("x-conclave-served-by");
    let ok = resp.status().is_success();
    let mut body = resp.into_body();
    let mut sse = Sse::default();
    let mut raw = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            asked.error = Some("the answer was cut off".into());
            break;
        };
        let Some(bytes) = frame.data_ref() else {
            continue;
        };
        if !ok {
            if raw.len() < MAX_ANSWER {
                raw.extend_from_slice(bytes);
            }
            continue;
        }
        for event in sse.push(bytes) {
            if let Some(text) = event.text
                && !text.is_empty()
            {
                asked
                    .ttft_ms
                    .get_or_insert_with(|| started.elapsed().as_secs_f64() * 1000.0);
                if asked.answer.len() + text.len() <= MAX_ANSWER {
                    asked.answer.push_str(&text);
                }
            }
            if let Some(e) = event.error {
                asked.error = Some(e);
            }
        }
    }
    asked.latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    if !ok {
        let text = String::from_utf8_lossy(&raw);
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| Some(v.get("error")?.get("message")?.as_str()?.to_string()))
            .unwrap_or_else(|| text.chars().take(200).collect());
        asked.error = Some(format!("HTTP {}: {message}", asked.status));
    }
    asked
}

/// A minimal reader of the gateway's own event stream: `data:` lines,
/// each a chunk whose content deltas are the answer.
#[derive(Default)]
struct Sse {
    line: Vec<u8>,
}

#[derive(Default)]
struct Event {
    text: Option<String>,
    error: Option<String>,
}

impl Sse {
    fn push(&mut self, bytes: &[u8]) -> Vec<Event> {
        let mut out = Vec::new();
        for &b in bytes {
            if b != b'\n' {
                if self.line.len() < MAX_ANSWER {
                    self.line.push(b);
                }
                continue;
            }
            let line = std::mem::take(&mut self.line);
            let Some(data) = line.strip_prefix(b"data:") else {
                continue;
            };
            let Ok(v) = serde_json::from_slice::<Value>(data.trim_ascii()) else {
                continue;
            };
            let mut e = Event::default();
            if let Some(err) = v.get("error") {
                e.error = Some(
                    err.get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("an error event")
                        .to_string(),
                );
            }
            e.text = v
                .get("choices")
                .and_then(Value::as_array)
                .and_then(|c| c.first())
                .and_then(|c| c.get("delta")?.get("content")?.as_str())
                .map(str::to_string);
            out.push(e);
        }
        out
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
