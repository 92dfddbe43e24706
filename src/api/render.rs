//! How one API dialect writes answers. Every dialect's answers start as
//! conclave's internal chat form (a chat completion body, or a stream of
//! chat chunks); a [`Render`] turns them into what its client speaks:
//! chat completions as they are, the Responses API's `response` object
//! and event stream, and so on. The request life cycle (`ingress`), the
//! answer (`respond`) and the stream relay (`relay`) know nothing else of
//! a dialect.

use bytes::{Bytes, BytesMut};
use serde_json::Value;

use super::error::ApiError;
use super::sse::KEEPALIVE;
use crate::model::Chunk;
use crate::sink::Totals;
use crate::wire::content_text;

/// Writes one request's answer in its dialect. One value serves one
/// request: it may keep state across the chunks of a stream.
pub trait Render: Send + 'static {
    /// The body of a whole answer, from the completion in chat form.
    /// `totals` is the request's usage so far (for a body without one).
    fn whole(&mut self, completion: &Bytes, totals: Totals) -> Result<Bytes, ApiError>;

    /// What opens a stream, written once before anything else (also when
    /// keep-alives commit the stream before the answer exists). The
    /// Responses and Messages dialects write nothing here: their opening
    /// event names the answering model, so it goes out with the first
    /// chunk ([`model_of`]) (a Messages stream's, with its first `ping`
    /// when keep-alives come first).
    fn open(&mut self, _out: &mut BytesMut) {}

    /// What keeps a committed stream alive while the model works (an
    /// SSE comment unless the dialect has its own).
    fn keepalive(&mut self, out: &mut BytesMut) {
        out.extend_from_slice(KEEPALIVE);
    }

    /// Frames one chunk of a streamed answer. An error (a chunk the
    /// dialect cannot write) ends the stream with [`Render::fail`]; what
    /// the chunk wrote before it is kept.
    fn chunk(&mut self, chunk: Chunk, out: &mut BytesMut) -> Result<(), ApiError>;

    /// What follows the last chunk. `totals` is the request's usage so
    /// far, for a stream that reported none.
    fn end(&mut self, totals: Totals, out: &mut BytesMut);

    /// Ends a stream with an error, after whatever was written.
    fn fail(&mut self, error: &ApiError, out: &mut BytesMut);
}

/// The `model` a chat chunk names, if any: what a stream's opening event
/// says, so that its `model` is the answer's from the first event to the
/// last (docs/http.md, "The model an answer names").
pub fn model_of(data: &[u8]) -> Option<String> {
    serde_json::from_slice::<Value>(data)
        .ok()?
        .get("model")?
        .as_str()
        .filter(|m| !m.is_empty())
        .map(str::to_owned)
}

/// Most choices past the first an answer is read for.
pub const MAX_OTHER_CHOICES: u64 = 8;

/// The text and `finish_reason` of each choice past the first (an arena's
/// second answer) of a whole chat completion's `choices`, in order: each
/// dialect writes them after the first choice's output.
pub fn other_choices(choices: &[Value]) -> Vec<(String, Option<&str>)> {
    let mut others: Vec<(u64, String, Option<&str>)> = choices
        .iter()
        .filter_map(|c| {
            let i = c.get("index").and_then(Value::as_u64)?;
            let finish = c.get("finish_reason").and_then(Value::as_str);
            (1..=MAX_OTHER_CHOICES)
                .contains(&i)
                .then(|| (i, content_text(c.pointer("/message/content")), finish))
        })
        .collect();
    others.sort_by_key(|o| o.0);
    others.into_iter().map(|o| (o.1, o.2)).collect()
}
