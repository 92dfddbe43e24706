use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn content(kind: u8) -> Value {
    match kind % 7 {
        0 => Value::Null,
        1 => json!(""),
        2 => json!("  \n"),
        3 => json!("some text "),
        4 => json!([{"type": "text", "text": ""}]),
        5 => json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
        _ => json!([{"type": "text", "text": "cached", "cache_control": {"type": "ephemeral"}}]),
    }
}

/// One chat message from three small numbers.
fn message(role: u8, kind: u8, extra: u8) -> Value {
    match role % 5 {
        0 => json!({"role": "system", "content": content(kind)}),
        1 => json!({"role": "developer", "content": content(kind)}),
        2 => json!({"role": "user", "content": content(kind)}),
        3 => {
            let calls: Vec<Value> = (0..extra % 3)
                .map(|i| {
                    json!({"id": format!("call {i}"), "type": "function",
                                "function": {"name": "f", "arguments": "{\"x\":1}"}})
                })
                .collect();
            let mut m = json!({"role": "assistant", "content": content(kind)});
            if !calls.is_empty() {
                m["tool_calls"] = calls.into();
            }
            if extra % 2 == 1 {
                m["thinking_blocks"] =
                    json!([{"type": "thinking", "thinking": "t", "signature": "s"}]);
            }
            m
        }
        _ => {
            json!({"role": "tool", "tool_call_id": format!("call {}", extra % 3), "content": content(kind)})
        }
    }
}

fn kinds(content: &Value) -> Vec<String> {
    match content {
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| b["type"].as_str().unwrap_or("?").to_owned())
            .collect(),
        _ => vec!["string".to_owned()],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_chat_conversation_translates_to_strict_user_first_alternation(
        seq in proptest::collection::vec((0u8..5, 0u8..7, 0u8..6), 0..24)
    ) {
        let messages: Vec<Value> = seq.iter().map(|&(r, k, e)| message(r, k, e)).collect();
        let (m, _) = req(chat(Value::Array(messages), json!({})));
        let list = m["messages"].as_array().unwrap();
        prop_assert!(!list.is_empty());
        prop_assert_eq!(&list[0]["role"], "user");
        for pair in list.windows(2) {
            prop_assert_ne!(&pair[0]["role"], &pair[1]["role"]);
        }
        for (i, turn) in list.iter().enumerate() {
            let c = &turn["content"];
            match c {
                Value::String(s) => prop_assert!(!s.is_empty()),
                Value::Array(blocks) => {
                    prop_assert!(!blocks.is_empty());
                    for b in blocks {
                        if b["type"] == "text" {
                            prop_assert!(!b["text"].as_str().unwrap_or("").is_empty());
                        }
                    }
                }
                other => prop_assert!(false, "content is {other}"),
            }
            // The blocks that must lead a turn do.
            let lead: &[&str] = if turn["role"] == "user" { &["tool_result"] } else { &["thinking", "redacted_thinking"] };
            let k = kinds(c);
            let firsts = k.iter().take_while(|k| lead.contains(&k.as_str())).count();
            prop_assert_eq!(firsts, k.iter().filter(|k| lead.contains(&k.as_str())).count());
            // A final prefill never ends in whitespace.
            if i + 1 == list.len() && turn["role"] == "assistant" {
                let last_text = match c {
                    Value::String(s) => Some(s.as_str()),
                    Value::Array(b) => b.last().and_then(|b| b["text"].as_str()),
                    _ => None,
                };
                if let Some(t) = last_text {
                    prop_assert_eq!(t, t.trim_end());
                }
            }
        }
        if let Some(system) = m.get("system") {
            prop_assert!(system.as_array().is_some_and(|s| !s.is_empty()));
        }
    }

    #[test]
    fn arbitrary_event_sequences_never_panic(
        seq in proptest::collection::vec((0u8..10, 0u64..4, 0u8..8, ".{0,6}"), 0..40)
    ) {
        let names = ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                     "message_delta", "message_stop", "ping", "error", "mystery", ""];
        let blocks = ["text", "tool_use", "thinking", "redacted_thinking", "server_tool_use", "", "json_response", "x"];
        let deltas = ["text_delta", "input_json_delta", "thinking_delta", "signature_delta", "citations_delta", "", "x", "y"];
        let t = Translation { stream: true, include_usage: true, json_tool: Some(JSON_TOOL.into()) };
        let mut maker = ChunkMaker::new(&t, 1);
        for (n, index, b, text) in seq {
            let name = names[n as usize];
            let data = json!({
                "type": name, "index": index,
                "message": {"id": text, "model": text, "usage": {"input_tokens": index}},
                "content_block": {"type": blocks[b as usize], "name": blocks[b as usize], "id": text, "text": text},
                "delta": {"type": deltas[b as usize], "text": text, "partial_json": text, "thinking": text,
                          "signature": text, "stop_reason": text},
                "usage": {"output_tokens": index},
                "error": {"type": text, "message": text},
            });
            if let Ok(chunks) = maker.event(name, data.to_string().as_bytes()) {
                for c in chunks {
                    prop_assert_eq!(&c["object"], "chat.completion.chunk");
                }
            }
        }
    }
}
