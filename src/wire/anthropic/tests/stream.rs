use serde_json::{Value, json};

use super::*;

/// A Messages stream as Anthropic's docs show it (thinking with its
/// signature, text, a tool call with `input_json_delta`s, a ping).
const DOCS_STREAM: &str = r#"event: message_start
data: {"type": "message_start", "message": {"id": "msg_01...", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 472, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20, "output_tokens": 2}}}

event: content_block_start
data: {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "I need to find the GCD of 1071 and 462"}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": " using the Euclidean algorithm."}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}

event: content_block_stop
data: {"type": "content_block_stop", "index": 0}

event: content_block_start
data: {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Okay, let's check the weather"}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": " for San Francisco, CA:"}}

event: content_block_stop
data: {"type": "content_block_stop", "index": 1}

event: content_block_start
data: {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "get_weather", "input": {}}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"location\":"}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": " \"San Francisco, CA\", "}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "\"unit\": \"fahrenheit\"}"}}

event: content_block_stop
data: {"type": "content_block_stop", "index": 2}

event: message_delta
data: {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 89}}

event: message_stop
data: {"type": "message_stop"}
"#;

/// (event name, data) of each SSE event.
fn events(sse: &str) -> Vec<(String, String)> {
    sse.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = String::new();
            let mut data = String::new();
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = d.to_owned();
                }
            }
            (name, data)
        })
        .collect()
}

fn run(t: &Translation, sse: &str) -> (Vec<Value>, ChunkMaker) {
    let mut maker = ChunkMaker::new(t, 7);
    let mut chunks = Vec::new();
    for (name, data) in events(sse) {
        chunks.extend(maker.event(&name, data.as_bytes()).unwrap());
    }
    (chunks, maker)
}

/// What a client assembles: content, reasoning, tool calls by index
/// (id, name, arguments), thinking blocks, finish reason.
#[derive(Debug, Default)]
struct Assembled {
    content: String,
    reasoning: String,
    calls: Vec<(String, String, String)>,
    thinking_blocks: Vec<Value>,
    finish: Vec<String>,
}

fn assemble(chunks: &[Value]) -> Assembled {
    let mut a = Assembled::default();
    for c in chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["created"], 7);
        let Some(choice) = c["choices"].get(0) else {
            continue;
        };
        let d = &choice["delta"];
        a.content.push_str(d["content"].as_str().unwrap_or(""));
        a.reasoning
            .push_str(d["reasoning_content"].as_str().unwrap_or(""));
        for call in d["tool_calls"].as_array().into_iter().flatten() {
            let i = call["index"].as_u64().unwrap() as usize;
            if i == a.calls.len() {
                a.calls.push(Default::default());
            }
            let slot = &mut a.calls[i];
            if let Some(id) = call["id"].as_str() {
                slot.0 = id.to_owned();
            }
            if let Some(n) = call["function"]["name"].as_str() {
                slot.1 = n.to_owned();
            }
            slot.2
                .push_str(call["function"]["arguments"].as_str().unwrap_or(""));
        }
        a.thinking_blocks.extend(
            d["thinking_blocks"]
                .as_array()
                .into_iter()
                .flatten()
                .cloned(),
        );
        if let Some(f) = choice["finish_reason"].as_str() {
            a.finish.push(f.to_owned());
        }
    }
    a
}

#[test]
fn the_docs_stream_becomes_chat_chunks() {
    let t = Translation {
        stream: true,
        include_usage: true,
        json_tool: None,
    };
    let (chunks, maker) = run(&t, DOCS_STREAM);
    assert!(maker.started() && maker.ended());
    for c in &chunks {
        assert_eq!(
            (c["id"].as_str(), c["model"].as_str()),
            (Some("msg_01..."), Some("claude-sonnet-4-5"))
        );
    }
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    let a = assemble(&chunks);
    assert_eq!(
        a.content,
        "Okay, let's check the weather for San Francisco, CA:"
    );
    assert_eq!(
        a.reasoning,
        "I need to find the GCD of 1071 and 462 using the Euclidean algorithm."
    );
    assert_eq!(
        a.thinking_blocks,
        [json!({"type": "thinking", "thinking": a.reasoning,
                "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"})]
    );
    assert_eq!(a.calls.len(), 1, "the tool is call 0 though it is block 2");
    assert_eq!(
        (a.calls[0].0.as_str(), a.calls[0].1.as_str()),
        ("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather")
    );
    let args: Value = serde_json::from_str(&a.calls[0].2).unwrap();
    assert_eq!(
        args,
        json!({"location": "San Francisco, CA", "unit": "fahrenheit"})
    );
    assert_eq!(a.finish, ["tool_calls"]);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(
        last["usage"],
        json!({"prompt_tokens": 592, "completion_tokens": 89, "total_tokens": 681,
               "prompt_tokens_details": {"cached_tokens": 100},
               "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20})
    );
    // No chunk is empty noise: the empty partial_json made none.
    let empty_args = chunks
        .iter()
        .filter(|c| {
            c.pointer("/choices/0/delta/tool_calls/0/function/arguments") == Some(&json!(""))
                && c.pointer("/choices/0/delta/tool_calls/0/id").is_none()
        })
        .count();
    assert_eq!(empty_args, 0);
}

#[test]
fn without_include_usage_there_is_no_usage_chunk_and_events_after_the_end_are_ignored() {
    let (chunks, mut maker) = run(
        &Translation {
            stream: true,
            ..Translation::default()
        },
        DOCS_STREAM,
    );
    assert!(
        chunks
            .iter()
            .all(|c| c.get("usage").is_none()
                && c["choices"].as_array().is_some_and(|c| c.len() == 1))
    );
    assert_eq!(maker.usage()["completion_tokens"], 89);
    assert!(
        maker
            .event("", br#"{"type":"content_block_start","index":9}"#)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_stream_not_yet_stopped_has_not_ended() {
    let cut = DOCS_STREAM.split("event: message_delta").next().unwrap();
    let (chunks, maker) = run(&Translation::default(), cut);
    assert!(maker.started() && !maker.ended());
    assert!(assemble(&chunks).finish.is_empty());
}

#[test]
fn an_error_event_is_a_fault_with_its_type() {
    let mut maker = ChunkMaker::new(&Translation::default(), 0);
    let start = events(DOCS_STREAM).remove(0).1;
    maker.event("message_start", start.as_bytes()).unwrap();
    let err = maker
        .event(
            "error",
            br#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
        )
        .unwrap_err();
    match err {
        StreamFault::Upstream { kind, message } => assert_eq!(
            (kind.as_str(), message.as_str()),
            ("overloaded_error", "Overloaded")
        ),
        other => panic!("{other:?}"),
    }
    // A type that is not a word is not repeated; a long message is cut.
    let long = "é".repeat(5000);
    let data =
        json!({"type": "error", "error": {"type": "bad type!", "message": long}}).to_string();
    match maker.event("", data.as_bytes()).unwrap_err() {
        StreamFault::Upstream { kind, message } => {
            assert_eq!(kind, "error");
            assert!(message.len() <= 1024 && message.starts_with('é'));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn garbage_and_disorder_are_faults_and_unknown_events_are_ignored() {
    let mut maker = ChunkMaker::new(&Translation::default(), 0);
    assert!(matches!(
        maker.event("x", b"not json"),
        Err(StreamFault::Garbage(_))
    ));
    assert!(matches!(
        maker.event("x", b"[1]"),
        Err(StreamFault::Garbage(_))
    ));
    assert!(matches!(
        maker.event(
            "",
            br#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}"#
        ),
        Err(StreamFault::Malformed(_))
    ));
    assert!(
        maker.event("ping", b"{}").unwrap().is_empty(),
        "the SSE name serves when data has no type"
    );
    assert!(
        maker
            .event("", br#"{"type":"brand_new_event","stuff":1}"#)
            .unwrap()
            .is_empty()
    );
    let start =
        r#"{"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":1}}}"#;
    assert_eq!(maker.event("", start.as_bytes()).unwrap().len(), 1);
    assert!(matches!(
        maker.event("", start.as_bytes()),
        Err(StreamFault::Malformed(_))
    ));
    assert!(matches!(
        maker.event(
            "",
            br#"{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"x"}}"#
        ),
        Err(StreamFault::Malformed(_))
    ));
    assert!(matches!(
        maker.event("", br#"{"type":"content_block_stop","index":3}"#),
        Err(StreamFault::Malformed(_))
    ));
    let open =
        br#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#;
    maker.event("", open).unwrap();
    assert!(matches!(
        maker.event("", open),
        Err(StreamFault::Malformed(_))
    ));
    // A delta of an unknown type (citations) is nothing.
    let cite = br#"{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{}}}"#;
    assert!(maker.event("", cite).unwrap().is_empty());
}

#[test]
fn open_blocks_and_tool_calls_are_bounded() {
    let mut maker = ChunkMaker::new(&Translation::default(), 0);
    maker
        .event("", br#"{"type":"message_start","message":{"id":"m"}}"#)
        .unwrap();
    let mut fault = None;
    for i in 0..=MAX_BLOCKS as u64 {
        let e = json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}});
        if let Err(f) = maker.event("", e.to_string().as_bytes()) {
            fault = Some((i, f));
            break;
        }
    }
    assert!(matches!(fault, Some((i, StreamFault::Malformed(_))) if i == MAX_BLOCKS as u64));

    let mut maker = ChunkMaker::new(&Translation::default(), 0);
    maker
        .event("", br#"{"type":"message_start","message":{"id":"m"}}"#)
        .unwrap();
    let mut calls = 0;
    for i in 0..1000u64 {
        let start = json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": "t", "name": "f"}});
        if maker.event("", start.to_string().as_bytes()).is_err() {
            break;
        }
        calls += 1;
        let stop = json!({"type": "content_block_stop", "index": i});
        maker.event("", stop.to_string().as_bytes()).unwrap();
    }
    assert_eq!(calls, crate::wire::MAX_TOOL_CALLS);
}

#[test]
fn a_tool_call_without_input_gets_empty_object_arguments() {
    let sse = r#"event: message_start
data: {"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":3,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"now","input":{}}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":5}}

event: message_stop
data: {"type":"message_stop"}
"#;
    let (chunks, _) = run(&Translation::default(), sse);
    let a = assemble(&chunks);
    assert_eq!(
        a.calls,
        [("toolu_1".to_owned(), "now".to_owned(), "{}".to_owned())]
    );
    assert_eq!(a.finish, ["tool_calls"]);
}

#[test]
fn the_json_tool_streams_as_content_and_finishes_with_stop() {
    let sse = r#"event: message_start
data: {"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":3,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"json_response","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"n\": "}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"42}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}

event: message_stop
data: {"type":"message_stop"}
"#;
    let t = Translation {
        stream: true,
        include_usage: false,
        json_tool: Some(JSON_TOOL.into()),
    };
    let (chunks, _) = run(&t, sse);
    let a = assemble(&chunks);
    assert_eq!(a.content, "{\"n\": 42}");
    assert!(a.calls.is_empty());
    assert_eq!(a.finish, ["stop"]);
}

#[test]
fn a_stop_without_message_delta_still_finishes_once() {
    let sse = r#"event: message_start
data: {"type":"message_start","message":{"id":"m","model":"c"}}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":1}}

event: message_stop
data: {"type":"message_stop"}
"#;
    let (chunks, maker) = run(&Translation::default(), sse);
    assert_eq!(assemble(&chunks).finish, ["stop"]);
    assert!(maker.ended());
    // max_tokens → length, refusal → content_filter, once each.
    for (reason, want) in [("max_tokens", "length"), ("refusal", "content_filter")] {
        let d = format!(r#"{{"type":"message_delta","delta":{{"stop_reason":"{reason}"}}}}"#);
        let sse = sse.replace(
            r#"{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":1}}"#,
            &d,
        );
        assert_eq!(
            assemble(&run(&Translation::default(), &sse).0).finish,
            [want]
        );
    }
}

#[test]
fn a_redacted_thinking_block_is_passed_on_whole() {
    let sse = r#"event: message_start
data: {"type":"message_start","message":{"id":"m","model":"c"}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"EmwKAhgB"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}
"#;
    let (chunks, _) = run(&Translation::default(), sse);
    assert_eq!(
        assemble(&chunks).thinking_blocks,
        [json!({"type": "redacted_thinking", "data": "EmwKAhgB"})]
    );
}
