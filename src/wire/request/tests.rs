use super::*;
use serde_json::json;

#[test]
fn unknown_fields_round_trip_in_order() {
    let raw = r#"{"model":"m","zeta":1,"messages":[{"role":"user","content":null,"x_weird":[1,2]}],"alpha":{"b":true},"stream":true}"#;
    let req: ChatRequest = serde_json::from_str(raw).unwrap_or_else(|e| unreachable!("{e}"));
    let v: Value = serde_json::to_value(&req).unwrap_or_default();
    assert_eq!(v["zeta"], 1);
    assert_eq!(v["alpha"]["b"], true);
    assert_eq!(v["messages"][0]["content"], Value::Null);
    assert_eq!(v["messages"][0]["x_weird"][1], 2);
    let body = req.to_upstream_body("real").unwrap_or_default();
    let up: Value = serde_json::from_slice(&body).unwrap_or_default();
    assert_eq!(up["model"], "real");
    assert_eq!(up["stream_options"]["include_usage"], true);
}

#[test]
fn text_is_measured_one_way_for_every_shape() {
    assert_eq!(text_len(&json!("four")), 4);
    assert_eq!(text_len(&json!(["ab", "cde"])), 5);
    assert_eq!(
        text_len(&json!([{"type": "text", "text": "abc"}, {"type": "image_url"}])),
        3
    );
    assert_eq!(text_len(&json!([1, 2, 3])), 0);
    assert_eq!(text_len(&json!(null)), 0);
}

#[test]
fn floats_reach_the_upstream_exactly() {
    let raw =
        r#"{"model":"m","messages":[{"role":"user","content":[2.0860424783616484e-234]}],"x":0.1}"#;
    let req: ChatRequest = serde_json::from_str(raw).unwrap_or_else(|e| unreachable!("{e}"));
    let body = req.to_upstream_body("m").unwrap_or_default();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("2.0860424783616484e-234"), "{text}");
    assert!(text.contains("\"x\":0.1"), "{text}");
}

/// A usage detail is a count only when it is a non-negative integer;
/// anything else there (of any shape, nested or not) reads as none and
/// leaves the rest of the usage read.
#[test]
fn usage_details_that_are_not_counts_read_as_none() {
    for odd in [
        json!(-3),
        json!(2.5),
        json!("12"),
        json!(true),
        json!(null),
        json!([1, [2]]),
        json!({"n": {"m": 1}}),
    ] {
        let u: Usage = serde_json::from_value(json!({
            "prompt_tokens": 9, "completion_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": odd, "audio_tokens": 1},
            "completion_tokens_details": {"reasoning_tokens": 3},
            "cache_creation_input_tokens": odd,
        }))
        .unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
            (9, 4, 0),
            "{odd}"
        );
        assert_eq!((u.reasoning_tokens, u.cache_write_tokens), (3, 0), "{odd}");
    }
    let u: Usage = serde_json::from_str(
        r#"{"input_tokens":7,"output_tokens":2,"cache_creation_input_tokens":5,
            "input_tokens_details":{"cached_tokens":6}}"#,
    )
    .unwrap();
    assert_eq!(
        (u.prompt_tokens, u.cached_tokens, u.cache_write_tokens),
        (7, 6, 5)
    );
}
