//! The race's gates: how many candidates race (`max_candidates`), and what
//! the race is estimated to cost before it starts. Over `budget_tokens`,
//! or over `confirm_threshold_tokens` without `x-conclave-confirm: yes`,
//! the first candidate answers alone, and events, a metric and the
//! `x-conclave-race` header say why (so a client can retry with consent).

use std::sync::Arc;

use metrics::counter;
use serde_json::{Map, json};

use super::Race;
use super::metrics::RACE_DOWNGRADES;
use crate::error::ModelError;
use crate::labels::{Role, Verdict};
use crate::model::{Call, CallSize, Reply};
use crate::strategy::event;
use crate::wire::ChatRequest;

#[derive(Debug, Clone, Copy)]
pub struct Gates {
    /// 0 disables racing: the first candidate answers alone.
    pub max_candidates: usize,
    /// ≤ 0 disables the gate.
    pub budget_tokens: i64,
    /// ≤ 0 disables the gate.
    pub confirm_threshold_tokens: i64,
    /// Output tokens per candidate when the request sets no `max_tokens`.
    pub baseline_tokens_per_run: u64,
}

/// Why a race runs its first candidate alone.
pub struct Downgrade {
    /// `None`: racing is off (`max_candidates = 0`), nothing to report.
    reason: Option<&'static str>,
    estimate: u64,
    limit: i64,
}

impl Gates {
    /// How many of `n` candidates race.
    pub fn pool(&self, n: usize) -> usize {
        self.max_candidates.min(n)
    }

    /// Tokens the race may spend: each candidate reads the request and
    /// writes up to `max_tokens` (or the baseline); a judge reads the
    /// request and each answer and writes its own cap.
    pub fn estimate(&self, race: &Race, req: &ChatRequest, pool: usize) -> u64 {
        let bill = req.billable();
        let size = CallSize {
            input: bill.input,
            images: bill.images,
            output: bill.output.unwrap_or(self.baseline_tokens_per_run),
        };
        race.spend(size, pool).tokens
    }

    pub fn check(
        &self,
        race: &Race,
        call: &Call,
        req: &ChatRequest,
        pool: usize,
    ) -> Result<(), Downgrade> {
        if pool == 0 {
            return Err(Downgrade {
                reason: None,
                estimate: 0,
                limit: 0,
            });
        }
        let estimate = self.estimate(race, req, pool);
        let over = |limit: i64| limit > 0 && estimate > limit as u64;
        if over(self.budget_tokens) {
            return Err(Downgrade {
                reason: Some("over_budget"),
                estimate,
                limit: self.budget_tokens,
            });
        }
        if over(self.confirm_threshold_tokens) && !call.ctx.options.confirm {
            return Err(Downgrade {
                reason: Some("needs_confirmation"),
                estimate,
                limit: self.confirm_threshold_tokens,
            });
        }
        Ok(())
    }
}

impl Downgrade {
    /// Records the downgrade and lets the first candidate answer alone.
    pub async fn run(
        self,
        race: &Race,
        call: &Call,
        req: Arc<ChatRequest>,
    ) -> Result<Reply, ModelError> {
        let Some(first) = race.candidates.first() else {
            return Err(ModelError::BadRequest {
                message: format!("race `{}` has no candidates", race.name),
                param: None,
            });
        };
        if let Some(reason) = self.reason {
            let limit_key = match reason {
                "over_budget" => "budget_tokens",
                _ => "threshold_tokens",
            };
            let names: Vec<&str> = race.candidates.iter().map(|c| &*c.name).collect();
            if reason == "needs_confirmation" {
                let mut f = Map::new();
                f.insert("estimate_tokens".into(), json!(self.estimate));
                f.insert("threshold_tokens".into(), json!(self.limit));
                f.insert("candidates".into(), json!(names));
                event(&call.ctx, "race_confirm_requested", f);
            }
            let mut f = Map::new();
            f.insert("reason".into(), json!(reason));
            f.insert("estimate_tokens".into(), json!(self.estimate));
            f.insert(limit_key.into(), json!(self.limit));
            f.insert("model".into(), json!(&*first.name));
            event(&call.ctx, "race_downgraded", f);
            call.ctx.metrics.scope(|| {
                counter!(RACE_DOWNGRADES, "route" => race.name.clone(), "reason" => reason)
                    .increment(1);
            });
        }
        let mut reply = first
            .model
            .chat(call.with_role(Role::Candidate), req)
            .await?;
        reply.attempt.set_verdict(Verdict::Ok, None);
        if let Some(reason) = self.reason {
            let value = format!("downgraded; reason={reason}; estimate={}", self.estimate);
            reply.meta.add_header("x-conclave-race", &value);
        }
        Ok(reply)
    }
}
