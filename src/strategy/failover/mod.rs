//! Mid-stream failover: a streamed answer that breaks after text reached
//! the client (a cut, a stall past `stream_idle_timeout`, an error event)
//! is continued by the next member, and the client sees one stream.
//!
//! [`continue_on_failure`] wraps a committed reply. Its chunks pass through
//! untouched while it tracks, for choice 0, the text sent so far and
//! whether a tool call, a refusal or another choice went out. On an error
//! after some text and nothing else, it asks the next serving member
//! (in order, each at most once) to continue: the conversation plus an
//! assistant message holding the partial text, as a prefill where the
//! member continues one natively ([`ChatModel::continues_prefill`]:
//! Anthropic and mock upstreams), else followed by a user message with
//! [`CONTINUE_INSTRUCTION`]. The continuation is spliced at the seam (what
//! the model repeats, or its start over of the answer, is trimmed: see
//! [`seam`]; its first words are held back until that is known) and
//! rewritten as
//! the first stream's chunks (its `id`, `model`, `created`; no second role
//! delta; choice 0); its usage chunk counts every attempt. Each
//! continuation takes from the route's retry budget (reason `midstream`)
//! and is an attempt of its own; a `midstream_failover` event says who
//! continued whom and how the seam was found, and so does the
//! [`FAILOVER_HEADER`] the stream ends with (an SSE comment: its headers
//! went out before; a whole answer made of such a stream carries it as a
//! header).
//!
//! A chain uses it with `midstream_failover = true` (its later tiers); any
//! strategy that streams one member's answer live can (a balance: its
//! other members), by wrapping the reply it returns.
//!
//! Never spliced: a stream whose tool call (or refusal, or second choice)
//! had begun ends with a `midstream_failover_unavailable` error event. An
//! error before anything went out is not handled here (the strategy's own
//! retry is), nor one after the answer's `finish_reason`.

pub mod seam;

use std::sync::Arc;

use futures::StreamExt;
use serde_json::{Map, Value, json};

use crate::attempt::Attempt;
use crate::error::ModelError;
use crate::labels::Verdict;
use crate::model::{Availability, Call, ChatModel, Chunk, ChunkStream, Reply, ReplyBody};
use crate::retry::RetryReason;
use crate::stream::{chunk_of, whole_to_stream};
use crate::wire::{ChatRequest, MAX_RESPONSE, Message, Usage};
use seam::Seam;

/// The user message that asks a member without prefill support to carry
/// on from the partial answer before it.
pub const CONTINUE_INSTRUCTION: &str = "Your previous message was cut off. Continue it \
exactly where it stopped, even in the middle of a word: do not repeat any of it, and add \
no preamble.";

/// The response header (on a stream: the SSE comment before its end)
/// that lists how each continuation was joined, in order: `tail`,
/// `restart`, `overlap`, `none`, or `unknown` when it broke before that
/// was known.
pub const FAILOVER_HEADER: &str = "x-conclave-midstream-failover";

/// A member that may continue a broken stream.
#[derive(Clone)]
pub struct Member {
    pub name: Arc<str>,
    pub model: Arc<dyn ChatModel>,
}

/// Where a broken stream may go on.
pub struct Failover {
    /// The route (for the event).
    pub route: Arc<str>,
    /// How the members are called (role, deadlines).
    pub call: Call,
    /// The request the broken stream answered.
    pub req: Arc<ChatRequest>,
    /// The member whose stream it is.
    pub from: Arc<str>,
    /// The members that may continue it, in order.
    pub rest: Vec<Member>,
}

/// `reply`, whose stream (if it is one) is continued by `f.rest` should
/// it break after text went out.
pub fn continue_on_failure(reply: Reply, f: Failover) -> Reply {
    let Reply {
        body,
        meta,
        attempt,
    } = reply;
    let body = match body {
        ReplyBody::Stream(s) => ReplyBody::Stream(spliced(s, attempt.clone(), f)),
        whole => whole,
    };
    Reply {
        body,
        meta,
        attempt,
    }
}

/// The request a continuation is asked: the conversation, the partial
/// answer as an assistant message, and (without prefill) an instruction.
pub fn continuation(req: &ChatRequest, partial: &str, prefill: bool) -> ChatRequest {
    let mut out = req.clone();
    // A prefill may not end with whitespace (Anthropic refuses it); the
    // seam drops whitespace the continuation repeats.
    out.messages
        .push(Message::new("assistant", partial.trim_end()));
    if !prefill {
        out.messages
            .push(Message::new("user", CONTINUE_INSTRUCTION));
    }
    out
}

/// What went to the client so far.
#[derive(Default)]
struct Sent {
    /// The first stream's `id`, `model`, `created`, `object`,
    /// `system_fingerprint`: every continuation chunk carries them.
    head: Map<String, Value>,
    /// Choice 0's content.
    text: String,
    /// Why the stream may not be continued, once it may not.
    unsplicable: Option<&'static str>,
    /// A `finish_reason` went out: the answer is complete.
    finished: bool,
}

impl Sent {
    /// Reads a chunk of the first stream (passed on untouched).
    fn observe(&mut self, c: &Chunk) {
        if c.loading {
            return;
        }
        let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(&c.data) else {
            return;
        };
        if self.head.is_empty() {
            for key in ["id", "object", "created", "model", "system_fingerprint"] {
                if let Some(v) = obj.get(key) {
                    self.head.insert(key.into(), v.clone());
                }
            }
        }
        for choice in choices(&obj) {
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                self.unsplicable = Some("a second choice");
            }
            self.read_choice(choice);
        }
    }

    fn read_choice(&mut self, choice: &Value) {
        if choice.get("finish_reason").is_some_and(|f| !f.is_null()) {
            self.finished = true;
        }
        let Some(delta) = choice.get("delta") else {
            return;
        };
        if present(delta, "tool_calls") || present(delta, "function_call") {
            self.unsplicable = Some("a tool call");
        } else if present(delta, "refusal") {
            self.unsplicable = Some("a refusal");
        }
        if let Some(t) = delta.get("content").and_then(Value::as_str) {
            self.add_text(t);
        }
    }

    fn add_text(&mut self, t: &str) {
        if self.text.len() + t.len() > MAX_RESPONSE {
            self.unsplicable = Some("an answer too long to continue");
            return;
        }
        self.text.push_str(t);
    }

    /// Why an error now ends the stream rather than failing over; `None`
    /// when it may fail over.
    fn refusal(&self) -> Option<Option<&'static str>> {
        if self.finished {
            return Some(None);
        }
        if let Some(what) = self.unsplicable {
            return Some(Some(what));
        }
        self.text.is_empty().then_some(None)
    }

    /// A continuation chunk as a chunk of the first stream, its text
    /// trimmed at the seam; `None` when nothing of it is left.
    fn splice(
        &mut self,
        c: &Chunk,
        seam: &mut Seam,
        prior: Usage,
    ) -> Result<Option<Chunk>, ModelError> {
        let Ok(Value::Object(mut obj)) = serde_json::from_slice::<Value>(&c.data) else {
            return Ok(Some(c.clone()));
        };
        for (k, v) in &self.head {
            obj.insert(k.clone(), v.clone());
        }
        let mut keep = false;
        if let Some(Value::Array(cs)) = obj.get_mut("choices") {
            for choice in cs.iter_mut().filter_map(Value::as_object_mut) {
                choice.insert("index".into(), json!(0));
                keep |= self.splice_choice(choice, seam);
            }
        }
        if let Some(Value::Object(u)) = obj.get_mut("usage") {
            add_usage(u, prior);
            keep = true;
        }
        if !keep {
            return Ok(None);
        }
        chunk_of(&Value::Object(obj)).map(Some)
    }

    /// Edits one continuation choice; whether it still says anything.
    fn splice_choice(&mut self, choice: &mut Map<String, Value>, seam: &mut Seam) -> bool {
        let finish = choice.get("finish_reason").is_some_and(|f| !f.is_null());
        let Some(Value::Object(delta)) = choice.get_mut("delta") else {
            return finish;
        };
        delta.remove("role");
        let tool = present_map(delta, "tool_calls") || present_map(delta, "function_call");
        let other = tool || present_map(delta, "refusal");
        let mut text = match delta.get("content").and_then(Value::as_str) {
            Some(t) => seam.push(t),
            None => String::new(),
        };
        if other || finish {
            text.push_str(&seam.flush());
        }
        if tool {
            self.unsplicable = Some("a tool call");
        }
        if finish {
            self.finished = true;
        }
        self.add_text(&text);
        let said = !text.is_empty();
        if said || delta.contains_key("content") {
            delta.insert("content".into(), json!(text));
        }
        said || other || finish || delta.keys().any(|k| k != "content")
    }

    /// A chunk of content made by conclave (held text at a stream's end).
    fn text_chunk(&self, text: &str) -> Result<Chunk, ModelError> {
        let mut obj = self.head.clone();
        obj.insert(
            "choices".into(),
            json!([{"index": 0, "delta": {"content": text}, "finish_reason": null}]),
        );
        chunk_of(&Value::Object(obj))
    }
}

fn choices(obj: &Map<String, Value>) -> impl Iterator<Item = &Value> {
    obj.get("choices")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn present(delta: &Value, key: &str) -> bool {
    delta.as_object().is_some_and(|d| present_map(d, key))
}

fn present_map(delta: &Map<String, Value>, key: &str) -> bool {
    match delta.get(key) {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(_) => true,
    }
}

/// Adds the earlier attempts' usage to a continuation's.
fn add_usage(u: &mut Map<String, Value>, prior: Usage) {
    let get = |u: &Map<String, Value>, k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let prompt = get(u, "prompt_tokens").saturating_add(prior.prompt_tokens);
    let completion = get(u, "completion_tokens").saturating_add(prior.completion_tokens);
    u.insert("prompt_tokens".into(), json!(prompt));
    u.insert("completion_tokens".into(), json!(completion));
    u.insert(
        "total_tokens".into(),
        json!(prompt.saturating_add(completion)),
    );
}

/// An attempt's usage, or an estimate of it.
fn usage_of(attempt: &Attempt, req: &ChatRequest, text_bytes: usize) -> Usage {
    attempt
        .usage()
        .unwrap_or_else(|| Usage::estimate(req.billable().input, text_bytes))
}

/// The error that ends a stream whose tool call (or the like) was cut.
fn unavailable(from: &Arc<str>, what: &str) -> ModelError {
    ModelError::FailoverUnavailable {
        upstream: from.clone(),
        detail: format!("the stream broke inside {what}, which cannot be continued"),
    }
}

/// A continuation under way: its seam and, until written, its event.
struct Leg {
    seam: Seam,
    /// The event, until the seam is decided.
    event: Option<Map<String, Value>>,
}

fn spliced(first: ChunkStream, attempt: Attempt, f: Failover) -> ChunkStream {
    ChunkStream::new(async_stream::stream! {
        let mut sent = Sent::default();
        let mut stream = first;
        let mut from = f.from.clone();
        let mut attempt = attempt;
        let mut prior = Usage::default();
        let mut tried = 0;
        let mut leg: Option<Leg> = None;
        loop {
            let Some(item) = stream.next().await else {
                if let Some(l) = leg.as_mut() {
                    let held = l.seam.flush();
                    emit(&f, l);
                    if !held.is_empty() {
                        sent.add_text(&held);
                        yield sent.text_chunk(&held);
                    }
                }
                return;
            };
            let err = match item {
                Ok(c) => {
                    match leg.as_mut() {
                        None => {
                            sent.observe(&c);
                            yield Ok(c);
                        }
                        // A loading banner is not part of the answer.
                        Some(_) if c.loading => {}
                        Some(l) => {
                            let out = sent.splice(&c, &mut l.seam, prior);
                            if l.seam.trimmed().is_some() {
                                emit(&f, l);
                            }
                            match out {
                                Ok(Some(c)) => yield Ok(c),
                                Ok(None) => {}
                                Err(e) => { yield Err(e); return; }
                            }
                        }
                    }
                    continue;
                }
                Err(e) => e,
            };
            if let Some(l) = leg.as_mut() {
                emit(&f, l);
            }
            match sent.refusal() {
                Some(None) => { yield Err(err); return; }
                Some(Some(what)) => { yield Err(unavailable(&from, what)); return; }
                None => {}
            }
            prior = add(prior, usage_of(&attempt, &f.req, sent.text.len()));
            let mut last = err;
            let mut next = None;
            while let Some(m) = f.rest.get(tried) {
                tried += 1;
                if m.model.availability() != Availability::Serving {
                    continue;
                }
                if !f.call.ctx.retry(RetryReason::Midstream) {
                    break;
                }
                let req = continuation(&f.req, &sent.text, m.model.continues_prefill());
                let call = f.call.clone().with_retry_elsewhere(tried < f.rest.len());
                match m.model.chat(call, Arc::new(req)).await {
                    Ok(reply) => { next = Some((m, reply)); break; }
                    Err(e) => {
                        tracing::debug!(request_id = %f.call.ctx.id, model = %m.name, error = %e, "a continuation failed");
                        last = e;
                    }
                }
            }
            let Some((m, reply)) = next else {
                yield Err(last);
                return;
            };
            let chars_before = sent.text.chars().count();
            reply.attempt.set_verdict(
                Verdict::Accept,
                Some(format!("continues the stream of {from}, cut after {chars_before} characters")),
            );
            let mut event = Map::new();
            event.insert("failover_route".into(), json!(f.route.as_ref()));
            event.insert("from".into(), json!(from.as_ref()));
            event.insert("to".into(), json!(m.name.as_ref()));
            event.insert("chars_before".into(), json!(chars_before));
            stream = match reply.body {
                ReplyBody::Stream(s) => s,
                ReplyBody::Whole(c) => match whole_to_stream(&c) {
                    Ok(s) => s,
                    Err(e) => { yield Err(e); return; }
                },
            };
            attempt = reply.attempt;
            from = m.name.clone();
            leg = Some(Leg { seam: Seam::new(sent.text.clone()), event: Some(event) });
        }
    })
}

/// Writes a leg's `midstream_failover` event once (with the text trimmed
/// and how the seam was found, or nulls when the continuation broke
/// before it was known).
fn emit(f: &Failover, l: &mut Leg) {
    let Some(mut event) = l.event.take() else {
        return;
    };
    let join = l.seam.join().map(seam::Join::as_str);
    event.insert("overlap_trimmed".into(), json!(l.seam.trimmed()));
    event.insert("seam".into(), json!(join));
    f.call
        .ctx
        .add_late_header(FAILOVER_HEADER, join.unwrap_or("unknown"));
    crate::strategy::event(&f.call.ctx, "midstream_failover", event);
}

fn add(a: Usage, b: Usage) -> Usage {
    Usage {
        prompt_tokens: a.prompt_tokens.saturating_add(b.prompt_tokens),
        completion_tokens: a.completion_tokens.saturating_add(b.completion_tokens),
        estimated: a.estimated || b.estimated,
        ..Usage::default()
    }
}
