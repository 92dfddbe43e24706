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
