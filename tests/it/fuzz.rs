//! Property-based fuzzing on stable Rust (`proptest`) of the three parsers
//! that read outside input: the chat request parser, the upstream SSE
//! parser and the config loader. The test command runs a bounded number of
//! cases (`PROPTEST_CASES`, default 256); `benches/fuzz.sh` runs many more.
//! A failure found here becomes a regression case in the unit tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use conclave::api::parse_chat_request;
use conclave::upstream::sse::SseParser;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Arbitrary JSON, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,20}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn request_parser_never_panics_on_bytes(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_chat_request(&body);
    }

    #[test]
    fn request_parser_never_panics_on_json(v in json_value()) {
        let _ = parse_chat_request(v.to_string().as_bytes());
    }

    /// Fields conclave does not read pass through unchanged, in any shape.
    #[test]
    fn unknown_request_fields_reach_the_upstream(
        extra in prop::collection::btree_map("x_[a-z]{1,8}", json_value(), 0..6),
        content in json_value(),
        stream in any::<bool>(),
    ) {
        let mut body = Map::new();
        body.insert("model".into(), json!("m"));
        body.insert("messages".into(), json!([{"role": "user", "content": content}]));
        body.insert("stream".into(), json!(stream));
        for (k, v) in &extra {
            body.insert(k.clone(), v.clone());
        }
        let req = parse_chat_request(Value::Object(body).to_string().as_bytes()).unwrap();
        let sent: Value = serde_json::from_slice(&req.to_upstream_body("real").unwrap()).unwrap();
        prop_assert_eq!(&sent["model"], "real");
        prop_assert_eq!(&sent["messages"][0]["content"], &content);
        for (k, v) in &extra {
            prop_assert_eq!(&sent[k], v);
        }
    }

    /// However the bytes are split, the same events come out.
    #[test]
    fn sse_events_survive_any_split(
        events in prop::collection::vec("[^\r\n]{0,40}", 1..8),
        crlf in any::<bool>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let eol = if crlf { "\r\n" } else { "\n" };
        let wire: String = events.iter().map(|e| format!("data: {e}{eol}{eol}")).collect();
        let bytes = wire.as_bytes();
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut parser = SseParser::new(1 << 16);
        let mut got = Vec::new();
        let mut from = 0;
        for at in points.into_iter().chain([bytes.len()]) {
            parser.push(bytes::Bytes::copy_from_slice(&bytes[from..at.max(from)]));
            from = at.max(from);
            while let Some(e) = parser.next_event().unwrap() {
                got.push(String::from_utf8(e.to_vec()).unwrap());
            }
        }
        // `data: x` strips exactly the one space after the colon.
        prop_assert_eq!(got, events);
    }

    /// Arbitrary bytes never panic and never exceed the bound.
    #[test]
    fn sse_parser_is_bounded_on_any_input(
        parts in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), 0..20),
    ) {
        let mut parser = SseParser::new(256);
        for p in parts {
            parser.push(p.into());
            loop {
                match parser.next_event() {
                    Ok(Some(e)) => prop_assert!(e.len() <= 256),
                    Ok(None) => break,
                    Err(_) => return Ok(()),
                }
            }
        }
    }

    #[test]
    fn config_loader_never_panics_on_text(text in "(?s).{0,400}") {
        let _ = conclave::config::parse(&text, "fuzz.toml", &|_| None, &conclave::strategy::ALL);
    }

    /// A real config with one value replaced by something else: every
    /// error names a key path and says what is wrong.
    #[test]
    fn config_loader_reports_broken_values(
        line in any::<prop::sample::Index>(),
        value in prop_oneof![
            Just("\"\"".to_owned()), Just("0".to_owned()), Just("-1".to_owned()),
            Just("[]".to_owned()), Just("{}".to_owned()), Just("true".to_owned()),
            "\"[a-z0-9 :/.]{0,12}\"", "-?[0-9]{1,12}",
        ],
    ) {
        let demo = include_str!("../../config/demo.toml");
        let lines: Vec<&str> = demo.lines().collect();
        let i = line.index(lines.len());
        let mut out: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
        if let Some((key, _)) = lines[i].split_once(" = ") {
            out[i] = format!("{key} = {value}");
        }
        if let Err(e) = conclave::config::parse(&out.join("\n"), "fuzz.toml", &|_| None, &conclave::strategy::ALL) {
            for err in &e.errors {
                prop_assert!(!err.message.is_empty());
            }
        }
    }
}
