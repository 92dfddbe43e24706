//! One request's consults: each one checked against the caps (per request,
//! and what the session has spent, read from the store), run, charged what
//! its attempt recorded (estimates and failed calls included), and written
//! as an `oracle_consult` event. A refused or failed consult is a tool
//! error for the base, never a failed request.

use serde_json::{Map, Value, json};

use super::consult::Question;
use super::turn::ToolCall;
use super::{Oracle, clip};
use crate::model::Call;
use crate::strategy::event;
use crate::wire::Message;

/// A request's consults so far.
pub struct Ledger {
    pub calls: u32,
    /// A consult was refused or failed: the tool is offered no more.
    pub closed: bool,
    pub cost_usd: f64,
    /// `KEY/SESSION` when the client named a session.
    pub session: Option<String>,
    /// What the session had spent when last read, this request's consults
    /// since included.
    pub session_spent: Option<f64>,
}

impl Oracle {
    /// What `session` has spent, or `None` when the store cannot say.
    async fn session_spent(&self, session: &str) -> Option<f64> {
        let (store, s) = (self.store.clone(), session.to_owned());
        match tokio::task::spawn_blocking(move || store.oracle_spend(&s)).await {
            Ok(Ok((_, cost))) => Some(cost),
            Ok(Err(e)) => {
                tracing::error!("cannot read a session's oracle spend: {e}");
                None
            }
            Err(_) => None,
        }
    }

    /// Runs one consult (or refuses it); the tool result the base gets.
    pub(super) async fn consult(
        &self,
        call: &Call,
        tool_call: &ToolCall,
        conversation: &[Message],
        ledger: &mut Ledger,
        this_turn: u32,
    ) -> String {
        let mut f = Map::new();
        let outcome = self
            .run(call, tool_call, conversation, ledger, &mut f)
            .await;
        ledger.closed |= outcome.is_err();
        let session_cost = ledger.session_spent.unwrap_or(ledger.cost_usd);
        f.insert("calls_this_turn".into(), json!(this_turn));
        f.insert("calls_total".into(), json!(ledger.calls));
        f.insert("session_cost_usd".into(), json!(session_cost));
        match &outcome {
            Ok(answer) => f.insert("answer".into(), Value::from(clip(answer))),
            Err(e) => f.insert("error".into(), Value::from(e.as_str())),
        };
        event(&call.ctx, "oracle_consult", f);
        match outcome {
            Ok(answer) => answer,
            Err(e) => json!({ "error": e }).to_string(),
        }
    }

    async fn run(
        &self,
        call: &Call,
        tool_call: &ToolCall,
        conversation: &[Message],
        ledger: &mut Ledger,
        f: &mut Map<String, Value>,
    ) -> Result<String, String> {
        let q = Question::read(&tool_call.arguments).map_err(|e| format!("oracle_consult: {e}"))?;
        f.insert("question".into(), Value::from(clip(&q.question)));
        let hint = q
            .hint
            .as_deref()
            .map_or(Value::Null, |h| Value::from(clip(h)));
        f.insert("context_hint".into(), hint);
        if ledger.calls >= self.caps.calls_per_request {
            return Err(format!(
                "oracle budget exhausted: at most {} consult(s) per request; answer on your own",
                self.caps.calls_per_request
            ));
        }
        let spent = match &ledger.session {
            Some(s) => {
                let spent = self
                    .session_spent(s)
                    .await
                    .ok_or("oracle unavailable; answer on your own")?;
                ledger.session_spent = Some(spent);
                spent
            }
            None => ledger.cost_usd,
        };
        if spent >= self.caps.session_cost_usd {
            return Err(format!(
                "oracle budget exhausted: this session has spent ${spent:.4} of its ${:.2}; \
                 answer on your own",
                self.caps.session_cost_usd
            ));
        }
        // What the consult cost, as its attempt recorded it: consults of a
        // request run one at a time, so the request's totals tell.
        let before = call.ctx.totals();
        let asked = self.oracle.ask(call, &q, conversation).await;
        let after = call.ctx.totals();
        let cost = (after.cost_usd - before.cost_usd).max(0.0);
        let tokens = (after.input_tokens + after.output_tokens)
            .saturating_sub(before.input_tokens + before.output_tokens);
        ledger.calls += 1;
        ledger.cost_usd += cost;
        ledger.session_spent = ledger.session_spent.map(|s| s + cost);
        f.insert("cost_usd".into(), json!(cost));
        f.insert("tokens".into(), json!(tokens));
        if let Some(s) = &ledger.session {
            let (store, s) = (self.store.clone(), s.clone());
            let now = crate::clock::unix_secs_i64();
            let saved =
                tokio::task::spawn_blocking(move || store.add_oracle_spend(&s, cost, now)).await;
            if !matches!(saved, Ok(Ok(()))) {
                tracing::error!("cannot record an oracle consult's cost for its session");
            }
        }
        asked.map_err(|e| format!("the oracle failed ({}); answer on your own", e.kind()))
    }
}
