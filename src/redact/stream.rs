//! Redacting a stream as it is relayed, event by event, with a [`Carry`]
//! so a secret handed out in pieces (a few characters per event, as a
//! model streams tokens) is still found.
//!
//! Each event's own bytes are scanned whole. Then the answer text the
//! event adds (its first choice's `delta.content` and tool-call
//! `arguments`, or a completion's `text`: what `wire::inspect_chunk_text`
//! reads; a Responses event's `delta`: what `wire::responses` reads; a
//! Messages event's `delta.text`, `partial_json` or `thinking`: what
//! `wire::messages` reads) is read after the text before it (as much as
//! the longest form of a secret, at most [`MAX_TAIL`] bytes): a run of
//! secret that began in earlier events and goes on in this one is cut
//! from this event's text too. Nothing is held back, so what goes out
//! before the run counts (less than two-thirds of the secret) stays out;
//! what comes after it never does.

use bytes::Bytes;
use serde_json::Value;

use super::{REDACTED, Redactor};

/// Most text kept from earlier events (and read of this one's start).
pub const MAX_TAIL: usize = 1024;

/// What a stream's redaction remembers between events.
#[derive(Default)]
pub struct Carry {
    /// The end of the answer text so far, as the upstream sent it.
    tail: String,
    /// The tail and the start of the next event's text, read together.
    joined: String,
}

/// Takes the first `n` bytes of an event's answer text out (the first
/// piece touched starts with [`REDACTED`]).
fn cut_text(v: &mut Value, mut n: usize) {
    let mut first = true;
    let mut cut = |s: &mut Value| {
        let Value::String(s) = s else { return };
        if n == 0 || s.is_empty() {
            return;
        }
        let k = crate::text::ceil_char(s, n);
        let rest = s.split_off(k);
        n -= k.min(n);
        *s = if std::mem::take(&mut first) {
            format!("{REDACTED}{rest}")
        } else {
            rest
        };
    };
    if let Some(d) = v.get_mut("delta") {
        // A Responses event's text (`response.output_text.delta`, …).
        if d.is_string() {
            cut(d);
            return;
        }
        // A Messages event's (`content_block_delta`).
        for k in ["text", "partial_json", "thinking"] {
            if let Some(s) = d.get_mut(k).filter(|s| s.is_string()) {
                cut(s);
                return;
            }
        }
    }
    let Some(c) = v.pointer_mut("/choices/0") else {
        return;
    };
    if let Some(d) = c.get_mut("delta") {
        if let Some(s) = d.get_mut("content") {
            cut(s);
        }
        if let Some(calls) = d.get_mut("tool_calls").and_then(Value::as_array_mut) {
            for t in calls {
                if let Some(a) = t.get_mut("function").and_then(|f| f.get_mut("arguments")) {
                    cut(a);
                }
            }
        }
    }
    if let Some(t) = c.get_mut("text") {
        cut(t);
    }
}

impl Redactor {
    /// One stream event's payload without secrets, read after the events
    /// before it (`carry`); `text` is the answer text it adds.
    pub fn event(&self, carry: &mut Carry, data: Bytes, text: Option<&str>) -> Bytes {
        let Some(m) = &self.matcher else {
            return data;
        };
        let Some(text) = text.filter(|t| !t.is_empty()) else {
            return self.redact_bytes(data);
        };
        let tail = m.longest().min(MAX_TAIL);
        // How much of this event's text continues a run from before.
        let mut cut = 0;
        if !carry.tail.is_empty() {
            let joined = &mut carry.joined;
            joined.clear();
            joined.push_str(&carry.tail);
            joined.push_str(&text[..floor_char(text, tail)]);
            let from = carry.tail.len();
            let runs = m.runs(joined.as_bytes());
            if let Some(r) = runs.iter().find(|r| r.start < from && r.end > from) {
                cut = r.end - from;
            }
        }
        if text.len() >= tail {
            carry.tail.clear();
            carry
                .tail
                .push_str(&text[text.len() - suffix_len(text, tail)..]);
        } else {
            carry.tail.push_str(text);
            let old = carry.tail.len() - suffix_len(&carry.tail, tail);
            carry.tail.drain(..old);
        }
        if cut == 0 {
            return self.redact_bytes(data);
        }
        let mut v: Value = match serde_json::from_slice(&data) {
            Ok(v) => v,
            Err(_) => return self.redact_bytes(data),
        };
        cut_text(&mut v, cut);
        match serde_json::to_vec(&v) {
            Ok(out) => self.redact_bytes(Bytes::from(out)),
            Err(_) => self.redact_bytes(data),
        }
    }
}

/// The largest char boundary of `s` at or below `n`.
fn floor_char(s: &str, n: usize) -> usize {
    let n = n.min(s.len());
    (0..=n).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0)
}

/// The length of the longest suffix of `s` of at most `n` bytes.
fn suffix_len(s: &str, n: usize) -> usize {
    let from = s.len().saturating_sub(n);
    (from..=s.len())
        .find(|i| s.is_char_boundary(*i))
        .map_or(0, |i| s.len() - i)
}
