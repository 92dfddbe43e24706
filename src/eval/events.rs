//! What the gateway's event log says of each request of a run: its cost,
//! tokens and attempts (the `request` event), and what the strategy did
//! (escalations in a chain, oracle consults, a panel's first
//! ranked model, a race's winner), and which model wrote the answer when
//! the response's headers could not say. The report's cost and attempts
//! come from here, so they are the numbers the gateway itself recorded.
//!
//! It also says which of the request's calls failed (`attempt` verdict
//! `error`), and how many of the strategy's samples (a race's candidates
//! from `race_candidate`, a judge's panellists from their `attempt`s and
//! `context_window_exceeded`) gave no answer: an answer made with fewer
//! samples than asked is degraded, and one made with none of them (a
//! judge's default answering alone) counts as failed.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::{Map, Value, json};

use super::run::Outcome;

/// The most of one event line read.
const MAX_LINE: usize = 1 << 20;

/// Fills the event log's figures into `outcomes` (matched by request id).
pub fn attach(outcomes: &mut [Outcome], log: &Path) -> std::io::Result<()> {
    let wanted: HashMap<&str, usize> = outcomes
        .iter()
        .enumerate()
        .filter(|(_, o)| !o.request_id.is_empty())
        .map(|(i, o)| (o.request_id.as_str(), i))
        .collect();
    let mut found: HashMap<usize, Found> = HashMap::new();
    // A line the gateway is still writing, or one that is not an event,
    // is passed over.
    super::jsonl::each_line(log, MAX_LINE, |line| {
        let Ok(Value::Object(e)) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        let Some(&at) = e
            .get("request_id")
            .and_then(Value::as_str)
            .and_then(|id| wanted.get(id))
        else {
            return;
        };
        found.entry(at).or_default().take(&e);
    })?;
    for (at, f) in found {
        if let Some(o) = outcomes.get_mut(at) {
            f.fill(o);
        }
    }
    Ok(())
}

#[derive(Default)]
struct Found {
    request: Option<Map<String, Value>>,
    escalations: u64,
    consults: u64,
    top_ranked: Option<String>,
    race_winner: Option<String>,
    answered: Option<String>,
    /// Calls recorded with verdict `error`.
    failed_calls: u64,
    /// A race's candidates: whether each gave an answer.
    candidates: Vec<bool>,
    /// A judge's panellists by name: whether any try of theirs answered.
    panel: BTreeMap<String, bool>,
}

impl Found {
    fn take(&mut self, e: &Map<String, Value>) {
        let field = |k: &str| e.get(k).or_else(|| e.get("fields").and_then(|f| f.get(k)));
        match e.get("event").and_then(Value::as_str) {
            Some("request") => self.request = Some(e.clone()),
            Some("attempt") => {
                let verdict = field("verdict").and_then(Value::as_str);
                let role = field("role").and_then(Value::as_str);
                if verdict == Some("escalate") {
                    self.escalations += 1;
                }
                if verdict == Some("error") {
                    self.failed_calls += 1;
                }
                if role == Some("panel") {
                    let model = field("model").and_then(Value::as_str).unwrap_or_default();
                    let ok = !matches!(verdict, Some("error" | "cancelled") | None);
                    *self.panel.entry(model.to_string()).or_default() |= ok;
                }
                // The call whose answer the client got: the last one a
                // strategy kept that is not a helper's (verifier, judge).
                let kept = matches!(verdict, Some("ok" | "accept" | "winner"));
                let answering = matches!(
                    role,
                    Some("direct" | "tier" | "default" | "candidate" | "base" | "member")
                );
                if kept && answering {
                    self.answered = field("model").and_then(Value::as_str).map(str::to_string);
                }
            }
            Some("oracle_consult") => self.consults += 1,
            Some("judge_ranking") => {
                self.top_ranked = field("ranking")
                    .and_then(Value::as_array)
                    .and_then(|r| r.iter().find(|x| x.get("rank") == Some(&json!(1))))
                    .and_then(|x| x.get("model")?.as_str())
                    .map(str::to_string);
            }
            Some("race_candidate") => {
                let verdict = field("verdict").and_then(Value::as_str);
                let ok = !matches!(verdict, Some("error" | "skipped") | None);
                self.candidates.push(ok);
            }
            Some("context_window_exceeded") if field("role") == Some(&json!("panel")) => {
                let model = field("model").and_then(Value::as_str).unwrap_or_default();
                self.panel.entry(model.to_string()).or_default();
            }
            Some("race_finished") => {
                self.race_winner = field("winner").and_then(Value::as_str).map(str::to_string);
            }
            _ => {}
        }
    }

    fn fill(self, o: &mut Outcome) {
        if let Some(r) = &self.request {
            let num = |k: &str| r.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            o.recorded = true;
            o.cost_usd = num("cost_usd");
            o.input_tokens = num("input_tokens") as u64;
            o.output_tokens = num("output_tokens") as u64;
            o.attempts = num("attempts") as u64;
        }
        o.failed_calls = self.failed_calls;
        let (samples, failed) = if self.candidates.is_empty() {
            let answered = self.panel.values().filter(|ok| **ok).count();
            (self.panel.len(), self.panel.len() - answered)
        } else {
            let answered = self.candidates.iter().filter(|ok| **ok).count();
            (self.candidates.len(), self.candidates.len() - answered)
        };
        o.samples = samples as u64;
        o.failed_samples = failed as u64;
        // What answered was not the strategy: none of its samples did.
        if samples > 0 && failed == samples && !o.failed {
            o.failed = true;
            o.correct = false;
            o.detail = format!(
                "every one of the strategy's {samples} samples failed; a fallback answered"
            );
        }
        // A streamed chain or race names its answer's model only in the
        // event log (its headers went out before it was known).
        if o.served_by.is_none() {
            o.served_by = self.race_winner.clone().or(self.answered);
        }
        let s = &mut o.strategy;
        if self.escalations > 0 {
            s.insert("escalations".into(), json!(self.escalations));
        }
        if self.consults > 0 {
            s.insert("consults".into(), json!(self.consults));
        }
        if let Some(m) = self.top_ranked {
            s.insert("top_ranked".into(), json!(m));
        }
        if let Some(m) = self.race_winner {
            s.insert("race_winner".into(), json!(m));
        }
    }
}

#[cfg(test)]
mod tests;
