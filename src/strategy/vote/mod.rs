//! `strategy = "vote"`: self-consistency (Wang et al. 2022). The request
//! is sampled `samples` times at once, round-robin over the members (one
//! model sampled N times at the route's `temperature`, or several models);
//! each sample's final answer is read by the route's extractor
//! ([`extract`]) and the most common answer wins ([`tally`]): the first
//! finished sample that gave it is returned whole, its text untouched.
//! Ties go to the answer whose first sample finished first, or to the
//! `tie_break` member's answer. With `early_stop`, once the samples still
//! running could no longer change the winner they are cancelled (their
//! upstream requests aborted, their attempts `cancelled`).
//!
//! Samples are asked for whole answers; a streamed client gets keep-alive
//! comments while they run, then the winner replayed as a stream. A sample
//! that fails or says nothing has no answer; every sample failing is a
//! 502 `vote_exhausted` listing them (an error event of that code when a
//! streamed vote's first keep-alive already committed its 200).
//!
//! Records: verdicts `winner` (the sample returned), `ok` (a sample that
//! agreed with it), `loser` (another answer), `error`, `cancelled`; the
//! `vote_finished` event; the `conclave_vote_agreement` histogram; the
//! `x-conclave-vote` header (`3/5`: the winner's votes over the answered
//! samples); and the response's `usage` counting every sample.

pub mod config;
mod extract;
mod metrics;
mod tally;

use std::sync::Arc;

use ::metrics::histogram;
use async_trait::async_trait;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use self::metrics::VOTE_AGREEMENT;
use crate::error::{AttemptSummary, ModelError};
use crate::labels::{Role, Verdict};
use crate::model::{Call, CallSize, ChatModel, Reply, Spend};
use crate::strategy::event;
use crate::stream;
use crate::wire::ChatRequest;
use extract::{Extract, normalize};
use tally::{Entry, Tally, TieBreak};

/// `strategy = "vote"`: its entry in [`crate::strategy::STRATEGIES`].
pub const STRATEGY: crate::graph::Strategy =
    crate::graph::Strategy::new("vote", config::parse, config::build)
        .with_metrics(self::metrics::METRICS);

/// A model a vote samples.
pub type Member = crate::strategy::Member;

/// Most samples one vote may take.
pub const MAX_SAMPLES: usize = 32;
/// Answers longer than this many characters are shown cut short (and
/// told apart by a hash) in `vote_finished`.
const SHOWN_CHARS: usize = 200;

pub struct Vote {
    pub name: Arc<str>,
    pub members: Vec<Member>,
    pub samples: usize,
    pub extract: Extract,
    pub tie_break: TieBreak,
    pub early_stop: bool,
    /// Sent with each sample when the request sets no `temperature`.
    pub temperature: Option<f64>,
}

/// What became of one sample.
enum Sampled {
    Answered {
        reply: Reply,
        answer: String,
        /// The extractor found the answer (else it is the normalised text).
        extracted: bool,
    },
    Lost(AttemptSummary),
}

impl Vote {
    fn member(&self, sample: usize) -> &Member {
        &self.members[sample % self.members.len()]
    }

    /// Each sample's request: the client's, whole, with the route's
    /// `temperature` when it sets none, and a `seed` it sets moved on by
    /// the sample's index (samples stay reproducible, yet differ).
    fn requests(&self, req: &ChatRequest) -> Vec<Arc<ChatRequest>> {
        let mut base = req.clone();
        base.stream = None;
        base.stream_options = None;
        // `n` is one choice (or unset) here: see `one_choice`.
        base.extra.remove("n");
        if let Some(t) = self.temperature
            && base.extra.get("temperature").is_none_or(Value::is_null)
        {
            base.extra.insert("temperature".into(), json!(t));
        }
        match base.extra.get("seed").and_then(Value::as_i64) {
            Some(seed) => (0..self.samples)
                .map(|i| {
                    let mut r = base.clone();
                    let i = i64::try_from(i).unwrap_or(0);
                    r.extra.insert("seed".into(), json!(seed.wrapping_add(i)));
                    Arc::new(r)
                })
                .collect(),
            None => {
                // One request, shared by every sample.
                let one = Arc::new(base);
                (0..self.samples).map(|_| one.clone()).collect()
            }
        }
    }

    /// Runs sample `i` and reads its answer.
    async fn sample(&self, i: usize, call: Call, req: Arc<ChatRequest>) -> (usize, Sampled) {
        let m = self.member(i);
        let answered = async { m.model.chat(call, req).await?.buffer().await };
        let (reply, out) = match answered.await {
            Ok(x) => x,
            Err(e) => return (i, Sampled::Lost(AttemptSummary::failed(&m.name, &e))),
        };
        let text = if out.text.trim().is_empty() {
            out.render()
        } else {
            out.text
        };
        let (answer, extracted) = match self.extract.answer(&text) {
            Some(a) => (a, true),
            None => (normalize(&text), false),
        };
        if answer.is_empty() {
            let why = "an empty answer";
            reply.attempt.set_verdict(Verdict::Error, Some(why.into()));
            return (
                i,
                Sampled::Lost(AttemptSummary::rejected(&m.name, "error", why)),
            );
        }
        let s = Sampled::Answered {
            reply,
            answer,
            extracted,
        };
        (i, s)
    }

    /// Runs the samples at once until all are in, or (`early_stop`) until
    /// the winner is decided; the ones still running are then dropped.
    async fn run(&self, call: &Call, req: &ChatRequest) -> (Tally, Vec<Option<Sampled>>) {
        let (phase, voting) = call.phase("vote.samples");
        let mut pending: FuturesUnordered<_> = self
            .requests(req)
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                // Samples of one request: each must reach the model.
                let (sample, _) = voting.with_role(Role::Candidate).fresh().cancellable();
                self.sample(i, sample, r)
            })
            .collect();
        let mut tally = Tally::new(self.tie_break);
        let mut results: Vec<Option<Sampled>> = (0..self.samples).map(|_| None).collect();
        let mut done = 0;
        let mut decided = false;
        loop {
            // Once decided, only the samples already in are still read: they
            // cost nothing more, and cannot change the winner.
            let next = if decided {
                match pending.next().now_or_never() {
                    Some(next) => next,
                    None => break,
                }
            } else {
                pending.next().await
            };
            let Some((i, s)) = next else {
                break;
            };
            done += 1;
            if let Sampled::Answered { answer, .. } = &s {
                tally.add(answer, i, i % self.members.len());
            }
            if let Some(slot) = results.get_mut(i) {
                *slot = Some(s);
            }
            decided = decided || (self.early_stop && tally.decided(self.samples - done));
        }
        // Dropping the samples still running aborts their upstream calls;
        // their attempts end `cancelled`.
        drop(pending);
        drop(phase);
        (tally, results)
    }

    /// Sets the verdicts, records the vote, and answers with the winner.
    fn finish(
        &self,
        call: &Call,
        tally: &Tally,
        mut results: Vec<Option<Sampled>>,
        started: Instant,
    ) -> Result<Reply, ModelError> {
        let winner = tally.winner();
        let answered = tally.answered();
        for (i, r) in results.iter().enumerate() {
            let Some(Sampled::Answered { reply, answer, .. }) = r else {
                continue;
            };
            let (verdict, why) = match winner {
                Some(w) if w.first == i => (
                    Verdict::Winner,
                    format!("the winning answer, {} of {answered} votes", w.count),
                ),
                Some(w) if w.answer == *answer => (
                    Verdict::Ok,
                    format!("agreed with the winner, {} of {answered} votes", w.count),
                ),
                _ => (
                    Verdict::Loser,
                    format!(
                        "another answer, {} of {answered} votes",
                        count_of(tally, answer)
                    ),
                ),
            };
            reply.attempt.set_verdict(verdict, Some(why));
        }
        let agreement = winner.map(|w| w.count as f64 / answered.max(1) as f64);
        if let Some(share) = agreement {
            call.ctx.metrics.scope(|| {
                histogram!(VOTE_AGREEMENT, "route" => self.name.clone()).record(share);
            });
        }
        self.record(call, tally, &results, agreement, started);
        let Some(w) = winner else {
            let attempts = results
                .into_iter()
                .flatten()
                .filter_map(|s| match s {
                    Sampled::Lost(a) => Some(a),
                    Sampled::Answered { .. } => None,
                })
                .collect();
            return Err(ModelError::exhausted(
                "vote",
                "samples",
                self.name.clone(),
                attempts,
            ));
        };
        match results.get_mut(w.first).and_then(Option::take) {
            Some(Sampled::Answered { mut reply, .. }) => {
                reply
                    .meta
                    .add_header("x-conclave-vote", &format!("{}/{answered}", w.count));
                stream::with_request_usage(reply, call.ctx.clone())
            }
            _ => Err(ModelError::exhausted(
                "vote",
                "samples",
                self.name.clone(),
                Vec::new(),
            )),
        }
    }

    /// The `vote_finished` event.
    fn record(
        &self,
        call: &Call,
        tally: &Tally,
        results: &[Option<Sampled>],
        agreement: Option<f64>,
        started: Instant,
    ) {
        if !call.ctx.events_enabled() {
            return;
        }
        let answers: Vec<Value> = results
            .iter()
            .map(|r| match r {
                Some(Sampled::Answered { answer, .. }) => json!(shown(answer)),
                _ => Value::Null,
            })
            .collect();
        let counts: Map<String, Value> = tally
            .entries()
            .iter()
            .map(|e| (shown(&e.answer), json!(e.count)))
            .collect();
        let models: Vec<&str> = (0..self.samples).map(|i| &*self.member(i).name).collect();
        let failed = results
            .iter()
            .filter(|r| matches!(r, Some(Sampled::Lost(_))))
            .count();
        let not_extracted = results
            .iter()
            .filter(|r| {
                matches!(
                    r,
                    Some(Sampled::Answered {
                        extracted: false,
                        ..
                    })
                )
            })
            .count();
        let mut f = Map::new();
        f.insert("answers".into(), json!(answers));
        f.insert("counts".into(), Value::Object(counts));
        f.insert(
            "winner".into(),
            json!(tally.winner().map(|w| shown(&w.answer))),
        );
        f.insert(
            "winner_sample".into(),
            json!(tally.winner().map(|w| w.first)),
        );
        f.insert("agreement".into(), json!(agreement));
        f.insert(
            "cancelled".into(),
            json!(results.iter().filter(|r| r.is_none()).count()),
        );
        f.insert("failed".into(), json!(failed));
        f.insert("not_extracted".into(), json!(not_extracted));
        f.insert("models".into(), json!(models));
        f.insert(
            "elapsed_ms".into(),
            json!(started.elapsed().as_secs_f64() * 1000.0),
        );
        event(&call.ctx, "vote_finished", f);
    }
}

fn count_of(tally: &Tally, answer: &str) -> usize {
    tally
        .entries()
        .iter()
        .find(|e: &&Entry| e.answer == answer)
        .map_or(0, |e| e.count)
}

/// An answer as the event log shows it: cut at [`SHOWN_CHARS`], with a
/// short hash so that two long answers alike at the start stay apart.
fn shown(answer: &str) -> String {
    if answer.chars().count() <= SHOWN_CHARS {
        return answer.to_owned();
    }
    let digest: [u8; 32] = Sha256::digest(answer.as_bytes()).into();
    let tag: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    let head: String = answer.chars().take(SHOWN_CHARS).collect();
    format!("{head}… #{tag}")
}

/// Whether a client's `n` asks for the one choice a vote gives: unset
/// (`null`) or an integral 1 (`1`, `1.0`).
fn one_choice(n: &Value) -> bool {
    n.is_null()
        || n.as_u64() == Some(1)
        || n.as_f64().is_some_and(|x| x.to_bits() == 1f64.to_bits())
}

#[async_trait]
impl ChatModel for Vote {
    /// Every sample, each priced by its member.
    fn estimate(&self, size: CallSize) -> Spend {
        (0..self.samples)
            .map(|i| self.member(i).model.estimate(size))
            .sum()
    }

    async fn chat(&self, call: Call, req: Arc<ChatRequest>) -> Result<Reply, ModelError> {
        if let Some(n) = req.extra.get("n").filter(|n| !one_choice(n)) {
            return Err(ModelError::BadRequest {
                message: format!(
                    "A vote answers with the one winning choice; `n` must be 1 (got {n})."
                ),
                param: Some("n"),
            });
        }
        let started = Instant::now();
        let (tally, results) = self.run(&call, &req).await;
        self.finish(&call, &tally, results, started)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_is_one_choice_when_unset_or_an_integral_one() {
        for n in [json!(null), json!(1), json!(1.0)] {
            assert!(one_choice(&n), "{n}");
        }
        for n in [
            json!(2),
            json!(0),
            json!(1.5),
            json!("1"),
            json!(-1),
            json!([1]),
        ] {
            assert!(!one_choice(&n), "{n}");
        }
    }

    #[test]
    fn long_answers_are_shown_short_and_kept_apart() {
        assert_eq!(shown("42"), "42");
        let a = format!("{}a", "x".repeat(SHOWN_CHARS));
        let b = format!("{}b", "x".repeat(SHOWN_CHARS));
        let (sa, sb) = (shown(&a), shown(&b));
        assert_ne!(sa, sb);
        assert!(sa.starts_with(&"x".repeat(SHOWN_CHARS)), "{sa}");
        assert!(sa.chars().count() < SHOWN_CHARS + 16, "{sa}");
    }
}
