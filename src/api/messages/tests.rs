//! Unit tests of the Messages translator: requests in, whole answers and
//! event streams out (a stream, put together as Anthropic's SDK does,
//! equals the whole rendering of the same answer).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::{Bytes, BytesMut};
use serde_json::{Value, json};

use super::events::Messages;
use super::render::Head;
use super::request::from_object;
use crate::api::error::ApiError;
use crate::api::render::Render;
use crate::model::Chunk;
use crate::sink::Totals;
use crate::wire::UsageField;
use crate::wire::assemble::Assembler;

fn chat(body: Value) -> Value {
    let req = from_object(body.as_object().unwrap()).unwrap();
    serde_json::to_value(&req.chat).unwrap()
}

fn refused(body: Value) -> (Option<String>, String) {
    match from_object(body.as_object().unwrap()) {
        Err(ApiError::BadRequest { param, message, .. }) => (param, message),
        Err(e) => panic!("not a 400: {e}"),
        Ok(_) => panic!("accepted: {body}"),
    }
}

#[test]
fn a_request_becomes_chat() {
    let c = chat(json!({
        "model": "m", "max_tokens": 50, "stream": true,
        "system": [{"type": "text", "text": "one", "cache_control": {"type": "ephemeral"}},
                   {"type": "text", "text": "two"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hm", "signature": "sig"},
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"q": 1}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "42"}]},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "bad", "is_error": true},
                {"type": "text", "text": "and?"}]},
        ],
        "stop_sequences": ["END"], "temperature": 0.3, "top_k": 5,
        "metadata": {"user_id": "u1"},
        "tools": [{"name": "get", "description": "d", "input_schema": {"type": "object", "properties": {}}},
                  {"type": "web_search_20250305", "name": "web_search"}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "thinking": {"type": "enabled", "budget_tokens": 2048},
    }));
    let m = &c["messages"];
    assert_eq!(m[0], json!({"role": "system", "content": "one\n\ntwo"}));
    assert_eq!(
        m[1]["content"][1]["image_url"]["url"],
        "data:image/png;base64,AAAA"
    );
    assert_eq!(m[2]["content"], "calling");
    assert_eq!(m[2]["tool_calls"][0]["function"]["arguments"], r#"{"q":1}"#);
    assert_eq!(m[2]["thinking_blocks"][0]["signature"], "sig");
    assert!(m[2].get("reasoning_content").is_none(), "{m}");
    assert_eq!(
        m[3],
        json!({"role": "tool", "tool_call_id": "toolu_1", "content": "42"})
    );
    assert_eq!(m[4]["content"], "Error: bad");
    assert_eq!(m[5], json!({"role": "user", "content": "and?"}));
    assert_eq!(c["max_tokens"], 50);
    assert_eq!(c["stop"], json!(["END"]));
    assert_eq!(c["user"], "u1");
    assert_eq!(c["tool_choice"], "required");
    assert_eq!(c["parallel_tool_calls"], false);
    assert_eq!(c["reasoning_effort"], "low");
    assert_eq!(c["tools"].as_array().unwrap().len(), 1);
    assert_eq!(c["tools"][0]["function"]["parameters"]["type"], "object");
    assert_eq!(c["stream_options"]["include_usage"], true);
    assert!(c.get("top_k").is_none());
}

#[test]
fn bad_requests_name_the_field() {
    let base = |extra: Value| {
        let mut b =
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let mut no_max = base(json!({}));
    no_max.as_object_mut().unwrap().remove("max_tokens");
    assert_eq!(refused(no_max).0.as_deref(), Some("max_tokens"));
    let bad_role = base(json!({"messages": [{"role": "tool", "content": "x"}]}));
    assert_eq!(refused(bad_role).0.as_deref(), Some("messages.0.role"));
    let bad_block = base(json!({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}));
    assert_eq!(
        refused(bad_block).0.as_deref(),
        Some("messages.0.content.0.type")
    );
    let bad_choice = base(json!({"tool_choice": {"type": "sometimes"}}));
    assert_eq!(refused(bad_choice).0.as_deref(), Some("tool_choice.type"));
    let bad_system = base(json!({"system": 5}));
    assert_eq!(refused(bad_system).0.as_deref(), Some("system"));
}

fn head() -> Head {
    Head {
        id: "msg_0123".into(),
        model: "route".into(),
        input_estimate: 7,
    }
}

fn chunk(v: &Value) -> Chunk {
    Chunk {
        data: Bytes::from(v.to_string()),
        usage: UsageField::Absent,
        usage_at: None,
        choices: 1,
        real: true,
        loading: false,
    }
}

fn events(out: &[u8]) -> Vec<Value> {
    let text = std::str::from_utf8(out).unwrap();
    text.split("\n\n")
        .filter(|b| !b.is_empty())
        .map(|block| {
            let mut lines = block.lines();
            let name = lines.next().unwrap().strip_prefix("event: ").unwrap();
            let data: Value =
                serde_json::from_str(lines.next().unwrap().strip_prefix("data: ").unwrap())
                    .unwrap();
            assert_eq!(data["type"], name);
            data
        })
        .collect()
}

/// Puts a stream's events together as Anthropic's SDK does.
fn accumulate(events: &[Value]) -> Value {
    let mut msg = events[0]["message"].clone();
    let mut partial: Vec<String> = Vec::new();
    for e in &events[1..] {
        let i = e["index"].as_u64().unwrap_or(0) as usize;
        match e["type"].as_str().unwrap() {
            "content_block_start" => {
                msg["content"]
                    .as_array_mut()
                    .unwrap()
                    .push(e["content_block"].clone());
                partial.push(String::new());
            }
            "content_block_delta" => {
                let b = &mut msg["content"][i];
                let d = &e["delta"];
                match d["type"].as_str().unwrap() {
                    "text_delta" => {
                        b["text"] = json!(format!(
                            "{}{}",
                            b["text"].as_str().unwrap(),
                            d["text"].as_str().unwrap()
                        ))
                    }
                    "thinking_delta" => {
                        b["thinking"] = json!(format!(
                            "{}{}",
                            b["thinking"].as_str().unwrap(),
                            d["thinking"].as_str().unwrap()
                        ))
                    }
                    "signature_delta" => b["signature"] = d["signature"].clone(),
                    "input_json_delta" => partial[i].push_str(d["partial_json"].as_str().unwrap()),
                    other => panic!("{other}"),
                }
            }
            "content_block_stop" => {
                if msg["content"][i]["type"] == "tool_use" {
                    msg["content"][i]["input"] = serde_json::from_str(&partial[i]).unwrap();
                }
            }
            "message_delta" => {
                msg["stop_reason"] = e["delta"]["stop_reason"].clone();
                msg["usage"] = e["usage"].clone();
            }
            "message_stop" => {}
            other => panic!("unexpected {other}"),
        }
    }
    msg
}

fn render_both(chunks: &[Value]) -> (Vec<Value>, Value, Value) {
    let mut r = Messages::new(head());
    let mut out = BytesMut::new();
    r.open(&mut out);
    for c in chunks {
        assert!(r.chunk(chunk(c), &mut out).is_ok());
    }
    r.end(Totals::default(), &mut out);
    let evs = events(&out);
    let streamed = accumulate(&evs);
    let mut a = Assembler::default();
    for c in chunks {
        a.add(c.to_string().as_bytes()).unwrap();
    }
    let body = Bytes::from(a.finish().to_string());
    let whole = Messages::new(head())
        .whole(&body, Totals::default())
        .unwrap();
    (evs, streamed, serde_json::from_slice(&whole).unwrap())
}

fn delta(d: Value) -> Value {
    json!({"id": "c", "model": "served", "choices": [{"index": 0, "delta": d}]})
}

#[test]
fn a_stream_puts_together_to_the_whole_message() {
    let chunks = [
        delta(json!({"role": "assistant", "content": ""})),
        delta(json!({"reasoning_content": "think"})),
        delta(
            json!({"thinking_blocks": [{"type": "thinking", "thinking": "", "signature": "SIG"}]}),
        ),
        delta(json!({"content": "Hel"})),
        delta(json!({"content": "lo"})),
        delta(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get", "arguments": "{\"q\""}}]}),
        ),
        delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]})),
        json!({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        json!({"id": "c", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": 3}, "cache_creation_input_tokens": 2}}),
    ];
    let (evs, streamed, whole) = render_both(&chunks);
    let kinds: Vec<&str> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds[0], "message_start");
    assert_eq!(&kinds[kinds.len() - 2..], ["message_delta", "message_stop"]);
    assert_eq!(
        whole["content"][0],
        json!({"type": "thinking", "thinking": "think", "signature": "SIG"})
    );
    assert_eq!(
        whole["content"][1],
        json!({"type": "text", "text": "Hello"})
    );
    assert_eq!(
        whole["content"][2],
        json!({"type": "tool_use", "id": "call_1", "name": "get", "input": {"q": 1}})
    );
    assert_eq!(whole["stop_reason"], "tool_use");
    assert_eq!(
        whole["usage"],
        json!({"input_tokens": 5, "cache_creation_input_tokens": 2, "cache_read_input_tokens": 3, "output_tokens": 4})
    );
    for key in ["content", "stop_reason", "usage", "id"] {
        assert_eq!(streamed[key], whole[key], "{key}");
    }
}

#[test]
fn an_arenas_second_answer_is_a_text_block_of_its_own() {
    let chunks = [
        json!({"id": "c", "arena_id": "arena_1", "choices": [{"index": 0, "delta": {"content": "A"}}, {"index": 1, "delta": {"content": "B"}}]}),
        json!({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}, {"index": 1, "delta": {}, "finish_reason": "stop"}]}),
    ];
    let (evs, streamed, whole) = render_both(&chunks);
    assert_eq!(
        whole["content"],
        json!([{"type": "text", "text": "A"}, {"type": "text", "text": "B"}])
    );
    assert_eq!(streamed["content"], whole["content"]);
    assert_eq!(whole["arena_id"], "arena_1");
    let delta = evs.iter().find(|e| e["type"] == "message_delta").unwrap();
    assert_eq!(delta["arena_id"], "arena_1");
}

#[test]
fn keepalives_are_pings_and_errors_are_anthropic_error_events() {
    let mut r = Messages::new(head());
    let mut out = BytesMut::new();
    r.open(&mut out);
    assert!(out.is_empty(), "message_start waits for the answer's model");
    // A keep-alive before any chunk: no model has answered yet, so
    // `message_start` names the one asked for, and pings follow it.
    r.keepalive(&mut out);
    r.keepalive(&mut out);
    r.fail(&ApiError::ServerBusy, &mut out);
    let evs = events(&out);
    assert_eq!(evs[0]["type"], "message_start");
    assert_eq!(evs[0]["message"]["model"], "route");
    assert_eq!(evs[1], json!({"type": "ping"}));
    assert_eq!(evs[2], json!({"type": "ping"}));
    assert_eq!(evs[3]["error"]["type"], "overloaded_error");
    assert_eq!(evs.len(), 4);

    // Without keep-alives, `message_start` comes with the first chunk and
    // names the model that answered.
    let mut r = Messages::new(head());
    let mut out = BytesMut::new();
    r.open(&mut out);
    let first = chunk(&json!({"model": "served-7b", "choices": []}));
    assert!(r.chunk(first, &mut out).is_ok());
    r.keepalive(&mut out);
    let evs = events(&out);
    assert_eq!(evs[0]["message"]["model"], "served-7b");
    assert_eq!(evs[1], json!({"type": "ping"}));
}
