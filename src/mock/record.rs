//! The requests a simulator keeps for `GET /mock/requests`: each as it
//! came ([`Recorded`]: its model, the headers it read, its body), the
//! newest [`RECORDED`] within [`RECORDED_BYTES`] of JSON.

use std::collections::VecDeque;

use serde::Serialize;
use serde_json::{Value, json};

/// Requests kept for `GET /mock/requests`.
pub(super) const RECORDED: usize = 1000;
/// The JSON bytes (about) of the requests kept: the oldest go first, and a
/// body larger than this alone is kept as a note of its size.
pub(super) const RECORDED_BYTES: u64 = 64 << 20;

/// A request as the simulator received it.
#[derive(Debug, Clone, Serialize)]
pub struct Recorded {
    pub model: String,
    pub authorization: Option<String>,
    /// The `x-request-id` header the request carried.
    pub request_id: Option<String>,
    /// Anthropic's headers, when it plays Anthropic: `x-api-key`,
    /// `anthropic-version` and `anthropic-beta`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anthropic_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anthropic_beta: Option<String>,
    pub body: Value,
}

/// The headers of a request the simulator reads (and records).
#[derive(Debug, Clone, Default)]
pub struct Heard {
    pub authorization: Option<String>,
    pub request_id: Option<String>,
    pub api_key: Option<String>,
    pub anthropic_version: Option<String>,
    pub anthropic_beta: Option<String>,
}

/// The requests a simulator keeps, oldest first, within [`RECORDED`]
/// and [`RECORDED_BYTES`].
#[derive(Default)]
pub(super) struct Log {
    kept: VecDeque<(Recorded, u64)>,
    bytes: u64,
}

impl Log {
    fn push(&mut self, r: Recorded, size: u64) {
        while self.kept.len() >= RECORDED || self.bytes + size > RECORDED_BYTES {
            match self.kept.pop_front() {
                Some((_, n)) => self.bytes -= n,
                None => break,
            }
        }
        self.bytes += size;
        self.kept.push_back((r, size));
    }

    pub fn clear(&mut self) {
        self.kept.clear();
        self.bytes = 0;
    }

    /// Keeps a request for `model` with `heard`'s headers and `body`; a
    /// body over the whole bound is kept as a note of its size.
    pub fn record(&mut self, model: &str, heard: Heard, body: &Value) {
        let size = crate::wire::billing::json_len(body);
        let body = if size > RECORDED_BYTES {
            json!({"omitted_bytes": size})
        } else {
            body.clone()
        };
        self.push(
            Recorded {
                model: model.to_owned(),
                authorization: heard.authorization,
                request_id: heard.request_id,
                api_key: heard.api_key,
                anthropic_version: heard.anthropic_version,
                anthropic_beta: heard.anthropic_beta,
                body,
            },
            size.min(RECORDED_BYTES),
        );
    }

    /// The requests kept, oldest first.
    pub fn all(&self) -> Vec<Recorded> {
        self.kept.iter().map(|(r, _)| r.clone()).collect()
    }
}
