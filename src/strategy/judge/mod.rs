//! `strategy = "judge"`: a model-judge panel. To the client it is one
//! model; inside, the panel answers the request in parallel ([`panel`]),
//! the synthesis model ranks the answers blind and writes guidance
//! ([`synthesis`]), and the default model answers the request with that
//! guidance as an internal note, streamed live when the client streams.
//! The guidance never reaches the client; the default's tool calls do.
//!
//! Too few usable panel answers (`min_panel`) or a synthesis that fails
//! means the default answers the request alone, and a `judge_fallback`
//! event says why. The synthesis's ranking becomes a `judge_ranking` event
//! and the panellists' verdicts (`winner` / `loser`). The response's
//! `usage` counts every call of the request.

pub mod config;
mod panel;
mod synthesis;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::context::RequestCtx;
use crate::error::ModelError;
use crate::labels::{Role, Verdict};
use crate::model::{Call, CallSize, ChatModel, Reply, Spend};
pub use crate::strategy::Member;
use crate::strategy::event;
use crate::stream;
use crate::wire::{ChatRequest, Message};
use synthesis::{Judgement, Synthesis};

/// `strategy = "judge"`: its entry in [`crate::strategy::STRATEGIES`].
pub const STRATEGY: crate::graph::Strategy =
    crate::graph::Strategy::new("judge", config::parse, config::build);

/// How the default receives the synthesis's guidance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuidanceRole {
    /// A system message after the conversation.
    System,
    /// Folded into the last user message (or a user message after the
    /// conversation), for chat templates that reject a late system message.
    User,
}

impl GuidanceRole {
    pub fn as_str(self) -> &'static str {
        match self {
            GuidanceRole::System => "system",
            GuidanceRole::User => "user",
        }
    }
}

pub struct Judge {
    pub name: Arc<str>,
    pub panel: Vec<Member>,
    pub synthesis: Synthesis,
    pub default: Member,
    pub panel_timeout: Option<Duration>,
    pub min_panel: usize,
    pub guidance_role: GuidanceRole,
}

const NOTE: &str = "Internal note from a review panel (not from the user; do not mention it). \
Several candidate answers to this conversation were judged. Guidance for your answer:";

impl Judge {
    /// The default's answer to `req`, its usage replaced by the request's.
    async fn answer(&self, call: &Call, req: Arc<ChatRequest>) -> Result<Reply, ModelError> {
        let reply = self
            .default
            .model
            .chat(call.with_role(Role::Default), req)
            .await?;
        stream::with_request_usage(reply, call.ctx.clone())
    }

    /// The default answers alone, and the event log says why.
    async fn fallback(
        &self,
        call: &Call,
        req: Arc<ChatRequest>,
        why: &str,
    ) -> Result<Reply, ModelError> {
        let mut f = Map::new();
        f.insert("reason".into(), json!(why));
        f.insert("default".into(), json!(&*self.default.name));
        event(&call.ctx, "judge_fallback", f);
        self.answer(call, req).await
    }

    /// Records the ranking (labels mapped back to names) and the verdicts.
    fn record(&self, ctx: &RequestCtx, j: &Judgement, labelled: &[(String, &panel::Answer)]) {
        let name_of = |label: &str| {
            labelled
                .iter()
                .find(|(l, _)| l == label)
                .map(|(_, a)| &*self.panel[a.member].name)
        };
        let mut f = Map::new();
        f.insert("synthesis".into(), json!(&*self.synthesis.member.name));
        let labels: Map<String, Value> = labelled
            .iter()
            .map(|(l, a)| (l.clone(), json!(&*self.panel[a.member].name)))
            .collect();
        f.insert("labels".into(), Value::Object(labels));
        match &j.ranking {
            Ok(ranking) => {
                let best = ranking.first().map_or(0, |r| r.rank);
                for r in ranking {
                    if let Some((_, a)) = labelled.iter().find(|(l, _)| *l == r.label) {
                        let v = if r.rank == best {
                            Verdict::Winner
                        } else {
                            Verdict::Loser
                        };
                        a.attempt.set_verdict(v, Some(r.reason.clone()));
                    }
                }
                let rows: Vec<Value> = ranking
                    .iter()
                    .map(|r| json!({"rank": r.rank, "label": r.label, "model": name_of(&r.label), "score": r.score, "reason": r.reason}))
                    .collect();
                f.insert("ranking".into(), Value::Array(rows));
            }
            Err(why) => {
                f.insert("ranking".into(), Value::Null);
                f.insert("error".into(), json!(why));
            }
        }
        event(ctx, "judge_ranking", f);
    }

    /// The client's request with the guidance as an internal note.
    fn guided(&self, req: &ChatRequest, guidance: &str) -> Arc<ChatRequest> {
        let note = format!("{NOTE}\n{guidance}");
        let mut out = req.clone();
        match (self.guidance_role, out.messages.last_mut()) {
            (GuidanceRole::User, Some(last)) if last.role == "user" => last.append_text(&note),
            (GuidanceRole::User, _) => out.messages.push(Message::new("user", note)),
            (GuidanceRole::System, _) => out.messages.push(Message::new("system", note)),
        }
        Arc::new(out)
    }
}

#[async_trait]
impl ChatModel for Judge {
    /// The panel, the synthesis reading every answer, and the default
    /// reading the guidance.
    fn estimate(&self, size: CallSize) -> Spend {
        let panel: Spend = self.panel.iter().map(|m| m.model.estimate(size)).sum();
        let answers = size.output.saturating_mul(self.panel.len() as u64);
        let read = CallSize {
            input: size.input.saturating_add(answers),
            output: 0,
            ..size
        };
        let s = &self.synthesis;
        let guided = CallSize {
            input: size.input.saturating_add(u64::from(s.max_tokens)),
            ..size
        };
        panel
            + s.member.model.estimate(read.reading(s.max_tokens))
            + self.default.model.estimate(guided)
    }

    async fn chat(&self, call: Call, req: Arc<ChatRequest>) -> Result<Reply, ModelError> {
        let asked = panel::request(&req);
        let (phase, in_panel) = call.phase("judge.panel");
        let outcome = panel::run(&self.panel, &in_panel, &asked, self.panel_timeout).await;
        drop(phase);
        if outcome.answers.len() < self.min_panel {
            let why = format!(
                "{} usable panel answer(s), fewer than min_panel = {}{}",
                outcome.answers.len(),
                self.min_panel,
                if outcome.failures.is_empty() {
                    String::new()
                } else {
                    format!(": {}", outcome.failures.join("; "))
                }
            );
            return self.fallback(&call, req, &why).await;
        }
        let mut order: Vec<&panel::Answer> = outcome.answers.iter().collect();
        shuffle(&mut order);
        let labelled: Vec<(String, &panel::Answer)> = order
            .into_iter()
            .enumerate()
            .map(|(i, a)| (label(i), a))
            .collect();
        let candidates: Vec<(String, &crate::wire::AssistantOutput)> = labelled
            .iter()
            .map(|(l, a)| (l.clone(), &a.output))
            .collect();
        let (phase, judging) = call.phase("judge.synthesis");
        let judged = self.synthesis.judge(&judging, &req, &candidates).await;
        drop(phase);
        let judgement = match judged {
            Ok(j) => j,
            Err(why) => return self.fallback(&call, req, &why).await,
        };
        self.record(&call.ctx, &judgement, &labelled);
        self.answer(&call, self.guided(&req, &judgement.guidance))
            .await
    }
}

/// `A`, `B`, … `Z`, then `AA`, `AB`, ….
fn label(i: usize) -> String {
    let letter = |n: usize| char::from(b'A' + (n % 26) as u8);
    if i < 26 {
        letter(i).to_string()
    } else {
        format!("{}{}", letter(i / 26 - 1), letter(i))
    }
}

/// A uniformly random order (so position cannot tell a panellist apart).
fn shuffle<T>(items: &mut [T]) {
    use rand::seq::SliceRandom;
    items.shuffle(&mut rand::rng());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_run_past_z() {
        let got: Vec<String> = [0, 1, 25, 26, 27, 51, 52].into_iter().map(label).collect();
        assert_eq!(got, ["A", "B", "Z", "AA", "AB", "AZ", "BA"]);
    }
}
