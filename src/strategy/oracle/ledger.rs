//! One request's consults: each one checked against the caps (per
//! request; and what its session and its key's day on the route have
//! spent, reservations of consults in flight included), its worst case
//! reserved in the store before it is made and settled to what its
//! attempt recorded after (estimates and failed calls included), and
//! written as an `oracle_consult` event. A refused or failed consult is a
//! tool error for the base, never a failed request.

use serde_json::{Map, Value, json};

use super::consult::Question;
use super::turn::ToolCall;
use super::{Oracle, clip};
use crate::model::Call;
use crate::store::limits::budget::{day_name, utc_day};
use crate::store::oracle::{OracleLedgers, Reserved};
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

const ON_YOUR_OWN: &str = "answer on your own";

impl Oracle {
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

    /// Where a consult of this request is counted.
    fn ledgers(&self, call: &Call, ledger: &Ledger) -> OracleLedgers {
        OracleLedgers {
            session: ledger
                .session
                .clone()
                .map(|s| (s, self.caps.session_cost_usd)),
            key: call.ctx.key.to_string(),
            route: self.name.to_string(),
            day: day_name(utc_day(self.clock.now())),
            key_cap: self.caps.key_daily_cost_usd,
        }
    }

    /// Reserves `worst` for a consult, or says why it may not be made.
    async fn reserve(&self, at: &OracleLedgers, worst: f64) -> Result<Reserved, String> {
        let now = self.clock.unix_secs_i64();
        match self.store.reserve(at, worst, now).await {
            Ok(r) => Ok(r),
            Err(e) => {
                tracing::error!("cannot reserve an oracle consult's cost: {e}");
                Err(format!("oracle unavailable; {ON_YOUR_OWN}"))
            }
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
                "oracle budget exhausted: at most {} consult(s) per request; {ON_YOUR_OWN}",
                self.caps.calls_per_request
            ));
        }
        let req = self.oracle.request(&q, conversation);
        let worst = self.oracle.worst_usd(&req);
        f.insert("reserved_usd".into(), json!(worst));
        let session_full = |spent: f64| {
            format!(
                "oracle budget exhausted: this session has spent ${spent:.4} of its ${:.4} \
                 and a consult may cost up to ${worst:.4}; {ON_YOUR_OWN}",
                self.caps.session_cost_usd
            )
        };
        // Without a session, the request is the session (and only this
        // request's consults, one at a time, count against it).
        if ledger.session.is_none() && ledger.cost_usd + worst > self.caps.session_cost_usd {
            return Err(session_full(ledger.cost_usd));
        }
        let at = self.ledgers(call, ledger);
        let session_held = match self.reserve(&at, worst).await? {
            Reserved::Held { session, .. } => session,
            Reserved::SessionFull { spent } => {
                ledger.session_spent = Some(spent);
                return Err(session_full(spent));
            }
            Reserved::KeyFull { spent } => {
                return Err(format!(
                    "oracle budget exhausted: this key has spent ${spent:.4} of its ${:.4} \
                     a day on this route and a consult may cost up to ${worst:.4}; {ON_YOUR_OWN}",
                    self.caps.key_daily_cost_usd
                ));
            }
        };
        // What the consult cost, as its attempt recorded it: consults of a
        // request run one at a time, so the request's totals tell.
        let before = call.ctx.totals();
        let asked = self.oracle.ask(call, req).await;
        let after = call.ctx.totals();
        let cost = (after.cost_usd - before.cost_usd).max(0.0);
        let tokens = (after.input_tokens + after.output_tokens)
            .saturating_sub(before.input_tokens + before.output_tokens);
        ledger.calls += 1;
        ledger.cost_usd += cost;
        ledger.session_spent = session_held.map(|s| (s - worst + cost).max(0.0));
        f.insert("cost_usd".into(), json!(cost));
        f.insert("tokens".into(), json!(tokens));
        let now = self.clock.unix_secs_i64();
        if let Err(e) = self.store.settle(&at, worst, cost, now).await {
            tracing::error!("cannot settle an oracle consult's cost: {e}");
        }
        asked.map_err(|e| format!("the oracle failed ({}); {ON_YOUR_OWN}", e.kind()))
    }
}
