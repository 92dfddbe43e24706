//! The bounds of one request's record in the ring: at most
//! [`MAX_ATTEMPTS`] attempt lines and [`MAX_EVENTS`] other lines, no
//! string longer than [`FIELD_CHARS`] characters, no top-level field
//! larger than [`FIELD_BYTES`] once serialized, and all of them together
//! within [`RECORD_BYTES`]. What does not fit is dropped and counted.

use serde_json::{Map, Value, json};

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

/// What the ring keeps of one request's lines, within the bounds.
#[derive(Debug, Default)]
pub struct Gathered {
    pub attempts: Vec<Value>,
    pub events: Vec<Value>,
    pub attempts_dropped: u64,
    pub events_dropped: u64,
    /// Strings cut and fields left out, over every line kept.
    pub fields_cut: u64,
    bytes: usize,
}

impl Gathered {
    /// Keeps attempt line `line`, if it fits.
    pub fn attempt(&mut self, line: Value) {
        if self.attempts.len() >= MAX_ATTEMPTS {
            self.attempts_dropped += 1;
            return;
        }
        match self.fit(line) {
            Some(v) => self.attempts.push(v),
            None => self.attempts_dropped += 1,
        }
    }

    /// Keeps event line `line`, if it fits.
    pub fn event(&mut self, line: Value) {
        if self.events.len() >= MAX_EVENTS {
            self.events_dropped += 1;
            return;
        }
        match self.fit(line) {
            Some(v) => self.events.push(v),
            None => self.events_dropped += 1,
        }
    }

    /// `line` bounded, when it fits in what the record has left.
    fn fit(&mut self, line: Value) -> Option<Value> {
        let mut cut = 0;
        let line = match line {
            Value::Object(fields) => Value::Object(
                fields
                    .into_iter()
                    .map(|(k, v)| {
                        let v = field(v, &mut cut);
                        (k, v)
                    })
                    .collect::<Map<String, Value>>(),
            ),
            other => field(other, &mut cut),
        };
        let size = size_of(&line);
        if self.bytes + size > RECORD_BYTES {
            return None;
        }
        self.bytes += size;
        self.fields_cut += cut;
        Some(line)
    }
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
        Value::String(s) => match s.char_indices().nth(FIELD_CHARS) {
            Some((at, _)) => {
                *cut += 1;
                let mut s = s;
                s.truncate(at);
                s.push('…');
                Value::String(s)
            }
            None => Value::String(s),
        },
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
mod tests {
    use super::*;

    #[test]
    fn lines_past_the_counts_are_dropped_and_counted() {
        let mut g = Gathered::default();
        for i in 0..MAX_ATTEMPTS + 3 {
            g.attempt(json!({"attempt": i}));
        }
        for i in 0..MAX_EVENTS + 2 {
            g.event(json!({"event": "x", "n": i}));
        }
        assert_eq!((g.attempts.len(), g.attempts_dropped), (MAX_ATTEMPTS, 3));
        assert_eq!((g.events.len(), g.events_dropped), (MAX_EVENTS, 2));
        assert_eq!(g.attempts[MAX_ATTEMPTS - 1]["attempt"], MAX_ATTEMPTS - 1);
    }

    #[test]
    fn long_strings_are_cut_and_large_fields_left_out() {
        let mut g = Gathered::default();
        let long = "é".repeat(FIELD_CHARS + 10);
        let big: Vec<String> = (0..100).map(|i| format!("{i:0>200}")).collect();
        g.event(json!({"s": long, "nested": {"t": [long]}, "big": big, "n": 1}));
        let e = &g.events[0];
        let s = e["s"].as_str().unwrap();
        assert_eq!(s.chars().count(), FIELD_CHARS + 1);
        assert!(s.ends_with('…'));
        assert_eq!(e["nested"]["t"][0], e["s"]);
        assert!(e["big"]["left_out_bytes"].as_u64().unwrap() > FIELD_BYTES as u64);
        assert_eq!(e["n"], 1);
        assert_eq!(g.fields_cut, 3);
    }

    #[test]
    fn a_record_stays_within_its_bytes() {
        let mut g = Gathered::default();
        let text = "x".repeat(FIELD_CHARS);
        for _ in 0..MAX_EVENTS {
            g.event(json!({"a": text, "b": text, "c": text}));
        }
        let kept: usize = g.events.iter().map(size_of).sum();
        assert!(kept <= RECORD_BYTES, "{kept}");
        assert!(g.events_dropped > 0);
        assert_eq!(g.events.len() as u64 + g.events_dropped, MAX_EVENTS as u64);
    }

    #[test]
    fn values_past_the_depth_become_null() {
        let mut v = json!("leaf");
        for _ in 0..20 {
            v = json!([v]);
        }
        let mut g = Gathered::default();
        g.event(json!({ "deep": v }));
        let text = g.events[0].to_string();
        assert!(!text.contains("leaf") && text.contains("null"), "{text}");
    }
}
