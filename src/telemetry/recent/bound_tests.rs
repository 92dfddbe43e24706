use std::time::UNIX_EPOCH;

use super::*;
use crate::telemetry::attempt::AttemptEvent;

fn attempt(n: u32, text: &str) -> Event {
    let body = EventBody::Attempt(Box::new(AttemptEvent::longest(n, text)));
    Event::of("id".into(), "route".into(), "attempt", body, UNIX_EPOCH)
}

/// The same line kept as its own fields.
fn own(n: u32, text: &str) -> AttemptLine {
    AttemptLine::Own(Box::new(AttemptEvent::longest(n, text)), UNIX_EPOCH)
}

fn head() -> usize {
    head_len("id", "route")
}

fn route() -> Arc<str> {
    "route".into()
}

fn fields(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

#[test]
fn lines_past_the_counts_are_dropped_and_counted() {
    let mut g = Gathered::default();
    for i in 0..MAX_ATTEMPTS + 3 {
        let line = if i % 2 == 0 {
            own(i as u32, "")
        } else {
            AttemptLine::Shared(Arc::new(attempt(i as u32, "")))
        };
        let _ = g.attempt(line, head());
    }
    for i in 0..MAX_EVENTS + 2 {
        g.event(fields(json!({"event": "x", "n": i})));
    }
    let attempts = g.attempts("id", &route());
    assert_eq!((attempts.len(), g.attempts_dropped), (MAX_ATTEMPTS, 3));
    // Both kinds read as the log writes the line.
    let logged = serde_json::to_value(attempt(0, "")).unwrap();
    assert_eq!(attempts[0], logged);
    assert_eq!((g.events().len(), g.events_dropped), (MAX_EVENTS, 2));
    assert_eq!(attempts[MAX_ATTEMPTS - 1]["attempt"], MAX_ATTEMPTS - 1);
    // Every attempt's price counts, kept or dropped.
    let each = -1.234_567_890_123_456_7e-300;
    let want = each * (MAX_ATTEMPTS + 3) as f64;
    let have = g.cost_usd.unwrap();
    assert!(((have - want) / want).abs() < 1e-12, "{have} {want}");
}

#[test]
fn long_strings_are_cut_and_large_fields_left_out() {
    let mut g = Gathered::default();
    let long = "é".repeat(FIELD_CHARS + 10);
    let big: Vec<String> = (0..100).map(|i| format!("{i:0>200}")).collect();
    g.event(fields(
        json!({"s": long, "nested": {"t": [long]}, "big": big, "n": 1}),
    ));
    let events = g.events();
    let e = &events[0];
    let s = e["s"].as_str().unwrap();
    assert_eq!(s.chars().count(), FIELD_CHARS + 1);
    assert!(s.ends_with('…'));
    assert_eq!(e["nested"]["t"][0], e["s"]);
    assert!(e["big"]["left_out_bytes"].as_u64().unwrap() > FIELD_BYTES as u64);
    assert_eq!(e["n"], 1);
    assert_eq!(g.fields_cut, 3);
}

#[test]
fn an_attempts_long_texts_are_cut_in_a_copy() {
    let long = "é".repeat(FIELD_CHARS + 1);
    let full = AttemptEvent::longest(1, &long);
    assert!(too_long(&full));
    assert!(!too_long(&AttemptEvent::longest(
        1,
        &"é".repeat(FIELD_CHARS)
    )));
    let mut copy = full.clone();
    // feedback, error and summary; the names are the config's.
    assert_eq!(cut(&mut copy), 3);
    let v = serde_json::to_value(&copy).unwrap();
    let s = v["feedback"].as_str().unwrap();
    assert_eq!(s.chars().count(), FIELD_CHARS + 1);
    assert!(s.ends_with('…'));
    assert_eq!(v["error"], v["feedback"]);
    assert_eq!(v["output_summary"], v["feedback"]);
    let whole = serde_json::to_value(&full).unwrap();
    assert_eq!(whole["feedback"].as_str().unwrap(), long);
}

#[test]
fn an_attempts_estimate_is_never_under_its_size() {
    for text in [
        "",
        "plain",
        "\"quoted\\\"",
        "\u{1}\u{2}\n\t",
        &"\u{7}".repeat(300),
    ] {
        let line = attempt(u32::MAX, text);
        let size = serde_json::to_vec(&line).unwrap().len();
        let est = estimate(&AttemptEvent::longest(u32::MAX, text), head());
        assert!(est >= size, "{text:?}: {est} < {size}");
        assert!(est < size + ATTEMPT_FIXED, "{text:?}: {est} vs {size}");
    }
}

#[test]
fn a_record_stays_within_its_bytes() {
    let mut g = Gathered::default();
    let text = "x".repeat(FIELD_CHARS);
    for _ in 0..MAX_EVENTS {
        g.event(fields(json!({"a": text, "b": text, "c": text})));
    }
    let kept: usize = g.events().iter().map(size_of).sum();
    assert!(kept <= RECORD_BYTES, "{kept}");
    assert!(g.events_dropped > 0);
    assert_eq!(
        g.events().len() as u64 + g.events_dropped,
        MAX_EVENTS as u64
    );

    let mut g = Gathered::default();
    for i in 0..MAX_ATTEMPTS {
        let _ = g.attempt(own(i as u32, &text), head());
    }
    let kept: usize = g.attempts("id", &route()).iter().map(size_of).sum();
    assert!(kept <= RECORD_BYTES, "{kept}");
    assert!(g.attempts_dropped > 0);
}

#[test]
fn values_past_the_depth_become_null() {
    let mut v = json!("leaf");
    for _ in 0..20 {
        v = json!([v]);
    }
    let mut g = Gathered::default();
    g.event(fields(json!({ "deep": v })));
    let text = g.events()[0].to_string();
    assert!(!text.contains("leaf") && text.contains("null"), "{text}");
}

#[test]
fn a_texts_json_length_is_what_serializing_it_takes() {
    let specials = [
        '"', '\\', '\n', '\t', '\u{0}', '\u{1f}', '\u{7f}', 'é', ' ', '!', '#', '[',
    ];
    for len in 0..20 {
        for at in 0..len {
            for c in specials {
                let mut s: String = "a".repeat(len);
                s.replace_range(at..at + 1, c.encode_utf8(&mut [0; 4]));
                let want = serde_json::to_string(&s).unwrap().len();
                assert_eq!(json_len(&s), want, "{s:?}");
            }
        }
    }
}
