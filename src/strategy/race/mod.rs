//! `strategy = "race"`: best-of-N. The candidates answer the request in
//! parallel; each is scored by the rubric ([`rubric`], with the judge and
//! webhook [`scorers`]) as soon as it finishes, and the best total wins
//! (ties: fewer output tokens, then the name). A perfect total cancels the
//! candidates still running (`cancel_on_perfect`). Before it starts, the
//! race's token cost is estimated and checked against `budget_tokens` and
//! `confirm_threshold_tokens` ([`gates`]): over them it runs its first
//! candidate alone. `mode = "first"` ([`first`]) is a hedge: the first
//! viable answer (or, streamed, the first real delta) wins.
//!
//! A candidate the request does not fit (its context window) is never
//! called: its `race_candidate` says `skipped` and why; when every one is,
//! the race answers 400 `context_length_exceeded`.
//!
//! Records: a `race_candidate` event per candidate, `race_finished`,
//! `conclave_race_score`, verdicts `winner` / `loser` / `cancelled`, the
//! `x-conclave-race-score` header, and the response's `usage` counting
//! every call of the request.

mod cancelled;
pub mod config;
mod first;
mod gates;
pub mod metrics;
pub mod rubric;
pub mod scorers;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ::metrics::{counter, histogram};
use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde::Deserialize;
use serde_json::{Map, json};
use tokio::time::Instant;

use self::metrics::{RACE_SCORE, RACE_TOKENS_SAVED};
use crate::error::{AttemptSummary, ModelError};
use crate::labels::{Role, Verdict};
use crate::model::{Call, CallSize, ChatModel, Reply, ReplyBody, Spend};
use crate::strategy::event;
use crate::stream;
use crate::wire::{AssistantOutput, ChatRequest, estimate_tokens};
use cancelled::Cancelled;
pub use gates::Gates;
use rubric::{Caps, Rubric, Standing};
use scorers::{Judge, Webhook};

/// `strategy = "race"`: its entry in [`crate::strategy::STRATEGIES`].
pub const STRATEGY: crate::graph::Strategy =
    crate::graph::Strategy::new("race", config::parse, config::build)
        .with_metrics(self::metrics::METRICS);

/// A model that races.
pub type Candidate = crate::strategy::Member;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Best-of-N: every candidate is scored, the best total wins.
    #[default]
    Best,
    /// First-of-N: the first viable answer wins.
    First,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Best => "best",
            Mode::First => "first",
        }
    }
}

pub struct Race {
    pub name: Arc<str>,
    pub candidates: Vec<Candidate>,
    pub mode: Mode,
    pub rubric: Rubric,
    pub judge: Option<Arc<Judge>>,
    pub webhook: Option<Arc<Webhook>>,
    pub caps: Caps,
    pub gates: Gates,
    pub cancel_on_perfect: bool,
    pub hedge_delay: Option<Duration>,
}

/// A total at or above this is perfect.
const PERFECT: f64 = 0.999;

/// One candidate's result and score.
struct Scored {
    index: usize,
    reply: Option<Reply>,
    error: Option<ModelError>,
    viable: bool,
    signals: BTreeMap<&'static str, f64>,
    /// Scorers that failed, and why.
    notes: Vec<String>,
    total: f64,
    output_tokens: u64,
}

impl Race {
    /// What `pool` candidates of `size` may spend, the judge's calls on
    /// their answers included.
    fn spend(&self, size: CallSize, pool: usize) -> Spend {
        let judge = match (&self.judge, self.rubric.uses("judge")) {
            (Some(j), true) => Some(j),
            _ => None,
        };
        self.candidates
            .iter()
            .take(pool)
            .map(|c| {
                let judged = judge.map_or(Spend::default(), |j| {
                    j.model.estimate(size.reading(j.max_tokens))
                });
                c.model.estimate(size) + judged
            })
            .sum()
    }

    /// The client's request as a whole answer, for the candidates.
    fn whole(req: &ChatRequest) -> Arc<ChatRequest> {
        let mut r = req.clone();
        r.stream = None;
        r.stream_options = None;
        Arc::new(r)
    }

    /// Runs candidate `i` and scores its answer.
    async fn run(&self, i: usize, call: Call, req: Arc<ChatRequest>, started: Instant) -> Scored {
        let c = &self.candidates[i];
        let answer = async {
            c.model
                .chat(call.clone(), req.clone())
                .await?
                .buffer()
                .await
        };
        let mut s = Scored {
            index: i,
            reply: None,
            error: None,
            viable: false,
            signals: BTreeMap::new(),
            notes: Vec::new(),
            total: 0.0,
            output_tokens: 0,
        };
        let (reply, out) = match answer.await {
            Ok(x) => x,
            Err(e) => {
                s.error = Some(e);
                return s;
            }
        };
        let took = started.elapsed();
        s.output_tokens = output_tokens(&reply, &out);
        s.viable = !out.text.trim().is_empty() || !out.tool_calls.is_empty();
        s.reply = Some(reply);
        if !s.viable {
            return s;
        }
        s.signals = rubric::measure(&req, &out, s.output_tokens, took, self.caps);
        let judge = async {
            match (&self.judge, self.rubric.uses("judge")) {
                (Some(j), true) => {
                    let (_phase, scoring) = call.phase("race.scoring");
                    Some(j.score(&scoring, &req, &out).await)
                }
                _ => None,
            }
        };
        let webhook = async {
            match (&self.webhook, self.rubric.uses("webhook")) {
                (Some(w), true) => Some(w.score(&req, &out).await),
                _ => None,
            }
        };
        let (j, w) = tokio::join!(judge, webhook);
        for (signal, result) in [("judge", j), ("webhook", w)] {
            match result {
                Some(Ok(x)) => {
                    s.signals.insert(signal, x);
                }
                Some(Err(why)) => {
                    s.signals.insert(signal, 0.0);
                    s.notes.push(format!("{signal}: {why}"));
                }
                None => {}
            }
        }
        s.total = self.rubric.total(&s.signals);
        s
    }

    async fn best(
        &self,
        call: &Call,
        req: Arc<ChatRequest>,
        pool: usize,
    ) -> Result<Reply, ModelError> {
        let asked = Race::whole(&req);
        let started = Instant::now();
        let (phase, racing) = call.phase("race.candidates");
        let mut tallies = Vec::with_capacity(pool);
        let mut pending: FuturesUnordered<_> = (0..pool)
            .map(|i| {
                let (candidate, tally) = racing.with_role(Role::Candidate).cancellable();
                tallies.push(tally);
                self.run(i, candidate, asked.clone(), started)
            })
            .collect();
        let mut done = Vec::new();
        while let Some(s) = pending.next().await {
            let perfect = s.viable && s.total >= PERFECT;
            done.push(s);
            if perfect && self.cancel_on_perfect {
                break;
            }
        }
        let cancelled: Vec<usize> = (0..pool)
            .filter(|i| !done.iter().any(|s| s.index == *i))
            .collect();
        // Dropping the candidates still running aborts their upstream calls
        // (and stops their servers' generation, unless a call had to go out
        // whole: its tally says so).
        drop(pending);
        drop(phase);
        let cancelled: Vec<Cancelled> = cancelled
            .into_iter()
            .map(|index| Cancelled::new(index, tallies.get(index), &req))
            .collect();
        self.finish(call, done, &cancelled, started)
    }

    /// Picks the winner, records everything, and answers.
    fn finish(
        &self,
        call: &Call,
        mut done: Vec<Scored>,
        cancelled: &[Cancelled],
        started: Instant,
    ) -> Result<Reply, ModelError> {
        let mut standings: Vec<Standing> = done
            .iter()
            .filter(|s| s.viable)
            .map(|s| Standing {
                name: &self.candidates[s.index].name,
                total: s.total,
                output_tokens: s.output_tokens,
            })
            .collect();
        standings.sort_by(rubric::rank);
        let winner = standings.first().map(|w| w.name.to_owned());
        for s in &done {
            self.record_candidate(call, s, winner.as_deref());
        }
        for c in cancelled {
            let mut f = Map::new();
            f.insert("model".into(), json!(&*self.candidates[c.index].name));
            f.insert("verdict".into(), json!("cancelled"));
            f.insert("generation_stopped".into(), json!(c.stopped));
            f.insert("output_tokens".into(), json!(c.generated));
            event(&call.ctx, "race_candidate", f);
        }
        let mut f = Map::new();
        f.insert("winner".into(), json!(winner));
        let win = done
            .iter()
            .find(|s| Some(&*self.candidates[s.index].name) == winner.as_deref());
        f.insert("score".into(), json!(win.map(|s| s.total)));
        let names: Vec<&str> = done
            .iter()
            .map(|s| &*self.candidates[s.index].name)
            .collect();
        f.insert("candidates".into(), json!(names));
        f.insert(
            "cancelled".into(),
            json!(
                cancelled
                    .iter()
                    .map(|c| &*self.candidates[c.index].name)
                    .collect::<Vec<_>>()
            ),
        );
        f.insert(
            "elapsed_ms".into(),
            json!(started.elapsed().as_secs_f64() * 1000.0),
        );
        // Unknown for an answer cut short: estimated from the answers that
        // finished (their median length), less what each cancelled
        // candidate had generated, within its cap; only for the
        // candidates whose generation really stopped.
        let mut tokens: Vec<u64> = done
            .iter()
            .filter(|s| s.viable)
            .map(|s| s.output_tokens)
            .collect();
        tokens.sort_unstable();
        let median = tokens.get(tokens.len() / 2).copied().unwrap_or(0);
        let saved: u64 = cancelled
            .iter()
            .filter(|c| c.stopped)
            .map(|c| c.could_still(median))
            .sum();
        call.ctx
            .metrics
            .scope(|| counter!(RACE_TOKENS_SAVED, "route" => self.name.clone()).increment(saved));
        f.insert("tokens_saved_estimate".into(), json!(saved));
        event(&call.ctx, "race_finished", f);

        let won = done.iter().position(|s| {
            s.viable
                && s.reply.is_some()
                && Some(&*self.candidates[s.index].name) == winner.as_deref()
        });
        let Some(s) = won.map(|i| done.swap_remove(i)) else {
            let attempts = done.iter().map(|s| self.summary(s)).collect();
            return Err(ModelError::exhausted(
                "race",
                "candidates",
                self.name.clone(),
                attempts,
            ));
        };
        let score = self.score_header(&s);
        match s.reply {
            Some(mut reply) => {
                reply.meta.add_header("x-conclave-race-score", &score);
                stream::with_request_usage(reply, call.ctx.clone())
            }
            None => Err(ModelError::Exhausted {
                strategy: "race",
                members: "candidates",
                route: self.name.clone(),
                attempts: Vec::new(),
            }),
        }
    }

    fn record_candidate(&self, call: &Call, s: &Scored, winner: Option<&str>) {
        let name = &*self.candidates[s.index].name;
        let verdict = match (&s.reply, s.viable) {
            (None, _) => Verdict::Error,
            (Some(_), false) => Verdict::Error,
            (Some(_), true) if Some(name) == winner => Verdict::Winner,
            (Some(_), true) => Verdict::Loser,
        };
        if let Some(r) = &s.reply {
            let why = if s.viable {
                format!("score {:.3}", s.total)
            } else {
                "an empty answer".into()
            };
            r.attempt.set_verdict(verdict, Some(why));
        }
        if s.viable {
            let model = self.candidates[s.index].name.clone();
            call.ctx.metrics.scope(|| {
                histogram!(RACE_SCORE, "route" => self.name.clone(), "model" => model)
                    .record(s.total);
            });
        }
        let mut f = Map::new();
        f.insert("model".into(), json!(name));
        // A candidate the request did not fit was never called.
        let skipped = s.error.as_ref().and_then(ModelError::skipped);
        let shown = if skipped.is_some() {
            "skipped"
        } else {
            verdict.as_str()
        };
        f.insert("verdict".into(), json!(shown));
        if let Some(why) = skipped {
            f.insert("reason".into(), json!(why));
        }
        f.insert("total".into(), json!(s.total));
        f.insert("signals".into(), json!(s.signals));
        f.insert("output_tokens".into(), json!(s.output_tokens));
        if let Some(e) = &s.error {
            f.insert("error".into(), json!(e.to_string()));
        }
        if !s.notes.is_empty() {
            f.insert("scorer_errors".into(), json!(s.notes));
        }
        event(&call.ctx, "race_candidate", f);
    }

    fn summary(&self, s: &Scored) -> AttemptSummary {
        let name = &self.candidates[s.index].name;
        match &s.error {
            Some(e) => AttemptSummary::failed(name, e),
            None => AttemptSummary::rejected(name, "error", "an empty answer"),
        }
    }

    /// `0.93; judge=0.8; format=1`: the total, then each weighed signal.
    fn score_header(&self, s: &Scored) -> String {
        let mut out = format!("{:.3}", s.total);
        for signal in self.rubric.0.keys() {
            let v = s.signals.get(signal).copied().unwrap_or(0.0);
            out.push_str(&format!("; {signal}={}", trim(v)));
        }
        out
    }
}

/// `1`, `0.8`, `0.333`: at most three decimals, no trailing zeros.
fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Output tokens as reported, else estimated from the answer.
fn output_tokens(reply: &Reply, out: &AssistantOutput) -> u64 {
    let reported = match &reply.body {
        ReplyBody::Whole(c) => c.usage.map(|u| u.completion_tokens),
        ReplyBody::Stream(_) => None,
    };
    reported.unwrap_or_else(|| {
        let args: usize = out.tool_calls.iter().map(|t| t.arguments.len()).sum();
        estimate_tokens(out.text.len() + args)
    })
}

#[async_trait]
impl ChatModel for Race {
    /// The candidates that may race (the first alone when racing is
    /// off), and the judge on each answer.
    fn estimate(&self, size: CallSize) -> Spend {
        self.spend(size, self.gates.pool(self.candidates.len()).max(1))
    }

    async fn chat(&self, call: Call, req: Arc<ChatRequest>) -> Result<Reply, ModelError> {
        let pool = self.gates.pool(self.candidates.len());
        if let Err(down) = self.gates.check(self, &call, &req, pool) {
            return down.run(self, &call, req).await;
        }
        match self.mode {
            Mode::Best => self.best(&call, req, pool).await,
            Mode::First => first::run(self, &call, req, pool).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_header_numbers_are_short() {
        assert_eq!(trim(1.0), "1");
        assert_eq!(trim(0.8), "0.8");
        assert_eq!(trim(1.0 / 3.0), "0.333");
        assert_eq!(trim(0.0), "0");
    }
}
