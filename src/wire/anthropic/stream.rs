//! Messages event stream → chat completion chunks.

use serde_json::Value;

use super::Translation;
use crate::wire::NotAnAnswer;

/// Why a Messages stream cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum StreamFault {
    /// An `error` event: Anthropic's error type (e.g. `overloaded_error`)
    /// and its message.
    #[error("the upstream failed mid-stream ({kind}): {message}")]
    Upstream { kind: String, message: String },
    /// An event's data is not what Messages sends.
    #[error("a stream event is not an answer: {0}")]
    Garbage(#[from] NotAnAnswer),
    /// Events out of order or beyond bounds.
    #[error("the stream is malformed: {0}")]
    Malformed(&'static str),
}

/// Turns a Messages event stream into chat completion chunks, one event
/// at a time.
#[derive(Debug)]
pub struct ChunkMaker {
    t: Translation,
    created: u64,
    ended: bool,
}

impl ChunkMaker {
    pub fn new(t: &Translation, created: u64) -> Self {
        ChunkMaker {
            t: t.clone(),
            created,
            ended: false,
        }
    }

    /// Feeds one event (its SSE `event:` name, possibly empty, and its
    /// `data:`), returning the chunks it makes (often none).
    pub fn event(&mut self, event: &str, data: &[u8]) -> Result<Vec<Value>, StreamFault> {
        let _ = (event, data, &self.t, self.created);
        Ok(Vec::new())
    }

    /// `message_stop` was seen: the stream is whole (the transport writes
    /// `data: [DONE]`). A stream that ends before this was cut.
    pub fn ended(&self) -> bool {
        self.ended
    }
}
