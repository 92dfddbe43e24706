//! The bounds of one request's record in the ring: at most
//! [`MAX_ATTEMPTS`] attempt lines and [`MAX_EVENTS`] other lines, no
//! string longer than [`FIELD_CHARS`] characters, no top-level field
//! larger than [`FIELD_BYTES`] once serialized, and all of them together
//! within [`RECORD_BYTES`] once serialized. What does not fit is dropped
//! and counted.
//!
//! Everything is bounded as it is written, so a record never holds more
//! (in memory, a small multiple of its serialized bytes); what is cheap
//! stays cheap. An attempt line is kept as built (its texts cut only when
//! one is over [`FIELD_CHARS`], which is rare) and its serialized size
//! is bounded from above without serializing it ([`ATTEMPT_FIXED`] plus
//! its texts, escaped). Other lines (a strategy's `judge_ranking`,
//! `vote_finished`, …, which may carry model text) are cut field by field
//! and measured exactly: only strategy routes emit them.

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Map, Value, json};

use crate::telemetry::attempt::AttemptEvent;
use crate::telemetry::request::RequestLine;
use crate::telemetry::{Event, EventBody};
use crate::wire;

/// Attempt lines one record keeps.
pub const MAX_ATTEMPTS: usize = 64;
/// Other event lines (`judge_ranking`, `vote_finished`, …) one record keeps.
pub const MAX_EVENTS: usize = 64;
/// Characters a string keeps; a longer one is cut and ends with `…`.
pub const FIELD_CHARS: usize = 1024;
/// Serialized bytes a line's top-level field may take; a larger one is
/// replaced by a note of its size.
pub const FIELD_BYTES: usize = 8 * 1024;
/// Serialized bytes of a record's attempt and event lines together.
pub const RECORD_BYTES: usize = 64 * 1024;
/// How deep a line's values are followed; deeper ones become `null`.
const MAX_DEPTH: usize = 8;
/// The most an attempt line takes serialized besides its texts (names,
/// punctuation, timestamp, numbers at their longest): checked by a test.
const ATTEMPT_FIXED: usize = 768;

/// An attempt line as a record keeps it.
pub enum AttemptLine {
    /// Shared with the event log.
    Shared(Arc<Event>),
    /// Its own fields and its time (its request's id and route are the
    /// record's).
    Own(Box<AttemptEvent>, SystemTime),
}

/// One line a record keeps.
enum Line {
    /// An attempt, as built.
    Attempt(AttemptLine),
    /// Another event, bounded.
    Event(Value),
}

/// What the ring keeps of one request's lines, within the bounds.
#[derive(Default)]
pub struct Gathered {
    /// In the order they came.
    lines: Vec<Line>,
    attempts: usize,
    events: usize,
    pub attempts_dropped: u64,
    pub events_dropped: u64,
    /// Strings cut and fields left out, over every line kept.
    pub fields_cut: u64,
    /// What the lines kept take serialized, at most.
    bytes: usize,
    /// The attempts' prices so far (every attempt, kept or dropped);
    /// `None` until one has a price.
    pub cost_usd: Option<f64>,
    /// The `request` line's own fields and time, once the request is
    /// over.
    pub request: Option<(RequestLine, SystemTime)>,
}

impl Gathered {
    /// Keeps attempt line `line` (its texts cut already: [`cut`]), if it
    /// fits; whether it did. `head`: the bytes its request's id and route
    /// take in it ([`head_len`]).
    pub fn attempt(&mut self, line: AttemptLine, head: usize) -> bool {
        let body = match &line {
            AttemptLine::Shared(e) => match e.body() {
                EventBody::Attempt(a) => Some(&**a),
                _ => None,
            },
            AttemptLine::Own(a, _) => Some(&**a),
        };
        if let Some(usd) = body.and_then(AttemptEvent::cost_usd) {
            *self.cost_usd.get_or_insert(0.0) += usd;
        }
        let size = match body {
            Some(a) => estimate(a, head),
            None => exact(&line),
        };
        if self.attempts >= MAX_ATTEMPTS || self.bytes + size > RECORD_BYTES {
            self.attempts_dropped += 1;
            return false;
        }
        self.bytes += size;
        self.attempts += 1;
        self.keep(Line::Attempt(line));
        true
    }

    /// Adds `line` to the lines kept. The first takes room for itself
    /// alone: most requests make one line, and a record stays in memory
    /// for the next `recent_requests` requests (a `Vec`'s first push
    /// would take room for four).
    fn keep(&mut self, line: Line) {
        if self.lines.capacity() == 0 {
            self.lines.reserve_exact(1);
        }
        self.lines.push(line);
    }

    /// Keeps event line `line`, if it fits.
    pub fn event(&mut self, line: Map<String, Value>) {
        if self.events >= MAX_EVENTS {
            self.events_dropped += 1;
            return;
        }
        match self.fit(line) {
            Some(v) => {
                self.events += 1;
                self.keep(Line::Event(v));
            }
            None => self.events_dropped += 1,
        }
    }

    /// The attempt lines kept, as the log writes them (of request `id` on
    /// `route`), in the order they were made (they finish in any order).
    pub fn attempts(&self, id: &str, route: &Arc<str>) -> Vec<Value> {
        let mut out: Vec<Value> = self
            .lines
            .iter()
            .filter_map(|l| match l {
                Line::Attempt(a) => serde_json::to_value(a.event(id, route)).ok(),
                Line::Event(_) => None,
            })
            .collect();
        out.sort_by_key(|a| a.get("attempt").and_then(Value::as_u64));
        out
    }

    /// The other lines kept, in the order they came.
    pub fn events(&self) -> Vec<Value> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Event(v) => Some(v.clone()),
                Line::Attempt(_) => None,
            })
            .collect()
    }

    /// Reads what its lines hold at depth `level` (for `super::cold`): 0,
    /// the lines; 1, each attempt's fields; 2, each attempt's texts.
    pub(super) fn touch(&self, level: u8) {
        use std::hint::black_box;
        for line in &self.lines {
            let attempt = match line {
                Line::Attempt(AttemptLine::Own(a, _)) => Some(&**a),
                Line::Attempt(AttemptLine::Shared(e)) if level > 0 => match e.body() {
                    EventBody::Attempt(a) => Some(&**a),
                    _ => None,
                },
                _ => None,
            };
            match (level, attempt) {
                (0, _) => {
                    black_box(std::mem::discriminant(line));
                }
                (1, Some(a)) => {
                    black_box(a.texts().map(str::len));
                }
                (_, Some(a)) => {
                    for t in a.texts() {
                        black_box(t.as_bytes().first());
                    }
                }
                (_, None) => {}
            }
        }
    }

    /// `line` bounded, when it fits in what the record has left.
    fn fit(&mut self, line: Map<String, Value>) -> Option<Value> {
        let mut cut = 0;
        let line = Value::Object(
            line.into_iter()
                .map(|(k, v)| {
                    let v = field(v, &mut cut);
                    (k, v)
                })
                .collect::<Map<String, Value>>(),
        );
        let size = size_of(&line);
        if self.bytes + size > RECORD_BYTES {
            return None;
        }
        self.bytes += size;
        self.fields_cut += cut;
        Some(line)
    }
}

impl AttemptLine {
    /// The line as the log has it.
    fn event(&self, id: &str, route: &Arc<str>) -> std::borrow::Cow<'_, Event> {
        use std::borrow::Cow;
        match self {
            AttemptLine::Shared(e) => Cow::Borrowed(&**e),
            AttemptLine::Own(a, at) => Cow::Owned(Event::of(
                id.into(),
                route.clone(),
                "attempt",
                EventBody::Attempt(a.clone()),
                *at,
            )),
        }
    }
}

/// Whether attempt line `a` has a text over [`FIELD_CHARS`]: then the
/// ring keeps a [`cut`] copy of it.
pub fn too_long(a: &AttemptEvent) -> bool {
    // A string of at most FIELD_CHARS bytes has at most as many chars.
    a.texts()
        .iter()
        .any(|t| t.len() > FIELD_CHARS && t.chars().nth(FIELD_CHARS).is_some())
}

/// Cuts attempt line `a`'s texts to [`FIELD_CHARS`]; how many it cut.
pub fn cut(a: &mut AttemptEvent) -> u64 {
    let mut n = 0;
    for t in a.texts_mut().into_iter().flatten() {
        if cut_string(t) {
            n += 1;
        }
    }
    n
}

/// The bytes request `id`'s id and `route` take in one of its lines.
pub fn head_len(id: &str, route: &str) -> usize {
    json_len(id) + json_len(route)
}

/// Cuts `s` to [`FIELD_CHARS`] characters and a `…`; whether it was longer.
fn cut_string(s: &mut String) -> bool {
    crate::text::ellipsize_in_place(s, FIELD_CHARS)
}

/// At least the bytes attempt line `a` takes serialized, its request's
/// id and route taking `head`.
fn estimate(a: &AttemptEvent, head: usize) -> usize {
    ATTEMPT_FIXED + head + a.texts().iter().map(|t| json_len(t)).sum::<usize>()
}

/// The bytes a line that is not an attempt's takes serialized (tests).
fn exact(line: &AttemptLine) -> usize {
    match line {
        AttemptLine::Shared(e) => serde_json::to_vec(&**e).map_or(usize::MAX, |b| b.len()),
        AttemptLine::Own(..) => usize::MAX,
    }
}

/// The bytes `s` takes as a JSON string (quotes and escapes).
fn json_len(s: &str) -> usize {
    if !needs_escape(s.as_bytes()) {
        return s.len() + 2;
    }
    let escapes: usize = s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 1,
            0..0x20 => 5,
            _ => 0,
        })
        .sum();
    s.len() + 2 + escapes
}

/// Whether `b` has a byte JSON escapes (a control character, `"` or
/// `\\`), read a word at a time ([`wire::escape_marks`], the JSON
/// scanner's own test), its last eight bytes as one word more
/// (overlapping the last whole one, rather than copied out and padded);
/// under eight bytes, a byte at a time. The texts measured here are short
/// (an id, a route, a model's name, a summary), where a vectorized loop
/// spends more setting up than it saves.
fn needs_escape(b: &[u8]) -> bool {
    let word_needs = |w: &[u8; 8]| wire::escape_marks(u64::from_le_bytes(*w)) != 0;
    let Some(last) = b.last_chunk::<8>() else {
        return !b.iter().copied().all(wire::is_plain);
    };
    let (words, _) = b.as_chunks::<8>();
    words.iter().any(word_needs) || word_needs(last)
}

/// One top-level field, bounded: its strings cut, and replaced by a note
/// when it is still over [`FIELD_BYTES`].
fn field(v: Value, cut: &mut u64) -> Value {
    let v = strings(v, 0, cut);
    let size = size_of(&v);
    if size > FIELD_BYTES {
        *cut += 1;
        return json!({"left_out_bytes": size});
    }
    v
}

/// `v` with every string cut to [`FIELD_CHARS`] and nothing deeper than
/// [`MAX_DEPTH`].
fn strings(v: Value, depth: usize, cut: &mut u64) -> Value {
    if depth >= MAX_DEPTH {
        *cut += 1;
        return Value::Null;
    }
    match v {
        Value::String(mut s) => {
            if cut_string(&mut s) {
                *cut += 1;
            }
            Value::String(s)
        }
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|i| strings(i, depth + 1, cut))
                .collect(),
        ),
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, strings(v, depth + 1, cut)))
                .collect(),
        ),
        other => other,
    }
}

/// The bytes `v` takes serialized.
fn size_of(v: &Value) -> usize {
    serde_json::to_vec(v).map(|b| b.len()).unwrap_or(usize::MAX)
}

#[cfg(test)]
#[path = "bound_tests.rs"]
mod tests;
