//! `strategy = "oracle"`: a cheap base model runs the conversation and may
//! consult a strong one. conclave adds an `oracle_consult` tool to what the
//! base is sent ([`consult`]); when the base calls it, conclave asks the
//! oracle itself, hands the base the answer as the tool's result and asks
//! it again. The client sees only the base's final answer (streamed live
//! when it starts with text); its own tools work as usual. Consults are
//! capped per request and by what the session (`x-conclave-session`, else
//! the request) has spent, kept in the store across restarts.

pub mod config;
mod consult;
mod turn;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Map, Value, json};

use crate::error::ModelError;
use crate::labels::{Role, Verdict};
use crate::model::{
    Call, CallSize, ChatModel, Chunk, ChunkStream, Completion, Reply, ReplyBody, Spend,
};
use crate::store::Store;
use crate::strategy::{Member, event, pinned};
use crate::stream;
use crate::wire::{ChatRequest, Message};
pub use consult::OracleCall;
use consult::{Question, TOOL};
use turn::{ToolCall, Turn};

/// Longest question or answer kept in an `oracle_consult` event.
const EVENT_TEXT: usize = 4000;

#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub calls_per_request: u32,
    pub session_cost_usd: f64,
}

pub struct Oracle {
    pub name: Arc<str>,
    pub base: Member,
    pub oracle: OracleCall,
    pub caps: Caps,
    pub store: Arc<Store>,
}

/// What a base turn turned out to be.
enum Seen {
    /// An answer for the client: streamed live or whole.
    Final(Reply),
    /// A turn read whole because it began with a tool call.
    Calls(Reply, Turn),
}

/// A consult's bookkeeping within one request.
struct Ledger {
    calls: u32,
    cost_usd: f64,
    /// `KEY/SESSION` when the client named a session.
    session: Option<String>,
}

impl Oracle {
    /// The base's answer to `req`, read far enough to know whether it is
    /// for the client.
    async fn turn(&self, call: &Call, req: Arc<ChatRequest>) -> Result<Seen, ModelError> {
        let reply = self
            .base
            .model
            .chat(call.with_role(Role::Base), req)
            .await?;
        let Reply {
            body,
            meta,
            attempt,
        } = reply;
        match body {
            ReplyBody::Whole(c) => {
                let turn = Turn::from_completion(&c.body).unwrap_or_default();
                let reply = Reply {
                    body: ReplyBody::Whole(c),
                    meta,
                    attempt,
                };
                if turn.calls.iter().any(|t| t.name == TOOL) {
                    Ok(Seen::Calls(reply, turn))
                } else {
                    Ok(Seen::Final(reply))
                }
            }
            ReplyBody::Stream(mut s) => {
                // Up to the first real delta: text streams live, a tool
                // call is read whole first.
                let mut seen: Vec<Chunk> = Vec::new();
                let mut calls = false;
                while let Some(c) = s.next().await {
                    let c = c?;
                    let real = c.real;
                    calls = real && is_tool_call(&c.data);
                    seen.push(c);
                    if real {
                        break;
                    }
                }
                if !calls {
                    let live = futures::stream::iter(seen.into_iter().map(Ok)).chain(s);
                    let body = ReplyBody::Stream(ChunkStream::new(live));
                    return Ok(Seen::Final(Reply {
                        body,
                        meta,
                        attempt,
                    }));
                }
                let mut turn = Turn::default();
                for c in &seen {
                    turn.absorb(&c.data);
                }
                while let Some(c) = s.next().await {
                    let c = c?;
                    turn.absorb(&c.data);
                    seen.push(c);
                }
                let body = ReplyBody::Stream(ChunkStream::replay(seen));
                let reply = Reply {
                    body,
                    meta,
                    attempt,
                };
                if turn.calls.iter().any(|t| t.name == TOOL) {
                    Ok(Seen::Calls(reply, turn))
                } else {
                    Ok(Seen::Final(reply))
                }
            }
        }
    }

    /// Runs one consult (or refuses it); the tool result the base gets.
    async fn consult(
        &self,
        call: &Call,
        tool_call: &ToolCall,
        conversation: &[Message],
        ledger: &mut Ledger,
        this_turn: u32,
    ) -> String {
        let mut f = Map::new();
        let outcome = self
            .consult_inner(call, tool_call, conversation, ledger, &mut f)
            .await;
        let session_cost = match &ledger.session {
            Some(s) => {
                let (store, s) = (self.store.clone(), s.clone());
                tokio::task::spawn_blocking(move || store.oracle_spend(&s))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .map_or(ledger.cost_usd, |(_, c)| c)
            }
            None => ledger.cost_usd,
        };
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

    async fn consult_inner(
        &self,
        call: &Call,
        tool_call: &ToolCall,
        conversation: &[Message],
        ledger: &mut Ledger,
        f: &mut Map<String, Value>,
    ) -> Result<String, String> {
        let q = Question::read(&tool_call.arguments).map_err(|e| format!("oracle_consult: {e}"))?;
        f.insert("question".into(), Value::from(clip(&q.question)));
        f.insert(
            "context_hint".into(),
            q.hint.as_deref().map_or(Value::Null, Value::from),
        );
        if ledger.calls >= self.caps.calls_per_request {
            return Err(format!(
                "oracle budget exhausted: at most {} consult(s) per request; answer on your own",
                self.caps.calls_per_request
            ));
        }
        let spent = match &ledger.session {
            Some(s) => {
                let (store, s) = (self.store.clone(), s.clone());
                tokio::task::spawn_blocking(move || store.oracle_spend(&s))
                    .await
                    .map_err(|e| format!("oracle unavailable: {e}"))?
                    .map_err(|e| {
                        tracing::error!("cannot read oracle spend: {e}");
                        "oracle unavailable".to_owned()
                    })?
                    .1
            }
            None => ledger.cost_usd,
        };
        if spent >= self.caps.session_cost_usd {
            return Err(format!(
                "oracle budget exhausted: this session has spent ${spent:.4} of its ${:.2}; answer on your own",
                self.caps.session_cost_usd
            ));
        }
        let (answer, cost) = self
            .oracle
            .ask(call, &q, conversation)
            .await
            .map_err(|e| format!("the oracle failed ({}); answer on your own", e.kind()))?;
        ledger.calls += 1;
        ledger.cost_usd += cost.cost_usd;
        f.insert("cost_usd".into(), json!(cost.cost_usd));
        f.insert("tokens".into(), json!(cost.tokens));
        if let Some(s) = &ledger.session {
            let (store, s, c) = (self.store.clone(), s.clone(), cost.cost_usd);
            let now = i64::try_from(unix_now()).unwrap_or(i64::MAX);
            let saved =
                tokio::task::spawn_blocking(move || store.add_oracle_spend(&s, c, now)).await;
            if !matches!(saved, Ok(Ok(()))) {
                tracing::error!("cannot record an oracle consult's cost for its session");
            }
        }
        Ok(answer)
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn clip(s: &str) -> String {
    s.chars().take(EVENT_TEXT).collect()
}

/// Whether a stream chunk's delta carries a tool call.
fn is_tool_call(data: &Bytes) -> bool {
    serde_json::from_slice::<Value>(data)
        .ok()
        .and_then(|v| v.pointer("/choices/0/delta/tool_calls").cloned())
        .is_some_and(|t| t.as_array().is_some_and(|a| !a.is_empty()))
}

/// `req` with the oracle tool added to its tools.
fn with_tool(req: &ChatRequest, conversation: Vec<Message>, offer: bool) -> Arc<ChatRequest> {
    let mut r = req.clone();
    r.messages = conversation;
    if offer {
        let tools = r.extra.entry("tools").or_insert_with(|| json!([]));
        if let Value::Array(list) = tools {
            list.push(consult::tool());
        }
    }
    Arc::new(r)
}

/// A turn rendered for the client: its own tool calls only, whole or as a
/// stream, with the request's usage.
fn for_client(reply: Reply, turn: &Turn, stream: bool) -> Result<Reply, ModelError> {
    let mine: Vec<&ToolCall> = turn.calls.iter().filter(|c| c.name != TOOL).collect();
    let mut v = turn.completion(&mine);
    v["usage"] = json!({});
    let c = Completion {
        body: Bytes::from(serde_json::to_vec(&v)?),
        usage: None,
    };
    let body = if stream {
        ReplyBody::Stream(stream::whole_to_stream(&c)?)
    } else {
        ReplyBody::Whole(c)
    };
    Ok(Reply { body, ..reply })
}

#[async_trait]
impl ChatModel for Oracle {
    /// The base on every turn, and the oracle on every consult allowed.
    fn estimate(&self, size: CallSize) -> Spend {
        let n = u64::from(self.caps.calls_per_request);
        let oracle = self.oracle.member.model.estimate(CallSize {
            input: size.input,
            output: u64::from(self.oracle.max_tokens),
        });
        self.base.model.estimate(size) * (n + 1) + oracle * n
    }

    async fn chat(&self, call: Call, req: Arc<ChatRequest>) -> Result<Reply, ModelError> {
        if let Some(pin) = call.pin.clone() {
            let members = Member::targets(std::slice::from_ref(&self.base));
            let asked = (call.without_pin(), req, pin.as_ref());
            return pinned(("oracle", &self.name), "base", &members, Role::Base, asked).await;
        }
        let ctx = call.ctx.clone();
        let mut ledger = Ledger {
            calls: 0,
            cost_usd: 0.0,
            session: ctx
                .options
                .session
                .as_ref()
                .map(|s| format!("{}/{s}", ctx.key)),
        };
        let mut conversation = req.messages.clone();
        // Every allowed consult, one refused, then a turn without the tool.
        let turns = self.caps.calls_per_request + 2;
        for n in 0..turns {
            let offer = n + 1 < turns;
            let asked = with_tool(&req, conversation.clone(), offer);
            let (reply, turn) = match self.turn(&call, asked).await? {
                Seen::Final(reply) => {
                    reply.attempt.set_verdict(Verdict::Ok, None);
                    return stream::with_request_usage(reply, ctx);
                }
                Seen::Calls(reply, turn) => (reply, turn),
            };
            reply.attempt.set_verdict(Verdict::Ok, None);
            let (oracle_calls, mine): (Vec<&ToolCall>, Vec<&ToolCall>) =
                turn.calls.iter().partition(|c| c.name == TOOL);
            if !mine.is_empty() || !offer {
                // The client's own tool calls go back to it; an oracle call
                // beside them is dropped, not paid for.
                for dropped in &oracle_calls {
                    let mut f = Map::new();
                    let q = Question::read(&dropped.arguments).ok();
                    f.insert(
                        "question".into(),
                        q.map_or(Value::Null, |q| Value::from(clip(&q.question))),
                    );
                    f.insert("dropped".into(), json!(true));
                    f.insert("calls_total".into(), json!(ledger.calls));
                    event(&ctx, "oracle_consult", f);
                }
                let reply = for_client(reply, &turn, req.is_stream())?;
                return stream::with_request_usage(reply, ctx);
            }
            conversation.push(Message::from_value(turn.message(&oracle_calls)));
            for (i, c) in oracle_calls.iter().enumerate() {
                let this_turn = u32::try_from(i + 1).unwrap_or(u32::MAX);
                let result = self
                    .consult(&call, c, &conversation, &mut ledger, this_turn)
                    .await;
                conversation.push(Message::from_value(json!({
                    "role": "tool", "tool_call_id": c.id, "content": result,
                })));
            }
        }
        Err(ModelError::Invalid {
            upstream: self.name.clone(),
            detail: "the base model kept calling the oracle".into(),
        })
    }
}
