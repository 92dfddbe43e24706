//! `strategy = "oracle"`: a cheap base model runs the conversation and may
//! consult a strong one. conclave adds an `oracle_consult` tool to what the
//! base is sent ([`consult`]); when the base calls it, conclave asks the
//! oracle itself, hands the base the answer as the tool's result and asks
//! it again. The client sees only the base's final answer (streamed live
//! when it starts with text); its own tools work as usual. Consults are
//! capped per request, by what the session (`x-conclave-session`, else
//! the request) has spent, and by what the key has spent on the route
//! today; each consult reserves its worst case against both before it is
//! made, kept in the store across restarts.

pub mod config;
mod consult;
mod ledger;
mod live;
mod turn;

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::error::ModelError;
use crate::labels::Verdict;
use crate::model::{Call, CallSize, ChatModel, Completion, Reply, ReplyBody, Spend};
use crate::store::records::OracleSpend;
use crate::strategy::{Member, event};
use crate::stream;
use crate::wire::{ChatRequest, Message};
pub use consult::OracleCall;
use consult::{Question, TOOL};
use ledger::Ledger;
use turn::{ToolCall, Turn};

/// `strategy = "oracle"`: its entry in [`crate::strategy::STRATEGIES`].
pub const STRATEGY: crate::graph::Strategy =
    crate::graph::Strategy::new("oracle", config::parse, config::build);

/// Longest question or answer kept in an `oracle_consult` event.
const EVENT_TEXT: usize = 4000;

#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub calls_per_request: u32,
    /// What a session (else the request) may spend on consults.
    pub session_cost_usd: f64,
    /// What a key may spend on this route's consults in a UTC day.
    pub key_daily_cost_usd: f64,
}

pub struct Oracle {
    pub name: Arc<str>,
    pub base: Member,
    pub oracle: OracleCall,
    pub caps: Caps,
    pub store: Arc<dyn OracleSpend>,
    pub clock: crate::clock::Clock,
}

/// What a base turn turned out to be.
enum Seen {
    /// An answer for the client: streamed live or whole.
    Final(Reply),
    /// A turn read whole because it began with a tool call.
    Calls(Reply, Turn),
}

fn clip(s: &str) -> String {
    s.chars().take(EVENT_TEXT).collect()
}

/// The base's request: the conversation so far, with the oracle tool
/// offered; or, once it may consult no more, still defined when it was used
/// (the history holds its calls, which some servers check), with
/// `tool_choice: "none"` unless the client has tools of its own.
fn with_tool(
    req: &ChatRequest,
    conversation: Vec<Message>,
    offer: bool,
    used: bool,
    client_tools: bool,
) -> Arc<ChatRequest> {
    let mut r = req.clone();
    r.messages = conversation;
    if offer || used {
        let tools = r.extra.entry("tools").or_insert_with(|| json!([]));
        if !tools.is_array() {
            *tools = json!([]);
        }
        if let Value::Array(list) = tools {
            list.push(consult::tool());
        }
        if !offer && !client_tools {
            r.extra.insert("tool_choice".into(), json!("none"));
        }
    }
    Arc::new(r)
}

/// A turn rendered for the client: its own tool calls only, whole or as a
/// stream, with the request's usage.
fn for_client(
    reply: Reply,
    turn: &Turn,
    mine: &[&ToolCall],
    stream: bool,
) -> Result<Reply, ModelError> {
    let mut v = turn.completion(mine);
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
    /// The base on every turn it may take (each reading the answers so
    /// far), and the oracle on every consult allowed.
    fn estimate(&self, size: CallSize) -> Spend {
        let n = u64::from(self.caps.calls_per_request);
        let answer = u64::from(self.oracle.max_tokens) + 200;
        let oracle = self.oracle.member.model.estimate(CallSize {
            output: u64::from(self.oracle.max_tokens),
            ..size
        });
        let base = self.base.model.estimate(CallSize {
            input: size.input.saturating_add(n.saturating_mul(answer)),
            ..size
        });
        base * (n + 2) + oracle * n
    }

    async fn chat(&self, call: Call, req: Arc<ChatRequest>) -> Result<Reply, ModelError> {
        if let Some(n) = req.extra.get("n").filter(|n| n.as_u64() != Some(1)) {
            return Err(ModelError::BadRequest {
                message: format!(
                    "An oracle route answers with one choice; `n` must be 1 (got {n})."
                ),
                param: Some("n"),
            });
        }
        let ctx = call.ctx.clone();
        let tools = req.extra.get("tools").and_then(Value::as_array);
        let client_tools = tools.is_some_and(|t| !t.is_empty());
        // A client tool of the same name wins: the oracle is not offered.
        let taken = tools.is_some_and(|t| {
            t.iter()
                .any(|t| t.pointer("/function/name").and_then(Value::as_str) == Some(TOOL))
        });
        let mut ledger = Ledger {
            calls: 0,
            closed: false,
            cost_usd: 0.0,
            session: ctx
                .options
                .session
                .as_ref()
                .map(|s| format!("{}/{s}", ctx.key)),
            session_spent: None,
        };
        let mut conversation = req.messages.clone();
        // Every allowed consult, then a turn that may not consult.
        let turns = self.caps.calls_per_request.saturating_add(2);
        for n in 0..turns {
            let offer = !taken
                && !ledger.closed
                && ledger.calls < self.caps.calls_per_request
                && n + 1 < turns;
            let used = !taken && n > 0;
            let asked = with_tool(&req, conversation.clone(), offer, used, client_tools);
            let (reply, mut turn) = match self.read_turn(&call, asked).await? {
                Seen::Final(reply) => {
                    reply.attempt.set_verdict(Verdict::Ok, None);
                    return stream::with_request_usage(reply, ctx);
                }
                Seen::Calls(reply, turn) => (reply, turn),
            };
            reply.attempt.set_verdict(Verdict::Ok, None);
            turn.name_calls(n);
            let (oracle_calls, mine): (Vec<&ToolCall>, Vec<&ToolCall>) =
                turn.calls.iter().partition(|c| c.name == TOOL && !taken);
            // An oracle call the base was not invited to make is still
            // answered (with a refusal) while turns remain.
            if !mine.is_empty() || oracle_calls.is_empty() || n + 1 == turns {
                // The client's own tool calls go back to it; an oracle call
                // beside them is dropped, not paid for.
                for dropped in &oracle_calls {
                    let mut f = Map::new();
                    let q = Question::read(&dropped.arguments).ok();
                    let question = q.map_or(Value::Null, |q| Value::from(clip(&q.question)));
                    f.insert("question".into(), question);
                    f.insert("dropped".into(), json!(true));
                    f.insert("calls_total".into(), json!(ledger.calls));
                    event(&ctx, "oracle_consult", f);
                }
                let reply = for_client(reply, &turn, &mine, req.is_stream())?;
                return stream::with_request_usage(reply, ctx);
            }
            let before = conversation.clone();
            conversation.push(Message::from_value(turn.message(&oracle_calls)));
            for (i, c) in oracle_calls.iter().enumerate() {
                let this_turn = u32::try_from(i + 1).unwrap_or(u32::MAX);
                let result = self
                    .consult(&call, c, &before, &mut ledger, this_turn)
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
